// modules/platform/gemm_library.hpp — which library multiplies the float matrices: oneDNN or OpenBLAS.
//
// OpenBLAS is the library's BLAS: every double GEMM, every small one, and every GEMM of a
// build without oneDNN. oneDNN (Intel's deep
// learning library, Debian's libdnnl) has a single-precision GEMM too, dnnl_sgemm, with
// kernels generated at run time for the CPU's instruction set, up to AVX-512 and AMX, so
// a CPU newer than OpenBLAS 0.3.21's table of models is no problem for it either.
//
// Measured on the machine of docs/performance.md, one thread a call on each of 2 cores,
// against OpenBLAS's best kernel for that CPU (SkylakeX): the per-head GEMMs, where one
// side is D = 64, 10-45% faster in every sitting; the projections with E = 768 and 1024,
// and 2048 x 2048 x 2048, at 200-220 GFLOP/s against 165-180 in the quietest one; with
// E = 512 the two were within that busy host's noise of each other. Below about 256K
// multiply-adds its set-up costs more than the product (16 x 16 x 16: 0.5 us against
// 0.17 us), so small GEMMs stay on OpenBLAS.
//
// Threads: Debian's oneDNN runs its parallel work on OpenMP (libgomp), with as many
// threads as omp_get_max_threads() says in the calling thread. The library runs its GEMMs
// on threads of its own, one GEMM a thread, so each call holds OpenMP to one thread in the
// calling thread for its duration, then puts back what it found.
//
// Included by modules/platform.cppm, in its module purview: no module line of its own.
// Uses mha.core, threads.hpp.

#if MHA_ONEDNN
// OpenMP's per-thread setting, declared here: clang ships no omp.h for GCC's libgomp.
extern "C" int omp_get_max_threads(void);
extern "C" void omp_set_num_threads(int num_threads);
#endif

export namespace mha {

// The library that runs a float GEMM of the fast paths and of linear().
enum class GemmLibrary { openblas, onednn };

const char* to_string(GemmLibrary library) { return library == GemmLibrary::onednn ? "oneDNN" : "OpenBLAS"; }

// oneDNN's version, "2.6.3", or nullopt in a build without it (-DMHA_ONEDNN=OFF).
std::optional<std::string> onednn_version() {
#if MHA_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("{}.{}.{}", v->major, v->minor, v->patch);
#else
  return std::nullopt;
#endif
}

}  // namespace mha

namespace mha::detail {

// The library chosen for float GEMMs: oneDNN where the build has it. inline for its
// static: see cpu_simd_level() in cpu.hpp.
inline std::atomic<GemmLibrary>& float_gemm_library() {
  static std::atomic<GemmLibrary> library{onednn_version() ? GemmLibrary::onednn : GemmLibrary::openblas};
  return library;
}

// Below this many multiply-adds (m * n * k) a float GEMM stays on OpenBLAS (see above).
constexpr double onednn_smallest_gemm = 256.0 * 1024.0;

#if MHA_ONEDNN
// OpenMP held to one thread in the calling thread while this lives, then put back as it was
// (see "Threads" above).
class OpenmpHeldToOne {
public:
  OpenmpHeldToOne() { omp_set_num_threads(1); }
  OpenmpHeldToOne(const OpenmpHeldToOne&) = delete;
  OpenmpHeldToOne& operator=(const OpenmpHeldToOne&) = delete;
  ~OpenmpHeldToOne() { omp_set_num_threads(found_); }

private:
  int found_ = omp_get_max_threads();
};
#endif

// C (m, n) = alpha * op(A) op(B) + beta * C, row-major, on oneDNN in the calling thread;
// the same contract as gemm() in linear.hpp, which calls it.
void onednn_sgemm([[maybe_unused]] bool trans_a, [[maybe_unused]] bool trans_b, [[maybe_unused]] std::size_t m,
                  [[maybe_unused]] std::size_t n, [[maybe_unused]] std::size_t k, [[maybe_unused]] float alpha,
                  [[maybe_unused]] const float* a, [[maybe_unused]] std::size_t lda, [[maybe_unused]] const float* b,
                  [[maybe_unused]] std::size_t ldb, [[maybe_unused]] float beta, [[maybe_unused]] float* c,
                  [[maybe_unused]] std::size_t ldc) {
#if MHA_ONEDNN
  const auto dim = [](std::size_t x) { return static_cast<dnnl_dim_t>(x); };
  const OpenmpHeldToOne one_thread;
  const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', dim(m), dim(n), dim(k), alpha, a,
                                          dim(lda), b, dim(ldb), beta, c, dim(ldc));
  // Only arguments gemm() has already made valid can reach here; anything else is a
  // library fault, never silently a wrong product.
  check(status == dnnl_success, "gemm", "expected oneDNN's sgemm to succeed, got status {}", static_cast<int>(status));
#else
  throw Error("gemm: expected a build with oneDNN (MHA_ONEDNN), got one without it");
#endif
}

}  // namespace mha::detail

export namespace mha {

// The library that runs the float GEMMs from now on: GemmLibrary::onednn by default where
// the build has it, else OpenBLAS. Process-wide, like use_blas_kernel: call it while no
// forward or backward runs. Double GEMMs always run on OpenBLAS.
void use_gemm_library(GemmLibrary library) {
  check(library == GemmLibrary::openblas || onednn_version().has_value(), "library",
        "expected a library this build has (OpenBLAS; oneDNN with MHA_ONEDNN=ON), got oneDNN");
  detail::float_gemm_library() = library;
}

GemmLibrary gemm_library() { return detail::float_gemm_library(); }

}  // namespace mha

namespace mha::detail {

// The library that runs a float GEMM of m x n x k multiply-adds: oneDNN when it is the
// chosen library and the GEMM is large enough to gain from it, else OpenBLAS. It depends
// on these two alone, never on a thread setting, so a result does not change with the
// host program's OpenBLAS threads.
GemmLibrary gemm_library_for(std::size_t m, std::size_t n, std::size_t k) {
  const double multiply_adds = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const bool onednn = gemm_library() == GemmLibrary::onednn && multiply_adds >= onednn_smallest_gemm;
  return onednn ? GemmLibrary::onednn : GemmLibrary::openblas;
}

}  // namespace mha::detail

export namespace mha::testing {

// For tests: the library a float GEMM of m x n x k multiply-adds runs on (detail::gemm_library_for above).
GemmLibrary gemm_library_for(std::size_t m, std::size_t n, std::size_t k) { return detail::gemm_library_for(m, n, k); }

}  // namespace mha::testing
