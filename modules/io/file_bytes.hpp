// modules/io/file_bytes.hpp (internal) — bytes of a file, read by offset.
//
// The one place where the readers seek and read. A checkpoint's header is read once and
// its tensors later, each from its own offset when it is asked for; between the two the
// file may have been cut short or replaced, so each read first checks that the file still
// has the size its header was checked against, and then that every byte it asked for came.
//
// Not part of the API: not exported, namespace mha::detail.
//
// Included by modules/io.cppm, in its module purview: no module line of its own.
// Uses mha.core.

namespace mha::detail {

// The size of a file in bytes; an Error (naming `what`) when it cannot be read.
std::size_t file_size_of(const std::filesystem::path& path, const std::string& what) {
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  if (error) throw Error(fmt::format("{}: cannot open file", what));
  return static_cast<std::size_t>(size);
}

// `count` bytes of the file at byte `offset`, into `destination`. The file must still be
// `file_size` bytes long, as it was when its header was checked.
void read_file_range(const std::filesystem::path& path, std::size_t file_size, std::size_t offset, std::size_t count,
                     char* destination, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  const std::size_t now = file_size_of(path, what);
  if (!in) throw Error(fmt::format("{}: cannot open file", what));
  if (now != file_size)
    throw Error(fmt::format("{}: {} is {} bytes now, but was {} when its header was read: the file has changed", what,
                            path.string(), now, file_size));
  if (count == 0) return;
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(destination, static_cast<std::streamsize>(count));
  if (static_cast<std::size_t>(in.gcount()) != count)
    throw Error(fmt::format("{}: expected {} bytes at byte {} of {}, read {}", what, count, offset, path.string(),
                            in.gcount()));
}

// The same bytes, as a vector.
std::vector<char> read_file_bytes(const std::filesystem::path& path, std::size_t file_size, std::size_t offset,
                                  std::size_t count, const std::string& what) {
  std::vector<char> bytes(count);
  read_file_range(path, file_size, offset, count, bytes.data(), what);
  return bytes;
}

}  // namespace mha::detail
