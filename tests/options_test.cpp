// tests/options_test.cpp — textbook/options.hpp: the constructor's checks, which path a forward takes and the rules that override it.
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

// The rules that override the path asked for (PathRule, textbook/options.hpp), one test each:
// the fact of the rule present overrides the path, and the same call without it does not.
// choose_forward_path is what every forward asks (api/attention_paths.hpp).
namespace {
using mha::AttentionPath;
using mha::PathRule;

// L and S are mha_test::small's: few scores, where automatic alone takes fast
mha::PathFacts facts(AttentionPath requested, bool need_weights = true) {
  mha::PathFacts f;
  f.requested = requested, f.need_weights = need_weights, f.L = L, f.S = S;
  return f;
}

// choose_forward_path gives f the path `path`, decided by `rule`.
void require_chosen(const mha::PathFacts& f, AttentionPath path, PathRule rule) {
  const auto chosen = mha::testing::choose_forward_path(f);
  REQUIRE(chosen.path == path);
  REQUIRE(chosen.rule == rule);
}
}  // namespace

TEST_CASE("paths: with nothing to override, the path asked for runs, automatic by size", "[options][paths]") {
  for (const auto path : {AttentionPath::reference, AttentionPath::fast})
    require_chosen(facts(path), path, PathRule::as_requested);
  require_chosen(facts(AttentionPath::memory_efficient, false), AttentionPath::memory_efficient,
                 PathRule::as_requested);
  require_chosen(facts(AttentionPath::automatic), AttentionPath::fast, PathRule::automatic_by_size);
  // memory_efficient with the weights is the caller's mistake, said, not overridden
  REQUIRE_THROWS_WITH(mha::testing::choose_forward_path(facts(AttentionPath::memory_efficient, true)),
                      Catch::Matchers::StartsWith("need_weights:"));
}

TEST_CASE("paths: a fully masked row under SDPA's safe softmax takes the reference", "[options][paths]") {
  for (const auto path : {AttentionPath::automatic, AttentionPath::fast, AttentionPath::memory_efficient}) {
    auto f = facts(path, /*need_weights=*/false);
    REQUIRE(mha::testing::choose_forward_path(f).path != AttentionPath::reference);  // without the row
    f.fully_masked_row = true;
    require_chosen(f, AttentionPath::reference, PathRule::fully_masked_rows_take_the_reference);
  }
  auto asked = facts(AttentionPath::reference);  // asked for already: no rule needed
  asked.fully_masked_row = true;
  REQUIRE(mha::testing::choose_forward_path(asked).rule == PathRule::as_requested);
}

TEST_CASE("paths: a record with nothing for the engine to multiply takes the reference", "[options][paths]") {
  auto f = facts(AttentionPath::fast);
  f.keeps_record = true;
  REQUIRE(mha::testing::choose_forward_path(f).path == AttentionPath::fast);  // training_forward
  f.engine_keeps_record = false;                                              // static_k/static_v, or an empty size
  require_chosen(f, AttentionPath::reference, PathRule::records_without_products_take_the_reference);
}

TEST_CASE("paths: a record keeps the weights: automatic and memory_efficient give way to fast", "[options][paths]") {
  for (const auto path : {AttentionPath::automatic, AttentionPath::memory_efficient, AttentionPath::fast}) {
    auto f = facts(path, /*need_weights=*/false);
    f.L = f.S = 8192;  // automatic alone would take memory_efficient
    const AttentionPath alone = mha::testing::choose_forward_path(f).path;
    REQUIRE(alone == (path == AttentionPath::fast ? AttentionPath::fast : AttentionPath::memory_efficient));
    f.keeps_record = true;  // fast asked for is kept as asked; the others give way
    require_chosen(f, AttentionPath::fast,
                   path == AttentionPath::fast ? PathRule::as_requested : PathRule::records_keep_the_weights);
  }
}

TEST_CASE("paths: a dropout mask to replay takes the reference, unless a record is kept", "[options][paths]") {
  for (const auto path : {AttentionPath::automatic, AttentionPath::fast}) {
    auto f = facts(path);
    REQUIRE(mha::testing::choose_forward_path(f).path == AttentionPath::fast);
    f.replays_dropout = true;
    require_chosen(f, AttentionPath::reference, PathRule::dropout_replays_take_the_reference);
    f.keeps_record = true;  // training_forward replays it itself
    REQUIRE(mha::testing::choose_forward_path(f).path == AttentionPath::fast);
  }
}
