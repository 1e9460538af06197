// modules/engine/engine_backward.hpp (internal) — the backward pass on GEMMs: backward()'s fast path.
//
// The same gradients as textbook/reference_backward.hpp, from the same saved forward, with every
// product a BLAS GEMM (detail::gemm of platform/linear.hpp) and the heads never copied apart: head
// b = n*H + h of an (L, N, E) tensor is the (L, D) matrix at column n*E + h*D with leading
// dimension N*E, so merge_heads backward and split_heads backward are only strides, and
// dQ, dK, dV are written straight into their (len, N, E) tensors. The heads run on the
// library's threads, one (L, S') block of dP at a time, and the linear layers' GEMMs are
// split by rows (platform/threads.hpp says when). The element-wise steps (dropout, softmax, the
// weights' mean, bias_k/bias_v) are textbook/gradients.hpp' own. Not exported:
// MultiheadAttention::backward calls it unless AttentionPath::reference is set, and the
// tests hold it to the reference.
//
// Legend: L = target length, S = source length, S' = S with bias_k and the zero key,
// N = batch, E = embed_dim, H = heads, D = head_dim, B = N*H, in / out = a linear
// layer's input / output width.
//
// Included by modules/engine.cppm, in its module purview: no module line of its own.
// Uses textbook/options.hpp, textbook/parameters.hpp, textbook/inputs.hpp, textbook/attention.hpp, textbook/in_projection.hpp, platform/linear.hpp, platform/threads.hpp, platform/workspace.hpp, textbook/gradients.hpp, textbook/reference_forward.hpp, textbook/reference_backward.hpp.

namespace mha::detail {

// softmax backward of one row of S values (textbook::softmax_backward, a row at a time):  dS = P * (dP - rowsum(dP * P)).  d_scores may
// be d_probabilities itself: the row's sum is taken before any of it is written.
template <class T>
void softmax_backward_row(const T* probabilities, const T* d_probabilities, T* d_scores, std::size_t S) {
  T dot = 0;  // rowsum(dP * P)
  for (std::size_t j = 0; j < S; ++j) dot += d_probabilities[j] * probabilities[j];
  for (std::size_t j = 0; j < S; ++j) d_scores[j] = probabilities[j] * (d_probabilities[j] - dot);
}

// The gradient of attn_output_weights (textbook::output_weights_backward, a head at a time),
// d_weights: (N, L, S) averaged or (N, H, L, S) per
// head, without N unbatched.
template <class T>
void check_output_weights_gradient(const xt::xarray<T>& d_weights, std::size_t N, std::size_t H, std::size_t L,
                                   std::size_t S, bool average) {
  check(d_weights.size() == (average ? N : N * H) * L * S, "grad_attn_output_weights", "expected {} values, got {}",
        (average ? N : N * H) * L * S, d_weights.size());
}

// Head b's share of it, (L, S) = LS values, added into d_head.
template <class T>
void add_output_weights_gradient(const xt::xarray<T>& d_weights, std::size_t b, std::size_t H, std::size_t LS,
                                 bool average, T* d_head) {
  if (average)
    for (std::size_t x = 0; x < LS; ++x) d_head[x] += d_weights.data()[(b / H) * LS + x] / static_cast<T>(H);
  else
    for (std::size_t x = 0; x < LS; ++x) d_head[x] += d_weights.data()[b * LS + x];
}

// db = the sum of dY's rows, (rows, out) -> (out), row after row as the reference sums them.
template <class T>
void sum_rows_into(const T* dy, std::size_t rows, std::size_t out, T* db) {
  std::fill(db, db + out, T(0));
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t o = 0; o < out; ++o) db[o] += dy[r * out + o];
}

// y = x W^T + b backward on GEMMs into the caller's buffers, W (out, in) row-major at `w`,
// each GEMM's rows split over `threads`:
//   dX = dY W: (rows, out) x (out, in) -> (rows, in);  dW = dY^T X: (out, rows) x (rows, in) -> (out, in);
//   db = the sum of dY's rows, when `db` is given.
// x (rows, in), dy (rows, out); dx (rows, in), dw (out, in), db (out)
template <class T>
void linear_backward_into(const T* x, std::size_t rows, std::size_t in, const T* w, std::size_t out, const T* dy, T* dx,
                          T* dw, T* db, int threads) {
  threads = threads_for(2.0 * static_cast<double>(rows * in * out), /*threshold=*/2e7, threads);  // per GEMM
  parallel_gemm<T>(/*trans_a=*/false, /*trans_b=*/false, rows, in, out, T(1), dy, out, w, in, T(0), dx, in, threads);
  parallel_gemm<T>(/*trans_a=*/true, /*trans_b=*/false, out, in, rows, T(1), dy, out, x, in, T(0), dw, in, threads);
  if (db) sum_rows_into(dy, rows, out, db);
}

// The same into new tensors. x (len, N, in), dy (len, N, out)
template <class T>
textbook::LinearGradients<T> linear_backward_gemm(const xt::xtensor<T, 3>& x, const T* w, std::size_t out,
                                                  const xt::xtensor<T, 3>& dy, bool has_bias, int threads) {
  const std::size_t rows = x.shape(0) * x.shape(1), in = x.shape(2);
  textbook::LinearGradients<T> g{xt::xtensor<T, 3>::from_shape({x.shape(0), x.shape(1), in}),
                                 xt::xtensor<T, 2>::from_shape({out, in}), std::nullopt};
  if (has_bias) g.bias = xt::xtensor<T, 1>::from_shape({out});
  linear_backward_into(x.data(), rows, in, w, out, dy.data(), g.input.data(), g.weight.data(),
                       g.bias ? g.bias->data() : nullptr, threads);
  return g;
}

// The in-projection backward, one linear layer per use, against the weights where they
// lie (rows of in_proj_weight, or q/k/v_proj_weight); per use, summed into objects later.
template <class T>
textbook::InProjectionGradients<T> in_projection_backward_gemm(const textbook::Parameters<T>& params,
                                                               const SavedForward<T>& s, bool has_bias,
                                                               const xt::xtensor<T, 3>& dq, const xt::xtensor<T, 3>& dk,
                                                               const xt::xtensor<T, 3>& dv, int threads) {
  const std::size_t E = params.out_proj_weight.shape(0);
  // W_q, W_k, W_v (E, E): rows of in_proj_weight at qkv_rows' first row, E wide
  auto packed_rows = [&](std::size_t block) {
    return params.in_proj_weight.data() + textbook::qkv_rows(block, E).first * E;
  };
  const T* w_q = params.packed ? packed_rows(0) : params.separate.w_q.data();
  const T* w_k = params.packed ? packed_rows(1) : params.separate.w_k.data();
  const T* w_v = params.packed ? packed_rows(2) : params.separate.w_v.data();
  return textbook::in_projection_gradients(linear_backward_gemm(s.query, w_q, E, dq, has_bias, threads),
                                           linear_backward_gemm(s.key, w_k, E, dk, has_bias, threads),
                                           linear_backward_gemm(s.value, w_v, E, dv, has_bias, threads));
}

// What every head's backward reads and where it writes. Head b = n*H + h of an (len, N, E)
// tensor is the (len, D) matrix at column n*E + h*D, leading dimension N*E. dQ, dK and dV
// are written into (len, N, width) tensors: width E each, or one (L, N, 3E) tensor, dQ in
// its columns [0, E) of each batch entry, dK in [E, 2E), dV in [2E, 3E).
template <class T>
struct HeadsBackward {
  const SavedForward<T>& s;
  const T* d_output;                              // dO (L, N, E): out_proj's input gradient
  const std::optional<xt::xarray<T>>& d_weights;  // of the returned attn_output_weights
  std::size_t H, E, D, S_total, S_keys;           // S' and S' without the zero key
  std::size_t width;                              // of a batch entry's row in dq, dk, dv: E or 3E
  T* dq;                                          // (L, N, width)
  T* dk;                                          // (S [+1], N, width)
  T* dv;                                          // (S [+1], N, width)
};

// Steps 8 to 6 of the forward undone for head b, through d_scores, an (L, S') scratch:
//   8) dP = dO V^T and dV = P^T dO, P after dropout, the zero key's row left out of dV;
//      dP += the returned weights' own gradient; dropout backward;
//   7) dS = P * (dP - rowsum(dP * P)), row by row in place, P before dropout;
//   6) dQ = dS K * scale and dK = dS^T q * scale.
template <class T>
void head_backward(const HeadsBackward<T>& c, std::size_t b, T* d_scores) {
  const auto& s = c.s;
  const std::size_t L = s.L, S = c.S_total, D = c.D, LS = L * S, NE = s.N * c.E, ld = s.N * c.width;
  const std::size_t column = (b / c.H) * c.E + (b % c.H) * D;          // in dO
  const std::size_t out_column = (b / c.H) * c.width + (b % c.H) * D;  // in dQ, dK, dV
  const T* d_out = c.d_output + column;                                // dO (L, D), ld N*E
  const T *q = s.qh.data() + b * L * D, *k = s.kh.data() + b * S * D, *v = s.vh.data() + b * S * D;
  // (L, D) x (D, S') -> (L, S')
  gemm<T>(/*trans_a=*/false, /*trans_b=*/true, L, S, D, T(1), d_out, NE, v, D, T(0), d_scores, S);
  // (S', L) x (L, D) -> (S', D), rows [0, S_keys); none when the zero key is the only key
  if (c.S_keys > 0)
    gemm<T>(/*trans_a=*/true, /*trans_b=*/false, c.S_keys, D, L, T(1), s.weights_after_dropout().data() + b * LS, S,
            d_out, NE, T(0), c.dv + out_column, ld);
  if (c.d_weights) add_output_weights_gradient(*c.d_weights, b, c.H, LS, s.average_attn_weights, d_scores);
  if (s.dropout_mask)
    apply_dropout_mask(d_scores, s.dropout_mask->data() + b * LS, LS, textbook::dropout_scale<T>(s.dropout_p));
  for (std::size_t i = 0; i < L; ++i)
    softmax_backward_row(s.probabilities.data() + b * LS + i * S, d_scores + i * S, d_scores + i * S, S);
  const T scale = textbook::attention_scale<T>(D);
  // (L, S') x (S', D) -> (L, D)
  gemm<T>(/*trans_a=*/false, /*trans_b=*/false, L, D, S, scale, d_scores, S, k, D, T(0), c.dq + out_column, ld);
  // (S', L) x (L, D) -> (S', D), rows [0, S_keys)
  if (c.S_keys > 0)
    gemm<T>(/*trans_a=*/true, /*trans_b=*/false, c.S_keys, D, L, scale, d_scores, S, q, D, T(0), c.dk + out_column, ld);
}

// x (the caller's layout) as sequence-first rows, (L, N, E): x's own data unless it is
// batch_first, which is copied into one of `ws`'s buffers.
template <class T>
const T* sequence_first_rows(const xt::xarray<T>& x, bool batch_first, Workspace<T>& ws) {
  if (!batch_first) return x.data();  // (L, N, E), or (L, E) unbatched: the same rows in order
  const std::size_t N = x.shape(0), L = x.shape(1), E = x.shape(2);
  T* y = ws.get(L * N * E);
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t n = 0; n < N; ++n) std::copy_n(x.data() + (n * L + i) * E, E, y + (i * N + n) * E);
  return y;
}

// reference_backward's steps, on GEMMs over strided heads: the heads split over the
// library's threads (each with an (L, S') scratch of its own), the linear layers' GEMMs
// split by rows.
template <class T>
Gradients<T> fast_backward(const Options& options, const textbook::Parameters<T>& params, const SavedForward<T>& s,
                           const xt::xarray<T>& grad_attn_output,
                           const std::optional<xt::xarray<T>>& grad_attn_output_weights) {
  const std::size_t H = static_cast<std::size_t>(options.num_heads), L = s.L, N = s.N, B = N * H;
  const std::size_t E = params.out_proj_weight.shape(0), D = E / H;
  const std::size_t S_total = s.kh.shape(1), S_keys = S_total - options.add_zero_attn;  // S', S' without the zero key
  const bool has_bias = options.bias;
  const int threads = engine_threads();
  Gradients<T> out;

  // The intermediate gradients (dY in sequence-first order, dO, [dq | dk | dv], each
  // worker's dP) live in this thread's buffers, kept between calls (platform/workspace.hpp); only
  // the gradients returned are new tensors, each written once where it is returned.
  Workspace<T>& ws = Workspace<T>::of_this_thread();

  // 10) the caller's layout undone: dY (L, N, E), read where it is unless batch_first
  const T* d_attn_output = sequence_first_rows(grad_attn_output, s.batched && s.batch_first, ws);
  // 9) out_proj: dO (L, N, E), out_proj's input gradient, whose heads are strided views
  T* d_merged = ws.get(L * N * E);
  auto d_out_weight = xt::xarray<T>::from_shape({E, E});
  auto d_out_bias = has_bias ? std::optional<xt::xarray<T>>(xt::xarray<T>::from_shape({E})) : std::nullopt;
  linear_backward_into(s.merged.data(), L * N, E, params.out_proj_weight.data(), E, d_attn_output, d_merged,
                       d_out_weight.data(), d_out_bias ? d_out_bias->data() : nullptr, threads);
  out.parameters["out_proj.weight"] = std::move(d_out_weight);
  if (d_out_bias) out.parameters["out_proj.bias"] = std::move(*d_out_bias);

  // 8 to 6) per head, into dq, dk, dv. Self-attention on the packed weight writes them side
  // by side, [dq | dk | dv] (L, N, 3E), for step 3 to take as one linear layer's gradient.
  const bool one_linear = params.packed && s.aliasing == textbook::Aliasing::self_attention && !options.add_bias_kv;
  const std::size_t width = one_linear ? 3 * E : E;
  // An empty L, S' or batch leaves zeros: no product to take, no data to point into.
  const bool products = L > 0 && S_total > 0 && B > 0;
  auto gradient = [products, N](std::size_t len, std::size_t w) -> xt::xtensor<T, 3> {
    return products ? xt::xtensor<T, 3>::from_shape({len, N, w}) : xt::xtensor<T, 3>(xt::zeros<T>({len, N, w}));
  };
  T* dqkv = nullptr;             // (L, N, 3E), one_linear
  xt::xtensor<T, 3> dq, dk, dv;  // (L, N, E), (S [+1], N, E) x 2, otherwise
  if (one_linear) {
    dqkv = ws.get(L * N * width);
    if (!products) std::fill_n(dqkv, L * N * width, T(0));
  } else {
    dq = gradient(L, E), dk = gradient(S_keys, E), dv = gradient(S_keys, E);
  }
  if (grad_attn_output_weights)
    check_output_weights_gradient(*grad_attn_output_weights, N, H, L, S_total, s.average_attn_weights);
  if (products) {
    T* q = one_linear ? dqkv : dq.data();
    T* k = one_linear ? dqkv + E : dk.data();
    T* v = one_linear ? dqkv + 2 * E : dv.data();
    const HeadsBackward<T> heads{s, d_merged, grad_attn_output_weights, H, E, D, S_total, S_keys, width, q, k, v};
    const double flops = 8.0 * static_cast<double>(B * L * S_total * D);  // four GEMMs a head
    const int head_threads = threads_for(flops, /*threshold=*/2e7, threads);
    auto& scratch = ws.scratch;  // dP, then dS: (L, S') for each worker
    if (scratch.size() < static_cast<std::size_t>(head_threads)) scratch.resize(static_cast<std::size_t>(head_threads));
    for (auto& d_scores : scratch)
      if (d_scores.size() < L * S_total) d_scores.resize(L * S_total);
    parallel_for(B, head_threads,
                 [&](std::size_t b, std::size_t worker) { head_backward(heads, b, scratch[worker].data()); });
  }

  // 3) self-attention, packed: x [W_q; W_k; W_v]^T + b is one linear layer, and its
  //    dX = [dq | dk | dv] W sums the three uses inside one GEMM, as PyTorch's autograd does
  if (one_linear) {
    auto d_weight = xt::xarray<T>::from_shape({width, E});
    auto d_bias = has_bias ? std::optional<xt::xarray<T>>(xt::xarray<T>::from_shape({width})) : std::nullopt;
    const bool transpose = s.batched && s.batch_first;         // dX (L, N, E) is then made (N, L, E)
    auto d_query = xt::xarray<T>::from_shape(s.output_shape);  // the query's shape, as attn_output's
    T* dx = transpose ? ws.get(L * N * E) : d_query.data();
    linear_backward_into(s.query.data(), L * N, E, params.in_proj_weight.data(), width, dqkv, dx, d_weight.data(),
                         d_bias ? d_bias->data() : nullptr, threads);
    if (transpose)
      for (std::size_t i = 0; i < L; ++i)
        for (std::size_t n = 0; n < N; ++n) std::copy_n(dx + (i * N + n) * E, E, d_query.data() + (n * L + i) * E);
    out.parameters["in_proj_weight"] = std::move(d_weight);
    if (d_bias) out.parameters["in_proj_bias"] = std::move(*d_bias);
    out.query = std::move(d_query);
    ws.keep_within_limit();
    return out;
  }
  ws.keep_within_limit();  // nothing below points into the buffers

  // 4) bias_k, bias_v: the appended position's gradient, summed over the batch
  if (options.add_bias_kv) {
    auto bk = textbook::append_bias_backward(dk), bv = textbook::append_bias_backward(dv);
    dk = std::move(bk.input), dv = std::move(bv.input);  // (S, N, E)
    out.parameters["bias_k"] = bk.bias, out.parameters["bias_v"] = bv.bias;
  }

  // 3) in-projection, one use at a time; 1) one gradient per input object
  auto in = in_projection_backward_gemm(params, s, has_bias, dq, dk, dv, threads);
  textbook::store_in_projection_gradients(params, in.weights, out);
  textbook::gradients_per_object(s, in, out);
  return out;
}

}  // namespace mha::detail
