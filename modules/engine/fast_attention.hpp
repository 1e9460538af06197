// modules/engine/fast_attention.hpp — the attention of every batch-head as two GEMMs and one softmax pass.
//
// The same mathematics as textbook/attention.hpp (scaled_dot_product_attention), arranged for speed:
//   - q, k and v stay where the in-projection put them, in (L, N, E) or (L, N, 3E)
//     buffers; a head is a strided view into them (leading dimension N*E or N*3E);
//   - scores = q_h . k_h^T is a GEMM on those views, output = P . v_h one on v_h's rows
//     copied next to each other (contiguous_values: S*D values, read faster); for float
//     on AVX-512 both run on attention_tiles.hpp instead, k_h^T copied once per head too, in
//     blocks of query rows whose scores stay in L2;
//   - the mask add, the row maximum, exp and the normalisation are one pass per row,
//     step 7's mask read as its two broadcast parts (MaskRows), never written out as a
//     (N*H, L, S) tensor; when the weights are not returned, the division by the row's
//     sum is left to the D entries of each row of P . v instead of the S entries of P;
//   - batch-heads run on the library's threads (platform/threads.hpp); for weights averaged over
//     heads, blocks of query rows do, each through every head, adding to the mean as it
//     goes, so that the (N*H, L, S) weights are never formed.
// The problem's types are in attention_problem.hpp, the row kernels (SoftmaxRows) in softmax_kernels.hpp.
// It mirrors the math branch of torch/nn/functional.py (multi_head_attention_forward)
// and is not a new algorithm; flash_attention.hpp is the one that never forms P.
// Internal: forward() picks it through AttentionPath::fast.
//
// Legend: L = target length, S = source length (with bias_k and the zero key, if any),
// N = batch, E = embed_dim, H = heads, D = head_dim, B = N*H, b = n*H + h.
//
// Included by modules/engine.cppm, in its module purview: no module line of its own.
// Uses textbook/random.hpp, platform/cpu.hpp, platform/threads.hpp, platform/linear.hpp, attention_problem.hpp,
// softmax_kernels.hpp, attention_tiles.hpp.

namespace mha::detail {

// How many query rows a head works on at a time: their (rows, S) scores take at most
// 4 MiB, so the scratch stays bounded however long the sequences. A block smaller than the
// head costs a library GEMM a new copy of k and v for each block; at L = S = 1024 in float
// a head still fits whole, and splitting it to fit a 1 MiB L2 cache measured slower here.
// On the tiles (attention_tiles.hpp), k and v are copied once per head, and a block's scores
// take at most 256 KiB, to stay in L2 from q . k^T through the softmax to P . v.
template <class T>
std::size_t rows_per_block(std::size_t L, std::size_t S, bool tiles = false) {
  const std::size_t bytes = tiles ? std::size_t{256} * 1024 : std::size_t{4} * 1024 * 1024;
  const std::size_t fit = bytes / sizeof(T) / std::max<std::size_t>(S, 1);
  const std::size_t least = tiles ? tile_rows : 16;
  return std::clamp<std::size_t>(tiles ? fit / tile_rows * tile_rows : fit, least, std::max<std::size_t>(L, 1));
}

// What a head's blocks multiply by, copied once per head: v_h (S, D) rows next to each
// other (contiguous_values), and on the tiles k_h^T as key_panels (else nullptr: the GEMM
// reads k_h where it is).
template <class T>
struct HeadOperands {
  const T* v = nullptr;
  const T* key_panels = nullptr;
};

// scores = q_h . k_h^T for query rows [first, first + rows) of batch entry n, head h:
// (rows, D) x (D, S) -> (rows, S), straight from the strided views.
template <class T>
void block_scores(const AttentionProblem<T>& pb, std::size_t n, std::size_t h, std::size_t first, std::size_t rows,
                  const HeadOperands<T>& operands, T* scores) {
  const T* q = pb.q.head(n, h, pb.D) + first * pb.q.row_stride;
  if constexpr (std::is_same_v<T, float>) {
    if (operands.key_panels) return tiled_scores(q, pb.q.row_stride, rows, operands.key_panels, pb.S, pb.D, scores);
  }
  gemm<T>(/*trans_a=*/false, /*trans_b=*/true, rows, pb.S, pb.D, T(1), q, pb.q.row_stride, pb.k.head(n, h, pb.D),
          pb.k.row_stride, /*beta=*/T(0), scores, pb.S);
}

// The values of batch entry n, head h as P . v_h reads them: their S rows of D copied next to
// each other into `into`, (S, D). A head's rows lie N*E or N*3E apart in the projection
// buffer; read from there, the per-head P . v at (128, 8, 512, 8) took 1.02 ms for the 64
// heads, against 0.79 ms on the copies (oneDNN, one core; within 1% either way at the
// larger benchmark shapes). The copy is S*D values against the product's 2*L*S*D flops.
template <class T>
const T* contiguous_values(const AttentionProblem<T>& pb, std::size_t n, std::size_t h, T* into) {
  if (pb.S == 0 || pb.D == 0) return into;  // nothing to read: an empty view has no data
  const T* v = pb.v.head(n, h, pb.D);
  for (std::size_t j = 0; j < pb.S; ++j) std::copy_n(v + j * pb.v.row_stride, pb.D, into + j * pb.D);
  return into;
}

// Floats of scratch that head_operands takes: v_h (S, D), and on the tiles k_h^T's panels.
template <class T>
std::size_t head_operands_size(const AttentionProblem<T>& pb, bool tiles) {
  return pb.S * pb.D + (tiles ? key_panels_size(pb.S, pb.D) : 0);
}

// The operands of batch entry n, head h, copied into `scratch` (head_operands_size): v_h
// by contiguous_values, and on the tiles k_h^T by key_panels after it.
template <class T>
HeadOperands<T> head_operands(const AttentionProblem<T>& pb, std::size_t n, std::size_t h, bool tiles, T* scratch) {
  HeadOperands<T> operands{contiguous_values(pb, n, h, scratch)};
  if constexpr (std::is_same_v<T, float>) {
    if (tiles) {
      T* panels = scratch + pb.S * pb.D;
      key_panels(pb.k.head(n, h, pb.D), pb.k.row_stride, pb.S, pb.D, panels);
      operands.key_panels = panels;
    }
  }
  return operands;
}

// output_h = P . v_h for the same rows: (rows, S) x (S, D) -> (rows, D), v_h (S, D) as
// contiguous_values made it, into columns [h*D, (h+1)*D) of the output, (L, N, E) or
// (N, L, E); on the tiles when the head's operands are. With row_scale (rows values),
// row i of output_h is then multiplied by row_scale[i]; the tiles do it as they store it.
template <class T>
void block_weighted_values(const AttentionProblem<T>& pb, std::size_t n, std::size_t h, std::size_t first,
                           std::size_t rows, const T* p, const HeadOperands<T>& operands,
                           const T* row_scale = nullptr) {
  T* out = pb.out.head(n, h, pb.D) + first * pb.out.row_stride;
  if constexpr (std::is_same_v<T, float>) {
    if (operands.key_panels)
      return tiled_weighted_values(p, rows, pb.S, operands.v, pb.D, out, pb.out.row_stride, row_scale);
  }
  gemm<T>(/*trans_a=*/false, /*trans_b=*/false, rows, pb.D, pb.S, T(1), p, pb.S, operands.v, pb.D, /*beta=*/T(0), out,
          pb.out.row_stride);
  if (row_scale)
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t d = 0; d < pb.D; ++d) out[i * pb.out.row_stride + d] *= row_scale[i];
}

// One block of query rows of batch-head b with its weights: scores, mask + softmax,
// dropout, P . v with v_h (S, D) from contiguous_values. The weights are left in `scores`
// (rows, S) and, without dropout, also added to `total` (rows, S) if one is given.
template <class T>
void attend_block(const AttentionProblem<T>& pb, std::size_t b, std::size_t first, std::size_t rows, T* scores,
                  const HeadOperands<T>& operands, T* total = nullptr) {
  const std::size_t n = b / pb.H, h = b % pb.H;
  // 1) scores = q_h . k_h^T
  block_scores(pb, n, h, first, rows, operands, scores);
  // 2) mask + softmax per row, 3) dropout (training only), row by row as the reference draws
  if (total)
    run_for_this_cpu<SoftmaxRows<RowSoftmax::weights_added_to>>(scores, first, rows, pb.S, pb.mask, b, n, total);
  else run_for_this_cpu<SoftmaxRows<RowSoftmax::weights>>(scores, first, rows, pb.S, pb.mask, b, n);
  if (pb.dropout_p > 0)
    for (std::size_t i = 0; i < rows; ++i) dropout_row(scores + i * pb.S, pb.S, pb.dropout_p, *pb.generator);
  // 4) output_h = P . v_h
  block_weighted_values(pb, n, h, first, rows, scores, operands);
}

// One block without its weights (need_weights=false, no dropout): softmax(x) v =
// (exp(x - max) v) / sum, so each row of P . v is divided by its sum, D divisions
// instead of S. sums: `rows` values of scratch; v_h (S, D) from contiguous_values.
template <class T>
void attend_block_unnormalised(const AttentionProblem<T>& pb, std::size_t b, std::size_t first, std::size_t rows,
                               T* scores, T* sums, const HeadOperands<T>& operands) {
  const std::size_t n = b / pb.H, h = b % pb.H;
  // 1) scores = q_h . k_h^T
  block_scores(pb, n, h, first, rows, operands, scores);
  // 2) mask + exp per row, the row sums aside
  run_for_this_cpu<SoftmaxRows<RowSoftmax::exponentials>>(scores, first, rows, pb.S, pb.mask, b, n, sums);
  // 3) output_h = exp(...) . v_h, 4) each row divided by its sum: times 1 / sum, the
  //    inverses in place of the sums. No keys: P . v is an empty sum, 0, with no sum.
  if (pb.S > 0)
    for (std::size_t i = 0; i < rows; ++i) sums[i] = T(1) / sums[i];
  block_weighted_values(pb, n, h, first, rows, scores, operands, pb.S > 0 ? sums : nullptr);
}

// One batch-head, a block of query rows at a time. The weights go to `weights`, this
// head's (L, S) slice of the returned weights. `scratch` holds v_h, (S, D), and on the
// tiles k_h^T's panels (key_panels_size), then, when the weights are not kept, each
// block's scores, (rows_per_block, S), and rows_per_block more for the row sums.
template <class T>
void attend_head(const AttentionProblem<T>& pb, std::size_t b, T* weights, T* scratch) {
  const std::size_t L = pb.L, S = pb.S;
  const bool tiles = use_attention_tiles<T>(S, pb.D);
  const std::size_t block = rows_per_block<T>(L, S, tiles);
  const HeadOperands<T> operands = head_operands(pb, b / pb.H, b % pb.H, tiles, scratch);
  T* scores = scratch + head_operands_size(pb, tiles);
  for (std::size_t first = 0; first < L; first += block) {
    const std::size_t rows = std::min(block, L - first);
    if (weights) attend_block(pb, b, first, rows, weights + first * S, operands);
    else if (pb.dropout_p > 0) attend_block(pb, b, first, rows, scores, operands);
    else attend_block_unnormalised(pb, b, first, rows, scores, scores + block * S, operands);
  }
}

// Every batch-head, each worker taking the next one when it is free. weights: (B, L, S)
// to keep them, or nullptr (one block of scores per worker).
template <class T>
void fast_attention(const AttentionProblem<T>& pb, T* weights) {
  const std::size_t B = pb.N * pb.H, LS = pb.L * pb.S;
  const bool tiles = use_attention_tiles<T>(pb.S, pb.D);
  const std::size_t block = rows_per_block<T>(pb.L, pb.S, tiles);
  const int threads = attention_threads(pb);
  std::vector<std::vector<T>> local;
  const std::size_t workers = std::min<std::size_t>(B, static_cast<std::size_t>(threads));
  const std::size_t scores = weights ? 0 : block * pb.S + block;
  auto& scratch = worker_scratch(pb, local, workers, head_operands_size(pb, tiles) + scores);
  parallel_for(B, threads, [&](std::size_t b, std::size_t worker) {
    attend_head(pb, b, weights ? weights + b * LS : nullptr, scratch[worker].data());
  });
}

// How many blocks of query rows each sequence is cut into, so that `threads` workers get
// equal shares of the N sequences: whole sequences when they share out evenly or are
// many, else halves, thirds, ... Each block beyond the first costs OpenBLAS another
// packing of every head's k_h and v_h.
inline std::size_t sequence_blocks(std::size_t N, std::size_t L, int threads) {
  const std::size_t workers = static_cast<std::size_t>(std::max(1, threads));
  std::size_t blocks = 1;
  while ((N * blocks) % workers != 0 && N * blocks < 4 * workers && blocks < L) ++blocks;
  return blocks;
}

// need_weights with average_attn_weights, and no dropout (whose draws go head by head):
// the weights' mean over heads, (N, L, S), written straight into `mean`, the (N*H, L, S)
// weights of every head never formed. The work is cut by query rows instead of by heads:
// a worker takes a block of rows of one sequence through every head in turn, the softmax
// adding each head's weights to those rows of the mean, then divides them by H. That is
// output_weights' sum, in its head order, and its division: the same mean to the last bit.
// On the tiles, a worker takes its rows head by head instead, k_h and v_h copied once per
// head for all of its blocks: each entry of the mean still gets the heads in order.
template <class T>
void fast_attention_averaged(const AttentionProblem<T>& pb, T* mean) {
  const std::size_t H = pb.H, L = pb.L, S = pb.S;
  const bool tiles = use_attention_tiles<T>(S, pb.D);
  const std::size_t block = rows_per_block<T>(L, S, tiles);
  const int threads = attention_threads(pb);
  const std::size_t blocks = sequence_blocks(pb.N, L, threads), units = pb.N * blocks;
  std::vector<std::vector<T>> local;
  // a head's operands (head_operands), then a block's scores (rows, S)
  const std::size_t operands = head_operands_size(pb, tiles);
  auto& scratch =
      worker_scratch(pb, local, std::min<std::size_t>(units, static_cast<std::size_t>(threads)), operands + block * S);
  parallel_for(units, threads, [&](std::size_t unit, std::size_t worker) {
    const std::size_t n = unit / blocks, part = unit % blocks;
    const std::size_t begin = L * part / blocks, end = L * (part + 1) / blocks;
    T* m = mean + n * L * S;  // (L, S): this sequence's mean
    std::fill(m + begin * S, m + end * S, T(0));
    T* copies = scratch[worker].data();  // head_operands
    T* scores = copies + operands;       // (rows, S)
    auto attend_rows = [&](std::size_t h, const HeadOperands<T>& head, std::size_t first) {
      attend_block(pb, n * H + h, first, std::min(block, end - first), scores, head, m + first * S);
    };
    if (tiles) {  // head by head, each head's operands copied once
      for (std::size_t h = 0; h < H; ++h) {
        const HeadOperands<T> head = head_operands(pb, n, h, tiles, copies);
        for (std::size_t first = begin; first < end; first += block) attend_rows(h, head, first);
      }
    } else {  // block by block, every head through each
      for (std::size_t first = begin; first < end; first += block)
        for (std::size_t h = 0; h < H; ++h) attend_rows(h, head_operands(pb, n, h, tiles, copies), first);
    }
    for (std::size_t x = begin * S; x < end * S; ++x) m[x] /= static_cast<T>(H);
  });
}

}  // namespace mha::detail
