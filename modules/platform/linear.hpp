// modules/platform/linear.hpp (internal) — the one BLAS entry point, and y = x W^T + b on it.
//
// gemm() multiplies row-major matrices with leading dimensions, so that a head can be
// multiplied in place inside a (L, N, E) tensor without copying it; the library that runs
// it is OpenBLAS, or oneDNN for a large enough float GEMM (gemm_library.hpp). linear_into() is
// y = x W^T + b on raw rows, with W as PyTorch stores it (out, in) or already transposed
// (in, out); every fast linear layer (the engine's, a KV cache's projection) is this
// function. Not exported. The textbook's linear() (textbook/in_projection.hpp) is the plain
// loop nest a reader follows, and does not come here.
//
// Legend: rows = every position of every batch entry, in = input width, out = output width.
//
// Included by modules/platform.cppm, in its module purview: no module line of its own.
// Uses threads.hpp, gemm_library.hpp.

namespace mha::detail {

// C (m, n) = alpha * op(A) op(B) + beta * C, row-major, with leading dimensions lda, ldb,
// ldc. op(A) is A (m, k) or, with trans_a, the transpose of A (k, m); likewise B.
template <class T>
void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
          const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
  using index = xt::blas_index_t;
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: BLAS would reject lda = 0, the answer is beta * C
    for (std::size_t i = 0; i < m; ++i)
      for (std::size_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    if (gemm_library_for(m, n, k) == GemmLibrary::onednn)
      return onednn_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  cxxblas::gemm<index>(cxxblas::RowMajor, trans_a ? cxxblas::Trans : cxxblas::NoTrans,
                       trans_b ? cxxblas::Trans : cxxblas::NoTrans, static_cast<index>(m), static_cast<index>(n),
                       static_cast<index>(k), alpha, a, static_cast<index>(lda), b, static_cast<index>(ldb), beta, c,
                       static_cast<index>(ldc));
}

// A linear layer's weight as a GEMM operand: W (out, in) as PyTorch stores it, or W^T
// (in, out), whose plain GEMM OpenBLAS runs without repacking W on every call (mha:engine).
// ld is the leading dimension: a block of columns of a wider W^T is a weight too. packed:
// the same W^T reordered for oneDNN's matmul (packed_linear.hpp), or nullptr.
template <class T>
struct LinearWeight {
  const T* data = nullptr;
  std::size_t ld = 0;
  bool transposed = false;  // true: data is W^T (in, out)
  const PackedWeight* packed = nullptr;
};

// y (rows, out) = x (rows, in) W^T + b: the bias broadcast over the rows first, then the
// product added on top with beta = 1, so that b + x W^T rounds as PyTorch's addmm does.
// ldy: y's leading dimension, out or more when y is a block of columns of a wider matrix.
// A float weight with its packed W^T runs on oneDNN's matmul instead, the bias added after
// the product (packed_linear.hpp), where oneDNN is the library for a GEMM of this size.
template <class T>
void linear_into(const T* x, std::size_t rows, std::size_t in, LinearWeight<T> w, std::size_t out, const T* bias, T* y,
                 std::size_t ldy) {
  if constexpr (std::is_same_v<T, float>) {
    if (w.packed && gemm_library_for(rows, out, in) == GemmLibrary::onednn &&
        w.packed->multiply(x, rows, in, out, bias, y, ldy))
      return;
  }
  for (std::size_t r = 0; r < rows; ++r) {
    T* yr = y + r * ldy;
    if (bias) std::copy(bias, bias + out, yr);
    else std::fill(yr, yr + out, T(0));
  }
  // (rows, in) x (in, out) -> (rows, out)
  gemm<T>(/*trans_a=*/false, /*trans_b=*/!w.transposed, rows, out, in, T(1), x, in, w.data, w.ld, /*beta=*/T(1), y,
          ldy);
}

template <class T>
void linear_into(const T* x, std::size_t rows, std::size_t in, LinearWeight<T> w, std::size_t out, const T* bias,
                 T* y) {
  linear_into(x, rows, in, w, out, bias, y, out);
}

// Columns [first, first + count) of a linear layer's weight: a weight of `count` outputs
// (without its packed W^T, which is all of the columns).
template <class T>
LinearWeight<T> weight_columns(LinearWeight<T> w, std::size_t first) {
  return {w.transposed ? w.data + first : w.data + first * w.ld, w.ld, w.transposed, first == 0 ? w.packed : nullptr};
}

// A block of a linear layer's output that one thread computes: rows [row, row + rows)
// and columns [col, col + cols).
struct OutputBlock {
  std::size_t row, rows, col, cols;
};

// How parallel_linear_into cuts y (rows, out) into `blocks` blocks: each thread's GEMM
// packs its share of x and all of W^T, or all of x and its share of W^T (oneDNN and
// OpenBLAS pack both operands on every call). Splitting the larger operand packs less:
// the rows when x is, the columns when W^T is (out > rows). Measured at the in-projection
// of (1024, 1, 1024, 16), (1024, 1024) x (1024, 3072) on 2 threads: 389-393 GFLOP/s by
// columns against 375-385 by rows (oneDNN, four rounds). A packed W^T (packed_linear.hpp) is
// packed once for all calls: then the rows are split (by_columns false).
inline bool split_by_columns(std::size_t rows, std::size_t out, bool packed) { return out > rows && !packed; }

inline OutputBlock output_block(std::size_t rows, std::size_t out, std::size_t blocks, std::size_t block,
                                bool by_columns) {
  if (by_columns) {  // by columns, at multiples of 16 (a cache line of floats) where there are enough
    const std::size_t unit = out >= 16 * blocks ? 16 : 1, units = out / unit;
    const std::size_t first = units * block / blocks * unit;
    const std::size_t last = block + 1 == blocks ? out : units * (block + 1) / blocks * unit;
    return {0, rows, first, last - first};
  }
  const std::size_t first = rows * block / blocks, last = rows * (block + 1) / blocks;
  return {first, last - first, 0, out};
}

// linear_into with y cut into one block per thread (output_block): each thread runs one
// GEMM on its block against x and W^T, then after_block(block) on what it wrote, while it
// is in its cache.
template <class T, class AfterBlock>
void parallel_linear_into(const T* x, std::size_t rows, std::size_t in, LinearWeight<T> w, std::size_t out,
                          const T* bias, T* y, int threads, AfterBlock after_block) {
  // Blocks below 32 rows or columns would leave OpenBLAS's kernels too little to do.
  const bool by_columns = split_by_columns(rows, out, w.packed != nullptr);
  const std::size_t blocks =
      std::clamp<std::size_t>((by_columns ? out : rows) / 32, 1, static_cast<std::size_t>(std::max(1, threads)));
  parallel_for(blocks, threads, [&](std::size_t block, std::size_t /*worker*/) {
    const OutputBlock b = output_block(rows, out, blocks, block, by_columns);
    linear_into(x + b.row * in, b.rows, in, weight_columns(w, b.col), b.cols, bias ? bias + b.col : nullptr,
                y + b.row * out + b.col, out);
    after_block(b);
  });
}

template <class T>
void parallel_linear_into(const T* x, std::size_t rows, std::size_t in, LinearWeight<T> w, std::size_t out,
                          const T* bias, T* y, int threads) {
  parallel_linear_into(x, rows, in, w, out, bias, y, threads, [](const OutputBlock&) {});
}

// gemm with C's rows split into one block per thread, each one GEMM against the whole
// of op(B). Row i of op(A) is row i of A, or column i of A with trans_a (A is
// then (k, m)), so a block of rows starts at a + first * lda, or at a + first.
template <class T>
void parallel_gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
                   std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc, int threads) {
  // Blocks below 32 rows would leave OpenBLAS's kernels too little to do. An empty sum
  // (k = 0) reads neither operand, which may then have no data to point into: one block.
  const std::size_t blocks =
      k == 0 ? 1 : std::clamp<std::size_t>(m / 32, 1, static_cast<std::size_t>(std::max(1, threads)));
  parallel_for(blocks, threads, [&](std::size_t block, std::size_t /*worker*/) {
    const std::size_t first = m * block / blocks, last = m * (block + 1) / blocks;
    gemm<T>(trans_a, trans_b, last - first, n, k, alpha, trans_a ? a + first : a + first * lda, lda, b, ldb, beta,
            c + first * ldc, ldc);
  });
}

}  // namespace mha::detail
