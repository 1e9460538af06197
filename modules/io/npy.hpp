// modules/io/npy.hpp — reading and writing NumPy .npy files (format 1.0, 2.0 and 3.0).
//
// The golden tensors PyTorch wrote with numpy.save come in through here. The reader
// trusts nothing in the file: the magic string, the header, the dtype, the shape and
// the data size are all checked before a byte of data is used (npy_header.hpp), and every
// problem is an mha::Error naming the file. Only little-endian, C-order arrays are
// accepted. This is not a general NumPy reader: no structured dtypes, no pickled objects.
//
// Included by modules/io.cppm, in its module purview: no module line of its own.
// Uses mha, dtypes.hpp, npy_header.hpp.

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
// A descr the readers do not know is returned as it is.
std::string dtype_name(std::string_view descr) {
  if (const detail::Dtype* d = detail::dtype_of_descr(descr)) return std::string(d->name);
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

// Parses the bytes of a whole .npy file; `where` names it in messages. Throws mha::Error
// for anything malformed.
NpyArray parse_npy(std::span<const char> file, const std::string& where) {
  const detail::NpyHeader header = detail::parse_npy_header(file, file.size(), where);
  NpyArray array{header.descr, header.shape, {}};
  array.bytes.assign(file.begin() + static_cast<std::ptrdiff_t>(header.data_start), file.end());
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
