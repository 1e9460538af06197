// modules/engine/engine_backward.hpp (internal) — the backward pass on GEMMs: backward()'s fast path.
//
// The same gradients as textbook/reference_backward.hpp, from the same saved forward, with every
// product a BLAS GEMM (detail::gemm of platform/linear.hpp) and the heads never copied apart: head
// b = n*H + h of an (L, N, E) tensor is the (L, D) matrix at column n*E + h*D with leading
// dimension N*E, so merge_heads backward and split_heads backward are only strides, and
// dQ, dK, dV are written straight into their (len, N, E) buffers. The heads run on the
// library's threads, one (L, S') block of dP at a time, and the linear layers' GEMMs are
// split by rows (platform/threads.hpp says when). The element-wise steps (dropout, softmax, the
// weights' mean) are textbook/gradients.hpp' own, bias_k/bias_v's sum is append_bias_backward's
// in its order. Every gradient returned is written once, where it is returned, in the storage
// of the gradients the thread let go last when the sizes agree (a training loop's). Not exported:
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

// ---- the gradients returned, in the storage of gradients let go ---------------------
// A training loop calls backward() and lets the Gradients go, call after call, at the same
// shapes: at (1024, 1, 1024, 16) in_proj_weight's gradient alone is 12 MiB, which the
// allocator gives back to the system when it is freed and maps afresh (and the machine
// faults in, page by page) in the next call. So Gradients let go (mha::Gradients' destructor,
// or its assignment) leave their tensors to their thread, and that thread's next backward
// writes into them: a gradient of the same size keeps its storage. One set at most per
// thread, counted in thread_buffer_bytes(); release_thread_buffers() frees it with the rest.

template <class T>
std::size_t gradients_bytes(const textbook::Gradients<T>& g) {
  std::size_t values = 0;
  for (const auto* input : {&g.query, &g.key, &g.value})
    if (*input) values += (*input)->storage().size();
  for (const auto& [name, gradient] : g.parameters) values += gradient.storage().size();
  return values * sizeof(T);
}

template <class T>
void keep_spare_gradients(textbook::Gradients<T>&& gradients) noexcept {
  const std::size_t bytes = gradients_bytes(gradients);
  // moved from, nothing worth keeping, or gradients let go as their thread ends
  if (bytes == 0 || Workspace<T>::gone()) return;
  Workspace<T>& ws = Workspace<T>::mine();
  ws.spare_gradients.keep(std::move(gradients), bytes);
  ws.keep_within_limit();
}

// A gradient of `shape`, in the storage of `spare` when that holds as many values (resize
// keeps the storage of the same size), else in new storage.
template <class T>
xt::xarray<T> reused(xt::xarray<T>&& spare, const std::vector<std::size_t>& shape) {
  xt::xarray<T> gradient = std::move(spare);
  gradient.resize(shape);
  return gradient;
}

// The same from a spare input gradient (query, key or value), or a parameter's by name.
template <class T>
xt::xarray<T> reused(std::optional<xt::xarray<T>>& spare, const std::vector<std::size_t>& shape) {
  return reused(spare ? std::move(*spare) : xt::xarray<T>{}, shape);
}

template <class T>
xt::xarray<T> reused(StateDict<T>& spare, const std::string& name, const std::vector<std::size_t>& shape) {
  auto node = spare.extract(name);
  return reused(node ? std::move(node.mapped()) : xt::xarray<T>{}, shape);
}

// x (len, N, width), rows in sequence-first order, into `to` in the caller's layout:
// (len, N, width), (N, len, width) batch_first, or (len, width) unbatched (N = 1).
template <class T>
void to_caller_layout(const T* x, std::size_t len, std::size_t N, std::size_t width, bool batch_first, T* to) {
  if (!batch_first) {
    std::copy_n(x, len * N * width, to);
    return;
  }
  for (std::size_t i = 0; i < len; ++i)
    for (std::size_t n = 0; n < N; ++n) std::copy_n(x + (i * N + n) * width, width, to + (n * len + i) * width);
}

// The caller's shape of an input (len, N, width): as the caller gave it.
inline std::vector<std::size_t> caller_shape(std::size_t len, std::size_t N, std::size_t width, bool batched,
                                             bool batch_first) {
  if (!batched) return {len, width};
  return batch_first ? std::vector<std::size_t>{N, len, width} : std::vector<std::size_t>{len, N, width};
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

// The in-projection backward of cross-attention, separate projections or bias_k and bias_v
// (every case but one_linear's): one linear layer per use, against the weights where they lie
// (rows of in_proj_weight, or q/k/v_proj_weight), dW and db written where they are returned,
// dX of each use into the thread's buffers; then summed into one gradient per input object
// (query += key, query += value, key += value, as textbook::gradients_per_object sums them),
// each in the caller's layout. dq (L, N, E), dk and dv (S, N, E).
template <class T>
void in_projection_backward_into(const textbook::Parameters<T>& params, const SavedForward<T>& s, bool has_bias,
                                 const T* dq, const T* dk, const T* dv, int threads, Workspace<T>& ws,
                                 textbook::Gradients<T>& spare, textbook::Gradients<T>& out) {
  const std::size_t E = params.out_proj_weight.shape(0), L = s.L, S = s.S, N = s.N;
  const std::size_t width[3] = {s.query.shape(2), s.key.shape(2), s.value.shape(2)};  // E, kdim, vdim
  const std::size_t len[3] = {L, S, S};
  const T* x[3] = {s.query.data(), s.key.data(), s.value.data()};
  const T* dy[3] = {dq, dk, dv};
  // dW: the (3E, E) in_proj_weight's row blocks, or q/k/v_proj_weight (E, E), (E, kdim), (E, vdim)
  const char* separate_names[3] = {"q_proj_weight", "k_proj_weight", "v_proj_weight"};
  xt::xarray<T> packed_weight, separate_weight[3];
  if (params.packed) packed_weight = reused(spare.parameters, "in_proj_weight", {3 * E, E});
  else
    for (std::size_t u = 0; u < 3; ++u) separate_weight[u] = reused(spare.parameters, separate_names[u], {E, width[u]});
  std::optional<xt::xarray<T>> bias;  // in_proj_bias (3E) = [db_q; db_k; db_v], in both variants
  if (has_bias) bias = reused(spare.parameters, "in_proj_bias", {3 * E});
  T* dx[3];
  for (std::size_t u = 0; u < 3; ++u) {
    const std::size_t first = textbook::qkv_rows(u, E).first;  // the use's first row of in_proj_weight
    const T* w = params.packed ? params.in_proj_weight.data() + first * E
                               : (u == 0   ? params.separate.w_q
                                  : u == 1 ? params.separate.w_k
                                           : params.separate.w_v)
                                     .data();
    T* dw = params.packed ? packed_weight.data() + first * E : separate_weight[u].data();
    dx[u] = ws.get(len[u] * N * width[u]);
    linear_backward_into(x[u], len[u] * N, width[u], w, E, dy[u], dx[u], dw, bias ? bias->data() + first : nullptr,
                         threads);
  }
  if (params.packed) out.parameters["in_proj_weight"] = std::move(packed_weight);
  else
    for (std::size_t u = 0; u < 3; ++u) out.parameters[separate_names[u]] = std::move(separate_weight[u]);
  if (bias) out.parameters["in_proj_bias"] = std::move(*bias);

  // 1) one gradient per input object: a use summed into the object it is, then dropped
  bool counted[3] = {true, true, true};
  auto add = [&](std::size_t into, std::size_t use) {
    for (std::size_t i = 0; i < len[into] * N * width[into]; ++i) dx[into][i] += dx[use][i];
    counted[use] = false;
  };
  if (s.query_is_key) add(0, 1);
  if (s.query_is_value) add(0, 2);
  if (s.key_is_value && counted[1] && counted[2]) add(1, 2);
  std::optional<xt::xarray<T>>* spare_of[3] = {&spare.query, &spare.key, &spare.value};
  std::optional<xt::xarray<T>>* out_of[3] = {&out.query, &out.key, &out.value};
  for (std::size_t u = 0; u < 3; ++u) {
    if (!counted[u]) continue;
    auto gradient = reused(*spare_of[u], caller_shape(len[u], N, width[u], s.batched, s.batch_first));
    to_caller_layout(dx[u], len[u], N, width[u], s.batched && s.batch_first, gradient.data());
    *out_of[u] = std::move(gradient);
  }
}

// reference_backward's steps, on GEMMs over strided heads: the heads split over the
// library's threads (each with an (L, S') scratch of its own), the linear layers' GEMMs
// split by rows. Every gradient returned is written once, where it is returned: in the
// storage of the gradients this thread let go last, when they are of the same sizes.
template <class T>
textbook::Gradients<T> fast_backward(const Options& options, const textbook::Parameters<T>& params,
                                     const SavedForward<T>& s, const xt::xarray<T>& grad_attn_output,
                                     const std::optional<xt::xarray<T>>& grad_attn_output_weights) {
  const std::size_t H = static_cast<std::size_t>(options.num_heads), L = s.L, N = s.N, B = N * H;
  const std::size_t E = params.out_proj_weight.shape(0), D = E / H;
  const std::size_t S_total = s.kh.shape(1), S_keys = S_total - options.add_zero_attn;  // S', S' without the zero key
  const bool has_bias = options.bias;
  const int threads = engine_threads();
  if (grad_attn_output_weights)
    check_output_weights_gradient(*grad_attn_output_weights, N, H, L, S_total, s.average_attn_weights);

  // The intermediate gradients (dY in sequence-first order, dO, dq, dk, dv, each worker's dP,
  // the in-projection's dX per use) live in this thread's buffers, kept between calls
  // (platform/workspace.hpp); the gradients returned in the storage of those let go.
  Workspace<T>& ws = Workspace<T>::of_this_thread();
  auto spare =
      ws.spare_gradients.template take<textbook::Gradients<T>>();  // gradients let go earlier: their storage, reused
  textbook::Gradients<T> out;

  // 10) the caller's layout undone: dY (L, N, E), read where it is unless batch_first
  const T* d_attn_output = sequence_first_rows(grad_attn_output, s.batched && s.batch_first, ws);
  // 9) out_proj: dO (L, N, E), out_proj's input gradient, whose heads are strided views
  T* d_merged = ws.get(L * N * E);
  auto d_out_weight = reused(spare.parameters, "out_proj.weight", {E, E});
  std::optional<xt::xarray<T>> d_out_bias;
  if (has_bias) d_out_bias = reused(spare.parameters, "out_proj.bias", {E});
  linear_backward_into(s.merged.data(), L * N, E, params.out_proj_weight.data(), E, d_attn_output, d_merged,
                       d_out_weight.data(), d_out_bias ? d_out_bias->data() : nullptr, threads);
  out.parameters["out_proj.weight"] = std::move(d_out_weight);
  if (d_out_bias) out.parameters["out_proj.bias"] = std::move(*d_out_bias);

  // 8 to 6) per head, into dq, dk, dv. Self-attention on the packed weight writes them side
  // by side, [dq | dk | dv] (L, N, 3E), for step 3 to take as one linear layer's gradient;
  // otherwise dq (L, N, E), dk and dv (S [+1], N, E) each.
  const bool one_linear = params.packed && s.aliasing == textbook::Aliasing::self_attention && !options.add_bias_kv;
  const std::size_t width = one_linear ? 3 * E : E;
  T* dq = ws.get(L * N * width);
  // (an empty L or batch gets no storage: dq is null, and so are the columns beside it)
  // [dq | dk | dv]: k's and v's columns are their rows of in_proj_weight (qkv_rows)
  T* dk = one_linear ? (dq ? dq + textbook::qkv_rows(1, E).first : nullptr) : ws.get(S_keys * N * E);
  T* dv = one_linear ? (dq ? dq + textbook::qkv_rows(2, E).first : nullptr) : ws.get(S_keys * N * E);
  // An empty L, S' or batch leaves zeros: no product to take, no data to point into.
  const bool products = L > 0 && S_total > 0 && B > 0;
  if (!products) {
    std::fill_n(dq, L * N * width, T(0));
    if (!one_linear) std::fill_n(dk, S_keys * N * E, T(0)), std::fill_n(dv, S_keys * N * E, T(0));
  }
  if (products) {
    const HeadsBackward<T> heads{s, d_merged, grad_attn_output_weights, H, E, D, S_total, S_keys, width, dq, dk, dv};
    const double flops = 8.0 * static_cast<double>(B * L * S_total * D);  // four GEMMs a head
    const int head_threads = threads_for(flops, /*threshold=*/2e7, threads);
    auto& scratch = ws.scratch;  // dP, then dS: (L, S') for each worker
    if (scratch.size() < static_cast<std::size_t>(head_threads)) scratch.resize(static_cast<std::size_t>(head_threads));
    for (auto& d_scores : scratch)
      if (d_scores.size() < L * S_total) d_scores.resize(L * S_total);
    parallel_for(B, head_threads,
                 [&](std::size_t b, std::size_t worker) { head_backward(heads, b, scratch[worker].data()); });
  }

  if (one_linear) {
    // 3) self-attention, packed: x [W_q; W_k; W_v]^T + b is one linear layer, and its
    //    dX = [dq | dk | dv] W sums the three uses inside one GEMM, as PyTorch's autograd does
    auto d_weight = reused(spare.parameters, "in_proj_weight", {width, E});
    std::optional<xt::xarray<T>> d_bias;
    if (has_bias) d_bias = reused(spare.parameters, "in_proj_bias", {width});
    const bool transpose = s.batched && s.batch_first;   // dX (L, N, E) is then made (N, L, E)
    auto d_query = reused(spare.query, s.output_shape);  // the query's shape, as attn_output's
    T* dx = transpose ? ws.get(L * N * E) : d_query.data();
    linear_backward_into(s.query.data(), L * N, E, params.in_proj_weight.data(), width, dq, dx, d_weight.data(),
                         d_bias ? d_bias->data() : nullptr, threads);
    if (transpose) to_caller_layout(dx, L, N, E, /*batch_first=*/true, d_query.data());
    out.parameters["in_proj_weight"] = std::move(d_weight);
    if (d_bias) out.parameters["in_proj_bias"] = std::move(*d_bias);
    out.query = std::move(d_query);
  } else {
    // 4) bias_k, bias_v: the appended position's gradient (row S of dk, dv), summed over the
    //    batch as textbook::append_bias_backward sums it; rows [0, S) are the keys' and values'
    if (options.add_bias_kv) {
      auto d_bias_k = reused(spare.parameters, "bias_k", {1, 1, E});
      auto d_bias_v = reused(spare.parameters, "bias_v", {1, 1, E});
      sum_rows_into(dk + s.S * N * E, N, E, d_bias_k.data());
      sum_rows_into(dv + s.S * N * E, N, E, d_bias_v.data());
      out.parameters["bias_k"] = std::move(d_bias_k), out.parameters["bias_v"] = std::move(d_bias_v);
    }
    // 3) in-projection, one use at a time; 1) one gradient per input object
    in_projection_backward_into(params, s, has_bias, dq, dk, dv, threads, ws, spare, out);
  }
  ws.keep_within_limit();  // nothing points into the buffers any more
  return out;
}

}  // namespace mha::detail
