// modules/textbook/masks.hpp — what a mask means, and how PyTorch turns two masks into one.
//
// nn.MultiheadAttention takes two optional masks:
//   attn_mask         (L, S) or (N*H, L, S): which keys each query may attend to;
//   key_padding_mask  (N, S): which keys of each batch entry are padding.
// Either may be bool or floating. A bool mask means True = masked (do NOT attend): it
// becomes 0 where False and -inf where True. A floating mask is added to the scores as
// it is. This is the opposite of the bool in scaled_dot_product_attention and ONNX,
// where True means "attend". Mirrors torch/nn/functional.py: _canonical_mask, the
// padding in multi_head_attention_forward, and its mask merge (PyTorch 2.x: additive).
// Step 2 of forward() is here as free functions (prepare_masks), so that a tutorial
// prepares its masks exactly as the module does, and so is step 7's one additive mask
// (MergedMask, made by merged_mask at the keys' final length), which every path takes.
// What turns PyTorch's arguments into it under the generation chosen is one place of the
// API, modules/api/mask_preparation.hpp. This interface says what each function
// takes and gives; the bodies are in masks.cpp, compiled once for float and double.
//
// Legend: L = target length, S = source length, S' = S with bias_k and the zero key,
// N = batch, H = heads, B = N*H.
//
// Included by modules/textbook.cppm, in its module purview: no module line of its own.
// Uses mha.core.

export namespace mha {

// A mask as the user gives it: bool (True = masked) or floating (added to the scores).
// uint8 is what PyTorch 1.13 read as bool (with a warning) and 2.x refuses (generations.hpp).
template <class T>
using Mask = std::variant<xt::xarray<bool>, xt::xarray<T>, xt::xarray<std::uint8_t>>;

}  // namespace mha

export namespace mha::textbook {

template <class T>
std::size_t mask_dimension(const Mask<T>& mask) {
  return std::visit([](const auto& m) { return m.dimension(); }, mask);
}

template <class T>
auto mask_shape(const Mask<T>& mask) {
  return std::visit([](const auto& m) { return xt::svector<std::size_t>(m.shape().begin(), m.shape().end()); }, mask);
}

// A bool mask as an additive float mask: False -> 0, True -> -inf. A float mask is
// returned unchanged. As torch.nn.functional._canonical_mask.
template <class T>
xt::xarray<T> canonical_mask(const Mask<T>& mask);

// The causal mask as a bool mask: True above the diagonal, so query i sees keys 0..i.
// (L, S)
xt::xtensor<bool, 2> causal_mask(std::size_t L, std::size_t S);

// The causal mask of L new positions after `cached` ones (decoding with a KV cache): new
// position i is position cached + i and sees keys 0..cached+i. (L, cached + L)
xt::xtensor<bool, 2> causal_mask_after(std::size_t cached, std::size_t L);

// The causal mask as nn.Transformer.generate_square_subsequent_mask makes it: a float
// mask with -inf above the diagonal and 0 elsewhere. (L, L)
template <class T>
xt::xtensor<T, 2> generate_square_subsequent_mask(std::size_t L);

// One more key position, not masked: F.pad(mask, (0, 1)). Used when bias_k/bias_v or a
// zero attention row is appended to the keys. (..., S) -> (..., S + 1)
template <class T, std::size_t R>
xt::xtensor<T, R> pad_last(const xt::xtensor<T, R>& mask);

// Merges key_padding_mask into attn_mask by addition, as PyTorch 2.x does:
//   attn_mask (1 or N*H, L, S) + key_padding_mask (N, S) viewed as (N*H, 1, S).
// Batch-head b = n*H + h takes row n of key_padding_mask. Returns (1 or N*H, L, S).
template <class T>
std::optional<xt::xtensor<T, 3>> merge_masks(const std::optional<xt::xtensor<T, 3>>& attn_mask,
                                             const std::optional<xt::xtensor<T, 2>>& key_padding_mask,
                                             std::size_t num_heads, std::size_t L);

// The masks of forward() after step 2, before bias_k/bias_v and the zero key pad them.
template <class T>
struct PreparedMasks {
  std::optional<xt::xtensor<T, 3>> attn_mask;         // (1 or B, L, S)
  std::optional<xt::xtensor<T, 2>> key_padding_mask;  // (N, S)
  bool causal_hint = false;                           // is_causal taken at its word: the causal mask replaces attn_mask
  bool safe_softmax = false;  // 2.x's scaled_dot_product_attention: a row no key may attend to gets weight 0

  // One more key that every query may attend to (bias_k, or the zero key): both masks
  // grow by an unmasked column, as F.pad(mask, (0, 1)) in multi_head_attention_forward.
  void pad_for_extra_key();
};

// key_padding_mask as a float (N, S) mask; unbatched (S) becomes (1, S).
template <class T>
std::optional<xt::xtensor<T, 2>> prepare_key_padding_mask(const std::optional<Mask<T>>& m, bool batched, std::size_t N,
                                                          std::size_t S);

// attn_mask as a float (1, L, S) or (B, L, S) mask, with PyTorch's shape checks. A 3-D mask
// has one (L, S) slice per batch-head: B = N*H batched, H unbatched.
template <class T>
std::optional<xt::xtensor<T, 3>> prepare_attn_mask(const std::optional<Mask<T>>& m, bool batched, std::size_t L,
                                                   std::size_t N, std::size_t S, std::size_t num_heads);

// The causal mask of the is_causal hint as an additive (1, L, S) mask.
template <class T>
xt::xtensor<T, 3> causal_attn_mask(std::size_t L, std::size_t S);

// Step 2 of forward(): both masks as float masks, shapes checked. With the is_causal hint
// and neither key_padding_mask nor the weights asked for, PyTorch 2.x drops attn_mask and
// lets the causal mask stand in for it (SDPA's is_causal=True); the hint is then kept.
template <class T>
PreparedMasks<T> prepare_masks(const std::optional<Mask<T>>& attn_mask, const std::optional<Mask<T>>& key_padding_mask,
                               bool is_causal, bool need_weights, bool batched, std::size_t L, std::size_t N,
                               std::size_t S, std::size_t num_heads);

// Step 7's one additive mask, as every path takes it (the reference, the engine's fast,
// flash and training forwards), at the keys' final length S'. It is kept as its two
// broadcast parts, which the engine adds on the fly and never writes out at (B, L, S'):
//   mask(b, i, j) = per_query(b or 0, i, j) + per_key(b / H, j),
// in PyTorch's merge order (attn_mask + key_padding_mask). A mask kind folds into one part:
// attn_mask and the is_causal hint's causal mask into per_query, key_padding_mask into
// per_key (merged_mask below); a new kind adds its additive form to either
// (add_per_query, add_per_key).
template <class T>
struct MergedMask {
  std::optional<xt::xtensor<T, 3>> per_query;  // (1 or B, L, S'): a row of keys per query
  std::optional<xt::xtensor<T, 2>> per_key;    // (N, S'): batch-head b = n*H + h reads row n
  std::size_t H = 1, L = 0, S = 0;             // S = S'
  bool safe_softmax = false;  // 2.x's scaled_dot_product_attention: a row no key may attend to gets weight 0

  // The mask written out, as the reference adds it: (1 or B, L, S'), or none (merge_masks).
  std::optional<xt::xtensor<T, 3>> written_out() const;
  // Whether batch-head b's query row i may attend to no key: every entry of it -inf.
  bool fully_masked(std::size_t b, std::size_t i) const;
  // Whether some (batch-head, query) row is fully masked.
  bool has_fully_masked_row() const;
};

// Step 7 from step 2's masks, at the keys' final length S' = S + extra_keys (S: the keys'
// length, static_k's when given; one extra key for bias_k, one for the zero key). Each extra
// key pads both masks by an unmasked column, as F.pad(mask, (0, 1)) at steps 4 and 6 of
// multi_head_attention_forward; the is_causal hint becomes its (1, L, S') causal mask.
template <class T>
MergedMask<T> merged_mask(PreparedMasks<T> masks, std::size_t num_heads, std::size_t L, std::size_t S,
                          std::size_t extra_keys);

// A mask kind folded into step 7's mask: `additive` (1 or B, L, S') added to per_query,
// which it becomes when there is none. (1, L, S') + (B, L, S') is (B, L, S').
template <class T>
void add_per_query(MergedMask<T>& mask, const xt::xtensor<T, 3>& additive);

// A mask kind folded into step 7's mask: `additive` (N, S') added to per_key, which it
// becomes when there is none.
template <class T>
void add_per_key(MergedMask<T>& mask, const xt::xtensor<T, 2>& additive);

}  // namespace mha::textbook
