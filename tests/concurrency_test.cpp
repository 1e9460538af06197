// tests/concurrency_test.cpp — many threads, one module: forward() from several threads at once gives, bit for bit,
// what one call at a time gives, on every path, with the weights and without; so does
// backward() of one record. PyTorch's
// users share one eval-mode module between inference threads; so can this library's.
// Training-mode dropout shares the module's one generator: the calls take turns, and
// together they draw exactly what as many calls one after another draw.
//
// Also built with ThreadSanitizer by scripts/hardening (the `tsan` preset), which then
// reports any data race these calls run into, not only those that change a result.
#include "support.hpp"

#include <set>

// OpenBLAS's own settings, read and set here to see that forward() leaves them alone.
extern "C" void openblas_set_num_threads(int num_threads);
extern "C" int openblas_get_num_threads(void);
extern "C" char* openblas_get_corename(void);

namespace {

using mha::AttentionPath;

// Above the ~20 MFLOP at which a forward splits its GEMMs and heads over the library's threads.
constexpr std::size_t L = 64, S = 96, N = 2, E = 128, H = 4;  // 4 heads of 32
constexpr int threads = 6, calls_per_thread = 4;

xt::xarray<float> random_input(const std::vector<std::size_t>& shape, std::uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::normal_distribution<float> normal;
  xt::xarray<float> x(shape);
  for (auto& v : x) v = normal(engine);
  return x;
}

struct Inputs {
  xt::xarray<float> query = random_input({L, N, E}, 1);
  xt::xarray<float> memory = random_input({S, N, E}, 2);  // key and value (encoder-decoder attention)
  mha::ForwardOptions<float> options;
};

// The same call many times from `threads` threads at once; every result, in any order.
template <class Call>
std::vector<mha::Output<float>> run_concurrently(const Call& call) {
  std::vector<std::vector<mha::Output<float>>> results(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int c = 0; c < calls_per_thread; ++c) results[t].push_back(call(t));
    });
  for (auto& thread : pool) thread.join();
  std::vector<mha::Output<float>> all;
  for (auto& r : results) all.insert(all.end(), r.begin(), r.end());
  return all;
}

bool identical(const mha::Output<float>& a, const mha::Output<float>& b) {
  if (!mha_test::same(a.attn_output, b.attn_output)) return false;
  if (a.attn_output_weights.has_value() != b.attn_output_weights.has_value()) return false;
  return !a.attn_output_weights || mha_test::same(*a.attn_output_weights, *b.attn_output_weights);
}

struct PathCase {
  const char* name;
  AttentionPath path;
  bool need_weights;
};
const PathCase path_cases[] = {
    {"reference, need_weights", AttentionPath::reference, true},
    {"reference", AttentionPath::reference, false},
    {"fast, need_weights", AttentionPath::fast, true},
    {"fast", AttentionPath::fast, false},
    {"memory_efficient", AttentionPath::memory_efficient, false},
    {"automatic, need_weights", AttentionPath::automatic, true},
};

// With both kinds of threads in play: the library's own inside every forward (OpenBLAS
// single-threaded), and the callers' around them.
struct LibraryThreads {
  LibraryThreads() { mha::set_num_threads(2); }
};

TEST_CASE("one eval-mode module shared by 6 threads gives each call's result bit for bit, on every path") {
  const LibraryThreads library_threads;
  Inputs in;
  in.options.attn_mask = mha::Mask<float>(xt::xarray<bool>(random_input({L, S}, 3) > 1.5f));
  for (const auto& pc : path_cases) {
    INFO(pc.name);
    mha::MultiheadAttention<float> module(mha::Options{.embed_dim = E, .num_heads = H}, /*seed=*/7);
    module.eval();
    module.set_attention_path(pc.path);
    auto options = in.options;
    options.need_weights = pc.need_weights;
    const auto alone = module.forward(in.query, in.memory, in.memory, options);
    const auto results = run_concurrently([&](int) { return module.forward(in.query, in.memory, in.memory, options); });
    std::size_t differing = 0;
    for (const auto& r : results) differing += identical(r, alone) ? 0 : 1;
    REQUIRE(differing == 0);
    REQUIRE(results.size() == std::size_t(threads * calls_per_thread));
  }
}

TEST_CASE("one module per thread, 6 threads at once, each equal to the same module alone") {
  const LibraryThreads library_threads;
  Inputs in;
  std::vector<mha::MultiheadAttention<float>> modules;
  for (int t = 0; t < threads; ++t) {
    // A different seed per thread: different weights, so that a mixed-up buffer would show.
    modules.emplace_back(mha::Options{.embed_dim = E, .num_heads = H, .batch_first = false}, /*seed=*/100 + t);
    modules.back().eval();
  }
  std::vector<mha::Output<float>> alone;
  for (auto& m : modules) alone.push_back(m.forward(in.query, in.memory, in.memory));
  std::vector<std::vector<mha::Output<float>>> results(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int c = 0; c < calls_per_thread; ++c)
        results[t].push_back(modules[t].forward(in.query, in.memory, in.memory));
    });
  for (auto& thread : pool) thread.join();
  for (int t = 0; t < threads; ++t)
    for (const auto& r : results[t]) REQUIRE(identical(r, alone[t]));
}

TEST_CASE("training-mode dropout from 6 threads: the calls take turns on the one generator") {
  const LibraryThreads library_threads;
  Inputs in;
  const mha::Options options{.embed_dim = E, .num_heads = H, .dropout = 0.25};
  mha::MultiheadAttention<float> shared(options, /*seed=*/11);
  mha::MultiheadAttention<float> sequential = shared;  // same weights, same generator state
  REQUIRE(shared.training());
  // One after another: the k-th call draws the k-th stretch of the generator's sequence.
  std::set<std::vector<float>> expected;
  for (int c = 0; c < threads * calls_per_thread; ++c) {
    const auto out = sequential.forward(in.query, in.memory, in.memory);
    expected.insert(std::vector<float>(out.attn_output.begin(), out.attn_output.end()));
  }
  REQUIRE(expected.size() == std::size_t(threads * calls_per_thread));  // every call drew differently
  // At once: whatever order the calls take, each is one of those stretches, none twice.
  const auto results = run_concurrently([&](int) { return shared.forward(in.query, in.memory, in.memory); });
  std::set<std::vector<float>> got;
  for (const auto& r : results) got.insert(std::vector<float>(r.attn_output.begin(), r.attn_output.end()));
  REQUIRE(got == expected);
}

// Tagged [blas-threads]: with OpenBLAS's own thread pool running, whose spinning TSan
// cannot follow, scripts/hardening leaves this one out of its TSan run.
bool identical(const mha::Gradients<float>& a, const mha::Gradients<float>& b) {
  for (auto [x, y] : {std::pair{&a.query, &b.query}, {&a.key, &b.key}, {&a.value, &b.value}}) {
    if (x->has_value() != y->has_value()) return false;
    if (*x && !mha_test::same(**x, **y)) return false;
  }
  if (a.parameters.size() != b.parameters.size()) return false;
  for (const auto& [name, g] : a.parameters)
    if (!b.parameters.contains(name) || !mha_test::same(g, b.parameters.at(name))) return false;
  return true;
}

TEST_CASE("backward() of one record from 6 threads gives each call's gradients bit for bit, on both paths") {
  const LibraryThreads library_threads;
  Inputs in;
  const auto grad = random_input({L, N, E}, 4);  // dL/d(attn_output)
  for (auto path : {AttentionPath::reference, AttentionPath::fast}) {
    INFO((path == AttentionPath::fast ? "fast" : "reference"));
    mha::MultiheadAttention<float> module(mha::Options{.embed_dim = E, .num_heads = H}, /*seed=*/11);
    module.set_attention_path(path);
    const auto forward = module.forward_for_backward(in.query, in.memory, in.memory, in.options);
    const auto& record = forward.second;
    const auto alone = module.backward(record, grad);
    std::vector<std::vector<mha::Gradients<float>>> results(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        for (int c = 0; c < calls_per_thread; ++c) results[t].push_back(module.backward(record, grad));
      });
    for (auto& thread : pool) thread.join();
    std::size_t differing = 0;
    for (const auto& r : results)
      for (const auto& g : r) differing += identical(g, alone) ? 0 : 1;
    REQUIRE(alone.parameters.size() == 4);  // in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias
    REQUIRE(differing == 0);
  }
}

TEST_CASE("forward() changes no process-wide setting: OpenBLAS's threads and kernel stay as they were",
          "[blas-threads]") {
  Inputs in;
  mha::MultiheadAttention<float> module(mha::Options{.embed_dim = E, .num_heads = H}, /*seed=*/5);
  module.eval();
  const std::string kernel = mha::blas_kernel().name;
  // OpenBLAS with threads of its own (as when nothing was set), then held to one.
  for (const int blas_threads : {2, 1}) {
    openblas_set_num_threads(blas_threads);
    run_concurrently([&](int) { return module.forward(in.query, in.memory, in.memory); });
    REQUIRE(openblas_get_num_threads() == blas_threads);
    REQUIRE(std::string(openblas_get_corename()) == kernel);
  }
}

}  // namespace
