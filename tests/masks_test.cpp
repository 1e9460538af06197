// tests/masks_test.cpp — textbook/masks.hpp: bool and float masks, step 2 of forward (prepare_masks), padding and merging.
#include "support.hpp"

using Catch::Matchers::ContainsSubstring;
using namespace mha_test::small;

TEST_CASE("forward rejects masks of the wrong rank or shape", "[errors][masks]") {
  mha::MultiheadAttention<float> m(options());
  const auto q = zeros({L, N, E}), kv = zeros({S, N, E});
  auto with_attn_mask = [](xt::xarray<bool> mask) {
    mha::ForwardOptions<float> o;
    o.attn_mask = mask;
    return o;
  };
  auto with_kpm = [](xt::xarray<float> mask) {
    mha::ForwardOptions<float> o;
    o.key_padding_mask = mask;
    return o;
  };
  require_rejected(m, q, kv, kv, with_attn_mask(xt::zeros<bool>({L, S + 1})), "attn_mask",
                   "The shape of the 2D attn_mask is (3, 5), but should be (3, 4).");
  require_rejected(m, q, kv, kv, with_attn_mask(xt::zeros<bool>({N, L, S})), "attn_mask",
                   "The shape of the 3D attn_mask is (2, 3, 4), but should be (4, 3, 4).");
  require_rejected(m, q, kv, kv, with_attn_mask(xt::zeros<bool>({std::size_t{1}, N * H, L, S})), "attn_mask", "4-D");
  require_rejected(m, q, kv, kv, with_attn_mask(xt::zeros<bool>({S})), "attn_mask", "1-D");
  require_rejected(m, q, kv, kv, with_kpm(zeros({N, S + 1})), "key_padding_mask", "(2, 4), but got (2, 5)");
  require_rejected(m, q, kv, kv, with_kpm(zeros({S})), "key_padding_mask", "2-D");
  // Unbatched: attn_mask (H, L, S), key_padding_mask (S).
  require_rejected(m, zeros({L, E}), zeros({S, E}), zeros({S, E}), with_attn_mask(xt::zeros<bool>({H + 1, L, S})),
                   "attn_mask", "Expected `attn_mask` shape to be (2, 3, 4)");
  require_rejected(m, zeros({L, E}), zeros({S, E}), zeros({S, E}), with_kpm(zeros({N, S})), "key_padding_mask", "1-D");
}

TEST_CASE("is_causal is a hint that needs attn_mask", "[errors][masks]") {
  mha::MultiheadAttention<float> m(options());
  mha::ForwardOptions<float> o;
  o.is_causal = true;
  const auto x = zeros({L, N, E});
  require_rejected(m, x, x, x, o, "is_causal", "Need attn_mask");
}

TEST_CASE("merge_masks rejects an attn_mask that does not match key_padding_mask", "[errors][masks]") {
  constexpr std::size_t N = 2, H = 2, L = 3, S = 4;
  const std::optional<xt::xtensor<double, 2>> padding = xt::xtensor<double, 2>(xt::zeros<double>({N, S}));
  const std::optional<xt::xtensor<double, 3>> good = xt::xtensor<double, 3>(xt::zeros<double>({N * H, L, S}));
  CHECK(mha::textbook::merge_masks(good, padding, H, L)->shape(0) == N * H);
  const std::optional<xt::xtensor<double, 3>> wrong = xt::xtensor<double, 3>(xt::zeros<double>({N, L, S}));
  CHECK_MHA_ERROR(mha::textbook::merge_masks(wrong, padding, H, L),
                  ContainsSubstring("attn_mask") && ContainsSubstring("(2, 3, 4)"));
  CHECK_MHA_ERROR(mha::textbook::merge_masks(good, padding, 0, L), ContainsSubstring("num_heads"));
}

TEST_CASE("prepare_masks: bool True becomes -inf, shapes become (1 or B, L, S) and (N, S)", "[masks]") {
  const double inf = std::numeric_limits<double>::infinity();
  const xt::xarray<bool> attn{{false, true}, {false, false}};  // (L=2, S=2)
  const xt::xarray<bool> padding{true, false};                 // unbatched (S=2)
  const auto masks = mha::textbook::prepare_masks<double>(attn, padding, /*is_causal=*/false, /*need_weights=*/true,
                                                          /*batched=*/false, 2, 1, 2, 2);
  REQUIRE(masks.attn_mask.has_value());
  CHECK(mha_test::same(*masks.attn_mask, xt::xarray<double>{{{0.0, -inf}, {0.0, 0.0}}}));  // (1, L, S)
  REQUIRE(masks.key_padding_mask.has_value());
  CHECK(mha_test::same(*masks.key_padding_mask, xt::xarray<double>{{-inf, 0.0}}));  // (1, S)
  CHECK_FALSE(masks.causal_hint);
}

TEST_CASE("prepare_masks takes is_causal at its word only without key_padding_mask and weights", "[masks]") {
  const xt::xarray<bool> any{{false, false}, {false, false}};  // not causal: the hint replaces it
  auto hinted = mha::textbook::prepare_masks<double>(any, std::nullopt, true, /*need_weights=*/false, true, 2, 1, 2, 2);
  CHECK(hinted.causal_hint);
  CHECK_FALSE(hinted.attn_mask.has_value());
  auto with_weights =
      mha::textbook::prepare_masks<double>(any, std::nullopt, true, /*need_weights=*/true, true, 2, 1, 2, 2);
  CHECK_FALSE(with_weights.causal_hint);
  CHECK(with_weights.attn_mask.has_value());
}

TEST_CASE("the causal mask hides the keys after the query, and pad_for_extra_key adds an open key", "[masks]") {
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(mha_test::same(mha::textbook::causal_attn_mask<double>(2, 3),
                       xt::xarray<double>{{{0, -inf, -inf}, {0, 0, -inf}}}));
  mha::textbook::PreparedMasks<double> masks;
  masks.attn_mask = mha::textbook::causal_attn_mask<double>(2, 2);  // (1, 2, 2)
  masks.key_padding_mask = xt::xtensor<double, 2>{{-inf, 0.0}};     // (1, 2)
  masks.pad_for_extra_key();                                        // bias_k: one more key, open
  CHECK(mha_test::same(*masks.attn_mask, xt::xarray<double>{{{0, -inf, 0}, {0, 0, 0}}}));
  CHECK(mha_test::same(*masks.key_padding_mask, xt::xarray<double>{{-inf, 0.0, 0.0}}));
}
