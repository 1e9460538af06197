// tests/host_program/host_blas.cpp — a host program's own BLAS calls: cblas.h and OpenBLAS's extensions, as a program that
// uses OpenBLAS itself has them.
#include "host_blas.hpp"

#include <cblas.h>

#include <cstddef>

std::string host_blas_kernel() { return openblas_get_corename(); }

int host_blas_threads() { return openblas_get_num_threads(); }

void host_set_blas_threads(int threads) { openblas_set_num_threads(threads); }

std::vector<float> host_sgemm() {
  constexpr std::size_t m = 96, k = 80, n = 112;  // large enough for OpenBLAS to thread it
  std::vector<float> a(m * k), b(k * n), c(m * n);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 37) % 101) / 101.0f - 0.5f;
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i * 53) % 97) / 97.0f - 0.5f;
  const auto dim = [](std::size_t x) { return static_cast<int>(x); };
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, dim(m), dim(n), dim(k), 1.0f, a.data(), dim(k), b.data(),
              dim(n), 0.0f, c.data(), dim(n));
  return c;
}
