// modules/platform/cpu.hpp — what this CPU can run: the SIMD levels the kernels and the BLAS choice ask for.
//
// One place answers "does this CPU run AVX2 + FMA? AVX-512?", for the engine's kernels
// (each compiled three times, and run_for_this_cpu below picks one at run time) and for
// picking OpenBLAS's kernel (blas.hpp). The answers come from the CPU itself (cpuid, and the
// operating system's XSAVE state through the compiler's __builtin_cpu_supports), never from
// its model name, so a CPU newer than any table still gets what its features allow.
//
// Included by modules/platform.cppm, in its module purview: no module line of its own.

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

// The highest level the engine's kernels may run at; AVX-512 (no limit) unless a test
// lowers it. inline for its static, as cpu_simd_level().
inline std::atomic<SimdLevel>& kernel_simd_limit() {
  static std::atomic<SimdLevel> limit{SimdLevel::avx512};
  return limit;
}

// The level the engine's kernels run at: this CPU's best, at most the limit.
SimdLevel kernel_simd_level() { return std::min(cpu_simd_level(), kernel_simd_limit().load()); }

bool has_avx2() { return kernel_simd_level() >= SimdLevel::avx2; }
bool has_avx512() { return kernel_simd_level() >= SimdLevel::avx512; }

// The one CPU dispatcher of the engine: every kernel runs through it, the softmax family's
// rows (engine/softmax_kernels.hpp), the flash tile's (engine/flash_attention.hpp) and the
// decoding step's (engine/decode_step.hpp). A kernel is a type with a static
// `template <std::size_t Bytes, ...> run(args...)`, Bytes the width of a SIMD vector it is
// compiled for: 16 (baseline x86-64, SSE2), 32 (AVX2 + FMA), 64 (AVX-512). A kernel written
// over the compiler's vectors (decode_step.hpp's Simd<T, Bytes>) uses it; one of plain loops
// that the compiler vectorises (the softmax rows) ignores it, the instruction set of the
// function it is inlined into being what widens its loops. So run() and everything it calls
// are [[gnu::always_inline]]: inlined here, their loops are generated for AVX2 or AVX-512.
//
// It lives here, in the platform layer, and not beside one family of kernels: it reads the
// level above (and so honours mha::testing::limit_kernel_simd_level, with which one machine
// runs the SSE2, AVX2 and AVX-512 builds of every kernel), and it serves kernels of three
// files alike. The only functions compiled for an instruction set (gnu::target) are here, but
// for attention_tiles.hpp's AVX-512 intrinsics, which exist at one level only
// (tests/kernel_homes_test.py keeps it so).
#if defined(__x86_64__)
template <class Kernel, class... Args>
[[gnu::target("avx2,fma")]] void run_avx2(Args&&... args) {
  Kernel::template run<32>(std::forward<Args>(args)...);
}
template <class Kernel, class... Args>
[[gnu::target("avx512f,avx512dq,avx2,fma")]] void run_avx512(Args&&... args) {
  Kernel::template run<64>(std::forward<Args>(args)...);
}
#endif

// Kernel::run<Bytes>(args...) at the widest vector this CPU runs, or a test allows.
template <class Kernel, class... Args>
void run_for_this_cpu(Args&&... args) {
#if defined(__x86_64__)
  if (has_avx512()) return run_avx512<Kernel>(std::forward<Args>(args)...);
  if (has_avx2()) return run_avx2<Kernel>(std::forward<Args>(args)...);
#endif
  Kernel::template run<16>(std::forward<Args>(args)...);
}

}  // namespace mha::detail

export namespace mha::testing {

// For tests: has the engine's kernels (run_for_this_cpu, and the AVX-512 tiles of
// engine/attention_tiles.hpp) run at `level` at most, so that one machine with AVX-512 runs
// the AVX2 and the SSE2 builds of every kernel too.
// Returns the limit it replaces. Process-wide: set it while no forward runs. A level
// above this CPU's is never used (the CPU's own is).
SimdLevel limit_kernel_simd_level(SimdLevel level) { return detail::kernel_simd_limit().exchange(level); }

// The level the engine's kernels run at now.
SimdLevel kernel_simd_level() { return detail::kernel_simd_level(); }

}  // namespace mha::testing
