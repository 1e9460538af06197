// modules/engine/training_forward.hpp (internal) — forward_for_backward() on the engine: the fast
// forward, keeping what the backward needs.
//
// A training step is a forward that keeps its intermediates, then the backward. PyTorch's
// autograd keeps, for multi_head_attention_forward's math branch: the inputs, q, k and v
// split into heads, the softmax P, the dropout mask, and the heads merged again (out_proj's
// input). The reference forward (textbook/reference_forward.hpp) keeps the same in SavedForward, one
// plain loop nest per step; this is the same forward arranged as mha:engine arranges it:
//   - step 3 is the engine's projection: one (L*N, E) x (E, 3E) GEMM for self-attention
//     on the packed weight, q scaled by sqrt(1/D) in its buffer (mha:engine);
//   - q, k and v are copied once into (N*H, len, D) heads, as SavedForward holds them, and
//     bias_k and the zero key land in that copy (steps 4 and 6);
//   - per batch-head, on the library's threads: the scores as one GEMM into P's own slot,
//     the masks added and the softmax taken in the engine's row kernels (softmax_kernels.hpp),
//     dropout from a mask drawn up front in the reference's order, then P . v as one GEMM
//     straight into the head's columns of the merged (L, N, E) tensor;
//   - out_proj is one GEMM on the merged heads.
// Without dropout, P is kept once: the weights after dropout are P itself
// (SavedForward::weights_after_dropout). engine_backward.hpp then runs on what this keeps.
//
// Legend: L = target length, S = source length, S' = S with bias_k and the zero key,
// N = batch, E = embed_dim, H = heads, D = head_dim, B = N*H, b = n*H + h.
//
// Included by modules/engine.cppm, in its module purview: no module line of its own.
// Uses textbook/random.hpp, platform/threads.hpp, platform/workspace.hpp, textbook/options.hpp, textbook/parameters.hpp, textbook/inputs.hpp, textbook/masks.hpp, textbook/attention.hpp, platform/linear.hpp, platform/cpu.hpp, attention_problem.hpp, softmax_kernels.hpp, textbook/reference_forward.hpp, mha:engine.

namespace mha::detail {

// Whether the engine keeps this forward for the backward: static_k and static_v (the
// functional form) and empty sizes, where there is no product to take, stay with the
// reference.
template <class T>
bool training_forward_applies(const Geometry& g, const StaticKV<T>& statics, std::size_t S_total) {
  return !statics.any() && g.L > 0 && g.N > 0 && S_total > 0;
}

// The heads of a strided (len, N, E) view copied out: (N*H, len_total, D), rows [0, len)
// from x, then bias (E) as one more row if given, then zero rows up to len_total
// (add_zero_attn). x.view(len, N*H, D).transpose(0, 1) with steps 4 and 6 applied. Each
// row is written once, the heads shared out over `threads`.
template <class T>
xt::xtensor<T, 3> heads_of(const StridedHeads<const T>& x, std::size_t len, std::size_t len_total, std::size_t N,
                           std::size_t H, std::size_t D, const std::optional<xt::xtensor<T, 3>>& bias, int threads,
                           xt::xtensor<T, 3> heads) {
  heads.resize({N * H, len_total, D});  // in the storage given, when it is of this size
  const double values = static_cast<double>(N * H * len_total * D);
  parallel_for(N * H, threads_for(values, /*threshold=*/1e6, threads), [&](std::size_t b, std::size_t /*worker*/) {
    const std::size_t n = b / H, h = b % H;
    T* head = heads.data() + b * len_total * D;
    const T* from = x.head(n, h, D);
    for (std::size_t i = 0; i < len; ++i) std::copy_n(from + i * x.row_stride, D, head + i * D);
    std::size_t row = len;
    if (bias) std::copy_n(bias->data() + h * D, D, head + row++ * D);  // bias_k/bias_v (1, 1, E)
    std::fill(head + row * D, head + len_total * D, T(0));             // the zero key, if any
  });
  return heads;
}

// Steps 8 and 9 for batch-head b: P_b = softmax(q_b . k_b^T + mask) into the saved
// probabilities, dropout into the saved weights when there is a mask, then P_b . v_b
// into the head's columns of `merged` (L, N, E). q is the scaled projection buffer.
template <class T>
void head_forward(SavedForward<T>& s, const StridedHeads<const T>& q_scaled, const MaskRows<T>& mask, std::size_t H,
                  std::size_t D, std::size_t b) {
  const std::size_t L = s.L, S = s.kh.shape(1), LS = L * S, n = b / H, h = b % H, NE = s.N * H * D;
  T* p = s.probabilities.data() + b * LS;
  // (L, D) x (D, S') -> (L, S')
  gemm<T>(/*trans_a=*/false, /*trans_b=*/true, L, S, D, T(1), q_scaled.head(n, h, D), q_scaled.row_stride,
          s.kh.data() + b * S * D, D, /*beta=*/T(0), p, S);
  run_for_this_cpu<SoftmaxRows<RowSoftmax::weights>>(p, std::size_t{0}, L, S, mask, b, n);
  const T* weights = p;
  if (s.dropout_mask) {
    T* dropped = s.weights.data() + b * LS;
    std::copy_n(p, LS, dropped);
    apply_dropout_mask(dropped, s.dropout_mask->data() + b * LS, LS, textbook::dropout_scale<T>(s.dropout_p));
    weights = dropped;
  }
  // (L, S') x (S', D) -> (L, D), at column n*E + h*D of (L, N, E)
  gemm<T>(/*trans_a=*/false, /*trans_b=*/false, L, D, S, T(1), weights, S, s.vh.data() + b * S * D, D, /*beta=*/T(0),
          s.merged.data() + n * H * D + h * D, NE);
}

// Steps 3 to 10 of forward(), keeping in `s` what backward() needs, as reference_forward
// keeps it. training_forward_applies() must hold.
// A training loop makes a record, runs backward() and lets the record go, call after call,
// at the same shapes: at (1024, 1, 1024, 16) its softmax alone is 64 MiB, which the
// allocator would map afresh (and the machine fault in, page by page) on every call. So a
// record let go (ForwardRecord's destructor) leaves its tensors (the inputs' sequence-first
// copies, the heads, P, the merged heads) to its thread, and that thread's next training
// forward writes into them: a tensor of the same size keeps its storage.
// release_thread_buffers() frees them with the rest.
template <class T>
void keep_spare_record(SavedForward<T>&& record) noexcept {
  // moved from, nothing worth keeping, or a record let go as its thread ends
  if (record.probabilities.size() == 0 || Workspace<T>::gone()) return;
  const std::size_t bytes =
      sizeof(T) * (record.query.size() + record.key.size() + record.value.size() + record.qh.size() + record.kh.size() +
                   record.vh.size() + record.probabilities.size() + record.weights.size() + record.merged.size());
  Workspace<T>& ws = Workspace<T>::mine();
  ws.spare_record.keep(std::move(record), bytes);
  ws.keep_within_limit();
}

// x made sequence-first and batched, as textbook::to_seq_first_batched makes it, written into
// `y`'s storage (the input a record let go kept) when that holds as many values. (len, N, width)
template <class T>
xt::xtensor<T, 3> seq_first_into(const xt::xarray<T>& x, bool batch_first, xt::xtensor<T, 3> y) {
  const textbook::SeqFirstLayout layout = textbook::seq_first_layout(x, batch_first);
  y.resize({layout.len, layout.N, layout.width});
  for (std::size_t i = 0; i < layout.len; ++i)
    for (std::size_t n = 0; n < layout.N; ++n)
      std::copy_n(x.data() + layout.row(i, n) * layout.width, layout.width,
                  y.data() + (i * layout.N + n) * layout.width);
  return y;
}

template <class T>
Output<T> training_forward(Engine<T>& engine, const Options& options, const textbook::Parameters<T>& params,
                           const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                           const Geometry& g, const textbook::MergedMask<T>& mask, const ForwardOptions<T>& opts,
                           double dropout_p, Generator& generator, SavedForward<T>& s) {
  const Sizes sizes(options);
  const std::size_t L = g.L, S = g.S, N = g.N, E = sizes.E, H = sizes.H, D = sizes.D, B = N * H;
  const std::size_t S_total = S + options.add_bias_kv + options.add_zero_attn;  // S'
  const bool batch_first = options.batch_first && g.batched;
  Workspace<T>& ws = Workspace<T>::of_this_thread();
  const auto wt = engine.transposed(params);  // W^T of this version of the weights
  const FastCall<T> c{g, E, H, D, ws, engine_threads(), /*scale_q=*/false, &wt->packed};

  // 3) in-projection by the engine's GEMMs; the heads saved unscaled, then q scaled in place
  Projection<T> p = project(c, params, *wt, query, key, value, StaticKV<T>{});
  const StridedHeads<const T> q_view = p.q;
  // 4), 5), 6) heads (N*H, len, D), bias_k/bias_v and the zero key appended (the mask is S' wide already)
  const std::optional<xt::xtensor<T, 3>> none;
  const auto& bias_k = options.add_bias_kv ? params.bias_k : none;  // (1, 1, E)
  const auto& bias_v = options.add_bias_kv ? params.bias_v : none;
  auto spare = ws.spare_record.template take<SavedForward<T>>();  // a record let go earlier: its storage, reused
  auto qh = heads_of(q_view, L, L, N, H, D, none, c.threads, std::move(spare.qh));       // (N*H, L, D)
  auto kh = heads_of(p.k, S, S_total, N, H, D, bias_k, c.threads, std::move(spare.kh));  // (N*H, S', D)
  auto vh = heads_of(p.v, S, S_total, N, H, D, bias_v, c.threads, std::move(spare.vh));  // (N*H, S', D)
  scale_query(c, p.q);
  // 7) the mask, made at S' (textbook::MergedMask): its two parts added in the softmax's row kernel

  // what the backward reads, as reference_forward keeps it
  s = SavedForward<T>{};
  s.batched = g.batched, s.batch_first = batch_first, s.aliasing = g.aliasing;
  s.query_is_key = &query == &key, s.key_is_value = &key == &value, s.query_is_value = &query == &value;
  s.L = L, s.S = S, s.N = N;
  s.need_weights = opts.need_weights, s.average_attn_weights = opts.average_attn_weights;
  s.weights_shape = textbook::weights_shape(N, H, L, S_total, opts.average_attn_weights, g.batched);
  s.query = seq_first_into(query, batch_first, std::move(spare.query));  // (L, N, E)
  s.key = seq_first_into(key, batch_first, std::move(spare.key));        // (S, N, Ek)
  s.value = seq_first_into(value, batch_first, std::move(spare.value));  // (S, N, Ev)
  s.qh = std::move(qh), s.kh = std::move(kh), s.vh = std::move(vh);
  s.probabilities = std::move(spare.probabilities);
  s.probabilities.resize({B, L, S_total});
  // dropout: the mask given, or drawn now over all of (N*H, L, S') in the reference's order
  s.dropout_p = dropout_p;
  s.dropout_mask = opts.dropout_mask;
  if (dropout_p > 0 && !s.dropout_mask)
    s.dropout_mask = textbook::draw_dropout_mask({B, L, S_total}, dropout_p, generator);
  if (s.dropout_mask) s.weights = std::move(spare.weights), s.weights.resize({B, L, S_total});
  s.merged = std::move(spare.merged);
  s.merged.resize({L, N, E});

  // 8) attention per head, on the library's threads, into P and the merged heads
  const MaskRows<T> mask_by_rows = mask_rows(mask, L, S_total);
  const double flops = 4.0 * static_cast<double>(L * S_total) * static_cast<double>(D) * static_cast<double>(B);
  parallel_for(B, threads_for(flops, /*threshold=*/4e6, c.threads),
               [&](std::size_t b, std::size_t /*worker*/) { head_forward(s, q_view, mask_by_rows, H, D, b); });

  // 9) out_proj: (L*N, E) x (E, E) -> (L, N, E); 10) the caller's layout and the weights.
  //    Sequence-first and unbatched outputs hold the rows of (L, N, E) in order, so out_proj
  //    writes straight into the returned tensor; batch_first is transposed after.
  const T* bias = params.out_proj_bias ? params.out_proj_bias->data() : nullptr;
  auto out_proj = [&](T* y) {
    parallel_linear_into(s.merged.data(), L * N, E,
                         with_packed(c, LinearWeight<T>{wt->out_proj.data(), E, true}, L * N, E, E), E, bias, y,
                         c.threads);
  };
  Output<T> out;
  if (batch_first) {
    auto attn_output = xt::xtensor<T, 3>::from_shape({L, N, E});
    out_proj(attn_output.data());
    out.attn_output = textbook::caller_layout(attn_output, g.batched, options.batch_first);
  } else {
    out.attn_output = xt::xarray<T>::from_shape(query.shape());  // (L, N, E), or (L, E) unbatched
    out_proj(out.attn_output.data());
  }
  ws.keep_within_limit();  // nothing points into the buffers any more
  if (opts.need_weights)
    out.attn_output_weights = textbook::output_weights(s.weights_after_dropout().data(), N, H, L, S_total,
                                                       opts.average_attn_weights, g.batched);
  s.output_shape.assign(out.attn_output.shape().begin(), out.attn_output.shape().end());
  return out;
}

}  // namespace mha::detail
