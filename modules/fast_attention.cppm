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
// It mirrors the math branch of torch/nn/functional.py (multi_head_attention_forward)
// and is not a new algorithm; :flash_attention is the one that never forms P.
// Internal: forward() picks it through AttentionPath::fast.
//
// Legend: L = target length, S = source length (with bias_k and the zero key, if any),
// N = batch, E = embed_dim, H = heads, D = head_dim, B = N*H, b = n*H + h.
module;
#include "third_party.hpp"

module mha:fast_attention;

import :error;
import :random;
import :detail;
import :threads;
import :cpu;

namespace mha::detail {

// A sequence-first tensor seen head by head: position i of batch n, head h starts at
// data + i*row_stride + n*batch_stride + h*D, and a head's D values are contiguous.
template <class T>
struct StridedHeads {
  const T* data = nullptr;
  std::size_t row_stride = 0;    // N*E in (L, N, E), N*3E in (L, N, 3E)
  std::size_t batch_stride = 0;  // E or 3E
  // An empty tensor has no data: its heads are null too (an offset on null is undefined).
  const T* head(std::size_t n, std::size_t h, std::size_t D) const {
    return data == nullptr ? nullptr : data + n * batch_stride + h * D;
  }
};

// Where the heads' outputs go: like StridedHeads, writable.
template <class T>
struct OutputHeads {
  T* data = nullptr;
  std::size_t row_stride = 0, batch_stride = 0;
  T* head(std::size_t n, std::size_t h, std::size_t D) const {
    return data == nullptr ? nullptr : data + n * batch_stride + h * D;
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
  StridedHeads<T> q, k, v;  // q (L, N, E) already scaled by 1/sqrt(D); k, v (S, N, E)
  AdditiveMasks<T> masks;
  std::size_t N = 0, H = 0, L = 0, S = 0, D = 0;
  OutputHeads<T> out;  // (L, N, E) or (N, L, E): head h of batch n at columns [h*D, (h+1)*D)
  double dropout_p = 0;
  Generator* generator = nullptr;
  std::vector<std::vector<T>>* scratch = nullptr;  // one buffer per worker, kept between calls
  int threads = 1;  // how many threads the batch-heads may run on (:threads, engine_threads)
};

// Scratch buffer `slot` of at least `size` values: the caller's, or a local one.
template <class T>
std::vector<T>& scratch_buffer(const AttentionProblem<T>& pb, std::vector<T>& local, std::size_t slot,
                               std::size_t size) {
  std::vector<T>& buffer = pb.scratch ? (*pb.scratch)[slot] : local;
  if (buffer.size() < size) buffer.resize(size);
  return buffer;
}

// y (rows, out) = x (rows, in) W^T + b, given W^T (in, out) with leading dimension ldw: one
// GEMM, the bias broadcast first and the product added on top with beta = 1.
template <class T>
void linear_into(const T* x, std::size_t rows, std::size_t in, const T* weight_t, std::size_t ldw, std::size_t out,
                 const T* bias, T* y) {
  for (std::size_t r = 0; r < rows; ++r) {
    T* yr = y + r * out;
    if (bias) std::copy(bias, bias + out, yr);
    else std::fill(yr, yr + out, T(0));
  }
  // (rows, in) x (in, out) -> (rows, out)
  gemm<T>(/*trans_a=*/false, /*trans_b=*/false, rows, out, in, T(1), x, in, weight_t, ldw, /*beta=*/T(1), y, out);
}

// linear_into with the rows split into one block per thread: each thread runs a
// single-threaded GEMM on its block, (rows/threads, in) x (in, out), against the shared W^T.
template <class T>
void parallel_linear_into(const T* x, std::size_t rows, std::size_t in, const T* weight_t, std::size_t ldw,
                          std::size_t out, const T* bias, T* y, int threads) {
  // Blocks below 32 rows would leave OpenBLAS's kernels too little to do.
  const std::size_t blocks = std::clamp<std::size_t>(rows / 32, 1, static_cast<std::size_t>(std::max(1, threads)));
  parallel_for(blocks, threads, [&](std::size_t block) {
    const std::size_t first = rows * block / blocks, last = rows * (block + 1) / blocks;
    linear_into(x + first * in, last - first, in, weight_t, ldw, out, bias, y + first * out);
  });
}

// exp(x) for the x <= 0 of a softmax, in float: Cephes' expf (range reduction by ln 2, a
// degree-6 polynomial, 2^n from the exponent bits), written without calls or branches so
// that the compiler vectorises the loop around it. exp(-inf) = 0, exp(NaN) = NaN, and
// below -87.34 (where float underflows) the result is 0. Relative error about 1e-7.
[[gnu::always_inline]] inline float exp_nonpositive(float x) {
  const float lowest = -87.33654f;
  const float xc = x < lowest ? lowest : x;  // NaN passes through (the comparison is false)
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln 2)
  float r = xc - n * 0.693359375f;  // x - n ln 2, ln 2 split in two for exactness
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  // A NaN x makes n NaN, and casting NaN to an integer is undefined: use 0 there, the NaN
  // still reaches the result through y.
  const float n_finite = n == n ? n : 0.0f;
  const float two_n = __builtin_bit_cast(float, (static_cast<std::int32_t>(n_finite) + 127) << 23);
  return x < lowest ? 0.0f : y * two_n;
}
[[gnu::always_inline]] inline double exp_nonpositive(double x) { return std::exp(x); }

// The row loops below are short (S, often 16 to 1024 floats) and run L times per head:
// each is vectorised without interleaving, so that a row of 16 is two AVX vectors rather
// than a scalar remainder.

// row[j] += attn[j] + padding[j] (PyTorch's merged mask, either part optional), and the
// row's maximum, in one pass. The maximum ignores NaN as fmax does; it is kept in 8
// partial maxima so that it vectorises.
template <bool with_attn, bool with_padding, class T>
[[gnu::always_inline]] inline T add_masks_and_max(T* row, std::size_t n, const T* attn, const T* padding) {
  constexpr std::size_t lanes = 8;
  T max[lanes];
  for (auto& m : max) m = -std::numeric_limits<T>::infinity();
  std::size_t j = 0;
  auto step = [&](std::size_t at, std::size_t lane) {
    T x = row[at];
    if constexpr (with_attn && with_padding) x += attn[at] + padding[at];
    else if constexpr (with_attn) x += attn[at];
    else if constexpr (with_padding) x += padding[at];
    if constexpr (with_attn || with_padding) row[at] = x;  // without masks the row stays as it is
    max[lane] = x > max[lane] ? x : max[lane];
  };
  for (; j + lanes <= n; j += lanes)
    for (std::size_t k = 0; k < lanes; ++k) step(j + k, k);
  for (; j < n; ++j) step(j, 0);
  T m = max[0];
  for (std::size_t k = 1; k < lanes; ++k) m = max[k] > m ? max[k] : m;
  return m;
}

template <class T>
[[gnu::always_inline]] inline T add_masks_and_max(T* row, std::size_t n, const T* attn, const T* padding) {
  if (attn && padding) return add_masks_and_max<true, true>(row, n, attn, padding);
  if (attn) return add_masks_and_max<true, false>(row, n, attn, padding);
  if (padding) return add_masks_and_max<false, true>(row, n, attn, padding);
  return add_masks_and_max<false, false>(row, n, attn, padding);
}

// row[j] = exp(row[j] - max), returning the sum. The sum may be reordered (it is a
// reduction over S terms; the order changes only the last bits).
template <class T>
[[gnu::always_inline]] inline T exp_and_sum(T* row, std::size_t n, T max) {
  T sum = 0;
  if constexpr (std::is_same_v<T, float>) {
#pragma clang fp reassociate(on)
#pragma clang loop vectorize(enable) interleave_count(1)
    for (std::size_t j = 0; j < n; ++j) {
      row[j] = exp_nonpositive(row[j] - max);
      sum += row[j];
    }
  } else {  // std::exp of double: a library call per element, nothing to vectorise
    for (std::size_t j = 0; j < n; ++j) {
      row[j] = exp_nonpositive(row[j] - max);
      sum += row[j];
    }
  }
  return sum;
}

// Mask add and softmax of one row of scores, numerically stable, in place. A row whose
// every score is -inf gives NaN, as torch.softmax: max = -inf and -inf - (-inf) = NaN.
template <class T>
[[gnu::always_inline]] inline void masked_softmax_row(T* row, std::size_t n, const T* attn, const T* padding) {
  const T max = add_masks_and_max(row, n, attn, padding);
  const T sum = exp_and_sum(row, n, max);
  // One division a row, then S multiplications: x * (1/sum) differs from x / sum by at most
  // a rounding of 1/sum.
  const T inverse = T(1) / sum;
#pragma clang loop vectorize(enable) interleave_count(1)
  for (std::size_t j = 0; j < n; ++j) row[j] *= inverse;
}

// Dropout on one row of weights, drawing in the reference's order (row by row).
template <class T>
void dropout_row(T* row, std::size_t n, double p, Generator& generator) {
  const T scale = p == 1.0 ? T(0) : T(1.0 / (1.0 - p));
  // Multiplied by 0 or 1 / (1 - p), as PyTorch's dropout does: a dropped NaN stays NaN.
  for (std::size_t j = 0; j < n; ++j) row[j] *= generator.bernoulli(p) ? T(0) : scale;
}

// The row kernels above are compiled into each caller below three times, for baseline
// x86-64 (SSE2, 4 floats a vector), for AVX2 + FMA (8) and for AVX-512 (16), and the CPU
// picks at run time (:cpu); the library itself stays buildable and runnable for any x86-64.

// Mask + softmax of `rows` rows of one batch-head's scores, starting at query row `first`.
template <class T>
[[gnu::always_inline]] inline void softmax_rows_kernel(T* scores, std::size_t first, std::size_t rows, std::size_t S,
                                                       const AdditiveMasks<T>& masks, std::size_t b, std::size_t n) {
  const T* padding = masks.padding_row(n);
  for (std::size_t i = 0; i < rows; ++i) masked_softmax_row(scores + i * S, S, masks.attn_row(b, first + i), padding);
}
#if defined(__x86_64__)
template <class T>
[[gnu::target("avx2,fma")]] void softmax_rows_avx2(T* scores, std::size_t first, std::size_t rows, std::size_t S,
                                                   const AdditiveMasks<T>& masks, std::size_t b, std::size_t n) {
  softmax_rows_kernel(scores, first, rows, S, masks, b, n);
}
template <class T>
[[gnu::target("avx512f,avx512dq,avx2,fma")]] void softmax_rows_avx512(T* scores, std::size_t first, std::size_t rows,
                                                                      std::size_t S, const AdditiveMasks<T>& masks,
                                                                      std::size_t b, std::size_t n) {
  softmax_rows_kernel(scores, first, rows, S, masks, b, n);
}
#endif
template <class T>
void softmax_rows(T* scores, std::size_t first, std::size_t rows, std::size_t S, const AdditiveMasks<T>& masks,
                  std::size_t b, std::size_t n) {
#if defined(__x86_64__)
  if (has_avx512()) return softmax_rows_avx512(scores, first, rows, S, masks, b, n);
  if (has_avx2()) return softmax_rows_avx2(scores, first, rows, S, masks, b, n);
#endif
  softmax_rows_kernel(scores, first, rows, S, masks, b, n);
}

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
    softmax_rows(scores, first, rows, S, pb.masks, b, n);
    if (pb.dropout_p > 0)
      for (std::size_t i = 0; i < rows; ++i) dropout_row(scores + i * S, S, pb.dropout_p, *pb.generator);
    // 4) output_h = P . v_h: (rows, S) x (S, D) -> (rows, D), into columns [h*D, (h+1)*D) of (L, N, E)
    T* out = pb.out.head(n, h, D) + first * pb.out.row_stride;
    gemm<T>(/*trans_a=*/false, /*trans_b=*/false, rows, D, S, T(1), scores, S, pb.v.head(n, h, D), pb.v.row_stride,
            /*beta=*/T(0), out, pb.out.row_stride);
  }
}

// Every batch-head. weights: (B, L, S) to keep them, or nullptr (scratch per worker).
// With dropout the heads run in order on one thread: the draws then come in the
// reference's order and the results equal it.
template <class T>
void fast_attention(const AttentionProblem<T>& pb, T* weights) {
  const std::size_t B = pb.N * pb.H, LS = pb.L * pb.S;
  // Threads pay off once a head is more than a few small GEMMs (2*L*S*D flops each way).
  const bool big = 4.0 * static_cast<double>(LS) * static_cast<double>(pb.D) * static_cast<double>(B) > 4e6;
  const int threads = pb.dropout_p > 0 || !big ? 1 : pb.threads;
  // One block of scores per worker, each worker taking the next head when it is free.
  const std::size_t workers = std::min<std::size_t>(B, static_cast<std::size_t>(threads));
  const std::size_t block_size = weights ? 0 : rows_per_block<T>(pb.L, pb.S) * pb.S;
  if (pb.scratch && pb.scratch->size() < workers) pb.scratch->resize(workers);
  std::atomic<std::size_t> next_head{0};
  parallel_for(workers, threads, [&](std::size_t slot) {
    std::vector<T> local;
    T* scratch = scratch_buffer(pb, local, slot, block_size).data();  // (rows_per_block, S)
    for (std::size_t b = next_head++; b < B; b = next_head++)
      attend_head(pb, b, weights ? weights + b * LS : nullptr, scratch);
  });
}

}  // namespace mha::detail
