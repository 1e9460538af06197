// mha:threads — how many threads the library uses, and how it splits work over them.
//
// One number covers both kinds of threads that run here: OpenBLAS's own (inside every
// GEMM) and the library's (one batch-head per task in the fast and memory-efficient
// attention paths). While the library's threads run, OpenBLAS is held to one thread,
// so that 2 threads never become 2 x 2. PyTorch's counterpart is torch.set_num_threads.
//
// openblas_set_num_threads is process-wide: another part of the program calling it
// changes the GEMMs here too, and set_num_threads here changes OpenBLAS for everyone.
module;
#include "third_party.hpp"

export module mha:threads;

import :error;

// OpenBLAS's thread control, declared here rather than through cblas.h (which clashes
// with the BLAS declarations xtensor-blas bundles).
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" int openblas_get_num_threads(void);

namespace mha::detail {

// The thread count, starting from what OpenBLAS chose (OPENBLAS_NUM_THREADS, or every core).
inline int& thread_count() {
  static int count = std::max(1, openblas_get_num_threads());
  return count;
}

}  // namespace mha::detail

export namespace mha {

// Sets the number of threads for everything the library runs: OpenBLAS's and its own.
inline void set_num_threads(int num_threads) {
  check(num_threads >= 1, "num_threads", "expected at least 1 thread, got {}", num_threads);
  detail::thread_count() = num_threads;
  openblas_set_num_threads(num_threads);
}

inline int num_threads() { return detail::thread_count(); }

}  // namespace mha

namespace mha::detail {

// Runs task(0), ..., task(count - 1), on up to `threads` threads, each taking the next
// index when it is free. With one thread (or one task) everything runs here, in order.
// OpenBLAS runs single-threaded inside the tasks and gets its thread count back after.
inline void parallel_for(std::size_t count, int threads, const std::function<void(std::size_t)>& task) {
  const std::size_t workers = std::min<std::size_t>(count, static_cast<std::size_t>(std::max(1, threads)));
  if (workers <= 1) {
    for (std::size_t i = 0; i < count; ++i) task(i);
    return;
  }
  const int blas_threads = openblas_get_num_threads();
  openblas_set_num_threads(1);
  std::atomic<std::size_t> next{0};
  std::exception_ptr failure;
  std::atomic<bool> failed{false};
  auto work = [&] {
    try {
      for (std::size_t i = next++; i < count && !failed; i = next++) task(i);
    } catch (...) {
      if (!failed.exchange(true)) failure = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t w = 1; w < workers; ++w) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  openblas_set_num_threads(blas_threads);
  if (failure) std::rethrow_exception(failure);
}

// OpenBLAS held to `threads` threads for a scope, then given back what it had. The fast
// paths hold it to one thread and split the work over the library's own threads.
class BlasThreads {
public:
  explicit BlasThreads(int threads) : saved_(openblas_get_num_threads()) {
    if (threads != saved_) openblas_set_num_threads(threads);
  }
  ~BlasThreads() {
    if (openblas_get_num_threads() != saved_) openblas_set_num_threads(saved_);
  }
  BlasThreads(const BlasThreads&) = delete;
  BlasThreads& operator=(const BlasThreads&) = delete;

private:
  int saved_;
};

}  // namespace mha::detail
