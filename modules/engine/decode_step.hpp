// modules/engine/decode_step.hpp (internal) — one decoding step with a KV cache, at the speed of
// reading its weights and its cache from memory.
//
// A step of a few new positions (M = L_new * N rows, one token of one sequence is M = 1)
// multiplies every weight once and reads every cached key and value once: there is
// almost nothing to compute per byte read, so the step is as fast as memory is. Three
// phases, the same mathematics as the forward (textbook/reference_forward.hpp):
//   1. q, k, v = x W_in^T + b_in: the rows of in_proj_weight (3E, E) streamed once, from
//      the step's interleaved copy (decode_weights.hpp: four rows one stream), each
//      row dotted with the M rows of x (matrix-vector products, not a GEMM: a GEMM
//      packs its operands, which for M = 1 costs as much as the product). q is scaled by
//      sqrt(1/D) as PyTorch scales it; k and v go straight into the cache.
//   2. per batch-head and new position i (at t0 + i): scores = q . K^T over keys
//      0..t0 + i (the causal mask, as its bound), the softmax, and softmax . V.
// The step takes no mask: its mask is that causal bound, and nothing else. decodes_fast
// (api/attention_paths.hpp) chooses this step only when no other mask applies, a step with
// more goes through the steps of the forward with its mask made in the API's one place for
// masks (api/mask_preparation.hpp).
//   3. attn_output = heads W_out^T + b_out, the rows of out_proj_weight streamed once.
// All three run as one job of the library's thread pool (platform/threads.hpp): one
// wake-up of its threads per step, not three. Phases 1 and 2 run together per group of
// heads (a head's attention needs only its own rows of q, k and v), so the step waits once,
// before phase 3. A thread done with its own group's heads attends heads of another group
// that a slower thread has projected, so that the step waits for the slower thread's last
// head, not for all its heads. The tasks are numbered phase by phase and taken in order,
// and a thread waits only for work that some thread has already taken and is finishing:
// it cannot wait for ever, whichever thread runs what.
//
// The kernels are written once over a SIMD vector of the compiler's (`vector_size`) and
// compiled for baseline x86-64 (16 bytes), AVX2 + FMA (32) and AVX-512 (64), picked at
// run time by run_for_this_cpu (platform/cpu.hpp), the dispatcher of every engine kernel;
// the softmax of a position's scores is the engine's own (masked_softmax_row,
// softmax_kernels.hpp). Sums run in another order than the GEMMs of the
// forward's path: results agree with it to the last bits, as two BLAS libraries do.
//
// Legend: M = rows of x (L_new * N), E = embed_dim, H = heads, D = head_dim, B = N * H,
// t0 = positions cached before the step, t = t0 + L_new, cap = the cache's room per head.
//
// Included by modules/engine.cppm, in its module purview: no module line of its own.
// Uses platform/cpu.hpp, platform/threads.hpp, platform/workspace.hpp, textbook/parameters.hpp,
// textbook/attention.hpp, softmax_kernels.hpp, decode_weights.hpp.

namespace mha::detail {

// The cache a step writes into and reads from: head b's keys at k + b * cap * D, (cap, D),
// of which the first t0 positions are filled; the step fills t0 .. t0 + L_new - 1.
template <class T>
struct CacheView {
  T* k = nullptr;
  T* v = nullptr;
  std::size_t capacity = 0, t0 = 0;
};

// The sizes of one step, and where row m of x sits in the sequence: m = i * N + n
// sequence-first, n * L_new + i batch-first (and N = 1 unbatched, where both agree).
struct DecodeSizes {
  std::size_t L_new, N, E, H, D;
  bool batch_first;
  std::size_t M() const { return L_new * N; }
  std::size_t position(std::size_t m) const { return batch_first ? m % L_new : m / N; }  // i
  std::size_t sequence(std::size_t m) const { return batch_first ? m / L_new : m % N; }  // n
  std::size_t row(std::size_t i, std::size_t n) const { return batch_first ? n * L_new + i : i * N + n; }
};

// A SIMD vector of `Bytes` bytes of T, as the compiler's vector extension: + and * are
// element-wise, and a function compiled for a wider instruction set uses wider registers.
template <class T, std::size_t Bytes>
struct Simd {
  using V [[gnu::vector_size(Bytes)]] = T;
  static constexpr std::size_t lanes = Bytes / sizeof(T);

  // Vectors pass by reference: a vector by value is a different ABI at each width.
  [[gnu::always_inline]] static void load(V& v, const T* p) { std::memcpy(&v, p, sizeof v); }
  [[gnu::always_inline]] static void store(T* p, const V& v) { std::memcpy(p, &v, sizeof v); }
  // The sum of the lanes, by halves: (lo + hi) at half the width, down to one lane.
  [[gnu::always_inline]] static T sum(const V& v) {
    if constexpr (lanes == 1) {
      return v[0];
    } else {
      using Half = Simd<T, Bytes / 2>;
      typename Half::V lo, hi;
      std::memcpy(&lo, &v, Bytes / 2);
      std::memcpy(&hi, reinterpret_cast<const char*>(&v) + Bytes / 2, Bytes / 2);
      const typename Half::V both = lo + hi;
      return Half::sum(both);
    }
  }
  // The sums of the `lanes` vectors from v at once, into one vector: lane i of `out` is
  // sum(v[i]), in the same order as sum() adds, so to the same bits. At each step two
  // vectors become one: their halves side by side, each half added to the half it is added
  // to in sum(); after log2(lanes) steps one vector is left. Fewer instructions than a
  // sum() per vector.
  [[gnu::always_inline]] static void sums(const V* v, V& out) {
    V w[lanes];
    for (std::size_t i = 0; i < lanes; ++i) w[i] = v[i];
    sums_in_place<lanes / 2>(w);
    out = w[0];
  }

private:
  // Blocks of s lanes of a and b, side by side (a then b): the even blocks plus the odd ones.
  template <std::size_t s, std::size_t... l>
  [[gnu::always_inline]] static void add_block_pairs(const V& a, const V& b, V& out, std::index_sequence<l...>) {
    const V even = __builtin_shufflevector(a, b, ((2 * (l / s)) * s + l % s)...);
    const V odd = __builtin_shufflevector(a, b, ((2 * (l / s) + 1) * s + l % s)...);
    out = even + odd;
  }
  // The first 2 s vectors of w, each holding lanes / (2 s) vectors' partial sums in blocks
  // of 2 s lanes, to s vectors with blocks of s lanes, down to one vector of sums in w[0].
  template <std::size_t s>
  [[gnu::always_inline]] static void sums_in_place(V (&w)[lanes]) {
    if constexpr (s > 0) {
      for (std::size_t i = 0; i < s; ++i)
        add_block_pairs<s>(w[2 * i], w[2 * i + 1], w[i], std::make_index_sequence<lanes>{});
      sums_in_place<s / 2>(w);
    }
  }
};

// How far ahead of its reads a stream of weights or of cached keys and values asks for
// them: 8 KiB, enough bytes in flight to cover the memory's latency when they come from
// memory rather than from the L3 cache (against 2 KiB: docs/performance.md, the
// decode-interleaved table).
template <class T>
constexpr std::size_t prefetch_distance = 8192 / sizeof(T);

// The address prefetch_distance elements past p, to ask for ahead of a read at p. An
// address, not a pointer into the array: near its end it points past it, where the hint
// fetches nothing and never faults, and a pointer there would not be a valid one. (The
// integer-to-pointer cast that clang-tidy warns of costs nothing here: the result is only
// ever a hint to the cache, never read through.)
template <class T>
[[gnu::always_inline]] inline const void* ahead(const T* p) {
  const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(p) + prefetch_distance<T> * sizeof(T);
  return reinterpret_cast<const void*>(address);  // NOLINT(performance-no-int-to-ptr): a hint's address
}

// y[g * ldy + r0 + i] = W[r0 + i] . x[g] + b[r0 + i] for the R rows i = 0 .. R - 1 from r0,
// all in one block of W's interleaved copy (decode_weights.hpp), and the G rows of x from
// x0: R * G accumulators, so that each load of x serves R rows. R = 4 from the block's
// first row reads the block as one stream; R = 1 reads one row of it (a run of rows that
// starts or ends inside a block).
template <class S, std::size_t R, std::size_t G, class T>
[[gnu::always_inline]] inline void dot_block(const InterleavedRows<T>& w, const T* x0, std::size_t ldx, const T* bias,
                                             T* y0, std::size_t ldy, std::size_t r0) {
  using V = typename S::V;
  constexpr std::size_t lanes = S::lanes, C = InterleavedRows<T>::chunk, per_row = InterleavedRows<T>::rows_per_block;
  static_assert(C % lanes == 0, "a chunk is whole vectors");
  const std::size_t in = w.in(), chunks = w.chunks(), i0 = r0 % per_row;
  const T* block = w.block_of(r0);
  V acc[R][G];
  for (auto& row : acc)
    for (auto& a : row) a = V{};
  for (std::size_t c = 0; c < chunks; ++c) {
    const T* group = block + c * per_row * C;  // chunk c of the block's four rows, side by side
    for (std::size_t u = 0; u < C; u += lanes) {
      V xv[G];
      for (std::size_t g = 0; g < G; ++g) S::load(xv[g], x0 + g * ldx + c * C + u);
      for (std::size_t r = 0; r < R; ++r) {
        const T* at = group + (i0 + r) * C + u;
        if (u == 0) __builtin_prefetch(ahead(at));  // a hint per cache line, as far ahead as the memory needs
        V wv;
        S::load(wv, at);
        for (std::size_t g = 0; g < G; ++g) acc[r][g] += wv * xv[g];
      }
    }
  }
  const std::size_t k_tail = chunks * C, tail = in - k_tail;  // the columns after the whole chunks
  for (std::size_t r = 0; r < R; ++r)
    for (std::size_t g = 0; g < G; ++g) {
      T s = S::sum(acc[r][g]);
      const T* w_tail = block + chunks * per_row * C + (i0 + r) * tail;
      for (std::size_t kk = 0; kk < tail; ++kk) s += w_tail[kk] * x0[g * ldx + k_tail + kk];
      y0[g * ldy + r0 + r] = s + (bias ? bias[r0 + r] : T(0));
    }
}

// Rows [first, last) of W against G rows of x: whole blocks of four rows as one stream
// each, the rows before the first whole block and after the last one by one.
template <class S, std::size_t G, class T>
[[gnu::always_inline]] inline void dot_rows_of(const InterleavedRows<T>& w, const T* x0, std::size_t ldx, const T* bias,
                                               T* y0, std::size_t ldy, std::size_t first, std::size_t last) {
  constexpr std::size_t per_row = InterleavedRows<T>::rows_per_block;
  std::size_t r = first;
  for (; r < last && r % per_row != 0; ++r) dot_block<S, 1, G>(w, x0, ldx, bias, y0, ldy, r);
  for (; r + per_row <= last; r += per_row) dot_block<S, per_row, G>(w, x0, ldx, bias, y0, ldy, r);
  for (; r < last; ++r) dot_block<S, 1, G>(w, x0, ldx, bias, y0, ldy, r);
}

// y (M, ldy), columns [first, last) = x (M, in) W^T + b for the rows [first, last) of W
// (out, in), interleaved: x taken four rows at a time, while the rows of W it multiplies
// stay in L1.
template <class S, class T>
[[gnu::always_inline]] inline void matvec_rows(const InterleavedRows<T>& w, const T* x, std::size_t M, const T* bias,
                                               T* y, std::size_t ldy, std::size_t first, std::size_t last) {
  constexpr std::size_t rows_per_pass = 16;  // rows of W that stay in L1 while every row of x meets them
  const std::size_t in = w.in();
  for (std::size_t r = first; r < last;) {
    const std::size_t r1 = std::min(last, (r / rows_per_pass + 1) * rows_per_pass);  // passes start at whole blocks
    std::size_t m = 0;
    for (; m + 4 <= M; m += 4) dot_rows_of<S, 4>(w, x + m * in, in, bias, y + m * ldy, ldy, r, r1);
    const std::size_t left = M - m;
    if (left == 3) dot_rows_of<S, 3>(w, x + m * in, in, bias, y + m * ldy, ldy, r, r1);
    if (left == 2) dot_rows_of<S, 2>(w, x + m * in, in, bias, y + m * ldy, ldy, r, r1);
    if (left == 1) dot_rows_of<S, 1>(w, x + m * in, in, bias, y + m * ldy, ldy, r, r1);
    r = r1;
  }
}

// scores[j] = q . k_j for the n keys (n, D) of one head, D = C vectors: q held in
// registers, K keys at a time (a whole number of vectors of them, at least eight), their
// sums taken a vector of keys at a time (Simd::sums).
template <class S, std::size_t C, class T>
[[gnu::always_inline]] inline void key_scores(const T* q, const T* keys, std::size_t n, T* scores) {
  using V = typename S::V;
  constexpr std::size_t lanes = S::lanes, D = C * lanes, K = std::max<std::size_t>(8, lanes);
  static_assert(K % lanes == 0, "the keys of a turn are whole vectors of sums");
  V qv[C];
  for (std::size_t c = 0; c < C; ++c) S::load(qv[c], q + c * lanes);
  std::size_t j = 0;
  for (; j + K <= n; j += K) {
    V acc[K] = {};
    for (std::size_t c = 0; c < C; ++c)
      for (std::size_t u = 0; u < K; ++u) {
        __builtin_prefetch(ahead(keys + (j + u) * D + c * lanes));  // a hint, as dot_block's
        V kv;
        S::load(kv, keys + (j + u) * D + c * lanes);
        acc[u] += qv[c] * kv;
      }
    for (std::size_t u = 0; u < K; u += lanes) {
      V sums;
      S::sums(acc + u, sums);  // the scores of keys j + u .. j + u + lanes - 1
      S::store(scores + j + u, sums);
    }
  }
  for (; j < n; ++j) {
    V acc = {};
    for (std::size_t c = 0; c < C; ++c) {
      V kv;
      S::load(kv, keys + j * D + c * lanes);
      acc += qv[c] * kv;
    }
    scores[j] = S::sum(acc);
  }
}

// out (D) = (p . V) / sum for the n values (n, D) of one head, D = C vectors, p the
// softmax's numerators: the row of out held in registers.
template <class S, std::size_t C, class T>
[[gnu::always_inline]] inline void weighted_values(const T* p, T sum, const T* values, std::size_t n, T* out) {
  using V = typename S::V;
  constexpr std::size_t lanes = S::lanes, D = C * lanes;
  V acc[C] = {};
  for (std::size_t j = 0; j < n; ++j) {
    const V pj = V{} + p[j];
    for (std::size_t c = 0; c < C; ++c) {
      __builtin_prefetch(ahead(values + j * D + c * lanes));
      V vv;
      S::load(vv, values + j * D + c * lanes);
      acc[c] += pj * vv;
    }
  }
  const V inverse = V{} + T(1) / sum;
  for (std::size_t c = 0; c < C; ++c) {
    const V o = acc[c] * inverse;
    S::store(out + c * lanes, o);
  }
}

// The same for any D: plain loops, which the compiler vectorises as it can.
template <class T>
[[gnu::always_inline]] inline void key_scores_any(const T* q, const T* keys, std::size_t n, std::size_t D, T* scores) {
  for (std::size_t j = 0; j < n; ++j) {
    T s = 0;
    for (std::size_t d = 0; d < D; ++d) s += q[d] * keys[j * D + d];
    scores[j] = s;
  }
}
template <class T>
[[gnu::always_inline]] inline void weighted_values_any(const T* p, T sum, const T* values, std::size_t n, std::size_t D,
                                                       T* out) {
  std::fill_n(out, D, T(0));
  for (std::size_t j = 0; j < n; ++j)
    for (std::size_t d = 0; d < D; ++d) out[d] += p[j] * values[j * D + d];
  const T inverse = T(1) / sum;
  for (std::size_t d = 0; d < D; ++d) out[d] *= inverse;
}

// The attention of one new position of one head: q (D) against the n = t0 + i + 1 keys
// and values it may see (the causal bound), into out (D); `scores` holds n.
template <class S, std::size_t C, class T>
[[gnu::always_inline]] inline void attend_position(const T* q, const T* keys, const T* values, std::size_t n,
                                                   std::size_t D, T* scores, T* out) {
  if constexpr (C == 0) {
    key_scores_any(q, keys, n, D, scores);
  } else {
    key_scores<S, C>(q, keys, n, scores);
  }
  // The causal bound is n: no mask to add. The exponentials, their division left to the D
  // entries of out.
  const T sum = masked_softmax_row<RowSoftmax::exponentials>(scores, n, static_cast<const T*>(nullptr),
                                                             static_cast<const T*>(nullptr));
  if constexpr (C == 0) {
    weighted_values_any(scores, sum, values, n, D, out);
  } else {
    weighted_values<S, C>(scores, sum, values, n, out);
  }
}

// The step's kernels, each a static run<Bytes>() that run_for_this_cpu (platform/cpu.hpp)
// compiles at each vector width, Bytes = 16, 32, 64: the width of their Simd vectors.
struct MatvecRows {
  template <std::size_t Bytes, class T>
  [[gnu::always_inline]] static void run(const InterleavedRows<T>* w, const T* x, std::size_t M, const T* bias, T* y,
                                         std::size_t ldy, std::size_t first, std::size_t last) {
    matvec_rows<Simd<T, Bytes>>(*w, x, M, bias, y, ldy, first, last);
  }
};
struct AttendPosition {
  template <std::size_t Bytes, class T>
  [[gnu::always_inline]] static void run(const T* q, const T* keys, const T* values, std::size_t n, std::size_t D,
                                         T* scores, T* out) {
    using S = Simd<T, Bytes>;
    // D in whole vectors, up to 16 of them, kept in registers; any other D in plain loops
    switch (D % S::lanes == 0 ? D / S::lanes : 0) {
      case 1:
        return attend_position<S, 1>(q, keys, values, n, D, scores, out);
      case 2:
        return attend_position<S, 2>(q, keys, values, n, D, scores, out);
      case 4:
        return attend_position<S, 4>(q, keys, values, n, D, scores, out);
      case 8:
        return attend_position<S, 8>(q, keys, values, n, D, scores, out);
      case 16:
        return attend_position<S, 16>(q, keys, values, n, D, scores, out);
      default:
        return attend_position<S, 0>(q, keys, values, n, D, scores, out);
    }
  }
};

// For mha::testing::lane_sums: the sums of the first `lanes` vectors of `values`, each on its
// own (Simd::sum) and all at once (Simd::sums).
struct LaneSums {
  template <std::size_t Bytes>
  static void run(const float* values, std::vector<float>* one_at_a_time, std::vector<float>* at_once) {
    using S = Simd<float, Bytes>;
    typename S::V v[S::lanes], sums;
    for (std::size_t i = 0; i < S::lanes; ++i) S::load(v[i], values + i * S::lanes);
    one_at_a_time->resize(S::lanes);
    for (std::size_t i = 0; i < S::lanes; ++i) (*one_at_a_time)[i] = S::sum(v[i]);
    S::sums(v, sums);
    at_once->resize(S::lanes);
    S::store(at_once->data(), sums);
  }
};

// Waits until `done` reaches `count`: the tasks of an earlier phase, each being finished
// by a thread that took it. It spins, and lets other threads run now and then (on a
// machine busier than its cores, the thread it waits for may need this one's core).
inline void wait_for(const std::atomic<std::size_t>& done, std::size_t count) {
  for (std::size_t spins = 1; done.load(std::memory_order_acquire) < count; ++spins) {
    spin_pause();
    if (spins % 1024 == 0) std::this_thread::yield();
  }
}

// Part `part` of `parts` of n items: [first, last), as even as whole blocks of `block`
// items allow. Each thread's part is one stretch of memory, read from start to end, as
// the hardware's prefetchers read best; out_proj's rows go in whole blocks of the
// interleaved copy (decode_weights.hpp).
inline std::pair<std::size_t, std::size_t> part_of(std::size_t n, std::size_t parts, std::size_t part,
                                                   std::size_t block = 1) {
  const std::size_t blocks = (n + block - 1) / block;
  return {std::min(n, part * blocks / parts * block), std::min(n, (part + 1) * blocks / parts * block)};
}

// A phase of the step: `tasks` tasks, numbered from `first` in the step's job, each the
// work of one part (a group of heads, a run of rows).
//
// Which part a task works on is claimed, not given by the task's number: worker w takes
// part w while it is free, so that from one step to the next each thread reads the same
// weights and the same cached heads. Where each core has a cache of its own (two cores on
// two chiplets, each with its own L3), the step's 16 MiB of weights then stay split
// between the two caches; read by the other thread now and then, they come from memory.
// A worker whose own part is taken (a thread that joined late, or the caller doing the
// whole job alone) takes the first free one. Each task claims one part, so one is free.
struct Phase {
  static constexpr std::size_t max_parts = 64;  // the bits of `taken`
  std::size_t first = 0, tasks = 0;
  std::atomic<std::uint64_t> taken{0};
  bool has(std::size_t task) const { return task >= first && task < first + tasks; }
  // Whether a thread has claimed `part`, and so is working on it or done with it.
  bool claimed(std::size_t part) const {
    return (taken.load(std::memory_order_relaxed) & (std::uint64_t(1) << part)) != 0;
  }
  std::size_t claim(std::size_t worker) {
    const std::size_t own = worker % tasks;
    if ((taken.fetch_or(std::uint64_t(1) << own, std::memory_order_relaxed) & (std::uint64_t(1) << own)) == 0)
      return own;
    for (;;) {
      std::uint64_t seen = taken.load(std::memory_order_relaxed);
      const auto part = static_cast<std::size_t>(__builtin_ctzll(~seen));  // the first free part
      if (taken.compare_exchange_weak(seen, seen | (std::uint64_t(1) << part), std::memory_order_relaxed)) return part;
    }
  }
};

// The attention of one group of heads, shared by the threads: each of its batch-heads is
// taken by one thread, first by the thread that projected the group, then by any thread
// done with its own group's.
struct HeadQueue {
  std::atomic<std::size_t> projected{0};  // 1 once the group's q, k and v are in place
  std::atomic<std::size_t> next{0};       // its next batch-head to take: (sequence, head) in turn
};

// One decoding step: x (M, E) in the module's layout, its k and v written into the cache
// at t0 .., its attention over the t0 + L_new positions (causal among the new ones), and
// attn_output (M, E), in x's layout, into `out`. need_weights false, no dropout, no
// bias_k, bias_v or zero key: KVCache's conditions (MultiheadAttention::attend_to_cache).
template <class T>
void decode_step(const textbook::Parameters<T>& params, const DecodeWeights<T>& weights, const DecodeSizes& z,
                 const T* x, const CacheView<T>& cache, T* out, int threads) {
  const std::size_t M = z.M(), E = z.E, D = z.D;
  Workspace<T>& ws = Workspace<T>::of_this_thread();
  T* qkv = ws.get(M * 3 * E);  // (M, 3E): [q | k | v] of each row of x
  T* heads = ws.get(M * E);    // (M, E): the heads side by side, in x's layout
  const std::size_t t = cache.t0 + z.L_new;
  const std::size_t workers = static_cast<std::size_t>(std::max(1, threads));
  if (ws.scratch.size() < workers) ws.scratch.resize(workers);
  for (auto& s : ws.scratch)
    if (s.size() < t) s.resize(t);  // one row of scores per worker

  const T* in_bias = params.in_proj_bias ? params.in_proj_bias->data() : nullptr;  // (3E)
  const T* out_bias = params.out_proj_bias ? params.out_proj_bias->data() : nullptr;
  const T scale = textbook::attention_scale<T>(D);

  // Tasks: phases 1 and 2 together for one group of heads per worker, the rows of q, k and
  // v those heads need in three contiguous runs (see part_of), then their attention, head
  // by head, with the heads left in other groups (see HeadQueue); phase 3 in one
  // contiguous run of out_proj's rows per worker (see part_of). (With fewer heads than
  // threads, some threads have no group: a one-head module projects on one thread.)
  const std::size_t groups = std::min({workers, z.H, Phase::max_parts});
  const std::size_t runs = std::min(workers, Phase::max_parts);
  Phase heads_phase, output;
  std::array<HeadQueue, Phase::max_parts> queues;  // one per group
  std::atomic<std::size_t> attended{0};            // batch-heads attended, of N * H
  heads_phase.tasks = groups;
  output.first = heads_phase.tasks, output.tasks = runs;

  // 1. for heads [h0, h1): rows [h0 D, h1 D) of each of q, k, v, for every row of x; k and
  //    v then into the cache, q scaled.
  auto project_heads = [&](std::size_t h0, std::size_t h1) {
    const std::size_t r0 = h0 * D, r1 = h1 * D;
    for (std::size_t block = 0; block < 3; ++block) {
      const std::size_t first = textbook::qkv_rows(block, E).first;  // the block's columns of [q | k | v]
      T* y = qkv + first;                                            // row m at y + m * 3E
      run_for_this_cpu<MatvecRows>(&weights.in_projection(block), x, M, in_bias ? in_bias + first : nullptr, y, 3 * E,
                                   r0, r1);
      for (std::size_t m = 0; m < M; ++m) {
        T* row = y + m * 3 * E;
        if (block == 0) {
          for (std::size_t e = r0; e < r1; ++e) row[e] *= scale;  // PyTorch scales q after its bias
          continue;
        }
        T* cached = block == 1 ? cache.k : cache.v;  // (B, cap, D)
        const std::size_t n = z.sequence(m), position = cache.t0 + z.position(m);
        for (std::size_t h = h0; h < h1; ++h)  // head h's D values: one run in the cache
          std::copy_n(row + h * D, D, cached + ((n * z.H + h) * cache.capacity + position) * D);
      }
    }
  };
  // 2. batch-head b = n * H + h: each new position against the keys it may see.
  auto attend_head = [&](std::size_t b, std::size_t worker) {
    const std::size_t n = b / z.H, h = b % z.H;
    const T* keys = cache.k + b * cache.capacity * D;
    const T* values = cache.v + b * cache.capacity * D;
    for (std::size_t i = 0; i < z.L_new; ++i) {
      const std::size_t m = z.row(i, n);
      run_for_this_cpu<AttendPosition>(static_cast<const T*>(qkv + m * 3 * E + h * D), keys, values, cache.t0 + i + 1,
                                       D, ws.scratch[worker].data(), heads + m * E + h * D);
    }
  };
  // 2, shared: the batch-heads of group g not yet taken, as this worker takes them one by one.
  auto attend_group = [&](std::size_t g, std::size_t worker) {
    const auto [h0, h1] = part_of(z.H, groups, g);
    const std::size_t heads_in_group = h1 - h0, count = heads_in_group * z.N;
    for (std::size_t i = queues[g].next.fetch_add(1, std::memory_order_relaxed); i < count;
         i = queues[g].next.fetch_add(1, std::memory_order_relaxed)) {
      const std::size_t n = i / heads_in_group, h = h0 + i % heads_in_group;  // the group's heads, sequence by sequence
      attend_head(n * z.H + h, worker);
      attended.fetch_add(1, std::memory_order_release);
    }
  };
  // 3. rows [r0, r1) of out_proj_weight, for every row of the heads.
  auto output_rows = [&](std::size_t run) {
    const auto [r0, r1] = part_of(E, runs, run, InterleavedRows<T>::rows_per_block);
    run_for_this_cpu<MatvecRows>(&weights.out_proj, static_cast<const T*>(heads), M, out_bias, out, E, r0, r1);
  };

  parallel_for(output.first + output.tasks, static_cast<int>(workers), [&](std::size_t task, std::size_t worker) {
    if (heads_phase.has(task)) {
      const std::size_t g = heads_phase.claim(worker);
      const auto [h0, h1] = part_of(z.H, groups, g);
      project_heads(h0, h1);
      queues[g].projected.store(1, std::memory_order_release);
      attend_group(g, worker);
      // then the heads left in the other groups: of a group not yet claimed, none (the thread
      // that claims it will attend them all); of one being projected, those left once it is
      for (std::size_t step = 1; step < groups; ++step) {
        const std::size_t other = (g + step) % groups;
        if (!heads_phase.claimed(other)) continue;
        wait_for(queues[other].projected, 1);
        attend_group(other, worker);
      }
    } else {
      wait_for(attended, z.N * z.H);
      output_rows(output.claim(worker));
    }
  });
  ws.keep_within_limit();
}

}  // namespace mha::detail

export namespace mha::testing {

// For tests: the decoding step's lane sums at the widest vector its kernels run now
// (limit_kernel_simd_level), of `lanes` vectors of `lanes` floats each (4, 8 or 16): the first
// lanes * lanes of `values`, which must hold 256. {each vector's sum on its own, the sums of
// all of them at once}, `lanes` each, as the step's key scores take them.
std::pair<std::vector<float>, std::vector<float>> lane_sums(const std::vector<float>& values) {
  detail::check(values.size() == 256, "values", "lane_sums takes 16 vectors of 16 floats, 256, got {}", values.size());
  std::pair<std::vector<float>, std::vector<float>> sums;
  detail::run_for_this_cpu<detail::LaneSums>(values.data(), &sums.first, &sums.second);
  return sums;
}

}  // namespace mha::testing
