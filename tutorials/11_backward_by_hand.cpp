// Tutorial 11: the backward pass by hand, one formula per step, checked against autograd.
//
// Golden case backward_cross_unbatched_f64: E = 8, H = 2 heads of D = 4, L = 3 queries,
// S = 4 keys, unbatched, three distinct inputs, float64. PyTorch computed
// loss = sum(attn_output * grad_attn_output) and loss.backward(); the case holds the
// upstream gradient and every gradient autograd found. The program runs the forward one
// step at a time (as tutorial 04), then goes back through it with the formulas of
// mha:gradients, printing each gradient and checking it against PyTorch's. At the end the
// module's own backward() gives the same, and two classic mistakes do not.
// docs/11-backward-by-hand.md derives each formula.
//
// Legend: L = target length, S = source length, N = batch (1 here), E = embed_dim,
// H = heads, D = E / H, B = N*H.
#include <CLI/CLI.hpp>

#include "tutorial.hpp"

int main(int argc, char** argv) {
  CLI::App app("Tutorial 11: the backward pass by hand, checked against PyTorch's autograd");
  std::string case_name = "backward_cross_unbatched_f64";
  app.add_option("--case", case_name, "a format-2 golden case: unbatched, cross attention, no mask, eval");
  CLI11_PARSE(app, argc, argv);

  try {
    using T = double;
    tutorial::title("11", "the backward pass by hand",
                    "Each step of the forward, undone by its own formula, gives autograd's gradients.");
    const auto c = tutorial::load<T>(case_name);
    mha::check(c.info.format == 2 && c.query.dimension() == 2, "--case", "expected an unbatched format-2 case, got {}",
               c.info.name);
    tutorial::Verdict verdict(c);
    auto module = tutorial::reference_module(c);
    const std::size_t H = module.num_heads();
    const auto& grad = c.expected_gradients;  // PyTorch's: query, key, value, in_proj_weight, ...

    tutorial::step(1, "the forward, one tensor per step (unbatched: a batch of N = 1)");
    const auto query = mha::to_seq_first_batched(c.query, false);  // (L, 1, E)
    const auto key = mha::to_seq_first_batched(c.key, false);      // (S, 1, E)
    const auto value = mha::to_seq_first_batched(c.value, false);  // (S, 1, E)
    const xt::xtensor<T, 2> in_proj_weight = c.parameters.at("in_proj_weight");
    const xt::xtensor<T, 2> out_proj_weight = c.parameters.at("out_proj.weight");
    const std::optional<xt::xtensor<T, 1>> in_proj_bias = xt::xtensor<T, 1>(c.parameters.at("in_proj_bias"));
    const std::optional<xt::xtensor<T, 1>> out_proj_bias = xt::xtensor<T, 1>(c.parameters.at("out_proj.bias"));
    const auto [q, k, v] = mha::in_projection_packed(query, key, value, in_proj_weight, in_proj_bias);
    const auto qh = mha::split_heads(q, H), kh = mha::split_heads(k, H), vh = mha::split_heads(v, H);  // (B, ., D)
    const auto attention = mha::scaled_dot_product_attention(qh, kh, vh, std::optional<xt::xtensor<T, 3>>{},
                                                             /*dropout_p=*/0.0, std::optional<xt::xtensor<bool, 3>>{});
    const auto merged = mha::merge_heads(attention.output, H);                     // (L, 1, E)
    const auto attn_output = mha::linear(merged, out_proj_weight, out_proj_bias);  // (L, 1, E)
    tutorial::shape("q = query W_q^T + b_q", q);
    tutorial::shape("P = softmax(q k^T / sqrt(D))", attention.probabilities);
    tutorial::shape("O = P v, per head", attention.output);
    tutorial::shape("attn_output = merged W_o^T + b_o", attn_output);
    verdict.matches("attn_output vs PyTorch", mha::caller_layout(attn_output, false, false),
                    c.expected.at("attn_output"));

    tutorial::step(2, "out_proj: dX = dY W_o, dW_o = dY^T X, db_o = sum of dY");
    const auto d_attn_output = mha::to_seq_first_batched(*c.grad_attn_output, false);  // dY (L, 1, E)
    const auto out_proj = mha::linear_backward(merged, out_proj_weight, d_attn_output, /*has_bias=*/true);
    tutorial::values("dL/d(out_proj.weight), rows 0-3", xt::view(out_proj.weight, xt::range(0, 4), xt::all()));
    verdict.matches("grad out_proj.weight vs PyTorch", out_proj.weight, grad.at("out_proj.weight"));
    verdict.matches("grad out_proj.bias vs PyTorch", *out_proj.bias, grad.at("out_proj.bias"));

    tutorial::step(3, "heads apart again: dO = split_heads(dX)");
    const auto d_output = mha::merge_heads_backward(out_proj.input, H);  // (B, L, D)
    tutorial::shape("dO", d_output);

    tutorial::step(4, "O = P v: dP = dO v^T, dv = P^T dO");
    const auto weighted = mha::weighted_values_backward(attention.weights, vh, d_output);
    tutorial::shape("dP", weighted.weights);
    tutorial::shape("dv, per head", weighted.values);

    tutorial::step(5, "softmax: dS = P * (dP - rowsum(dP * P))");
    const auto d_scores = mha::softmax_backward(attention.probabilities, weighted.weights);  // (B, L, S)
    tutorial::values("dS, head 0", xt::view(d_scores, 0, xt::all(), xt::all()));
    const xt::xtensor<T, 2> row_sums = xt::sum(d_scores, {2});  // each row of dS sums to 0
    verdict.holds("every row of dS sums to 0", xt::all(xt::abs(row_sums) < 1e-12));

    tutorial::step(6, "scores = (q / sqrt(D)) k^T: dq = dS k / sqrt(D), dk = dS^T q / sqrt(D)");
    const auto scores = mha::scores_backward(qh, kh, d_scores);
    const auto dq = mha::split_heads_backward(scores.query, H);     // (L, 1, E)
    const auto dk = mha::split_heads_backward(scores.key, H);       // (S, 1, E)
    const auto dv = mha::split_heads_backward(weighted.values, H);  // (S, 1, E)
    tutorial::shape("dq, heads side by side", dq);

    tutorial::step(7, "in-projection: d query = dq W_q, dW_q = dq^T query, and likewise for k and v");
    const auto in = mha::in_projection_packed_backward(query, key, value, in_proj_weight, /*has_bias=*/true, dq, dk, dv,
                                                       mha::Aliasing::none);
    const auto packed = mha::pack(in.weights);  // [dW_q; dW_k; dW_v], [db_q; db_k; db_v]
    tutorial::values("dL/d(in_proj_weight), rows 0-3 (W_q)",
                     xt::view(packed.in_proj_weight, xt::range(0, 4), xt::all()));
    verdict.matches("grad in_proj_weight vs PyTorch", packed.in_proj_weight, grad.at("in_proj_weight"));
    verdict.matches("grad in_proj_bias vs PyTorch", *packed.in_proj_bias, grad.at("in_proj_bias"));
    verdict.matches("grad query vs PyTorch", mha::caller_layout(in.query, false, false), grad.at("query"));
    verdict.matches("grad key vs PyTorch", mha::caller_layout(*in.key, false, false), grad.at("key"));
    verdict.matches("grad value vs PyTorch", mha::caller_layout(*in.value, false, false), grad.at("value"));

    tutorial::step(8, "the module's backward() gives the same; two mistakes do not");
    auto [out, record] = module.forward_for_backward(c.query, c.key, c.value, c.forward);
    const auto g = module.backward(record, *c.grad_attn_output);
    verdict.matches("backward(): grad in_proj_weight", g.parameters.at("in_proj_weight"), grad.at("in_proj_weight"));
    verdict.matches("backward(): grad query", tutorial::value_of(g.query, "grad query"), grad.at("query"));
    const xt::xarray<T> unscaled = mha::caller_layout(
        mha::split_heads_backward(xt::xtensor<T, 3>(scores.query / mha::attention_scale<T>(module.head_dim())), H),
        false, false);
    verdict.differs("dq without the 1 / sqrt(D)", unscaled, grad.at("query"));
    const auto swapped = mha::pack(mha::SeparateProjections<T>{in.weights.w_k, in.weights.w_q, in.weights.w_v,
                                                               in.weights.b_k, in.weights.b_q, in.weights.b_v});
    verdict.differs("grad in_proj_weight as [dW_k; dW_q; dW_v]", swapped.in_proj_weight, grad.at("in_proj_weight"));
    return verdict.finish();
  } catch (const std::exception& e) {
    fmt::print(stderr, "tutorial-11: {}\n", e.what());
    return EXIT_FAILURE;
  }
}
