// modules/textbook/attention.hpp — scaled dot-product attention over heads, in PyTorch's exact order.
//
// For each batch-head b:  weights = softmax(q_b / sqrt(D) . k_b^T + mask_b),
//                         output  = dropout(weights) . v_b
// as the need_weights branch of multi_head_attention_forward in torch/nn/functional.py
// (bmm/baddbmm, softmax, dropout, bmm). Heads are made by splitting E into H blocks of
// D = E / H columns: batch-head b = n*H + h holds columns [h*D, (h+1)*D) of batch n.
// This file knows nothing of projections or parameters (see api/multihead_attention.hpp).
//
// This is the readable reference: one plain loop nest per step. The fast paths
// (engine/fast_attention.hpp, engine/flash_attention.hpp) compute the same with GEMMs, and the tests hold
// them to it. This interface says what each step takes and gives; the loops themselves
// are in attention.cpp, compiled once for float and double, so that editing one
// recompiles one file and relinks (docs/building.md).
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads,
// D = head_dim, B = N*H.
//
// Included by modules/textbook.cppm, in its module purview: no module line of its own.
// Uses mha.core, random.hpp.

export namespace mha::textbook {

// (L, N, E) -> (N*H, L, D): x.view(L, N*H, D).transpose(0, 1) in PyTorch.
template <class T>
xt::xtensor<T, 3> split_heads(const xt::xtensor<T, 3>& x, std::size_t num_heads);

// (N*H, L, D) -> (L, N, E): the heads side by side again, x.transpose(0, 1).view(L, N, E).
// The inverse of split_heads, given the same num_heads (an empty batch has N*H = 0).
template <class T>
xt::xtensor<T, 3> merge_heads(const xt::xtensor<T, 3>& heads, std::size_t num_heads);

// One more key, all zeros, for every batch-head: add_zero_attn. (B, S, D) -> (B, S+1, D)
template <class T>
xt::xtensor<T, 3> append_zero_row(const xt::xtensor<T, 3>& x);

// Softmax along the last dimension, in place, subtracting the row maximum first so that
// exp() cannot overflow. A row that is all -inf gives NaN, exactly as torch.softmax does.
template <class T>
void softmax_last_dim(xt::xtensor<T, 3>& scores);

// What dropout multiplies a kept weight by: 1 / (1 - p), so that the expected value is
// unchanged; with p = 1 nothing is kept and the scale is 0 (not 1 / 0).
template <class T>
T dropout_scale(double p) {
  return p == 1.0 ? T(0) : T(1.0 / (1.0 - p));
}

// Which weights dropout keeps, drawn as dropout() draws them: entry by entry in memory
// order, each dropped with probability p. True = kept. (B, L, S)
xt::xtensor<bool, 3> draw_dropout_mask(std::array<std::size_t, 3> shape, double p, Generator& generator);

// Dropout with a given mask (True = kept): kept weights are multiplied by
// dropout_scale(p), dropped ones by 0, as PyTorch's x * (mask / (1 - p)). A mask drawn
// once and applied again replays the same dropout: what a backward pass needs. (B, L, S)
template <class T>
void apply_dropout_mask(xt::xtensor<T, 3>& weights, double p, const xt::xtensor<bool, 3>& keep);

// Dropout on the attention weights: each weight is zeroed with probability p and the
// survivors are multiplied by dropout_scale(p).
template <class T>
void dropout(xt::xtensor<T, 3>& weights, double p, Generator& generator);

// What q is multiplied by before q . k^T: sqrt(1/D), as PyTorch 2.x writes it
// (q * math.sqrt(1.0 / float(D))). Multiplying by sqrt(1/D) and dividing by sqrt(D)
// differ in the last bit, so every path scales by this one number.
template <class T>
T attention_scale(std::size_t D) {
  return static_cast<T>(std::sqrt(1.0 / static_cast<double>(D)));
}

template <class T>
struct Attention {
  xt::xtensor<T, 3> output;         // (B, L, D)
  xt::xtensor<T, 3> weights;        // (B, L, S), after dropout: what forward returns
  xt::xtensor<T, 3> probabilities;  // (B, L, S), the softmax before dropout: what backward needs
};

// softmax(q / sqrt(D) . k^T + mask) . v for every batch-head b.
// q (B, L, D), k (B, S, D), v (B, S, D), mask (1 or B, L, S), additive -> Attention
// dropout_mask (B, L, S), True = kept, replays a dropout drawn before (see
// draw_dropout_mask); without one, no dropout. dropout_p gives the scale of the kept weights.
template <class T>
Attention<T> scaled_dot_product_attention(const xt::xtensor<T, 3>& q, const xt::xtensor<T, 3>& k,
                                          const xt::xtensor<T, 3>& v, const std::optional<xt::xtensor<T, 3>>& mask,
                                          double dropout_p, const std::optional<xt::xtensor<bool, 3>>& dropout_mask);

// The same, dropout drawn from `generator` with probability dropout_p (none when 0).
template <class T>
Attention<T> scaled_dot_product_attention(const xt::xtensor<T, 3>& q, const xt::xtensor<T, 3>& k,
                                          const xt::xtensor<T, 3>& v, const std::optional<xt::xtensor<T, 3>>& mask,
                                          double dropout_p, Generator& generator);

}  // namespace mha::textbook
