// modules/engine/attention_problem.hpp (internal) — what the fast kernels work on: heads as strided
// views, step 7's mask row by row, and where the output goes.
//
// The fast paths (fast_attention.hpp, flash_attention.hpp) never copy a head out of the
// projection buffers: position i of batch n, head h starts at
// data + i*row_stride + n*batch_stride + h*D. Step 7's one additive mask
// (textbook::MergedMask, textbook/masks.hpp) is read as its two broadcast parts, row by row
// (MaskRows), and added on the fly, in PyTorch's merge order: the engine never writes it out
// and never learns which kinds of mask made it. This file only describes a problem; the
// kernels solve it.
//
// Legend: L = target length, S = source length (with bias_k and the zero key, if any),
// N = batch, E = embed_dim, H = heads, D = head_dim, B = N*H, b = n*H + h.
//
// Included by modules/engine.cppm, in its module purview: no module line of its own.
// Uses textbook/random.hpp, textbook/masks.hpp, platform/threads.hpp.

namespace mha::detail {

// Steps 4 and 6 in one copy (modules/textbook/extra_keys.hpp has them one at a time):
// y (S + [bias] + zero_keys, N, E): the S keys of x, whose position j of batch entry n
// starts at x + j*row_stride + n*batch_stride, then `bias` (E) for every n if there is one,
// then `zero_keys` positions of zeros.
template <class T>
void extend_keys_into(const T* x, std::size_t row_stride, std::size_t batch_stride, std::size_t S, std::size_t N,
                      std::size_t E, const T* bias, std::size_t zero_keys, T* y) {
  for (std::size_t j = 0; j < S; ++j)
    for (std::size_t n = 0; n < N; ++n) std::copy_n(x + j * row_stride + n * batch_stride, E, y + (j * N + n) * E);
  std::size_t next = S;  // the first position after the keys copied so far
  if (bias != nullptr) {
    for (std::size_t n = 0; n < N; ++n) std::copy_n(bias, E, y + (next * N + n) * E);
    ++next;
  }
  std::fill_n(y + next * N * E, zero_keys * N * E, T(0));
}

// Dropout with a given mask (True = kept) on `count` values from `values` on, against the
// mask from `keep` on: textbook::apply_dropout_mask on one head's rows, as the kernels hold them.
template <class T>
void apply_dropout_mask(T* values, const bool* keep, std::size_t count, T scale) {
  // Multiplied by 0, not set to 0, as PyTorch's dropout does: a dropped NaN stays NaN.
  for (std::size_t i = 0; i < count; ++i) values[i] *= keep[i] ? scale : T(0);
}

// The strides of a (len, N, w) tensor in the rows of `layout`: from position i to i+1, and
// from batch entry n to n+1 (textbook::SeqFirstLayout::row gives the row itself).
inline std::size_t row_stride_of(const textbook::SeqFirstLayout& layout, std::size_t w) {
  return (layout.batch_major ? 1 : layout.N) * w;
}
inline std::size_t batch_stride_of(const textbook::SeqFirstLayout& layout, std::size_t w) {
  return (layout.batch_major ? layout.len : 1) * w;
}

// static_k or static_v of the functional form: keys or values already projected and
// split into heads, (B, S, D), that replace k or v after the in-projection (a KV cache).
// Head b starts at data + b * head_stride, its position j at + j * D: a (B, S, D) tensor
// has head_stride = S * D, a KVCache with room for more positions a larger one.
template <class T>
struct StaticHeads {
  const T* data = nullptr;  // none: k (or v) comes from the in-projection
  std::size_t B = 0, S = 0, D = 0, head_stride = 0;
  explicit operator bool() const { return data != nullptr; }
  // The heads as a (B, S, D) tensor of their own: what the reference path reads.
  xt::xtensor<T, 3> tensor() const {
    xt::xtensor<T, 3> x({B, S, D});
    for (std::size_t b = 0; b < B; ++b) std::copy_n(data + b * head_stride, S * D, x.data() + b * S * D);
    return x;
  }
};

// static_k and static_v, either or both, or neither (the module's forward).
template <class T>
struct StaticKV {
  StaticHeads<T> k, v;
  bool any() const { return bool(k) || bool(v); }
};

// A sequence-first tensor seen head by head. T is const for inputs, not for outputs.
template <class T>
struct StridedHeads {
  T* data = nullptr;
  std::size_t row_stride = 0;    // N*E in (L, N, E), N*3E in (L, N, 3E), E in (N, L, E)
  std::size_t batch_stride = 0;  // E or 3E; L*E in (N, L, E); H*S*D in static_k's (N*H, S, D)
  std::size_t head_stride = 0;   // 0: D, the heads side by side in a row; S*D in static_k's (N*H, S, D)
  // An empty tensor has no data: its heads are null too (an offset on null is undefined).
  T* head(std::size_t n, std::size_t h, std::size_t D) const {
    return data == nullptr ? nullptr : data + n * batch_stride + h * (head_stride == 0 ? D : head_stride);
  }
  // The same tensor, read-only: a buffer the kernels only read.
  operator StridedHeads<const T>() const
  requires(!std::is_const_v<T>)
  {
    return {data, row_stride, batch_stride, head_stride};
  }
  // The same tensor `offset` columns further on: k and v inside a (L, N, 3E) buffer.
  StridedHeads shifted(std::size_t offset) const {
    return {data == nullptr ? nullptr : data + offset, row_stride, batch_stride, head_stride};
  }
};

// Step 7's mask as the kernels read it, row by row, its two parts added on the fly:
// mask(b, i, j) = per_query(b or 0, i, j) + per_key(n, j), PyTorch's merge order.
template <class T>
struct MaskRows {
  const T* per_query = nullptr;     // (1 or B, L, S), or none
  bool per_query_per_head = false;  // true for (B, L, S)
  const T* per_key = nullptr;       // (N, S), or none
  std::size_t L = 0, S = 0;
  const T* per_query_row(std::size_t b, std::size_t i) const {
    return per_query ? per_query + ((per_query_per_head ? b : 0) * L + i) * S : nullptr;
  }
  const T* per_key_row(std::size_t n) const { return per_key ? per_key + n * S : nullptr; }
};

// The rows of step 7's mask, pointing into it: no copy, and nothing allocated.
template <class T>
MaskRows<T> mask_rows(const textbook::MergedMask<T>& mask, std::size_t L, std::size_t S) {
  MaskRows<T> rows;
  if (mask.per_query) rows.per_query = mask.per_query->data(), rows.per_query_per_head = mask.per_query->shape(0) > 1;
  if (mask.per_key) rows.per_key = mask.per_key->data();
  rows.L = L, rows.S = S;
  return rows;
}

// What one attention call works on.
template <class T>
struct AttentionProblem {
  StridedHeads<const T> q, k, v;  // q (L, N, E) already scaled by 1/sqrt(D); k, v (S, N, E)
  MaskRows<T> mask;               // step 7's, (B, L, S) as two broadcast parts
  std::size_t N = 0, H = 0, L = 0, S = 0, D = 0;
  StridedHeads<T> out;  // (L, N, E) or (N, L, E): head h of batch n at columns [h*D, (h+1)*D)
  double dropout_p = 0;
  Generator* generator = nullptr;
  std::vector<std::vector<T>>* scratch = nullptr;  // one buffer per worker, kept between calls
  int threads = 1;  // how many threads the batch-heads may run on (platform/threads.hpp, engine_threads)
};

// The threads the batch-heads run on. Threads pay off once the heads are more than a few
// small GEMMs (2*L*S*D flops each way). With dropout the heads run in order on one thread:
// the draws then come in the reference's order and the results equal it.
template <class T>
int attention_threads(const AttentionProblem<T>& pb) {
  if (pb.dropout_p > 0) return 1;
  const double flops = 4.0 * static_cast<double>(pb.L * pb.S) * static_cast<double>(pb.D) * double(pb.N * pb.H);
  return threads_for(flops, /*threshold=*/4e6, pb.threads);
}

// The scratch buffers of `workers` workers, each at least `size` values: the caller's
// (kept between calls), or `local` ones when the caller keeps none.
template <class T>
std::vector<std::vector<T>>& worker_scratch(const AttentionProblem<T>& pb, std::vector<std::vector<T>>& local,
                                            std::size_t workers, std::size_t size) {
  std::vector<std::vector<T>>& buffers = pb.scratch ? *pb.scratch : local;
  if (buffers.size() < workers) buffers.resize(workers);
  for (std::size_t w = 0; w < workers; ++w)
    if (buffers[w].size() < size) buffers[w].resize(size);
  return buffers;
}

}  // namespace mha::detail
