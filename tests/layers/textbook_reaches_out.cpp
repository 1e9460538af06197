// tests/layers/textbook_reaches_out.cpp — a textbook body that names the platform, the engine and the API: must not compile.
//
// A planted fault, never part of the library: a unit of mha.textbook, as the bodies in
// modules/textbook/*.cpp are, whose one function names one thing of each other layer: the
// platform's GEMM entry point (detail::gemm, platform/linear.hpp), the engine's fast forward
// (detail::Engine, engine/engine.hpp) and the module itself (MultiheadAttention,
// api/multihead_attention.hpp). The textbook imports mha.core alone, so none of the three is
// declared here, and the ctest "layers: the compiler refuses a textbook unit that names the
// platform, the engine or the API" passes only on the compiler's error for each, by name
// (tests/CMakeLists.txt). Nothing else builds it: its target is EXCLUDE_FROM_ALL.
module;
#include "third_party_xtensor.hpp"

module mha.textbook;

namespace mha::textbook {

// A step that borrows the other layers' speed: one GEMM on the platform, and the sizes of
// the engine and of the module. Each of the three names is an error here.
std::size_t reaches_out(const float* a, float* c) {
  detail::gemm<float>(/*trans_a=*/false, /*trans_b=*/false, 1, 1, 1, 1.f, a, 1, a, 1, 0.f, c, 1);
  return sizeof(detail::Engine<float>) + sizeof(mha::MultiheadAttention<float>);
}

}  // namespace mha::textbook
