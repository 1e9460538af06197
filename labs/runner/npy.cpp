// labs/runner/npy.cpp — the .npy files of every lab's runner: the inputs read, the answers written.
//
// Compiled once and linked into each lab's answers program beside its runner (lab 01's is
// labs/runner/lab01.cpp), rather than compiled again in each: xtensor's xnpy reads a file's
// header with std::regex, the costliest part of a runner to compile.
#include "runner.hpp"

#include <xtensor/xnpy.hpp>

namespace runner {

template <class T>
xt::xarray<T> read_npy(const std::filesystem::path& file) {
  return xt::load_npy<T>(file.string());
}

template <class T>
std::string npy_bytes(const xt::xarray<T>& t) {
  return xt::dump_npy(t);
}

template xt::xarray<float> read_npy<float>(const std::filesystem::path&);
template xt::xarray<double> read_npy<double>(const std::filesystem::path&);
template xt::xarray<bool> read_npy<bool>(const std::filesystem::path&);
template std::string npy_bytes<float>(const xt::xarray<float>&);
template std::string npy_bytes<double>(const xt::xarray<double>&);

}  // namespace runner
