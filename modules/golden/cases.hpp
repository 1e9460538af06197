// modules/golden/cases.hpp — golden cases written by PyTorch: case.json and the case's tensors.
//
// A case is a folder with case.json and .npy tensors, in the format of
// golden/FORMAT.md: the module's options, its parameters under PyTorch's state_dict
// names, the forward inputs, and what PyTorch returned (version 1); with the upstream
// gradients, the dropout mask drawn and PyTorch's gradients too (version 2). This
// file finds case folders, reads case.json (every field checked, case_json.hpp) and
// loads a case's tensors (through mha.io's .npy reader). Running and comparing are in
// check.hpp.
//
// Included by modules/golden.cppm, in its module purview: no module line of its own.
// Uses mha, mha.io, case_json.hpp.

export namespace mha {

// The "functional" object of a version-3 case: the arguments of
// F.multi_head_attention_forward that are not tensors.
struct FunctionalCall {
  std::int64_t embed_dim_to_check = 0, num_heads = 0;
  bool add_zero_attn = false;
  double dropout_p = 0;
  bool training = false, need_weights = true, average_attn_weights = true, use_separate_proj_weight = false;
};

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
  int format = 1;                                   // 2: the backward pass too; 3: a call of the functional form
  double backward_rtol = 0, backward_atol = 0;      // the gradients' tolerance (format 2)
  FunctionalCall functional;                        // format 3, in place of options and the forward's
  // The generation of PyTorch that made the case ("pytorch", absent: "1.13"), which the
  // case is checked as; grad disabled (forward.grad_enabled false: the fast path's
  // condition); the warnings PyTorch gave, when the generator recorded them.
  std::string pytorch = "1.13";
  PyTorchVersion version = PyTorchVersion::v1_13;
  bool grad_enabled = true;
  std::optional<std::vector<std::string>> pytorch_warnings;
  bool generations_differ = false;  // the generator's "generations_differ": 1.13 and 2.x compute it differently
  bool is_functional() const { return format == 3; }
};

// The tensor arguments of F.multi_head_attention_forward a version-3 case may hold, each
// as <name>.npy; one that is absent is None.
const std::vector<std::string>& functional_tensor_names() {
  static const std::vector<std::string> names{"in_proj_weight",  "in_proj_bias",  "bias_k",        "bias_v",
                                              "out_proj_weight", "out_proj_bias", "q_proj_weight", "k_proj_weight",
                                              "v_proj_weight",   "static_k",      "static_v"};
  return names;
}

}  // namespace mha

namespace mha::detail {

// The "module" object: the arguments of torch.nn.MultiheadAttention(...).
Options case_module_options(const nlohmann::json& j, const std::string& where) {
  Options o;
  o.embed_dim = case_field<std::int64_t>(j, "module", "embed_dim", where);
  o.num_heads = case_field<std::int64_t>(j, "module", "num_heads", where);
  o.dropout = case_field<double>(j, "module", "dropout", where);
  o.bias = case_field<bool>(j, "module", "bias", where);
  o.add_bias_kv = case_field<bool>(j, "module", "add_bias_kv", where);
  o.add_zero_attn = case_field<bool>(j, "module", "add_zero_attn", where);
  o.kdim = case_field<std::int64_t>(j, "module", "kdim", where);
  o.vdim = case_field<std::int64_t>(j, "module", "vdim", where);
  o.batch_first = case_field<bool>(j, "module", "batch_first", where);
  return o;
}

// The "functional" object of a version-3 case, into `c` (need_weights and the rest also
// where a version-1 case has them, so that every reader of CaseInfo finds them there).
void read_case_functional(const nlohmann::json& j, const std::string& where, CaseInfo& c) {
  FunctionalCall& f = c.functional;
  f.embed_dim_to_check = case_field<std::int64_t>(j, "functional", "embed_dim_to_check", where);
  f.num_heads = case_field<std::int64_t>(j, "functional", "num_heads", where);
  f.add_zero_attn = case_field<bool>(j, "functional", "add_zero_attn", where);
  f.dropout_p = case_field<double>(j, "functional", "dropout_p", where);
  f.training = case_field<bool>(j, "functional", "training", where);
  f.need_weights = case_field<bool>(j, "functional", "need_weights", where);
  f.average_attn_weights = case_field<bool>(j, "functional", "average_attn_weights", where);
  f.use_separate_proj_weight = case_field<bool>(j, "functional", "use_separate_proj_weight", where);
  c.need_weights = f.need_weights, c.average_attn_weights = f.average_attn_weights, c.training = f.training;
}

// The "tolerance" and optional "inputs" objects, into `c`.
void read_case_tolerance(const nlohmann::json& j, const std::string& where, CaseInfo& c) {
  c.rtol = case_field<double>(j, "tolerance", "rtol", where);
  c.atol = case_field<double>(j, "tolerance", "atol", where);
  if (!std::isfinite(c.rtol) || !std::isfinite(c.atol) || c.rtol < 0 || c.atol < 0)
    throw Error(fmt::format("{}: tolerance: expected finite rtol >= 0 and atol >= 0, got rtol={} atol={}", where,
                            c.rtol, c.atol));
  if (j.contains("inputs") && j["inputs"].is_object()) {
    c.query_is_key = j["inputs"].contains("query_is_key") && case_field<bool>(j, "inputs", "query_is_key", where);
    c.key_is_value = j["inputs"].contains("key_is_value") && case_field<bool>(j, "inputs", "key_is_value", where);
  }
}

// The "forward" object of a version-1 or -2 case, into `c`.
void read_case_forward(const nlohmann::json& j, const std::string& where, CaseInfo& c) {
  c.need_weights = case_field<bool>(j, "forward", "need_weights", where);
  c.average_attn_weights = case_field<bool>(j, "forward", "average_attn_weights", where);
  c.is_causal = case_field<bool>(j, "forward", "is_causal", where);
  c.training = case_field<bool>(j, "forward", "training", where);
  if (j["forward"].contains("grad_enabled")) c.grad_enabled = case_field<bool>(j, "forward", "grad_enabled", where);
}

// "1.13" or "2.6", the major.minor a golden case names (its "pytorch" field), as a
// PyTorchVersion; any other is an mha::Error naming the versions known.
PyTorchVersion pytorch_version(std::string_view major_minor) {
  if (major_minor == "1.13") return PyTorchVersion::v1_13;
  if (major_minor == "2.6") return PyTorchVersion::v2;
  throw Error(
      fmt::format("pytorch: unknown PyTorch version \"{}\" (this library follows \"1.13\" and \"2.6\")", major_minor));
}

// The generation of PyTorch the case follows ("pytorch", absent: "1.13"; an unknown one is
// an error), and the warnings PyTorch gave (the generator's "pytorch_warnings"), into `c`.
void read_case_generation(const nlohmann::json& j, const std::string& where, CaseInfo& c) {
  if (j.contains("pytorch")) c.pytorch = case_field<std::string>(j, nullptr, "pytorch", where);
  try {
    c.version = pytorch_version(c.pytorch);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", where, e.what()));
  }
  if (j.contains("generations_differ"))
    c.generations_differ = case_field<bool>(j, nullptr, "generations_differ", where);
  if (!j.contains("pytorch_warnings")) return;
  const auto& warnings = j["pytorch_warnings"];
  if (!warnings.is_array() ||
      !std::all_of(warnings.begin(), warnings.end(), [](const auto& w) { return w.is_string(); }))
    throw Error(fmt::format("{}: case.json field 'pytorch_warnings': expected a list of strings, got {}", where,
                            warnings.dump()));
  c.pytorch_warnings = warnings.template get<std::vector<std::string>>();
}

// The "backward" object of a version-2 case: the gradients' tolerance, into `c`.
void read_case_backward(const nlohmann::json& j, const std::string& where, CaseInfo& c) {
  if (!j.contains("backward") || !j["backward"].is_object())
    throw Error(fmt::format("{}: case.json has format 2 but no 'backward' object", where));
  const std::string backward = where + " (backward)";
  c.backward_rtol = case_field<double>(j["backward"], "tolerance", "rtol", backward);
  c.backward_atol = case_field<double>(j["backward"], "tolerance", "atol", backward);
  if (!std::isfinite(c.backward_rtol) || !std::isfinite(c.backward_atol) || c.backward_rtol < 0 || c.backward_atol < 0)
    throw Error(fmt::format("{}: backward.tolerance: expected finite rtol >= 0 and atol >= 0, got rtol={} atol={}",
                            where, c.backward_rtol, c.backward_atol));
}

}  // namespace mha::detail

export namespace mha {

// Parses the text of a case.json; `dir` is the case folder it belongs to (for the
// case's name and the messages). Throws mha::Error for anything malformed.
CaseInfo parse_case_info(std::string_view json, const std::filesystem::path& dir) {
  using detail::case_field;
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
  c.format = case_field<int>(j, nullptr, "format", where);
  if (c.format < 1 || c.format > 3)
    throw Error(
        fmt::format("{}: unknown case format version {} (this reader knows versions 1, 2 and 3)", where, c.format));
  if (j.contains("description")) c.description = case_field<std::string>(j, nullptr, "description", where);
  c.dtype = case_field<std::string>(j, nullptr, "dtype", where);
  if (c.dtype != "float32" && c.dtype != "float64")
    throw Error(fmt::format("{}: dtype: expected \"float32\" or \"float64\", got \"{}\"", where, c.dtype));
  if (c.is_functional()) {
    detail::read_case_functional(j, where, c);
  } else {
    c.options = detail::case_module_options(j, where);
    detail::read_case_forward(j, where, c);
  }
  detail::read_case_tolerance(j, where, c);
  detail::read_case_generation(j, where, c);
  c.expect_error = case_field<bool>(j, nullptr, "expect_error", where);
  if (c.format == 2) detail::read_case_backward(j, where, c);
  return c;
}

// Reads and parses dir/case.json.
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
  // Every parameter file of the case, by state_dict name; in a version-3 case, every
  // tensor argument of the call by its argument name (functional_tensor_names).
  StateDict<T> parameters;
  xt::xarray<T> query, key, value;
  ForwardOptions<T> forward;
  std::map<std::string, xt::xarray<T>> expected;  // attn_output, attn_output_weights, q, k, v
  // Version 2: the upstream gradients, and PyTorch's gradients by input name (query, key,
  // value: one per distinct object) and by parameter name (in_proj_weight, bias_k, ...).
  std::optional<xt::xarray<T>> grad_attn_output, grad_attn_output_weights;
  std::map<std::string, xt::xarray<T>> expected_gradients;
};

// A mask file: bool, uint8 (which the library takes or refuses as the case's generation
// of PyTorch did), or floating of the case's dtype; anything else is rejected as PyTorch
// rejects it.
template <class T>
std::optional<Mask<T>> load_mask(const std::filesystem::path& file, const std::string& name) {
  if (!std::filesystem::exists(file)) return std::nullopt;
  const NpyArray a = read_npy(file);
  if (a.descr == "|b1") return Mask<T>(to_xarray<bool>(a, name));
  if (a.descr == "|u1") return Mask<T>(to_xarray<std::uint8_t>(a, name));
  if (a.descr == npy_descr<T>()) return Mask<T>(to_xarray<T>(a, name));
  if (a.descr == "<f4" || a.descr == "<f8" || a.descr == "<f2")
    throw Error(fmt::format("{}: expected bool or {} (the query's dtype), got {}", name, dtype_name(npy_descr<T>()),
                            dtype_name(a.descr)));
  throw Error(
      fmt::format("{}: only bool and floating types of {} are supported, got {}", name, name, dtype_name(a.descr)));
}

// dropout_mask.npy: bool, (N*H, L, S'), True = kept.
std::optional<xt::xtensor<bool, 3>> load_dropout_mask(const std::filesystem::path& file) {
  if (!std::filesystem::exists(file)) return std::nullopt;
  const NpyArray a = read_npy(file);
  check(a.descr == "|b1", "dropout_mask", "expected bool, got {}", dtype_name(a.descr));
  const xt::xarray<bool> mask = to_xarray<bool>(a, "dropout_mask");
  check(mask.dimension() == 3, "dropout_mask", "expected 3 dimensions (N*H, L, S'), got shape {}",
        shape_string(mask.shape()));
  return xt::xtensor<bool, 3>(mask);
}

// The tensors of version 2: the upstream gradients, the dropout mask, PyTorch's gradients.
template <class T>
void load_case_backward(Case<T>& c) {
  const auto& dir = c.info.dir;
  c.grad_attn_output = load_npy<T>(dir / "grad_attn_output.npy");
  if (std::filesystem::exists(dir / "grad_attn_output_weights.npy"))
    c.grad_attn_output_weights = load_npy<T>(dir / "grad_attn_output_weights.npy");
  c.forward.dropout_mask = load_dropout_mask(dir / "dropout_mask.npy");
  std::vector<std::string> names = {"query", "key", "value"};
  for (const auto& name : multihead_attention_keys()) names.push_back(name);
  for (const auto& name : names)
    if (const auto file = dir / ("grad." + name + ".npy"); std::filesystem::exists(file))
      c.expected_gradients.emplace(name, load_npy<T>(file));
}

// The case's tensors, as T: the case's dtype, or an Error.
template <class T>
Case<T> load_case(const CaseInfo& info) {
  check(info.dtype == dtype_name(npy_descr<T>()), "dtype", "case {} is {}, read as {}", info.name, info.dtype,
        dtype_name(npy_descr<T>()));
  Case<T> c;
  c.info = info;
  const auto& dir = info.dir;
  for (const auto& name : info.is_functional() ? functional_tensor_names() : multihead_attention_keys())
    if (std::filesystem::exists(dir / (name + ".npy"))) c.parameters.emplace(name, load_npy<T>(dir / (name + ".npy")));
  c.query = load_npy<T>(dir / "query.npy");
  c.key = load_npy<T>(dir / "key.npy");
  c.value = load_npy<T>(dir / "value.npy");
  c.forward.key_padding_mask = load_mask<T>(dir / "key_padding_mask.npy", "key_padding_mask");
  c.forward.attn_mask = load_mask<T>(dir / "attn_mask.npy", "attn_mask");
  c.forward.need_weights = info.need_weights;
  c.forward.average_attn_weights = info.average_attn_weights;
  c.forward.is_causal = info.is_causal;
  c.forward.grad_enabled = info.grad_enabled;
  for (const char* name : {"attn_output", "attn_output_weights", "q", "k", "v"})
    if (std::filesystem::exists(dir / (std::string(name) + ".npy")))
      c.expected.emplace(name, load_npy<T>(dir / (std::string(name) + ".npy")));
  if (info.format == 2) load_case_backward(c);
  return c;
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
