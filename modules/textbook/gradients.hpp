// modules/textbook/gradients.hpp — the backward pass of each step of the forward, one function per formula.
//
// Each function takes the gradient of a step's output (dY, "d" for dL/d) and the tensors
// the step saw, and gives the gradients of the step's inputs, as PyTorch's autograd does
// for the operations of multi_head_attention_forward (torch/nn/functional.py), with the
// formulas of PyTorch's autograd, derivatives.yaml (mm, bmm, softmax, dropout, cat, view).
// reference_backward.hpp chains them in the forward's order, backwards. One plain loop nest
// per formula, as in attention.hpp: the reference a reader can follow.
//
// Legend: L = target length, S = source length (keys, with bias_k and the zero key where
// they are appended), N = batch, E = embed_dim, H = heads, D = head_dim, B = N*H,
// in / out = a linear layer's input / output width.
//
// Included by modules/textbook.cppm, in its module purview: no module line of its own.
// Uses mha.core, attention.hpp, in_projection.hpp.

export namespace mha::textbook {

// The gradients of y = x W^T + b.
template <class T>
struct LinearGradients {
  xt::xtensor<T, 3> input;                // dX (L, N, in)
  xt::xtensor<T, 2> weight;               // dW (out, in)
  std::optional<xt::xtensor<T, 1>> bias;  // db (out), when the layer has a bias
};

// y = x W^T + b backward:  dX = dY W,  dW = dY^T X,  db = sum of dY over the rows.
// x (L, N, in), weight (out, in), dy (L, N, out)
template <class T>
LinearGradients<T> linear_backward(const xt::xtensor<T, 3>& x, const xt::xtensor<T, 2>& weight,
                                   const xt::xtensor<T, 3>& dy, bool has_bias) {
  const std::size_t out = weight.shape(0), in = weight.shape(1), rows = x.shape(0) * x.shape(1);
  check(x.shape(2) == in && dy.shape(0) == x.shape(0) && dy.shape(1) == x.shape(1) && dy.shape(2) == out, "dy",
        "expected shape {}, got {}", shape_string({x.shape(0), x.shape(1), out}), shape_string(dy.shape()));
  LinearGradients<T> g{xt::xtensor<T, 3>::from_shape({x.shape(0), x.shape(1), in}),
                       xt::xtensor<T, 2>(xt::zeros<T>({out, in})), std::nullopt};
  const T *X = x.data(), *W = weight.data(), *dY = dy.data();
  // dX = dY W: (rows, out) x (out, in) -> (rows, in)
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t i = 0; i < in; ++i) {
      T sum = 0;
      for (std::size_t o = 0; o < out; ++o) sum += dY[r * out + o] * W[o * in + i];
      g.input.data()[r * in + i] = sum;
    }
  // dW = dY^T X: (out, rows) x (rows, in) -> (out, in)
  for (std::size_t o = 0; o < out; ++o)
    for (std::size_t i = 0; i < in; ++i) {
      T sum = 0;
      for (std::size_t r = 0; r < rows; ++r) sum += dY[r * out + o] * X[r * in + i];
      g.weight(o, i) = sum;
    }
  // db = sum over the rows of dY: (rows, out) -> (out)
  if (has_bias) {
    xt::xtensor<T, 1> db = xt::zeros<T>({out});
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t o = 0; o < out; ++o) db(o) += dY[r * out + o];
    g.bias = std::move(db);
  }
  return g;
}

// merge_heads backward: the gradient of the merged (L, N, E) split into heads again.
// (L, N, E) -> (B, L, D)
template <class T>
xt::xtensor<T, 3> merge_heads_backward(const xt::xtensor<T, 3>& d_merged, std::size_t num_heads) {
  return split_heads(d_merged, num_heads);
}

// split_heads backward: the heads' gradients side by side again. (B, S, D) -> (S, N, E)
template <class T>
xt::xtensor<T, 3> split_heads_backward(const xt::xtensor<T, 3>& d_heads, std::size_t num_heads) {
  return merge_heads(d_heads, num_heads);
}

// The gradients of the attention-weighted values O = P V.
template <class T>
struct WeightedValuesGradients {
  xt::xtensor<T, 3> weights;  // dP (B, L, S)
  xt::xtensor<T, 3> values;   // dV (B, S, D)
};

// O = P V backward:  dP = dO V^T,  dV = P^T dO.
// weights P (B, L, S), values V (B, S, D), d_output dO (B, L, D)
template <class T>
WeightedValuesGradients<T> weighted_values_backward(const xt::xtensor<T, 3>& weights, const xt::xtensor<T, 3>& values,
                                                    const xt::xtensor<T, 3>& d_output) {
  const std::size_t B = weights.shape(0), L = weights.shape(1), S = weights.shape(2), D = values.shape(2);
  WeightedValuesGradients<T> g{xt::xtensor<T, 3>::from_shape({B, L, S}), xt::xtensor<T, 3>::from_shape({B, S, D})};
  for (std::size_t b = 0; b < B; ++b) {
    // dP = dO V^T: (L, D) x (D, S) -> (L, S)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < S; ++j) {
        T sum = 0;
        for (std::size_t d = 0; d < D; ++d) sum += d_output(b, i, d) * values(b, j, d);
        g.weights(b, i, j) = sum;
      }
    // dV = P^T dO: (S, L) x (L, D) -> (S, D)
    for (std::size_t j = 0; j < S; ++j)
      for (std::size_t d = 0; d < D; ++d) {
        T sum = 0;
        for (std::size_t i = 0; i < L; ++i) sum += weights(b, i, j) * d_output(b, i, d);
        g.values(b, j, d) = sum;
      }
  }
  return g;
}

// dropout backward: the gradient passes where the weight was kept, scaled as the weight
// was, and not where it was dropped:  dP = dY * keep / (1 - p).  (B, L, S)
template <class T>
xt::xtensor<T, 3> dropout_backward(const xt::xtensor<T, 3>& d_dropped, const xt::xtensor<bool, 3>& keep, double p) {
  xt::xtensor<T, 3> d = d_dropped;
  apply_dropout_mask(d, p, keep);
  return d;
}

// softmax backward, row by row:  dS = P * (dP - rowsum(dP * P)).  (B, L, S)
// A row of P that is NaN (all keys masked) gives a row of NaN, as in PyTorch.
template <class T>
xt::xtensor<T, 3> softmax_backward(const xt::xtensor<T, 3>& probabilities, const xt::xtensor<T, 3>& d_probabilities) {
  const std::size_t S = probabilities.shape(2), rows = S == 0 ? 0 : probabilities.size() / S;
  xt::xtensor<T, 3> d_scores = xt::xtensor<T, 3>::from_shape(probabilities.shape());
  for (std::size_t r = 0; r < rows; ++r) {
    const T *P = probabilities.data() + r * S, *dP = d_probabilities.data() + r * S;
    T dot = 0;  // rowsum(dP * P)
    for (std::size_t j = 0; j < S; ++j) dot += dP[j] * P[j];
    for (std::size_t j = 0; j < S; ++j) d_scores.data()[r * S + j] = P[j] * (dP[j] - dot);
  }
  return d_scores;
}

// The gradients of the scores (q * scale) K^T + mask.
template <class T>
struct ScoresGradients {
  xt::xtensor<T, 3> query;  // dQ (B, L, D)
  xt::xtensor<T, 3> key;    // dK (B, S, D)
};

// scores = (q * scale) K^T + mask backward, scale = sqrt(1/D) (attention_scale):
//   dQ = dS K * scale   (PyTorch scales q before the matmul, so the scale comes last),
//   dK = dS^T (q * scale).  The mask is a constant: it takes no gradient.
// q (B, L, D), k (B, S, D), d_scores dS (B, L, S)
template <class T>
ScoresGradients<T> scores_backward(const xt::xtensor<T, 3>& q, const xt::xtensor<T, 3>& k,
                                   const xt::xtensor<T, 3>& d_scores) {
  const std::size_t B = q.shape(0), L = q.shape(1), D = q.shape(2), S = k.shape(1);
  const T scale = attention_scale<T>(D);
  ScoresGradients<T> g{xt::xtensor<T, 3>::from_shape({B, L, D}), xt::xtensor<T, 3>::from_shape({B, S, D})};
  for (std::size_t b = 0; b < B; ++b) {
    // dQ = dS K * scale: (L, S) x (S, D) -> (L, D)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t d = 0; d < D; ++d) {
        T sum = 0;
        for (std::size_t j = 0; j < S; ++j) sum += d_scores(b, i, j) * k(b, j, d);
        g.query(b, i, d) = sum * scale;
      }
    // dK = dS^T (q * scale): (S, L) x (L, D) -> (S, D)
    for (std::size_t j = 0; j < S; ++j)
      for (std::size_t d = 0; d < D; ++d) {
        T sum = 0;
        for (std::size_t i = 0; i < L; ++i) sum += d_scores(b, i, j) * (q(b, i, d) * scale);
        g.key(b, j, d) = sum;
      }
  }
  return g;
}

// append_zero_row backward: the zero key (or value) is a constant and takes no gradient;
// the others keep theirs. (B, S+1, D) -> (B, S, D)
template <class T>
xt::xtensor<T, 3> append_zero_row_backward(const xt::xtensor<T, 3>& d) {
  check(d.shape(1) > 0, "d", "expected at least the zero row, got shape {}", shape_string(d.shape()));
  return xt::view(d, xt::all(), xt::range(0, d.shape(1) - 1), xt::all());
}

// The gradients of torch.cat([x, bias.repeat(1, N, 1)]).
template <class T>
struct AppendBiasGradients {
  xt::xtensor<T, 3> input;  // dX (S, N, E)
  xt::xtensor<T, 3> bias;   // d bias (1, 1, E)
};

// append_bias backward: the first S positions go to x; the appended one to the bias, summed
// over the batch since every batch entry used the same bias. (S+1, N, E) -> (S, N, E), (1, 1, E)
template <class T>
AppendBiasGradients<T> append_bias_backward(const xt::xtensor<T, 3>& d) {
  const std::size_t S = d.shape(0) - 1, N = d.shape(1), E = d.shape(2);
  AppendBiasGradients<T> g{xt::view(d, xt::range(0, S), xt::all(), xt::all()),
                           xt::xtensor<T, 3>(xt::zeros<T>({std::size_t{1}, std::size_t{1}, E}))};
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t e = 0; e < E; ++e) g.bias(0, 0, e) += d(S, n, e);
  return g;
}

// output_weights backward: the gradient of attn_output_weights as each head's. Averaged
// weights (sum over heads / H) give every head the gradient / H; per-head weights pass
// theirs as they are. d_weights -> (B, L, S)
template <class T>
xt::xtensor<T, 3> output_weights_backward(const xt::xarray<T>& d_weights, std::size_t N, std::size_t H, std::size_t L,
                                          std::size_t S, bool average) {
  const std::size_t heads_given = average ? N : N * H;  // (N, L, S) averaged, (N, H, L, S) per head
  check(d_weights.size() == heads_given * L * S, "grad_attn_output_weights", "expected {} values, got {}",
        heads_given * L * S, d_weights.size());
  xt::xtensor<T, 3> d = xt::zeros<T>({N * H, L, S});
  if (d.size() == 0) return d;  // no values, and no data to point into
  const std::size_t LS = L * S;
  for (std::size_t b = 0; b < N * H; ++b) {
    T* d_head = d.data() + b * LS;  // head b = n*H + h: its share of the gradient, (L, S)
    if (average)
      for (std::size_t x = 0; x < LS; ++x) d_head[x] += d_weights.data()[(b / H) * LS + x] / static_cast<T>(H);
    else
      for (std::size_t x = 0; x < LS; ++x) d_head[x] += d_weights.data()[b * LS + x];
  }
  return d;
}

// The gradients of an in-projection. One input gradient per input of the branch taken:
// query only (its three uses summed) for self-attention, query and key for key_is_value,
// all three otherwise; the weights' gradients as three blocks, whatever the variant.
template <class T>
struct InProjectionGradients {
  xt::xtensor<T, 3> query;                      // (L, N, E)
  std::optional<xt::xtensor<T, 3>> key, value;  // (S, N, Ek), (S, N, Ev)
  SeparateProjections<T> weights;               // dW_q, dW_k, dW_v and db_q, db_k, db_v
};

// The gradients of the three projections, q, k and v, as those of one in-projection.
template <class T>
InProjectionGradients<T> in_projection_gradients(LinearGradients<T> gq, LinearGradients<T> gk, LinearGradients<T> gv) {
  return {std::move(gq.input),
          std::move(gk.input),
          std::move(gv.input),
          {std::move(gq.weight), std::move(gk.weight), std::move(gv.weight), std::move(gq.bias), std::move(gk.bias),
           std::move(gv.bias)}};
}

// _in_projection backward: three independent linear layers.
// query (L, N, E), key (S, N, Ek), value (S, N, Ev), dq (L, N, E), dk, dv (S, N, E)
template <class T>
InProjectionGradients<T> in_projection_backward(const xt::xtensor<T, 3>& query, const xt::xtensor<T, 3>& key,
                                                const xt::xtensor<T, 3>& value, const SeparateProjections<T>& p,
                                                const xt::xtensor<T, 3>& dq, const xt::xtensor<T, 3>& dk,
                                                const xt::xtensor<T, 3>& dv) {
  return in_projection_gradients(linear_backward(query, p.w_q, dq, p.b_q.has_value()),
                                 linear_backward(key, p.w_k, dk, p.b_k.has_value()),
                                 linear_backward(value, p.w_v, dv, p.b_v.has_value()));
}

// The rows `rows` of a (rows, in) weight gradient, and of its bias.
template <class T>
std::pair<xt::xtensor<T, 2>, std::optional<xt::xtensor<T, 1>>> row_block(const LinearGradients<T>& g, RowBlock rows) {
  std::optional<xt::xtensor<T, 1>> bias;
  if (g.bias) bias = xt::view(*g.bias, xt::range(rows.first, rows.end()));
  return {xt::view(g.weight, xt::range(rows.first, rows.end()), xt::all()), std::move(bias)};
}

// _in_projection_packed backward, on the branch the forward took: one linear layer of all
// 3E rows for self-attention (dX = [dq | dk | dv] W sums the three uses at once), one of
// rows [E, 3E) for key and value when key is value, three otherwise.
template <class T>
InProjectionGradients<T> in_projection_packed_backward(const xt::xtensor<T, 3>& query, const xt::xtensor<T, 3>& key,
                                                       const xt::xtensor<T, 3>& value,
                                                       const xt::xtensor<T, 2>& in_proj_weight, bool has_bias,
                                                       const xt::xtensor<T, 3>& dq, const xt::xtensor<T, 3>& dk,
                                                       const xt::xtensor<T, 3>& dv, Aliasing aliasing) {
  const std::size_t E = in_proj_weight.shape(1);
  if (aliasing == Aliasing::self_attention) {
    // (L, N, 3E): the three gradients side by side, as q, k, v were columns of one GEMM
    const xt::xtensor<T, 3> d_qkv = xt::concatenate(xt::xtuple(dq, dk, dv), 2);
    auto g = linear_backward(query, in_proj_weight, d_qkv, has_bias);
    const SeparateProjections<T> blocks = split_packed(g.weight, g.bias);
    return {std::move(g.input), std::nullopt, std::nullopt, blocks};
  }
  InProjectionGradients<T> out;
  auto gq = linear_backward(query, weight_block(in_proj_weight, 0), dq, has_bias);
  out.query = std::move(gq.input);
  out.weights.w_q = std::move(gq.weight), out.weights.b_q = std::move(gq.bias);
  if (aliasing == Aliasing::key_is_value) {
    // (S, N, 2E): k and v were columns of one GEMM against rows [E, 3E)
    const RowBlock kv_block = kv_rows(E);
    const xt::xtensor<T, 2> w_kv = xt::view(in_proj_weight, xt::range(kv_block.first, kv_block.end()), xt::all());
    const xt::xtensor<T, 3> d_kv = xt::concatenate(xt::xtuple(dk, dv), 2);
    auto g = linear_backward(key, w_kv, d_kv, has_bias);
    std::tie(out.weights.w_k, out.weights.b_k) = row_block(g, qkv_rows(1, E).within(kv_block));
    std::tie(out.weights.w_v, out.weights.b_v) = row_block(g, qkv_rows(2, E).within(kv_block));
    out.key = std::move(g.input);
    return out;
  }
  auto gk = linear_backward(key, weight_block(in_proj_weight, 1), dk, has_bias);
  auto gv = linear_backward(value, weight_block(in_proj_weight, 2), dv, has_bias);
  out.key = std::move(gk.input), out.value = std::move(gv.input);
  out.weights.w_k = std::move(gk.weight), out.weights.b_k = std::move(gk.bias);
  out.weights.w_v = std::move(gv.weight), out.weights.b_v = std::move(gv.bias);
  return out;
}

}  // namespace mha::textbook
