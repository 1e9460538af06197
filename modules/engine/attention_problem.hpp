// mha:attention_problem (internal) — what the fast kernels work on: heads as strided
// views, the masks as given, and where the output goes.
//
// The fast paths (:fast_attention, :flash_attention) never copy a head out of the
// projection buffers: position i of batch n, head h starts at
// data + i*row_stride + n*batch_stride + h*D. The two masks stay as the user gave them
// (after bool -> float) and are added on the fly, in PyTorch's merge order. This
// file only describes a problem; the kernels solve it.
//
// Legend: L = target length, S = source length (with bias_k and the zero key, if any),
// N = batch, E = embed_dim, H = heads, D = head_dim, B = N*H, b = n*H + h.
//
// Included by modules/engine/engine.hpp, in its module purview: no module line of its own.
// Uses :random, :threads.

namespace mha::detail {

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

// The two masks as the user gave them (after bool -> float), added on the fly:
// mask(b, i, j) = attn_mask(b or 0, i, j) + key_padding_mask(n, j), PyTorch's merge order.
template <class T>
struct AdditiveMasks {
  const T* attn_mask = nullptr;         // (1 or B, L, S), or none
  bool attn_mask_per_head = false;      // true for (B, L, S)
  const T* key_padding_mask = nullptr;  // (N, S), or none
  std::size_t L = 0, S = 0;
  const T* attn_row(std::size_t b, std::size_t i) const {
    return attn_mask ? attn_mask + ((attn_mask_per_head ? b : 0) * L + i) * S : nullptr;
  }
  const T* padding_row(std::size_t n) const { return key_padding_mask ? key_padding_mask + n * S : nullptr; }
};

// What one attention call works on.
template <class T>
struct AttentionProblem {
  StridedHeads<const T> q, k, v;  // q (L, N, E) already scaled by 1/sqrt(D); k, v (S, N, E)
  AdditiveMasks<T> masks;
  std::size_t N = 0, H = 0, L = 0, S = 0, D = 0;
  StridedHeads<T> out;  // (L, N, E) or (N, L, E): head h of batch n at columns [h*D, (h+1)*D)
  double dropout_p = 0;
  Generator* generator = nullptr;
  std::vector<std::vector<T>>* scratch = nullptr;  // one buffer per worker, kept between calls
  int threads = 1;  // how many threads the batch-heads may run on (:threads, engine_threads)
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
