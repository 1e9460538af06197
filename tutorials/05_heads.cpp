// tutorials/05_heads.cpp — Tutorial 05: heads, step by step, in PyTorch's exact order.
//
// After the in-projection, q, k and v are (L, N, E). Multi-head attention cuts E into H
// heads of D = E / H columns each and attends in every head on its own:
//   q.view(L, N*H, D).transpose(0, 1)     -> (N*H, L, D)   batch-head b = n*H + h
//   scores  = (q / sqrt(D)) k^T + mask    -> (N*H, L, S)   PyTorch scales q, not scores
//   weights = softmax(scores)             -> (N*H, L, S)   over the keys
//   out     = weights v                   -> (N*H, L, D)
//   heads side by side, then out_proj     -> (L, N, E)
// Each step below prints its shape; the scores, softmax and product are written out, and
// compared with mha::textbook::scaled_dot_product_attention; the end result with PyTorch's.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads,
// D = head_dim, B = N*H.
#include "arguments.hpp"

#include "tutorial.hpp"

namespace {

// scores(b, i, j) = sum_d q(b, i, d) k(b, j, d): (B, L, D) x (B, D, S) -> (B, L, S)
template <class T>
xt::xtensor<T, 3> q_times_k_transposed(const xt::xtensor<T, 3>& q, const xt::xtensor<T, 3>& k) {
  const std::size_t B = q.shape(0), L = q.shape(1), D = q.shape(2), S = k.shape(1);
  xt::xtensor<T, 3> scores = xt::zeros<T>({B, L, S});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < S; ++j)
        for (std::size_t d = 0; d < D; ++d) scores(b, i, j) += q(b, i, d) * k(b, j, d);
  return scores;
}

// out(b, i, d) = sum_j w(b, i, j) v(b, j, d): (B, L, S) x (B, S, D) -> (B, L, D)
template <class T>
xt::xtensor<T, 3> weights_times_v(const xt::xtensor<T, 3>& w, const xt::xtensor<T, 3>& v) {
  const std::size_t B = w.shape(0), L = w.shape(1), S = w.shape(2), D = v.shape(2);
  xt::xtensor<T, 3> out = xt::zeros<T>({B, L, D});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < S; ++j)
        for (std::size_t d = 0; d < D; ++d) out(b, i, d) += w(b, i, j) * v(b, j, d);
  return out;
}

template <class T>
int run(const std::string& case_name, std::size_t H) {
  const auto c = tutorial::load<T>(case_name);
  const auto& o = c.info.options;
  tutorial::refuse_unless(c.query.dimension() == 3, c.info,
                          "is unbatched: this tutorial takes batched (L, N, E) or (N, L, E) cases");
  auto module = tutorial::reference_module(c);
  const std::size_t E = module.embed_dim(), D = E / H;
  if (E % H != 0) return fmt::print("--heads {} does not divide E = {}\n", H, E), 2;
  fmt::print("E = {}, H = {} heads, D = E / H = {}{}\n", E, H, D, H == module.num_heads() ? "" : " (not the case's H)");
  tutorial::Verdict verdict(c);

  tutorial::step(1, "in-projection (tutorial 03)");
  const auto [q, k, v] = mha::run_in_projection(module, c);  // (L, N, E), (S, N, E), (S, N, E)
  const std::size_t L = q.shape(0), N = q.shape(1), S = k.shape(0);
  tutorial::shape("q (L, N, E)", q);
  tutorial::shape("k (S, N, E)", k);
  tutorial::shape("v (S, N, E)", v);

  tutorial::step(2, "split heads: view (L, N*H, D), transpose(0, 1)");
  const auto qh = mha::textbook::split_heads(q, H);  // (N*H, L, D)
  const auto kh = mha::textbook::split_heads(k, H);  // (N*H, S, D)
  const auto vh = mha::textbook::split_heads(v, H);  // (N*H, S, D)
  tutorial::shape("q.view(L, N*H, D)", {L, N * H, D});
  tutorial::shape("qh = .transpose(0, 1) (N*H, L, D)", qh);
  tutorial::shape("kh, vh (N*H, S, D)", kh);
  tutorial::values("q[:, 0, :] (batch 0, all heads)", xt::view(q, xt::all(), 0, xt::all()), 3, 8);
  const std::size_t b1 = std::min<std::size_t>(1, N * H - 1);  // batch-head 1: batch 1 / H, head 1 % H
  tutorial::values(fmt::format("qh[{}] (batch {}, head {})", b1, b1 / H, b1 % H), xt::view(qh, b1), 3, 8);
  fmt::print("  Head h of batch n is batch-head n*H + h: columns [h*D, (h+1)*D) of q[:, n, :].\n");

  tutorial::step(3, "scale q by 1/sqrt(D), then scores = q k^T");
  const T scale = static_cast<T>(std::sqrt(1.0 / static_cast<double>(D)));
  const xt::xtensor<T, 3> q_scaled = qh * scale;     // (N*H, L, D)
  auto scores = q_times_k_transposed(q_scaled, kh);  // (N*H, L, D) x (N*H, D, S) -> (N*H, L, S)
  fmt::print("  1/sqrt(D) = {:.4f}\n", double(scale));
  tutorial::shape("scores (N*H, L, S)", scores);
  tutorial::values("scores[0]", xt::view(scores, 0), 4, 8);

  tutorial::step(4, "add the mask: attn_mask + key_padding_mask, bool True -> -inf");
  // Step 2 of forward() (mha::textbook::prepare_masks), then the merge of step 7.
  const auto masks = mha::textbook::prepare_masks(c.forward.attn_mask, c.forward.key_padding_mask, c.forward.is_causal,
                                                  c.forward.need_weights, /*batched=*/true, L, N, S, H);
  // With the is_causal hint and need_weights=False the module takes attn_mask at its word
  // and builds the causal mask itself (forward(), step 7): j > i is masked.
  const auto mask = masks.causal_hint ? std::optional(mha::textbook::causal_attn_mask<T>(L, S))  // (1, L, S)
                                      : mha::textbook::merge_masks(masks.attn_mask, masks.key_padding_mask, H,
                                                                   L);  // (1 or N*H, L, S)
  if (masks.causal_hint)
    fmt::print(
        "  is_causal=True, need_weights=False: the causal mask (key j > query i masked)\n"
        "  stands in for attn_mask, as in the module\n");
  if (mask) {
    tutorial::values("mask[0]", xt::view(*mask, 0), 4, 8);
    for (std::size_t b = 0; b < N * H; ++b) xt::view(scores, b) += xt::view(*mask, mask->shape(0) == 1 ? 0 : b);
  } else {
    fmt::print("  (this case has no mask)\n");
  }

  tutorial::step(5, "softmax over the keys");
  auto weights = scores;
  mha::textbook::softmax_last_dim(weights);  // (N*H, L, S)
  tutorial::values("weights[0] (rows sum to 1)", xt::view(weights, 0), 4, 8);

  tutorial::step(6, "weights v, and the same through mha::textbook::scaled_dot_product_attention");
  const auto heads_out = weights_times_v(weights, vh);  // (N*H, L, S) x (N*H, S, D) -> (N*H, L, D)
  tutorial::shape("weights v (N*H, L, D)", heads_out);
  mha::Generator no_dropout;  // dropout_p = 0: nothing is drawn from it
  const auto sdpa = mha::textbook::scaled_dot_product_attention(qh, kh, vh, mask, /*dropout_p=*/0.0, no_dropout);
  verdict.matches("weights vs mha::textbook::scaled_dot_product_attention", weights, sdpa.weights);
  verdict.matches("weights v vs mha::textbook::scaled_dot_product_attention", heads_out, sdpa.output);

  tutorial::step(7, "concatenate the heads, then out_proj");
  const auto merged = mha::textbook::merge_heads(heads_out, H);  // (N*H, L, D) -> (L, N, E)
  tutorial::shape("merged (L, N, E)", merged);
  const xt::xtensor<T, 2> w_out = module.parameter("out_proj.weight");  // (E, E)
  std::optional<xt::xtensor<T, 1>> b_out;
  if (o.bias) b_out = module.parameter("out_proj.bias");         // (E)
  const auto out = mha::textbook::linear(merged, w_out, b_out);  // (L, N, E) x (E, E)^T -> (L, N, E)
  tutorial::shape("attn_output = merged W_o^T + b_o", out);
  tutorial::values("attn_output[:, 0, :]", xt::view(out, xt::all(), 0, xt::all()), 2, 8);

  tutorial::step(8, "check against PyTorch");
  const xt::xarray<T> expected =
      mha::textbook::to_seq_first_batched(c.expected.at("attn_output"), o.batch_first);  // (L, N, E)
  verdict.matches("attn_output vs PyTorch's", out, expected);
  if (c.expected.contains("attn_output_weights")) {
    const xt::xarray<T> per_head = xt::reshape_view(weights, {N, H, L, S});  // (N, H, L, S)
    const xt::xarray<T> got = c.info.average_attn_weights ? xt::xarray<T>(xt::mean(per_head, {1})) : per_head;
    verdict.matches(c.info.average_attn_weights ? "mean of weights over heads vs PyTorch's" : "weights vs PyTorch's",
                    got, c.expected.at("attn_output_weights"));
  }
  return verdict.finish();
}

}  // namespace

int main(int argc, char** argv) try {
  cli::Arguments arguments{"Tutorial 05: heads, step by step"};
  std::string case_name = "attn_mask_float_2d_f32";
  std::size_t heads = 0;
  arguments.option("--case", case_name, "golden case (batched, no add_bias_kv / add_zero_attn, no dropout)");
  arguments.option("--heads", heads, "split into this many heads instead of the case's (an exercise)");
  if (const auto stop = arguments.parse(argc, argv)) return *stop;  // --help, or a bad option
  mha::use_best_blas_kernel();  // OpenBLAS's best kernel for this CPU (README: the BLAS kernel)

  tutorial::title("05", "heads, step by step",
                  "Demonstrates: split E into H heads, scale q, q k^T, mask, softmax, . v,\n"
                  "              concatenate, out_proj; in PyTorch's order, to PyTorch's result.");
  const auto info = mha::read_case_info(tutorial::case_dir(case_name));
  tutorial::refuse_error_case(info);
  tutorial::refuse_unless(!info.options.add_bias_kv && !info.options.add_zero_attn, info,
                          "has add_bias_kv or add_zero_attn: one more key, which this tutorial does not add");
  tutorial::refuse_unless(!info.training || info.options.dropout == 0, info,
                          "trains with dropout: PyTorch zeroed weights at random, a step this tutorial does not take");
  const std::size_t H = heads ? heads : static_cast<std::size_t>(info.options.num_heads);
  return info.dtype == "float32" ? run<float>(case_name, H) : run<double>(case_name, H);
} catch (const std::exception& e) {  // a case this tutorial cannot take, or a file it cannot read
  fmt::print("error: {}\n", e.what());
  return 2;
}
