// modules/engine/softmax_kernels.hpp (internal) — the softmax of one row of scores, fast, and the SIMD
// level it runs at.
//
// The same mathematics as softmax_last_dim in textbook/attention.hpp, arranged for speed: the mask add
// and the row maximum are one pass, exp and the sum a second, the normalisation a third,
// each written so that the compiler vectorises it. exp is Cephes' expf, inlined, because a
// library call per element would not vectorise. The kernels are compiled three times, for
// baseline x86-64 (SSE2, 4 floats a vector), AVX2 + FMA (8) and AVX-512 (16), and
// run_for_this_cpu() picks one at run time (platform/cpu.hpp): the library stays buildable and
// runnable on any x86-64.
//
// Included by modules/engine.cppm, in its module purview: no module line of its own.
// Uses platform/cpu.hpp, textbook/random.hpp, textbook/attention.hpp.

namespace mha::detail {

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

// Mask add and exp of one row of scores, in place, without the division: row[j] =
// exp(row[j] + mask[j] - max), returning the row's sum, by which the caller divides where
// it is cheapest (masked_softmax_row divides the row; fast_attention.hpp the row of P . v).
// A row whose every score is -inf gives NaN, as torch.softmax: -inf - (-inf) = NaN.
template <class T>
[[gnu::always_inline]] inline T masked_exp_row(T* row, std::size_t n, const T* attn, const T* padding) {
  const T max = add_masks_and_max(row, n, attn, padding);
  return exp_and_sum(row, n, max);
}

// Mask add and softmax of one row of scores, numerically stable, in place.
template <class T>
[[gnu::always_inline]] inline void masked_softmax_row(T* row, std::size_t n, const T* attn, const T* padding) {
  const T sum = masked_exp_row(row, n, attn, padding);
  // One division a row, then S multiplications: x * (1/sum) differs from x / sum by at most
  // a rounding of 1/sum.
  const T inverse = T(1) / sum;
#pragma clang loop vectorize(enable) interleave_count(1)
  for (std::size_t j = 0; j < n; ++j) row[j] *= inverse;
}

// masked_softmax_row, each weight also added to total[j]: the running sum over heads of
// the weights averaged over heads (fast_attention.hpp), in the pass that writes them.
template <class T>
[[gnu::always_inline]] inline void masked_softmax_row_added_to(T* row, std::size_t n, const T* attn, const T* padding,
                                                               T* total) {
  const T sum = masked_exp_row(row, n, attn, padding);
  const T inverse = T(1) / sum;
#pragma clang loop vectorize(enable) interleave_count(1)
  for (std::size_t j = 0; j < n; ++j) {
    row[j] *= inverse;
    total[j] += row[j];
  }
}

// Dropout on one row of weights, drawing in the reference's order (row by row), with
// the reference's keep scale (dropout_scale in textbook/attention.hpp).
template <class T>
void dropout_row(T* row, std::size_t n, double p, Generator& generator) {
  const T scale = textbook::dropout_scale<T>(p);
  // Multiplied by 0 or 1 / (1 - p), as PyTorch's dropout does: a dropped NaN stays NaN.
  for (std::size_t j = 0; j < n; ++j) row[j] *= generator.bernoulli(p) ? T(0) : scale;
}

// Kernel::run(args...) compiled for AVX2 + FMA, and for AVX-512: Kernel::run and what it
// calls are always_inline, so their loops are generated with the caller's instruction set.
#if defined(__x86_64__)
template <class Kernel, class... Args>
[[gnu::target("avx2,fma")]] void run_avx2(Args&&... args) {
  Kernel::run(std::forward<Args>(args)...);
}
template <class Kernel, class... Args>
[[gnu::target("avx512f,avx512dq,avx2,fma")]] void run_avx512(Args&&... args) {
  Kernel::run(std::forward<Args>(args)...);
}
#endif

// Kernel::run(args...) at the best SIMD level this CPU runs (or a test allows, platform/cpu.hpp).
template <class Kernel, class... Args>
void run_for_this_cpu(Args&&... args) {
#if defined(__x86_64__)
  if (has_avx512()) return run_avx512<Kernel>(std::forward<Args>(args)...);
  if (has_avx2()) return run_avx2<Kernel>(std::forward<Args>(args)...);
#endif
  Kernel::run(std::forward<Args>(args)...);
}

}  // namespace mha::detail
