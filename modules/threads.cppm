// mha:threads — how many threads the library uses, and how it splits work over them.
//
// Two kinds of threads could run here: OpenBLAS's own (inside a GEMM) and the library's
// (the fast paths split their GEMMs' rows and their batch-heads over them). Both at once
// would multiply: 2 threads becoming 2 x 2, fighting for 2 cores. So the library splits
// its work over its own threads only while OpenBLAS runs single-threaded, and
// set_num_threads(n) arranges exactly that: n library threads, OpenBLAS at one. Where
// OpenBLAS keeps its threads (nothing was set: OPENBLAS_NUM_THREADS or every core), the
// fast paths run on the calling thread and each GEMM runs on OpenBLAS's threads.
// PyTorch's counterpart is torch.set_num_threads.
//
// Nothing here is changed by forward(): both counts are read, never written, during a
// call, so any number of threads may run forward() at once. openblas_set_num_threads is
// process-wide: set_num_threads changes OpenBLAS for the whole program, and another part
// of the program calling it changes what the library does.
module;
#include "third_party_core.hpp"

export module mha:threads;

import mha.core;

// OpenBLAS's thread control, declared here rather than through cblas.h (which clashes
// with the BLAS declarations xtensor-blas bundles).
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" int openblas_get_num_threads(void);

namespace mha::detail {

// The library's thread count, starting from OpenBLAS's (OPENBLAS_NUM_THREADS, or every core).
// inline for its static: see cpu_simd_level() in :cpu.
inline std::atomic<int>& thread_count() {
  static std::atomic<int> count{std::max(1, openblas_get_num_threads())};
  return count;
}

}  // namespace mha::detail

export namespace mha {

// Gives the library `num_threads` threads for its own parallel work, with OpenBLAS held
// to one thread inside them. Process-wide, like torch.set_num_threads; call it before
// forward() runs anywhere, not while it runs.
void set_num_threads(int num_threads) {
  check(num_threads >= 1, "num_threads", "expected at least 1 thread, got {}", num_threads);
  detail::thread_count() = num_threads;
  openblas_set_num_threads(1);
}

int num_threads() { return detail::thread_count(); }

}  // namespace mha

namespace mha::detail {

// Is OpenBLAS held to one thread, so that the library's own threads run the work?
bool openblas_runs_single_threaded() { return openblas_get_num_threads() == 1; }

// The threads a fast forward splits its work over: the library's, while OpenBLAS runs
// single-threaded; otherwise one, the caller's, and OpenBLAS threads each GEMM.
int engine_threads() { return openblas_runs_single_threaded() ? num_threads() : 1; }

// Runs task(0, worker), ..., task(count - 1, worker) on up to `threads` threads, each
// taking the next index when it is free; `worker` (0 .. threads - 1) says which thread
// runs it, so that a task can use that thread's scratch buffer. With one thread (or one
// task) everything runs here, in order, as worker 0. Each call has threads of its own:
// calls from several threads at once share nothing.
void parallel_for(std::size_t count, int threads, const std::function<void(std::size_t, std::size_t)>& task) {
  const std::size_t workers = std::min<std::size_t>(count, static_cast<std::size_t>(std::max(1, threads)));
  if (workers <= 1) {
    for (std::size_t i = 0; i < count; ++i) task(i, 0);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::atomic<bool> failed{false};
  auto work = [&](std::size_t worker) {
    try {
      for (std::size_t i = next++; i < count && !failed; i = next++) task(i, worker);
    } catch (...) {
      if (!failed.exchange(true)) failure = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t w = 1; w < workers; ++w) pool.emplace_back(work, w);
  work(0);
  for (auto& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

// How many threads work of `flops` floating-point operations is worth: below `threshold`
// it is over before a second thread would have started, so it runs on the caller's alone.
int threads_for(double flops, double threshold, int available) { return flops < threshold ? 1 : available; }

// A mutex for a member of a copyable class: a copy gets a lock of its own, never the
// original's (a mutex cannot be copied, and sharing one would tie two objects together).
struct OwnMutex {
  std::mutex mutex;
  OwnMutex() = default;
  OwnMutex(const OwnMutex& /*other*/) {}
  OwnMutex& operator=(const OwnMutex& /*other*/) { return *this; }
  ~OwnMutex() = default;
};

}  // namespace mha::detail
