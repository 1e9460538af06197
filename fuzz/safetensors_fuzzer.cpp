// fuzz/safetensors_fuzzer.cpp — libFuzzer target for the .safetensors reader
// (mha::read_safetensors, mha::read_tensor, mha::to_xarray, mha::tensor).
//
// Any byte string is a possible .safetensors file. The reader must either return entries
// whose byte ranges match their shapes and dtypes, each read back from its offset whole,
// or throw mha::Error. The reader takes a path, so each input is written to a file of
// this process first.
#include "third_party.hpp"  // first: the same global declarations as the module's

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <unistd.h>

import mha;
import mha.io;

namespace {

// One scratch file per process, removed when the process exits.
struct ScratchFile {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("mha_safetensors_fuzzer_" + std::to_string(::getpid()) + ".safetensors");
  ~ScratchFile() {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
  }
};

const std::filesystem::path& input_file() {
  static const ScratchFile file;
  return file.path;
}

// Reading a tensor as a type either succeeds or is a clear rejection: F32 as double, F64
// as float, integers and bools are not readable as weights.
template <class Read>
void read_or_reject(Read read) {
  try {
    read();
  } catch (const mha::Error&) {}
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  {
    std::ofstream out(input_file(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) std::abort();
  }
  try {
    const mha::Safetensors st = mha::read_safetensors(input_file());
    for (const auto& [name, entry] : st.tensors) {
      const std::size_t itemsize = mha::safetensors_itemsize(entry.dtype);
      std::size_t count = itemsize;
      for (auto d : entry.shape) count *= d;
      if (itemsize == 0 || entry.byte_size() != count) std::abort();     // the reader let a bad entry through
      const mha::SafetensorsTensor tensor = mha::read_tensor(st, name);  // from its offset
      if (tensor.bytes.size() != count) std::abort();
      read_or_reject([&] { (void)mha::to_xarray<double>(tensor, name); });
      read_or_reject([&] { (void)mha::tensor<float>(st, name); });  // straight into the array when F32
    }
  } catch (const mha::Error&) {
    // A clear rejection.
  }
  return 0;
}
