// fuzz/npy_fuzzer.cpp — libFuzzer target for the .npy reader (mha::parse_npy, mha::to_xarray).
//
// Any byte string is a possible .npy file. The reader must either return an array whose
// bytes match its shape and dtype exactly, or throw mha::Error. Anything else (another
// exception, a crash, a sanitizer report, a leak) is a finding.
#include "third_party.hpp"  // first: the same global declarations as the module's

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>

import mha;
import mha.io;

namespace {

// The parsed array must hold exactly shape x itemsize bytes: what every consumer relies on.
void check_consistent(const mha::NpyArray& array) {
  std::size_t itemsize = 0;
  if (array.descr == "<f4") itemsize = 4;
  else if (array.descr == "<f8") itemsize = 8;
  else if (array.descr == "|b1") itemsize = 1;
  else return;
  if (array.bytes.size() != array.size() * itemsize) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const char> bytes(reinterpret_cast<const char*>(data), size);
  try {
    const mha::NpyArray array = mha::parse_npy(bytes, "fuzz.npy");
    check_consistent(array);
    if (array.descr == "<f8") (void)mha::to_xarray<double>(array, "fuzz");
    else if (array.descr == "|b1") (void)mha::to_xarray<bool>(array, "fuzz");
    else (void)mha::to_xarray<float>(array, "fuzz");  // '<f4'; any other dtype must be rejected with mha::Error
  } catch (const mha::Error&) {
    // A clear rejection: what the reader should do with a malformed file.
  }
  return 0;
}
