// modules/io/npy_folder.hpp — a folder of .npy files named by state_dict keys, as one set of weights.
//
// The file name without ".npy" is the key: "in_proj_weight.npy", "out_proj.weight.npy",
// "layers.0.self_attn.in_proj_weight.npy". A folder is listed by the files' headers
// alone (npy_header.hpp), so that the keys, dtypes and shapes are known before any data is
// read; then only the files asked for are read whole. As in a .safetensors file, integer
// and bool arrays (a golden case's masks, say) are not weights and are left out.
//
// Included by modules/io.cppm, in its module purview: no module line of its own.
// Uses mha, dtypes.hpp, npy_header.hpp, npy.hpp.

namespace mha::detail {

// The header of every .npy file in `folder` whose key starts with `prefix`, by key.
std::map<std::string, NpyHeader> npy_folder_headers(const std::filesystem::path& folder, std::string_view prefix) {
  check(std::filesystem::is_directory(folder), "folder", "{} is not a folder", folder.string());
  std::map<std::string, NpyHeader> headers;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".npy") continue;
    std::string key = entry.path().stem().string();
    if (key.starts_with(prefix)) headers.emplace(std::move(key), read_npy_header(entry.path()));
  }
  return headers;
}

// The floating-point .npy files whose keys start with `prefix`, for load_npy_folder.
std::vector<std::string> npy_folder_weight_keys(const std::filesystem::path& folder, std::string_view prefix) {
  std::vector<NamedDtype> files;
  for (const auto& [key, header] : npy_folder_headers(folder, prefix)) files.push_back({key, dtype_name(header.descr)});
  return weight_names(files, prefix, ".npy file", folder.string());
}

}  // namespace mha::detail

export namespace mha {

// The floating-point .npy files of `folder` whose key starts with `prefix`, the prefix
// removed, as T. Integer and bool arrays are left out; an Error when no file starts with
// the prefix, or when all that do are integer or bool.
template <class T>
StateDict<T> load_npy_folder(const std::filesystem::path& folder, std::string_view prefix = "") {
  StateDict<T> dict;
  for (const auto& key : detail::npy_folder_weight_keys(folder, prefix))
    dict.emplace(key.substr(prefix.size()), load_npy<T>(folder / (key + ".npy")));
  return dict;
}

}  // namespace mha
