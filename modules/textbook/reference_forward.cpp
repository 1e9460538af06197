// modules/textbook/reference_forward.cpp — multi_head_attention_forward, one tensor per step.
//
// The body of reference_forward, declared in modules/textbook/reference_forward.hpp: steps 3 to 10
// of forward() in torch/nn/functional.py's order, each calling the file that teaches
// it, and its explicit instantiations for float and double.
//
// Legend: L = target length, S = source length, S' = S with bias_k and the zero key,
// N = batch, E = embed_dim, H = heads, D = head_dim = E / H.
module;
#include "third_party_xtensor.hpp"

module mha.textbook;

// mha.core once more, as the interface imports it: clang 16 does not give an implementation
// unit what its interface imports (clang 19 does), and these bodies call shape_string.
import mha.core;

namespace mha::textbook {

template <class T>
Output<T> reference_forward(const Options& options, const Parameters<T>& params, const xt::xarray<T>& query,
                            const xt::xarray<T>& key, const xt::xarray<T>& value, const detail::Geometry& g,
                            const MergedMask<T>& mask, const ForwardOptions<T>& opts,
                            const StaticKeysValues<T>& statics, double dropout_p, Generator& generator,
                            detail::SavedForward<T>* saved) {
  const std::size_t H = static_cast<std::size_t>(options.num_heads), L = g.L, N = g.N;
  const bool batch_first = options.batch_first && g.batched;

  // 3) in-projection: the packed (3E, E) weight, or three separate ones
  auto query_in = to_seq_first_batched(query, batch_first);                       // (L, N, E)
  auto key_in = to_seq_first_batched(key, batch_first);                           // (S, N, Ek)
  auto value_in = to_seq_first_batched(value, batch_first);                       // (S, N, Ev)
  auto [q, k, v] = params.in_projection(query_in, key_in, value_in, g.aliasing);  // (L, N, E), (S, N, E) x2

  // 4) bias_k, bias_v: one more key and value position. PyTorch pads the masks here by an
  //    unmasked column (F.pad(mask, (0, 1))); step 7's mask was made S' wide already
  //    (merged_mask, masks.hpp), with that column.
  if (options.add_bias_kv) {
    k = append_bias(k, Parameters<T>::present(params.bias_k, "bias_k"));  // (S+1, N, E)
    v = append_bias(v, Parameters<T>::present(params.bias_v, "bias_v"));
  }

  // 5) heads: (L, N, E) -> (N*H, L, D); static_k and static_v, already heads, replace k
  //    and v. PyTorch projected k and v above all the same (a TODO in its source); the
  //    engine does not.
  auto qh = split_heads(q, H);                           // (N*H, L, D)
  auto kh = statics.k ? *statics.k : split_heads(k, H);  // (N*H, S', D)
  auto vh = statics.v ? *statics.v : split_heads(v, H);  // (N*H, S', D)

  // 6) add_zero_attn: one more key and value, all zeros; PyTorch pads the masks here too,
  //    and step 7's mask has that column already, as at step 4
  if (options.add_zero_attn) kh = append_zero_row(kh), vh = append_zero_row(vh);  // (N*H, S'+1, D)
  const std::size_t S_total = kh.shape(1);

  // 7) one additive mask, its parts merged where PyTorch merges them (MergedMask, masks.hpp:
  //    the masks of step 2 padded to S' and added, or the causal mask of the hint)
  const std::optional<xt::xtensor<T, 3>> added = mask.written_out();  // (1 or N*H, L, S')

  // 8) attention per head: softmax(q k^T / sqrt(D) + mask) v, dropout in training only,
  //    replayed from the mask given or drawn now
  std::optional<xt::xtensor<bool, 3>> keep = opts.dropout_mask;
  if (dropout_p > 0 && !keep) keep = draw_dropout_mask({qh.shape(0), L, S_total}, dropout_p, generator);
  auto attention = scaled_dot_product_attention(qh, kh, vh, added, dropout_p, keep);
  if (mask.safe_softmax) detail::zero_fully_masked_rows(attention, mask);  // 2.x's SDPA: 0, not NaN

  // 9) heads side by side again, then out_proj: (N*H, L, D) -> (L, N, E)
  auto merged = merge_heads(attention.output, H);                                   // (L, N, E)
  auto attn_output = linear(merged, params.out_proj_weight, params.out_proj_bias);  // (L, N, E)

  // 10) back to the caller's layout; the weights per head or averaged over heads
  Output<T> out;
  out.attn_output = caller_layout(attn_output, g.batched, options.batch_first);  // as the query came
  if (opts.need_weights)
    out.attn_output_weights =
        output_weights(attention.weights.data(), N, H, L, S_total, opts.average_attn_weights, g.batched);

  if (saved) {
    *saved =
        detail::SavedForward<T>{.batched = g.batched,
                                .batch_first = batch_first,
                                .aliasing = g.aliasing,
                                .query_is_key = &query == &key,
                                .key_is_value = &key == &value,
                                .query_is_value = &query == &value,
                                .L = L,
                                .S = g.S,
                                .N = N,
                                .need_weights = opts.need_weights,
                                .average_attn_weights = opts.average_attn_weights,
                                .output_shape = {out.attn_output.shape().begin(), out.attn_output.shape().end()},
                                .weights_shape = weights_shape(N, H, L, S_total, opts.average_attn_weights, g.batched),
                                .query = std::move(query_in),
                                .key = std::move(key_in),
                                .value = std::move(value_in),
                                .qh = std::move(qh),
                                .kh = std::move(kh),
                                .vh = std::move(vh),
                                .probabilities = std::move(attention.probabilities),
                                .weights = std::move(attention.weights),
                                .dropout_mask = std::move(keep),
                                .dropout_p = dropout_p,
                                .merged = std::move(merged)};
  }
  return out;
}

// Compiled here once for each dtype the library has.
template Output<float> reference_forward(const Options&, const Parameters<float>&, const xt::xarray<float>&,
                                         const xt::xarray<float>&, const xt::xarray<float>&, const detail::Geometry&,
                                         const MergedMask<float>&, const ForwardOptions<float>&,
                                         const StaticKeysValues<float>&, double, Generator&,
                                         detail::SavedForward<float>*);
template Output<double> reference_forward(const Options&, const Parameters<double>&, const xt::xarray<double>&,
                                          const xt::xarray<double>&, const xt::xarray<double>&, const detail::Geometry&,
                                          const MergedMask<double>&, const ForwardOptions<double>&,
                                          const StaticKeysValues<double>&, double, Generator&,
                                          detail::SavedForward<double>*);

}  // namespace mha::textbook
