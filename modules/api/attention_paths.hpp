// modules/api/attention_paths.hpp — which implementation runs steps 3 to 10: the one place
// the path is chosen.
//
// MultiheadAttention::forward() does steps 1 (the shapes) and 2 (the masks) itself, then
// calls attention_steps(), which picks the readable reference
// (modules/textbook/reference_forward.cpp) or the engine (modules/engine/engine.hpp) and
// runs it. The functional form, a KV cache's step and forward_for_backward() end here too.
// PyTorch makes the same choice in MultiheadAttention.forward (its "fast path" checks) and
// in scaled_dot_product_attention's backend selection; the choice here is ours, the
// results are PyTorch's on every path. Declarations, and resolve_attention_path; the body
// of attention_steps is in attention_paths.cpp, compiled once for float and double.
//
// Legend: L = target length, S = source length, S' = S with bias_k and the zero key.
//
// Included by modules/api.cppm, in its module purview: no module line of its own.

namespace mha::detail {

// The path a forward takes for these sizes: automatic resolved, memory_efficient refused
// when the weights are asked for (it never forms them). S counts bias_k and the zero key.
inline AttentionPath resolve_attention_path(AttentionPath path, bool need_weights, std::size_t L, std::size_t S) {
  if (path == AttentionPath::memory_efficient)
    check(!need_weights, "need_weights",
          "the memory_efficient attention path never forms the attention weights; expected need_weights=false "
          "with it, got need_weights=true (choose AttentionPath::fast, reference or automatic for the weights)");
  if (path != AttentionPath::automatic) return path;
  // One head's (L, S) scores above 4M entries (16 MiB in float) are worth not forming.
  const bool large = static_cast<double>(L) * static_cast<double>(S) > static_cast<double>(1 << 22);
  return !need_weights && large ? AttentionPath::memory_efficient : AttentionPath::fast;
}

// Steps 3 to 10, after the shapes (step 1) and the masks (step 2), by the path chosen:
// the reference (textbook::reference_forward), or the engine (Engine::forward). A dropout
// mask to replay takes the reference path: the engine draws its own dropout inside its
// kernels. A record to keep for backward() takes training_forward, the engine's GEMMs
// keeping the reference's intermediates, unless the path is the reference.
template <class T>
Output<T> attention_steps(Engine<T>& engine, const Options& options, const textbook::Parameters<T>& params,
                          const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                          const Geometry& g, textbook::PreparedMasks<T> masks, const ForwardOptions<T>& opts,
                          const StaticKV<T>& statics, AttentionPath path, double dropout_p, Generator& generator,
                          SavedForward<T>* saved = nullptr);

}  // namespace mha::detail
