// tests/module_test.cpp — api/multihead_attention.hpp, the module's own behaviour beyond the goldens: training mode and
// dropout, the is_causal hint, and the shapes forward returns for every layout.
#include "support.hpp"

#include <cmath>

namespace {

constexpr std::size_t E = 64, H = 4, L = 5, S = 6, N = 3;

mha::Options options() {
  mha::Options o;
  o.embed_dim = static_cast<std::int64_t>(E);
  o.num_heads = static_cast<std::int64_t>(H);
  return o;
}

xt::xarray<double> random_input(const std::vector<std::size_t>& shape, std::uint64_t seed) {
  mha::Generator g(seed);
  xt::xarray<double> x = xt::zeros<double>(shape);
  for (auto& v : x) v = g.uniform(-1, 1);
  return x;
}

}  // namespace

TEST_CASE("forward returns PyTorch's shapes for every layout", "[module][shapes]") {
  mha::MultiheadAttention<double> seq_first(options());
  const auto q = random_input({L, N, E}, 1), kv = random_input({S, N, E}, 2);
  auto out = seq_first.forward(q, kv, kv);
  CHECK(mha_test::shape_of(out.attn_output) == std::vector<std::size_t>{L, N, E});
  CHECK(mha_test::shape_of(mha_test::weights(out)) == std::vector<std::size_t>{N, L, S});
  mha::ForwardOptions<double> per_head;
  per_head.average_attn_weights = false;
  CHECK(mha_test::shape_of(mha_test::weights(seq_first.forward(q, kv, kv, per_head))) ==
        std::vector<std::size_t>{N, H, L, S});
  mha::ForwardOptions<double> no_weights;
  no_weights.need_weights = false;
  CHECK_FALSE(seq_first.forward(q, kv, kv, no_weights).attn_output_weights.has_value());

  auto o = options();
  o.batch_first = true;
  mha::MultiheadAttention<double> batch_first(o);
  out = batch_first.forward(random_input({N, L, E}, 3), random_input({N, S, E}, 4), random_input({N, S, E}, 5));
  CHECK(mha_test::shape_of(out.attn_output) == std::vector<std::size_t>{N, L, E});
  CHECK(mha_test::shape_of(mha_test::weights(out)) == std::vector<std::size_t>{N, L, S});

  // Unbatched input is never transposed, batch_first or not.
  out = batch_first.forward(random_input({L, E}, 6), random_input({S, E}, 7), random_input({S, E}, 8), per_head);
  CHECK(mha_test::shape_of(out.attn_output) == std::vector<std::size_t>{L, E});
  CHECK(mha_test::shape_of(mha_test::weights(out)) == std::vector<std::size_t>{H, L, S});
}

TEST_CASE("a new module is in training mode and dropout acts only there", "[module][dropout]") {
  auto o = options();
  o.dropout = 0.5;
  mha::MultiheadAttention<double> m(o, 3);
  REQUIRE(m.training());
  const auto x = random_input({L, N, E}, 9);
  mha::ForwardOptions<double> per_head;
  per_head.average_attn_weights = false;

  m.eval();
  const auto reference = m.forward(x, x, x, per_head);
  const auto again = m.forward(x, x, x, per_head);
  CHECK(mha_test::same(*again.attn_output_weights, *reference.attn_output_weights));

  m.train();
  const auto dropped = m.forward(x, x, x, per_head);
  // Each weight is either dropped (0) or kept and scaled by 1 / (1 - p) = 2.
  const auto& w = *dropped.attn_output_weights;
  const auto& w0 = *reference.attn_output_weights;
  std::size_t zeros = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (w.data()[i] == 0.0) ++zeros;
    else REQUIRE(w.data()[i] == Catch::Approx(2.0 * w0.data()[i]).epsilon(1e-12));
  }
  // About half of N*H*L*L = 300 weights are dropped; 3 sigma is about 26.
  CHECK(zeros > 150 - 40);
  CHECK(zeros < 150 + 40);
  CHECK(mha_test::differs<double>(dropped.attn_output, reference.attn_output, 1e-6, 1e-6));

  // The dropout generator can be reseeded for a reproducible draw.
  m.seed_dropout(11);
  const auto a = m.forward(x, x, x, per_head);
  m.seed_dropout(11);
  const auto b = m.forward(x, x, x, per_head);
  CHECK(mha_test::same(*a.attn_output_weights, *b.attn_output_weights));
}

TEST_CASE("layers made one after the other from one generator draw different dropout masks", "[module][dropout]") {
  // As two nn.MultiheadAttention layers draw from PyTorch's one global generator: the
  // second layer's dropout does not repeat the first's.
  auto o = options();
  o.dropout = 0.5;
  mha::Generator g(21);
  mha::MultiheadAttention<double> first(o, g), second(o, g);
  second.load_state_dict(first.state_dict());  // equal weights: only the dropout can differ
  const auto x = random_input({L, N, E}, 22);
  mha::ForwardOptions<double> per_head;
  per_head.average_attn_weights = false;
  const auto a = first.forward(x, x, x, per_head), b = second.forward(x, x, x, per_head);
  CHECK_FALSE(mha_test::same(*a.attn_output_weights, *b.attn_output_weights));
  // and seeded alike, they draw alike
  first.seed_dropout(5), second.seed_dropout(5);
  CHECK(mha_test::same(*first.forward(x, x, x, per_head).attn_output_weights,
                       *second.forward(x, x, x, per_head).attn_output_weights));
}

TEST_CASE("dropout with p = 0 in training equals evaluation", "[module][dropout]") {
  mha::MultiheadAttention<double> m(options(), 4);
  const auto x = random_input({L, N, E}, 10);
  m.train();
  const auto t = m.forward(x, x, x);
  m.eval();
  const auto e = m.forward(x, x, x);
  CHECK(mha_test::same(t.attn_output, e.attn_output));
}

TEST_CASE("is_causal with need_weights=false uses the causal mask, as PyTorch's SDPA branch", "[module][masks]") {
  mha::MultiheadAttention<double> m(options(), 5);
  m.eval();
  const auto x = random_input({L, N, E}, 12);
  mha::ForwardOptions<double> with_mask;
  with_mask.attn_mask = xt::xarray<bool>(mha::textbook::causal_mask(L, L));
  mha::ForwardOptions<double> hinted = with_mask;
  hinted.is_causal = true;
  hinted.need_weights = false;
  const auto a = m.forward(x, x, x, with_mask), b = m.forward(x, x, x, hinted);
  mha_test::require_close<double>("attn_output", b.attn_output, a.attn_output, 1e-12, 1e-12);
  // The float form of the same mask gives the same result.
  mha::ForwardOptions<double> float_mask;
  float_mask.attn_mask = xt::xarray<double>(mha::textbook::generate_square_subsequent_mask<double>(L));
  mha_test::require_close<double>("attn_output", m.forward(x, x, x, float_mask).attn_output, a.attn_output, 0, 0);
}

TEST_CASE("a fully masked row gives NaN, and only that row", "[module][masks]") {
  mha::MultiheadAttention<double> m(options(), 6);
  m.eval();
  const auto x = random_input({L, N, E}, 13);
  xt::xarray<bool> mask = xt::zeros<bool>({L, L});
  xt::view(mask, 1, xt::all()) = true;  // query position 1 may attend to nothing
  mha::ForwardOptions<double> o;
  o.attn_mask = mask;
  const auto out = m.forward(x, x, x, o);
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t n = 0; n < N; ++n) {
      INFO("position " << i << " batch " << n);
      CHECK(std::isnan(out.attn_output(i, n, 0)) == (i == 1));
      CHECK(std::isnan(mha_test::weights(out)(n, i, 0)) == (i == 1));
    }
}

TEST_CASE("a float key_padding_mask is added, as PyTorch 2.x merges masks", "[module][masks]") {
  // PyTorch 2.x turns a bool mask into 0 / -inf (_canonical_mask) and adds the masks, so
  // a float key_padding_mask of 0 / -inf must give exactly the bool mask's result, and a
  // finite float mask shifts the scores of those keys.
  mha::MultiheadAttention<double> m(options(), 8);
  m.eval();
  const auto q = random_input({L, N, E}, 14), kv = random_input({S, N, E}, 15);
  xt::xarray<bool> padding = xt::zeros<bool>({N, S});
  padding(0, S - 1) = padding(2, 0) = true;
  mha::ForwardOptions<double> as_bool, as_float, shifted;
  as_bool.key_padding_mask = padding;
  as_float.key_padding_mask = xt::xarray<double>(mha::textbook::canonical_mask<double>(padding));
  const auto a = m.forward(q, kv, kv, as_bool), b = m.forward(q, kv, kv, as_float);
  mha_test::require_close<double>("attn_output", b.attn_output, a.attn_output, 0, 0);
  xt::xarray<double> bias = xt::zeros<double>({N, S});
  bias(1, 2) = -1.5;
  shifted.key_padding_mask = bias;
  const auto c = m.forward(q, kv, kv, shifted), d = m.forward(q, kv, kv);
  // Batch 1's weight on key 2 shrinks; batches 0 and 2 are untouched.
  const auto &shifted_weights = mha_test::weights(c), &plain_weights = mha_test::weights(d);  // (N, L, S)
  CHECK(shifted_weights(1, 0, 2) < plain_weights(1, 0, 2));
  mha_test::require_close<double>("batch 0 weights", xt::view(shifted_weights, 0),
                                  xt::xarray<double>(xt::view(plain_weights, 0)), 0, 0);
}

TEST_CASE("dropout multiplies as PyTorch's does and a dropped NaN stays NaN", "[module][dropout]") {
  // F.dropout(x, p) is x * mask / (1 - p): a NaN weight of a fully masked row stays NaN
  // whether it is dropped or kept, so the whole row of weights stays NaN in training.
  auto o = options();
  o.dropout = 0.5;
  mha::MultiheadAttention<double> m(o, 9);
  m.train();
  const auto x = random_input({L, N, E}, 16);
  xt::xarray<bool> mask = xt::zeros<bool>({L, L});
  xt::view(mask, 2, xt::all()) = true;
  mha::ForwardOptions<double> opts;
  opts.attn_mask = mask;
  opts.average_attn_weights = false;
  for (auto path : {mha::AttentionPath::reference, mha::AttentionPath::fast}) {
    m.set_attention_path(path);
    const auto w = mha_test::weights(m.forward(x, x, x, opts));  // (N, H, L, L)
    INFO("path " << static_cast<int>(path));
    CHECK(xt::all(xt::isnan(xt::view(w, xt::all(), xt::all(), 2, xt::all()))));
    CHECK_FALSE(xt::any(xt::isnan(xt::view(w, xt::all(), xt::all(), 0, xt::all()))));
  }
}

// PyTorch 1.13.1, nn.MultiheadAttention(8, 2) in eval mode, with a query of (5, 0, 8):
// attn_output (5, 0, 8) and weights (0, 5, 5); per head (0, 2, 5, 5); with key and value
// of (3, 0, 8), weights (0, 5, 3); batch_first with add_bias_kv and add_zero_attn, a
// query of (0, 5, 8): (0, 5, 8) and (0, 5, 7) (S' = 5 + 1 + 1). None with
// need_weights=False. key_padding_mask (0, 5) and a 3-D attn_mask (0, 5, 5) are accepted.
TEST_CASE("an empty batch (N = 0) gives PyTorch's empty outputs on every path", "[module][shapes]") {
  using Shape = std::vector<std::size_t>;
  using mha::AttentionPath;
  const mha::Options small{.embed_dim = 8, .num_heads = 2};
  for (const auto path : {AttentionPath::reference, AttentionPath::fast, AttentionPath::automatic}) {
    INFO("path " << static_cast<int>(path));
    mha::MultiheadAttention<float> m(small);
    m.eval();
    m.set_attention_path(path);
    const xt::xarray<float> x = xt::zeros<float>({5, 0, 8}), memory = xt::zeros<float>({3, 0, 8});
    auto out = m.forward(x, x, x);
    CHECK(mha_test::shape_of(out.attn_output) == Shape{5, 0, 8});
    CHECK(mha_test::shape_of(mha_test::weights(out)) == Shape{0, 5, 5});
    mha::ForwardOptions<float> per_head;
    per_head.average_attn_weights = false;
    CHECK(mha_test::shape_of(mha_test::weights(m.forward(x, x, x, per_head))) == Shape{0, 2, 5, 5});
    CHECK(mha_test::shape_of(mha_test::weights(m.forward(x, memory, memory))) == Shape{0, 5, 3});
    mha::ForwardOptions<float> masked;
    masked.key_padding_mask = mha::Mask<float>(xt::xarray<bool>(xt::zeros<bool>({0, 5})));
    masked.attn_mask = mha::Mask<float>(xt::xarray<bool>(xt::zeros<bool>({0, 5, 5})));
    CHECK(mha_test::shape_of(mha_test::weights(m.forward(x, x, x, masked))) == Shape{0, 5, 5});

    mha::MultiheadAttention<float> bf(
        mha::Options{.embed_dim = 8, .num_heads = 2, .add_bias_kv = true, .add_zero_attn = true, .batch_first = true});
    bf.eval();
    bf.set_attention_path(path);
    const xt::xarray<float> xb = xt::zeros<float>({0, 5, 8});
    out = bf.forward(xb, xb, xb);
    CHECK(mha_test::shape_of(out.attn_output) == Shape{0, 5, 8});
    CHECK(mha_test::shape_of(mha_test::weights(out)) == Shape{0, 5, 7});
  }
  for (const auto path : {AttentionPath::fast, AttentionPath::memory_efficient}) {
    mha::MultiheadAttention<float> m(small);
    m.set_attention_path(path);
    mha::ForwardOptions<float> no_weights;
    no_weights.need_weights = false;
    const xt::xarray<float> x = xt::zeros<float>({5, 0, 8});
    const auto out = m.forward(x, x, x, no_weights);
    CHECK(mha_test::shape_of(out.attn_output) == Shape{5, 0, 8});
    CHECK_FALSE(out.attn_output_weights.has_value());
  }
}
