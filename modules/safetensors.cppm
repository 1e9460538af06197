// mha:safetensors — trained weights from .safetensors files and folders of .npy files.
//
// A .safetensors file, the format PyTorch users save state_dicts in, is
//
//   [8 bytes]  n, the header length, an unsigned little-endian integer
//   [n bytes]  a JSON object: for each tensor name {"dtype": "F32", "shape": [3, 4],
//              "data_offsets": [begin, end]}, plus an optional "__metadata__" object
//              of strings
//   [rest]     the data: each tensor's bytes, little-endian and C-ordered, at
//              [begin, end) counted from the start of this section
//
// The reader trusts nothing in the file. The header length, every offset and every size
// is checked against the file before a byte of data is touched; the tensors must tile
// the data section exactly (no overlap, no gap, nothing left over), as the reference
// implementation (the safetensors crate, `SafeTensors::deserialize`) demands. Anything
// wrong is an mha::Error that names the file and the tensor.
//
// Values are converted only where nothing is lost: F16 and BF16 widen exactly to float
// and double; F32 and F64 must match the module's type. Integer and bool tensors (a
// model's position ids, say) may sit in the file, but cannot be read as weights.
//
// This partition also selects one attention layer by its key prefix
// ("transformer_encoder.layers.0.self_attn."), infers what the weights tell of its
// Options (everything but num_heads, which no weight shape records), and writes
// safetensors files so that parameters round-trip.
module;
#include "third_party.hpp"

export module mha:safetensors;

import :error;
import :npy;
import :options;
import :multihead_attention;

export namespace mha {

// One tensor as it is in the file: its dtype name ("F32", "BF16", ...), its shape and
// its raw little-endian bytes.
struct SafetensorsTensor {
  std::string dtype;
  std::vector<std::size_t> shape;
  std::vector<char> bytes;
};

// One "__metadata__" entry: free-form text under a key.
// (A struct, not std::map<std::string, std::string>: clang 16 reports a false ODR mismatch
// for std::pair<const std::string, std::string> between this partition and code that
// includes CLI11 before `import mha;`.)
struct MetadataEntry {
  std::string key, value;
};

// A whole file: the tensors by name (sorted), and the "__metadata__" entries (by key).
struct Safetensors {
  std::filesystem::path path;
  std::map<std::string, SafetensorsTensor> tensors;
  std::vector<MetadataEntry> metadata;

  // The metadata value of `key`, if the file has one.
  std::optional<std::string> metadata_value(std::string_view key) const {
    for (const auto& m : metadata)
      if (m.key == key) return m.value;
    return std::nullopt;
  }
};

// The bytes per element of a safetensors dtype; 0 for a name the format does not have.
std::size_t safetensors_itemsize(std::string_view dtype) {
  static constexpr std::pair<std::string_view, std::size_t> sizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F16", 2}, {"BF16", 2}, {"I16", 2}, {"U16", 2},
      {"F32", 4},  {"I32", 4}, {"U32", 4}, {"F64", 8}, {"I64", 8},  {"U64", 8}};
  for (auto [name, size] : sizes)
    if (dtype == name) return size;
  return 0;
}

// The safetensors dtype of T: "F32" for float, "F64" for double.
template <class T>
constexpr std::string_view safetensors_dtype() {
  if constexpr (std::is_same_v<T, float>) return "F32";
  else if constexpr (std::is_same_v<T, double>) return "F64";
  else static_assert(sizeof(T) == 0, "safetensors: only float and double are supported");
}

// IEEE 754 half precision (1 sign, 5 exponent, 10 mantissa bits) to float, exactly.
float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  float magnitude;
  if (exponent == 0) magnitude = std::ldexp(static_cast<float>(mantissa), -24);  // zero, subnormal
  else if (exponent == 31)
    magnitude = mantissa == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  else magnitude = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  return sign ? -magnitude : magnitude;
}

// bfloat16 is the top half of a float's bits: shift them back into place.
float bfloat16_to_float(std::uint16_t b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

namespace safetensors_detail {

std::uint64_t read_le64(const char* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// A non-negative JSON integer, or an Error naming what it is.
std::size_t json_size(const nlohmann::json& j, const std::string& what) {
  if (!j.is_number_unsigned()) throw Error(fmt::format("{}: expected a non-negative integer, got {}", what, j.dump()));
  return j.get<std::size_t>();
}

// numel * itemsize, or an Error when it overflows.
std::size_t byte_count(const std::vector<std::size_t>& shape, std::size_t itemsize, const std::string& what) {
  std::size_t bytes = itemsize;
  for (auto d : shape) {
    if (d != 0 && bytes > std::numeric_limits<std::size_t>::max() / d)
      throw Error(fmt::format("{}: shape {} is too large", what, shape_string(shape)));
    bytes *= d;
  }
  return bytes;
}

// Where one tensor lies in the data section, as the header declares it.
struct Entry {
  std::string name, dtype;
  std::vector<std::size_t> shape;
  std::size_t begin = 0, end = 0;
};

Entry parse_entry(const std::string& name, const nlohmann::json& j, const std::string& where) {
  const std::string what = fmt::format("{}: tensor '{}'", where, name);
  if (!j.is_object())
    throw Error(fmt::format("{}: expected an object with dtype, shape and data_offsets, got {}", what, j.dump()));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!j.contains(key)) throw Error(fmt::format("{}: header entry has no '{}'", what, key));
  Entry e;
  e.name = name;
  if (!j["dtype"].is_string()) throw Error(fmt::format("{}: dtype must be a string, got {}", what, j["dtype"].dump()));
  e.dtype = j["dtype"].get<std::string>();
  if (safetensors_itemsize(e.dtype) == 0)
    throw Error(fmt::format(
        "{}: unknown dtype '{}' (expected one of BOOL, U8, I8, I16, U16, I32, U32, I64, U64, F16, BF16, F32, F64)",
        what, e.dtype));
  if (!j["shape"].is_array()) throw Error(fmt::format("{}: shape must be an array, got {}", what, j["shape"].dump()));
  for (const auto& d : j["shape"]) e.shape.push_back(json_size(d, what + " shape"));
  const auto& offsets = j["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    throw Error(fmt::format("{}: data_offsets must be [begin, end], got {}", what, offsets.dump()));
  e.begin = json_size(offsets[0], what + " data_offsets");
  e.end = json_size(offsets[1], what + " data_offsets");
  if (e.end < e.begin)
    throw Error(fmt::format("{}: data_offsets [{}, {}] end before they begin", what, e.begin, e.end));
  return e;
}

// The entries must tile [0, data_size): sorted by begin, each starts where the last ended.
void check_tiling(std::vector<Entry>& entries, std::size_t data_size, const std::string& where) {
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  std::size_t expected_begin = 0;
  const Entry* previous = nullptr;
  for (const auto& e : entries) {
    if (e.begin < expected_begin)
      throw Error(fmt::format("{}: tensor '{}' bytes [{}, {}) overlap tensor '{}' bytes [{}, {})", where, e.name,
                              e.begin, e.end, previous->name, previous->begin, previous->end));
    if (e.begin > expected_begin)
      throw Error(fmt::format("{}: tensor '{}' begins at byte {}, expected {} (the data section has a gap)", where,
                              e.name, e.begin, expected_begin));
    expected_begin = e.end;
    previous = &e;
  }
  if (expected_begin != data_size)
    throw Error(fmt::format("{}: the tensors cover {} bytes of data, but the file holds {} after the header", where,
                            expected_begin, data_size));
}

}  // namespace safetensors_detail

// Reads a whole .safetensors file. Throws mha::Error for anything malformed.
Safetensors read_safetensors(const std::filesystem::path& path) {
  namespace sd = safetensors_detail;
  const std::string where = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open file", where));
  const std::vector<char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  // 1) the header length: 8 bytes, and no more than the file holds after them
  if (file.size() < 8)
    throw Error(fmt::format("{}: truncated: {} bytes, too short for the 8-byte header length", where, file.size()));
  const std::uint64_t n = sd::read_le64(file.data());
  if (n > file.size() - 8)
    throw Error(fmt::format("{}: header length {} goes beyond the end of the file ({} bytes after the length)", where,
                            n, file.size() - 8));
  const std::size_t data_start = 8 + static_cast<std::size_t>(n), data_size = file.size() - data_start;

  // 2) the JSON header
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(file.begin() + 8, file.begin() + static_cast<std::ptrdiff_t>(data_start));
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: header is not valid JSON: {}", where, e.what()));
  }
  if (!header.is_object()) throw Error(fmt::format("{}: header is not a JSON object", where));

  // 3) every entry: dtype, shape, offsets; size = numel * itemsize; inside the data
  Safetensors st;
  st.path = path;
  std::vector<sd::Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) throw Error(fmt::format("{}: __metadata__ must be an object of strings", where));
      for (const auto& [key, text] : value.items()) {
        if (!text.is_string())
          throw Error(fmt::format("{}: __metadata__ '{}' must be a string, got {}", where, key, text.dump()));
        st.metadata.push_back({key, text.get<std::string>()});
      }
      continue;
    }
    auto e = sd::parse_entry(name, value, where);
    const std::string what = fmt::format("{}: tensor '{}'", where, name);
    const std::size_t expected = sd::byte_count(e.shape, safetensors_itemsize(e.dtype), what);
    if (e.end - e.begin != expected)
      throw Error(fmt::format("{}: data_offsets [{}, {}] hold {} bytes, but shape {} of {} needs {}", what, e.begin,
                              e.end, e.end - e.begin, shape_string(e.shape), e.dtype, expected));
    if (e.end > data_size)
      throw Error(fmt::format("{}: data_offsets [{}, {}] go beyond the data section ({} bytes)", what, e.begin, e.end,
                              data_size));
    entries.push_back(std::move(e));
  }
  sd::check_tiling(entries, data_size, where);

  // 4) the bytes, now known to be in range
  for (const auto& e : entries) {
    const auto first = file.begin() + static_cast<std::ptrdiff_t>(data_start + e.begin);
    st.tensors.emplace(
        e.name, SafetensorsTensor{e.dtype, e.shape,
                                  std::vector<char>(first, first + static_cast<std::ptrdiff_t>(e.end - e.begin))});
  }
  return st;
}

// One tensor as an xt::xarray<T>: F16 and BF16 are widened, F32 and F64 must be T's.
template <class T>
xt::xarray<T> to_xarray(const SafetensorsTensor& tensor, std::string_view name) {
  const bool half = tensor.dtype == "F16", bf16 = tensor.dtype == "BF16";
  check(tensor.dtype == safetensors_dtype<T>() || half || bf16, name,
        "expected dtype {} ({}), or F16 / BF16 (widened exactly), got {}", safetensors_dtype<T>(),
        dtype_name(npy_descr<T>()), tensor.dtype);
  xt::xarray<T> out = xt::xarray<T>::from_shape(tensor.shape);
  // read_safetensors guarantees this; a SafetensorsTensor put together by hand may not.
  const std::size_t itemsize = half || bf16 ? 2 : sizeof(T);
  check(tensor.bytes.size() == out.size() * itemsize, name, "holds {} bytes, but shape {} of {} needs {}",
        tensor.bytes.size(), shape_string(tensor.shape), tensor.dtype, out.size() * itemsize);
  if (half || bf16) {
    for (std::size_t i = 0; i < out.size(); ++i) {
      const auto lo = static_cast<unsigned char>(tensor.bytes[2 * i]),
                 hi = static_cast<unsigned char>(tensor.bytes[2 * i + 1]);
      const auto bits = static_cast<std::uint16_t>(lo | (hi << 8));
      out.data()[i] = static_cast<T>(half ? half_to_float(bits) : bfloat16_to_float(bits));
    }
  } else if (!tensor.bytes.empty()) {
    std::memcpy(out.data(), tensor.bytes.data(), tensor.bytes.size());
  }
  return out;
}

// The tensor `name` of the file, as T.
template <class T>
xt::xarray<T> tensor(const Safetensors& st, const std::string& name) {
  const auto it = st.tensors.find(name);
  check(it != st.tensors.end(), name, "no such tensor in {}", st.path.string());
  return to_xarray<T>(it->second, name);
}

// Every tensor of the file whose name starts with `prefix`, the prefix removed, as T.
// An empty prefix takes the whole file.
template <class T>
StateDict<T> load_safetensors(const std::filesystem::path& path, std::string_view prefix = "") {
  const auto st = read_safetensors(path);
  StateDict<T> dict;
  for (const auto& [name, t] : st.tensors)
    if (name.starts_with(prefix)) dict.emplace(name.substr(prefix.size()), to_xarray<T>(t, name));
  check(!dict.empty(), "prefix", "no tensor in {} starts with '{}'", path.string(), prefix);
  return dict;
}

// Writes tensors as a .safetensors file of T's dtype, names sorted; `metadata` becomes
// "__metadata__". The header is padded with spaces to a multiple of 8 bytes, as the
// safetensors crate does, so that the data starts aligned.
template <class T>
void save_safetensors(const std::filesystem::path& path, const StateDict<T>& tensors,
                      const std::vector<MetadataEntry>& metadata = {}) {
  nlohmann::json header = nlohmann::json::object();
  for (const auto& m : metadata) header["__metadata__"][m.key] = m.value;
  std::size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    check(name != "__metadata__", "tensors", "'__metadata__' is reserved and cannot name a tensor");
    const std::size_t bytes = t.size() * sizeof(T);
    header[name] = {{"dtype", std::string(safetensors_dtype<T>())},
                    {"shape", std::vector<std::size_t>(t.shape().begin(), t.shape().end())},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error(fmt::format("{}: cannot write file", path.string()));
  char length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<char>((static_cast<std::uint64_t>(text.size()) >> (8 * i)) & 0xff);
  out.write(length, 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& [name, t] : tensors) {
    const xt::xarray<T> contiguous = t;  // C order, whatever layout the caller's array had
    out.write(reinterpret_cast<const char*>(contiguous.data()),
              static_cast<std::streamsize>(contiguous.size() * sizeof(T)));
  }
  if (!out) throw Error(fmt::format("{}: write failed", path.string()));
}

// A folder of .npy files named by state_dict keys ("in_proj_weight.npy",
// "out_proj.weight.npy"): the files whose key starts with `prefix`, the prefix removed.
template <class T>
StateDict<T> load_npy_folder(const std::filesystem::path& folder, std::string_view prefix = "") {
  check(std::filesystem::is_directory(folder), "folder", "{} is not a folder", folder.string());
  StateDict<T> dict;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".npy") continue;
    const std::string key = entry.path().stem().string();
    if (key.starts_with(prefix)) dict.emplace(key.substr(prefix.size()), load_npy<T>(entry.path()));
  }
  check(!dict.empty(), "prefix", "no .npy file in {} starts with '{}'", folder.string(), prefix);
  return dict;
}

// ---- attention layers in a state_dict -------------------------------------------------

// What the weights of one nn.MultiheadAttention say about it. num_heads is not here: no
// weight shape records it (in_proj_weight is (3E, E) for every H dividing E).
struct AttentionLayer {
  std::string prefix;  // "layers.0.self_attn."
  std::int64_t embed_dim = 0;
  std::int64_t kdim = 0, vdim = 0;
  bool bias = false;
  bool add_bias_kv = false;
  bool packed = false;  // in_proj_weight, or q/k/v_proj_weight
};

// Every state_dict key nn.MultiheadAttention can have, in PyTorch's order.
std::vector<std::string> multihead_attention_keys() {
  return {"in_proj_weight", "q_proj_weight", "k_proj_weight",   "v_proj_weight", "in_proj_bias",
          "bias_k",         "bias_v",        "out_proj.weight", "out_proj.bias"};
}

// The attention layers among `names`: every prefix P with P + "out_proj.weight" and
// P + "in_proj_weight" (packed) or P + "q_proj_weight" (separate), sorted by prefix.
std::vector<std::string> attention_layer_prefixes(const std::vector<std::string>& names) {
  std::vector<std::string> prefixes;
  const std::string out = "out_proj.weight";
  for (const auto& name : names) {
    if (!name.ends_with(out)) continue;
    const std::string p = name.substr(0, name.size() - out.size());
    const auto has = [&](const std::string& key) {
      return std::find(names.begin(), names.end(), p + key) != names.end();
    };
    if (has("in_proj_weight") || has("q_proj_weight")) prefixes.push_back(p);
  }
  std::sort(prefixes.begin(), prefixes.end());
  return prefixes;
}

// The one attention layer under `prefix`: an Error when there is none, or more than one.
std::string select_attention_layer(const std::vector<std::string>& names, std::string_view prefix) {
  const auto all = attention_layer_prefixes(names);
  std::vector<std::string> matching;
  for (const auto& p : all)
    if (p.starts_with(prefix)) matching.push_back(p);
  const auto quoted = [](const std::vector<std::string>& v) {
    std::string text;
    for (const auto& s : v) text += fmt::format("{}'{}'", text.empty() ? "" : ", ", s);
    return text.empty() ? std::string("none") : text;
  };
  check(!matching.empty(), "prefix",
        "no attention layer (out_proj.weight with in_proj_weight or q_proj_weight) starts with '{}'; attention layers "
        "found: {}",
        prefix, quoted(all));
  check(matching.size() == 1, "prefix",
        "'{}' is ambiguous: it matches {} attention layers: {}; give the full prefix of one", prefix, matching.size(),
        quoted(matching));
  return matching.front();
}

// The layer's Options as far as its weights tell: embed_dim, kdim, vdim, bias,
// add_bias_kv. `layer` holds PyTorch's parameter names, the prefix removed.
template <class T>
AttentionLayer describe_attention_layer(const StateDict<T>& layer, const std::string& prefix = "") {
  AttentionLayer info;
  info.prefix = prefix;
  const auto shape_of = [&](const std::string& key) -> const auto& {
    check(layer.contains(key), info.prefix + key, "missing from the state_dict");
    return layer.at(key).shape();
  };
  const auto& out = shape_of("out_proj.weight");
  check(out.size() == 2 && out[0] == out[1], info.prefix + "out_proj.weight", "expected shape (E, E), got {}",
        shape_string(out));
  info.embed_dim = static_cast<std::int64_t>(out[0]);
  info.packed = layer.contains("in_proj_weight");
  if (info.packed) {
    info.kdim = info.vdim = info.embed_dim;
  } else {
    const auto& k = shape_of("k_proj_weight");
    const auto& v = shape_of("v_proj_weight");
    check(k.size() == 2 && v.size() == 2, info.prefix + "k_proj_weight, v_proj_weight",
          "expected 2-D weights, got {} and {}", shape_string(k), shape_string(v));
    info.kdim = static_cast<std::int64_t>(k[1]);
    info.vdim = static_cast<std::int64_t>(v[1]);
  }
  info.bias = layer.contains("in_proj_bias");
  info.add_bias_kv = layer.contains("bias_k");
  return info;
}

// Options for a MultiheadAttention that can load this layer; num_heads is the caller's.
Options options_for(const AttentionLayer& layer, std::int64_t num_heads) {
  Options options;
  options.embed_dim = layer.embed_dim;
  options.num_heads = num_heads;
  options.bias = layer.bias;
  options.add_bias_kv = layer.add_bias_kv;
  options.kdim = layer.kdim;
  options.vdim = layer.vdim;
  options.separate_projections = !layer.packed;
  return options;
}

// The parameters of the one attention layer under `prefix`, the prefix removed.
template <class T>
StateDict<T> attention_layer_parameters(const StateDict<T>& dict, std::string_view prefix) {
  std::vector<std::string> names;
  for (const auto& [name, _] : dict) names.push_back(name);
  const std::string layer = select_attention_layer(names, prefix);
  StateDict<T> out;
  for (const auto& [name, value] : dict)
    if (name.starts_with(layer)) out.emplace(name.substr(layer.size()), value);
  return out;
}

// A MultiheadAttention (in eval mode) holding the layer under `prefix` of a state_dict:
// load_state_dict is strict, so every key must be one of the module's and every shape
// PyTorch's.
template <class T>
MultiheadAttention<T> load_attention_layer(const StateDict<T>& dict, std::string_view prefix, std::int64_t num_heads) {
  const auto layer = attention_layer_parameters(dict, prefix);
  MultiheadAttention<T> module(options_for(describe_attention_layer(layer), num_heads));
  module.load_state_dict(layer);
  module.eval();
  return module;
}

}  // namespace mha
