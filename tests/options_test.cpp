// tests/options_test.cpp — textbook/options.hpp: the constructor's checks and which path a forward takes.
#include "support.hpp"

using Catch::Matchers::ContainsSubstring;
using namespace mha_test::small;

TEST_CASE("construction rejects impossible options", "[errors][options]") {
  auto with = [](auto change) {
    auto o = options();
    change(o);
    return o;
  };
  using M = mha::MultiheadAttention<float>;
  CHECK_MHA_ERROR(M(with([](auto& o) { o.embed_dim = 0; })),
                  ContainsSubstring("embed_dim") && ContainsSubstring("embed_dim=0"));
  CHECK_MHA_ERROR(M(with([](auto& o) { o.num_heads = 0; })), ContainsSubstring("num_heads=0"));
  CHECK_MHA_ERROR(M(with([](auto& o) { o.num_heads = -2; })), ContainsSubstring("num_heads=-2"));
  CHECK_MHA_ERROR(M(with([](auto& o) { o.num_heads = 3; })), ContainsSubstring("embed_dim:") &&
                                                                 ContainsSubstring("divisible") &&
                                                                 ContainsSubstring("num_heads=3"));
  CHECK_MHA_ERROR(M(with([](auto& o) { o.kdim = 0; })), ContainsSubstring("kdim:"));
  CHECK_MHA_ERROR(M(with([](auto& o) { o.vdim = -1; })), ContainsSubstring("vdim:") && ContainsSubstring("-1"));
  CHECK_MHA_ERROR(M(with([](auto& o) { o.dropout = 1.5; })), ContainsSubstring("dropout:") && ContainsSubstring("1.5"));
  CHECK_MHA_ERROR(M(with([](auto& o) { o.dropout = -0.1; })), ContainsSubstring("dropout:"));
}

TEST_CASE("automatic picks fast with weights, memory_efficient for large scores without", "[options][paths]") {
  using mha::AttentionPath;
  mha::MultiheadAttention<float> m(options());
  REQUIRE(m.attention_path() == AttentionPath::automatic);
  // 8192 x 8192 = 64M scores per head, above the 4M (1 << 22) threshold; 128 x 128 below.
  REQUIRE(m.resolved_attention_path(/*need_weights=*/true, 8192, 8192) == AttentionPath::fast);
  REQUIRE(m.resolved_attention_path(/*need_weights=*/false, 8192, 8192) == AttentionPath::memory_efficient);
  REQUIRE(m.resolved_attention_path(/*need_weights=*/false, 128, 128) == AttentionPath::fast);
  m.set_attention_path(AttentionPath::reference);  // a path chosen is kept, whatever the sizes
  REQUIRE(m.resolved_attention_path(/*need_weights=*/false, 8192, 8192) == AttentionPath::reference);
  m.set_attention_path(AttentionPath::memory_efficient);
  REQUIRE_THROWS_WITH(m.resolved_attention_path(/*need_weights=*/true, 4, 4),
                      Catch::Matchers::StartsWith("need_weights:"));
}
