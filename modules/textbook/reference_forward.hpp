// modules/textbook/reference_forward.hpp — PyTorch's multi_head_attention_forward, one step at a time.
//
// torch/nn/functional.py (multi_head_attention_forward), in its order, every intermediate
// a tensor a reader can print: the steps are numbered as in MultiheadAttention::forward,
// and each calls the file that teaches it. This is AttentionPath::reference, the
// tutorials' path; the fast paths (mha:engine) compute the same and the tests hold them to it.
// The steps themselves are in reference_forward.cpp, compiled once for float and double:
// editing a step recompiles that one file and relinks (docs/building.md).
//
// Legend: L = target length, S = source length, S' = S with bias_k and the zero key,
// N = batch, E = embed_dim, H = heads, D = head_dim = E / H.
//
// Included by modules/textbook.cppm, in its module purview: no module line of its own.
// Uses random.hpp, options.hpp, parameters.hpp, inputs.hpp, masks.hpp, in_projection.hpp.
// Exported, all of it: the API runs reference_forward and the engine fills a SavedForward,
// and both are outside mha.textbook.

export namespace mha::detail {

// What the backward pass needs from one forward (MultiheadAttention::forward_for_backward):
// the inputs as multi_head_attention_forward saw them, and the tensors each gradient is
// taken at, as PyTorch's autograd saves them. B = N*H.
template <class T>
struct SavedForward {
  bool batched = true, batch_first = false;                // the caller's layout
  textbook::Aliasing aliasing = textbook::Aliasing::none;  // the in-projection's branch (one, two or three products)
  // Which inputs were one object: their gradients are summed into it, as in PyTorch's x.grad.
  bool query_is_key = false, key_is_value = false, query_is_value = false;
  std::size_t L = 0, S = 0, N = 0;
  bool need_weights = true, average_attn_weights = true;
  std::vector<std::size_t> output_shape, weights_shape;  // attn_output's, attn_output_weights'
  xt::xtensor<T, 3> query, key, value;                   // (L, N, E), (S, N, Ek), (S, N, Ev)
  xt::xtensor<T, 3> qh, kh, vh;                          // (B, L, D), (B, S', D), (B, S', D)
  xt::xtensor<T, 3> probabilities;                       // (B, L, S'): the softmax
  xt::xtensor<T, 3> weights;                             // (B, L, S'): after dropout
  std::optional<xt::xtensor<bool, 3>> dropout_mask;      // (B, L, S'), True = kept; none without dropout
  double dropout_p = 0;
  xt::xtensor<T, 3> merged;  // (L, N, E): the heads side by side, out_proj's input

  // P after dropout, which P . v and the returned weights took: `weights`, or without
  // dropout P itself (the engine's forward then keeps no second copy in `weights`).
  const xt::xtensor<T, 3>& weights_after_dropout() const { return dropout_mask ? weights : probabilities; }
};

}  // namespace mha::detail

export namespace mha::textbook {

// static_k and static_v of the functional form (a KV cache), as (N*H, S, D) tensors:
// either, both or neither.
template <class T>
struct StaticKeysValues {
  std::optional<xt::xtensor<T, 3>> k, v;  // (N*H, S, D)
};

// Steps 3 to 10 of forward(), after the shapes (step 1) and the masks (step 2), which
// come as step 7's one additive mask at the keys' final length S' (MergedMask, masks.hpp).
// static_k and static_v, when given (the functional form, a KV cache), replace k and v
// after the in-projection. Dropout (dropout_p > 0,
// training) replays opts.dropout_mask when there is one, else draws from `generator`.
// With `saved`, what the backward pass needs is kept there.
template <class T>
Output<T> reference_forward(const Options& options, const Parameters<T>& params, const xt::xarray<T>& query,
                            const xt::xarray<T>& key, const xt::xarray<T>& value, const detail::Geometry& g,
                            const MergedMask<T>& mask, const ForwardOptions<T>& opts,
                            const StaticKeysValues<T>& statics, double dropout_p, Generator& generator,
                            detail::SavedForward<T>* saved = nullptr);

}  // namespace mha::textbook
