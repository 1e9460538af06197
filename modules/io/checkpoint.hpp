// modules/io/checkpoint.hpp — a trained model's weights, opened by their headers.
//
// A checkpoint is a .safetensors file or a folder of .npy files named by state_dict keys.
// open_checkpoint reads only the headers (the safetensors header, or each .npy file's),
// so that the name, dtype and shape of every tensor are known without reading any data:
// listing a checkpoint of gigabytes reads a few kilobytes. tensor<T>(checkpoint, name)
// then reads the one tensor asked for, from its offset in the file.
//
// Included by modules/io.cppm, in its module purview: no module line of its own.
// Uses mha, dtypes.hpp, npy.hpp, safetensors.hpp, npy_folder.hpp.

export namespace mha {

// One tensor of a checkpoint, as its header gives it.
struct CheckpointTensor {
  std::string dtype;  // as NumPy and PyTorch print it: float32, bfloat16, int64, bool, ...
  std::vector<std::size_t> shape;
};

// The tensors of a checkpoint by key (sorted); no tensor data.
struct Checkpoint {
  std::filesystem::path path;                       // a .safetensors file, or a folder of .npy files
  std::map<std::string, CheckpointTensor> tensors;  // by state_dict key
  std::optional<Safetensors> safetensors;           // the file's header; none for a folder

  std::vector<std::string> names() const {
    std::vector<std::string> keys;
    keys.reserve(tensors.size());
    for (const auto& [name, _] : tensors) keys.push_back(name);
    return keys;
  }
};

}  // namespace mha

namespace mha::detail {

// The dtype and shape of every tensor of a .safetensors header.
std::map<std::string, CheckpointTensor> safetensors_tensors(const Safetensors& file) {
  std::map<std::string, CheckpointTensor> tensors;
  for (const auto& [name, entry] : file.tensors)
    tensors.emplace(name, CheckpointTensor{std::string(dtype_of_safetensors(entry.dtype)->name), entry.shape});
  return tensors;
}

// The dtype and shape of every .npy file of a folder, by key.
std::map<std::string, CheckpointTensor> npy_folder_tensors(const std::filesystem::path& folder) {
  std::map<std::string, CheckpointTensor> tensors;
  for (const auto& [key, header] : npy_folder_headers(folder, ""))
    tensors.emplace(key, CheckpointTensor{dtype_name(header.descr), header.shape});
  return tensors;
}

}  // namespace mha::detail

export namespace mha {

// Opens a .safetensors file, or a folder of .npy files, by its headers; every header is
// checked as the readers check it. Throws mha::Error for anything malformed.
// (The tensors are listed by helpers: clang-tidy 16's optional-access check crashes on a
// loop over a header that is then moved into Checkpoint::safetensors in one function.)
Checkpoint open_checkpoint(const std::filesystem::path& path) {
  if (std::filesystem::is_directory(path)) return {path, detail::npy_folder_tensors(path), std::nullopt};
  Safetensors file = read_safetensors(path);
  auto tensors = detail::safetensors_tensors(file);
  return {path, std::move(tensors), std::move(file)};
}

// The tensor `name` as T, read from the file when asked for: from its offset in a
// .safetensors file (F16 and BF16 widened), or its .npy file (of T's dtype exactly).
template <class T>
xt::xarray<T> tensor(const Checkpoint& c, const std::string& name) {
  check(c.tensors.contains(name), name, "no such tensor in {}", c.path.string());
  if (c.safetensors) return tensor<T>(*c.safetensors, name);
  return load_npy<T>(c.path / (name + ".npy"));
}

}  // namespace mha
