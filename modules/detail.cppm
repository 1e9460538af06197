// mha:detail — internal helpers shared by the partitions; not part of the API.
//
// The one BLAS entry point (gemm on row-major matrices with leading dimensions, so that
// a head can be multiplied in place inside a (L, N, E) tensor without copying it) and
// linear(), PyTorch's torch.nn.functional.linear: y = x W^T + b.
module;
#include "third_party.hpp"

module mha:detail;

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
  cxxblas::gemm<index>(cxxblas::RowMajor, trans_a ? cxxblas::Trans : cxxblas::NoTrans,
                       trans_b ? cxxblas::Trans : cxxblas::NoTrans, static_cast<index>(m), static_cast<index>(n),
                       static_cast<index>(k), alpha, a, static_cast<index>(lda), b, static_cast<index>(ldb), beta, c,
                       static_cast<index>(ldc));
}

// y = x W^T + b over the last dimension of x, as torch.nn.functional.linear.
// x (..., in), weight (out, in), bias (out) -> (..., out)
template <class T, std::size_t N>
xt::xtensor<T, N> linear(const xt::xtensor<T, N>& x, const xt::xtensor<T, 2>& weight,
                         const std::optional<xt::xtensor<T, 1>>& bias) {
  const std::size_t in = weight.shape(1), out = weight.shape(0);
  const std::size_t rows = in == 0 ? x.size() : x.size() / in;
  auto shape = x.shape();
  shape[N - 1] = out;
  xt::xtensor<T, N> y(shape);
  // Start from the bias broadcast over the rows, then add x W^T with beta = 1.
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t j = 0; j < out; ++j) y.data()[r * out + j] = bias ? (*bias)(j) : T(0);
  // (rows, in) x (in, out) -> (rows, out)
  gemm<T>(/*trans_a=*/false, /*trans_b=*/true, rows, out, in, T(1), x.data(), in, weight.data(), in, /*beta=*/T(1),
          y.data(), out);
  return y;
}

}  // namespace mha::detail
