// mha:npy — reading and writing NumPy .npy files (format 1.0, 2.0 and 3.0).
//
// The golden tensors PyTorch wrote with numpy.save come in through here. The reader
// trusts nothing in the file: the magic string, the header, the dtype, the shape and
// the data size are all checked before a byte of data is used, and every problem is
// an mha::Error naming the file. Only little-endian, C-order arrays are accepted.
// This is not a general NumPy reader: no structured dtypes, no pickled objects.
module;
#include "third_party.hpp"

export module mha:npy;

import :error;

export namespace mha {

// An array as it is in the file: NumPy's dtype string ('<f4', '|b1', ...), its shape,
// and the raw little-endian bytes.
struct NpyArray {
  std::string descr;
  std::vector<std::size_t> shape;
  std::vector<char> bytes;

  std::size_t size() const {
    std::size_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

// The dtype name of a descr: '<f4' -> "float32", '|b1' -> "bool", '<i4' -> "int32".
std::string dtype_name(std::string_view descr) {
  static constexpr std::pair<std::string_view, std::string_view> names[] = {
      {"|b1", "bool"},  {"|i1", "int8"},   {"|u1", "uint8"},   {"<i2", "int16"}, {"<u2", "uint16"}, {"<f2", "float16"},
      {"<i4", "int32"}, {"<u4", "uint32"}, {"<f4", "float32"}, {"<i8", "int64"}, {"<u8", "uint64"}, {"<f8", "float64"}};
  for (auto [d, name] : names)
    if (descr == d) return std::string(name);
  return std::string(descr);
}

// NumPy's descr for T.
template <class T>
constexpr std::string_view npy_descr() {
  if constexpr (std::is_same_v<T, float>) return "<f4";
  else if constexpr (std::is_same_v<T, double>) return "<f8";
  else if constexpr (std::is_same_v<T, bool>) return "|b1";
  else static_assert(sizeof(T) == 0, "npy: only float, double and bool are supported");
}

namespace npy_detail {

std::size_t itemsize(std::string_view descr, const std::string& where) {
  // Every dtype dtype_name() knows: one kind letter and the size in bytes, e.g. '<f4'.
  if (dtype_name(descr) != descr) return static_cast<std::size_t>(descr.back() - '0');
  throw Error(
      fmt::format("{}: unsupported dtype '{}' (expected a little-endian bool, integer or float)", where, descr));
}

// The value of `key` in NumPy's header dict, e.g. {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
std::string_view header_value(std::string_view header, std::string_view key, const std::string& where) {
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

std::vector<std::size_t> parse_shape(std::string_view text, const std::string& where) {
  // "(2, 3)", "(5,)" or "()"
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
    if (i < end && text[i++] != ',')
      throw Error(fmt::format("{}: npy shape '{}' is not a tuple of integers", where, text));
    skip_spaces();
  }
  return shape;
}

}  // namespace npy_detail

// Parses the bytes of a whole .npy file; `where` names it in messages. Throws mha::Error
// for anything malformed.
NpyArray parse_npy(std::span<const char> file, const std::string& where) {
  // 1) magic "\x93NUMPY", version, header length (2 bytes in 1.0, 4 bytes in 2.0 and 3.0)
  if (file.size() < 10 || std::memcmp(file.data(), "\x93NUMPY", 6) != 0)
    throw Error(fmt::format("{}: not a .npy file (bad magic string)", where));
  const auto major = static_cast<unsigned char>(file[6]);
  if (major < 1 || major > 3) throw Error(fmt::format("{}: unsupported .npy format version {}", where, major));
  const std::size_t length_bytes = major == 1 ? 2 : 4;
  if (file.size() < 8 + length_bytes) throw Error(fmt::format("{}: truncated .npy header", where));
  std::size_t header_len = 0;
  for (std::size_t i = 0; i < length_bytes; ++i)
    header_len |= static_cast<std::size_t>(static_cast<unsigned char>(file[8 + i])) << (8 * i);
  const std::size_t data_start = 8 + length_bytes + header_len;
  if (data_start > file.size())
    throw Error(
        fmt::format("{}: truncated .npy header ({} bytes declared, {} in file)", where, header_len, file.size()));
  const std::string_view header(file.data() + 8 + length_bytes, header_len);

  // 2) the header dict: descr, fortran_order, shape
  NpyArray array;
  const auto descr = npy_detail::header_value(header, "descr", where);
  if (descr.size() < 2) throw Error(fmt::format("{}: npy descr is empty", where));
  array.descr = std::string(descr.substr(1, descr.size() - 2));
  if (npy_detail::header_value(header, "fortran_order", where) != "False")
    throw Error(fmt::format("{}: Fortran-order arrays are not supported (expected fortran_order False)", where));
  array.shape = npy_detail::parse_shape(npy_detail::header_value(header, "shape", where), where);

  // 3) the data: exactly size * itemsize bytes, computed without overflow. The product of
  // the non-zero dimensions must fit in a signed size even when another dimension is 0:
  // xtensor computes the strides from it.
  const std::size_t item = npy_detail::itemsize(array.descr, where);
  const auto limit = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());
  std::size_t extent = item;
  for (auto d : array.shape) {
    if (d != 0 && extent > limit / d)
      throw Error(fmt::format("{}: npy shape {} is too large", where, shape_string(array.shape)));
    if (d != 0) extent *= d;
  }
  const bool empty = std::find(array.shape.begin(), array.shape.end(), std::size_t{0}) != array.shape.end();
  const std::size_t expected = empty ? 0 : extent;
  const std::size_t actual = file.size() - data_start;
  if (actual != expected)
    throw Error(fmt::format("{}: expected {} data bytes for shape {} of {}, got {}", where, expected,
                            shape_string(array.shape), dtype_name(array.descr), actual));
  array.bytes.assign(file.begin() + static_cast<std::ptrdiff_t>(data_start), file.end());
  return array;
}

// Reads a whole .npy file. Throws mha::Error for anything malformed.
NpyArray read_npy(const std::filesystem::path& path) {
  const std::string where = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open file", where));
  const std::vector<char> file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_npy(file, where);
}

// The array as an xt::xarray<T>; its dtype must be exactly T's (nothing is converted).
template <class T>
xt::xarray<T> to_xarray(const NpyArray& array, std::string_view name) {
  check(array.descr == npy_descr<T>(), name, "expected dtype {}, got {}", dtype_name(npy_descr<T>()),
        dtype_name(array.descr));
  xt::xarray<T> out = xt::xarray<T>::from_shape(array.shape);
  if constexpr (std::is_same_v<T, bool>) {
    for (std::size_t i = 0; i < out.size(); ++i) out.data()[i] = array.bytes[i] != 0;
  } else {
    if (!array.bytes.empty()) std::memcpy(out.data(), array.bytes.data(), array.bytes.size());
  }
  return out;
}

// Reads a .npy file of dtype T.
template <class T>
xt::xarray<T> load_npy(const std::filesystem::path& path) {
  return to_xarray<T>(read_npy(path), path.string());
}

// Writes a .npy file (format 1.0) as numpy.save does.
template <class T, class E>
void save_npy(const std::filesystem::path& path, const E& expression) {
  const xt::xarray<T> a = expression;
  std::string shape;
  for (auto d : a.shape()) shape += fmt::format("{}, ", d);
  if (a.dimension() > 1) shape.resize(shape.size() - 2);
  else if (a.dimension() == 1) shape.pop_back();
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", npy_descr<T>(), shape);
  // Pad with spaces so that the data starts at a multiple of 64 bytes, ending in '\n'.
  const std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error(fmt::format("{}: cannot write file", path.string()));
  const std::uint16_t len = static_cast<std::uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  const char len_bytes[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(len_bytes, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  if constexpr (std::is_same_v<T, bool>) {
    for (bool b : a) out.put(b ? 1 : 0);
  } else {
    out.write(reinterpret_cast<const char*>(a.data()), static_cast<std::streamsize>(a.size() * sizeof(T)));
  }
  if (!out) throw Error(fmt::format("{}: write failed", path.string()));
}

}  // namespace mha
