// tests/mask_kind_test.cpp — a mask kind of the tests' own, a sliding window, added as docs/building.md's "Adding a mask kind" says, through every path.
//
// The walk-through's steps, done here in a test file so that the library keeps no kind it
// does not need: (1) the kind's meaning, as a bool mask (True = masked), and (2) its
// additive form, folded into one part of step 7's mask, textbook::MergedMask, by the
// textbook's functions (canonical_mask, merged_mask, add_per_query); (3) the mask made so is
// run through every path by mha::testing::forward_with_mask, as the one place of the API
// (api/mask_preparation.hpp) would hand it to them; (4) the tests: the reference against a
// result derived by hand, and every path (the engine's fast kernels, each one, flash, the
// training forward keeping a record) against the reference.
//
// Legend: L = target length, S = source length, S' = S with bias_k and the zero key,
// N = batch, E = embed_dim, H = heads, D = head_dim, w = the window's width.
#include "support.hpp"

// This file's names live in namespace mask_kind_test: tests/paths_tests.cpp compiles it with
// other test files, whose own sizes and Mask alias would otherwise
// clash with its.
namespace mask_kind_test {

using mha::AttentionPath;
using mha_test::require_close;

namespace {

using T = double;
using Mask = mha::textbook::MergedMask<T>;

constexpr std::size_t E = 8, H = 2, L = 5, S = 5, N = 2;
// Every path computes the same sums in another order (GEMMs, tiles): in float64 that moves
// the last few bits, far below 1e-9 (as tests/engine_test.cpp's paths).
constexpr double path_rtol = 1e-9, path_atol = 1e-12;

// (1) The kind's meaning: query i sees key j when |i - j| < w, as a bool mask, True =
// masked. Over all S' keys, bias_k's and the zero key's too. (L, S')
xt::xtensor<bool, 2> sliding_window(std::size_t queries, std::size_t keys, std::size_t w) {
  xt::xtensor<bool, 2> masked({queries, keys});
  for (std::size_t i = 0; i < queries; ++i)
    for (std::size_t j = 0; j < keys; ++j) masked(i, j) = (i > j ? i - j : j - i) >= w;
  return masked;
}

// (2) Its additive form (False -> 0, True -> -inf, canonical_mask), the same for every
// batch-head, folded into step 7's per-query part. (1, L, S')
Mask with_sliding_window(Mask mask, std::size_t w) {
  const xt::xarray<T> additive =
      mha::textbook::canonical_mask<T>(xt::xarray<bool>(sliding_window(mask.L, mask.S, w)));  // (L, S')
  mha::textbook::add_per_query(mask, xt::xtensor<T, 3>(xt::view(additive, xt::newaxis(), xt::all(), xt::all())));
  return mask;
}

// Step 7's mask of a module's forward with no other mask: nothing but its sizes.
Mask no_other_mask(const mha::Options& o, std::size_t extra_keys = 0) {
  return mha::textbook::merged_mask(mha::textbook::PreparedMasks<T>{}, static_cast<std::size_t>(o.num_heads), L, S,
                                    extra_keys);
}

// A module's parameters, drawn as PyTorch initialises them (biases zero: made random here,
// so that the hand-derived result depends on every one).
mha::textbook::Parameters<T> parameters(const mha::Options& o, std::uint64_t seed) {
  mha::Generator g(seed);
  mha::textbook::Parameters<T> p(o);
  p.reset(g);
  p.in_proj_bias = mha_test::random_tensor<T>({3 * E}, g);
  p.out_proj_bias = mha_test::random_tensor<T>({E}, g);
  if (o.add_bias_kv)
    p.bias_k = mha_test::random_tensor<T>({1, 1, E}, g), p.bias_v = mha_test::random_tensor<T>({1, 1, E}, g);
  return p;
}

// The options of a module of E = 8, H = 2, with bias_k and the zero key or not.
mha::Options module_options(bool add_bias_kv = false, bool add_zero_attn = false) {
  mha::Options o;
  o.embed_dim = E, o.num_heads = H, o.add_bias_kv = add_bias_kv, o.add_zero_attn = add_zero_attn;
  return o;
}

mha::ForwardOptions<T> forward_options(bool need_weights, bool average) {
  mha::ForwardOptions<T> opts;
  opts.need_weights = need_weights, opts.average_attn_weights = average;
  return opts;
}

}  // namespace

TEST_CASE("a sliding window of width 1 gives each query its own key's value: the reference as derived by hand",
          "[masks][mask_kind]") {
  // With w = 1 query i sees key i alone: its scores are -inf but at j = i, the softmax of
  // the row is e_i, so every head's weights are the identity, each head's output at i is
  // v_i, the heads merged are v_proj(value)_i, and attn_output = out_proj(v_proj(value)).
  // q and k drop out entirely.
  const mha::Options o = module_options();
  const auto p = parameters(o, 11);
  mha::Generator g(12);
  const xt::xarray<T> query = mha_test::random_tensor<T>({L, N, E}, g);  // (L, N, E)
  const xt::xarray<T> key = mha_test::random_tensor<T>({S, N, E}, g);    // (S, N, E)
  const xt::xarray<T> value = mha_test::random_tensor<T>({S, N, E}, g);  // (S, N, E)

  // by hand: (S, N, E) x (E, E)^T -> (S, N, E), twice
  const xt::xtensor<T, 3> v =
      mha::textbook::linear(xt::xtensor<T, 3>(value), mha::textbook::weight_block(p.in_proj_weight, 2),
                            mha::textbook::bias_block(p.in_proj_bias, 2, E));
  const xt::xarray<T> expected = mha::textbook::linear(v, p.out_proj_weight, p.out_proj_bias);  // (L, N, E), L = S
  xt::xarray<T> identity = xt::zeros<T>({N, H, L, S});                                          // per head
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < L; ++i) identity(n, h, i, i) = 1;

  const auto out = mha::testing::forward_with_mask(o, p, query, key, value, with_sliding_window(no_other_mask(o), 1),
                                                   forward_options(true, false), AttentionPath::reference);
  REQUIRE(mha_test::shape_of(out.attn_output) == std::vector<std::size_t>{L, N, E});
  require_close<T>("attn_output (w = 1, reference)", out.attn_output, expected, path_rtol, path_atol);
  require_close<T>("attn_output_weights (w = 1, reference)", mha_test::weights(out), identity, path_rtol, path_atol);

  // ... and the other side: without the window, or with w = 2, the queries mix their keys
  const auto open = mha::testing::forward_with_mask(o, p, query, key, value, no_other_mask(o),
                                                    forward_options(true, false), AttentionPath::reference);
  CHECK(mha_test::differs<T>(open.attn_output, expected, path_rtol, path_atol));
  const auto wider = mha::testing::forward_with_mask(o, p, query, key, value, with_sliding_window(no_other_mask(o), 2),
                                                     forward_options(true, false), AttentionPath::reference);
  CHECK(mha_test::differs<T>(wider.attn_output, expected, path_rtol, path_atol));
}

TEST_CASE("a sliding window, with key_padding_mask, bias_k and the zero key, equals the reference on every path",
          "[masks][mask_kind]") {
  // The kind meets the parts PyTorch's arguments make: key_padding_mask (per_key) and
  // bias_k and the zero key (two unmasked columns, S' = S + 2), the window over all S' keys.
  const mha::Options o = module_options(/*add_bias_kv=*/true, /*add_zero_attn=*/true);
  const auto p = parameters(o, 21);
  mha::Generator g(22);
  const xt::xarray<T> x = mha_test::random_tensor<T>({L, N, E}, g);  // self-attention: the engine's one GEMM
  xt::xarray<bool> padding = xt::zeros<bool>({N, S});                // (N, S), True = padding
  padding(0, S - 1) = true, padding(1, 0) = true;
  const auto prepared =
      mha::textbook::prepare_masks<T>(std::nullopt, mha::Mask<T>(padding), /*is_causal=*/false, /*need_weights=*/true,
                                      /*batched=*/true, L, N, S, H);
  const Mask mask = with_sliding_window(mha::textbook::merged_mask(prepared, H, L, S, /*extra_keys=*/2), 2);
  REQUIRE(mask.per_query.has_value());
  REQUIRE(mask.per_key.has_value());
  REQUIRE(mask.S == S + 2);

  auto run = [&](AttentionPath path, bool need_weights, bool average, bool keep_record = false, double dropout_p = 0) {
    return mha::testing::forward_with_mask(o, p, x, x, x, mask, forward_options(need_weights, average), path,
                                           keep_record, dropout_p, /*dropout_seed=*/5);
  };
  auto check_path = [](const std::string& name, const mha::Output<T>& got, const mha::Output<T>& expected) {
    require_close<T>(name + " attn_output", got.attn_output, expected.attn_output, path_rtol, path_atol);
    REQUIRE(got.attn_output_weights.has_value() == expected.attn_output_weights.has_value());
    if (expected.attn_output_weights)
      require_close<T>(name + " attn_output_weights", mha_test::weights(got), *expected.attn_output_weights, path_rtol,
                       path_atol);
  };
  const auto per_head = run(AttentionPath::reference, true, false);
  const auto averaged = run(AttentionPath::reference, true, true);
  const auto without_weights = run(AttentionPath::reference, false, true);
  const auto dropped = run(AttentionPath::reference, true, true, false, 0.3);

  // the window is felt: the reference with it differs from the reference with the padding alone
  const auto padding_alone =
      mha::testing::forward_with_mask(o, p, x, x, x, mha::textbook::merged_mask(prepared, H, L, S, 2),
                                      forward_options(true, false), AttentionPath::reference);
  CHECK(mha_test::differs<T>(padding_alone.attn_output, per_head.attn_output, path_rtol, path_atol));

  SECTION("fast, every head's weights (fast_per_head)") {
    check_path("fast per head", run(AttentionPath::fast, true, false), per_head);
  }
  SECTION("fast, the mean as the heads go (fast_averaged)") {
    check_path("fast averaged", run(AttentionPath::fast, true, true), averaged);
  }
  SECTION("fast, no weights (fast_without_weights)") {
    check_path("fast without weights", run(AttentionPath::fast, false, true), without_weights);
  }
  SECTION("fast, the mean after dropout (fast_then_averaged)") {
    check_path("fast then averaged", run(AttentionPath::fast, true, true, false, 0.3), dropped);
  }
  SECTION("memory_efficient: tiles and an online softmax (flash)") {
    check_path("memory_efficient", run(AttentionPath::memory_efficient, false, true), without_weights);
  }
  SECTION("the training forward, keeping a record (training_forward)") {
    check_path("training forward", run(AttentionPath::fast, true, false, /*keep_record=*/true), per_head);
  }
  SECTION("the reference keeping a record") {
    check_path("reference with a record", run(AttentionPath::reference, true, false, /*keep_record=*/true), per_head);
  }
}

TEST_CASE("forward_with_mask refuses a mask made for other sizes", "[errors][masks][mask_kind]") {
  const mha::Options o = module_options(/*add_bias_kv=*/false, /*add_zero_attn=*/true);
  const auto p = parameters(o, 31);
  const xt::xarray<T> x = xt::zeros<T>({L, N, E});
  // made for S' = S, where the zero key makes it S + 1
  CHECK_MHA_ERROR(mha::testing::forward_with_mask(o, p, x, x, x, with_sliding_window(no_other_mask(o), 2),
                                                  forward_options(true, true), AttentionPath::fast),
                  Catch::Matchers::ContainsSubstring("S' = 6"));
}

TEST_CASE("forward_with_mask refuses a part whose batch-heads are not the input's", "[errors][masks][mask_kind]") {
  // N = 2, H = 2: every path reads per_query's slice b for batch-head b < N*H = 4 and
  // per_key's row n < N. A part of 2 slices, or of 3 rows, would be read past its end.
  const mha::Options o = module_options();
  const auto p = parameters(o, 41);
  const xt::xarray<T> x = xt::zeros<T>({L, N, E});
  Mask two_slices = no_other_mask(o);
  two_slices.per_query = xt::xtensor<T, 3>(xt::zeros<T>({std::size_t{2}, L, S}));  // (2, L, S')
  CHECK_MHA_ERROR(
      mha::testing::forward_with_mask(o, p, x, x, x, two_slices, forward_options(true, false), AttentionPath::fast),
      Catch::Matchers::ContainsSubstring("(1 or 4, 5, 5), got (2, 5, 5)"));
  Mask three_rows = no_other_mask(o);
  three_rows.per_key = xt::xtensor<T, 2>(xt::zeros<T>({std::size_t{3}, S}));  // (3, S')
  CHECK_MHA_ERROR(
      mha::testing::forward_with_mask(o, p, x, x, x, three_rows, forward_options(true, false), AttentionPath::fast),
      Catch::Matchers::ContainsSubstring("(2, 5), got (3, 5)"));
}

TEST_CASE("add_per_query and add_per_key refuse a part the mask's other part disagrees with",
          "[errors][masks][mask_kind]") {
  // per_key of N = 2 rows with H = 2 fixes B = N*H = 4 batch-heads: a per-query part may
  // have 1 or 4 slices, and a second per-key part 2 rows.
  Mask mask = no_other_mask(module_options());
  mha::textbook::add_per_key(mask, xt::xtensor<T, 2>(xt::zeros<T>({N, S})));  // (N, S')
  CHECK_MHA_ERROR(mha::textbook::add_per_query(mask, xt::xtensor<T, 3>(xt::zeros<T>({std::size_t{2}, L, S}))),
                  Catch::Matchers::ContainsSubstring("(1 or 4, 5, 5), got (2, 5, 5)"));
  CHECK_MHA_ERROR(mha::textbook::add_per_key(mask, xt::xtensor<T, 2>(xt::zeros<T>({std::size_t{3}, S}))),
                  Catch::Matchers::ContainsSubstring("N * H = 4, got (3, 5)"));
  // the shapes that agree are taken: (4, L, S') and then (1, L, S') broadcast onto it
  mha::textbook::add_per_query(mask, xt::xtensor<T, 3>(xt::zeros<T>({N * H, L, S})));
  mha::textbook::add_per_query(mask, xt::xtensor<T, 3>(xt::zeros<T>({std::size_t{1}, L, S})));
  REQUIRE(mask.per_query->shape(0) == N * H);
  // and a per-query part of 4 slices fixes B for a per-key part with none before it
  Mask by_query = no_other_mask(module_options());
  mha::textbook::add_per_query(by_query, xt::xtensor<T, 3>(xt::zeros<T>({N * H, L, S})));
  CHECK_MHA_ERROR(mha::textbook::add_per_key(by_query, xt::xtensor<T, 2>(xt::zeros<T>({std::size_t{1}, S}))),
                  Catch::Matchers::ContainsSubstring("N * H = 4, got (1, 5)"));
}

}  // namespace mask_kind_test
