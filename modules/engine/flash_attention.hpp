// modules/engine/flash_attention.hpp — attention without the attention matrix: tiles and an online softmax.
//
// softmax(s) . v for one query row needs, besides v, only three running values over the
// keys seen so far: the maximum m, the sum l = sum_j exp(s_j - m), and the weighted sum
// o = sum_j exp(s_j - m) v_j. A new tile of keys with a larger maximum m' rescales l and
// o by exp(m - m') and adds its own terms; at the end, output = o / l. So the scores are
// formed one (Tq, Tk) tile at a time and the (N*H, L, S) weights never exist: extra
// memory is one tile of scores and two numbers per query row, per thread.
// This is FlashAttention (Dao et al., 2022) on the CPU, with GEMMs for the tiles; see
// docs/16-online-softmax.md. PyTorch has no counterpart in torch/nn/functional.py (its
// scaled_dot_product_attention kernels do the same on GPUs). Internal: forward() picks it
// through AttentionPath::memory_efficient, and only when need_weights is false.
//
// Legend: L = target length, S = source length (with bias_k and the zero key, if any),
// N = batch, E = embed_dim, H = heads, D = head_dim, B = N*H, Tq, Tk = tile sizes.
//
// Included by modules/engine.cppm, in its module purview: no module line of its own.
// Uses textbook/random.hpp, platform/cpu.hpp, platform/threads.hpp, platform/linear.hpp, textbook/attention.hpp,
// attention_problem.hpp, softmax_kernels.hpp.

namespace mha::detail {

inline constexpr std::size_t query_tile = 128;  // Tq
inline constexpr std::size_t key_tile = 256;    // Tk: a (Tq, Tk) float tile is 128 KiB, within L2

// A (rows, cols) tile of scores for queries [i0, i0 + rows) and keys [j0, j0 + cols).
template <class T>
struct TileRows {
  T* scores;
  std::size_t rows, cols, b, i0, j0;
  const T* per_key;  // the batch entry's row of step 7's per-key mask, or none
  T* output;         // (rows, D), leading dimension ldo
  std::size_t ldo, D;
  const unsigned char* drop;  // (rows, S) dropout decisions, or none
  std::size_t S;
  T keep_scale;
};

// Mask and online softmax update of every row of a tile (online_softmax_row, softmax_kernels.hpp):
// the kernel that run_for_this_cpu (platform/cpu.hpp) compiles once per SIMD level. Its loops
// are plain ones that the compiler vectorises at that level: the vector width is not needed.
struct OnlineSoftmaxTile {
  template <std::size_t /*vector bytes*/, class T>
  [[gnu::always_inline]] static void run(const MaskRows<T>& mask, const TileRows<T>& t, OnlineSoftmax<T>& state) {
    for (std::size_t i = 0; i < t.rows; ++i) {
      T* row = t.scores + i * t.cols;
      const T* per_query = mask.per_query_row(t.b, t.i0 + i);
      const unsigned char* d = t.drop ? t.drop + i * t.S + t.j0 : nullptr;
      online_softmax_row(row, t.cols, per_query ? per_query + t.j0 : nullptr, t.per_key ? t.per_key + t.j0 : nullptr,
                         state.max[i], state.sum[i], t.output + i * t.ldo, t.D, d, t.keep_scale);
    }
  }
};

// Query rows [i0, i0 + rows) of batch-head b, all keys, tile by tile.
template <class T>
void attend_query_tile(const AttentionProblem<T>& pb, std::size_t b, std::size_t i0, std::size_t rows,
                       std::vector<T>& scores, const std::vector<unsigned char>& drop) {
  const std::size_t n = b / pb.H, h = b % pb.H, S = pb.S, D = pb.D;
  const std::size_t ldo = pb.out.row_stride;
  const T* q = pb.q.head(n, h, D) + i0 * pb.q.row_stride;
  T* out = pb.out.head(n, h, D) + i0 * ldo;  // (rows, D) with leading dimension N*E (or E batch_first)
  for (std::size_t i = 0; i < rows; ++i) std::fill(out + i * ldo, out + i * ldo + D, T(0));
  const T keep_scale = textbook::dropout_scale<T>(pb.dropout_p);
  const T* per_key = pb.mask.per_key_row(n);
  OnlineSoftmax<T> state(rows);
  for (std::size_t j0 = 0; j0 < S; j0 += key_tile) {
    const std::size_t cols = std::min(key_tile, S - j0);
    // 1) the score tile: (rows, D) x (D, cols) -> (rows, cols)
    gemm<T>(/*trans_a=*/false, /*trans_b=*/true, rows, cols, D, T(1), q, pb.q.row_stride,
            pb.k.head(n, h, D) + j0 * pb.k.row_stride, pb.k.row_stride, /*beta=*/T(0), scores.data(), cols);
    // 2) mask, then the online softmax update of each row
    TileRows<T> tile{
        scores.data(), rows, cols, b, i0, j0, per_key, out, ldo, D, drop.empty() ? nullptr : drop.data(), S,
        keep_scale};
    run_for_this_cpu<OnlineSoftmaxTile>(pb.mask, tile, state);
    // 3) o += P . v_tile: (rows, cols) x (cols, D) -> (rows, D)
    gemm<T>(/*trans_a=*/false, /*trans_b=*/false, rows, D, cols, T(1), scores.data(), cols,
            pb.v.head(n, h, D) + j0 * pb.v.row_stride, pb.v.row_stride, /*beta=*/T(1), out, ldo);
  }
  // 4) output = o / l. With no keys at all (S = 0) there is nothing to normalise: the
  // softmax of an empty row is empty and its product with v is 0, as in PyTorch.
  if (S == 0) return;
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t d = 0; d < D; ++d) out[i * ldo + d] /= state.sum[i];
}

// Every batch-head, tile by tile, each worker taking the next (batch-head, query tile)
// when it is free. With dropout, one thread and the reference's draw order: the keep
// decisions of Tq rows x S keys are drawn before their tile runs.
template <class T>
void flash_attention(const AttentionProblem<T>& pb) {
  const std::size_t B = pb.N * pb.H, L = pb.L, S = pb.S;
  const std::size_t tiles = (L + query_tile - 1) / query_tile;
  const int threads = attention_threads(pb);
  const std::size_t tasks = B * tiles;
  std::vector<std::vector<T>> local;
  const std::size_t workers = std::min<std::size_t>(tasks, static_cast<std::size_t>(threads));
  auto& scores = worker_scratch(pb, local, workers, query_tile * key_tile);  // (Tq, Tk) per worker
  std::vector<unsigned char> drop;                                           // (Tq, S), with dropout only
  parallel_for(tasks, threads, [&](std::size_t t, std::size_t worker) {
    const std::size_t b = t / tiles, i0 = (t % tiles) * query_tile, rows = std::min(query_tile, L - i0);
    if (pb.dropout_p > 0) {  // one thread (attention_threads): `drop` is this call's alone
      drop.resize(rows * S);
      for (auto& x : drop) x = pb.generator->bernoulli(pb.dropout_p) ? 1 : 0;
    }
    attend_query_tile(pb, b, i0, rows, scores[worker], drop);
  });
}

}  // namespace mha::detail
