// modules/textbook/reference_backward.hpp — the gradients of multi_head_attention_forward, one step at a time.
//
// What loss.backward() computes in PyTorch for a MultiheadAttention, written out: the
// forward's steps (reference_forward.hpp) taken in reverse, from step 10 back to step 1, each
// through the formula of gradients.hpp that undoes it. The loss is
//   sum(attn_output * grad_attn_output) [+ sum(attn_output_weights * grad_attn_output_weights)],
// so the gradients given are dL/d(attn_output) and, optionally, dL/d(attn_output_weights).
// This is not autograd: there is no tape; the forward keeps what is needed (SavedForward)
// and this function uses it. MultiheadAttention::backward checks the arguments and calls it.
//
// Legend: L = target length, S = source length, S' = S with bias_k and the zero key,
// N = batch, E = embed_dim, H = heads, D = head_dim = E / H, B = N*H.
//
// Included by modules/textbook.cppm, in its module purview: no module line of its own.
// Uses options.hpp, parameters.hpp, inputs.hpp, attention.hpp, in_projection.hpp, gradients.hpp, reference_forward.hpp.

// Gradients and reference_backward are exported: the API calls it, and the engine's
// backward gives a Gradients too, from outside mha.textbook. The two helpers between them
// are the textbook's own.
export namespace mha::textbook {

// The gradients of a forward: dL/d(input) per distinct input object, in the caller's layout
// (as PyTorch's x.grad: self-attention has only `query`, the sum over its three uses;
// key is value has `query` and `key`), and dL/d(parameter) by state_dict name. What
// backward() returns is an mha::Gradients, which holds these tensors and is what a user sees.
template <class T>
struct Gradients {
  std::optional<xt::xarray<T>> query, key, value;
  StateDict<T> parameters;  // in_proj_weight or q/k/v_proj_weight, in_proj_bias, out_proj.weight, ...
};

}  // namespace mha::textbook

namespace mha::textbook {

// The per-use gradients of query, key and value summed into one per input object, each in
// the caller's layout. A use absent (nullopt) was already summed by the in-projection.
template <class T>
void gradients_per_object(const detail::SavedForward<T>& s, InProjectionGradients<T>& g, Gradients<T>& out) {
  xt::xtensor<T, 3> query = std::move(g.query);  // (L, N, E)
  if (s.query_is_key && g.key) query += *g.key, g.key.reset();
  if (s.query_is_value && g.value) query += *g.value, g.value.reset();
  if (s.key_is_value && g.key && g.value) *g.key += *g.value, g.value.reset();
  out.query = caller_layout(query, s.batched, s.batch_first);
  if (g.key && !s.query_is_key) out.key = caller_layout(*g.key, s.batched, s.batch_first);
  if (g.value && !s.query_is_value && !s.key_is_value) out.value = caller_layout(*g.value, s.batched, s.batch_first);
}

// The in-projection's weight gradients under the module's state_dict names: in_proj_weight
// packed as [dW_q; dW_k; dW_v], or q/k/v_proj_weight; in_proj_bias [db_q; db_k; db_v].
template <class T>
void store_in_projection_gradients(const Parameters<T>& params, const SeparateProjections<T>& w, Gradients<T>& out) {
  if (params.packed) {
    const auto packed = pack(w);
    out.parameters["in_proj_weight"] = packed.in_proj_weight;
    if (packed.in_proj_bias) out.parameters["in_proj_bias"] = *packed.in_proj_bias;
    return;
  }
  out.parameters["q_proj_weight"] = w.w_q, out.parameters["k_proj_weight"] = w.w_k;
  out.parameters["v_proj_weight"] = w.w_v;
  if (w.b_q && w.b_k && w.b_v) out.parameters["in_proj_bias"] = xt::concatenate(xt::xtuple(*w.b_q, *w.b_k, *w.b_v), 0);
}

}  // namespace mha::textbook

export namespace mha::textbook {

// The forward's steps 10 to 1, in reverse, on what the forward saved.
template <class T>
Gradients<T> reference_backward(const Options& options, const Parameters<T>& params, const detail::SavedForward<T>& s,
                                const xt::xarray<T>& grad_attn_output,
                                const std::optional<xt::xarray<T>>& grad_attn_output_weights) {
  const std::size_t H = static_cast<std::size_t>(options.num_heads), L = s.L, N = s.N;
  const std::size_t S_total = s.kh.shape(1);  // S'
  const bool has_bias = options.bias;
  Gradients<T> out;

  // 10) the caller's layout undone: dY (L, N, E)
  const auto d_attn_output = to_seq_first_batched(grad_attn_output, s.batch_first);  // (L, N, E)

  // 9) out_proj, then the heads apart again
  auto out_proj = linear_backward(s.merged, params.out_proj_weight, d_attn_output, has_bias);
  out.parameters["out_proj.weight"] = out_proj.weight;
  if (out_proj.bias) out.parameters["out_proj.bias"] = *out_proj.bias;
  const auto d_heads = merge_heads_backward(out_proj.input, H);  // (B, L, D)

  // 8) attention per head, from its output back to the scores
  auto values = weighted_values_backward(s.weights_after_dropout(), s.vh, d_heads);  // dP (B, L, S'), dV (B, S', D)
  if (grad_attn_output_weights)  // the returned weights are the dropped-out P: their gradient adds to dP
    values.weights += output_weights_backward(*grad_attn_output_weights, N, H, L, S_total, s.average_attn_weights);
  const auto d_probabilities =
      s.dropout_mask ? dropout_backward(values.weights, *s.dropout_mask, s.dropout_p) : values.weights;  // (B, L, S')
  const auto d_scores = softmax_backward(s.probabilities, d_probabilities);                              // (B, L, S')
  auto scores = scores_backward(s.qh, s.kh, d_scores);  // dQ (B, L, D), dK (B, S', D)
  xt::xtensor<T, 3> dkh = std::move(scores.key), dvh = std::move(values.values);

  // 6) add_zero_attn: the zero key and value are constants, with no gradient
  if (options.add_zero_attn) dkh = append_zero_row_backward(dkh), dvh = append_zero_row_backward(dvh);  // (B, S', D)

  // 5) the heads side by side: (B, L, D) -> (L, N, E)
  const auto dq = split_heads_backward(scores.query, H);  // (L, N, E)
  auto dk = split_heads_backward(dkh, H);                 // (S [+1], N, E)
  auto dv = split_heads_backward(dvh, H);                 // (S [+1], N, E)

  // 4) bias_k, bias_v: the appended position's gradient, summed over the batch
  if (options.add_bias_kv) {
    auto bk = append_bias_backward(dk), bv = append_bias_backward(dv);
    dk = std::move(bk.input), dv = std::move(bv.input);  // (S, N, E)
    out.parameters["bias_k"] = bk.bias, out.parameters["bias_v"] = bv.bias;
  }

  // 3) in-projection: packed (on the forward's branch) or separate
  auto in = params.packed ? in_projection_packed_backward(s.query, s.key, s.value, params.in_proj_weight, has_bias, dq,
                                                          dk, dv, s.aliasing)
                          : in_projection_backward(s.query, s.key, s.value, params.separate_projections(), dq, dk, dv);
  store_in_projection_gradients(params, in.weights, out);

  // 1) one gradient per input object, in the caller's layout
  gradients_per_object(s, in, out);
  return out;
}

}  // namespace mha::textbook
