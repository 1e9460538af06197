// tests/backward_test.cpp — the backward pass (MultiheadAttention::backward, textbook/reference_backward.hpp, textbook/gradients.hpp):
// what its gradients mean, shown on PyTorch's golden cases, and the errors it raises.
//
// The golden cases prove the numbers (golden_test); these tests demonstrate what a user
// does with them: that rows [0, E), [E, 2E), [2E, 3E) of grad in_proj_weight are the
// gradients of W_q, W_k, W_v (and no other order is), that zeroing one block freezes that
// projection in an SGD step, that one input object gets the sum of its uses, and that a
// dropout mask replays a dropout.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads.
#include "support.hpp"

#include <array>

namespace {

using mha_test::differs;
using mha_test::require_close;

// A cross-attention case (three inputs, three GEMMs, every block of the gradient distinct),
// with a bool attn_mask and a key_padding_mask, packed, float32.
const std::string cross_case = "backward_bool_mask_2d_key_padding_mask_f32";

template <class T>
mha::Gradients<T> gradients_of(mha::MultiheadAttention<T>& module, const mha::Case<T>& c) {
  auto [out, record] = mha::run_forward_for_backward(module, c);
  return module.backward(record, mha_test::value_of(c.grad_attn_output, "grad_attn_output"),
                         c.grad_attn_output_weights);
}

// Rows [block*E, (block+1)*E) of a (3E, E) gradient.
xt::xarray<float> rows(const xt::xarray<float>& packed, std::size_t block) {
  const std::size_t E = packed.shape(1);
  return xt::view(packed, xt::range(block * E, (block + 1) * E), xt::all());
}

}  // namespace

TEST_CASE("grad in_proj_weight is [grad W_q; grad W_k; grad W_v], and no other order of its row blocks",
          "[backward][demonstration]") {
  const auto c = mha_test::load<float>(cross_case);
  const double rtol = c.info.backward_rtol, atol = c.info.backward_atol;
  auto packed = mha::make_module(c);
  auto separate = packed.to_separate();
  REQUIRE(packed.packed());
  const auto gp = gradients_of(packed, c), gs = gradients_of(separate, c);
  const auto& w = gp.parameters.at("in_proj_weight");  // (3E, E)
  constexpr std::size_t E = 8;
  REQUIRE(mha_test::shape_of(w) == std::vector<std::size_t>{3 * E, E});

  // PyTorch's own gradient first: the packed module gives it.
  require_close<float>("grad in_proj_weight", w, c.expected_gradients.at("in_proj_weight"), rtol, atol);

  // Rows [0,E), [E,2E), [2E,3E) against grad q/k/v_proj_weight: only the order Q, K, V matches.
  const std::array<std::string, 3> names = {"q_proj_weight", "k_proj_weight", "v_proj_weight"};
  std::array<std::size_t, 3> order = {0, 1, 2};
  int matching = 0, orders = 0;
  do {
    bool all = true;
    for (std::size_t i = 0; i < 3; ++i)
      all = all && !differs(rows(w, order[i]), gs.parameters.at(names[i]), rtol, atol);
    INFO("row blocks in the order " << order[0] << order[1] << order[2]);
    CHECK(all == (order == std::array<std::size_t, 3>{0, 1, 2}));
    matching += all, ++orders;
  } while (std::next_permutation(order.begin(), order.end()));
  CHECK(orders == 6);
  CHECK(matching == 1);

  // in_proj_bias is packed in both variants: the same gradient, [db_q; db_k; db_v].
  require_close<float>("grad in_proj_bias, separate vs packed", gs.parameters.at("in_proj_bias"),
                       gp.parameters.at("in_proj_bias"), rtol, atol);
}

TEST_CASE("freezing K: with the K block of the gradient zeroed, an SGD step leaves W_k as it was",
          "[backward][demonstration]") {
  const auto c = mha_test::load<float>(cross_case);
  constexpr std::size_t E = 8;
  constexpr float learning_rate = 0.1f;
  auto module = mha::make_module(c);
  const auto before = module.state_dict();

  // One SGD step, p <- p - lr * grad, with rows [E, 2E) of the in-projection's gradient
  // (W_k and b_k) zeroed or not.
  auto step = [&](bool freeze_k) {
    auto grads = gradients_of(module, c).parameters;
    if (freeze_k) {
      xt::view(grads.at("in_proj_weight"), xt::range(E, 2 * E), xt::all()) = 0.0f;
      xt::view(grads.at("in_proj_bias"), xt::range(E, 2 * E)) = 0.0f;
    }
    auto stepped = module;
    for (const auto& [name, p] : before)
      stepped.set_parameter(name, xt::xarray<float>(p - learning_rate * grads.at(name)));
    return stepped.state_dict();
  };
  auto block = [](const xt::xarray<float>& w, std::size_t b) { return rows(w, b); };

  const auto frozen = step(/*freeze_k=*/true), free = step(/*freeze_k=*/false);
  const auto& w0 = before.at("in_proj_weight");
  // Frozen: W_k and b_k exactly as before; W_q, W_v and out_proj moved.
  CHECK(mha_test::same(block(frozen.at("in_proj_weight"), 1), block(w0, 1)));
  CHECK(mha_test::same(xt::view(frozen.at("in_proj_bias"), xt::range(E, 2 * E)),
                       xt::view(before.at("in_proj_bias"), xt::range(E, 2 * E))));
  CHECK_FALSE(mha_test::same(block(frozen.at("in_proj_weight"), 0), block(w0, 0)));
  CHECK_FALSE(mha_test::same(block(frozen.at("in_proj_weight"), 2), block(w0, 2)));
  CHECK_FALSE(mha_test::same(frozen.at("out_proj.weight"), before.at("out_proj.weight")));
  // Not frozen: the same step moves W_k too, so the zeroing is what kept it.
  CHECK_FALSE(mha_test::same(block(free.at("in_proj_weight"), 1), block(w0, 1)));
  CHECK(mha_test::same(block(free.at("in_proj_weight"), 0), block(frozen.at("in_proj_weight"), 0)));
}

TEST_CASE("one input object gets one gradient, the sum over its uses (PyTorch's x.grad)", "[backward][demonstration]") {
  constexpr std::size_t E = 8, L = 4, N = 2;
  mha::Generator g(7);
  mha::MultiheadAttention<double> module(mha::Options{.embed_dim = E, .num_heads = 2}, /*seed=*/3);
  module.eval();
  const xt::xarray<double> x = mha_test::random_tensor<double>({L, N, E}, g);
  const xt::xarray<double> x_key = x, x_value = x;  // equal values, other objects
  const xt::xarray<double> grad_out = mha_test::random_tensor<double>({L, N, E}, g);

  auto [out_self, record_self] = module.forward_for_backward(x, x, x);
  const auto self = module.backward(record_self, grad_out);
  auto [out_cross, record_cross] = module.forward_for_backward(x, x_key, x_value);
  const auto cross = module.backward(record_cross, grad_out);

  REQUIRE(self.query.has_value());
  CHECK_FALSE(self.key.has_value());  // one object: its gradient is under query
  CHECK_FALSE(self.value.has_value());
  REQUIRE((cross.query && cross.key && cross.value));
  const xt::xarray<double> sum = *cross.query + *cross.key + *cross.value;
  require_close<double>("self-attention's grad vs the sum of the three uses", *self.query, sum, 1e-12, 1e-12);
  CHECK(differs<double>(*self.query, *cross.query, 1e-6, 1e-6));  // the query's own use alone is not it
}

TEST_CASE("a dropout mask replays a dropout, on every path", "[backward][dropout]") {
  constexpr std::size_t E = 8, H = 2, L = 3, N = 2;
  mha::Generator g(11);
  mha::MultiheadAttention<double> module(mha::Options{.embed_dim = E, .num_heads = H, .dropout = 0.5}, /*seed=*/5);
  const xt::xarray<double> x = mha_test::random_tensor<double>({L, N, E}, g);
  module.train();

  // A training forward draws a mask and records it; given back, it gives the same output.
  // A replayed mask takes the reference path, so the mask is drawn on it too.
  auto twin = module;  // the same weights and the same generator state
  module.set_attention_path(mha::AttentionPath::reference);
  auto [drawn, record] = module.forward_for_backward(x, x, x);
  const auto& keep = mha_test::value_of(record.dropout_mask(), "dropout_mask");
  REQUIRE(mha_test::shape_of(keep) == std::vector<std::size_t>{N * H, L, L});
  CHECK(xt::any(keep));
  CHECK_FALSE(xt::all(keep));

  // The engine's training forward draws the same mask from the same generator state, and
  // gives the same output up to the order of its sums (GEMMs against the reference's loops).
  twin.set_attention_path(mha::AttentionPath::fast);
  const auto [twin_out, twin_record] = twin.forward_for_backward(x, x, x);
  CHECK(mha_test::value_of(twin_record.dropout_mask(), "dropout_mask") == keep);
  require_close<double>("engine's drawn attn_output", twin_out.attn_output, drawn.attn_output, 1e-12, 1e-12);
  mha::ForwardOptions<double> replay;
  replay.dropout_mask = keep;
  for (const auto& [name, path] : mha_test::all_paths) {
    module.set_attention_path(path);
    replay.need_weights = path != mha::AttentionPath::memory_efficient;
    INFO(name);
    const auto out = module.forward(x, x, x, replay);
    require_close<double>("replayed attn_output", out.attn_output, drawn.attn_output, 0, 0);
  }

  // Everything kept: each weight is scaled by 1 / (1 - 0.5) = 2 (by hand), exactly.
  module.set_attention_path(mha::AttentionPath::reference);
  replay.need_weights = true;
  replay.dropout_mask = xt::xtensor<bool, 3>(xt::ones<bool>({N * H, L, L}));
  replay.average_attn_weights = false;
  const auto kept = module.forward(x, x, x, replay);
  module.eval();
  mha::ForwardOptions<double> plain;
  plain.average_attn_weights = false;
  const auto eval = module.forward(x, x, x, plain);
  require_close<double>("all-kept weights vs 2 x eval weights", mha_test::weights(kept),
                        xt::xarray<double>(2.0 * mha_test::weights(eval)), 0, 0);
}

TEST_CASE("dropout_mask: an error outside training, with dropout 0, or of the wrong shape", "[backward][errors]") {
  using mha_test::small::E, mha_test::small::L, mha_test::small::N, mha_test::small::H;
  const auto x = mha_test::small::zeros({L, N, E});
  mha::ForwardOptions<float> opts;
  opts.dropout_mask = xt::xtensor<bool, 3>(xt::ones<bool>({N * H, L, L}));

  auto options = mha_test::small::options();
  options.dropout = 0.5;
  mha::MultiheadAttention<float> module(options);
  module.eval();
  CHECK_MHA_ERROR(module.forward(x, x, x, opts),
                  Catch::Matchers::StartsWith("dropout_mask:") && Catch::Matchers::ContainsSubstring("training=false"));
  mha::MultiheadAttention<float> no_dropout(mha_test::small::options());
  no_dropout.train();
  CHECK_MHA_ERROR(no_dropout.forward(x, x, x, opts),
                  Catch::Matchers::StartsWith("dropout_mask:") && Catch::Matchers::ContainsSubstring("dropout=0"));
  module.train();
  opts.dropout_mask = xt::xtensor<bool, 3>(xt::ones<bool>({N * H, L, L + 1}));
  CHECK_MHA_ERROR(module.forward(x, x, x, opts), Catch::Matchers::StartsWith("dropout_mask:") &&
                                                     Catch::Matchers::ContainsSubstring("expected shape (4, 3, 3)") &&
                                                     Catch::Matchers::ContainsSubstring("got (4, 3, 4)"));
}

TEST_CASE("backward: the wrong gradient shapes, weights not asked for, and stale records are errors",
          "[backward][errors]") {
  using Catch::Matchers::ContainsSubstring;
  using Catch::Matchers::StartsWith;
  using mha_test::small::E, mha_test::small::L, mha_test::small::N, mha_test::small::S;
  const auto q = mha_test::small::zeros({L, N, E}), kv = mha_test::small::zeros({S, N, E});
  mha::MultiheadAttention<float> module(mha_test::small::options());
  module.eval();
  auto [out, record] = module.forward_for_backward(q, kv, kv);
  const xt::xarray<float> grad = xt::zeros<float>({L, N, E});

  CHECK_MHA_ERROR(module.backward(record, mha_test::small::zeros({L, N, E + 1})),
                  StartsWith("grad_attn_output:") && ContainsSubstring("expected shape (3, 2, 8)") &&
                      ContainsSubstring("got (3, 2, 9)"));
  CHECK_MHA_ERROR(module.backward(record, grad, mha_test::small::zeros({N, L, S + 1})),
                  StartsWith("grad_attn_output_weights:") && ContainsSubstring("expected shape (2, 3, 4)") &&
                      ContainsSubstring("got (2, 3, 5)"));
  CHECK_NOTHROW(module.backward(record, grad, mha_test::small::zeros({N, L, S})));

  mha::ForwardOptions<float> no_weights;
  no_weights.need_weights = false;
  auto [out2, record2] = module.forward_for_backward(q, kv, kv, no_weights);
  CHECK_MHA_ERROR(module.backward(record2, grad, mha_test::small::zeros({N, L, S})),
                  StartsWith("grad_attn_output_weights:") && ContainsSubstring("need_weights=false"));

  // Another module's record, or one made before the parameters changed.
  mha::MultiheadAttention<float> other(mha_test::small::options(), /*seed=*/1);
  CHECK_MHA_ERROR(other.backward(record, grad), StartsWith("record:"));
  CHECK_MHA_ERROR(module.to_separate().backward(record, grad), StartsWith("record:"));
  CHECK_NOTHROW(mha::MultiheadAttention<float>(module).backward(record, grad));  // a copy has the same weights
  module.set_parameter("out_proj.bias", xt::ones<float>({E}));
  CHECK_MHA_ERROR(module.backward(record, grad), StartsWith("record:") && ContainsSubstring("parameters changed"));
}
