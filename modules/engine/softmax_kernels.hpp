// modules/engine/softmax_kernels.hpp (internal) — the engine's softmax of a row of scores, every variant
// of it, fast.
//
// The same mathematics as softmax_last_dim in textbook/attention.hpp, arranged for speed: the mask add
// and the row maximum are one pass, exp and the sum a second, the normalisation a third,
// each written so that the compiler vectorises it. exp is Cephes' expf, inlined, because a
// library call per element would not vectorise. One family serves every path of the
// engine, its variants compile-time parameters: the weights (RowSoftmax::weights), the same
// added to a mean over heads (weights_added_to), the exponentials left for the caller to
// divide (exponentials: fast_attention.hpp without weights, decode_step.hpp), and the
// online softmax of flash_attention.hpp, a tile of keys at a time (online_softmax_row). This
// file is the only one that calls the exp core (exp_nonpositive, exp_and_sum) and the mask
// pass (add_masks_and_max): tests/kernel_homes_test.py keeps it so. The kernels are compiled
// three times, for baseline x86-64 (SSE2, 4 floats a vector), AVX2 + FMA (8) and AVX-512
// (16), and run_for_this_cpu() (platform/cpu.hpp) picks one at run time: the library stays
// buildable and runnable on any x86-64.
//
// Included by modules/engine.cppm, in its module purview: no module line of its own.
// Uses textbook/random.hpp, textbook/attention.hpp, attention_problem.hpp.

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

// row[j] += per_query[j] + per_key[j] (step 7's mask, its two parts, either optional:
// MaskRows), and the row's maximum, in one pass. The maximum ignores NaN as fmax does; it
// is kept in 8 partial maxima so that it vectorises.
template <bool with_per_query, bool with_per_key, class T>
[[gnu::always_inline]] inline T add_masks_and_max(T* row, std::size_t n, const T* per_query, const T* per_key) {
  constexpr std::size_t lanes = 8;
  T max[lanes];
  for (auto& m : max) m = -std::numeric_limits<T>::infinity();
  std::size_t j = 0;
  auto step = [&](std::size_t at, std::size_t lane) {
    T x = row[at];
    if constexpr (with_per_query && with_per_key) x += per_query[at] + per_key[at];
    else if constexpr (with_per_query) x += per_query[at];
    else if constexpr (with_per_key) x += per_key[at];
    if constexpr (with_per_query || with_per_key) row[at] = x;  // without masks the row stays as it is
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
[[gnu::always_inline]] inline T add_masks_and_max(T* row, std::size_t n, const T* per_query, const T* per_key) {
  if (per_query && per_key) return add_masks_and_max<true, true>(row, n, per_query, per_key);
  if (per_query) return add_masks_and_max<true, false>(row, n, per_query, per_key);
  if (per_key) return add_masks_and_max<false, true>(row, n, per_query, per_key);
  return add_masks_and_max<false, false>(row, n, per_query, per_key);
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

// The family: the mask add and softmax of one row, in place, each variant a compile-time
// parameter, so that every caller's row loop is the same three passes above, and no
// variant costs a branch inside them. What a row leaves:
enum class RowSoftmax {
  weights,           // softmax(row + mask): the row divided by its sum
  weights_added_to,  // the same, each weight also added to total[j]: the running sum over heads
                     // of the weights averaged over heads (fast_attention.hpp), in the pass that
                     // writes them
  exponentials,      // exp(row + mask - max) without the division, by which the caller divides
                     // where it is cheapest (fast_attention.hpp and decode_step.hpp: the D
                     // entries of the row of P . v, not the S of P)
};

// The softmax of one row of scores, step 7's mask added (its two parts, either optional),
// numerically stable, in place; returns the row's sum of exponentials. total:
// (n), for weights_added_to only. A row whose every score is -inf gives NaN, as
// torch.softmax: -inf - (-inf) = NaN.
template <RowSoftmax kind, class T>
[[gnu::always_inline]] inline T masked_softmax_row(T* row, std::size_t n, const T* per_query, const T* per_key,
                                                   T* total = nullptr) {
  const T max = add_masks_and_max(row, n, per_query, per_key);
  const T sum = exp_and_sum(row, n, max);
  if constexpr (kind != RowSoftmax::exponentials) {
    // One division a row, then S multiplications: x * (1/sum) differs from x / sum by at
    // most a rounding of 1/sum.
    const T inverse = T(1) / sum;
#pragma clang loop vectorize(enable) interleave_count(1)
    for (std::size_t j = 0; j < n; ++j) {
      row[j] *= inverse;
      if constexpr (kind == RowSoftmax::weights_added_to) total[j] += row[j];
    }
  }
  return sum;
}

// The online softmax (flash_attention.hpp): softmax(s) . v over keys that come a tile at a
// time, each row keeping only its running maximum m, sum l = sum_j exp(s_j - m) and
// weighted sum o = sum_j exp(s_j - m) v_j over the keys seen so far. The running m and l of
// `rows` query rows (o is in the output itself):
template <class T>
struct OnlineSoftmax {
  std::vector<T> max, sum;  // (rows) each
  explicit OnlineSoftmax(std::size_t rows) : max(rows, -std::numeric_limits<T>::infinity()), sum(rows, T(0)) {}
};

// One row of a tile of scores meets its running max and sum: masks added, the tile's
// maximum raises m, l and o (output_row, D) are rescaled by exp(m_old - m_new), and the row
// becomes p_j = exp(s_j - m_new) (times the dropout keep/scale, drop giving the row's keep
// decisions, or none). o is the attention's, but rescaling it here keeps the update one
// pass, as it was measured. While every score so far is -inf the row stays all zero and m
// stays -inf; a row that ends so gives 0 / 0 = NaN, as the softmax of an all -inf row.
template <class T>
[[gnu::always_inline]] inline void online_softmax_row(T* row, std::size_t n, const T* per_query, const T* per_key,
                                                      T& max, T& sum, T* output_row, std::size_t D,
                                                      const unsigned char* drop, T keep_scale) {
  const T tile_max = add_masks_and_max(row, n, per_query, per_key);
  const T new_max = std::max(max, tile_max);
  if (new_max == -std::numeric_limits<T>::infinity()) {
    for (std::size_t j = 0; j < n; ++j)
      if (std::isnan(row[j])) sum = std::numeric_limits<T>::quiet_NaN();  // NaN scores stay NaN
    std::fill(row, row + n, T(0));
    return;
  }
  const T correction = exp_nonpositive(max - new_max);  // exp(-inf) = 0 on the first live tile
  sum = sum * correction + exp_and_sum(row, n, new_max);
  if (correction != T(1))
    for (std::size_t d = 0; d < D; ++d) output_row[d] *= correction;
  max = new_max;
  // Dropout on the weights p_j / l is dropout on p_j: l is a common factor of the row.
  if (drop)
    for (std::size_t j = 0; j < n; ++j) row[j] = drop[j] ? T(0) : row[j] * keep_scale;
}

// The softmax of `rows` rows of one batch-head's scores (rows, S), from query row `first`,
// each row as masked_softmax_row<kind>: the kernel that run_for_this_cpu (platform/cpu.hpp)
// compiles once per SIMD level. Its loops are plain ones that the compiler vectorises at
// the level it is compiled for: the vector width is not needed. per_row: for
// weights_added_to the rows of the total, (rows, S); for exponentials the rows' sums,
// (rows); for weights nothing.
template <RowSoftmax kind>
struct SoftmaxRows {
  template <std::size_t /*vector bytes*/, class T>
  [[gnu::always_inline]] static void run(T* scores, std::size_t first, std::size_t rows, std::size_t S,
                                         const MaskRows<T>& mask, std::size_t b, std::size_t n, T* per_row = nullptr) {
    const T* per_key = mask.per_key_row(n);
    for (std::size_t i = 0; i < rows; ++i) {
      T* row = scores + i * S;
      const T* per_query = mask.per_query_row(b, first + i);
      if constexpr (kind == RowSoftmax::exponentials) per_row[i] = masked_softmax_row<kind>(row, S, per_query, per_key);
      else if constexpr (kind == RowSoftmax::weights_added_to)
        masked_softmax_row<kind>(row, S, per_query, per_key, per_row + i * S);
      else masked_softmax_row<kind>(row, S, per_query, per_key);
    }
  }
};

// Dropout on one row of weights, drawing in the reference's order (row by row), with
// the reference's keep scale (dropout_scale in textbook/attention.hpp).
template <class T>
void dropout_row(T* row, std::size_t n, double p, Generator& generator) {
  const T scale = textbook::dropout_scale<T>(p);
  // Multiplied by 0 or 1 / (1 - p), as PyTorch's dropout does: a dropped NaN stays NaN.
  for (std::size_t j = 0; j < n; ++j) row[j] *= generator.bernoulli(p) ? T(0) : scale;
}

}  // namespace mha::detail
