// mha:engine_backward (internal) — the backward pass on GEMMs: backward()'s fast path.
//
// The same gradients as :reference_backward, from the same saved forward, with every
// product a BLAS GEMM (detail::gemm of :linear) and the heads never copied apart: head
// b = n*H + h of an (L, N, E) tensor is the (L, D) matrix at column n*E + h*D with leading
// dimension N*E, so merge_heads backward and split_heads backward are only strides, and
// dQ, dK, dV are written straight into their (len, N, E) tensors. The element-wise steps
// (dropout, softmax, the weights' mean, bias_k/bias_v) are :gradients' own. Not exported:
// MultiheadAttention::backward calls it unless AttentionPath::reference is set, and the
// tests hold it to the reference.
//
// Legend: L = target length, S = source length, S' = S with bias_k and the zero key,
// N = batch, E = embed_dim, H = heads, D = head_dim, B = N*H, in / out = a linear
// layer's input / output width.
module;
#include "third_party.hpp"

export module mha:engine_backward;

import :options;
import :parameters;
import :inputs;
import :attention;
import :in_projection;
import :linear;
import :gradients;
import :reference_forward;
import :reference_backward;

namespace mha::detail {

// y = x W^T + b backward on GEMMs, W (out, in) row-major at `w`:
//   dX = dY W: (rows, out) x (out, in) -> (rows, in);  dW = dY^T X: (out, rows) x (rows, in) -> (out, in).
// x (len, N, in), dy (len, N, out)
template <class T>
LinearGradients<T> linear_backward_gemm(const xt::xtensor<T, 3>& x, const T* w, std::size_t out,
                                        const xt::xtensor<T, 3>& dy, bool has_bias) {
  const std::size_t rows = x.shape(0) * x.shape(1), in = x.shape(2);
  LinearGradients<T> g{xt::xtensor<T, 3>::from_shape({x.shape(0), x.shape(1), in}),
                       xt::xtensor<T, 2>::from_shape({out, in}), std::nullopt};
  gemm<T>(/*trans_a=*/false, /*trans_b=*/false, rows, in, out, T(1), dy.data(), out, w, in, T(0), g.input.data(), in);
  gemm<T>(/*trans_a=*/true, /*trans_b=*/false, out, in, rows, T(1), dy.data(), out, x.data(), in, T(0), g.weight.data(),
          in);
  if (has_bias) {
    xt::xtensor<T, 1> db = xt::zeros<T>({out});
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t o = 0; o < out; ++o) db(o) += dy.data()[r * out + o];
    g.bias = std::move(db);
  }
  return g;
}

// The in-projection backward, one linear layer per use, against the weights where they
// lie (rows of in_proj_weight, or q/k/v_proj_weight); per use, summed into objects later.
template <class T>
InProjectionGradients<T> in_projection_backward_gemm(const Parameters<T>& params, const SavedForward<T>& s,
                                                     bool has_bias, const xt::xtensor<T, 3>& dq,
                                                     const xt::xtensor<T, 3>& dk, const xt::xtensor<T, 3>& dv) {
  const std::size_t E = params.out_proj_weight.shape(0);
  const T* w_q = params.packed ? params.in_proj_weight.data() : params.separate.w_q.data();
  const T* w_k = params.packed ? params.in_proj_weight.data() + E * E : params.separate.w_k.data();
  const T* w_v = params.packed ? params.in_proj_weight.data() + 2 * E * E : params.separate.w_v.data();
  return in_projection_gradients(linear_backward_gemm(s.query, w_q, E, dq, has_bias),
                                 linear_backward_gemm(s.key, w_k, E, dk, has_bias),
                                 linear_backward_gemm(s.value, w_v, E, dv, has_bias));
}

// reference_backward's steps, on GEMMs over strided heads.
template <class T>
Gradients<T> fast_backward(const Options& options, const Parameters<T>& params, const SavedForward<T>& s,
                           const xt::xarray<T>& grad_attn_output,
                           const std::optional<xt::xarray<T>>& grad_attn_output_weights) {
  const std::size_t H = static_cast<std::size_t>(options.num_heads), L = s.L, N = s.N, B = N * H;
  const std::size_t E = params.out_proj_weight.shape(0), D = E / H, NE = N * E;
  const std::size_t S_total = s.kh.shape(1), S_keys = S_total - options.add_zero_attn;  // S', S' without the zero key
  const bool has_bias = options.bias;
  const T scale = attention_scale<T>(D);
  Gradients<T> out;

  // 10) the caller's layout undone; 9) out_proj: d_merged (L, N, E), whose heads are strided views
  const auto d_attn_output = to_seq_first_batched(grad_attn_output, s.batch_first);  // (L, N, E)
  auto out_proj = linear_backward_gemm(s.merged, params.out_proj_weight.data(), E, d_attn_output, has_bias);
  out.parameters["out_proj.weight"] = out_proj.weight;
  if (out_proj.bias) out.parameters["out_proj.bias"] = *out_proj.bias;

  xt::xtensor<T, 3> d_weights = xt::zeros<T>({B, L, S_total});                             // dP (B, L, S')
  xt::xtensor<T, 3> dq = xt::zeros<T>({L, N, E});                                          // (L, N, E)
  xt::xtensor<T, 3> dk = xt::zeros<T>({S_keys, N, E}), dv = xt::zeros<T>({S_keys, N, E});  // (S [+1], N, E)
  // An empty L or S' leaves the zeros: no product to take (and no data to point into).
  const bool products = L > 0 && S_total > 0;

  // 8) per head: dP = dO V^T, dV = P^T dO, the zero key's row left out of dV
  for (std::size_t b = 0; products && b < B; ++b) {
    const std::size_t column = (b / H) * E + (b % H) * D;  // head b inside an (len, N, E) row
    const T* d_out = out_proj.input.data() + column;       // dO (L, D), ld N*E
    const T* w = s.weights.data() + b * L * S_total;       // P after dropout (L, S')
    // (L, D) x (D, S') -> (L, S')
    gemm<T>(/*trans_a=*/false, /*trans_b=*/true, L, S_total, D, T(1), d_out, NE, s.vh.data() + b * S_total * D, D, T(0),
            d_weights.data() + b * L * S_total, S_total);
    // (S', L) x (L, D) -> (S', D), rows [0, S_keys); none when the zero key is the only key
    if (S_keys > 0)
      gemm<T>(/*trans_a=*/true, /*trans_b=*/false, S_keys, D, L, T(1), w, S_total, d_out, NE, T(0), dv.data() + column,
              NE);
  }
  if (grad_attn_output_weights)
    d_weights += output_weights_backward(*grad_attn_output_weights, N, H, L, S_total, s.average_attn_weights);
  if (s.dropout_mask) d_weights = dropout_backward(d_weights, *s.dropout_mask, s.dropout_p);
  const auto d_scores = softmax_backward(s.probabilities, d_weights);  // dS (B, L, S')

  // dQ = dS K * scale, dK = dS^T q * scale, written into their (len, N, E) tensors
  for (std::size_t b = 0; products && b < B; ++b) {
    const std::size_t column = (b / H) * E + (b % H) * D;
    const T* ds = d_scores.data() + b * L * S_total;
    // (L, S') x (S', D) -> (L, D)
    gemm<T>(/*trans_a=*/false, /*trans_b=*/false, L, D, S_total, scale, ds, S_total, s.kh.data() + b * S_total * D, D,
            T(0), dq.data() + column, NE);
    // (S', L) x (L, D) -> (S', D), rows [0, S_keys); none when the zero key is the only key
    if (S_keys > 0)
      gemm<T>(/*trans_a=*/true, /*trans_b=*/false, S_keys, D, L, scale, ds, S_total, s.qh.data() + b * L * D, D, T(0),
              dk.data() + column, NE);
  }

  // 4) bias_k, bias_v: the appended position's gradient, summed over the batch
  if (options.add_bias_kv) {
    auto bk = append_bias_backward(dk), bv = append_bias_backward(dv);
    dk = std::move(bk.input), dv = std::move(bv.input);  // (S, N, E)
    out.parameters["bias_k"] = bk.bias, out.parameters["bias_v"] = bv.bias;
  }

  // 3) in-projection, one use at a time; 1) one gradient per input object
  auto in = in_projection_backward_gemm(params, s, has_bias, dq, dk, dv);
  store_in_projection_gradients(params, in.weights, out);
  gradients_per_object(s, in, out);
  return out;
}

}  // namespace mha::detail
