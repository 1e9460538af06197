// labs/grader/library.hpp — the grader's one door into the library's textbook: every step of mha that the grader
// calls, and nothing else, is named here.
//
// The grader recomputes each lab's step as PyTorch does it and as each catalogued mistake
// does it (mistakes.hpp). Where a step is right, it is the library's own, called through
// these names; where a mistake changes it, the grader writes the step itself. When the
// library moves a step (another namespace, another name), this file is what changes.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads,
// D = head_dim, B = N*H, in / out = a linear layer's input / output width.
//
// Include it after "third_party.hpp", `import mha;`, `import mha.io;` and `import mha.golden;`.
#pragma once

namespace grader::lib {

// y = x W^T + b over the last dimension. (L, N, in) -> (L, N, out)
template <class T>
xt::xtensor<T, 3> linear(const xt::xtensor<T, 3>& x, const xt::xtensor<T, 2>& w,
                         const std::optional<xt::xtensor<T, 1>>& b) {
  return mha::textbook::linear(x, w, b);
}

// in_proj_weight (3E, E), in_proj_bias (3E) -> W_q, W_k, W_v, b_q, b_k, b_v
template <class T>
mha::SeparateProjections<T> split_packed(const xt::xtensor<T, 2>& w, const std::optional<xt::xtensor<T, 1>>& b) {
  return mha::textbook::split_packed(w, b);
}

// (L, N, E) -> (N*H, L, D), and back
template <class T>
xt::xtensor<T, 3> split_heads(const xt::xtensor<T, 3>& x, std::size_t H) {
  return mha::textbook::split_heads(x, H);
}
template <class T>
xt::xtensor<T, 3> merge_heads(const xt::xtensor<T, 3>& x, std::size_t H) {
  return mha::textbook::merge_heads(x, H);
}

// A bool mask (True = masked) as 0 / -inf; a float mask as it is.
template <class T>
xt::xarray<T> canonical_mask(const mha::Mask<T>& m) {
  return mha::textbook::canonical_mask(m);
}

// A caller's (L, N, E), (N, L, E) or (L, E) as (L, N, E); and back.
template <class T>
xt::xtensor<T, 3> seq_first(const xt::xarray<T>& x, bool batch_first) {
  return mha::textbook::to_seq_first_batched(x, batch_first);
}
template <class T>
xt::xarray<T> caller_layout(const xt::xtensor<T, 3>& x, bool batched, bool batch_first) {
  return mha::textbook::caller_layout(x, batched, batch_first);
}

// (N*H, L, S) weights -> attn_output_weights, per head or averaged over heads.
template <class T>
xt::xarray<T> output_weights(const xt::xtensor<T, 3>& w, std::size_t N, std::size_t H, bool average, bool batched) {
  return mha::textbook::output_weights(w.data(), N, H, w.shape(1), w.shape(2), average, batched);
}

// PyTorch's factor of q: sqrt(1 / D).
template <class T>
T attention_scale(std::size_t D) {
  return mha::textbook::attention_scale<T>(D);
}

// The backward of each step, as the library's textbook writes them.
template <class T>
mha::textbook::LinearGradients<T> linear_backward(const xt::xtensor<T, 3>& x, const xt::xtensor<T, 2>& w,
                                                  const xt::xtensor<T, 3>& dy, bool has_bias) {
  return mha::textbook::linear_backward(x, w, dy, has_bias);
}
template <class T>
mha::textbook::WeightedValuesGradients<T> weighted_values_backward(const xt::xtensor<T, 3>& p,
                                                                   const xt::xtensor<T, 3>& v,
                                                                   const xt::xtensor<T, 3>& d_out) {
  return mha::textbook::weighted_values_backward(p, v, d_out);
}
template <class T>
xt::xtensor<T, 3> softmax_backward(const xt::xtensor<T, 3>& p, const xt::xtensor<T, 3>& dp) {
  return mha::textbook::softmax_backward(p, dp);
}
template <class T>
mha::textbook::ScoresGradients<T> scores_backward(const xt::xtensor<T, 3>& q, const xt::xtensor<T, 3>& k,
                                                  const xt::xtensor<T, 3>& ds) {
  return mha::textbook::scores_backward(q, k, ds);
}
template <class T>
xt::xtensor<T, 3> output_weights_backward(const xt::xarray<T>& dw, std::size_t N, std::size_t H, std::size_t L,
                                          std::size_t S, bool average) {
  return mha::textbook::output_weights_backward(dw, N, H, L, S, average);
}

// Golden cases, and comparing with PyTorch's tensors.
using mha::Case;
using mha::CaseInfo;
using mha::Comparison;
template <class T>
Comparison compare(const xt::xarray<T>& got, const xt::xarray<T>& expected, double rtol, double atol) {
  return mha::compare(got, expected, rtol, atol);
}

}  // namespace grader::lib
