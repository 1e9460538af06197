// modules/golden/check.hpp — running a golden case, and comparing with what PyTorch returned.
//
// Builds the module a case describes, runs every variant (packed, and separate after
// splitting), and compares each expected tensor within the case's tolerance
// |got - expected| <= atol + rtol * |expected|, NaN equal to NaN; in a version-2 case,
// every gradient too, within the case's backward tolerance. It is the engine of the
// mha-golden tool and of the golden tests; check_case never throws, so that one broken
// case is one FAIL line.
//
// Included by modules/golden.cppm, in its module purview: no module line of its own.
// Uses mha, cases.hpp.

export namespace mha {

// The module the case describes, with its parameters loaded (strictly: every name must
// be one the module has, and every one it has must be there).
template <class T>
MultiheadAttention<T> make_module(const Case<T>& c) {
  Options options = c.info.options;
  options.separate_projections = !c.parameters.contains("in_proj_weight");
  options.pytorch = c.info.version;  // the generation of PyTorch that made the case
  MultiheadAttention<T> module(options);
  module.load_state_dict(c.parameters);
  module.train(c.info.training);
  return module;
}

// Every variant the case can run: packed and separate after splitting, or separate only.
template <class T>
std::vector<std::pair<std::string, MultiheadAttention<T>>> variants(const Case<T>& c) {
  auto module = make_module(c);
  std::vector<std::pair<std::string, MultiheadAttention<T>>> out;
  if (module.packed()) out.emplace_back("separate", module.to_separate());
  out.emplace(out.begin(), module.packed() ? "packed" : "separate", std::move(module));
  return out;
}

// forward() on the case's inputs, passing the same object where PyTorch was given one
// (`query is key is value`, or `key is value`).
template <class T>
Output<T> run_forward(MultiheadAttention<T>& module, const Case<T>& c) {
  if (c.info.query_is_key && c.info.key_is_value) return module.forward(c.query, c.query, c.query, c.forward);
  if (c.info.key_is_value) return module.forward(c.query, c.key, c.key, c.forward);
  return module.forward(c.query, c.key, c.value, c.forward);
}

// in_projection() on the case's inputs, passed as run_forward passes them.
template <class T>
textbook::QKV<T> run_in_projection(const MultiheadAttention<T>& module, const Case<T>& c) {
  if (c.info.query_is_key && c.info.key_is_value) return module.in_projection(c.query, c.query, c.query);
  if (c.info.key_is_value) return module.in_projection(c.query, c.key, c.key);
  return module.in_projection(c.query, c.key, c.value);
}

// forward_for_backward() on the case's inputs, passed as run_forward passes them.
template <class T>
std::pair<Output<T>, ForwardRecord<T>> run_forward_for_backward(MultiheadAttention<T>& module, const Case<T>& c) {
  if (c.info.query_is_key && c.info.key_is_value)
    return module.forward_for_backward(c.query, c.query, c.query, c.forward);
  if (c.info.key_is_value) return module.forward_for_backward(c.query, c.key, c.key, c.forward);
  return module.forward_for_backward(c.query, c.key, c.value, c.forward);
}

// ---- version 3: a call of F.multi_head_attention_forward ------------------------------

// The call a version-3 case records: every tensor argument a pointer into the case (None
// where the case has no file), every other argument from case.json.
template <class T>
FunctionalArguments<T> functional_arguments(const Case<T>& c) {
  const FunctionalCall& f = c.info.functional;
  auto tensor = [&c](const char* name) -> const xt::xarray<T>* {
    const auto it = c.parameters.find(name);
    return it == c.parameters.end() ? nullptr : &it->second;
  };
  auto mask = [](const std::optional<Mask<T>>& m) { return m ? &*m : nullptr; };
  return {.embed_dim_to_check = f.embed_dim_to_check,
          .num_heads = f.num_heads,
          .in_proj_weight = tensor("in_proj_weight"),
          .in_proj_bias = tensor("in_proj_bias"),
          .bias_k = tensor("bias_k"),
          .bias_v = tensor("bias_v"),
          .add_zero_attn = f.add_zero_attn,
          .dropout_p = f.dropout_p,
          .out_proj_weight = tensor("out_proj_weight"),
          .out_proj_bias = tensor("out_proj_bias"),
          .training = f.training,
          .key_padding_mask = mask(c.forward.key_padding_mask),
          .need_weights = f.need_weights,
          .attn_mask = mask(c.forward.attn_mask),
          .use_separate_proj_weight = f.use_separate_proj_weight,
          .q_proj_weight = tensor("q_proj_weight"),
          .k_proj_weight = tensor("k_proj_weight"),
          .v_proj_weight = tensor("v_proj_weight"),
          .static_k = tensor("static_k"),
          .static_v = tensor("static_v"),
          .average_attn_weights = f.average_attn_weights,
          .pytorch = c.info.version};
}

// F.multi_head_attention_forward on the case's inputs through `path`, passing the same
// object where PyTorch was given one.
template <class T>
Output<T> run_functional(const Case<T>& c, AttentionPath path) {
  const auto args = functional_arguments(c);
  if (c.info.query_is_key && c.info.key_is_value)
    return multi_head_attention_forward(c.query, c.query, c.query, args, path);
  if (c.info.key_is_value) return multi_head_attention_forward(c.query, c.key, c.key, args, path);
  return multi_head_attention_forward(c.query, c.key, c.value, args, path);
}

// The paths a version-3 case runs through: the reference and the engine, and the
// memory-efficient engine when no weights are asked for.
inline std::vector<std::pair<std::string, AttentionPath>> functional_paths(bool need_weights) {
  std::vector<std::pair<std::string, AttentionPath>> paths{{"reference", AttentionPath::reference},
                                                           {"fast", AttentionPath::fast}};
  if (!need_weights) paths.emplace_back("memory_efficient", AttentionPath::memory_efficient);
  return paths;
}

// The gradients a variant must give: the case's, with grad.in_proj_weight split into
// q/k/v_proj_weight by rows [0, E), [E, 2E), [2E, 3E) for a separate variant of a packed case.
template <class T>
std::map<std::string, xt::xarray<T>> expected_gradients(const Case<T>& c, bool packed) {
  auto expected = c.expected_gradients;
  if (const auto it = expected.find("in_proj_weight"); it != expected.end() && !packed) {
    const xt::xtensor<T, 2> w = it->second;
    const auto blocks = textbook::split_packed(w, std::optional<xt::xtensor<T, 1>>{});
    expected.erase(it);
    expected.emplace("q_proj_weight", blocks.w_q), expected.emplace("k_proj_weight", blocks.w_k);
    expected.emplace("v_proj_weight", blocks.w_v);
  }
  return expected;
}

// The result of comparing one tensor with PyTorch's.
struct Comparison {
  bool ok = true;
  double max_abs_err = 0;  // over positions where neither side is NaN
  std::string mismatch;    // empty when ok: what differs, and where first
};

// |got - expected| <= atol + rtol * |expected| elementwise, NaN equal to NaN, shapes equal.
template <class T>
Comparison compare(const xt::xarray<T>& got, const xt::xarray<T>& expected, double rtol, double atol) {
  Comparison r;
  if (!std::equal(got.shape().begin(), got.shape().end(), expected.shape().begin(), expected.shape().end())) {
    r.ok = false;
    r.mismatch = fmt::format("shape {} expected {}", shape_string(got.shape()), shape_string(expected.shape()));
    return r;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got.data()[i], e = expected.data()[i];
    bool close;
    if (std::isnan(g) || std::isnan(e)) close = std::isnan(g) && std::isnan(e);
    else if (std::isinf(g) || std::isinf(e)) close = g == e;
    else {
      const double err = std::abs(g - e);
      r.max_abs_err = std::max(r.max_abs_err, err);
      close = err <= atol + rtol * std::abs(e);
    }
    if (!close && r.ok) {
      r.ok = false;
      std::vector<std::size_t> index(got.dimension());
      std::size_t rest = i;
      for (std::size_t d = got.dimension(); d-- > 0;) index[d] = rest % got.shape(d), rest /= got.shape(d);
      r.mismatch = fmt::format("first mismatch at index {}: got {} expected {}", shape_string(index), g, e);
    }
  }
  return r;
}

// The warnings PyTorch gave, where the case records them ("pytorch_warnings"), against the
// library's: as many, in order, each of PyTorch's messages holding the library's (PyTorch
// may add where in its source it warned). Empty when they agree, else the FAIL reason.
inline std::string compare_warnings(const CaseInfo& info, const std::vector<Warning>& got) {
  if (!info.pytorch_warnings) return {};
  const auto& expected = *info.pytorch_warnings;
  auto message = [](const Warning& w) { return fmt::format("{}: {}", w.argument, w.message); };
  for (std::size_t i = 0; i < std::max(expected.size(), got.size()); ++i) {
    if (i >= got.size())
      return fmt::format("warning {} of PyTorch {} was not given: \"{}\"", i + 1, info.pytorch, expected[i]);
    if (i >= expected.size())
      return fmt::format("warning {} was given, PyTorch {} gave none: \"{}\"", i + 1, info.pytorch, message(got[i]));
    if (expected[i].find(got[i].message) == std::string::npos)
      return fmt::format("warning {}: PyTorch {} said \"{}\", the library \"{}\"", i + 1, info.pytorch, expected[i],
                         message(got[i]));
  }
  return {};
}

// One checked case: one line of mha-golden's output.
struct CaseResult {
  std::string name;
  bool passed = false;
  std::string line;  // "PASS name max_abs_err=..." or "FAIL name ..."
  double max_abs_err = 0;
};

// backward() on a version-2 case: every gradient the case holds, none it does not.
// Returns an empty string when all match, else the FAIL line's reason.
template <class T>
std::string check_gradients(MultiheadAttention<T>& module, const Case<T>& c, double& max_abs_err) {
  if (!c.grad_attn_output) return "the case has no grad_attn_output.npy";  // load_case reads it for version 2
  auto [out, record] = run_forward_for_backward(module, c);
  const auto grads = module.backward(record, *c.grad_attn_output, c.grad_attn_output_weights);
  std::map<std::string, const xt::xarray<T>*> got;
  for (const auto& [name, g] : {std::pair{"query", &grads.query}, {"key", &grads.key}, {"value", &grads.value}})
    if (*g) got.emplace(name, &**g);
  for (const auto& [name, g] : grads.parameters) got.emplace(name, &g);
  const auto expected = expected_gradients(c, module.packed());
  for (const auto& [name, g] : got)
    if (!expected.contains(name)) return fmt::format("gradient={} was returned, but the case has none", name);
  for (const auto& [name, e] : expected) {
    const auto it = got.find(name);
    if (it == got.end()) return fmt::format("gradient={} was not returned", name);
    const auto cmp = compare(*it->second, e, c.info.backward_rtol, c.info.backward_atol);
    max_abs_err = std::max(max_abs_err, cmp.max_abs_err);
    if (!cmp.ok) return fmt::format("gradient={} max_abs_err={:.3g} {}", name, cmp.max_abs_err, cmp.mismatch);
  }
  return {};
}

template <class T>
CaseResult check_numeric_case(const Case<T>& c) {
  CaseResult result{c.info.name, true, "", 0};
  std::vector<std::string> names;
  for (auto& [variant, module] : variants(c)) {
    names.push_back(variant);
    const auto out = run_forward(module, c);
    const auto qkv = run_in_projection(module, c);
    std::vector<std::pair<std::string, const xt::xarray<T>*>> got;
    xt::xarray<T> q = qkv.q, k = qkv.k, v = qkv.v;
    got.emplace_back("attn_output", &out.attn_output);
    if (out.attn_output_weights) got.emplace_back("attn_output_weights", &*out.attn_output_weights);
    got.emplace_back("q", &q), got.emplace_back("k", &k), got.emplace_back("v", &v);
    for (const auto& [name, expected] : c.expected) {
      const auto it = std::find_if(got.begin(), got.end(), [&](const auto& g) { return g.first == name; });
      if (it == got.end()) {
        result.passed = false;
        result.line = fmt::format("FAIL {} tensor={} ({}) was not returned (need_weights={})", c.info.name, name,
                                  variant, c.info.need_weights);
        return result;
      }
      const auto cmp = compare(*it->second, expected, c.info.rtol, c.info.atol);
      result.max_abs_err = std::max(result.max_abs_err, cmp.max_abs_err);
      if (!cmp.ok) {
        result.passed = false;
        result.line = fmt::format("FAIL {} tensor={} ({}) max_abs_err={:.3g} {}", c.info.name, name, variant,
                                  cmp.max_abs_err, cmp.mismatch);
        return result;
      }
    }
    if (!c.info.need_weights && out.attn_output_weights) {
      result.passed = false;
      result.line =
          fmt::format("FAIL {} ({}) returned attention weights with need_weights=false", c.info.name, variant);
      return result;
    }
    if (const auto reason = compare_warnings(c.info, out.warnings); !reason.empty()) {
      result.passed = false;
      result.line = fmt::format("FAIL {} ({}) {}", c.info.name, variant, reason);
      return result;
    }
    if (c.info.format != 2) continue;
    if (const auto reason = check_gradients(module, c, result.max_abs_err); !reason.empty()) {
      result.passed = false;
      result.line = fmt::format("FAIL {} ({}) {}", c.info.name, variant, reason);
      return result;
    }
  }
  result.line = fmt::format("PASS {} max_abs_err={:.3g} ({}; PyTorch {})", c.info.name, result.max_abs_err,
                            fmt::join(names, ", "), c.info.pytorch);
  return result;
}

// A numeric version-3 case through every path: attn_output, and attn_output_weights
// exactly when need_weights.
template <class T>
CaseResult check_functional_case(const Case<T>& c) {
  CaseResult result{c.info.name, true, "", 0};
  std::vector<std::string> names;
  for (const auto& [name, path] : functional_paths(c.info.need_weights)) {
    names.push_back(name);
    const auto out = run_functional(c, path);
    std::vector<std::pair<std::string, const xt::xarray<T>*>> got{{"attn_output", &out.attn_output}};
    if (out.attn_output_weights) got.emplace_back("attn_output_weights", &*out.attn_output_weights);
    if (out.attn_output_weights.has_value() != c.expected.contains("attn_output_weights"))
      return {c.info.name, false,
              fmt::format("FAIL {} ({}) attn_output_weights {} returned, need_weights={}", c.info.name, name,
                          out.attn_output_weights ? "was" : "was not", c.info.need_weights),
              result.max_abs_err};
    if (const auto reason = compare_warnings(c.info, out.warnings); !reason.empty())
      return {c.info.name, false, fmt::format("FAIL {} ({}) {}", c.info.name, name, reason), result.max_abs_err};
    for (const auto& [tensor, value] : got) {
      const auto it = c.expected.find(tensor);
      if (it == c.expected.end())
        return {c.info.name, false, fmt::format("FAIL {} the case has no {}.npy", c.info.name, tensor), 0};
      const auto cmp = compare(*value, it->second, c.info.rtol, c.info.atol);
      result.max_abs_err = std::max(result.max_abs_err, cmp.max_abs_err);
      if (!cmp.ok)
        return {c.info.name, false,
                fmt::format("FAIL {} tensor={} ({}) max_abs_err={:.3g} {}", c.info.name, tensor, name, cmp.max_abs_err,
                            cmp.mismatch),
                result.max_abs_err};
    }
  }
  result.line = fmt::format("PASS {} max_abs_err={:.3g} (functional: {}; PyTorch {})", c.info.name, result.max_abs_err,
                            fmt::join(names, ", "), c.info.pytorch);
  return result;
}

// A version-3 rejection case: every path must refuse it with mha::Error.
template <class T>
CaseResult check_functional_rejection(const CaseInfo& info) {
  std::string message;
  try {
    const auto c = load_case<T>(info);
    for (const auto& [name, path] : functional_paths(info.need_weights)) {
      try {
        run_functional(c, path);
      } catch (const Error& e) {
        message = e.what();
        continue;
      }
      return {info.name, false,
              fmt::format("FAIL {} expected an error (expect_error), but the {} path raised none", info.name, name), 0};
    }
  } catch (const Error& e) {
    message = e.what();
  }
  return {info.name, true, fmt::format("PASS {} rejected: {}", info.name, message), 0};
}

template <class T>
CaseResult check_case_as(const CaseInfo& info) {
  if (info.is_functional())
    return info.expect_error ? check_functional_rejection<T>(info) : check_functional_case(load_case<T>(info));
  if (!info.expect_error) return check_numeric_case(load_case<T>(info));
  try {
    const auto c = load_case<T>(info);
    for (auto& [variant, module] : variants(c)) run_forward(module, c);
  } catch (const Error& e) {
    return {info.name, true, fmt::format("PASS {} rejected: {}", info.name, e.what()), 0};
  }
  return {info.name, false, fmt::format("FAIL {} expected an error (expect_error), but none was raised", info.name), 0};
}

// Checks one case folder. Never throws: a malformed case is a FAIL with the reason.
CaseResult check_case(const std::filesystem::path& dir) {
  const std::string name = dir.filename().string();
  try {
    const CaseInfo info = read_case_info(dir);
    return info.dtype == "float32" ? check_case_as<float>(info) : check_case_as<double>(info);
  } catch (const Error& e) {
    return {name, false, fmt::format("FAIL {} {}", name, e.what()), 0};
  } catch (const std::exception& e) {
    return {name, false, fmt::format("FAIL {} unexpected error (not mha::Error): {}", name, e.what()), 0};
  }
}

}  // namespace mha
