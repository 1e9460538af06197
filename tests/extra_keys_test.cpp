// tests/extra_keys_test.cpp — textbook/extra_keys.hpp: add_bias_kv: bias_k appended as one more key of every batch entry.
#include "support.hpp"

using Catch::Matchers::ContainsSubstring;
using namespace mha_test::small;

TEST_CASE("append_bias repeats the bias over the batch as key S, after the S keys", "[extra_keys]") {
  // k (S=1, N=2, E=2) = [[[1, 2], [3, 4]]], bias (1, 1, 2) = [5, 6]:
  // torch.cat([k, bias.repeat(1, 2, 1)]) = [[[1, 2], [3, 4]], [[5, 6], [5, 6]]].
  const xt::xtensor<double, 3> k{{{1, 2}, {3, 4}}};
  const xt::xtensor<double, 3> bias{{{5, 6}}};
  CHECK(mha_test::same(mha::textbook::append_bias(k, bias), xt::xarray<double>{{{1, 2}, {3, 4}}, {{5, 6}, {5, 6}}}));
  const xt::xtensor<double, 3> wrong{{{5, 6, 7}}};
  CHECK_MHA_ERROR(mha::textbook::append_bias(k, wrong),
                  ContainsSubstring("bias:") && ContainsSubstring("(1, 1, 2)") && ContainsSubstring("(1, 1, 3)"));
}

TEST_CASE("add_bias_kv gives bias_k and bias_v the weight of one more key", "[extra_keys]") {
  // One head, E = 2, no biases elsewhere; W_q = 0 makes every score equal, so with S = 1
  // key and the bias key each query's weights are [1/2, 1/2] (averaged over one head).
  auto o = options();
  o.embed_dim = 2, o.num_heads = 1, o.add_bias_kv = true;
  mha::MultiheadAttention<double> m(o);
  m.set_attention_path(mha::AttentionPath::reference);
  m.set_parameter("in_proj_weight", xt::zeros<double>({6, 2}));
  const xt::xarray<double> x = xt::ones<double>({1, 1, 2});  // (L=1, N=1, E=2)
  const auto weights = mha_test::weights(m.forward(x, x, x));
  CHECK(mha_test::same(weights, xt::xarray<double>{{{0.5, 0.5}}}));  // (N, L, S+1)
}
