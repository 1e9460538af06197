// modules/textbook/masks.cpp — the bodies: bool masks made additive, the causal mask, padding, the merge, step 7's mask.
//
// The definitions of what modules/textbook/masks.hpp declares, in the same order, and their
// explicit instantiations for float and double. As torch/nn/functional.py's
// _canonical_mask, the padding in multi_head_attention_forward and its mask merge.
//
// Legend: L = target length, S = source length, S' = S with bias_k and the zero key,
// N = batch, H = heads, B = N*H.
module;
#include "third_party_xtensor.hpp"

module mha.textbook;

// mha.core once more, as the interface imports it: clang 16 does not give an implementation
// unit what its interface imports (clang 19 does), and these bodies call shape_string.
import mha.core;

namespace mha::textbook {

// A bool mask as an additive float mask: False -> 0, True -> -inf. A float mask is
// returned unchanged. As torch.nn.functional._canonical_mask.
template <class T>
xt::xarray<T> canonical_mask(const Mask<T>& mask) {
  if (const auto* m = std::get_if<xt::xarray<T>>(&mask)) return *m;
  const auto* b = std::get_if<xt::xarray<bool>>(&mask);
  check(b != nullptr, "mask", "only bool and floating types of masks are supported, got uint8");
  return xt::where(*b, -std::numeric_limits<T>::infinity(), T(0));
}

// The causal mask as a bool mask: True above the diagonal, so query i sees keys 0..i.
// (L, S)
xt::xtensor<bool, 2> causal_mask(std::size_t L, std::size_t S) {
  xt::xtensor<bool, 2> mask({L, S});
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t j = 0; j < S; ++j) mask(i, j) = j > i;
  return mask;
}

// The causal mask of L new positions after `cached` ones (decoding with a KV cache): new
// position i is position cached + i and sees keys 0..cached+i. (L, cached + L)
xt::xtensor<bool, 2> causal_mask_after(std::size_t cached, std::size_t L) {
  xt::xtensor<bool, 2> mask({L, cached + L});
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t j = 0; j < cached + L; ++j) mask(i, j) = j > cached + i;
  return mask;
}

// The causal mask as nn.Transformer.generate_square_subsequent_mask makes it: a float
// mask with -inf above the diagonal and 0 elsewhere. (L, L)
template <class T>
xt::xtensor<T, 2> generate_square_subsequent_mask(std::size_t L) {
  return xt::where(causal_mask(L, L), -std::numeric_limits<T>::infinity(), T(0));
}

// One more key position, not masked: F.pad(mask, (0, 1)). Used when bias_k/bias_v or a
// zero attention row is appended to the keys. (..., S) -> (..., S + 1)
template <class T, std::size_t R>
xt::xtensor<T, R> pad_last(const xt::xtensor<T, R>& mask) {
  auto shape = mask.shape();
  shape[R - 1] += 1;
  xt::xtensor<T, R> padded = xt::zeros<T>(shape);
  const std::size_t S = mask.shape(R - 1), rows = S == 0 ? 0 : mask.size() / S;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < S; ++j) padded.data()[r * (S + 1) + j] = mask.data()[r * S + j];
  return padded;
}

// Merges key_padding_mask into attn_mask by addition, as PyTorch 2.x does:
//   attn_mask (1 or N*H, L, S) + key_padding_mask (N, S) viewed as (N*H, 1, S).
// Batch-head b = n*H + h takes row n of key_padding_mask. Returns (1 or N*H, L, S).
template <class T>
std::optional<xt::xtensor<T, 3>> merge_masks(const std::optional<xt::xtensor<T, 3>>& attn_mask,
                                             const std::optional<xt::xtensor<T, 2>>& key_padding_mask,
                                             std::size_t num_heads, std::size_t L) {
  if (!key_padding_mask) return attn_mask;
  const std::size_t N = key_padding_mask->shape(0), S = key_padding_mask->shape(1);
  check(num_heads > 0, "num_heads", "expected a positive number of heads, got {}", num_heads);
  if (attn_mask) {
    const auto& a = *attn_mask;
    check((a.shape(0) == 1 || a.shape(0) == N * num_heads) && a.shape(1) == L && a.shape(2) == S, "attn_mask",
          "expected shape {} or {} to merge with key_padding_mask {}, got {}", shape_string({1, L, S}),
          shape_string({N * num_heads, L, S}), shape_string(key_padding_mask->shape()), shape_string(a.shape()));
  }
  xt::xtensor<T, 3> merged({N * num_heads, L, S});
  for (std::size_t b = 0; b < N * num_heads; ++b) {
    const std::size_t n = b / num_heads;
    const std::size_t a = attn_mask && attn_mask->shape(0) > 1 ? b : 0;
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < S; ++j)
        merged(b, i, j) = (attn_mask ? (*attn_mask)(a, i, j) : T(0)) + (*key_padding_mask)(n, j);
  }
  return merged;
}

// One more key that every query may attend to (bias_k, or the zero key): both masks
// grow by an unmasked column, as F.pad(mask, (0, 1)) in multi_head_attention_forward.
template <class T>
void PreparedMasks<T>::pad_for_extra_key() {
  if (attn_mask) attn_mask = pad_last(*attn_mask);
  if (key_padding_mask) key_padding_mask = pad_last(*key_padding_mask);
}

// key_padding_mask as a float (N, S) mask; unbatched (S) becomes (1, S).
template <class T>
std::optional<xt::xtensor<T, 2>> prepare_key_padding_mask(const std::optional<Mask<T>>& m, bool batched, std::size_t N,
                                                          std::size_t S) {
  if (!m) return std::nullopt;
  xt::xarray<T> mask = canonical_mask(*m);
  if (!batched) mask = xt::view(mask, xt::newaxis(), xt::all());
  check(mask.dimension() == 2 && mask.shape(0) == N && mask.shape(1) == S, "key_padding_mask",
        "expecting key_padding_mask shape of {}, but got {}", shape_string({N, S}), shape_string(mask.shape()));
  return xt::xtensor<T, 2>(mask);
}

// attn_mask as a float (1, L, S) or (B, L, S) mask, with PyTorch's shape checks. A 3-D mask
// has one (L, S) slice per batch-head: B = N*H batched, H unbatched.
template <class T>
std::optional<xt::xtensor<T, 3>> prepare_attn_mask(const std::optional<Mask<T>>& m, bool batched, std::size_t L,
                                                   std::size_t N, std::size_t S, std::size_t num_heads) {
  if (!m) return std::nullopt;
  const xt::xarray<T> mask = canonical_mask(*m);
  if (mask.dimension() == 2) {
    check(mask.shape(0) == L && mask.shape(1) == S, "attn_mask",
          "The shape of the 2D attn_mask is {}, but should be {}.", shape_string(mask.shape()), shape_string({L, S}));
    return xt::xtensor<T, 3>(xt::view(mask, xt::newaxis(), xt::all(), xt::all()));  // (1, L, S)
  }
  const std::size_t B = (batched ? N : 1) * num_heads;
  check(mask.dimension() == 3 && mask.shape(0) == B && mask.shape(1) == L && mask.shape(2) == S, "attn_mask",
        "The shape of the 3D attn_mask is {}, but should be {}.", shape_string(mask.shape()), shape_string({B, L, S}));
  return xt::xtensor<T, 3>(mask);
}

// The causal mask of the is_causal hint as an additive (1, L, S) mask.
template <class T>
xt::xtensor<T, 3> causal_attn_mask(std::size_t L, std::size_t S) {
  return xt::xtensor<T, 3>(
      xt::view(canonical_mask<T>(xt::xarray<bool>(causal_mask(L, S))), xt::newaxis(), xt::all(), xt::all()));
}

// Step 2 of forward(): both masks as float masks, shapes checked. With the is_causal hint
// and neither key_padding_mask nor the weights asked for, PyTorch 2.x drops attn_mask and
// lets the causal mask stand in for it (SDPA's is_causal=True); the hint is then kept.
template <class T>
PreparedMasks<T> prepare_masks(const std::optional<Mask<T>>& attn_mask, const std::optional<Mask<T>>& key_padding_mask,
                               bool is_causal, bool need_weights, bool batched, std::size_t L, std::size_t N,
                               std::size_t S, std::size_t num_heads) {
  PreparedMasks<T> masks;
  masks.key_padding_mask = prepare_key_padding_mask(key_padding_mask, batched, N, S);  // (N, S)
  masks.causal_hint = is_causal && !masks.key_padding_mask && !need_weights;
  if (!masks.causal_hint)
    masks.attn_mask = prepare_attn_mask(attn_mask, batched, L, N, S, num_heads);  // (1 or B, L, S)
  return masks;
}

// The mask written out, as the reference adds it: (1 or B, L, S'), or none (merge_masks).
template <class T>
std::optional<xt::xtensor<T, 3>> MergedMask<T>::written_out() const {
  return merge_masks(per_query, per_key, H, L);
}

// Whether batch-head b's query row i may attend to no key: every entry of it -inf, each
// entry summed as merge_masks sums it.
template <class T>
bool MergedMask<T>::fully_masked(std::size_t b, std::size_t i) const {
  if ((!per_query && !per_key) || S == 0) return false;  // no mask, or no key to point at
  const T* query_row = per_query ? &(*per_query)(per_query->shape(0) == 1 ? 0 : b, i, 0) : nullptr;  // (S')
  const T* key_row = per_key ? &(*per_key)(b / H, 0) : nullptr;                                      // (S')
  for (std::size_t j = 0; j < S; ++j) {
    const T x = (query_row ? query_row[j] : T(0)) + (key_row ? key_row[j] : T(0));
    if (x != -std::numeric_limits<T>::infinity()) return false;
  }
  return true;
}

// Whether some (batch-head, query) row is fully masked: B = N*H rows of queries with
// per_key, else as many as per_query has.
template <class T>
bool MergedMask<T>::has_fully_masked_row() const {
  const std::size_t B = per_key ? per_key->shape(0) * H : per_query ? per_query->shape(0) : 0;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < L; ++i)
      if (fully_masked(b, i)) return true;
  return false;
}

// Step 7 from step 2's masks, at the keys' final length S' = S + extra_keys: one unmasked
// column per extra key (F.pad at steps 4 and 6), the is_causal hint as its causal mask.
template <class T>
MergedMask<T> merged_mask(PreparedMasks<T> masks, std::size_t num_heads, std::size_t L, std::size_t S,
                          std::size_t extra_keys) {
  for (std::size_t k = 0; k < extra_keys; ++k) masks.pad_for_extra_key();  // (..., S) -> (..., S')
  MergedMask<T> mask;
  mask.H = num_heads, mask.L = L, mask.S = S + extra_keys, mask.safe_softmax = masks.safe_softmax;
  if (masks.causal_hint) mask.per_query = causal_attn_mask<T>(L, mask.S);  // (1, L, S')
  else mask.per_query = std::move(masks.attn_mask);                        // (1 or B, L, S')
  mask.per_key = std::move(masks.key_padding_mask);                        // (N, S')
  return mask;
}

// The batch-heads B = N*H that the parts already there fix: per_query's slices when it has
// more than one, else per_key's N rows times H; 0 when neither fixes them.
namespace {
template <class T>
std::size_t batch_heads(const MergedMask<T>& mask) {
  if (mask.per_query && mask.per_query->shape(0) > 1) return mask.per_query->shape(0);
  if (mask.per_key) return mask.per_key->shape(0) * mask.H;
  return 0;
}
}  // namespace

// A mask kind folded into per_query: (1 or B, L, S') added to it, broadcast over the first axis.
template <class T>
void add_per_query(MergedMask<T>& mask, const xt::xtensor<T, 3>& additive) {
  const std::size_t B = batch_heads(mask);
  check(additive.shape(1) == mask.L && additive.shape(2) == mask.S &&
            (additive.shape(0) == 1 || B == 0 || additive.shape(0) == B),
        "mask", "expected a per-query mask of shape (1 or {}, {}, {}), got {}", B == 0 ? "B" : std::to_string(B),
        mask.L, mask.S, shape_string(additive.shape()));
  if (!mask.per_query) mask.per_query = additive;
  else mask.per_query = xt::xtensor<T, 3>(*mask.per_query + additive);  // (1 or B, L, S')
}

// A mask kind folded into per_key: (N, S') added to it.
template <class T>
void add_per_key(MergedMask<T>& mask, const xt::xtensor<T, 2>& additive) {
  const std::size_t B = batch_heads(mask);
  check(additive.shape(1) == mask.S && (B == 0 || additive.shape(0) * mask.H == B), "mask",
        "expected a per-key mask of shape (N, {}) with N * H = {}, got {} (H = {})", mask.S,
        B == 0 ? "B" : std::to_string(B), shape_string(additive.shape()), mask.H);
  if (!mask.per_key) mask.per_key = additive;
  else mask.per_key = xt::xtensor<T, 2>(*mask.per_key + additive);  // (N, S')
}

// Compiled here once for each dtype the library has; no other unit sees the bodies above.
// T is a type: it cannot be parenthesised, as bugprone-macro-parentheses asks.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define MHA_INSTANTIATE_MASKS(T)                                                                                       \
  template xt::xarray<T> canonical_mask(const Mask<T>&);                                                               \
  template xt::xtensor<T, 2> generate_square_subsequent_mask(std::size_t);                                             \
  template xt::xtensor<T, 2> pad_last(const xt::xtensor<T, 2>&);                                                       \
  template xt::xtensor<T, 3> pad_last(const xt::xtensor<T, 3>&);                                                       \
  template std::optional<xt::xtensor<T, 3>> merge_masks(                                                               \
      const std::optional<xt::xtensor<T, 3>>&, const std::optional<xt::xtensor<T, 2>>&, std::size_t, std::size_t);     \
  template struct PreparedMasks<T>;                                                                                    \
  template std::optional<xt::xtensor<T, 2>> prepare_key_padding_mask(const std::optional<Mask<T>>&, bool, std::size_t, \
                                                                     std::size_t);                                     \
  template std::optional<xt::xtensor<T, 3>> prepare_attn_mask(const std::optional<Mask<T>>&, bool, std::size_t,        \
                                                              std::size_t, std::size_t, std::size_t);                  \
  template xt::xtensor<T, 3> causal_attn_mask(std::size_t, std::size_t);                                               \
  template PreparedMasks<T> prepare_masks(const std::optional<Mask<T>>&, const std::optional<Mask<T>>&, bool, bool,    \
                                          bool, std::size_t, std::size_t, std::size_t, std::size_t);                   \
  template struct MergedMask<T>;                                                                                       \
  template MergedMask<T> merged_mask(PreparedMasks<T>, std::size_t, std::size_t, std::size_t, std::size_t);            \
  template void add_per_query(MergedMask<T>&, const xt::xtensor<T, 3>&);                                               \
  template void add_per_key(MergedMask<T>&, const xt::xtensor<T, 2>&);
MHA_INSTANTIATE_MASKS(float)
MHA_INSTANTIATE_MASKS(double)
#undef MHA_INSTANTIATE_MASKS
// NOLINTEND(bugprone-macro-parentheses)

}  // namespace mha::textbook
