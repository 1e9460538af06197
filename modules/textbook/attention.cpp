// modules/textbook/attention.cpp — the loops: scaled dot-product attention over heads, step by step.
//
// The bodies of the functions that modules/textbook/attention.hpp declares, in the same order,
// and their explicit instantiations for float and double. As the need_weights branch of
// multi_head_attention_forward in torch/nn/functional.py (bmm/baddbmm, softmax, dropout,
// bmm): one plain loop nest per step.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads,
// D = head_dim, B = N*H.
module;
#include "third_party_xtensor.hpp"

module mha.textbook;

// mha.core once more, as the interface imports it: clang 16 does not give an implementation
// unit what its interface imports (clang 19 does), and these bodies call shape_string.
import mha.core;

namespace mha::textbook {

// (L, N, E) -> (N*H, L, D): x.view(L, N*H, D).transpose(0, 1) in PyTorch.
template <class T>
xt::xtensor<T, 3> split_heads(const xt::xtensor<T, 3>& x, std::size_t num_heads) {
  check(num_heads > 0 && x.shape(2) % num_heads == 0, "num_heads",
        "expected a number of heads that divides embed_dim = {}, got {}", x.shape(2), num_heads);
  const std::size_t L = x.shape(0), N = x.shape(1), E = x.shape(2), D = E / num_heads;
  xt::xtensor<T, 3> heads({N * num_heads, L, D});
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t h = 0; h < num_heads; ++h)
        for (std::size_t d = 0; d < D; ++d) heads(n * num_heads + h, i, d) = x(i, n, h * D + d);
  return heads;
}

// (N*H, L, D) -> (L, N, E): the heads side by side again, x.transpose(0, 1).view(L, N, E).
// The inverse of split_heads, given the same num_heads (an empty batch has N*H = 0).
template <class T>
xt::xtensor<T, 3> merge_heads(const xt::xtensor<T, 3>& heads, std::size_t num_heads) {
  const std::size_t B = heads.shape(0), L = heads.shape(1), D = heads.shape(2);
  check(num_heads > 0 && B % num_heads == 0, "num_heads",
        "expected a number of heads that divides the {} batch-heads, got {}", B, num_heads);
  const std::size_t H = num_heads, batch = B / H;
  xt::xtensor<T, 3> x({L, batch, H * D});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t d = 0; d < D; ++d) x(i, b / H, (b % H) * D + d) = heads(b, i, d);
  return x;
}

// One more key, all zeros, for every batch-head: add_zero_attn. (B, S, D) -> (B, S+1, D)
template <class T>
xt::xtensor<T, 3> append_zero_row(const xt::xtensor<T, 3>& x) {
  xt::xtensor<T, 3> out = xt::zeros<T>({x.shape(0), x.shape(1) + 1, x.shape(2)});
  xt::view(out, xt::all(), xt::range(0, x.shape(1)), xt::all()) = x;
  return out;
}

// Softmax along the last dimension, in place, subtracting the row maximum first so that
// exp() cannot overflow. A row that is all -inf gives NaN, exactly as torch.softmax does:
// max = -inf, and -inf - (-inf) is NaN.
template <class T>
void softmax_last_dim(xt::xtensor<T, 3>& scores) {
  const std::size_t S = scores.shape(2), rows = S == 0 ? 0 : scores.size() / S;
  for (std::size_t r = 0; r < rows; ++r) {
    T* row = scores.data() + r * S;
    T max = -std::numeric_limits<T>::infinity();
    for (std::size_t j = 0; j < S; ++j) max = std::fmax(max, row[j]);
    T sum = 0;
    for (std::size_t j = 0; j < S; ++j) sum += (row[j] = std::exp(row[j] - max));
    for (std::size_t j = 0; j < S; ++j) row[j] /= sum;
  }
}

// Which weights dropout keeps, drawn as dropout() draws them: entry by entry in memory
// order, each dropped with probability p. True = kept. (B, L, S)
xt::xtensor<bool, 3> draw_dropout_mask(std::array<std::size_t, 3> shape, double p, Generator& generator) {
  check(p >= 0.0 && p <= 1.0, "dropout", "dropout probability has to be between 0 and 1, but got {}", p);
  xt::xtensor<bool, 3> keep(shape);
  for (auto& k : keep) k = !generator.bernoulli(p);
  return keep;
}

// Dropout with a given mask (True = kept), over a whole (B, L, S) tensor, after a check of
// the mask's shape.
template <class T>
void apply_dropout_mask(xt::xtensor<T, 3>& weights, double p, const xt::xtensor<bool, 3>& keep) {
  check(keep.shape() == weights.shape(), "dropout_mask", "expected shape {}, got {}", shape_string(weights.shape()),
        shape_string(keep.shape()));
  const T scale = dropout_scale<T>(p);
  T* w = weights.data();
  const bool* kept = keep.data();
  // Multiplied by 0, not set to 0, as PyTorch's dropout does: a dropped NaN stays NaN.
  for (std::size_t i = 0; i < weights.size(); ++i) w[i] *= kept[i] ? scale : T(0);
}

// Dropout on the attention weights: each weight is zeroed with probability p and the
// survivors are multiplied by dropout_scale(p).
template <class T>
void dropout(xt::xtensor<T, 3>& weights, double p, Generator& generator) {
  check(p >= 0.0 && p <= 1.0, "dropout", "dropout probability has to be between 0 and 1, but got {}", p);
  if (p == 0.0) return;
  apply_dropout_mask(weights, p, draw_dropout_mask(weights.shape(), p, generator));
}

// softmax(q / sqrt(D) . k^T + mask) . v for every batch-head b.
// q (B, L, D), k (B, S, D), v (B, S, D), mask (1 or B, L, S), additive -> Attention
// dropout_mask (B, L, S), True = kept, replays a dropout drawn before (see
// draw_dropout_mask); without one, no dropout. dropout_p gives the scale of the kept weights.
template <class T>
Attention<T> scaled_dot_product_attention(const xt::xtensor<T, 3>& q, const xt::xtensor<T, 3>& k,
                                          const xt::xtensor<T, 3>& v, const std::optional<xt::xtensor<T, 3>>& mask,
                                          double dropout_p, const std::optional<xt::xtensor<bool, 3>>& dropout_mask) {
  const std::size_t B = q.shape(0), L = q.shape(1), D = q.shape(2), S = k.shape(1);
  check(k.shape(0) == B && k.shape(2) == D, "key", "expected shape {}, got {}", shape_string({B, S, D}),
        shape_string(k.shape()));
  check(v.shape(0) == B && v.shape(1) == S, "value", "expected batch-heads and length {}, got {}", shape_string({B, S}),
        shape_string(v.shape()));
  check(!mask || ((mask->shape(0) == 1 || mask->shape(0) == B) && mask->shape(1) == L && mask->shape(2) == S),
        "attn_mask", "expected shape {} or {}, got {}", shape_string({1, L, S}), shape_string({B, L, S}),
        shape_string(mask ? mask->shape() : q.shape()));
  const std::size_t Dv = v.shape(2);

  // 1) scale q, as PyTorch 2.x does (q * sqrt(1/D)), before the matmul rather than after.
  const T scale = attention_scale<T>(D);
  xt::xtensor<T, 3> q_scaled({B, L, D});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t d = 0; d < D; ++d) q_scaled(b, i, d) = q(b, i, d) * scale;

  // 2) scores = mask + q_scaled . k^T, torch.baddbmm: (B, L, D) x (B, D, S) -> (B, L, S)
  xt::xtensor<T, 3> weights({B, L, S});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < S; ++j) {
        T dot = 0;
        for (std::size_t d = 0; d < D; ++d) dot += q_scaled(b, i, d) * k(b, j, d);
        weights(b, i, j) = mask ? (*mask)(mask->shape(0) == 1 ? 0 : b, i, j) + dot : dot;
      }

  // 3) softmax over the keys, 4) dropout (training only), with the mask given
  softmax_last_dim(weights);
  xt::xtensor<T, 3> probabilities = weights;
  if (dropout_mask) apply_dropout_mask(weights, dropout_p, *dropout_mask);

  // 5) output = weights . v: (B, L, S) x (B, S, Dv) -> (B, L, Dv)
  xt::xtensor<T, 3> output({B, L, Dv});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t d = 0; d < Dv; ++d) {
        T sum = 0;
        for (std::size_t j = 0; j < S; ++j) sum += weights(b, i, j) * v(b, j, d);
        output(b, i, d) = sum;
      }
  return {std::move(output), std::move(weights), std::move(probabilities)};
}

// The same, dropout drawn from `generator` with probability dropout_p (none when 0).
template <class T>
Attention<T> scaled_dot_product_attention(const xt::xtensor<T, 3>& q, const xt::xtensor<T, 3>& k,
                                          const xt::xtensor<T, 3>& v, const std::optional<xt::xtensor<T, 3>>& mask,
                                          double dropout_p, Generator& generator) {
  check(dropout_p >= 0.0 && dropout_p <= 1.0, "dropout", "dropout probability has to be between 0 and 1, but got {}",
        dropout_p);
  std::optional<xt::xtensor<bool, 3>> keep;
  if (dropout_p > 0.0) keep = draw_dropout_mask({q.shape(0), q.shape(1), k.shape(1)}, dropout_p, generator);
  return scaled_dot_product_attention(q, k, v, mask, dropout_p, keep);
}

// Compiled here once for each dtype the library has; no other unit sees the loops above.
// T is a type: it cannot be parenthesised, as bugprone-macro-parentheses asks.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define MHA_INSTANTIATE_ATTENTION(T)                                                                     \
  template xt::xtensor<T, 3> split_heads(const xt::xtensor<T, 3>&, std::size_t);                         \
  template xt::xtensor<T, 3> merge_heads(const xt::xtensor<T, 3>&, std::size_t);                         \
  template xt::xtensor<T, 3> append_zero_row(const xt::xtensor<T, 3>&);                                  \
  template void softmax_last_dim(xt::xtensor<T, 3>&);                                                    \
  template void apply_dropout_mask(xt::xtensor<T, 3>&, double, const xt::xtensor<bool, 3>&);             \
  template void dropout(xt::xtensor<T, 3>&, double, Generator&);                                         \
  template Attention<T> scaled_dot_product_attention(                                                    \
      const xt::xtensor<T, 3>&, const xt::xtensor<T, 3>&, const xt::xtensor<T, 3>&,                      \
      const std::optional<xt::xtensor<T, 3>>&, double, const std::optional<xt::xtensor<bool, 3>>&);      \
  template Attention<T> scaled_dot_product_attention(const xt::xtensor<T, 3>&, const xt::xtensor<T, 3>&, \
                                                     const xt::xtensor<T, 3>&,                           \
                                                     const std::optional<xt::xtensor<T, 3>>&, double, Generator&);
MHA_INSTANTIATE_ATTENTION(float)
MHA_INSTANTIATE_ATTENTION(double)
#undef MHA_INSTANTIATE_ATTENTION
// NOLINTEND(bugprone-macro-parentheses)

}  // namespace mha::textbook
