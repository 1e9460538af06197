// mha:golden — golden cases written by PyTorch, and checking this library against them.
//
// A case is a folder with case.json and .npy tensors, in the format of
// golden/FORMAT.md (version 1): the module's options, its parameters under
// PyTorch's state_dict names, the forward inputs, and what PyTorch returned. This
// partition reads a case, builds the module from it, runs every variant (packed, and
// separate after splitting), and compares each expected tensor within the case's
// tolerance |got - expected| <= atol + rtol * |expected|, NaN equal to NaN.
// It is the engine of the mha-golden tool and of the golden tests.
module;
#include "third_party.hpp"

export module mha:golden;

import :error;
import :masks;
import :in_projection;
import :options;
import :multihead_attention;
import :npy;

export namespace mha {

// case.json, read and checked.
struct CaseInfo {
  std::filesystem::path dir;
  std::string name;
  std::string description;
  std::string dtype;  // "float32" or "float64"
  Options options;
  bool need_weights = true, average_attn_weights = true, is_causal = false, training = false;
  double rtol = 0, atol = 0;
  bool expect_error = false;
  bool query_is_key = false, key_is_value = false;  // optional "inputs" field of the generator
};

namespace golden_detail {

// Whether a JSON value is exactly of V's kind: an integer in V's range for an integral V
// (8.5 is not read as 8, nor 1e300 cast out of range), any number for double, true or
// false for bool, a string for std::string.
template <class V>
bool holds(const nlohmann::json& value) {
  if constexpr (std::is_same_v<V, bool>) {
    return value.is_boolean();
  } else if constexpr (std::is_integral_v<V>) {
    if (value.is_number_unsigned())
      return value.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<V>::max());
    return value.is_number_integer() && value.get<std::int64_t>() >= std::numeric_limits<V>::min() &&
           value.get<std::int64_t>() <= std::numeric_limits<V>::max();
  } else if constexpr (std::is_floating_point_v<V>) {
    return value.is_number();
  } else {
    return value.is_string();
  }
}

template <class V>
constexpr std::string_view kind_name() {
  if constexpr (std::is_same_v<V, bool>) return "true or false";
  else if constexpr (std::is_integral_v<V>) return "an integer";
  else if constexpr (std::is_floating_point_v<V>) return "a number";
  else return "a string";
}

// The field `section.key` (`key` at the top level when section is null), of V's kind.
template <class V>
V field(const nlohmann::json& j, const char* section, const char* key, const std::string& where) {
  const nlohmann::json* node = &j;
  if (section) {
    if (!j.contains(section) || !j[section].is_object())
      throw Error(fmt::format("{}: case.json has no '{}' object", where, section));
    node = &j[section];
  }
  if (!node->contains(key))
    throw Error(
        fmt::format("{}: case.json is missing '{}{}{}'", where, section ? section : "", section ? "." : "", key));
  const nlohmann::json& value = (*node)[key];
  if (!holds<V>(value))
    throw Error(fmt::format("{}: case.json field '{}{}{}': expected {}, got {}", where, section ? section : "",
                            section ? "." : "", key, kind_name<V>(), value.dump()));
  return value.template get<V>();
}

}  // namespace golden_detail

// Parses the text of a case.json; `dir` is the case folder it belongs to (for the
// case's name and the messages). Throws mha::Error for anything malformed.
CaseInfo parse_case_info(std::string_view json, const std::filesystem::path& dir) {
  using golden_detail::field;
  const std::string where = dir.string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: case.json is not valid JSON: {}", where, e.what()));
  }
  if (!j.is_object()) throw Error(fmt::format("{}: case.json is not a JSON object", where));
  CaseInfo c;
  c.dir = dir;
  c.name = dir.filename().string();
  const int format = field<int>(j, nullptr, "format", where);
  if (format != 1)
    throw Error(fmt::format("{}: unknown case format version {} (this reader knows version 1)", where, format));
  if (j.contains("description")) c.description = field<std::string>(j, nullptr, "description", where);
  c.dtype = field<std::string>(j, nullptr, "dtype", where);
  if (c.dtype != "float32" && c.dtype != "float64")
    throw Error(fmt::format("{}: dtype: expected \"float32\" or \"float64\", got \"{}\"", where, c.dtype));
  c.options.embed_dim = field<std::int64_t>(j, "module", "embed_dim", where);
  c.options.num_heads = field<std::int64_t>(j, "module", "num_heads", where);
  c.options.dropout = field<double>(j, "module", "dropout", where);
  c.options.bias = field<bool>(j, "module", "bias", where);
  c.options.add_bias_kv = field<bool>(j, "module", "add_bias_kv", where);
  c.options.add_zero_attn = field<bool>(j, "module", "add_zero_attn", where);
  c.options.kdim = field<std::int64_t>(j, "module", "kdim", where);
  c.options.vdim = field<std::int64_t>(j, "module", "vdim", where);
  c.options.batch_first = field<bool>(j, "module", "batch_first", where);
  c.need_weights = field<bool>(j, "forward", "need_weights", where);
  c.average_attn_weights = field<bool>(j, "forward", "average_attn_weights", where);
  c.is_causal = field<bool>(j, "forward", "is_causal", where);
  c.training = field<bool>(j, "forward", "training", where);
  c.rtol = field<double>(j, "tolerance", "rtol", where);
  c.atol = field<double>(j, "tolerance", "atol", where);
  if (!std::isfinite(c.rtol) || !std::isfinite(c.atol) || c.rtol < 0 || c.atol < 0)
    throw Error(fmt::format("{}: tolerance: expected finite rtol >= 0 and atol >= 0, got rtol={} atol={}", where,
                            c.rtol, c.atol));
  c.expect_error = field<bool>(j, nullptr, "expect_error", where);
  if (j.contains("inputs") && j["inputs"].is_object()) {
    c.query_is_key = j["inputs"].contains("query_is_key") && field<bool>(j, "inputs", "query_is_key", where);
    c.key_is_value = j["inputs"].contains("key_is_value") && field<bool>(j, "inputs", "key_is_value", where);
  }
  return c;
}

CaseInfo read_case_info(const std::filesystem::path& dir) {
  std::ifstream in(dir / "case.json", std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open case.json", dir.string()));
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_case_info(json, dir);
}

// A whole case: its options, parameters, inputs and PyTorch's outputs.
template <class T>
struct Case {
  CaseInfo info;
  StateDict<T> parameters;  // every parameter file of the case, by state_dict name
  xt::xarray<T> query, key, value;
  ForwardOptions<T> forward;
  std::map<std::string, xt::xarray<T>> expected;  // attn_output, attn_output_weights, q, k, v
};

// A mask file: bool, or floating of the case's dtype; anything else is rejected as
// PyTorch rejects it.
template <class T>
std::optional<Mask<T>> load_mask(const std::filesystem::path& file, const std::string& name) {
  if (!std::filesystem::exists(file)) return std::nullopt;
  const NpyArray a = read_npy(file);
  if (a.descr == "|b1") return Mask<T>(to_xarray<bool>(a, name));
  if (a.descr == npy_descr<T>()) return Mask<T>(to_xarray<T>(a, name));
  if (a.descr == "<f4" || a.descr == "<f8" || a.descr == "<f2")
    throw Error(fmt::format("{}: expected bool or {} (the query's dtype), got {}", name, dtype_name(npy_descr<T>()),
                            dtype_name(a.descr)));
  throw Error(
      fmt::format("{}: only bool and floating types of {} are supported, got {}", name, name, dtype_name(a.descr)));
}

template <class T>
Case<T> load_case(const CaseInfo& info) {
  check(info.dtype == dtype_name(npy_descr<T>()), "dtype", "case {} is {}, read as {}", info.name, info.dtype,
        dtype_name(npy_descr<T>()));
  Case<T> c;
  c.info = info;
  const auto& dir = info.dir;
  for (const char* name : {"in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
                           "bias_k", "bias_v", "out_proj.weight", "out_proj.bias"})
    if (std::filesystem::exists(dir / (std::string(name) + ".npy")))
      c.parameters.emplace(name, load_npy<T>(dir / (std::string(name) + ".npy")));
  c.query = load_npy<T>(dir / "query.npy");
  c.key = load_npy<T>(dir / "key.npy");
  c.value = load_npy<T>(dir / "value.npy");
  c.forward.key_padding_mask = load_mask<T>(dir / "key_padding_mask.npy", "key_padding_mask");
  c.forward.attn_mask = load_mask<T>(dir / "attn_mask.npy", "attn_mask");
  c.forward.need_weights = info.need_weights;
  c.forward.average_attn_weights = info.average_attn_weights;
  c.forward.is_causal = info.is_causal;
  for (const char* name : {"attn_output", "attn_output_weights", "q", "k", "v"})
    if (std::filesystem::exists(dir / (std::string(name) + ".npy")))
      c.expected.emplace(name, load_npy<T>(dir / (std::string(name) + ".npy")));
  return c;
}

// The module the case describes, with its parameters loaded (strictly: every name must
// be one the module has, and every one it has must be there).
template <class T>
MultiheadAttention<T> make_module(const Case<T>& c) {
  Options options = c.info.options;
  options.separate_projections = !c.parameters.contains("in_proj_weight");
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

template <class T>
QKV<T> run_in_projection(const MultiheadAttention<T>& module, const Case<T>& c) {
  if (c.info.query_is_key && c.info.key_is_value) return module.in_projection(c.query, c.query, c.query);
  if (c.info.key_is_value) return module.in_projection(c.query, c.key, c.key);
  return module.in_projection(c.query, c.key, c.value);
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

// One checked case: one line of mha-golden's output.
struct CaseResult {
  std::string name;
  bool passed = false;
  std::string line;  // "PASS name max_abs_err=..." or "FAIL name ..."
  double max_abs_err = 0;
};

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
  }
  result.line = fmt::format("PASS {} max_abs_err={:.3g} ({})", c.info.name, result.max_abs_err, fmt::join(names, ", "));
  return result;
}

template <class T>
CaseResult check_case_as(const CaseInfo& info) {
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

// The case folders at or under each path (a folder with case.json is a case), sorted.
std::vector<std::filesystem::path> find_cases(const std::vector<std::filesystem::path>& roots) {
  std::vector<std::filesystem::path> cases;
  for (const auto& root : roots) {
    if (!std::filesystem::is_directory(root)) throw Error(fmt::format("path: {} is not a folder", root.string()));
    if (std::filesystem::exists(root / "case.json")) {
      cases.push_back(root);
      continue;
    }
    std::vector<std::filesystem::path> found;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root))
      if (entry.is_directory() && std::filesystem::exists(entry.path() / "case.json")) found.push_back(entry.path());
    if (found.empty()) throw Error(fmt::format("path: no case folders (with case.json) under {}", root.string()));
    std::sort(found.begin(), found.end());
    cases.insert(cases.end(), found.begin(), found.end());
  }
  return cases;
}

}  // namespace mha
