// modules/textbook/generations.hpp — what PyTorch 1.13 and PyTorch 2.x each do with the same call.
//
// Which code of PyTorch computes a forward (PyTorchPath; modules/api/pytorch_paths.hpp
// decides it as MultiheadAttention.forward does), and what each generation does with the
// masks before step 3 (torch/nn/functional.py, multi_head_attention_forward and
// _canonical_mask). The differences of docs/15-versions.md that are not numbers:
//   masks      uint8 attn_mask: 1.13 reads it as bool and warns, 2.x refuses it;
//              a bool and a float mask: 2.x warns and adds them as float masks, 1.13
//              merges by logical_or (a nonzero float masks) or, into a float attn_mask,
//              merges nothing;
//   is_causal  2.x: a hint that attn_mask is causal, taken at its word on the SDPA branch
//              without key_padding_mask, refused without attn_mask, ignored on the fast
//              path; 1.13 has no such argument: the mask is applied as given;
//   paths      2.x with need_weights=false runs scaled_dot_product_attention, whose softmax
//              gives a fully masked row weight 0 (MergedMask::safe_softmax); the
//              native fast path (grad disabled, ...) keeps NaN there, and 1.13's makes a
//              float key_padding_mask bool, with a warning.
// The masks come out as prepare_masks (masks.hpp) takes them: the generation's reading
// expressed as 2.x's additive merge, so that every path computes it unchanged. The API's
// one place for the masks, modules/api/mask_preparation.hpp, calls masks_as.
//
// Legend: L = target length, S = source length, N = batch, H = heads, B = N*H.
//
// Included by modules/textbook.cppm, in its module purview: no module line of its own.
// Uses mha.core, versions.hpp, masks.hpp, attention.hpp.

export namespace mha {

// Which code of PyTorch computes a forward:
//   weights    multi_head_attention_forward computing the (L, S) weights (1.13 always; 2.x
//              with need_weights=true);
//   sdpa       2.x's branch without weights: scaled_dot_product_attention;
//   fast_path  torch._native_multi_head_attention, MultiheadAttention.forward's fast path.
// The library computes each with any AttentionPath: this is what it computes, not how.
enum class PyTorchPath { weights, sdpa, fast_path };

}  // namespace mha

namespace mha::detail {

template <class T>
bool is_uint8_mask(const std::optional<Mask<T>>& m) {
  return m && std::holds_alternative<xt::xarray<std::uint8_t>>(*m);
}

// A mask read as bool: nonzero = masked, as PyTorch's .to(torch.bool).
template <class T>
Mask<T> nonzero_as_bool(const Mask<T>& m) {
  return std::visit([](const auto& x) { return Mask<T>(xt::xarray<bool>(xt::not_equal(x, 0))); }, m);
}

}  // namespace mha::detail

// What the API calls (api/pytorch_paths.hpp, api/mask_preparation.hpp), exported to it: the
// API is outside mha.textbook, and sees only what it exports.
export namespace mha::detail {

template <class T>
bool is_float_mask(const std::optional<Mask<T>>& m) {
  return m && std::holds_alternative<xt::xarray<T>>(*m);
}

// The masks as one generation reads them, ready for 2.x's preparation (prepare_masks),
// and the is_causal hint to take at its word there (never under 1.13 nor on the fast path).
template <class T>
struct GenerationMasks {
  std::optional<Mask<T>> attn_mask, key_padding_mask;
  bool is_causal = false;
};

// What the generation does with the masks before step 3: the checks and warnings of its
// dtypes and of is_causal, and its merge written as 2.x's addition. Warnings are appended.
template <class T>
GenerationMasks<T> masks_as(PyTorchVersion version, PyTorchPath path, std::optional<Mask<T>> attn_mask,
                            std::optional<Mask<T>> key_padding_mask, bool is_causal, std::vector<Warning>& warnings) {
  const bool v2 = version == PyTorchVersion::v2;
  // 1) the dtypes: bool and floating only (_canonical_mask, and 1.13's module); 1.13 read
  //    a uint8 attn_mask as bool, with a warning
  check(!is_uint8_mask(key_padding_mask), "key_padding_mask",
        "only bool and floating types of key_padding_mask are supported, got uint8");
  if (v2 && attn_mask && key_padding_mask && attn_mask->index() != key_padding_mask->index())
    warnings.push_back({"key_padding_mask",
                        "Support for mismatched key_padding_mask and attn_mask is deprecated. Use same type for both "
                        "instead."});
  if (attn_mask && std::holds_alternative<xt::xarray<std::uint8_t>>(*attn_mask)) {
    check(!v2, "attn_mask",
          "only bool and floating types of attn_mask are supported, got uint8 (PyTorch 2.x; 1.13 read it as bool)");
    warnings.push_back(
        {"attn_mask", "Byte tensor for attn_mask in nn.MultiheadAttention is deprecated. Use bool tensor instead."});
    attn_mask = nonzero_as_bool(*attn_mask);
  }
  // 2) is_causal: 2.x needs the mask it describes (but its fast path never reads the
  //    hint); 1.13 has no such argument, and applies the mask as given
  if (is_causal && (!v2 || path != PyTorchPath::fast_path))
    check(attn_mask.has_value(), "is_causal", "{}",
          v2 ? "Need attn_mask if specifying the is_causal hint. You may use the Transformer module method "
               "`generate_square_subsequent_mask` to create this mask."
             : "PyTorch 1.13 has no is_causal argument: expected the causal mask as attn_mask, got none");
  // 3) 1.13's merge, as an addition: a float key_padding_mask is made bool on the fast
  //    path (with a warning) and by logical_or with a bool attn_mask, and masked_fill with
  //    a float mask into a float attn_mask fills nothing
  if (!v2 && key_padding_mask && std::holds_alternative<xt::xarray<T>>(*key_padding_mask)) {
    if (path == PyTorchPath::fast_path) {
      warnings.push_back({"key_padding_mask",
                          "Converting mask without torch.bool dtype to bool; this will negatively affect performance. "
                          "Prefer to use a boolean mask directly."});
      key_padding_mask = nonzero_as_bool(*key_padding_mask);
    } else if (attn_mask && !is_float_mask(attn_mask)) {
      key_padding_mask = nonzero_as_bool(*key_padding_mask);
    } else if (attn_mask) {
      key_padding_mask.reset();
    }
  }
  return {std::move(attn_mask), std::move(key_padding_mask), v2 && is_causal && path != PyTorchPath::fast_path};
}

// 2.x's scaled_dot_product_attention on the CPU (its "safe softmax", PyTorch 2.5 on): a
// query row whose every score is -inf gets weight 0, not NaN, so its output is 0.
// attention (B, L, ...), the mask step 7 added (MergedMask::fully_masked says which rows).
template <class T>
void zero_fully_masked_rows(textbook::Attention<T>& attention, const textbook::MergedMask<T>& mask) {
  const std::size_t B = attention.output.shape(0), L = attention.output.shape(1);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < L; ++i) {
      if (!mask.fully_masked(b, i)) continue;
      xt::view(attention.output, b, i, xt::all()) = T(0);
      xt::view(attention.weights, b, i, xt::all()) = T(0);
      xt::view(attention.probabilities, b, i, xt::all()) = T(0);
    }
}

}  // namespace mha::detail
