// modules/engine/attention_tiles.hpp (internal) — a head's two products, q_h . k_h^T and P . v_h, on the
// CPU's own registers, for float on AVX-512.
//
// The same products as fast_attention.hpp's GEMMs, summed in the same order a GEMM kernel
// sums them (k = 0, 1, ..., each step one fused multiply-add per output), and arranged for
// what a head is: one side of each product is only D = E/H wide.
//   - A tile of C, 6 rows by 64 columns, lives in 24 of AVX-512's 32 vector registers. Each
//     step k loads one row of B (4 vectors of 16 floats) and multiplies it by A(i, k) of
//     each of the 6 rows, 24 fused multiply-adds; C is written once, at the end.
//   - P . v_h: B is v_h (S, D) as contiguous_values copied it, so A = P is read where
//     the softmax left it. A library GEMM first copies all of P into its own packed
//     layout (S values a row, every row); here it is not copied at all. Measured on the
//     machine of docs/performance.md, one core, (1024, 1024) x (1024, 64): 214-223 GFLOP/s
//     against oneDNN's 183-193.
//   - q_h . k_h^T: B is k_h^T, copied once per head into panels of 64 keys, (D, 64) each,
//     so that a step's load is 256 contiguous bytes and not a row of k_h^T (rows S floats
//     apart, whose 4 KiB strides alias the tile's stores). (1024, 64) x (64, 1024): 193-204
//     GFLOP/s against oneDNN's 199-206, the copy included.
//   - Both operands of a head are then copied once and kept for all its blocks of query
//     rows, so the blocks can be small enough for their scores to stay in the core's L2
//     cache between the product that writes them, the softmax and the product that reads
//     them (fast_attention.hpp). A library GEMM would copy k_h and v_h again for every block.
// Other CPUs and double use platform/linear.hpp's gemm(); has_avx512() (platform/cpu.hpp) chooses, so a test can
// run either on this CPU.
//
// Legend: S = keys, D = head_dim, rows = query rows of a block.
//
// Included by modules/engine.cppm, in its module purview: no module line of its own.
// Uses platform/cpu.hpp.

namespace mha::detail {

// Key columns per panel of k_h^T, and the widest tile: 4 vectors of 16 floats.
constexpr std::size_t tile_columns = 64;
// Rows per tile: 6 rows x 4 vectors = 24 accumulators, with the 4 of B and one of A in the
// 32 registers.
constexpr std::size_t tile_rows = 6;

// Floats of scratch that key_panels writes: ceil(S / 64) panels of (D, 64).
inline std::size_t key_panels_size(std::size_t S, std::size_t D) {
  return (S + tile_columns - 1) / tile_columns * tile_columns * D;
}

#if defined(__x86_64__)

// The 16 x 16 block r transposed in registers: lane j of r[i] becomes lane i of r[j].
// Three rounds of shuffles, each putting entries of one column closer together: pairs of
// rows interleaved (unpack), then 4 rows' entries of a column side by side in each
// 128-bit group of lanes (shuffle_ps), then the 4 groups of a column gathered into one
// register (shuffle_f32x4, twice).
[[gnu::target("avx512f"), gnu::always_inline]] inline void transpose_16x16(__m512 (&r)[16]) {
  __m512 t[16], u[16];
  // t[2i], t[2i+1]: rows 2i and 2i+1 interleaved, group g = (a_4g, b_4g, a_4g+1, b_4g+1), (a_4g+2, ...)
  for (std::size_t i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4i+c], group g: column 4g+c of rows 4i .. 4i+3
  for (std::size_t i = 0; i < 4; ++i) {
    u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  // column 4g+c is group g of u[c], u[4+c], u[8+c], u[12+c], in that order
  for (std::size_t c = 0; c < 4; ++c) {
    const __m512 even_low = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);  // groups 0, 2 of each
    const __m512 odd_low = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);   // groups 1, 3 of each
    const __m512 even_high = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 odd_high = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
    r[c] = _mm512_shuffle_f32x4(even_low, even_high, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(even_low, even_high, 0xDD);
    r[4 + c] = _mm512_shuffle_f32x4(odd_low, odd_high, 0x88);
    r[12 + c] = _mm512_shuffle_f32x4(odd_low, odd_high, 0xDD);
  }
}

// A lane mask of the first `count` lanes, 1 to 16.
inline __mmask16 first_lanes(std::size_t count) {
  return static_cast<__mmask16>(count >= 16 ? 0xFFFFu : (1u << count) - 1u);
}

// C (R, 16 V) = A (R, K) . B (K, 16 V), all row-major with leading dimensions; the last
// vector of each row of B and C holds `last` columns (a lane mask). R and V are constants,
// so acc is registers and both loops unroll. With row_scale, row r of C is multiplied by
// row_scale[r] as it is stored: the same rounding as storing it and multiplying after.
template <std::size_t R, std::size_t V>
[[gnu::target("avx512f,avx512dq,avx2,fma"), gnu::always_inline]] inline void tile_product(
    std::size_t K, const float* a, std::size_t lda, const float* b, std::size_t ldb, float* c, std::size_t ldc,
    const float* row_scale, __mmask16 last) {
  __m512 acc[R][V];
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  for (std::size_t k = 0; k < K; ++k) {
    __m512 bk[V];  // row k of B
    for (std::size_t v = 0; v < V; ++v)
      bk[v] = v + 1 == V ? _mm512_maskz_loadu_ps(last, b + k * ldb + 16 * v) : _mm512_loadu_ps(b + k * ldb + 16 * v);
    for (std::size_t r = 0; r < R; ++r) {
      const __m512 ark = _mm512_set1_ps(a[r * lda + k]);  // A(r, k) in every lane
      for (std::size_t v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(ark, bk[v], acc[r][v]);
    }
  }
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t v = 0; v < V; ++v) {
      if (row_scale) acc[r][v] = _mm512_mul_ps(acc[r][v], _mm512_set1_ps(row_scale[r]));
      if (v + 1 == V) _mm512_mask_storeu_ps(c + r * ldc + 16 * v, last, acc[r][v]);
      else _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
    }
}

// R rows of C, 64 columns at a time: `columns` columns in all; row_scale as tile_product.
template <std::size_t R>
[[gnu::target("avx512f,avx512dq,avx2,fma")]] void rows_product(std::size_t columns, std::size_t K, const float* a,
                                                               std::size_t lda, const float* b, std::size_t ldb,
                                                               float* c, std::size_t ldc, const float* row_scale) {
  for (std::size_t j = 0; j < columns; j += tile_columns) {
    const std::size_t width = std::min(tile_columns, columns - j), vectors = (width + 15) / 16;
    const std::size_t in_last = width - 16 * (vectors - 1);  // 1 to 16
    const __mmask16 last = first_lanes(in_last);
    switch (vectors) {
      case 1:
        tile_product<R, 1>(K, a, lda, b + j, ldb, c + j, ldc, row_scale, last);
        break;
      case 2:
        tile_product<R, 2>(K, a, lda, b + j, ldb, c + j, ldc, row_scale, last);
        break;
      case 3:
        tile_product<R, 3>(K, a, lda, b + j, ldb, c + j, ldc, row_scale, last);
        break;
      default:
        tile_product<R, 4>(K, a, lda, b + j, ldb, c + j, ldc, row_scale, last);
        break;
    }
  }
}

// C (rows, columns) = A (rows, K) . B (K, columns), in tiles of 6 rows by 64 columns, the
// last ones narrower; with row_scale (rows values), row i of C multiplied by row_scale[i].
inline void tiled_product(std::size_t rows, std::size_t columns, std::size_t K, const float* a, std::size_t lda,
                          const float* b, std::size_t ldb, float* c, std::size_t ldc,
                          const float* row_scale = nullptr) {
  auto scale_from = [&](std::size_t i) { return row_scale ? row_scale + i : nullptr; };
  std::size_t i = 0;
  for (; i + tile_rows <= rows; i += tile_rows)
    rows_product<tile_rows>(columns, K, a + i * lda, lda, b, ldb, c + i * ldc, ldc, scale_from(i));
  // the last 1 to 5 rows, if any: rows_product for that many rows
  using PartTile = void (*)(std::size_t, std::size_t, const float*, std::size_t, const float*, std::size_t, float*,
                            std::size_t, const float*);
  static constexpr PartTile part_tile[tile_rows] = {nullptr,         rows_product<1>, rows_product<2>,
                                                    rows_product<3>, rows_product<4>, rows_product<5>};
  if (i < rows) part_tile[rows - i](columns, K, a + i * lda, lda, b, ldb, c + i * ldc, ldc, scale_from(i));
}

#endif

// k_h^T (D, S) as panels of 64 keys: panel p holds keys [64p, 64p + 64), (D, 64), row d
// the d-th entry of each key; the last panel's missing keys are 0 (never stored in C).
// k: key 0 of the head, key j at k + j * row_stride. Each key is read whole, its D values
// in a row as the projection left them, 16 keys by 16 of their entries at a time, and
// each such block is transposed in registers (transpose_16x16). Copied a value at a time,
// the panels took a third as long as the head's two products at (128, 8, 512, 8) (perf,
// 3.2% of the forward's samples against 9.4%).
#if defined(__x86_64__)
[[gnu::target("avx512f")]]
#endif
inline void
key_panels([[maybe_unused]] const float* k, [[maybe_unused]] std::size_t row_stride, [[maybe_unused]] std::size_t S,
           [[maybe_unused]] std::size_t D, [[maybe_unused]] float* into) {
#if defined(__x86_64__)
  for (std::size_t first = 0; first < S; first += tile_columns) {
    float* panel = into + first * D;  // (D, 64)
    const std::size_t keys = std::min(tile_columns, S - first);
    for (std::size_t j = 0; j < tile_columns; j += 16)  // keys [first + j, first + j + 16)
      for (std::size_t d = 0; d < D; d += 16) {         // their entries [d, d + 16)
        const std::size_t entries = std::min<std::size_t>(16, D - d);
        __m512 block[16];  // row i: key first + j + i, 0 past the last key
        for (std::size_t i = 0; i < 16; ++i)
          block[i] = j + i < keys ? _mm512_maskz_loadu_ps(first_lanes(entries), k + (first + j + i) * row_stride + d)
                                  : _mm512_setzero_ps();
        transpose_16x16(block);  // row e: entry d + e of the 16 keys
        for (std::size_t e = 0; e < entries; ++e) _mm512_storeu_ps(panel + (d + e) * tile_columns + j, block[e]);
      }
  }
#endif
}

// Whether this call's products run on the tiles: float, a CPU (or a test's limit) with
// AVX-512, and something to multiply.
template <class T>
bool use_attention_tiles(std::size_t S, std::size_t D) {
#if defined(__x86_64__)
  return std::is_same_v<T, float> && has_avx512() && S > 0 && D > 0;
#else
  return false;
#endif
}

// scores (rows, S) = q (rows, D) . k_h^T, k_h^T as key_panels made it; q's rows q_stride
// apart, the scores' S.
inline void tiled_scores([[maybe_unused]] const float* q, [[maybe_unused]] std::size_t q_stride,
                         [[maybe_unused]] std::size_t rows, [[maybe_unused]] const float* panels,
                         [[maybe_unused]] std::size_t S, [[maybe_unused]] std::size_t D,
                         [[maybe_unused]] float* scores) {
#if defined(__x86_64__)
  for (std::size_t first = 0; first < S; first += tile_columns)
    tiled_product(rows, std::min(tile_columns, S - first), D, q, q_stride, panels + first * D, tile_columns,
                  scores + first, S);
#endif
}

// out (rows, D) = p (rows, S) . v (S, D), v contiguous; out's rows out_stride apart. With
// row_scale, row i of out is multiplied by row_scale[i] as it is stored.
inline void tiled_weighted_values([[maybe_unused]] const float* p, [[maybe_unused]] std::size_t rows,
                                  [[maybe_unused]] std::size_t S, [[maybe_unused]] const float* v,
                                  [[maybe_unused]] std::size_t D, [[maybe_unused]] float* out,
                                  [[maybe_unused]] std::size_t out_stride,
                                  [[maybe_unused]] const float* row_scale = nullptr) {
#if defined(__x86_64__)
  tiled_product(rows, D, S, p, S, v, D, out, out_stride, row_scale);
#endif
}

}  // namespace mha::detail
