// tests/decoding_test.cpp — api/functional.hpp and api/kv_cache.hpp beyond the goldens: decoding one token at a time equals the
// causal forward, the functional form equals the module, and the rejections name the
// argument. The functional form's own golden cases (format 3) are in golden_test.
#include "support.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>

// This file's names live in namespace decoding_test: tests/module_tests.cpp compiles it with
// other test files, whose own sizes E, H and N would otherwise clash
// with its.
namespace decoding_test {

namespace {

using mha::AttentionPath;
using mha_test::require_close;

constexpr std::size_t E = 16, H = 4, T = 7, N = 2;

template <class T_>
xt::xarray<T_> random_input(const std::vector<std::size_t>& shape, std::uint64_t seed) {
  mha::Generator g(seed);
  xt::xarray<T_> x = xt::zeros<T_>(shape);
  for (auto& v : x) v = static_cast<T_>(g.uniform(-1, 1));
  return x;
}

// A module with non-zero biases, in eval mode (decoding is inference), on `path`.
template <class T_>
mha::MultiheadAttention<T_> decoder(AttentionPath path, bool batch_first = false) {
  mha::MultiheadAttention<T_> m(mha::Options{.embed_dim = E, .num_heads = H, .batch_first = batch_first}, 11);
  m.set_parameter("in_proj_bias", random_input<T_>({3 * E}, 12));
  m.set_parameter("out_proj.bias", random_input<T_>({E}, 13));
  m.eval();
  m.set_attention_path(path);
  return m;
}

// The full causal self-attention over x (T, N, E): row t sees positions 0..t.
template <class T_>
xt::xarray<T_> causal_forward(mha::MultiheadAttention<T_>& m, const xt::xarray<T_>& x, std::size_t len) {
  mha::ForwardOptions<T_> opts;
  opts.attn_mask = xt::xarray<bool>(mha::textbook::causal_mask(len, len));
  opts.need_weights = false;
  return m.forward(x, x, x, opts).attn_output;
}

// Decodes x (T, N, E) one position at a time; the outputs stacked again, (T, N, E).
template <class T_>
xt::xarray<T_> decode_one_at_a_time(mha::MultiheadAttention<T_>& m, const xt::xarray<T_>& x) {
  mha::KVCache<T_> cache;
  xt::xarray<T_> out = xt::zeros<T_>(x.shape());
  for (std::size_t t = 0; t < x.shape(0); ++t) {
    const xt::xarray<T_> token = xt::view(x, xt::range(t, t + 1), xt::all(), xt::all());  // (1, N, E)
    xt::view(out, xt::range(t, t + 1), xt::all(), xt::all()) = cache.step(m, token).attn_output;
    REQUIRE(cache.length() == t + 1);
  }
  return out;
}

}  // namespace

TEST_CASE("decoding T tokens one at a time gives the full causal forward's rows", "[decoding]") {
  for (const auto path : {AttentionPath::reference, AttentionPath::fast}) {
    INFO((path == AttentionPath::fast ? "fast" : "reference"));
    auto m = decoder<double>(path);
    const auto x = random_input<double>({T, N, E}, 1);
    // float64: the cached step and the causal row differ only in the order of a few sums
    require_close<double>("float64 decode", decode_one_at_a_time(m, x), causal_forward(m, x, T), 1e-12, 1e-12);

    auto m32 = decoder<float>(path);
    const auto x32 = random_input<float>({T, N, E}, 1);
    // float32: the golden cases' tolerance (PyTorch's float32 defaults)
    require_close<float>("float32 decode", decode_one_at_a_time(m32, x32), causal_forward(m32, x32, T), 1.3e-6, 1e-5);
  }
}

TEST_CASE("a prompt of several tokens, then single tokens, is the causal forward too", "[decoding]") {
  // The first step takes 4 positions at once (a prompt): causal among themselves.
  auto m = decoder<double>(AttentionPath::fast);
  const auto x = random_input<double>({T, N, E}, 2);
  mha::KVCache<double> cache;
  xt::xarray<double> out = xt::zeros<double>(x.shape());
  xt::view(out, xt::range(0, 4), xt::all(), xt::all()) =
      cache.step(m, xt::xarray<double>(xt::view(x, xt::range(0, 4), xt::all(), xt::all()))).attn_output;
  for (std::size_t t = 4; t < T; ++t)
    xt::view(out, xt::range(t, t + 1), xt::all(), xt::all()) =
        cache.step(m, xt::xarray<double>(xt::view(x, xt::range(t, t + 1), xt::all(), xt::all()))).attn_output;
  require_close<double>("prompt then tokens", out, causal_forward(m, x, T), 1e-12, 1e-12);
}

TEST_CASE("decoding works batch_first and unbatched", "[decoding]") {
  auto m = decoder<double>(AttentionPath::fast, /*batch_first=*/true);
  const auto x = random_input<double>({N, T, E}, 3);  // (N, T, E)
  mha::KVCache<double> cache;
  xt::xarray<double> out = xt::zeros<double>(x.shape());
  for (std::size_t t = 0; t < T; ++t)
    xt::view(out, xt::all(), xt::range(t, t + 1), xt::all()) =
        cache.step(m, xt::xarray<double>(xt::view(x, xt::all(), xt::range(t, t + 1), xt::all()))).attn_output;
  require_close<double>("batch_first decode", out, causal_forward(m, x, T), 1e-12, 1e-12);

  auto u = decoder<double>(AttentionPath::reference);
  const auto xu = random_input<double>({T, E}, 4);  // (T, E)
  mha::KVCache<double> cu;
  xt::xarray<double> outu = xt::zeros<double>(xu.shape());
  for (std::size_t t = 0; t < T; ++t)
    xt::view(outu, xt::range(t, t + 1), xt::all()) =
        cu.step(u, xt::xarray<double>(xt::view(xu, xt::range(t, t + 1), xt::all()))).attn_output;
  require_close<double>("unbatched decode", outu, causal_forward(u, xu, T), 1e-12, 1e-12);
}

TEST_CASE("a cached step is F.multi_head_attention_forward with the cache as static_k and static_v", "[decoding]") {
  auto m = decoder<double>(AttentionPath::fast);
  const auto x = random_input<double>({T, N, E}, 5);
  mha::KVCache<double> cache;
  cache.step(m, xt::xarray<double>(xt::view(x, xt::range(0, T - 1), xt::all(), xt::all())));
  const xt::xarray<double> last = xt::view(x, xt::range(T - 1, T), xt::all(), xt::all());  // (1, N, E)
  const auto step = cache.step(m, last, /*need_weights=*/true);
  const xt::xarray<double> static_k = cache.static_k(), static_v = cache.static_v();  // (N*H, T, D)
  REQUIRE(mha_test::shape_of(static_k) == std::vector<std::size_t>{N * H, T, E / H});
  const auto w = m.parameter("in_proj_weight"), b = m.parameter("in_proj_bias");
  const auto w_o = m.parameter("out_proj.weight"), b_o = m.parameter("out_proj.bias");
  const auto f = mha::multi_head_attention_forward<double>(last, last, last,
                                                           {.embed_dim_to_check = E,
                                                            .num_heads = H,
                                                            .in_proj_weight = &w,
                                                            .in_proj_bias = &b,
                                                            .out_proj_weight = &w_o,
                                                            .out_proj_bias = &b_o,
                                                            .training = false,
                                                            .static_k = &static_k,
                                                            .static_v = &static_v});
  require_close<double>("step vs functional", step.attn_output, f.attn_output, 1e-12, 1e-12);
  require_close<double>("step weights vs functional", mha_test::weights(step), mha_test::weights(f), 1e-12, 1e-12);
}

TEST_CASE("the functional form and the module's forward run the same steps", "[functional]") {
  // Same weights, same inputs, same path: the same numbers, bit for bit.
  for (const auto path : {AttentionPath::reference, AttentionPath::fast}) {
    auto m = decoder<double>(path);
    const auto q = random_input<double>({5, N, E}, 6), kv = random_input<double>({6, N, E}, 7);
    const auto w = m.parameter("in_proj_weight"), b = m.parameter("in_proj_bias");
    const auto w_o = m.parameter("out_proj.weight"), b_o = m.parameter("out_proj.bias");
    const auto f = mha::multi_head_attention_forward<double>(q, kv, kv,
                                                             {.embed_dim_to_check = E,
                                                              .num_heads = H,
                                                              .in_proj_weight = &w,
                                                              .in_proj_bias = &b,
                                                              .out_proj_weight = &w_o,
                                                              .out_proj_bias = &b_o,
                                                              .training = false},
                                                             path);
    const auto out = m.forward(q, kv, kv);
    CHECK(f.attn_output == out.attn_output);
    CHECK(mha_test::weights(f) == mha_test::weights(out));
  }
}

TEST_CASE("static_k and static_v replace the keys and values: what key and value hold is not read", "[functional]") {
  // PyTorch projects key and value and drops the result; here NaN keys change nothing.
  auto m = decoder<double>(AttentionPath::fast);
  const auto q = random_input<double>({3, N, E}, 8), kv = random_input<double>({4, N, E}, 9);
  xt::xarray<double> nan_kv = xt::xarray<double>::from_shape({4, N, E});
  nan_kv.fill(std::nan(""));
  const auto static_k = random_input<double>({N * H, 6, E / H}, 10),
             static_v = random_input<double>({N * H, 6, E / H}, 11);
  const auto w = m.parameter("in_proj_weight"), w_o = m.parameter("out_proj.weight");
  for (const auto path : {AttentionPath::reference, AttentionPath::fast, AttentionPath::memory_efficient}) {
    mha::FunctionalArguments<double> args{.embed_dim_to_check = E,
                                          .num_heads = H,
                                          .in_proj_weight = &w,
                                          .out_proj_weight = &w_o,
                                          .need_weights = false,
                                          .static_k = &static_k,
                                          .static_v = &static_v};
    const auto a = mha::multi_head_attention_forward(q, kv, kv, args, path);
    const auto b = mha::multi_head_attention_forward(q, nan_kv, nan_kv, args, path);
    if (path == AttentionPath::reference) {
      // the reference projects the NaNs as PyTorch does, then drops them
      CHECK(xt::all(xt::isfinite(b.attn_output)));
    }
    require_close<double>("NaN keys replaced", b.attn_output, a.attn_output, 0, 0);
  }
}

TEST_CASE("the functional form rejects what PyTorch rejects, naming the argument", "[functional][errors]") {
  auto m = decoder<double>(AttentionPath::fast);
  const auto x = random_input<double>({3, N, E}, 12);
  const auto w = m.parameter("in_proj_weight"), w_o = m.parameter("out_proj.weight");
  const mha::FunctionalArguments<double> ok{
      .embed_dim_to_check = E, .num_heads = H, .in_proj_weight = &w, .out_proj_weight = &w_o};
  CHECK_NOTHROW(mha::multi_head_attention_forward(x, x, x, ok));

  auto args = ok;
  args.num_heads = 3;  // 16 is not divisible by 3
  CHECK_MHA_ERROR(
      mha::multi_head_attention_forward(x, x, x, args),
      Catch::Matchers::StartsWith("num_heads:") && Catch::Matchers::ContainsSubstring("not divisible by num_heads 3"));
  const xt::xarray<double> bias_k = random_input<double>({1, 1, E}, 13);
  args = ok, args.bias_k = &bias_k;  // bias_v missing
  CHECK_MHA_ERROR(mha::multi_head_attention_forward(x, x, x, args), Catch::Matchers::StartsWith("bias_v:"));
  const xt::xarray<double> wide = random_input<double>({E, E + 1}, 14);
  args = ok, args.out_proj_weight = &wide;
  CHECK_MHA_ERROR(mha::multi_head_attention_forward(x, x, x, args),
                  Catch::Matchers::StartsWith("out_proj_weight:") && Catch::Matchers::ContainsSubstring("(16, 17)"));
  const xt::xarray<double> flat_k = random_input<double>({N * H, E / H}, 15);
  args = ok, args.static_k = &flat_k;
  CHECK_MHA_ERROR(mha::multi_head_attention_forward(x, x, x, args), Catch::Matchers::StartsWith("static_k:"));
  args = ok, args.dropout_p = 0.1;  // training=True by default, as in PyTorch: dropout needs a generator
  CHECK_MHA_ERROR(mha::multi_head_attention_forward(x, x, x, args), Catch::Matchers::StartsWith("generator:"));
  mha::Generator g(1);
  CHECK_NOTHROW(mha::multi_head_attention_forward(x, x, x, args, AttentionPath::automatic, &g));
  args.training = false;  // dropout off: no generator needed
  CHECK_NOTHROW(mha::multi_head_attention_forward(x, x, x, args));
}

TEST_CASE("a KV cache refuses another batch and modules that add keys", "[decoding][errors]") {
  auto m = decoder<double>(AttentionPath::fast);
  mha::KVCache<double> cache;
  cache.step(m, random_input<double>({1, N, E}, 16));
  CHECK_MHA_ERROR(cache.step(m, random_input<double>({1, N + 1, E}, 17)), Catch::Matchers::StartsWith("x:"));
  REQUIRE(cache.length() == 1);  // nothing appended by the refused step
  cache.clear();
  CHECK_NOTHROW(cache.step(m, random_input<double>({1, N + 1, E}, 17)));

  mha::MultiheadAttention<double> with_bias(mha::Options{.embed_dim = E, .num_heads = H, .add_bias_kv = true});
  mha::KVCache<double> other;
  CHECK_MHA_ERROR(other.step(with_bias, random_input<double>({1, N, E}, 18)), Catch::Matchers::StartsWith("options:"));
}

namespace {

// The same decoder on the reference path and on the engine's decoding step
// (engine/decode_step.hpp): E = 256 reads over 1 MiB of weights a step, so the engine's
// step runs on two threads.
struct DecodePair {
  mha::MultiheadAttention<float> reference, engine;
};

DecodePair decode_pair(mha::Options options) {
  mha::MultiheadAttention<float> m(options, 21);
  const auto e = static_cast<std::size_t>(options.embed_dim);
  if (options.bias) {  // biases that show when misplaced
    m.set_parameter("in_proj_bias", random_input<float>({3 * e}, 22));
    m.set_parameter("out_proj.bias", random_input<float>({e}, 24));
  }
  m.eval();
  DecodePair pair{m, m};
  pair.reference.set_attention_path(AttentionPath::reference);
  pair.engine.set_attention_path(AttentionPath::automatic);
  return pair;
}

// Decodes x (T, N, E) with `m`: a prompt of 3 positions, then one position a step.
xt::xarray<float> decode_prompt_then_tokens(mha::MultiheadAttention<float>& m, const xt::xarray<float>& x,
                                            mha::KVCache<float>& cache) {
  xt::xarray<float> out = xt::zeros<float>(x.shape());
  xt::view(out, xt::range(0, 3), xt::all(), xt::all()) =
      cache.step(m, xt::xarray<float>(xt::view(x, xt::range(0, 3), xt::all(), xt::all()))).attn_output;
  for (std::size_t t = 3; t < x.shape(0); ++t)
    xt::view(out, xt::range(t, t + 1), xt::all(), xt::all()) =
        cache.step(m, xt::xarray<float>(xt::view(x, xt::range(t, t + 1), xt::all(), xt::all()))).attn_output;
  return out;
}

}  // namespace

TEST_CASE("the engine's decoding step equals the reference at every SIMD level, packed, separate, without bias",
          "[decoding]") {
  mha::set_num_threads(2);
  // 37 positions: the last token's scores in whole turns of 8 or 16 keys, as wide as the
  // kernels take them, and 5 more (engine/decode_step.hpp, key_scores)
  const std::size_t n = 3, len = 37;
  // E = 258, H = 6: rows of 16 whole chunks of 16 columns and 2 more (the interleaved
  // copy's tail, engine/decode_weights.hpp), 258 rows (a last block of 2 rows, filled up
  // with zeros), D = 43 (each thread's first and last rows of q, k and v inside a block)
  for (const auto& [name, options] :
       {std::pair{"packed", mha::Options{.embed_dim = 256, .num_heads = 8}},
        std::pair{"separate", mha::Options{.embed_dim = 256, .num_heads = 8, .separate_projections = true}},
        std::pair{"no bias", mha::Options{.embed_dim = 256, .num_heads = 8, .bias = false}},
        std::pair{"E = 258, D = 43", mha::Options{.embed_dim = 258, .num_heads = 6}}}) {
    const auto x = random_input<float>({len, n, static_cast<std::size_t>(options.embed_dim)}, 23);  // (T, N, E)
    auto [reference, engine] = decode_pair(options);
    mha::KVCache<float> expected_cache;
    const auto expected = decode_prompt_then_tokens(reference, x, expected_cache);
    for (const auto level : {mha::SimdLevel::sse2, mha::SimdLevel::avx2, mha::SimdLevel::avx512}) {
      INFO(name << ", kernels at " << mha::to_string(level));
      const auto previous = mha::testing::limit_kernel_simd_level(level);
      mha::KVCache<float> cache;
      const auto got = decode_prompt_then_tokens(engine, x, cache);
      mha::testing::limit_kernel_simd_level(previous);
      // float32: the golden cases' tolerance (PyTorch's float32 defaults); the step sums in
      // another order than the reference's products
      require_close<float>("engine step vs reference", got, expected, 1.3e-6, 1e-5);
      // k and v went into the cache where the reference put them
      require_close<float>("cached keys", cache.static_k(), expected_cache.static_k(), 1.3e-6, 1e-5);
      require_close<float>("cached values", cache.static_v(), expected_cache.static_v(), 1.3e-6, 1e-5);
    }
  }
}

namespace {

// The sum of w floats by halves: v[l] + v[l + w/2] for the first half, then the same on
// that half, down to one float. The order Simd::sum adds in (engine/decode_step.hpp).
float sum_by_halves(std::vector<float> v) {
  for (std::size_t w = v.size(); w > 1; w /= 2)
    for (std::size_t l = 0; l < w / 2; ++l) v[l] = v[l] + v[l + w / 2];
  return v[0];
}

// The same floats added in two other orders: from left to right, and neighbours first
// (v[2l] + v[2l + 1], then the same on those sums).
float sum_left_to_right(const std::vector<float>& v) {
  float s = 0.0f;
  for (const float x : v) s += x;
  return s;
}
float sum_by_neighbours(std::vector<float> v) {
  for (std::size_t w = v.size(); w > 1; w /= 2)
    for (std::size_t l = 0; l < w / 2; ++l) v[l] = v[2 * l] + v[2 * l + 1];
  return v[0];
}

std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }

// The lanes of a vector at each SIMD level: 16-, 32- and 64-byte vectors of floats.
std::size_t float_lanes(mha::SimdLevel level) {
  return level == mha::SimdLevel::avx512 ? 16 : level == mha::SimdLevel::avx2 ? 8 : 4;
}

}  // namespace

TEST_CASE("a vector of keys' scores summed at once has the bits of each summed on its own", "[decoding]") {
  // The step sums a whole vector of keys' scores at once (Simd::sums): lane i of the result
  // must be vector i's sum in the order a sum of one vector takes, by halves. Values from
  // 2^-12 to 2^12 in magnitude, so that other orders give other bits (checked below: left
  // to right, and neighbours first, which a wrong pairing of lanes would take).
  std::mt19937 g(31);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 12);
  std::vector<float> values(256);
  for (auto& v : values) v = std::ldexp(mantissa(g), exponent(g));
  for (const auto level : {mha::SimdLevel::sse2, mha::SimdLevel::avx2, mha::SimdLevel::avx512}) {
    INFO("kernels at " << mha::to_string(level));
    const auto previous = mha::testing::limit_kernel_simd_level(level);
    const auto running = mha::testing::kernel_simd_level();  // the level, or this CPU's if lower
    const auto [one_at_a_time, at_once] = mha::testing::lane_sums(values);
    mha::testing::limit_kernel_simd_level(previous);
    const std::size_t lanes = one_at_a_time.size();
    REQUIRE(lanes == float_lanes(running));  // the width asked for ran
    REQUIRE(at_once.size() == lanes);
    std::size_t left_to_right_differs = 0, by_neighbours_differs = 0;
    for (std::size_t i = 0; i < lanes; ++i) {
      const auto first = values.begin() + static_cast<std::ptrdiff_t>(i * lanes);
      const std::vector<float> vector(first, first + static_cast<std::ptrdiff_t>(lanes));
      const float expected = sum_by_halves(vector);
      INFO("vector " << i);
      REQUIRE(bits(one_at_a_time[i]) == bits(expected));
      REQUIRE(bits(at_once[i]) == bits(expected));
      left_to_right_differs += bits(sum_left_to_right(vector)) != bits(expected) ? 1 : 0;
      by_neighbours_differs += bits(sum_by_neighbours(vector)) != bits(expected) ? 1 : 0;
    }
    // the values tell the orders apart: another order would have failed above
    REQUIRE(left_to_right_differs > 0);
    REQUIRE(by_neighbours_differs > 0);
  }
  REQUIRE_THROWS_WITH(mha::testing::lane_sums(std::vector<float>(255)),
                      "values: lane_sums takes 16 vectors of 16 floats, 256, got 255");
}

TEST_CASE("the engine's decoding step equals the reference on any thread count, with fewer heads than threads",
          "[decoding]") {
  // The step's threads claim their parts (engine/decode_step.hpp, Phase::claim): with 3 or
  // 5 threads and 2 or 8 heads, some threads have no group of heads, and a part may be
  // taken by a thread other than its own. A head may be attended by a thread other than
  // the one that projected it (HeadQueue).
  const mha_test::LibraryThreadCount threads(1);
  const std::size_t n = 2, len = 6;
  const auto x = random_input<float>({len, n, 256}, 25);  // (T, N, E)
  for (const std::int64_t heads : {2, 8}) {
    auto [reference, engine] = decode_pair(mha::Options{.embed_dim = 256, .num_heads = heads});
    mha::set_num_threads(1);  // the reference on one thread
    mha::KVCache<float> expected_cache;
    const auto expected = decode_prompt_then_tokens(reference, x, expected_cache);
    xt::xarray<float> on_one_thread;
    for (const int count : {1, 2, 3, 5}) {
      INFO(heads << " heads, " << count << " threads");
      mha::set_num_threads(count);
      mha::KVCache<float> cache;
      const auto got = decode_prompt_then_tokens(engine, x, cache);
      require_close<float>("engine step vs reference", got, expected, 1.3e-6, 1e-5);  // as the case above
      require_close<float>("cached keys", cache.static_k(), expected_cache.static_k(), 1.3e-6, 1e-5);
      // every dot product and every head's attention sums in one order, whichever thread
      // runs it: the same bits on any thread count
      if (count == 1) on_one_thread = got;
      REQUIRE(xt::all(xt::equal(got, on_one_thread)));
    }
  }
}

TEST_CASE("the engine's decoding step reads the weights as they are now, not as they were at its last step",
          "[decoding]") {
  // The step reads its own interleaved copy of the weights (engine/decode_weights.hpp),
  // made again when the weights change: each weight set between two steps must show.
  mha::set_num_threads(2);
  const std::size_t n = 2, len = 8;
  const auto x = random_input<float>({len, n, 256}, 26);  // (T, N, E)
  for (const bool separate : {false, true}) {
    auto [reference, engine] =
        decode_pair(mha::Options{.embed_dim = 256, .num_heads = 8, .separate_projections = separate});
    mha::KVCache<float> expected_cache, cache;
    std::uint64_t seed = 27;
    for (std::size_t t = 0; t < len; ++t) {
      // before steps 2 and 4 the in-projection changes, before steps 5 and 6 out_proj
      std::vector<std::string> changed;
      if (t == 2 || t == 4)
        changed = separate ? std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight"}
                           : std::vector<std::string>{"in_proj_weight"};
      if (t == 5 || t == 6) changed = {"out_proj.weight"};
      for (const auto& weight : changed) {
        const auto shape = reference.parameter(weight).shape();
        // uniform in (-1/16, 1/16) = (-1/sqrt(E), 1/sqrt(E)), the scale of the module's own weights
        const xt::xarray<float> value =
            random_input<float>(std::vector<std::size_t>(shape.begin(), shape.end()), seed++) / 16.0f;
        reference.set_parameter(weight, value), engine.set_parameter(weight, value);
      }
      INFO((separate ? "separate" : "packed") << ", step " << t);
      const xt::xarray<float> token = xt::view(x, xt::range(t, t + 1), xt::all(), xt::all());  // (1, N, E)
      require_close<float>("engine step vs reference", cache.step(engine, token).attn_output,
                           expected_cache.step(reference, token).attn_output, 1.3e-6, 1e-5);  // as the cases above
    }
  }
}

}  // namespace decoding_test
