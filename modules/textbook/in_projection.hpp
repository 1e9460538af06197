// modules/textbook/in_projection.hpp — the packed in_proj_weight, and how q, k and v come out of it.
//
// PyTorch stores the three input projections of nn.MultiheadAttention as one matrix:
//
//   in_proj_weight (3E, E) = [ W_q ]  rows [0, E)
//                            [ W_k ]  rows [E, 2E)
//                            [ W_v ]  rows [2E, 3E)
//
// and in_proj_bias (3E) = [b_q; b_k; b_v] the same way. Then q = query W_q^T + b_q, and
// likewise k and v. This file splits and packs that layout and computes the
// in-projection exactly as torch/nn/functional.py does in _in_projection_packed and
// _in_projection. It is not the attention itself (see attention.hpp).
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim,
// Ek = kdim, Ev = vdim.
//
// Included by modules/textbook.cppm, in its module purview: no module line of its own.
// Uses mha.core.

export namespace mha {

// The three projections held separately: q_proj_weight, k_proj_weight, v_proj_weight and
// the three thirds of in_proj_bias.
template <class T>
struct SeparateProjections {
  xt::xtensor<T, 2> w_q;                           // (E, E)
  xt::xtensor<T, 2> w_k;                           // (E, Ek)
  xt::xtensor<T, 2> w_v;                           // (E, Ev)
  std::optional<xt::xtensor<T, 1>> b_q, b_k, b_v;  // (E) each, or none when bias=False
};

}  // namespace mha

export namespace mha::textbook {

// The packed form, as PyTorch stores it when kdim == vdim == E.
template <class T>
struct PackedProjection {
  xt::xtensor<T, 2> in_proj_weight;               // (3E, E)
  std::optional<xt::xtensor<T, 1>> in_proj_bias;  // (3E)
};

// q, k and v after the in-projection, sequence-first.
template <class T>
struct QKV {
  xt::xtensor<T, 3> q;  // (L, N, E)
  xt::xtensor<T, 3> k;  // (S, N, E)
  xt::xtensor<T, 3> v;  // (S, N, E)
};

// y = x W^T + b over the last dimension, as torch.nn.functional.linear.
template <class T, std::size_t N>
xt::xtensor<T, N> linear(const xt::xtensor<T, N>& x, const xt::xtensor<T, 2>& weight,
                         const std::optional<xt::xtensor<T, 1>>& bias = std::nullopt) {
  check(x.shape(N - 1) == weight.shape(1), "input",
        "mat1 and mat2 shapes cannot be multiplied: last dimension {} against weight {}", x.shape(N - 1),
        shape_string(weight.shape()));
  if (bias)
    check(bias->shape(0) == weight.shape(0), "bias", "expected shape {}, got {}", shape_string({weight.shape(0)}),
          shape_string(bias->shape()));
  const std::size_t in = weight.shape(1), out = weight.shape(0);
  std::size_t rows = 1;  // the product of x's leading dimensions, also when in = 0
  for (std::size_t d = 0; d + 1 < N; ++d) rows *= x.shape(d);
  auto shape = x.shape();
  shape[N - 1] = out;
  xt::xtensor<T, N> y(shape);
  const T *X = x.data(), *W = weight.data();
  // (rows, in) x (in, out) -> (rows, out): row r of y is x_r . W_o for every output o, and the
  // bias added to the finished sum, as addmm adds it (beta * b + x W^T).
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t o = 0; o < out; ++o) {
      T sum = 0;
      for (std::size_t i = 0; i < in; ++i) sum += X[r * in + i] * W[o * in + i];
      y.data()[r * out + o] = bias ? (*bias)(o) + sum : sum;
    }
  return y;
}

// Rows [first, first + E) of the packed in_proj_weight (3E, E) and in_proj_bias (3E) hold one
// projection: block 0 is Q, 1 is K, 2 is V. Every reader of the packed layout asks this
// function where a block starts, so that the arithmetic is written once.
struct RowBlock {
  std::size_t first = 0, count = 0;
  std::size_t end() const { return first + count; }  // one past the last row
  // The same rows counted from the start of `outer`, a block that holds them.
  RowBlock within(RowBlock outer) const { return {first - outer.first, count}; }
};

inline RowBlock qkv_rows(std::size_t block, std::size_t E) {
  check(block < 3, "block", "expected 0 (q), 1 (k) or 2 (v), got {}", block);
  return {block * E, E};
}

// K's rows and V's together, [E, 3E): the one GEMM of encoder-decoder attention (key is value).
inline RowBlock kv_rows(std::size_t E) { return {qkv_rows(1, E).first, qkv_rows(2, E).end() - qkv_rows(1, E).first}; }

// The shape of in_proj_weight: (3E, E), [W_q; W_k; W_v].
inline std::array<std::size_t, 2> in_proj_weight_shape(std::size_t E) { return {3 * E, E}; }

// The bias as three (E) thirds [b_q; b_k; b_v], as in_proj_bias.chunk(3).
template <class T>
std::optional<xt::xtensor<T, 1>> bias_block(const std::optional<xt::xtensor<T, 1>>& packed, std::size_t block,
                                            std::size_t E) {
  if (!packed) return std::nullopt;
  const RowBlock rows = qkv_rows(block, E);
  check(packed->shape(0) == 3 * E, "in_proj_bias", "expected shape {}, got {}", shape_string({3 * E}),
        shape_string(packed->shape()));
  return xt::xtensor<T, 1>(xt::view(*packed, xt::range(rows.first, rows.end())));
}

// Rows [block*E, (block+1)*E) of the packed weight: block 0 is W_q, 1 is W_k, 2 is W_v.
template <class T>
xt::xtensor<T, 2> weight_block(const xt::xtensor<T, 2>& in_proj_weight, std::size_t block) {
  const std::size_t E = in_proj_weight.shape(1);
  const RowBlock rows = qkv_rows(block, E);
  check(in_proj_weight.shape(0) == 3 * E, "in_proj_weight", "expected shape {}, got {}",
        shape_string(in_proj_weight_shape(E)), shape_string(in_proj_weight.shape()));
  return xt::view(in_proj_weight, xt::range(rows.first, rows.end()), xt::all());
}

// in_proj_weight (3E, E), in_proj_bias (3E) -> W_q, W_k, W_v (E, E) and b_q, b_k, b_v (E).
template <class T>
SeparateProjections<T> split_packed(const xt::xtensor<T, 2>& in_proj_weight,
                                    const std::optional<xt::xtensor<T, 1>>& in_proj_bias) {
  const std::size_t E = in_proj_weight.shape(1);
  check(in_proj_weight.shape(0) == 3 * E, "in_proj_weight", "expected shape {}, got {}",
        shape_string(in_proj_weight_shape(E)), shape_string(in_proj_weight.shape()));
  if (in_proj_bias)
    check(in_proj_bias->shape(0) == 3 * E, "in_proj_bias", "expected shape {}, got {}", shape_string({3 * E}),
          shape_string(in_proj_bias->shape()));
  return {weight_block(in_proj_weight, 0), weight_block(in_proj_weight, 1), weight_block(in_proj_weight, 2),
          bias_block(in_proj_bias, 0, E),  bias_block(in_proj_bias, 1, E),  bias_block(in_proj_bias, 2, E)};
}

// W_q, W_k, W_v (E, E) -> in_proj_weight (3E, E); likewise the biases. Only possible when
// kdim == vdim == E: a (E, Ek) block cannot stand in a (3E, E) matrix.
template <class T>
PackedProjection<T> pack(const SeparateProjections<T>& p) {
  const std::size_t E = p.w_q.shape(0);
  check(p.w_q.shape(1) == E, "q_proj_weight", "expected shape {}, got {}", shape_string({E, E}),
        shape_string(p.w_q.shape()));
  check(p.w_k.shape(0) == E && p.w_k.shape(1) == E, "k_proj_weight",
        "cannot pack: packing needs kdim == embed_dim, expected shape {}, got {}", shape_string({E, E}),
        shape_string(p.w_k.shape()));
  check(p.w_v.shape(0) == E && p.w_v.shape(1) == E, "v_proj_weight",
        "cannot pack: packing needs vdim == embed_dim, expected shape {}, got {}", shape_string({E, E}),
        shape_string(p.w_v.shape()));
  const bool has_bias = p.b_q.has_value();
  check(p.b_k.has_value() == has_bias && p.b_v.has_value() == has_bias, "b_k, b_v",
        "expected all three biases or none, got b_q {}, b_k {}, b_v {}", has_bias, p.b_k.has_value(),
        p.b_v.has_value());
  PackedProjection<T> packed{xt::concatenate(xt::xtuple(p.w_q, p.w_k, p.w_v), 0), std::nullopt};
  if (p.b_q && p.b_k && p.b_v) {  // all three, or none (checked above)
    for (auto [name, b] : {std::pair{"b_q", &*p.b_q}, {"b_k", &*p.b_k}, {"b_v", &*p.b_v}})
      check(b->shape(0) == E, name, "expected shape {}, got {}", shape_string({E}), shape_string(b->shape()));
    packed.in_proj_bias = xt::concatenate(xt::xtuple(*p.b_q, *p.b_k, *p.b_v), 0);
  }
  return packed;
}

// Columns [begin, end) of the last dimension: (L, N, C) -> (L, N, end - begin). A copy
// loop rather than an xt::view, which offsets a null data pointer when L or N is 0.
template <class T>
xt::xtensor<T, 3> column_block(const xt::xtensor<T, 3>& x, std::size_t begin, std::size_t end) {
  const std::size_t rows = x.shape(0) * x.shape(1), C = x.shape(2), W = end - begin;
  xt::xtensor<T, 3> block({x.shape(0), x.shape(1), W});
  for (std::size_t r = 0; r < rows; ++r) std::copy_n(x.data() + r * C + begin, W, block.data() + r * W);
  return block;
}

// The columns `rows` of the packed projection's output: (L, N, C) -> (L, N, rows.count).
template <class T>
xt::xtensor<T, 3> column_block(const xt::xtensor<T, 3>& x, RowBlock rows) {
  return column_block(x, rows.first, rows.end());
}

// How the inputs alias each other, the C++ counterpart of Python's `query is key` and
// `key is value`: PyTorch runs one GEMM for self-attention, two for encoder-decoder
// attention (key is value), three otherwise.
enum class Aliasing { none, key_is_value, self_attention };

// The in-projection of the packed weight, as torch.nn.functional._in_projection_packed.
// query (L, N, E), key (S, N, E), value (S, N, E) -> q (L, N, E), k, v (S, N, E)
template <class T>
QKV<T> in_projection_packed(const xt::xtensor<T, 3>& query, const xt::xtensor<T, 3>& key,
                            const xt::xtensor<T, 3>& value, const xt::xtensor<T, 2>& in_proj_weight,
                            const std::optional<xt::xtensor<T, 1>>& in_proj_bias, Aliasing aliasing = Aliasing::none) {
  const std::size_t E = query.shape(2);
  check(in_proj_weight.shape(0) == 3 * E && in_proj_weight.shape(1) == E, "in_proj_weight", "expected shape {}, got {}",
        shape_string(in_proj_weight_shape(E)), shape_string(in_proj_weight.shape()));
  if (in_proj_bias)
    check(in_proj_bias->shape(0) == 3 * E, "in_proj_bias", "expected shape {}, got {}", shape_string({3 * E}),
          shape_string(in_proj_bias->shape()));
  if (aliasing == Aliasing::self_attention) {
    // One GEMM against all 3E rows: (L, N, E) x (E, 3E) -> (L, N, 3E), then the three
    // column blocks [q | k | v] of each row are taken apart.
    auto proj = linear(query, in_proj_weight, in_proj_bias);  // (L, N, 3E)
    return {column_block(proj, qkv_rows(0, E)), column_block(proj, qkv_rows(1, E)), column_block(proj, qkv_rows(2, E))};
  }
  const auto w_q = weight_block(in_proj_weight, 0);  // (E, E)
  const auto b_q = bias_block(in_proj_bias, 0, E);   // (E)
  if (aliasing == Aliasing::key_is_value) {
    // Encoder-decoder attention: q from rows [0, E), k and v from rows [E, 3E) at once.
    const RowBlock kv_block = kv_rows(E);  // K's rows, then V's
    const xt::xtensor<T, 2> w_kv =
        xt::view(in_proj_weight, xt::range(kv_block.first, kv_block.end()), xt::all());  // (2E, E)
    std::optional<xt::xtensor<T, 1>> b_kv;
    if (in_proj_bias) b_kv = xt::view(*in_proj_bias, xt::range(kv_block.first, kv_block.end()));  // (2E)
    auto kv = linear(key, w_kv, b_kv);                                                            // (S, N, 2E)
    return {linear(query, w_q, b_q), column_block(kv, qkv_rows(1, E).within(kv_block)),
            column_block(kv, qkv_rows(2, E).within(kv_block))};
  }
  return {linear(query, w_q, b_q), linear(key, weight_block(in_proj_weight, 1), bias_block(in_proj_bias, 1, E)),
          linear(value, weight_block(in_proj_weight, 2), bias_block(in_proj_bias, 2, E))};
}

// The in-projection of separate weights, as torch.nn.functional._in_projection, with its
// shape checks. query (L, N, E), key (S, N, Ek), value (S, N, Ev) -> q, k, v as above.
template <class T>
QKV<T> in_projection(const xt::xtensor<T, 3>& query, const xt::xtensor<T, 3>& key, const xt::xtensor<T, 3>& value,
                     const SeparateProjections<T>& p) {
  const std::size_t Eq = query.shape(2), Ek = key.shape(2), Ev = value.shape(2);
  check(p.w_q.shape(0) == Eq && p.w_q.shape(1) == Eq, "q_proj_weight",
        "Expecting query weights shape of {}, but got {}", shape_string({Eq, Eq}), shape_string(p.w_q.shape()));
  check(p.w_k.shape(0) == Eq && p.w_k.shape(1) == Ek, "k_proj_weight", "Expecting key weights shape of {}, but got {}",
        shape_string({Eq, Ek}), shape_string(p.w_k.shape()));
  check(p.w_v.shape(0) == Eq && p.w_v.shape(1) == Ev, "v_proj_weight",
        "Expecting value weights shape of {}, but got {}", shape_string({Eq, Ev}), shape_string(p.w_v.shape()));
  for (auto [name, b] : {std::pair{"b_q", &p.b_q}, {"b_k", &p.b_k}, {"b_v", &p.b_v}})
    if (*b)
      check((*b)->shape(0) == Eq, name, "Expecting bias shape of {}, but got {}", shape_string({Eq}),
            shape_string((*b)->shape()));
  return {linear(query, p.w_q, p.b_q), linear(key, p.w_k, p.b_k), linear(value, p.w_v, p.b_v)};
}

}  // namespace mha::textbook
