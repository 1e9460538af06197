// modules/engine/engine.hpp (internal) — the fast and memory-efficient forward: the same steps as
// textbook/reference_forward.hpp, on raw buffers.
//
// The inputs are read where they are (sequence-first, batch_first or unbatched: every
// layout is a contiguous (rows, E) matrix, textbook/inputs.hpp), q, k and v stay in their projection
// buffers and a head is a strided view into them, the heads land in the caller's layout
// and out_proj writes straight into the returned tensor. The attention itself is
// fast_attention.hpp (GEMMs, fused softmax) or flash_attention.hpp (tiles, online softmax):
// which one is the API's choice (AttentionKernel, chosen in api/attention_paths.hpp), passed
// in, as the engine chooses no path of its own.
// The engine owns what this costs: buffers kept per thread (platform/workspace.hpp), and W^T per
// version of the weights. Every PyTorch step it shares with the reference is called, not
// re-derived: bias_k/bias_v (textbook/extra_keys.hpp), the scale (textbook/attention.hpp),
// the output weights (textbook/inputs.hpp). The mask comes made, step 7's one additive mask
// at S' (textbook::MergedMask, textbook/masks.hpp), and is read in place (mask_rows).
//
// Exports nothing: MultiheadAttention holds an Engine, so code outside the module that
// moves or copies a MultiheadAttention needs Engine's definition to be reachable, which is
// why its layer (mha:engine) is re-exported. Its names stay in mha::detail, invisible to
// `import mha;`.
//
// Legend: L = target length, S = source length, S' = S with bias_k and the zero key,
// N = batch, E = embed_dim, H = heads, D = head_dim, B = N*H.
//
// Included by modules/engine.cppm, in its module purview: no module line of its own.
// Uses textbook/random.hpp, platform/threads.hpp, platform/workspace.hpp, textbook/options.hpp, textbook/parameters.hpp, textbook/in_projection.hpp, textbook/inputs.hpp, textbook/masks.hpp, textbook/extra_keys.hpp, textbook/attention.hpp, platform/linear.hpp, attention_problem.hpp, fast_attention.hpp, flash_attention.hpp, decode_weights.hpp.

namespace mha::detail {

// The projection weights transposed, W^T (in, out): y = x W^T + b is then the plain GEMM
// x . (W^T), which OpenBLAS runs without repacking W on every call (about 30% faster at
// E = 64, 7% at E = 1024). They cost as much memory again as the weights, and for float
// GEMMs on oneDNN the blocks of W^T that a forward multiplies by, reordered for its matmul
// (platform/packed_linear.hpp), as much again.
template <class T>
struct TransposedWeights {
  std::uint64_t version = 0;     // the Parameters::version they were made from
  xt::xtensor<T, 2> in_proj;     // (E, 3E): columns [0, E) W_q^T, [E, 2E) W_k^T, [2E, 3E) W_v^T
  xt::xtensor<T, 2> q, k, v;     // separate: W_q^T (E, E), W_k^T (Ek, E), W_v^T (Ev, E)
  xt::xtensor<T, 2> out_proj;    // (E, E)
  mutable PackedWeights packed;  // blocks of the above, made as forwards first use them

  explicit TransposedWeights(const textbook::Parameters<T>& p) : version(p.version()) {
    auto t = [](const xt::xtensor<T, 2>& w) { return xt::xtensor<T, 2>(xt::transpose(w)); };
    if (p.packed) in_proj = t(p.in_proj_weight);
    else q = t(p.separate.w_q), k = t(p.separate.w_k), v = t(p.separate.w_v);
    out_proj = t(p.out_proj_weight);
  }
};

// q, k and v after the in-projection, as strided views into the buffers that hold them.
template <class T>
struct Projection {
  StridedHeads<T> q;  // (L, N, E): ours, scaled in place
  StridedHeads<const T> k, v;
};

// What one fast forward works with: its sizes, its thread's buffers and its threads.
// scale_q: q leaves the in-projection already scaled by sqrt(1/D) (the inference forward);
// the training forward keeps q unscaled for the backward and scales it itself.
// packed: the packed blocks of this version's W^T (TransposedWeights::packed).
template <class T>
struct FastCall {
  const Geometry& g;
  std::size_t E, H, D;
  Workspace<T>& ws;
  int threads;
  bool scale_q = false;
  PackedWeights* packed = nullptr;
};

// w, a block of W^T (in, out), with the same block reordered for oneDNN's matmul when
// oneDNN runs float GEMMs of `rows` rows of it (platform/packed_linear.hpp), made at its first use.
template <class T>
LinearWeight<T> with_packed(const FastCall<T>& c, LinearWeight<T> w, std::size_t rows, std::size_t in,
                            std::size_t out) {
  if constexpr (std::is_same_v<T, float>) {
    if (c.packed && w.transposed && gemm_library_for(rows, out, in) == GemmLibrary::onednn)
      w.packed = c.packed->of(w.data, w.ld, in, out);
  }
  return w;
}

// q *= sqrt(1/D) (attention_scale) on one block of the in-projection's output y, whose
// rows are `width` wide with q in their first E columns: PyTorch scales q before q . k^T,
// after the in-projection's bias.
template <class T>
void scale_query_block(const FastCall<T>& c, T* y, std::size_t width, const OutputBlock& b) {
  const T scale = textbook::attention_scale<T>(c.D);
  const std::size_t last = std::min(b.col + b.cols, c.E);
  for (std::size_t r = b.row; r < b.row + b.rows; ++r)
    for (std::size_t e = b.col; e < last; ++e) y[r * width + e] *= scale;
}

// y (len*N, width) = x W^T + b for `width` columns of W^T and of the bias from column
// `first`, into a buffer with the rows of x: (len, N, width) or (N, len, width). When
// the columns start with q's (first = 0) and c.scale_q, each thread scales q in the block
// it has just written, while it is in its cache: at (128, 8, 512, 8) a separate pass
// over q on one thread took about 0.2 ms of a 7.5 ms forward.
template <class T>
StridedHeads<T> project_into(const FastCall<T>& c, const xt::xarray<T>& x, const textbook::SeqFirstLayout& layout,
                             LinearWeight<T> w, const T* bias, std::size_t first, std::size_t width) {
  const std::size_t rows = layout.len * layout.N;
  T* y = c.ws.get(rows * width);
  const bool scale = c.scale_q && first == 0;
  parallel_linear_into(x.data(), rows, layout.width, with_packed(c, w, rows, layout.width, width), width,
                       bias ? bias + first : nullptr, y, c.threads, [&](const OutputBlock& block) {
                         if (scale) scale_query_block(c, y, width, block);
                       });
  return {y, row_stride_of(layout, width), batch_stride_of(layout, width), 0};
}

// static_k or static_v as the kernels read it: head b of (B, S, D) at b * head_stride.
template <class T>
StridedHeads<const T> static_heads(const StaticHeads<T>& x, std::size_t H) {
  return {x.data, /*row_stride=*/x.D, /*batch_stride=*/H * x.head_stride, /*head_stride=*/x.head_stride};
}

// Step 3 when static_k or static_v replaces k or v: only what is not replaced is
// projected, each on its own GEMM. (PyTorch 1.13 projects all three and drops the result.)
template <class T>
Projection<T> project_around_statics(const FastCall<T>& c, const textbook::Parameters<T>& params,
                                     const TransposedWeights<T>& wt, const xt::xarray<T>& query,
                                     const xt::xarray<T>& key, const xt::xarray<T>& value, const StaticKV<T>& statics) {
  const std::size_t E = c.E;
  const Geometry& g = c.g;
  const T* b = params.in_proj_bias ? params.in_proj_bias->data() : nullptr;  // (3E): [b_q; b_k; b_v]
  const std::size_t k_first = textbook::qkv_rows(1, E).first, v_first = textbook::qkv_rows(2, E).first;
  // W^T of block 0 (q), 1 (k) or 2 (v): a column block of (E, 3E), or a weight of its own
  auto w = [&](std::size_t block) {
    if (params.packed) return LinearWeight<T>{wt.in_proj.data() + textbook::qkv_rows(block, E).first, 3 * E, true};
    const xt::xtensor<T, 2>& t = block == 0 ? wt.q : block == 1 ? wt.k : wt.v;
    return LinearWeight<T>{t.data(), E, true};
  };
  Projection<T> p;
  p.q = project_into(c, query, g.query, w(0), b, 0, E);  // (L, N, E)
  p.k = statics.k ? static_heads(statics.k, c.H)
                  : StridedHeads<const T>(project_into(c, key, g.key, w(1), b, k_first, E));
  p.v = statics.v ? static_heads(statics.v, c.H)
                  : StridedHeads<const T>(project_into(c, value, g.value, w(2), b, v_first, E));
  return p;
}

// Step 3 on the inputs as they are, with the fewest GEMMs: self-attention with the packed
// weight is one (L*N, E) x (E, 3E) GEMM, key is value two, else three, as PyTorch's
// _in_projection_packed. q (L, N, E), k and v (S, N, E), as views.
template <class T>
Projection<T> project(const FastCall<T>& c, const textbook::Parameters<T>& params, const TransposedWeights<T>& wt,
                      const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                      const StaticKV<T>& statics) {
  const std::size_t E = c.E;
  const Geometry& g = c.g;
  const T* b = params.in_proj_bias ? params.in_proj_bias->data() : nullptr;  // (3E): [b_q; b_k; b_v]
  if (statics.any()) return project_around_statics(c, params, wt, query, key, value, statics);
  // The bias's blocks, and the packed W^T's column blocks, where qkv_rows puts K and V
  const std::size_t k_first = textbook::qkv_rows(1, E).first, v_first = textbook::qkv_rows(2, E).first;
  if (!params.packed)
    return {project_into(c, query, g.query, {wt.q.data(), E, true}, b, 0, E),
            project_into(c, key, g.key, {wt.k.data(), E, true}, b, k_first, E),
            project_into(c, value, g.value, {wt.v.data(), E, true}, b, v_first, E)};
  auto w = [&](std::size_t first) { return LinearWeight<T>{wt.in_proj.data() + first, 3 * E, true}; };  // (E, 3E)
  if (g.aliasing == textbook::Aliasing::self_attention) {
    const auto qkv = project_into(c, query, g.query, w(0), b, 0, 3 * E);  // (L, N, 3E)
    return {qkv, qkv.shifted(k_first), qkv.shifted(v_first)};
  }
  const auto q = project_into(c, query, g.query, w(0), b, 0, E);  // (L, N, E)
  if (g.aliasing == textbook::Aliasing::key_is_value) {
    const textbook::RowBlock kv_block = textbook::kv_rows(E);
    const auto kv = project_into(c, key, g.key, w(kv_block.first), b, kv_block.first, kv_block.count);  // (S, N, 2E)
    return {q, kv, kv.shifted(textbook::qkv_rows(2, E).within(kv_block).first)};
  }
  return {q, project_into(c, key, g.key, w(k_first), b, k_first, E),
          project_into(c, value, g.value, w(v_first), b, v_first, E)};
}

// q *= sqrt(1/D) in place (attention_scale), over the E columns of every position and
// batch entry, after the in-projection (the training forward, which keeps q unscaled too).
template <class T>
void scale_query(const FastCall<T>& c, const StridedHeads<T>& q) {
  const T scale = textbook::attention_scale<T>(c.D);
  for (std::size_t i = 0; i < c.g.L; ++i)
    for (std::size_t n = 0; n < c.g.N; ++n) {
      T* row = q.head(n, 0, 0) + i * q.row_stride;
      for (std::size_t e = 0; e < c.E; ++e) row[e] *= scale;
    }
}

// Step 6 on static_k or static_v: (B, S, D) copied into (B, S + 1, D), the last position
// of every head zero (add_zero_attn). bias_k and bias_v never meet a static one.
template <class T>
StridedHeads<const T> zero_key_after(const FastCall<T>& c, const StaticHeads<T>& x) {
  const std::size_t S = x.S + 1, D = x.D;
  T* y = c.ws.get(x.B * S * D);  // (B, S + 1, D)
  for (std::size_t b = 0; b < x.B; ++b) {
    std::copy_n(x.data + b * x.head_stride, x.S * D, y + b * S * D);
    std::fill_n(y + (b * S + x.S) * D, D, T(0));
  }
  return {y, D, c.H * S * D, S * D};
}

// Steps 4 and 6 at once: k and v copied into (S', N, E) with bias_k/bias_v and the zero
// key appended (textbook/extra_keys.hpp). The mask has its column for each already
// (textbook::merged_mask).
template <class T>
void extend_keys(const FastCall<T>& c, const Options& options, const textbook::Parameters<T>& params,
                 const StaticKV<T>& statics, Projection<T>& p) {
  const std::size_t S = c.g.S, N = c.g.N, E = c.E;
  const std::size_t extra = std::size_t{options.add_bias_kv} + std::size_t{options.add_zero_attn};
  auto extend = [&](const StridedHeads<const T>& x, const std::optional<xt::xtensor<T, 3>>& bias) {
    T* y = c.ws.get((S + extra) * N * E);  // (S', N, E)
    extend_keys_into(x.data, x.row_stride, x.batch_stride, S, N, E, bias ? bias->data() : nullptr,
                     std::size_t{options.add_zero_attn}, y);
    return StridedHeads<const T>{y, N * E, E, 0};
  };
  p.k = statics.k ? zero_key_after(c, statics.k) : extend(p.k, params.bias_k);
  p.v = statics.v ? zero_key_after(c, statics.v) : extend(p.v, params.bias_v);
}

// Step 8's kernels, one for each way the weights are formed. Which one runs is the API's
// choice, made with the path (choose_kernel, api/attention_paths.hpp) and passed in: the
// engine's layer does not see the API's, and the kernel follows from the path chosen there.
enum class AttentionKernel {
  flash,                 // memory_efficient: tiles and an online softmax, no weights
  fast_without_weights,  // fast, need_weights=false: no (L, S') weights written
  fast_averaged,         // fast, averaged weights, no dropout: the mean formed as the heads go
  fast_then_averaged,    // fast, averaged weights with dropout: every head's, then the mean
  fast_per_head          // fast, average_attn_weights=false: every head's weights returned
};

// Step 8: the attention of every batch-head into `pb.out`, and the weights the kernel forms.
template <class T>
std::optional<xt::xarray<T>> attend(const FastCall<T>& c, const AttentionProblem<T>& pb, AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::flash:
      flash_attention(pb);
      return std::nullopt;
    case AttentionKernel::fast_without_weights:
      fast_attention(pb, static_cast<T*>(nullptr));
      return std::nullopt;
    case AttentionKernel::fast_averaged: {
      // the mean over heads formed as the heads go, (N, L, S'), never the (N*H, L, S') weights
      auto mean =
          xt::xarray<T>::from_shape(textbook::weights_shape(pb.N, pb.H, pb.L, pb.S, /*average=*/true, c.g.batched));
      fast_attention_averaged(pb, mean.data());
      return mean;
    }
    case AttentionKernel::fast_then_averaged: {          // head by head, drawing the dropout in the reference's order
      T* weights = c.ws.get(pb.N * pb.H * pb.L * pb.S);  // (N*H, L, S')
      fast_attention(pb, weights);
      return textbook::output_weights(weights, pb.N, pb.H, pb.L, pb.S, /*average=*/true, c.g.batched);
    }
    case AttentionKernel::fast_per_head: {
      // (N, H, L, S') is the (N*H, L, S') weights in order: the kernels write them in place
      auto weights =
          xt::xarray<T>::from_shape(textbook::weights_shape(pb.N, pb.H, pb.L, pb.S, /*average=*/false, c.g.batched));
      fast_attention(pb, weights.data());
      return weights;
    }
  }
  return std::nullopt;  // every kernel is a case above
}

// The fast and memory-efficient paths, owning what they keep between calls: W^T for the
// forward and the interleaved weights for the decoding step, each made once per version
// of the weights, when first needed, and shared by every thread's calls (a call holds its
// own reference, so it never reads a copy that another thread freed).
template <class T>
class Engine {
public:
  Engine() = default;
  Engine(const Engine& other) {  // equal versions, equal weights: the copies are shared
    const std::lock_guard<std::mutex> lock(other.mutex_);
    transposed_ = other.transposed_, decode_weights_ = other.decode_weights_;
  }
  Engine& operator=(const Engine& other) {
    if (this != &other) {
      const std::scoped_lock<std::mutex, std::mutex> lock(mutex_, other.mutex_);
      transposed_ = other.transposed_, decode_weights_ = other.decode_weights_;
    }
    return *this;
  }
  ~Engine() = default;

  // Steps 3 to 10 of forward(), after the shapes (step 1) and the masks (step 2, made
  // step 7's mask at S'), with step 8's kernel as the API chose it (choose_kernel,
  // api/attention_paths.hpp).
  Output<T> forward(const Options& options, const textbook::Parameters<T>& params, const xt::xarray<T>& query,
                    const xt::xarray<T>& key, const xt::xarray<T>& value, const Geometry& g,
                    const textbook::MergedMask<T>& mask, const StaticKV<T>& statics, AttentionKernel kernel,
                    double dropout_p, Generator& generator) {
    const Sizes s(options);
    const std::size_t L = g.L, N = g.N, E = s.E;
    const std::size_t S = statics.k ? statics.k.S : g.S;  // the keys' length: static_k's when given
    // The library's threads split the GEMMs' rows (platform/threads.hpp); below ~20 MFLOP a forward
    // is over before a second thread would start.
    const double flops = 8.0 * double(L * N) * double(E * E) + 4.0 * double(N * L * S) * double(E);
    Workspace<T>& ws = Workspace<T>::of_this_thread();
    const auto wt = transposed(params);  // W^T of this version of the weights
    const FastCall<T> c{
        g, E, s.H, s.D, ws, threads_for(flops, /*threshold=*/2e7, engine_threads()), /*scale_q=*/true, &wt->packed};

    // 3) in-projection, q scaled by sqrt(1/D) in its buffer as it is written (c.scale_q)
    Projection<T> p = project(c, params, *wt, query, key, value, statics);  // q (L, N, E), k and v (S, N, E)
    // 5) the heads: no copy, head h of q, k and v is the strided view at column h*D (StridedHeads)
    // 4), 6) bias_k/bias_v and the zero key: k and v copied once into (S', N, E)
    if (options.add_bias_kv || options.add_zero_attn) extend_keys(c, options, params, statics, p);
    const std::size_t S_total = S + options.add_bias_kv + options.add_zero_attn;  // S'
    // 7) the mask, made at S': the kernels add per_query(b, i, j) + per_key(n, j) (mask_rows)

    // 8) attention per head, into the heads' columns of one buffer in the query's layout
    T* heads = ws.get(L * N * E);  // (L, N, E), or (N, L, E) batch_first
    AttentionProblem<T> pb{{p.q.data, p.q.row_stride, p.q.batch_stride, 0},
                           p.k,
                           p.v,
                           mask_rows(mask, L, S_total),
                           N,
                           s.H,
                           L,
                           S_total,
                           s.D,
                           {heads, row_stride_of(g.query, E), batch_stride_of(g.query, E), 0},
                           dropout_p,
                           &generator,
                           &ws.scratch,
                           c.threads};
    Output<T> out;
    out.attn_output_weights = attend(c, pb, kernel);  // 10) the weights, in the caller's layout

    // 9), 10) out_proj: one GEMM, (L*N, E) x (E, E) -> (L*N, E), into the returned tensor,
    //    whose layout is the caller's, the query's: (L, N, E), (N, L, E) batch_first or (L, E) unbatched
    out.attn_output = xt::xarray<T>::from_shape(query.shape());
    const T* bias = params.out_proj_bias ? params.out_proj_bias->data() : nullptr;
    parallel_linear_into(heads, L * N, E, with_packed(c, LinearWeight<T>{wt->out_proj.data(), E, true}, L * N, E, E), E,
                         bias, out.attn_output.data(), c.threads);
    ws.keep_within_limit();  // nothing points into the buffers any more
    return out;
  }

  // W^T for `params`, made now if the weights changed since it was last made
  // (training_forward.hpp uses it too).
  std::shared_ptr<const TransposedWeights<T>> transposed(const textbook::Parameters<T>& params) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!transposed_ || transposed_->version != params.version())
      transposed_ = std::make_shared<const TransposedWeights<T>>(params);
    return transposed_;
  }

  // The decoding step's interleaved copy of `params` (decode_weights.hpp), made now if the
  // weights changed since it was last made.
  std::shared_ptr<const DecodeWeights<T>> decode_weights(const textbook::Parameters<T>& params) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (!decode_weights_ || decode_weights_->version != params.version())
      decode_weights_ = std::make_shared<const DecodeWeights<T>>(params);
    return decode_weights_;
  }

private:
  mutable std::mutex mutex_;
  std::shared_ptr<const TransposedWeights<T>> transposed_;
  std::shared_ptr<const DecodeWeights<T>> decode_weights_;
};

}  // namespace mha::detail
