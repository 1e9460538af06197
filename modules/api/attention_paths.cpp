// modules/api/attention_paths.cpp — attention_steps: the path chosen, run on the reference or
// the engine, and its explicit instantiations for float and double.
//
// The body of what modules/api/attention_paths.hpp declares.
//
// Legend: L = target length, S = source length (static_k's when given), S' = S with bias_k
// and the zero key, N = batch, H = heads, D = head_dim.
module;
#include "third_party_xtensor.hpp"

module mha;

namespace mha::detail {

// static_k and static_v as the reference reads them: (N*H, S, D) tensors of their own.
template <class T>
textbook::StaticKeysValues<T> static_tensors(const StaticKV<T>& statics) {
  textbook::StaticKeysValues<T> st;
  if (statics.k) st.k = statics.k.tensor();  // (N*H, S, D)
  if (statics.v) st.v = statics.v.tensor();  // (N*H, S, D)
  return st;
}

template <class T>
Output<T> attention_steps(Engine<T>& engine, const Options& options, const textbook::Parameters<T>& params,
                          const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                          const Geometry& g, const textbook::MergedMask<T>& mask, const ForwardOptions<T>& opts,
                          const StaticKV<T>& statics, AttentionPath path, double dropout_p, Generator& generator,
                          SavedForward<T>* saved) {
  const std::size_t S_keys = statics.k ? statics.k.S : g.S;
  const std::size_t S_total = S_keys + options.add_bias_kv + options.add_zero_attn;  // S'
  // The one choice of path (attention_paths.hpp). Only SDPA's safe softmax off the reference
  // reads the mask, to see whether a row is fully masked; everything else is sizes and flags.
  const ForwardPath chosen = choose_forward_path(PathFacts{
      .requested = path,
      .need_weights = opts.need_weights,
      .L = g.L,
      .S = S_total,
      .fully_masked_row = mask.safe_softmax && path != AttentionPath::reference && mask.has_fully_masked_row(),
      .keeps_record = saved != nullptr,
      .engine_keeps_record = training_forward_applies(g, statics, S_total),
      .replays_dropout = opts.dropout_mask.has_value()});

  // The reference: every intermediate a tensor, and the record, if one is kept, made of them
  if (chosen.path == AttentionPath::reference)
    return textbook::reference_forward(options, params, query, key, value, g, mask, opts, static_tensors(statics),
                                       dropout_p, generator, saved);
  // A record off the reference: the engine's GEMMs, keeping the reference's intermediates
  if (saved)
    return training_forward(engine, options, params, query, key, value, g, mask, opts, dropout_p, generator, *saved);
  // The engine, with step 8's kernel for the path and the weights asked for
  return engine.forward(options, params, query, key, value, g, mask, statics,
                        choose_kernel(chosen.path, opts, dropout_p), dropout_p, generator);
}

// Compiled here once for each dtype the library has.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define MHA_INSTANTIATE_ATTENTION_PATHS(T)                                                                             \
  template Output<T> attention_steps(Engine<T>&, const Options&, const textbook::Parameters<T>&, const xt::xarray<T>&, \
                                     const xt::xarray<T>&, const xt::xarray<T>&, const Geometry&,                      \
                                     const textbook::MergedMask<T>&, const ForwardOptions<T>&, const StaticKV<T>&,     \
                                     AttentionPath, double, Generator&, SavedForward<T>*);
MHA_INSTANTIATE_ATTENTION_PATHS(float)
MHA_INSTANTIATE_ATTENTION_PATHS(double)
#undef MHA_INSTANTIATE_ATTENTION_PATHS
// NOLINTEND(bugprone-macro-parentheses)

}  // namespace mha::detail
