// tests/attention_test.cpp — textbook/attention.hpp: heads, the scale, softmax, dropout and scaled dot-product attention.
#include "support.hpp"

using Catch::Matchers::ContainsSubstring;
using namespace mha_test::small;

TEST_CASE("splitting and merging heads reject a number of heads that does not divide", "[errors][forward]") {
  CHECK_MHA_ERROR(
      mha::textbook::merge_heads(xt::xtensor<float, 3>(xt::zeros<float>({std::size_t{4}, L, std::size_t{2}})), 0),
      ContainsSubstring("num_heads:"));
  CHECK_MHA_ERROR(
      mha::textbook::merge_heads(xt::xtensor<float, 3>(xt::zeros<float>({std::size_t{4}, L, std::size_t{2}})), 3),
      ContainsSubstring("num_heads: expected a number of heads that divides the 4 batch-heads, got 3"));
  CHECK_MHA_ERROR(mha::textbook::split_heads(xt::xtensor<float, 3>(xt::zeros<float>({L, N, E})), 3),
                  ContainsSubstring("num_heads:"));
}

TEST_CASE("the scale is sqrt(1/D) and dropout keeps with 1/(1-p), 0 at p = 1", "[attention]") {
  CHECK(mha::textbook::attention_scale<double>(4) == 0.5);  // sqrt(1/4), exact in binary
  CHECK(mha::textbook::attention_scale<float>(16) == 0.25f);
  CHECK(mha::textbook::dropout_scale<double>(0.5) == 2.0);
  CHECK(mha::textbook::dropout_scale<double>(0.75) == 4.0);
  CHECK(mha::textbook::dropout_scale<double>(1.0) == 0.0);  // nothing kept: 0, not 1/0
}

TEST_CASE("split_heads and merge_heads are inverse, and head h holds columns h*D to (h+1)*D - 1", "[attention]") {
  mha::Generator g(3);
  const xt::xtensor<double, 3> x = mha_test::random_tensor<double>({L, N, E}, g);  // (L, N, E)
  const auto heads = mha::textbook::split_heads(x, H);                             // (N*H, L, D)
  REQUIRE(mha_test::shape_of(heads) == std::vector<std::size_t>{N * H, L, E / H});
  // batch-head b = n*H + h = 1*2 + 1 = 3 at position 2, d = 0 is x(2, n=1, h*D + 0 = 4)
  CHECK(heads(3, 2, 0) == x(2, 1, 4));
  CHECK(mha_test::same(mha::textbook::merge_heads(heads, H), x));
}

TEST_CASE("a softmax row of only -inf is NaN, as torch.softmax, and append_zero_row adds a zero key", "[attention]") {
  const double inf = std::numeric_limits<double>::infinity();
  xt::xtensor<double, 3> scores{{{-inf, -inf}, {0.0, std::log(3.0)}}};  // (1, 2, 2)
  mha::textbook::softmax_last_dim(scores);
  CHECK(std::isnan(scores(0, 0, 0)));
  CHECK(std::isnan(scores(0, 0, 1)));
  CHECK(scores(0, 1, 0) == Catch::Approx(0.25));  // e^0 / (e^0 + 3)
  CHECK(scores(0, 1, 1) == Catch::Approx(0.75));
  const auto extended =
      mha::textbook::append_zero_row(xt::xtensor<double, 3>(xt::ones<double>({1, 2, 3})));  // (1, 3, 3)
  CHECK(mha_test::same(xt::view(extended, 0, 2, xt::all()), xt::xarray<double>{0.0, 0.0, 0.0}));
  CHECK(mha_test::same(xt::view(extended, 0, 1, xt::all()), xt::xarray<double>{1.0, 1.0, 1.0}));
}
