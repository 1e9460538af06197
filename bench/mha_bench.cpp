// bench/mha_bench.cpp — mha-bench: the forward and backward passes of mha::MultiheadAttention<float> timed with
// Google Benchmark, next to the machine's sgemm peaks (OpenBLAS's, oneDNN's), measured in the same run.
//
//   mha-bench [--shapes=all|tiny] [--threads=N] [--path=automatic|reference|fast|memory_efficient]
//             [--blas-kernel=NAME] [--gemm-library=onednn|openblas]
//             [Google Benchmark flags: --benchmark_repetitions, ...]
//   mha-bench --memory [--threads=N]
//
// Each benchmark is self-attention (query is key is value), sequence-first, eval mode,
// float32, at the benchmark's shapes (README, Performance) (L = S, N, E, H): the forward
// with need_weights true and false, the backward (bench_backward) and a training step,
// forward and backward (bench_train_step). Then decoding:
// one token's step with a KV cache of 128, 1024 and 8192 positions, and the same step
// without one (bench_decode_step, bench_decode_no_cache). And the machine's read bandwidth,
// memory_read/bytes=B: a buffer of B bytes read repeatedly by the library's thread count
// (bench_memory_read), at the working set of each decoding step (its 4*E*E weights and its
// 2*t*E cache, float32), at 16 MiB (the four weights alone) and at 256 MiB (from memory).
// Its gflops counter counts the multiply-adds of multi-head attention:
//   in-projection 2*L*N*E*3E + q.k^T 2*N*L*S*E + P.v 2*N*L*S*E + out_proj 2*L*N*E*E
//   = 8*L*N*E^2 + 4*N*L*S*E.
// --memory runs one forward at L = S = 8192, N = 1, E = 512, H = 8 without weights and
// prints the process's peak resident set size (getrusage). bench/compare runs both, and
// PyTorch, and prints the table. --blas-kernel=NAME has OpenBLAS run kernel NAME
// (mha::use_blas_kernel) before anything is timed; without it, mha::use_best_blas_kernel
// runs first, as in the tools and tutorials. --gemm-library=openblas has OpenBLAS run every GEMM
// (mha::use_gemm_library), to time the engine as it was before oneDNN. The sgemm peaks are
// OpenBLAS's and, where the build has it, oneDNN's, each on the library's thread count.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads.
#include "third_party_xtensor.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <benchmark/benchmark.h>
#include <chrono>
#include <cstring>
#include <thread>
#include <sys/resource.h>
#if MHA_ONEDNN
#include <dnnl.h>
// OpenMP's thread count for oneDNN's sgemm peak (clang has no omp.h for GCC's libgomp).
extern "C" int omp_get_max_threads(void);
extern "C" void omp_set_num_threads(int num_threads);
#endif

// OpenBLAS's thread count, for its sgemm peak (cblas.h would clash with xtensor-blas).
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" int openblas_get_num_threads(void);

import mha;

namespace {

struct Shape {
  std::size_t L, N, E, H;
};

// The benchmark's shapes, and one tiny shape for the CTest smoke test.
const std::vector<Shape> benchmark_shapes = {{16, 2, 64, 4}, {128, 8, 512, 8}, {512, 4, 768, 12}, {1024, 1, 1024, 16}};
const std::vector<Shape> tiny_shapes = {{4, 2, 8, 2}};

double mha_flops(const Shape& s) {
  const double L = static_cast<double>(s.L), N = static_cast<double>(s.N), E = static_cast<double>(s.E);
  return 8.0 * L * N * E * E + 4.0 * N * L * L * E;
}

xt::xarray<float> random_input(std::size_t L, std::size_t N, std::size_t E, std::uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::normal_distribution<float> normal;
  xt::xarray<float> x = xt::xarray<float>::from_shape({L, N, E});  // (L, N, E)
  for (auto& v : x) v = normal(engine);
  return x;
}

mha::AttentionPath path_from_name(const std::string& name) {
  if (name == "automatic") return mha::AttentionPath::automatic;
  if (name == "reference") return mha::AttentionPath::reference;
  if (name == "fast") return mha::AttentionPath::fast;
  if (name == "memory_efficient") return mha::AttentionPath::memory_efficient;
  throw mha::Error(fmt::format("--path: expected automatic, reference, fast or memory_efficient, got '{}'", name));
}

// Minor page faults of this process so far (getrusage): each one is a page of memory touched
// for the first time since it was mapped, about 2.7 ms per MiB on some machines. A steady
// loop that reuses its memory has none.
long page_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// The faults_per_call counter of a row: the page faults of its timed loop, per call.
struct FaultCount {
  long start = page_faults();
  void report(benchmark::State& state) const {
    const auto calls = static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations()));
    state.counters["faults_per_call"] = static_cast<double>(page_faults() - start) / calls;
  }
};

// The module every row times: embed_dim E, H heads, the same seed, float32.
mha::MultiheadAttention<float> bench_module(const Shape& s) {
  mha::Options options;
  options.embed_dim = static_cast<std::int64_t>(s.E), options.num_heads = static_cast<std::int64_t>(s.H);
  return mha::MultiheadAttention<float>(options, /*seed=*/1);
}

// warm_up_note: each row runs its call once before the timing, as bench/torch_mha.py warms
// PyTorch up for 0.1 s: the first call of a new module makes W^T, has oneDNN generate its
// kernels for the shapes, and grows the allocator's heap, which later calls reuse. A
// repetition of a training step is only a few iterations long, so without it that
// one-time cost would be averaged into every repetition's time.
void bench_forward(benchmark::State& state, Shape s, bool need_weights, mha::AttentionPath path) {
  auto module = bench_module(s);
  module.eval();
  module.set_attention_path(path);
  const auto x = random_input(s.L, s.N, s.E, 2);  // (L, N, E)
  mha::ForwardOptions<float> opts;
  opts.need_weights = need_weights;
  module.forward(x, x, x, opts);  // warm-up, untimed (see warm_up_note)
  const FaultCount faults;
  for (auto _ : state) {
    auto out = module.forward(x, x, x, opts);  // self-attention: the same object three times
    benchmark::DoNotOptimize(out.attn_output.data());
    benchmark::ClobberMemory();
  }
  faults.report(state);
  state.counters["gflops"] = benchmark::Counter(mha_flops(s) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = mha::num_threads();
}

// The backward pass alone: one forward_for_backward() (training mode, dropout 0,
// need_weights=false) outside the timing, then backward() of loss = sum(attn_output * grad)
// for the input and every parameter, as torch.autograd.grad in bench/torch_mha.py. Its
// gflops counter counts twice the forward's multiply-adds (each product of the forward
// gives two in the backward): 16*L*N*E^2 + 8*N*L*S*E.
void bench_backward(benchmark::State& state, Shape s, mha::AttentionPath path) {
  auto module = bench_module(s);
  module.set_attention_path(path);
  const auto x = random_input(s.L, s.N, s.E, 2);     // (L, N, E)
  const auto grad = random_input(s.L, s.N, s.E, 3);  // dL/d(attn_output) (L, N, E)
  mha::ForwardOptions<float> opts;
  opts.need_weights = false;
  const auto [output, record] = module.forward_for_backward(x, x, x, opts);
  module.backward(record, grad);  // warm-up, untimed (see warm_up_note)
  const FaultCount faults;
  for (auto _ : state) {
    auto gradients = module.backward(record, grad);
    benchmark::DoNotOptimize(gradients.parameters.size());
    benchmark::ClobberMemory();
  }
  faults.report(state);
  state.counters["gflops"] =
      benchmark::Counter(2.0 * mha_flops(s) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = mha::num_threads();
}

// A training step: forward_for_backward() then backward(), both timed, in training mode
// with dropout 0 and need_weights=false, for the input and every parameter, as one step of
// PyTorch's module.train(); out = mha(x, x, x, need_weights=False)[0]; autograd
// (bench/torch_mha.py). Its gflops counter counts the forward's multiply-adds and the
// backward's: 3 * (8*L*N*E^2 + 4*N*L*S*E).
void bench_train_step(benchmark::State& state, Shape s, mha::AttentionPath path) {
  auto module = bench_module(s);
  module.train();
  module.set_attention_path(path);
  const auto x = random_input(s.L, s.N, s.E, 2);     // (L, N, E)
  const auto grad = random_input(s.L, s.N, s.E, 3);  // dL/d(attn_output) (L, N, E)
  mha::ForwardOptions<float> opts;
  opts.need_weights = false;
  {  // warm-up, untimed (see warm_up_note)
    const auto [output, record] = module.forward_for_backward(x, x, x, opts);
    module.backward(record, grad);
  }
  const FaultCount faults;
  for (auto _ : state) {
    const auto [output, record] = module.forward_for_backward(x, x, x, opts);
    auto gradients = module.backward(record, grad);
    benchmark::DoNotOptimize(output.attn_output.data());
    benchmark::DoNotOptimize(gradients.parameters.size());
    benchmark::ClobberMemory();
  }
  faults.report(state);
  state.counters["gflops"] =
      benchmark::Counter(3.0 * mha_flops(s) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = mha::num_threads();
}

// Decoding: one new token per sequence (N sequences, 1 by default) attending to `cached`
// earlier ones, E = 1024, H = 16.
struct DecodeShape {
  std::size_t cached, E, H, N = 1;
};
const std::vector<DecodeShape> decode_shapes = {
    {128, 1024, 16}, {1024, 1024, 16}, {8192, 1024, 16}, {1024, 1024, 16, 4}, {1024, 1024, 16, 16}};
const std::vector<DecodeShape> tiny_decode_shapes = {{4, 8, 2}, {4, 8, 2, 3}};

mha::MultiheadAttention<float> decode_module(const DecodeShape& s, mha::AttentionPath path) {
  mha::MultiheadAttention<float> module(
      mha::Options{.embed_dim = static_cast<std::int64_t>(s.E), .num_heads = static_cast<std::int64_t>(s.H)}, 1);
  module.eval();
  module.set_attention_path(path);
  return module;
}

// The row's name: N appears when it is not 1.
std::string decode_name(std::string_view kind, const DecodeShape& s) {
  return fmt::format("{}/cached={}/E={}/H={}{}", kind, s.cached, s.E, s.H, s.N == 1 ? "" : fmt::format("/N={}", s.N));
}

// One decoding step with a KV cache (mha::KVCache): the new tokens' q, k and v projected,
// k and v appended, their attention over the cached + 1 positions, out_proj. The cache is
// filled outside the timing (in chunks of 512 positions, causal) and cut back to `cached`
// after every step, so each step sees the same length. The first step, untimed, makes the
// cache's room for position cached + 1: when `cached` is a power of two the cache doubles
// there, once, which a decoding loop pays once per doubling (KVCache::grow).
void bench_decode_step(benchmark::State& state, DecodeShape s, mha::AttentionPath path) {
  auto module = decode_module(s, path);
  const auto prompt = random_input(s.cached, s.N, s.E, 2);  // (t, N, E)
  mha::KVCache<float> cache;
  for (std::size_t t0 = 0; t0 < s.cached; t0 += 512) {
    const std::size_t t1 = std::min(s.cached, t0 + 512);
    cache.step(module, xt::xarray<float>(xt::view(prompt, xt::range(t0, t1), xt::all(), xt::all())));
  }
  const auto token = random_input(1, s.N, s.E, 3);  // (1, N, E)
  cache.step(module, token);                        // warm-up, untimed (see warm_up_note): the room for one more
  cache.truncate(s.cached);
  const FaultCount faults;
  for (auto _ : state) {
    auto out = cache.step(module, token);
    benchmark::DoNotOptimize(out.attn_output.data());
    cache.truncate(s.cached);
  }
  faults.report(state);
  state.counters["cached"] = static_cast<double>(s.cached);
}

// The same step without a cache: the new token's query against the k and v of all
// cached + 1 positions, projected again (no mask needed: the last position sees them all).
void bench_decode_no_cache(benchmark::State& state, DecodeShape s, mha::AttentionPath path) {
  auto module = decode_module(s, path);
  const auto sequence = random_input(s.cached + 1, s.N, s.E, 2);  // (t + 1, N, E)
  const xt::xarray<float> token = xt::view(sequence, xt::range(s.cached, s.cached + 1), xt::all(), xt::all());
  mha::ForwardOptions<float> opts;
  opts.need_weights = false;
  module.forward(token, sequence, sequence, opts);  // warm-up, untimed (see warm_up_note)
  const FaultCount faults;
  for (auto _ : state) {
    auto out = module.forward(token, sequence, sequence, opts);
    benchmark::DoNotOptimize(out.attn_output.data());
  }
  faults.report(state);
  state.counters["cached"] = static_cast<double>(s.cached);
}

// The sgemm peak of one library: a (n, n) x (n, n) product, as fast as that library runs
// it on the library's thread count. OpenBLAS gets that many threads of its own for the
// measurement, and oneDNN that many OpenMP threads; both settings are put back after.
// C (n, n) = A (n, n) x B (n, n), row-major, on `library`.
void sgemm(mha::GemmLibrary library, std::size_t n, const float* a, const float* b, float* c) {
  using index = xt::blas_index_t;
  const auto m = static_cast<index>(n);
#if MHA_ONEDNN
  if (library == mha::GemmLibrary::onednn) {
    dnnl_sgemm('N', 'N', m, m, m, 1.0f, a, m, b, m, 0.0f, c, m);
    return;
  }
#endif
  (void)library;  // OpenBLAS: the only library of a build without oneDNN
  cxxblas::gemm<index>(cxxblas::RowMajor, cxxblas::NoTrans, cxxblas::NoTrans, m, m, m, 1.0f, a, m, b, m, 0.0f, c, m);
}

void bench_sgemm(benchmark::State& state, std::size_t n, mha::GemmLibrary library) {
  std::vector<float> a(n * n, 1.0f), b(n * n, 0.5f), c(n * n, 0.0f);
  const int threads = mha::num_threads();
  const int openblas_threads = openblas_get_num_threads();
  openblas_set_num_threads(threads);
#if MHA_ONEDNN
  const int openmp_threads = omp_get_max_threads();
  omp_set_num_threads(threads);
#endif
  const FaultCount faults;
  for (auto _ : state) {
    sgemm(library, n, a.data(), b.data(), c.data());
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  faults.report(state);
  openblas_set_num_threads(openblas_threads);
#if MHA_ONEDNN
  omp_set_num_threads(openmp_threads);
#endif
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  state.counters["gflops"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
}

// The read bandwidth: a buffer of floats read from start to end, again and again, as a
// steady loop of decoding steps reads its weights and its cache. The buffer is cut into one
// contiguous part per thread; the caller reads the first part and each helper thread one
// other, the same part every time, every helper spinning between reads (as the library's
// pool does), so that a read pays no thread start. Each part is read as fast as this
// program knows how (sum_of): the bound a step is measured against must be the machine's,
// not a slow loop's. The sums are kept so that no read can be left out.
struct alignas(64) PartSum {  // one thread's sum, on a cache line of its own
  float value = 0.0f;
};

// The sum of count floats from `part`, in the compiler's vectors of `Bytes` bytes: eight
// independent accumulators (the loads, not the additions, are the limit), each 64-byte
// line asked for 8 KiB ahead of its read, as the decoding step asks for its weights (a
// plain loop of 16-byte loads, without the hints, reads a step's working set much slower).
template <std::size_t Bytes>
[[gnu::always_inline]] inline float sum_at_width(const float* part, std::size_t count) {
  using V [[gnu::vector_size(Bytes)]] = float;
  constexpr std::size_t lanes = Bytes / sizeof(float), accumulators = 8, line = 64 / sizeof(float);
  constexpr std::size_t ahead = 8192 / sizeof(float);
  std::array<V, accumulators> acc{};
  std::size_t i = 0;
  for (; i + accumulators * lanes <= count; i += accumulators * lanes)
    for (std::size_t j = 0; j < accumulators; ++j) {
      if ((j * lanes) % line == 0) __builtin_prefetch(part + i + j * lanes + ahead);  // a hint: never faults
      V v;
      std::memcpy(&v, part + i + j * lanes, sizeof v);
      acc[j] += v;
    }
  float total = 0.0f;
  for (const V& a : acc)
    for (std::size_t l = 0; l < lanes; ++l) total += a[l];
  for (; i < count; ++i) total += part[i];
  return total;
}
#if defined(__x86_64__)
[[gnu::target("avx512f")]] float sum_avx512(const float* part, std::size_t count) {
  return sum_at_width<64>(part, count);
}
[[gnu::target("avx2")]] float sum_avx2(const float* part, std::size_t count) { return sum_at_width<32>(part, count); }
#endif
// At the widest vectors this CPU has.
float sum_of(const float* part, std::size_t count) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return sum_avx512(part, count);
  if (__builtin_cpu_supports("avx2")) return sum_avx2(part, count);
#endif
  return sum_at_width<16>(part, count);
}

class ReadTeam {
public:
  ReadTeam(const std::vector<float>& buffer, int threads)
      : data_(buffer.data()), count_(buffer.size()), sums_(static_cast<std::size_t>(threads)) {
    for (int t = 1; t < threads; ++t) helpers_.emplace_back([this, t] { help(t); });
  }
  ReadTeam(const ReadTeam&) = delete;
  ReadTeam& operator=(const ReadTeam&) = delete;
  ~ReadTeam() {
    stop_.store(true, std::memory_order_release);
    for (auto& h : helpers_) h.join();
  }

  // One read of the whole buffer by every thread; the sum of its values.
  float read() {
    done_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);  // the helpers start their parts
    read_part(0);
    while (done_.load(std::memory_order_acquire) != static_cast<int>(helpers_.size())) {}
    float total = 0.0f;
    for (const auto& s : sums_) total += s.value;
    return total;
  }

private:
  void read_part(int t) {
    const std::size_t parts = sums_.size(), part = (count_ + parts - 1) / parts;
    const std::size_t begin = std::min(count_, static_cast<std::size_t>(t) * part);
    const std::size_t end = std::min(count_, begin + part);
    sums_[static_cast<std::size_t>(t)].value = sum_of(data_ + begin, end - begin);
  }

  void help(int t) {
    std::uint64_t seen = 0;
    for (;;) {
      std::uint64_t now = generation_.load(std::memory_order_acquire);
      while (now == seen) {
        if (stop_.load(std::memory_order_acquire)) return;
        now = generation_.load(std::memory_order_acquire);
      }
      seen = now;
      read_part(t);
      done_.fetch_add(1, std::memory_order_acq_rel);
    }
  }

  const float* data_;
  std::size_t count_;
  std::vector<PartSum> sums_;
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<int> done_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> helpers_;
};

// memory_read/bytes=B: B bytes (a whole number of floats) read by mha::num_threads()
// threads, repeatedly; gb_per_s is B / the time of one read, in 1e9 bytes a second. The
// buffer is written once before the timing (first touch of fresh pages is not a read).
void bench_memory_read(benchmark::State& state, std::size_t bytes) {
  const std::vector<float> buffer(bytes / sizeof(float), 1.0f);
  const int threads = mha::num_threads();
  ReadTeam team(buffer, threads);
  benchmark::DoNotOptimize(team.read());  // warm-up: the caches hold what fits, as in a steady loop
  for (auto _ : state) benchmark::DoNotOptimize(team.read());
  const double read = static_cast<double>(buffer.size() * sizeof(float));
  state.counters["bytes"] = read;
  state.counters["gb_per_s"] = benchmark::Counter(read * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
}

// The bytes one decoding step reads: the four (E, E) float32 weights (W_q, W_k, W_v,
// out_proj) and the cache's keys and values, 2 * t * E floats for each of its N sequences
// (N = 1 for a shape that does not say).
template <class DecodeRow>
std::size_t decode_step_bytes(const DecodeRow& s) {
  std::size_t N = 1;
  if constexpr (requires { s.N; }) N = s.N;
  return sizeof(float) * (4 * s.E * s.E + 2 * s.cached * s.E * N);
}

// One forward without weights at L = S = 8192 in this process, then its peak RSS.
int run_memory() {
  const Shape s{8192, 1, 512, 8};
  auto module = bench_module(s);
  module.eval();
  const auto x = random_input(s.L, s.N, s.E, 2);  // (L, N, E)
  mha::ForwardOptions<float> opts;
  opts.need_weights = false;
  const auto start = std::chrono::steady_clock::now();
  const auto out = module.forward(x, x, x, opts);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const double peak_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
  // N*H*L*S float32 weights, the (N*H, L, S) matrix the other paths form.
  const double matrix_mib = static_cast<double>(s.N * s.H * s.L * s.L) * sizeof(float) / (1024.0 * 1024.0);
  fmt::print(
      "memory L=S={} N={} E={} H={} need_weights=false: peak RSS {:.0f} MiB (a materialised attention "
      "matrix needs {:.0f} MiB)\n",
      s.L, s.N, s.E, s.H, peak_mib, matrix_mib);
  fmt::print("memory forward took {:.2f} s with {} threads, path {}; output finite: {}\n", seconds, mha::num_threads(),
             module.resolved_attention_path(false, s.L, s.L) == mha::AttentionPath::memory_efficient
                 ? "memory_efficient"
                 : "other",
             static_cast<bool>(xt::all(xt::isfinite(out.attn_output))));
  return 0;
}

mha::GemmLibrary gemm_library_from_name(const std::string& name) {
  if (name == "openblas") return mha::GemmLibrary::openblas;
  if (name == "onednn") return mha::GemmLibrary::onednn;
  throw mha::Error(fmt::format("--gemm-library: expected openblas or onednn, got '{}'", name));
}

// Takes --shapes=, --threads=, --path=, --blas-kernel=, --gemm-library= and --memory out of
// argv; the rest is Google Benchmark's.
struct Arguments {
  std::string shapes = "all";
  std::string blas_kernel;   // empty: the one the library chose
  std::string gemm_library;  // empty: the library's default (oneDNN where built with it)
  int threads = 0;           // 0: the default (OpenBLAS's choice)
  std::string path = "automatic";
  bool memory = false;
};

Arguments take_arguments(int& argc, char** argv) {
  Arguments args;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&](std::string_view flag) { return std::string(a.substr(flag.size())); };
    if (a.starts_with("--shapes=")) args.shapes = value("--shapes=");
    else if (a.starts_with("--threads=")) args.threads = std::stoi(value("--threads="));
    else if (a.starts_with("--path=")) args.path = value("--path=");
    else if (a.starts_with("--blas-kernel=")) args.blas_kernel = value("--blas-kernel=");
    else if (a.starts_with("--gemm-library=")) args.gemm_library = value("--gemm-library=");
    else if (a == "--memory") args.memory = true;
    else argv[kept++] = argv[i];
  }
  argc = kept;
  if (args.shapes != "all" && args.shapes != "tiny")
    throw mha::Error(fmt::format("--shapes: expected all or tiny, got '{}'", args.shapes));
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Arguments args = take_arguments(argc, argv);
    if (args.threads != 0) mha::set_num_threads(args.threads);
    // This program's own choice, as the README advises a host: the library's threads do
    // the parallel work, and OpenBLAS threads inside theirs would only compete for the
    // cores (with --gemm-library=openblas, every float GEMM is OpenBLAS's).
    openblas_set_num_threads(1);
    if (!args.blas_kernel.empty()) mha::use_blas_kernel(args.blas_kernel);
    else mha::use_best_blas_kernel();  // OpenBLAS's best kernel for this CPU (README: the BLAS kernel)
    if (!args.gemm_library.empty()) mha::use_gemm_library(gemm_library_from_name(args.gemm_library));
    if (args.memory) return run_memory();

    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    // The OpenBLAS kernel behind every GEMM here, sgemm_peak's included (platform/blas.hpp).
    benchmark::AddCustomContext("blas_kernel", mha::blas_kernel().name);
    benchmark::AddCustomContext("blas_kernel_chosen_by", mha::blas_kernel().chosen_by);
    benchmark::AddCustomContext("cpu_simd_level", mha::to_string(mha::cpu_simd_level()));
    // The library that runs the large float GEMMs (platform/gemm_library.hpp).
    benchmark::AddCustomContext("gemm_library", mha::to_string(mha::gemm_library()));
    benchmark::AddCustomContext("onednn_version", mha::onednn_version().value_or("none"));
    const bool tiny = args.shapes == "tiny";
    const mha::AttentionPath path = path_from_name(args.path);
    for (const auto& s : tiny ? tiny_shapes : benchmark_shapes)
      for (bool need_weights : {true, false})
        benchmark::RegisterBenchmark(
            fmt::format("mha/L={}/N={}/E={}/H={}/need_weights={}", s.L, s.N, s.E, s.H, need_weights).c_str(),
            bench_forward, s, need_weights, path)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
    for (const auto& s : tiny ? tiny_shapes : benchmark_shapes)
      benchmark::RegisterBenchmark(fmt::format("mha_backward/L={}/N={}/E={}/H={}", s.L, s.N, s.E, s.H).c_str(),
                                   bench_backward, s, path)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    for (const auto& s : tiny ? tiny_shapes : benchmark_shapes)
      benchmark::RegisterBenchmark(fmt::format("mha_train_step/L={}/N={}/E={}/H={}", s.L, s.N, s.E, s.H).c_str(),
                                   bench_train_step, s, path)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    for (const auto& s : tiny ? tiny_decode_shapes : decode_shapes) {
      benchmark::RegisterBenchmark(decode_name("mha_decode_step", s).c_str(), bench_decode_step, s, path)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark(decode_name("mha_decode_no_cache", s).c_str(), bench_decode_no_cache, s, path)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
    const std::size_t n = tiny ? 64 : 2048;
    benchmark::RegisterBenchmark(fmt::format("sgemm_peak/n={}", n).c_str(), bench_sgemm, n, mha::GemmLibrary::openblas)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    if (mha::onednn_version())
      benchmark::RegisterBenchmark(fmt::format("sgemm_peak_onednn/n={}", n).c_str(), bench_sgemm, n,
                                   mha::GemmLibrary::onednn)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    // The read bandwidth at each decoding step's working set, at the weights alone, and from memory.
    std::vector<std::size_t> read_sizes;
    for (const auto& s : tiny ? tiny_decode_shapes : decode_shapes) read_sizes.push_back(decode_step_bytes(s));
    if (!tiny) read_sizes.insert(read_sizes.end(), {std::size_t{16} << 20, std::size_t{256} << 20});
    std::sort(read_sizes.begin(), read_sizes.end());  // each size once
    read_sizes.erase(std::unique(read_sizes.begin(), read_sizes.end()), read_sizes.end());
    for (const std::size_t bytes : read_sizes)
      benchmark::RegisterBenchmark(fmt::format("memory_read/bytes={}", bytes).c_str(), bench_memory_read, bytes)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "mha-bench: {}\n", e.what());
    return 2;
  }
}
