// modules/io/npy_header.hpp (internal) — the header of a .npy file, read and checked.
//
// A .npy file (numpy/lib/format.py) is
//
//   [6 bytes]      the magic string "\x93NUMPY"
//   [2 bytes]      the format version, major and minor (1.0, 2.0 or 3.0)
//   [2 or 4 bytes] n, the header length, little-endian: 2 bytes in 1.0, 4 in 2.0 and 3.0
//   [n bytes]      a Python dict literal, padded with spaces and ended by '\n':
//                  {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
//   [rest]         the data, shape x itemsize bytes in C order
//
// The header alone says what the file holds, so a folder of .npy files can be listed
// without reading its data. Every field, and the data's size against the file's, is
// checked here; each problem is an mha::Error naming the file.
//
// Not part of the API: not exported, namespace mha::detail.
//
// Included by modules/io.cppm, in its module purview: no module line of its own.
// Uses mha.core, dtypes.hpp, file_bytes.hpp.

namespace mha::detail {

// What the header says, and where the data begins.
struct NpyHeader {
  std::string descr;               // '<f4', '|b1', ...
  std::vector<std::size_t> shape;  // () for a scalar
  std::size_t data_start = 0;      // the data's first byte in the file
};

// The value of `key` in NumPy's header dict, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
std::string_view npy_header_value(std::string_view header, std::string_view key, const std::string& where) {
  const std::string quoted = fmt::format("'{}':", key);
  const auto at = header.find(quoted);
  if (at == std::string_view::npos) throw Error(fmt::format("{}: npy header has no '{}'", where, key));
  std::string_view rest = header.substr(at + quoted.size());
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  std::size_t end = 0;
  if (!rest.empty() && rest.front() == '(') end = rest.find(')');
  else if (!rest.empty() && rest.front() == '\'') end = rest.find('\'', 1);
  else end = rest.find_first_of(",}");
  if (end == std::string_view::npos) throw Error(fmt::format("{}: npy header value of '{}' is not closed", where, key));
  return rest.substr(0, end + (rest.front() == '(' || rest.front() == '\'' ? 1 : 0));
}

// "(2, 3)", "(5,)" or "()" -> {2, 3}, {5}, {}
std::vector<std::size_t> parse_npy_shape(std::string_view text, const std::string& where) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')')
    throw Error(fmt::format("{}: npy shape '{}' is not a tuple", where, text));
  // Integers separated by commas, as Python writes a tuple: "(2 3)" and "(2,,3)" are not.
  std::vector<std::size_t> shape;
  const std::size_t end = text.size() - 1;  // the ')'
  std::size_t i = 1;
  const auto skip_spaces = [&] {
    while (i < end && text[i] == ' ') ++i;
  };
  skip_spaces();
  while (i < end) {
    std::size_t value = 0, digits = 0;
    for (; i < end && text[i] >= '0' && text[i] <= '9'; ++i, ++digits) {
      if (value > (std::numeric_limits<std::size_t>::max() - 9) / 10)
        throw Error(fmt::format("{}: npy shape '{}' is too large", where, text));
      value = value * 10 + static_cast<std::size_t>(text[i] - '0');
    }
    if (digits == 0) throw Error(fmt::format("{}: npy shape '{}' is not a tuple of integers", where, text));
    shape.push_back(value);
    skip_spaces();
    if (i < end) {  // another dimension follows, after a comma
      if (text[i] != ',') throw Error(fmt::format("{}: npy shape '{}' is not a tuple of integers", where, text));
      ++i;
    }
    skip_spaces();
  }
  return shape;
}

// The first bytes of the file: magic string, version and header length. Returns the
// offset of the data, checked against the file's size. `start` holds the file's first
// min(12, file_size) bytes.
std::size_t npy_data_start(std::span<const char> start, std::size_t file_size, const std::string& where) {
  if (file_size < 10 || start.size() < 10 || std::memcmp(start.data(), "\x93NUMPY", 6) != 0)
    throw Error(fmt::format("{}: not a .npy file (bad magic string)", where));
  const auto major = static_cast<unsigned char>(start[6]);
  if (major < 1 || major > 3) throw Error(fmt::format("{}: unsupported .npy format version {}", where, major));
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  if (file_size < 8 + length_bytes || start.size() < 8 + length_bytes)
    throw Error(fmt::format("{}: truncated .npy header", where));
  std::size_t header_len = 0;
  for (std::size_t i = 0; i < length_bytes; ++i)
    header_len |= static_cast<std::size_t>(static_cast<unsigned char>(start[8 + i])) << (8 * i);
  const std::size_t data_start = 8 + length_bytes + header_len;
  if (data_start > file_size)
    throw Error(fmt::format("{}: truncated .npy header ({} bytes declared, {} in file)", where, header_len, file_size));
  return data_start;
}

// The bytes per element of a descr the readers know, or an Error.
std::size_t npy_itemsize(std::string_view descr, const std::string& where) {
  if (const Dtype* d = dtype_of_descr(descr)) return d->itemsize;
  throw Error(
      fmt::format("{}: unsupported dtype '{}' (expected a little-endian bool, integer or float)", where, descr));
}

// The data must be exactly shape x itemsize bytes.
void check_npy_data_size(const NpyHeader& h, std::size_t data_bytes, const std::string& where) {
  const std::size_t expected = tensor_bytes(h.shape, npy_itemsize(h.descr, where), where + ": npy");
  if (data_bytes != expected)
    throw Error(fmt::format("{}: expected {} data bytes for shape {} of {}, got {}", where, expected,
                            shape_string(h.shape), dtype_of_descr(h.descr)->name, data_bytes));
}

// The header of a file of `file_size` bytes whose first data_start bytes are `start`
// (at least those of the magic string, version and length): every field checked, and
// the size of the data that follows.
NpyHeader parse_npy_header(std::span<const char> start, std::size_t file_size, const std::string& where) {
  // 1) magic string, version, header length
  NpyHeader h;
  h.data_start = npy_data_start(start.first(std::min<std::size_t>(start.size(), 12)), file_size, where);
  if (start.size() < h.data_start) throw Error(fmt::format("{}: truncated .npy header", where));
  const std::size_t header_start = static_cast<unsigned char>(start[6]) == 1 ? 10 : 12;
  const std::string_view header(start.data() + header_start, h.data_start - header_start);

  // 2) the header dict: descr, fortran_order, shape
  const auto descr = npy_header_value(header, "descr", where);
  if (descr.size() < 2) throw Error(fmt::format("{}: npy descr is empty", where));
  h.descr = std::string(descr.substr(1, descr.size() - 2));
  if (npy_header_value(header, "fortran_order", where) != "False")
    throw Error(fmt::format("{}: Fortran-order arrays are not supported (expected fortran_order False)", where));
  h.shape = parse_npy_shape(npy_header_value(header, "shape", where), where);

  // 3) the data that follows the header
  check_npy_data_size(h, file_size - h.data_start, where);
  return h;
}

// The header of a .npy file, read without its data.
NpyHeader read_npy_header(const std::filesystem::path& path) {
  const std::string where = path.string();
  const std::size_t file_size = file_size_of(path, where);
  const auto start = read_file_bytes(path, file_size, 0, std::min<std::size_t>(file_size, 12), where);
  const std::size_t data_start = npy_data_start(start, file_size, where);
  return parse_npy_header(read_file_bytes(path, file_size, 0, data_start, where), file_size, where);
}

}  // namespace mha::detail
