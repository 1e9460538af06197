// modules/io/safetensors.hpp — .safetensors files, the format PyTorch users save state_dicts in.
//
//   [8 bytes]  n, the header length, an unsigned little-endian integer
//   [n bytes]  a JSON object: for each tensor name {"dtype": "F32", "shape": [3, 4],
//              "data_offsets": [begin, end]}, plus an optional "__metadata__" object
//              of strings
//   [rest]     the data: each tensor's bytes, little-endian and C-ordered, at
//              [begin, end) counted from the start of this section
//
// A file is opened by its header alone: read_safetensors reads the 8 + n bytes, checks
// every entry against the file's size (safetensors_header.hpp: the header length, each
// dtype, shape and size, and offsets that tile the data section exactly), and keeps where
// each tensor lies. A tensor's bytes are read from its offset only when it is asked for
// (read_tensor, tensor<T>), so listing a checkpoint of gigabytes reads a few kilobytes.
// Anything wrong is an mha::Error that names the file and the tensor.
//
// Values are converted only where nothing is lost: F16 and BF16 widen exactly to float
// and double; F32 and F64 must match the module's type. Integer and bool tensors (a
// model's position ids, say) are valid in a file and readable as raw bytes (read_tensor),
// but are not weights: to_xarray and tensor<T> reject them, and load_safetensors, which
// loads a whole file as weights, leaves them out. Files are also written, so that
// parameters round-trip.
//
// Included by modules/io.cppm, in its module purview: no module line of its own.
// Uses mha, dtypes.hpp, file_bytes.hpp, safetensors_header.hpp.

export namespace mha {

// One tensor as the header declares it (the safetensors crate's TensorInfo): its dtype
// name ("F32", "BF16", ...), its shape, and where its bytes lie in the data section.
struct SafetensorsEntry {
  std::string dtype;
  std::vector<std::size_t> shape;
  std::size_t begin = 0, end = 0;  // data_offsets: [begin, end) of the data section

  std::size_t byte_size() const { return end - begin; }
};

// One tensor read from a file: its dtype name, its shape and its raw little-endian bytes.
struct SafetensorsTensor {
  std::string dtype;
  std::vector<std::size_t> shape;
  std::vector<char> bytes;
};

// One "__metadata__" entry: free-form text under a key.
// (A struct, not std::map<std::string, std::string>: clang 16 reported a false ODR mismatch
// for std::pair<const std::string, std::string> between this file and a program that
// included CLI11 before `import mha.io;`, as the tools did before tools/arguments.cpp.)
struct MetadataEntry {
  std::string key, value;
};

// A file opened by its header: every tensor's entry (by name, sorted), the "__metadata__"
// entries (by key), and where the data begins. No tensor data is held.
struct Safetensors {
  std::filesystem::path path;
  std::size_t file_size = 0;   // when the header was read; a tensor read checks it again
  std::size_t data_start = 0;  // 8 + n: the first byte of the data section
  std::map<std::string, SafetensorsEntry> tensors;
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
  const auto* d = detail::dtype_of_safetensors(dtype);
  return d ? d->itemsize : 0;
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

}  // namespace mha

namespace mha::detail {

// "__metadata__": an object of strings.
std::vector<MetadataEntry> parse_metadata(const nlohmann::json& value, const std::string& where) {
  if (!value.is_object()) throw Error(fmt::format("{}: __metadata__ must be an object of strings", where));
  std::vector<MetadataEntry> metadata;
  for (const auto& [key, text] : value.items()) {
    if (!text.is_string())
      throw Error(fmt::format("{}: __metadata__ '{}' must be a string, got {}", where, key, text.dump()));
    metadata.push_back({key, text.get<std::string>()});
  }
  return metadata;
}

// The entry of tensor `name`, or an Error naming it and the file.
const SafetensorsEntry& entry_of(const Safetensors& st, const std::string& name) {
  const auto it = st.tensors.find(name);
  check(it != st.tensors.end(), name, "no such tensor in {}", st.path.string());
  return it->second;
}

// The bytes of one tensor, from its offset, into `destination` (entry.byte_size() bytes).
void read_entry_bytes(const Safetensors& st, const std::string& name, const SafetensorsEntry& entry,
                      char* destination) {
  read_file_range(st.path, st.file_size, st.data_start + entry.begin, entry.byte_size(), destination,
                  fmt::format("{}: tensor '{}'", st.path.string(), name));
}

// A tensor of `dtype` can be read as the type whose dtype is `wanted` (F32 or F64): it is
// that dtype, or F16 / BF16, widened.
void check_weight_dtype(std::string_view dtype, std::string_view wanted, std::string_view name) {
  check(dtype == wanted || dtype == "F16" || dtype == "BF16", name,
        "expected dtype {} ({}), or F16 / BF16 (widened exactly), got {}", wanted, dtype_of_safetensors(wanted)->name,
        dtype);
}

// The floating-point tensors whose names start with `prefix`, for load_safetensors.
std::vector<std::string> safetensors_weight_names(const Safetensors& st, std::string_view prefix) {
  std::vector<NamedDtype> tensors;
  tensors.reserve(st.tensors.size());
  for (const auto& [name, entry] : st.tensors)
    tensors.push_back({name, std::string(dtype_of_safetensors(entry.dtype)->name)});
  return weight_names(tensors, prefix, "tensor", st.path.string());
}

// The header of a new file: each tensor's dtype, shape and offsets in map order, as
// `describe(tensor)` gives the first two; then the metadata.
template <class Map, class Describe>
nlohmann::json header_for(const Map& tensors, const std::vector<MetadataEntry>& metadata, Describe describe) {
  nlohmann::json header = nlohmann::json::object();
  for (const auto& m : metadata) header["__metadata__"][m.key] = m.value;
  std::size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    check(name != "__metadata__", "tensors", "'__metadata__' is reserved and cannot name a tensor");
    const auto [dtype, shape] = describe(t);
    const std::size_t bytes = tensor_bytes(shape, safetensors_itemsize(dtype), name);
    header[name] = {{"dtype", std::string(dtype)}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  return header;
}

// Writes a file: the length and the header, then the data as `write_data(out)` writes it.
template <class WriteData>
void write_safetensors_file(const std::filesystem::path& path, const nlohmann::json& header, WriteData write_data) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error(fmt::format("{}: cannot write file", path.string()));
  write_safetensors_header(out, header);
  write_data(out);
  if (!out) throw Error(fmt::format("{}: write failed", path.string()));
}

}  // namespace mha::detail

export namespace mha {

// Opens a .safetensors file by its header: reads the 8 + n bytes before the data and
// checks them against the file's size. Throws mha::Error for anything malformed.
Safetensors read_safetensors(const std::filesystem::path& path) {
  const std::string where = path.string();
  Safetensors st;
  st.path = path;
  st.file_size = detail::file_size_of(path, where);

  // 1) the header length: 8 bytes, and no more than the file holds after them
  const auto length = detail::read_file_bytes(path, st.file_size, 0, std::min<std::size_t>(st.file_size, 8), where);
  st.data_start = detail::safetensors_data_start(length, st.file_size, where);
  const std::size_t data_size = st.file_size - st.data_start;

  // 2) the JSON header
  const auto text = detail::read_file_bytes(path, st.file_size, 8, st.data_start - 8, where);
  const nlohmann::json header = detail::parse_header_json({text.data(), text.size()}, where);

  // 3) every entry: dtype, shape, offsets; size = numel * itemsize; inside the data; tiling
  std::vector<detail::HeaderEntry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") st.metadata = detail::parse_metadata(value, where);
    else entries.push_back(detail::checked_header_entry(name, value, data_size, where));
  }
  detail::check_tiling(entries, data_size, where);
  for (auto& e : entries) st.tensors.emplace(e.name, SafetensorsEntry{e.dtype, std::move(e.shape), e.begin, e.end});
  return st;
}

// The raw bytes of tensor `name`, read from its offset: any dtype, integers included.
SafetensorsTensor read_tensor(const Safetensors& st, const std::string& name) {
  const SafetensorsEntry& entry = detail::entry_of(st, name);
  SafetensorsTensor tensor{entry.dtype, entry.shape, std::vector<char>(entry.byte_size())};
  detail::read_entry_bytes(st, name, entry, tensor.bytes.data());
  return tensor;
}

// One tensor as an xt::xarray<T>: F16 and BF16 are widened, F32 and F64 must be T's.
template <class T>
xt::xarray<T> to_xarray(const SafetensorsTensor& tensor, std::string_view name) {
  detail::check_weight_dtype(tensor.dtype, safetensors_dtype<T>(), name);
  const bool half = tensor.dtype == "F16", bf16 = tensor.dtype == "BF16";
  xt::xarray<T> out = xt::xarray<T>::from_shape(tensor.shape);
  // read_tensor guarantees this; a SafetensorsTensor put together by hand may not.
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

// The tensor `name` of the file, as T, read from its offset. A tensor of T's own dtype is
// read straight into the array; F16 and BF16 go through their bytes to be widened.
template <class T>
xt::xarray<T> tensor(const Safetensors& st, const std::string& name) {
  const SafetensorsEntry& entry = detail::entry_of(st, name);
  detail::check_weight_dtype(entry.dtype, safetensors_dtype<T>(), name);
  if (entry.dtype != safetensors_dtype<T>()) return to_xarray<T>(read_tensor(st, name), name);
  xt::xarray<T> out = xt::xarray<T>::from_shape(entry.shape);
  detail::read_entry_bytes(st, name, entry, reinterpret_cast<char*>(out.data()));
  return out;
}

// Every floating-point tensor of the file whose name starts with `prefix`, the prefix
// removed, as T; an empty prefix takes the whole file. Integer and bool tensors are not
// weights and are left out (read_tensor reads them); an Error when no tensor starts with
// the prefix, or when all that do are integer or bool.
template <class T>
StateDict<T> load_safetensors(const std::filesystem::path& path, std::string_view prefix = "") {
  const auto st = read_safetensors(path);
  StateDict<T> dict;
  for (const auto& name : detail::safetensors_weight_names(st, prefix))
    dict.emplace(name.substr(prefix.size()), tensor<T>(st, name));
  return dict;
}

// Writes tensors as a .safetensors file of T's dtype, names sorted; `metadata` becomes
// "__metadata__".
template <class T>
void save_safetensors(const std::filesystem::path& path, const StateDict<T>& tensors,
                      const std::vector<MetadataEntry>& metadata = {}) {
  const auto header = detail::header_for(tensors, metadata, [](const xt::xarray<T>& t) {
    return std::pair{safetensors_dtype<T>(), std::vector<std::size_t>(t.shape().begin(), t.shape().end())};
  });
  detail::write_safetensors_file(path, header, [&](std::ofstream& out) {
    for (const auto& [name, t] : tensors) {
      const xt::xarray<T> contiguous = t;  // C order, whatever layout the caller's array had
      out.write(reinterpret_cast<const char*>(contiguous.data()),
                static_cast<std::streamsize>(contiguous.size() * sizeof(T)));
    }
  });
}

// Writes raw tensors of any dtype (integers and bools included), as read_tensor returns
// them; each must hold the bytes its dtype and shape need.
void save_safetensors(const std::filesystem::path& path, const std::map<std::string, SafetensorsTensor>& tensors,
                      const std::vector<MetadataEntry>& metadata = {}) {
  for (const auto& [name, t] : tensors) {
    check(safetensors_itemsize(t.dtype) != 0, name, "unknown dtype '{}'", t.dtype);
    const std::size_t needed = detail::tensor_bytes(t.shape, safetensors_itemsize(t.dtype), name);
    check(t.bytes.size() == needed, name, "holds {} bytes, but shape {} of {} needs {}", t.bytes.size(),
          shape_string(t.shape), t.dtype, needed);
  }
  const auto header = detail::header_for(tensors, metadata, [](const SafetensorsTensor& t) {
    return std::pair{std::string_view(t.dtype), t.shape};
  });
  detail::write_safetensors_file(path, header, [&](std::ofstream& out) {
    for (const auto& [name, t] : tensors) out.write(t.bytes.data(), static_cast<std::streamsize>(t.bytes.size()));
  });
}

}  // namespace mha
