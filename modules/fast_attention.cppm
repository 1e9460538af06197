// mha:fast_attention — the attention of every batch-head as two GEMMs and one softmax pass.
//
// The same mathematics as :attention (scaled_dot_product_attention), arranged for speed:
//   - q, k and v stay where the in-projection put them, in (L, N, E) or (L, N, 3E)
//     buffers; a head is a strided view into them (leading dimension N*E or N*3E), so
//     nothing is copied per head;
//   - scores = q_h . k_h^T and output = P . v_h are GEMMs on those views (OpenBLAS);
//   - the mask add, the row maximum, exp and the normalisation are one pass per row,
//     the mask read from attn_mask and key_padding_mask as given, never merged into a
//     (N*H, L, S) tensor;
//   - batch-heads run on the library's threads (:threads).
// The problem's types are in :attention_problem, the row kernels in :softmax_kernels.
// It mirrors the math branch of torch/nn/functional.py (multi_head_attention_forward)
// and is not a new algorithm; :flash_attention is the one that never forms P.
// Internal: forward() picks it through AttentionPath::fast.
//
// Legend: L = target length, S = source length (with bias_k and the zero key, if any),
// N = batch, E = embed_dim, H = heads, D = head_dim, B = N*H, b = n*H + h.
module;
#include "third_party.hpp"

module mha:fast_attention;

import :random;
import :threads;
import :linear;
import :attention_problem;
import :softmax_kernels;

namespace mha::detail {

// Mask + softmax of `rows` rows of one batch-head's scores, starting at query row `first`:
// the kernel that run_for_this_cpu compiles once per SIMD level.
struct SoftmaxRows {
  template <class T>
  [[gnu::always_inline]] static void run(T* scores, std::size_t first, std::size_t rows, std::size_t S,
                                         const AdditiveMasks<T>& masks, std::size_t b, std::size_t n) {
    const T* padding = masks.padding_row(n);
    for (std::size_t i = 0; i < rows; ++i) masked_softmax_row(scores + i * S, S, masks.attn_row(b, first + i), padding);
  }
};

// How many query rows a head works on at a time: their (rows, S) scores take at most
// 4 MiB, so the scratch stays bounded however long the sequences. A block smaller than the
// head costs OpenBLAS a new packing of k and v for each block; at L = S = 1024 in float a
// head still fits whole, and splitting it to fit a 1 MiB L2 cache measured slower here.
template <class T>
std::size_t rows_per_block(std::size_t L, std::size_t S) {
  const std::size_t fit = (std::size_t{4} * 1024 * 1024 / sizeof(T)) / std::max<std::size_t>(S, 1);
  return std::clamp<std::size_t>(fit, 16, std::max<std::size_t>(L, 1));
}

// One batch-head, a block of query rows at a time: scores, mask + softmax, dropout, P . v.
// The scores go to `weights`, this head's (L, S) slice of the returned weights, or, when
// the weights are not kept, to `scratch`, one block's (rows_per_block, S).
template <class T>
void attend_head(const AttentionProblem<T>& pb, std::size_t b, T* weights, T* scratch) {
  const std::size_t n = b / pb.H, h = b % pb.H, L = pb.L, S = pb.S, D = pb.D;
  const std::size_t block = rows_per_block<T>(L, S);
  for (std::size_t first = 0; first < L; first += block) {
    const std::size_t rows = std::min(block, L - first);
    T* scores = weights ? weights + first * S : scratch;  // (rows, S)
    // 1) scores = q_h . k_h^T: (rows, D) x (D, S) -> (rows, S), straight from the strided views
    const T* q = pb.q.head(n, h, D) + first * pb.q.row_stride;
    gemm<T>(/*trans_a=*/false, /*trans_b=*/true, rows, S, D, T(1), q, pb.q.row_stride, pb.k.head(n, h, D),
            pb.k.row_stride, /*beta=*/T(0), scores, S);
    // 2) mask + softmax per row, 3) dropout (training only), row by row as the reference draws
    run_for_this_cpu<SoftmaxRows>(scores, first, rows, S, pb.masks, b, n);
    if (pb.dropout_p > 0)
      for (std::size_t i = 0; i < rows; ++i) dropout_row(scores + i * S, S, pb.dropout_p, *pb.generator);
    // 4) output_h = P . v_h: (rows, S) x (S, D) -> (rows, D), into columns [h*D, (h+1)*D) of (L, N, E)
    T* out = pb.out.head(n, h, D) + first * pb.out.row_stride;
    gemm<T>(/*trans_a=*/false, /*trans_b=*/false, rows, D, S, T(1), scores, S, pb.v.head(n, h, D), pb.v.row_stride,
            /*beta=*/T(0), out, pb.out.row_stride);
  }
}

// Every batch-head, each worker taking the next one when it is free. weights: (B, L, S)
// to keep them, or nullptr (one block of scores per worker).
template <class T>
void fast_attention(const AttentionProblem<T>& pb, T* weights) {
  const std::size_t B = pb.N * pb.H, LS = pb.L * pb.S;
  const int threads = attention_threads(pb);
  std::vector<std::vector<T>> local;
  const std::size_t workers = std::min<std::size_t>(B, static_cast<std::size_t>(threads));
  auto& scratch = worker_scratch(pb, local, workers, weights ? 0 : rows_per_block<T>(pb.L, pb.S) * pb.S);
  parallel_for(B, threads, [&](std::size_t b, std::size_t worker) {
    attend_head(pb, b, weights ? weights + b * LS : nullptr, scratch[worker].data());  // (rows_per_block, S)
  });
}

}  // namespace mha::detail
