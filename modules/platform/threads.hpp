// modules/platform/threads.hpp — how many threads the library uses, and the pool they run in.
//
// The fast paths split their GEMMs' rows and their batch-heads over threads of the
// library's own: a pool started at the first parallel call and kept for the life of the
// process (ONNX Runtime and CTranslate2 keep one too), so a forward starts no thread. How
// many it uses is the library's own setting, mha::set_num_threads(n), like
// torch.set_num_threads; by default one per CPU this process may run on.
//
// The setting is never read from OpenBLAS nor written to it, and nothing here changes
// a setting of the program around the library. Inside the library's parallel work each
// GEMM is one thread's: oneDNN is held to one OpenMP thread for the call in the calling
// thread (gemm_library.hpp), and the float GEMMs left to OpenBLAS are below the size at
// which it would thread them. A double GEMM on OpenBLAS is threaded as OpenBLAS's own
// setting says (OPENBLAS_NUM_THREADS); that changes nothing in its result, because
// OpenBLAS splits a product's rows and columns over its threads, never a sum (the host
// program test checks both, bit for bit).
//
// forward() reads the setting, never writes it, so any number of threads may run
// forward() at once: each call's work is a job of its own in the pool, and the calling
// thread always works on its own job, so no call waits for a free pool thread.
//
// Included by modules/platform.cppm, in its module purview: no module line of its own.
// Uses mha.core.

namespace mha::detail {

// The CPUs this process may run on (its affinity mask: a container's or taskset's
// limit, not the machine's count), at least 1.
int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// The library's thread count. inline for its static: see cpu_simd_level() in cpu.hpp.
inline std::atomic<int>& thread_count() {
  static std::atomic<int> count{available_cpus()};
  return count;
}

}  // namespace mha::detail

export namespace mha {

// Gives the library's parallel work `num_threads` threads, the caller's included. The
// library's setting alone: OpenBLAS's and OpenMP's stay as they are. Call it while no
// forward() or backward() runs.
void set_num_threads(int num_threads) {
  check(num_threads >= 1, "num_threads", "expected at least 1 thread, got {}", num_threads);
  detail::thread_count() = num_threads;
}

int num_threads() { return detail::thread_count(); }

}  // namespace mha

namespace mha::detail {

// The threads a fast forward or backward splits its work over: the library's setting.
int engine_threads() { return num_threads(); }

// One turn of a thread that waits by spinning: PAUSE tells the core (and the hypervisor of
// a virtual machine) that this thread is only waiting, so that it yields the core's shared
// resources meanwhile.
inline void spin_pause() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

// One parallel_for call: `count` tasks, taken in turn by up to `workers` threads.
struct ParallelJob {
  ParallelJob(const std::function<void(std::size_t, std::size_t)>& t, std::size_t n, std::size_t w)
      : task(&t), count(n), workers(w) {}

  const std::function<void(std::size_t, std::size_t)>* task;
  std::size_t count, workers;
  std::atomic<std::size_t> next{0};  // the next task to take
  std::size_t joined = 1;            // threads that took part, the caller first (under the pool's mutex)
  // of them, those not yet done with it: changed under the pool's mutex, read without it
  // by the caller's spin (ThreadPool::wait_for_helpers)
  std::atomic<std::size_t> working{1};
  std::atomic<bool> failed{false};
  std::exception_ptr failure;  // the first exception a task threw

  // Takes tasks until none is left, as worker `worker`; after a task throws, the rest
  // are taken and not run, so that every thread stops soon.
  void work(std::size_t worker) {
    for (std::size_t i = next++; i < count; i = next++) {
      if (failed) continue;
      try {
        (*task)(i, worker);
      } catch (...) {
        if (!failed.exchange(true)) failure = std::current_exception();
      }
    }
  }
};

// The library's threads, started as calls first ask for them and kept until the process
// ends. A job waits in `open` until it has as many threads as it can use; a pool thread
// takes the oldest such job. The caller of a job works on it too and then waits only for
// the pool threads that joined it, never for the pool to be free.
class ThreadPool {
public:
  // The process's one pool. inline for its static: see cpu_simd_level() in cpu.hpp.
  static inline ThreadPool& instance() {
    static ThreadPool pool;
    return pool;
  }

  void run(ParallelJob& job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      start_threads(job.workers - 1);
      open_.push_back(&job);
      posted_.store(open_.size(), std::memory_order_relaxed);
    }
    wake_.notify_all();
    job.work(0);
    std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
    lock_spinning(lock);
    close(job);  // no thread joins it from now on
    if (--job.working == 0) return;
    lock.unlock();
    wait_for_helpers(job);
  }

  ThreadPool() = default;
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

private:
  void start_threads(std::size_t wanted) {  // under mutex_
    while (threads_.size() < wanted) {
      threads_.emplace_back([this] {
        pthread_setname_np(pthread_self(), "mha-pool");  // as top, gdb and /proc show it
        serve();
      });
    }
  }
  void close(ParallelJob& job) {  // under mutex_
    const auto it = std::find(open_.begin(), open_.end(), &job);
    if (it != open_.end()) open_.erase(it);
    posted_.store(open_.size(), std::memory_order_relaxed);
  }
  // Spins up to 200 microseconds, without sleeping, until ready() holds; whether it did.
  // A sleeping thread takes tens of microseconds to wake, as long as a whole decoding
  // step's share of work.
  template <class Ready>
  static bool spin_until(Ready ready) {
    constexpr auto spin_time = std::chrono::microseconds(200);
    const auto until = std::chrono::steady_clock::now() + spin_time;
    while (!ready()) {
      for (int i = 0; i < 64; ++i) spin_pause();
      if (std::chrono::steady_clock::now() > until) return false;
    }
    return true;
  }
  // Takes the pool's mutex, trying for a while before it blocks: whoever holds it lets it
  // go within a microsecond (a caller posting a job holds it as a spinning thread sees the
  // job), and a thread blocked on it takes tens of microseconds to wake.
  static void lock_spinning(std::unique_lock<std::mutex>& lock) {
    if (!spin_until([&] { return lock.try_lock(); })) lock.lock();
  }
  // Waits a while for a job without sleeping: a loop of steps posts the next job well
  // within the spin, so its threads never sleep. After the spin, a thread sleeps until
  // it is woken.
  void spin_for_work() const {
    spin_until([&] { return posted_.load(std::memory_order_relaxed) != 0; });
  }
  // Waits until the pool threads that joined `job` are done with it: spinning first (they
  // are usually a few microseconds from the end), then asleep until the last one wakes it.
  void wait_for_helpers(ParallelJob& job) {
    auto finished = [&] { return job.working.load(std::memory_order_acquire) == 0; };
    if (spin_until(finished)) return;
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, finished);
  }
  void serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (open_.empty() && !stopping_) {  // spin a while first: the next job often comes soon
        lock.unlock();
        spin_for_work();
        lock_spinning(lock);
      }
      wake_.wait(lock, [&] { return stopping_ || !open_.empty(); });
      if (stopping_) return;
      ParallelJob& job = *open_.front();
      const std::size_t worker = job.joined++;
      ++job.working;
      if (job.joined == job.workers) {  // it has all the threads it can use
        open_.erase(open_.begin());
        posted_.store(open_.size(), std::memory_order_relaxed);
      }
      lock.unlock();
      job.work(worker);
      lock_spinning(lock);
      if (job.working.fetch_sub(1, std::memory_order_acq_rel) == 1) done_.notify_all();  // the job's last touch
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::vector<ParallelJob*> open_;      // jobs that could use another thread, oldest first
  std::atomic<std::size_t> posted_{0};  // open_.size(), for threads that spin without the mutex
  std::vector<std::thread> threads_;
  bool stopping_ = false;
};

// Runs task(0, worker), ..., task(count - 1, worker) on up to `threads` threads, the
// caller's and the pool's, each taking the next index when it is free; `worker`
// (0 .. threads - 1, the caller 0) says which thread of this call runs it, so that a
// task can use that thread's scratch buffer. With one thread (or one task) everything
// runs here, in order, as worker 0. The first exception a task throws is rethrown here,
// after every thread has left the call.
void parallel_for(std::size_t count, int threads, const std::function<void(std::size_t, std::size_t)>& task) {
  const std::size_t workers = std::min<std::size_t>(count, static_cast<std::size_t>(std::max(1, threads)));
  if (workers <= 1) {
    for (std::size_t i = 0; i < count; ++i) task(i, 0);
    return;
  }
  ParallelJob job(task, count, workers);
  ThreadPool::instance().run(job);
  if (job.failure) std::rethrow_exception(job.failure);
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
