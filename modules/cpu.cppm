// mha:cpu — what this CPU can run: the SIMD levels the kernels and the BLAS choice ask for.
//
// One place answers "does this CPU run AVX2 + FMA? AVX-512?", for the softmax kernels
// (compiled three times and picked at run time) and for picking OpenBLAS's kernel
// (:blas). The answers come from the CPU itself (cpuid, and the operating system's
// XSAVE state through the compiler's __builtin_cpu_supports), never from its model name,
// so a CPU newer than any table still gets what its features allow.
module;
#include "third_party_core.hpp"

export module mha:cpu;

export namespace mha {

// The vector instruction sets, in the order each includes the one before.
enum class SimdLevel { sse2 = 0, avx = 1, avx2 = 2, avx512 = 3 };

const char* to_string(SimdLevel level) {
  switch (level) {
    case SimdLevel::avx512:
      return "AVX-512";
    case SimdLevel::avx2:
      return "AVX2+FMA";
    case SimdLevel::avx:
      return "AVX";
    case SimdLevel::sse2:
      break;
  }
  return "SSE2";
}

// The best level this CPU and its operating system support. AVX-512 counts only with
// F, DQ, BW, VL and CD: the subsets that OpenBLAS's SkylakeX kernels and our AVX-512
// softmax use.
// inline, as every function with a static of its own: clang 16 copies the body of a
// non-inline module function into the code that imports it, static and all.
inline SimdLevel cpu_simd_level() {
#if defined(__x86_64__)
  static const SimdLevel level = [] {
    if (!__builtin_cpu_supports("avx")) return SimdLevel::sse2;
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return SimdLevel::avx;
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                        __builtin_cpu_supports("avx512cd");
    return avx512 ? SimdLevel::avx512 : SimdLevel::avx2;
  }();
  return level;
#else
  return SimdLevel::sse2;
#endif
}

}  // namespace mha

namespace mha::detail {

bool has_avx2() { return cpu_simd_level() >= SimdLevel::avx2; }
bool has_avx512() { return cpu_simd_level() >= SimdLevel::avx512; }

}  // namespace mha::detail
