// safetensors_fuzzer: libFuzzer target for the .safetensors reader
// (mha::read_safetensors, mha::to_xarray).
//
// Any byte string is a possible .safetensors file. The reader must either return tensors
// whose bytes match their shapes and dtypes, or throw mha::Error. The reader takes a
// path, so each input is written to a file of this process first.
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  {
    std::ofstream out(input_file(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) std::abort();
  }
  try {
    const mha::Safetensors st = mha::read_safetensors(input_file());
    for (const auto& [name, tensor] : st.tensors) {
      const std::size_t itemsize = mha::safetensors_itemsize(tensor.dtype);
      std::size_t count = itemsize;
      for (auto d : tensor.shape) count *= d;
      if (itemsize == 0 || tensor.bytes.size() != count) std::abort();  // the reader let a bad entry through
      try {
        (void)mha::to_xarray<double>(tensor, name);
      } catch (const mha::Error&) {
        // F32, integers, bool: not readable as double, rejected clearly.
      }
    }
  } catch (const mha::Error&) {
    // A clear rejection.
  }
  return 0;
}
