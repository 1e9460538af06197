// modules/io/safetensors_header.hpp (internal) — the header of a .safetensors file, checked.
//
// A .safetensors file is
//
//   [8 bytes]  n, the header length, an unsigned little-endian integer
//   [n bytes]  a JSON object: for each tensor name {"dtype": "F32", "shape": [3, 4],
//              "data_offsets": [begin, end]}, plus an optional "__metadata__" object
//              of strings
//   [rest]     the data: each tensor's bytes, little-endian and C-ordered, at
//              [begin, end) counted from the start of this section
//
// This file checks what the header declares against the file's size, before any
// data is read: each entry's dtype, shape and offsets, that its size is numel x itemsize,
// and that the tensors tile the data section exactly (no overlap, no gap, nothing left
// over), as the reference implementation (the safetensors crate,
// `SafeTensors::deserialize`) demands; and writes the length and header of a new file.
// Every problem is an mha::Error naming the file and the tensor.
//
// Not part of the API: not exported, namespace mha::detail.
//
// Included by modules/io.cppm, in its module purview: no module line of its own.
// Uses mha.core, dtypes.hpp.

namespace mha::detail {

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

// Where one tensor lies in the data section, as the header declares it.
struct HeaderEntry {
  std::string name, dtype;
  std::vector<std::size_t> shape;
  std::size_t begin = 0, end = 0;
};

// One entry's fields, each of the right kind: dtype a known name, shape and offsets
// non-negative integers, end >= begin.
HeaderEntry parse_header_entry(const std::string& name, const nlohmann::json& j, const std::string& what) {
  if (!j.is_object())
    throw Error(fmt::format("{}: expected an object with dtype, shape and data_offsets, got {}", what, j.dump()));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!j.contains(key)) throw Error(fmt::format("{}: header entry has no '{}'", what, key));
  HeaderEntry e;
  e.name = name;
  if (!j["dtype"].is_string()) throw Error(fmt::format("{}: dtype must be a string, got {}", what, j["dtype"].dump()));
  e.dtype = j["dtype"].get<std::string>();
  if (dtype_of_safetensors(e.dtype) == nullptr)
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

// One entry, checked: its fields, then its size (shape x itemsize) and its place inside
// the data section of `data_size` bytes.
HeaderEntry checked_header_entry(const std::string& name, const nlohmann::json& j, std::size_t data_size,
                                 const std::string& where) {
  const std::string what = fmt::format("{}: tensor '{}'", where, name);
  HeaderEntry e = parse_header_entry(name, j, what);
  const std::size_t expected = tensor_bytes(e.shape, dtype_of_safetensors(e.dtype)->itemsize, what);
  if (e.end - e.begin != expected)
    throw Error(fmt::format("{}: data_offsets [{}, {}] hold {} bytes, but shape {} of {} needs {}", what, e.begin,
                            e.end, e.end - e.begin, shape_string(e.shape), e.dtype, expected));
  if (e.end > data_size)
    throw Error(fmt::format("{}: data_offsets [{}, {}] go beyond the data section ({} bytes)", what, e.begin, e.end,
                            data_size));
  return e;
}

// The entries must tile [0, data_size): sorted by begin, each starts where the last ended.
void check_tiling(std::vector<HeaderEntry>& entries, std::size_t data_size, const std::string& where) {
  std::sort(entries.begin(), entries.end(), [](const HeaderEntry& a, const HeaderEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::size_t expected_begin = 0;
  const HeaderEntry* previous = nullptr;
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

// The header length: 8 bytes, and no more than the file holds after them. Returns the
// offset of the data section. `start` holds the file's first min(8, file_size) bytes.
std::size_t safetensors_data_start(std::span<const char> start, std::size_t file_size, const std::string& where) {
  if (file_size < 8 || start.size() < 8)
    throw Error(fmt::format("{}: truncated: {} bytes, too short for the 8-byte header length", where, file_size));
  const std::uint64_t n = read_le64(start.data());
  if (n > file_size - 8)
    throw Error(fmt::format("{}: header length {} goes beyond the end of the file ({} bytes after the length)", where,
                            n, file_size - 8));
  return 8 + static_cast<std::size_t>(n);
}

// The JSON header: an object, or an Error.
nlohmann::json parse_header_json(std::string_view text, const std::string& where) {
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: header is not valid JSON: {}", where, e.what()));
  }
  if (!header.is_object()) throw Error(fmt::format("{}: header is not a JSON object", where));
  return header;
}

// A new file's 8-byte length and header, the header padded with spaces to a multiple of 8
// bytes, as the safetensors crate does, so that the data starts aligned.
void write_safetensors_header(std::ofstream& out, const nlohmann::json& header) {
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  char length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<char>((static_cast<std::uint64_t>(text.size()) >> (8 * i)) & 0xff);
  out.write(length, 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

}  // namespace mha::detail
