// fuzz/case_json_fuzzer.cpp — libFuzzer target for the golden case.json reader
// (mha::parse_case_info), and for the option checks of the module it describes.
//
// Any byte string is a possible case.json. The reader must either return a CaseInfo or
// throw mha::Error; a CaseInfo's options must in turn either build a module or be
// rejected by the constructor with mha::Error. Anything else is a finding.
#include "third_party.hpp"  // first: the same global declarations as the module's

#include <cstddef>
#include <cstdint>
#include <string_view>

import mha;
import mha.golden;

namespace {

// Builds the module only when its parameters are small: the fuzzer looks for crashes in
// the checks, not for out-of-memory on a legitimate embed_dim of 10^9.
void construct_if_small(const mha::Options& options) {
  constexpr std::int64_t max_dim = 64;
  const auto small = [](std::int64_t d) { return d <= max_dim; };
  if (!small(options.embed_dim) || !small(options.kdim.value_or(0)) || !small(options.vdim.value_or(0))) return;
  (void)mha::MultiheadAttention<float>(options);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  try {
    const mha::CaseInfo info = mha::parse_case_info(json, "fuzz_case");
    construct_if_small(info.options);
  } catch (const mha::Error&) {
    // A clear rejection.
  }
  return 0;
}
