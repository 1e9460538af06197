// modules/io/dtypes.hpp (internal) — the element types the readers know, under each format's name.
//
// One element type has three spellings: NumPy's descr in a .npy header ('<f4'), the
// safetensors dtype ("F32"), and the name NumPy and PyTorch print (float32). This table
// holds the three with the size in bytes, so that both readers check a dtype against one
// list. It also says which types are floating point: only those are weights. A model's
// integer and bool tensors (position_ids, an attention mask) are kept out of a StateDict
// of weights rather than rejected (see weight_names below).
//
// Not part of the API: not exported, namespace mha::detail.
//
// Included by modules/io.cppm, in its module purview: no module line of its own.
// Uses mha.core.

namespace mha::detail {

struct Dtype {
  std::string_view descr;        // NumPy's, little-endian; empty when NumPy has none (bfloat16)
  std::string_view safetensors;  // the safetensors format's
  std::string_view name;         // as NumPy and PyTorch print it
  std::size_t itemsize;          // bytes per element
  bool floating;                 // a floating-point type: readable as weights
};

inline constexpr Dtype known_dtypes[] = {
    {"|b1", "BOOL", "bool", 1, false},  {"|i1", "I8", "int8", 1, false},    {"|u1", "U8", "uint8", 1, false},
    {"<i2", "I16", "int16", 2, false},  {"<u2", "U16", "uint16", 2, false}, {"<f2", "F16", "float16", 2, true},
    {"", "BF16", "bfloat16", 2, true},  {"<i4", "I32", "int32", 4, false},  {"<u4", "U32", "uint32", 4, false},
    {"<f4", "F32", "float32", 4, true}, {"<i8", "I64", "int64", 8, false},  {"<u8", "U64", "uint64", 8, false},
    {"<f8", "F64", "float64", 8, true},
};

// The type of a NumPy descr ('<f4'), or nullptr for one the readers do not know.
const Dtype* dtype_of_descr(std::string_view descr) {
  for (const auto& d : known_dtypes)
    if (!d.descr.empty() && d.descr == descr) return &d;
  return nullptr;
}

// The type of a safetensors dtype ("F32"), or nullptr for a name the format does not have.
const Dtype* dtype_of_safetensors(std::string_view dtype) {
  for (const auto& d : known_dtypes)
    if (d.safetensors == dtype) return &d;
  return nullptr;
}

// Whether a type, by the name NumPy prints (float32, int64), is a floating-point one.
bool is_floating(std::string_view name) {
  for (const auto& d : known_dtypes)
    if (d.name == name) return d.floating;
  return false;
}

// The bytes a tensor of `shape` needs, numel x itemsize, computed without overflow. The
// product of the non-zero dimensions must fit in a signed size even when another
// dimension is 0: xtensor computes the strides from it (a fuzzer found the overflow).
std::size_t tensor_bytes(const std::vector<std::size_t>& shape, std::size_t itemsize, const std::string& what) {
  const auto limit = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());
  std::size_t extent = itemsize;
  for (auto d : shape) {
    if (d != 0 && extent > limit / d) throw Error(fmt::format("{}: shape {} is too large", what, shape_string(shape)));
    if (d != 0) extent *= d;
  }
  const bool empty = std::find(shape.begin(), shape.end(), std::size_t{0}) != shape.end();
  return empty ? 0 : extent;
}

// One tensor of a checkpoint by its key and its type's printed name.
struct NamedDtype {
  std::string name;
  std::string dtype;  // float32, int64, ...
};

// The keys that start with `prefix` and hold floating-point tensors: the weights a
// StateDict takes. Integer and bool tensors are left out. An Error when no key starts
// with the prefix, or when every one that does holds integers or bools. `what` names the
// things listed ("tensor", ".npy file"), `where` the file or folder.
std::vector<std::string> weight_names(const std::vector<NamedDtype>& tensors, std::string_view prefix,
                                      std::string_view what, const std::string& where) {
  std::vector<std::string> names, others;
  for (const auto& t : tensors) {
    if (!t.name.starts_with(prefix)) continue;
    if (is_floating(t.dtype)) names.push_back(t.name);
    else others.push_back(fmt::format("'{}' {}", t.name, t.dtype));
  }
  check(!names.empty() || !others.empty(), "prefix", "no {} in {} starts with '{}'", what, where, prefix);
  check(!names.empty(), "prefix",
        "every {} in {} that starts with '{}' holds integers or bools, and none is a weight (expected a "
        "floating-point dtype): {}",
        what, where, prefix, fmt::join(others, ", "));
  return names;
}

}  // namespace mha::detail
