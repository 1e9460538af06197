// modules/api/mask_preparation.hpp — the one place that turns PyTorch's mask arguments into
// step 7's one additive mask, under the generation chosen.
//
// Every path (the reference, the engine's fast and flash kernels, the training forward)
// takes the same mask, textbook::MergedMask (textbook/masks.hpp): its per-query part
// (attn_mask, or the causal mask of the is_causal hint) and its per-key part
// (key_padding_mask), at the keys' final length S'. This file makes it for each caller of
// attention_steps (attention_paths.hpp), from PyTorch's arguments:
//   module_mask      MultiheadAttention.forward's masks (ForwardOptions), on the path
//                    PyTorch takes (pytorch_paths.hpp's module_path);
//   functional_mask  F.multi_head_attention_forward's, checked against the key's length
//                    and static_k's;
//   cache_step_mask  a KV cache step's: the new positions causal among themselves.
// What each calls lives where it is taught: what a mask means, step 2 (prepare_masks) and
// step 7 (merged_mask) in textbook/masks.hpp; the generation's reading of the dtypes and of
// is_causal (masks_as) in textbook/generations.hpp; the arguments in textbook/options.hpp
// (ForwardOptions) and functional.hpp (FunctionalArguments). The engine never sees a mask
// kind, only the mask's two parts; tests/mask_homes_test.py keeps the kinds' names to these
// files. The engine's decoding step (engine/decode_step.hpp) takes no mask at all: a KV
// cache step's mask is the causal bound, which decodes_fast (attention_paths.hpp) lets it
// apply as a bound; a cache step has no other mask (KVCache::step takes none).
// docs/building.md, "Adding a mask kind", says what a new kind touches: the textbook's
// masks, its argument, this file, and tests.
//
// Legend: L = target length, S = source length (static_k's when given), S' = S with bias_k
// and the zero key, N = batch, H = heads, B = N*H.
//
// Included by modules/api.cppm, in its module purview: no module line of its own.
// Uses mha.core, textbook/options.hpp, textbook/inputs.hpp, textbook/masks.hpp, textbook/generations.hpp,
// engine/attention_problem.hpp, functional.hpp.

namespace mha::detail {

// Step 7 from step 2: the masks padded for bias_k and the zero key, the hint made causal,
// at S' (textbook::merged_mask). S_keys: the keys' length, static_k's when given.
template <class T>
textbook::MergedMask<T> mask_at_final_length(textbook::PreparedMasks<T> masks, const Options& o, std::size_t L,
                                             std::size_t S_keys) {
  const std::size_t extra_keys = std::size_t{o.add_bias_kv} + std::size_t{o.add_zero_attn};
  return textbook::merged_mask(std::move(masks), Sizes(o).H, L, S_keys, extra_keys);
}

// Step 2 of a module's forward as the generation computes it on `path`: the masks as
// float masks, shapes checked, the is_causal hint, and SDPA's softmax on its branch.
template <class T>
textbook::PreparedMasks<T> prepare_masks_as(const Options& o, PyTorchPath path, const ForwardOptions<T>& opts,
                                            const Geometry& g, std::vector<Warning>& warnings) {
  check(o.pytorch == PyTorchVersion::v2 || path != PyTorchPath::fast_path || o.bias, "bias",
        "_native_multi_head_attention(): argument 'qkv_bias' (position 7) must be Tensor, not NoneType (PyTorch "
        "1.13's fast path needs in_proj_bias: bias=True)");
  auto m = masks_as(o.pytorch, path, opts.attn_mask, opts.key_padding_mask, opts.is_causal, warnings);
  textbook::PreparedMasks<T> masks = textbook::prepare_masks(m.attn_mask, m.key_padding_mask, m.is_causal,
                                                             opts.need_weights, g.batched, g.L, g.N, g.S, Sizes(o).H);
  masks.safe_softmax = path == PyTorchPath::sdpa;
  return masks;
}

// A module's forward: step 2 under the generation, then step 7's mask at S'.
template <class T>
textbook::MergedMask<T> module_mask(const Options& o, PyTorchPath path, const ForwardOptions<T>& opts,
                                    const Geometry& g, std::vector<Warning>& warnings) {
  return mask_at_final_length(prepare_masks_as(o, path, opts, g, warnings), o, g.L, g.S);
}

// Step 2 of the functional form: attn_mask is checked against the key's length S, as
// PyTorch checks it, then added to scores of static_k's length: broadcast from one column,
// or refused as torch.baddbmm refuses it. key_padding_mask has static_k's length.
// `read` holds the masks as the generation reads them (masks_as), and its is_causal hint.
template <class T>
textbook::PreparedMasks<T> functional_masks(const FunctionalArguments<T>& a, const GenerationMasks<T>& read,
                                            const Geometry& g, const StaticKV<T>& st, std::size_t H) {
  textbook::PreparedMasks<T> masks;
  const std::optional<Mask<T>>&attn = read.attn_mask, &padding = read.key_padding_mask;
  const bool causal_hint = read.is_causal, need_weights = a.need_weights;
  masks.attn_mask = textbook::prepare_attn_mask(attn, g.batched, g.L, g.N, g.S, H);  // (1 or B, L, S)
  if (causal_hint && !padding && !need_weights) {  // 2.x: the causal mask of the hint stands in for attn_mask
    masks.causal_hint = true;
    masks.attn_mask.reset();
    return masks;
  }
  if (st.k && masks.attn_mask && g.S != st.k.S) {
    const std::size_t zero = a.add_zero_attn ? 1 : 0;
    check(g.S == 1 && !a.add_zero_attn, "attn_mask",
          "The size of tensor a ({}) must match the size of tensor b ({}) at non-singleton dimension 2 (attn_mask has "
          "the key's length {}, static_k has {})",
          g.S + zero, st.k.S + zero, g.S, st.k.S);
    masks.attn_mask = xt::xtensor<T, 3>(xt::broadcast(*masks.attn_mask, {masks.attn_mask->shape(0), g.L, st.k.S}));
  }
  masks.key_padding_mask = textbook::prepare_key_padding_mask(padding, g.batched, g.N, st.k ? st.k.S : g.S);  // (N, S)
  return masks;
}

// The functional form: the masks as the generation reads them on `path` (which has no fast
// path), step 2 against the key's length and static_k's, then step 7's mask at S'. `opts`
// holds the arguments' masks as a module's forward takes them.
template <class T>
textbook::MergedMask<T> functional_mask(const FunctionalArguments<T>& a, const ForwardOptions<T>& opts,
                                        const Options& o, PyTorchPath path, const Geometry& g, const StaticKV<T>& st,
                                        std::vector<Warning>& warnings) {
  const GenerationMasks<T> read =
      masks_as(a.pytorch, path, opts.attn_mask, opts.key_padding_mask, a.is_causal, warnings);
  textbook::PreparedMasks<T> masks = functional_masks(a, read, g, st, Sizes(o).H);
  masks.safe_softmax = path == PyTorchPath::sdpa;
  return mask_at_final_length(std::move(masks), o, g.L, st.k ? st.k.S : g.S);
}

// A KV cache step that is not the engine's decode_step: new position i (at t0 + i) sees
// the cache up to itself, key j masked when j > t0 + i, (1, L_new, t0 + L_new). One new
// position sees every key: no mask. A cache has no bias_k and no zero key: S' = t0 + L_new.
template <class T>
textbook::MergedMask<T> cache_step_mask(const Options& o, std::size_t t0, std::size_t L_new) {
  textbook::PreparedMasks<T> masks;
  if (L_new > 1) {
    const xt::xarray<T> causal =
        textbook::canonical_mask<T>(xt::xarray<bool>(textbook::causal_mask_after(t0, L_new)));   // (L_new, t)
    masks.attn_mask = xt::xtensor<T, 3>(xt::view(causal, xt::newaxis(), xt::all(), xt::all()));  // (1, L_new, t)
  }
  return mask_at_final_length(std::move(masks), o, L_new, t0 + L_new);
}

}  // namespace mha::detail
