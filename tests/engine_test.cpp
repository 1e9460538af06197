// tests/engine_test.cpp — mha:engine and the internal files behind it (engine/fast_attention.hpp, engine/flash_attention.hpp,
// engine/softmax_kernels.hpp, engine/attention_problem.hpp, platform/linear.hpp), held to the reference path.
//
// On random float64 inputs covering every option, fast and memory_efficient must equal the
// reference path to rounding, with NaN in exactly the same places; the engine follows
// every change of the weights and gives the same results on one thread and two. (Every
// golden case runs through every path in golden_test; random options in differential_test.)
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads.
#include "support.hpp"

#include <set>

namespace {

using mha::AttentionPath;
using mha_test::require_close;

using mha_test::all_paths;

// ---- random float64 inputs: the fast paths equal the reference ------------------------

// Reference and candidate differ only in the order of floating-point sums (BLAS blocks,
// tiles, the online rescaling); in float64 that moves the last few bits, far below 1e-9.
constexpr double path_rtol = 1e-9, path_atol = 1e-12;

using Engine = mha::Generator;

xt::xarray<double> random_tensor(const std::vector<std::size_t>& shape, Engine& g) {
  return mha_test::random_tensor<double>(shape, g);
}

xt::xarray<bool> random_bool_mask(const std::vector<std::size_t>& shape, double p, Engine& g) {
  xt::xarray<bool> m(shape);
  for (auto&& v : m) v = g.bernoulli(p);
  return m;
}

struct RandomCase {
  std::string name;
  mha::Options options;
  std::size_t L = 0, S = 0, N = 0;  // N = 0: unbatched
  bool self_attention = false, key_is_value = false;
  bool need_weights = true, average = true, training = false, is_causal = false;
  std::string attn_mask;  // "", "bool2d", "float2d", "bool3d", "float3d", "causal"
  bool key_padding_mask = false;
  bool fully_masked_row = false;  // query row 1 sees no key; batch entry 0 (if N > 1) is all padding
};

// Runs the case through `path` on a copy of `module`, same inputs and same dropout draws.
mha::Output<double> run_path(const mha::MultiheadAttention<double>& module, AttentionPath path, const RandomCase& rc,
                             const xt::xarray<double>& query, const xt::xarray<double>& key,
                             const xt::xarray<double>& value, const mha::ForwardOptions<double>& opts) {
  auto m = module;
  m.set_attention_path(path);
  if (rc.self_attention) return m.forward(query, query, query, opts);
  if (rc.key_is_value) return m.forward(query, key, key, opts);
  return m.forward(query, key, value, opts);
}

// The case's query, key and value: (L, N, E), (N, L, E) batch_first, or (L, E) unbatched.
struct Inputs {
  xt::xarray<double> query, key, value;
};
Inputs random_inputs(const RandomCase& rc, Engine& g) {
  const mha::Options& o = rc.options;
  const auto E = static_cast<std::size_t>(o.embed_dim);
  const auto Ek = static_cast<std::size_t>(o.kdim.value_or(o.embed_dim));
  const auto Ev = static_cast<std::size_t>(o.vdim.value_or(o.embed_dim));
  auto shape = [&](std::size_t len, std::size_t width) {
    if (rc.N == 0) return std::vector<std::size_t>{len, width};
    return o.batch_first ? std::vector<std::size_t>{rc.N, len, width} : std::vector<std::size_t>{len, rc.N, width};
  };
  return {random_tensor(shape(rc.L, E), g), random_tensor(shape(rc.S, Ek), g), random_tensor(shape(rc.S, Ev), g)};
}

// The case's forward options with its masks: attn_mask of the kind named, key_padding_mask.
mha::ForwardOptions<double> random_forward_options(const RandomCase& rc, Engine& g) {
  mha::ForwardOptions<double> opts;
  opts.need_weights = rc.need_weights, opts.average_attn_weights = rc.average, opts.is_causal = rc.is_causal;
  const bool batched = rc.N > 0;
  const std::size_t N = batched ? rc.N : 1, B = N * static_cast<std::size_t>(rc.options.num_heads);
  if (rc.attn_mask == "bool2d" || rc.attn_mask == "bool3d") {
    auto m =
        rc.attn_mask == "bool2d" ? random_bool_mask({rc.L, rc.S}, 0.3, g) : random_bool_mask({B, rc.L, rc.S}, 0.3, g);
    if (rc.fully_masked_row) xt::strided_view(m, {xt::ellipsis(), 1, xt::all()}) = true;  // query 1 sees no key
    opts.attn_mask = mha::Mask<double>(m);
  } else if (rc.attn_mask == "float2d") {
    opts.attn_mask = mha::Mask<double>(random_tensor({rc.L, rc.S}, g));
  } else if (rc.attn_mask == "float3d") {
    opts.attn_mask = mha::Mask<double>(random_tensor({B, rc.L, rc.S}, g));
  } else if (rc.attn_mask == "causal") {
    opts.attn_mask = mha::Mask<double>(xt::xarray<bool>(mha::textbook::causal_mask(rc.L, rc.S)));
  }
  if (rc.key_padding_mask) {
    auto m = batched ? random_bool_mask({N, rc.S}, 0.25, g) : random_bool_mask({rc.S}, 0.25, g);
    if (rc.fully_masked_row && batched && N > 1) xt::view(m, 0, xt::all()) = true;  // batch entry 0: all padding
    opts.key_padding_mask = mha::Mask<double>(m);
  }
  return opts;
}

void check_random_case(const RandomCase& rc) {
  Engine g(1234);
  const auto [query, key, value] = random_inputs(rc, g);
  const auto opts = random_forward_options(rc, g);
  mha::MultiheadAttention<double> module(rc.options, 7);
  module.train(rc.training);
  const auto expected = run_path(module, AttentionPath::reference, rc, query, key, value, opts);
  // The case tests what it says: a row that sees no key is NaN, unless an extra key rescues
  // it, or 2.x's SDPA (need_weights=false) gives it weight 0.
  const bool sdpa = rc.options.pytorch == mha::PyTorchVersion::v2 && !rc.need_weights;
  if (rc.fully_masked_row && !rc.options.add_bias_kv && !rc.options.add_zero_attn)
    REQUIRE(xt::any(xt::isnan(expected.attn_output)) != sdpa);

  for (const auto& [path_name, path] : all_paths) {
    if (path == AttentionPath::reference) continue;
    const bool refuses = path == AttentionPath::memory_efficient && rc.need_weights;
    INFO(rc.name << " through " << path_name);
    if (refuses) {
      REQUIRE_THROWS_AS(run_path(module, path, rc, query, key, value, opts), mha::Error);
      continue;
    }
    const auto got = run_path(module, path, rc, query, key, value, opts);
    require_close<double>(rc.name + " attn_output (" + path_name + ")", got.attn_output, expected.attn_output,
                          path_rtol, path_atol);
    REQUIRE(got.attn_output_weights.has_value() == expected.attn_output_weights.has_value());
    if (expected.attn_output_weights)
      require_close<double>(rc.name + " attn_output_weights (" + path_name + ")", mha_test::weights(got),
                            *expected.attn_output_weights, path_rtol, path_atol);
  }
  // The same case without weights, so that memory_efficient runs it too: as PyTorch 2.x
  // (SDPA) and as 1.13 (whose fully masked rows keep the engine's NaN on every path).
  if (rc.need_weights) {
    auto without = rc;
    without.need_weights = false;
    without.name += " need_weights=false";
    check_random_case(without);
    without.options.pytorch = mha::PyTorchVersion::v1_13;
    without.name += " (PyTorch 1.13)";
    check_random_case(without);
  }
}

mha::Options options(std::int64_t E, std::int64_t H) {
  mha::Options o;
  o.embed_dim = E, o.num_heads = H;
  return o;
}

RandomCase random_case(std::string name, mha::Options o, std::size_t L, std::size_t S, std::size_t N) {
  RandomCase c;
  c.name = std::move(name), c.options = o, c.L = L, c.S = S, c.N = N;
  return c;
}

// Large enough for several tiles of the memory-efficient path (128 queries x 256 keys)
// and for its threads; small enough for the loop nests of the reference.
constexpr std::size_t L_big = 200, S_big = 300;

// Cases of inputs and masks: self, key is value and cross attention, every mask kind.
std::vector<RandomCase> cases_of_inputs_and_masks() {
  std::vector<RandomCase> cases;
  {
    auto c = random_case("self-attention, packed, no masks", options(16, 4), 9, 9, 2);
    c.self_attention = true;
    cases.push_back(c);
  }
  {
    auto c = random_case("self-attention, several tiles, threads", options(16, 2), L_big, L_big, 2);
    c.self_attention = true, c.attn_mask = "float2d", c.key_padding_mask = true;
    cases.push_back(c);
  }
  {
    auto c = random_case("cross-attention, several tiles, 3-D bool mask, fully masked rows", options(16, 2), L_big,
                         S_big, 2);
    c.attn_mask = "bool3d", c.key_padding_mask = true, c.fully_masked_row = true, c.average = false;
    cases.push_back(c);
  }
  {
    auto c = random_case("key is value, 2-D bool mask, fully masked rows", options(12, 3), 7, 11, 3);
    c.key_is_value = true, c.attn_mask = "bool2d", c.key_padding_mask = true, c.fully_masked_row = true;
    cases.push_back(c);
  }
  return cases;
}

// Cases of the extra keys: bias_k/bias_v and add_zero_attn, rescuing fully masked rows.
std::vector<RandomCase> cases_of_extra_keys() {
  std::vector<RandomCase> cases;
  {
    auto o = options(12, 3);
    o.add_bias_kv = true, o.add_zero_attn = true;
    auto c = random_case("bias_k/bias_v and add_zero_attn, 3-D float mask, padding", o, 6, 8, 2);
    c.attn_mask = "float3d", c.key_padding_mask = true, c.average = false;
    cases.push_back(c);
  }
  {
    auto o = options(8, 2);
    o.add_bias_kv = true;
    auto c = random_case("bias_k/bias_v rescue fully padded batch entries", o, 5, 6, 3);
    c.attn_mask = "bool2d", c.key_padding_mask = true, c.fully_masked_row = true;
    cases.push_back(c);
  }
  {
    auto o = options(8, 2);
    o.add_zero_attn = true;
    auto c = random_case("add_zero_attn rescues a fully masked row", o, 5, 6, 2);
    c.attn_mask = "bool2d", c.fully_masked_row = true;
    cases.push_back(c);
  }
  return cases;
}

// Cases of layouts: kdim/vdim, batch_first, separate projections, unbatched.
std::vector<RandomCase> cases_of_layouts() {
  std::vector<RandomCase> cases;
  {
    auto o = options(16, 4);
    o.kdim = 5, o.vdim = 7, o.batch_first = true;
    auto c = random_case("kdim/vdim, batch_first", o, 6, 9, 2);
    c.attn_mask = "float2d";
    cases.push_back(c);
  }
  {
    auto o = options(16, 2);
    o.batch_first = true;
    auto c = random_case("batch_first self-attention, several tiles", o, L_big, L_big, 2);
    c.self_attention = true, c.key_padding_mask = true, c.average = false;
    cases.push_back(c);
  }
  {
    auto o = options(12, 3);
    o.batch_first = true, o.add_bias_kv = true, o.add_zero_attn = true;
    auto c = random_case("batch_first key is value, bias_k/bias_v, add_zero_attn", o, 7, 9, 3);
    c.key_is_value = true, c.attn_mask = "bool2d", c.key_padding_mask = true, c.fully_masked_row = true;
    cases.push_back(c);
  }
  {
    auto o = options(8, 2);
    o.bias = false, o.separate_projections = true;
    auto c = random_case("separate projections, no bias, unbatched, 3-D mask", o, 5, 7, 0);
    c.attn_mask = "bool3d", c.key_padding_mask = true, c.average = false;
    cases.push_back(c);
  }
  return cases;
}

// Cases of training and threads: dropout, the is_causal hint, projections split over threads.
std::vector<RandomCase> cases_of_training_and_threads() {
  std::vector<RandomCase> cases;
  {
    auto o = options(16, 4);
    o.dropout = 0.3;
    auto c = random_case("dropout in training, the same draws", o, 7, 10, 2);
    c.training = true, c.attn_mask = "float2d", c.key_padding_mask = true;
    cases.push_back(c);
  }
  {
    auto o = options(8, 2);
    o.dropout = 0.25;
    auto c = random_case("dropout in training over several tiles", o, L_big, S_big, 1);
    c.training = true, c.self_attention = false;
    cases.push_back(c);
  }
  {
    auto c = random_case("is_causal hint with need_weights=false", options(8, 2), 6, 6, 2);
    c.self_attention = true, c.attn_mask = "causal", c.is_causal = true, c.need_weights = false;
    cases.push_back(c);
  }
  {
    // 8*L*N*E^2 + 4*N*L*S*E = 66 MFLOP: over the 20 MFLOP at which the fast paths split the
    // in-projection's and out_proj's rows over the threads.
    auto c = random_case("self-attention, projections split over threads", options(64, 4), 300, 300, 2);
    c.self_attention = true, c.key_padding_mask = true;
    cases.push_back(c);
  }
  {
    auto o = options(64, 4);
    o.separate_projections = true, o.batch_first = true;
    auto c = random_case("separate projections, batch_first, split over threads", o, 300, 280, 2);
    c.attn_mask = "float2d";
    cases.push_back(c);
  }
  return cases;
}

TEST_CASE("fast and memory_efficient equal the reference path on random float64 inputs") {
  mha::set_num_threads(2);
  auto cases = cases_of_inputs_and_masks();
  for (auto more : {cases_of_extra_keys(), cases_of_layouts(), cases_of_training_and_threads()})
    for (auto& c : more) cases.push_back(std::move(c));
  for (const auto& c : cases) {
    SECTION(c.name) { check_random_case(c); }
  }
}

// Equal to rounding, as the paths are held to each other above.
bool close(const xt::xarray<double>& got, const xt::xarray<double>& expected) {
  return mha::compare<double>(got, expected, path_rtol, path_atol).ok;
}

// The fast paths keep W^T of every projection weight between calls; a module whose weights
// change must not run on the old ones.
TEST_CASE("the fast paths follow every change of the weights") {
  Engine g(99);
  const bool packed = GENERATE(true, false);
  {
    auto o = options(8, 2);
    o.separate_projections = !packed;
    INFO((packed ? "packed" : "separate"));
    const auto x = random_tensor({5, 2, 8}, g);  // (L, N, E)
    mha::MultiheadAttention<double> fast(o, 1), other(o, 2);
    fast.set_attention_path(AttentionPath::fast);
    auto reference_output = [&](const mha::MultiheadAttention<double>& m) {
      auto r = m;
      r.set_attention_path(AttentionPath::reference);
      return r.forward(x, x, x).attn_output;
    };
    auto fast_output = [&] { return fast.forward(x, x, x).attn_output; };
    REQUIRE(close(fast_output(), reference_output(fast)));
    const auto before = fast_output();

    SECTION("set_parameter, every weight") {
      for (const auto& name : fast.parameter_names()) {
        INFO(name);
        const auto previous = fast_output();
        fast.set_parameter(name, random_tensor(fast.parameter_shape(name), g));
        const auto now = fast_output();
        REQUIRE_FALSE(close(now, previous));
        REQUIRE(close(now, reference_output(fast)));
      }
    }
    SECTION("load_state_dict") {
      fast.load_state_dict(other.state_dict());
      REQUIRE_FALSE(close(fast_output(), before));
      REQUIRE(close(fast_output(), reference_output(other)));
    }
    SECTION("copy assignment, and the copy's own later changes") {
      auto copy = fast;
      fast = other;
      REQUIRE(close(fast_output(), reference_output(other)));
      copy.set_attention_path(AttentionPath::fast);
      REQUIRE(close(copy.forward(x, x, x).attn_output, before));
      copy.set_parameter("out_proj.weight", random_tensor({8, 8}, g));
      REQUIRE(close(copy.forward(x, x, x).attn_output, reference_output(copy)));
      REQUIRE(close(fast_output(), reference_output(other)));
    }
    SECTION("to_separate and to_packed") {
      auto converted = packed ? fast.to_separate() : fast.to_packed();
      converted.set_attention_path(AttentionPath::fast);
      REQUIRE(close(converted.forward(x, x, x).attn_output, before));
    }
  }
}

TEST_CASE("one thread and two give the same results") {
  auto rc = random_case("threads", options(16, 2), L_big, S_big, 2);
  rc.attn_mask = "float2d", rc.key_padding_mask = true, rc.need_weights = false;
  mha::set_num_threads(1);
  REQUIRE(mha::num_threads() == 1);
  check_random_case(rc);
  mha::set_num_threads(2);
  REQUIRE(mha::num_threads() == 2);
  check_random_case(rc);
}

TEST_CASE("set_num_threads rejects fewer than one thread, naming the argument") {
  const int before = mha::num_threads();
  REQUIRE_THROWS_WITH(mha::set_num_threads(0),
                      Catch::Matchers::StartsWith("num_threads: expected at least 1 thread, got 0"));
  REQUIRE(mha::num_threads() == before);
}

}  // namespace

// ---- float32 at realistic sizes: every path held to the float64 reference --------------

namespace {

using mha::SimdLevel;

// The softmax kernels held to `level` for a scope (mha::testing::limit_kernel_simd_level).
struct KernelLevel {
  SimdLevel previous;
  explicit KernelLevel(SimdLevel level) : previous(mha::testing::limit_kernel_simd_level(level)) {}
  KernelLevel(const KernelLevel&) = delete;
  KernelLevel& operator=(const KernelLevel&) = delete;
  ~KernelLevel() { mha::testing::limit_kernel_simd_level(previous); }
};

// The float32 kernels (the Cephes exp, the 8- and 16-lane masked max loops with their
// remainder lanes, the multi-tile online softmax, the AVX-512 tiles of engine/attention_tiles.hpp)
// at odd lengths, with both masks, on both fast paths: L = 157 and S = 613 are neither
// lane nor tile multiples, and S spans several 256-key tiles and 64-key panels. On the
// tiles, L = 157 is a block of 102 query rows (17 tiles of 6) and one of 55 (9 and a
// part tile of 1 row), and S = 613 ends in a panel of 37 keys (2 vectors and 5 lanes). With E = 64,
// H = 4 a head is D = 16 wide, one vector; with E = 60, H = 3 it is D = 20, one vector
// and 4 lanes. The float64 reference of the same weights and inputs is the oracle.
void check_float32_against_float64(std::size_t E, std::size_t H) {
  constexpr std::size_t L = 157, S = 613, N = 2;
  const auto e = static_cast<std::int64_t>(E), h = static_cast<std::int64_t>(H);
  mha::MultiheadAttention<double> reference(mha::Options{.embed_dim = e, .num_heads = h}, 31);
  reference.eval();
  reference.set_attention_path(AttentionPath::reference);
  mha::MultiheadAttention<float> single(mha::Options{.embed_dim = e, .num_heads = h}, 0);
  single.eval();
  mha::StateDict<float> weights;
  for (const auto& [name, w] : reference.state_dict()) weights.emplace(name, xt::xarray<float>(xt::cast<float>(w)));
  single.load_state_dict(weights);
  Engine g(32);
  // Inputs exactly representable in float32, so that both sides start from the same numbers.
  const xt::xarray<double> q = xt::cast<double>(xt::xarray<float>(xt::cast<float>(random_tensor({L, N, E}, g))));
  const xt::xarray<double> kv = xt::cast<double>(xt::xarray<float>(xt::cast<float>(random_tensor({S, N, E}, g))));
  xt::xarray<bool> padding = random_bool_mask({N, S}, 0.2, g);
  xt::xarray<double> attn = xt::cast<double>(xt::xarray<float>(xt::cast<float>(random_tensor({L, S}, g))));
  mha::ForwardOptions<double> opts64;
  opts64.key_padding_mask = mha::Mask<double>(padding), opts64.attn_mask = mha::Mask<double>(attn);
  mha::ForwardOptions<float> opts32;
  opts32.key_padding_mask = mha::Mask<float>(padding);
  opts32.attn_mask = mha::Mask<float>(xt::xarray<float>(xt::cast<float>(attn)));
  const xt::xarray<float> q32 = xt::cast<float>(q), kv32 = xt::cast<float>(kv);
  // float32 (eps 6e-8) through sums of E products and softmax over 613 keys: the
  // golden cases' float32 tolerance (PyTorch's defaults, rtol 1.3e-6, atol 1e-5) holds it.
  // Every SIMD build of the kernels this CPU runs: SSE2 (4 lanes), AVX2 (8), AVX-512 (16).
  for (const SimdLevel level : {SimdLevel::sse2, SimdLevel::avx2, SimdLevel::avx512}) {
    if (level > mha::cpu_simd_level()) continue;
    const KernelLevel at_level(level);
    REQUIRE(mha::testing::kernel_simd_level() == level);
    // without weights, with their mean over heads, and with every head's (the fast path's
    // per-head weights are written by the tiles' q . k^T)
    for (const auto& [need_weights, average] : {std::pair{false, true}, {true, true}, {true, false}}) {
      opts64.need_weights = opts32.need_weights = need_weights;
      opts64.average_attn_weights = opts32.average_attn_weights = average;
      const auto expected = reference.forward(q, kv, kv, opts64);
      for (const auto& [path_name, path] : all_paths) {
        if (path == AttentionPath::memory_efficient && need_weights) continue;
        single.set_attention_path(path);
        const auto got = single.forward(q32, kv32, kv32, opts32);
        const std::string what = fmt::format("float32 E={} H={} {} need_weights={} average={} kernels at {}", E, H,
                                             path_name, need_weights, average, mha::to_string(level));
        require_close<double>(what + " attn_output", xt::cast<double>(got.attn_output), expected.attn_output, 1.3e-6,
                              1e-5);
        if (need_weights)
          require_close<double>(what + " weights", xt::cast<double>(mha_test::weights(got)),
                                mha_test::weights(expected), 1.3e-6, 1e-5);
      }
    }
  }
}

}  // namespace

TEST_CASE("float32 on every path is within float32's rounding of the float64 reference") {
  check_float32_against_float64(/*E=*/64, /*H=*/4);
  check_float32_against_float64(/*E=*/60, /*H=*/3);
}

TEST_CASE("the kernels' SIMD level can be limited for a test, and never rises above the CPU's") {
  const SimdLevel cpu = mha::cpu_simd_level();
  REQUIRE(mha::testing::kernel_simd_level() == cpu);
  {
    const KernelLevel at_sse2(SimdLevel::sse2);
    REQUIRE(mha::testing::kernel_simd_level() == SimdLevel::sse2);
  }
  REQUIRE(mha::testing::kernel_simd_level() == cpu);
  const KernelLevel at_most(SimdLevel::avx512);  // a limit above the CPU leaves the CPU's own
  REQUIRE(mha::testing::kernel_simd_level() == cpu);
}

// ---- the library inside a host program: its threads and its buffers -------------------

namespace {

// The ids of this process's threads named `name` (/proc/self/task/<id>/comm).
std::set<std::string> threads_named(const std::string& name) {
  std::set<std::string> ids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(entry.path() / "comm");
    std::string line;
    if (std::getline(comm, line) && line == name) ids.insert(entry.path().filename().string());
  }
  return ids;
}

// A forward past the ~20 MFLOP at which the fast path splits its work over threads:
// 8 L N E^2 + 4 N L^2 E = 17M + 34M flops at L = 256, N = 2, E = 64.
constexpr std::size_t L_threaded = 256;
xt::xarray<float> threaded_forward(mha::MultiheadAttention<float>& module) {
  Engine g(41);
  const xt::xarray<float> x = xt::cast<float>(random_tensor({L_threaded, 2, 64}, g));  // (L, N, E)
  return module.forward(x, x, x).attn_output;
}

}  // namespace

TEST_CASE("forwards share one pool of threads: a forward after the first starts none") {
  mha::set_num_threads(2);
  mha::MultiheadAttention<float> module(mha::Options{.embed_dim = 64, .num_heads = 4}, 5);
  module.eval();
  module.set_attention_path(AttentionPath::fast);
  const auto first = threaded_forward(module);
  // The pool's threads outlive the call: at least one beside the caller (2 threads).
  const auto pool = threads_named("mha-pool");
  REQUIRE_FALSE(pool.empty());
  for (int i = 0; i < 3; ++i) {
    REQUIRE(xt::all(xt::equal(threaded_forward(module), first)));
    REQUIRE(threads_named("mha-pool") == pool);
  }
}

TEST_CASE("a thread's buffers are released on request, and a forward past a limit set keeps none") {
  mha::set_num_threads(2);
  mha::MultiheadAttention<float> module(mha::Options{.embed_dim = 64, .num_heads = 4}, 5);
  module.eval();
  module.set_attention_path(AttentionPath::fast);
  const std::size_t limit = mha::kept_thread_buffer_bytes();
  REQUIRE(limit == std::numeric_limits<std::size_t>::max());  // the default, no limit, as platform/workspace.hpp says
  mha::release_thread_buffers();                              // what earlier tests in this thread left
  REQUIRE(mha::thread_buffer_bytes() == 0);
  const auto expected = threaded_forward(module);
  // q, k, v and the heads, (L, 2, 64) floats each, and more: all kept.
  const std::size_t kept = mha::thread_buffer_bytes();
  REQUIRE(kept > 4 * L_threaded * 2 * 64 * sizeof(float));

  mha::release_thread_buffers();
  REQUIRE(mha::thread_buffer_bytes() == 0);
  REQUIRE(xt::all(xt::equal(threaded_forward(module), expected)));  // allocated again, same result
  REQUIRE(mha::thread_buffer_bytes() == kept);

  mha::set_kept_thread_buffer_bytes(kept - 1);  // this forward's buffers are now "unusually large"
  REQUIRE(xt::all(xt::equal(threaded_forward(module), expected)));
  REQUIRE(mha::thread_buffer_bytes() == 0);
  mha::set_kept_thread_buffer_bytes(limit);
  threaded_forward(module);
  REQUIRE(mha::thread_buffer_bytes() == kept);
}

namespace {

// Every gradient of `a` equal, bit for bit, to the same one of `b`.
bool same_gradients(const mha::Gradients<float>& a, const mha::Gradients<float>& b) {
  for (const auto& [x, y] : {std::pair{&a.query, &b.query}, {&a.key, &b.key}, {&a.value, &b.value}}) {
    if (x->has_value() != y->has_value()) return false;
    if (*x && ((*x)->shape() != (*y)->shape() || !xt::all(xt::equal(**x, **y)))) return false;
  }
  if (a.parameters.size() != b.parameters.size()) return false;
  for (const auto& [name, gradient] : a.parameters)
    if (!b.parameters.contains(name) || gradient.shape() != b.parameters.at(name).shape() ||
        !xt::all(xt::equal(gradient, b.parameters.at(name))))
      return false;
  return true;
}

// The bytes of every tensor of a Gradients.
std::size_t gradients_bytes(const mha::Gradients<float>& g) {
  std::size_t values = 0;
  for (const auto* input : {&g.query, &g.key, &g.value})
    if (*input) values += (*input)->size();
  for (const auto& [name, gradient] : g.parameters) values += gradient.size();
  return values * sizeof(float);
}

// Where each tensor of a Gradients keeps its values, by name ("query", "key", "value" and
// the parameters' state_dict names).
std::map<std::string, const float*> storage_of(const mha::Gradients<float>& g) {
  std::map<std::string, const float*> where;
  if (g.query) where["query"] = g.query->data();
  if (g.key) where["key"] = g.key->data();
  if (g.value) where["value"] = g.value->data();
  for (const auto& [name, gradient] : g.parameters) where[name] = gradient.data();
  return where;
}

// One buffer of each tensor's size: what the allocator would hand out from memory of those
// sizes just freed. Held across a backward, it leaves that backward only memory kept for it.
std::vector<std::vector<float>> same_sizes(const mha::Gradients<float>& g) {
  std::vector<std::vector<float>> buffers;
  for (const auto* input : {&g.query, &g.key, &g.value})
    if (*input) buffers.emplace_back((*input)->size(), 1.0F);
  for (const auto& [name, gradient] : g.parameters) buffers.emplace_back(gradient.size(), 1.0F);
  return buffers;
}

}  // namespace

TEST_CASE("a backward keeps the gradients it only passes on in the thread's buffers, within a limit set") {
  mha::set_num_threads(2);
  mha::MultiheadAttention<float> module(mha::Options{.embed_dim = 64, .num_heads = 4}, 5);
  module.train();  // dropout 0: nothing drawn, every backward the same
  module.set_attention_path(AttentionPath::fast);
  Engine g(17);
  const xt::xarray<float> x = xt::cast<float>(random_tensor({L_threaded, 2, 64}, g));     // (L, N, E)
  const xt::xarray<float> grad = xt::cast<float>(random_tensor({L_threaded, 2, 64}, g));  // dL/d(attn_output)
  mha::ForwardOptions<float> opts;
  opts.need_weights = false;
  const auto [output, record] = module.forward_for_backward(x, x, x, opts);
  const std::size_t limit = mha::kept_thread_buffer_bytes();
  mha::release_thread_buffers();
  const auto expected = module.backward(record, grad);
  // dO (L, 2, 64) and [dq | dk | dv] (L, 2, 192), and more: all kept.
  const std::size_t kept = mha::thread_buffer_bytes();
  REQUIRE(kept >= 4 * L_threaded * 2 * 64 * sizeof(float));
  {
    const auto again = module.backward(record, grad);
    REQUIRE(same_gradients(again, expected));  // in the kept buffers, same result
    REQUIRE(mha::thread_buffer_bytes() == kept);
  }
  // The gradients let go are kept too, for the next backward to write into.
  REQUIRE(mha::thread_buffer_bytes() == kept + gradients_bytes(expected));

  mha::set_kept_thread_buffer_bytes(kept - 1);  // this backward's buffers are now "unusually large"
  {
    const auto again = module.backward(record, grad);
    REQUIRE(same_gradients(again, expected));
    REQUIRE(mha::thread_buffer_bytes() == 0);
  }
  // The gradients let go come to less than the limit: kept.
  REQUIRE(gradients_bytes(expected) < kept - 1);
  REQUIRE(mha::thread_buffer_bytes() == gradients_bytes(expected));
  mha::set_kept_thread_buffer_bytes(limit);
  REQUIRE(same_gradients(module.backward(record, grad), expected));
  REQUIRE(mha::thread_buffer_bytes() == kept + gradients_bytes(expected));
}

namespace {

// A module and one forward_for_backward() of it on random float inputs: self-attention on
// the packed weight (backward's one-linear-layer branch), or three inputs of their own on
// separate projections with bias_k and bias_v, batch_first (every other branch's steps).
struct TrainingCase {
  mha::MultiheadAttention<float> module;
  xt::xarray<float> query, key, value, grad;
  std::optional<mha::ForwardRecord<float>> record;

  TrainingCase(bool self_attention, std::size_t L) : module(options(self_attention), 5) {
    module.train();  // dropout 0: nothing drawn, every backward the same
    module.set_attention_path(AttentionPath::fast);
    Engine g(23);
    const std::size_t S = L / 2, N = 2;
    auto input = [&](std::size_t len, std::size_t width) {
      return xt::xarray<float>(xt::cast<float>(random_tensor(
          self_attention ? std::vector<std::size_t>{len, N, width} : std::vector<std::size_t>{N, len, width}, g)));
    };
    query = input(L, 64), key = input(S, 48), value = input(S, 40), grad = input(L, 64);
    mha::ForwardOptions<float> opts;
    opts.need_weights = false;
    const auto& k = self_attention ? query : key;
    const auto& v = self_attention ? query : value;
    record = module.forward_for_backward(query, k, v, opts).second;
  }
  static mha::Options options(bool self_attention) {
    if (self_attention) return mha::Options{.embed_dim = 64, .num_heads = 4};
    return mha::Options{
        .embed_dim = 64, .num_heads = 4, .add_bias_kv = true, .kdim = 48, .vdim = 40, .batch_first = true};
  }
  mha::Gradients<float> backward() const { return module.backward(*record, grad); }
};

}  // namespace

TEST_CASE("gradients let go leave their storage to the thread: the next backward of the same sizes writes into it") {
  mha::set_num_threads(2);
  for (bool self_attention : {true, false}) {
    CAPTURE(self_attention);
    const TrainingCase c(self_attention, L_threaded);
    mha::release_thread_buffers();
    mha::Gradients<float> expected;  // a copy of the first gradients, in storage of its own
    std::map<std::string, const float*> first;
    {
      const auto gradients = c.backward();
      expected = gradients;
      first = storage_of(gradients);
    }
    // Every gradient: the query's (and the key's and value's), and every parameter's.
    REQUIRE(first.size() == (self_attention ? 5U : 11U));
    const auto taken = same_sizes(expected);  // had the first gradients been freed, their memory
    const auto second = c.backward();
    REQUIRE(storage_of(second) == first);  // every tensor where the first one was
    REQUIRE(same_gradients(second, expected));
  }
}

TEST_CASE("a backward of other sizes writes where the storage it finds has as many values, and elsewhere new") {
  mha::set_num_threads(2);
  for (bool self_attention : {true, false}) {
    CAPTURE(self_attention);
    const TrainingCase longer(self_attention, L_threaded), shorter(self_attention, L_threaded / 2);
    mha::release_thread_buffers();
    const mha::Gradients<float> expected = shorter.backward();  // in new storage
    std::map<std::string, const float*> first;
    {
      const auto gradients = longer.backward();
      first = storage_of(gradients);
    }
    const auto taken = same_sizes(expected);
    const auto second = shorter.backward();  // into what `longer` let go, where the sizes agree
    const auto where = storage_of(second);
    REQUIRE(where.size() == first.size());
    for (const auto& [name, data] : where) {
      CAPTURE(name);
      const bool input = name == "query" || name == "key" || name == "value";  // (L or S, N, width): other sizes
      REQUIRE((data == first.at(name)) == !input);  // the parameters' gradients have the same sizes
    }
    REQUIRE(same_gradients(second, expected));
  }
}

TEST_CASE("gradients let go are counted in the thread's buffers, released on request, and kept only within the limit") {
  mha::set_num_threads(2);
  const TrainingCase c(/*self_attention=*/false, L_threaded);
  const std::size_t limit = mha::kept_thread_buffer_bytes();
  mha::release_thread_buffers();
  std::size_t held = 0, bytes = 0;
  {
    auto gradients = c.backward();
    held = mha::thread_buffer_bytes();
    bytes = gradients_bytes(gradients);
    mha::Gradients<float> moved = std::move(gradients);  // the moved-from ones have nothing left to keep
  }
  REQUIRE(mha::thread_buffer_bytes() == held + bytes);
  {
    auto gradients = c.backward();
    gradients = c.backward();  // assigned over: the set it held is kept for the next backward
    REQUIRE(mha::thread_buffer_bytes() == held + bytes);
  }
  mha::release_thread_buffers();
  REQUIRE(mha::thread_buffer_bytes() == 0);
  mha::set_kept_thread_buffer_bytes(bytes - 1);  // gradients alone past the limit: not kept
  c.backward();
  REQUIRE(mha::thread_buffer_bytes() == 0);
  mha::set_kept_thread_buffer_bytes(limit);
}
