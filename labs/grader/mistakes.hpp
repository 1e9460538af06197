// labs/grader/mistakes.hpp — the grader's own forward and backward, each step as PyTorch computes it or as a
// catalogued mistake computes it.
//
// forward(c, mistakes) runs multi_head_attention_forward on a golden case's inputs and
// keeps every intermediate (Trace); backward(c, trace, mistakes) takes the gradients of its
// loss. With no mistake, both are PyTorch's (`labNN --self-check`, the tests "labs: labNN
// grader's own recomputation is PyTorch's", hold them to the golden files); with mistakes, they are what a student who made them computes, which
// is what the grader compares an answer with to name its mistake. The right steps are the
// library's (library.hpp); the mistaken ones are written here, next to the right one.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads,
// D = head_dim = E / H, B = N*H.
//
// Include it after grader.hpp and library.hpp.
#pragma once

namespace grader {

// What one forward computed, step by step.
template <class T>
struct Trace {
  bool batched = true, batch_first = false, packed = true, has_bias = true;
  std::size_t L = 0, S = 0, N = 0, E = 0, H = 1, D = 1;
  xt::xtensor<T, 3> query, key, value;    // (L, N, E), (S, N, Ek), (S, N, Ev)
  mha::SeparateProjections<T> in;         // the in-projection's weights as used
  xt::xtensor<T, 3> q, k, v;              // (L, N, E), (S, N, E), (S, N, E)
  xt::xtensor<T, 3> qh, kh, vh;           // (B, L, D), (B, S, D), (B, S, D)
  std::optional<xt::xtensor<T, 3>> mask;  // (1 or B, L, S), additive
  xt::xtensor<T, 3> weights;              // (B, L, S): the softmax
  xt::xtensor<T, 3> heads;                // (B, L, D): weights . v
  xt::xtensor<T, 3> merged;               // (L, N, E)
  xt::xtensor<T, 3> output;               // (L, N, E): out_proj's
  xt::xarray<T> attn_output;              // as the query came
  std::optional<xt::xarray<T>> attn_output_weights;
};

// 3) the split: which block of in_proj_weight (or of in_proj_bias) q, k and v come from.
// Each split mistake is a belief about the layout: qk_swapped believes [W_k; W_q; W_v],
// order_kvq [W_k; W_v; W_q]; held for the weight and the bias alike (variant 0), for the
// weight only (1) or for the bias only (2).
inline std::array<std::size_t, 3> qkv_blocks(const Injections& m, bool of_bias) {
  using Layout = std::array<std::size_t, 3>;  // layout[block] = 0 (q), 1 (k), 2 (v)
  const std::array<std::pair<Mistake, Layout>, 5> beliefs{{{Mistake::qk_swapped, {1, 0, 2}},
                                                           {Mistake::kv_swapped, {0, 2, 1}},
                                                           {Mistake::qv_swapped, {2, 1, 0}},
                                                           {Mistake::order_kvq, {1, 2, 0}},
                                                           {Mistake::order_vqk, {2, 0, 1}}}};
  Layout layout{0, 1, 2};
  for (const auto& [mistake, belief] : beliefs)
    if (const auto v = made(m, mistake); v && (*v == 0 || *v == (of_bias ? 2 : 1))) {
      layout = belief;
      break;
    }
  std::array<std::size_t, 3> block{};
  for (std::size_t i = 0; i < 3; ++i) block[layout[i]] = i;
  return block;  // block[0] is q's block, block[1] k's, block[2] v's
}

// Rows [i*E, (i+1)*E) of a packed weight, and of its bias.
template <class T>
xt::xtensor<T, 2> weight_rows(const xt::xarray<T>& w, std::size_t i, std::size_t E) {
  return xt::view(w, xt::range(i * E, (i + 1) * E), xt::all());
}
template <class T>
xt::xtensor<T, 1> bias_rows(const xt::xarray<T>& b, std::size_t i, std::size_t E) {
  return xt::view(b, xt::range(i * E, (i + 1) * E));
}

// The in-projection's weights and biases as a student with these mistakes takes them.
template <class T>
mha::SeparateProjections<T> in_projection_weights(const mha::StateDict<T>& p, std::size_t E, const Injections& m) {
  mha::SeparateProjections<T> w;
  const bool bias = p.contains("in_proj_bias") && !made(m, Mistake::bias_missing);
  if (p.contains("in_proj_weight")) {
    const auto block = qkv_blocks(m, /*of_bias=*/false), bias_block = qkv_blocks(m, /*of_bias=*/true);
    const auto& packed = p.at("in_proj_weight");
    w.w_q = weight_rows(packed, block[0], E), w.w_k = weight_rows(packed, block[1], E);
    w.w_v = weight_rows(packed, block[2], E);
    const auto not_split = made(m, Mistake::bias_not_split);  // 0: left out, 1: the whole (3E) bias each
    if (bias && not_split == 1) w.b_q = w.b_k = w.b_v = xt::xtensor<T, 1>(p.at("in_proj_bias"));
    else if (bias && !not_split) {
      const auto& b = p.at("in_proj_bias");
      w.b_q = bias_rows(b, bias_block[0], E), w.b_k = bias_rows(b, bias_block[1], E);
      w.b_v = bias_rows(b, bias_block[2], E);
    }
    return w;
  }
  w.w_q = p.at("q_proj_weight"), w.w_k = p.at("k_proj_weight"), w.w_v = p.at("v_proj_weight");
  if (bias) {
    const auto& b = p.at("in_proj_bias");
    w.b_q = bias_rows(b, 0, E), w.b_k = bias_rows(b, 1, E), w.b_v = bias_rows(b, 2, E);
  }
  return w;
}

// y = x W^T + b, or x W + b when the weight is not transposed (a square weight only: any
// other shape does not multiply, and a student's code stops there).
template <class T>
xt::xtensor<T, 3> project(const xt::xtensor<T, 3>& x, const xt::xtensor<T, 2>& w,
                          const std::optional<xt::xtensor<T, 1>>& b, bool not_transposed) {
  if (not_transposed && w.shape(0) == w.shape(1)) return lib::linear(x, xt::xtensor<T, 2>(xt::transpose(w)), b);
  return lib::linear(x, w, b);
}

// 5) and 9) heads: how a student reads a row of E as heads, and numbers the batch-heads.
// PyTorch's view(L, N*H, D) gives head h columns [h*D, (h+1)*D) and batch-head b = n*H + h.
// heads_split_wrong reads the row as (D, H): head h is every H-th column from h.
// heads_numbered_head_major numbers b = h*N + n, in the split and the merge alike.
// merge_without_transpose reads the (B, L, D) heads as (L, N, E) as they lie in memory.
struct HeadLayout {
  bool columns_d_then_h = false, head_major = false, merge_without_transpose = false;
};
inline HeadLayout head_layout(const Injections& m) {
  return {made(m, Mistake::heads_split_wrong).has_value(), made(m, Mistake::heads_numbered_head_major).has_value(),
          made(m, Mistake::merge_without_transpose).has_value()};
}
// Where position d of head h of batch entry n sits: its batch-head, and its column of E.
inline std::size_t batch_head(std::size_t n, std::size_t h, std::size_t N, std::size_t H, const HeadLayout& l) {
  return l.head_major ? h * N + n : n * H + h;
}
inline std::size_t column(std::size_t h, std::size_t d, std::size_t H, std::size_t D, const HeadLayout& l) {
  return l.columns_d_then_h ? d * H + h : h * D + d;
}

// (L, N, E) -> (B, L, D)
template <class T>
xt::xtensor<T, 3> split_heads(const xt::xtensor<T, 3>& x, std::size_t H, const HeadLayout& l) {
  if (!l.columns_d_then_h && !l.head_major) return lib::split_heads(x, H);
  const std::size_t L = x.shape(0), N = x.shape(1), E = x.shape(2), D = E / H;
  xt::xtensor<T, 3> heads({N * H, L, D});
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t d = 0; d < D; ++d) heads(batch_head(n, h, N, H, l), i, d) = x(i, n, column(h, d, H, D, l));
  return heads;
}
// (B, L, D) -> (L, N, E), the inverse of the same reading; or the heads' memory as it lies.
template <class T>
xt::xtensor<T, 3> merge_heads(const xt::xtensor<T, 3>& heads, std::size_t H, const HeadLayout& l) {
  const std::size_t B = heads.shape(0), L = heads.shape(1), D = heads.shape(2), N = B / H;
  if (l.merge_without_transpose) return xt::xtensor<T, 3>(xt::reshape_view(heads, {L, N, H * D}));
  if (!l.columns_d_then_h && !l.head_major) return lib::merge_heads(heads, H);
  xt::xtensor<T, 3> x({L, N, H * D});
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t d = 0; d < D; ++d) x(i, n, column(h, d, H, D, l)) = heads(batch_head(n, h, N, H, l), i, d);
  return x;
}
// The same with heads_split_wrong alone (`wrong`), as the decoding step takes them.
template <class T>
xt::xtensor<T, 3> split_heads(const xt::xtensor<T, 3>& x, std::size_t H, bool wrong) {
  return split_heads(x, H, HeadLayout{.columns_d_then_h = wrong});
}
template <class T>
xt::xtensor<T, 3> merge_heads(const xt::xtensor<T, 3>& heads, std::size_t H, bool wrong) {
  return merge_heads(heads, H, HeadLayout{.columns_d_then_h = wrong});
}

// 2) and 7) the masks: each as an additive mask, then one (1 or B, L, S) mask. mask_inverted
// and mask_ignored concern attn_mask (variant 0), key_padding_mask (1) or both (2).
inline bool concerns(std::optional<int> variant, bool is_key_padding_mask) {
  return variant && (*variant == 2 || (*variant == 1) == is_key_padding_mask);
}
template <class T>
std::optional<xt::xarray<T>> additive(const std::optional<mha::Mask<T>>& mask, bool is_key_padding_mask,
                                      const Injections& m) {
  if (!mask || concerns(made(m, Mistake::mask_ignored), is_key_padding_mask)) return std::nullopt;
  if (const auto* b = std::get_if<xt::xarray<bool>>(&*mask);
      b && concerns(made(m, Mistake::mask_inverted), is_key_padding_mask))
    return lib::canonical_mask<T>(mha::Mask<T>(xt::xarray<bool>(!*b)));
  return lib::canonical_mask(*mask);
}

// attn_mask (L, S) or (B, L, S), key_padding_mask (N, S) or (S) -> (1 or B, L, S) or none.
template <class T>
std::optional<xt::xtensor<T, 3>> prepare_mask(const std::optional<mha::Mask<T>>& attn_mask,
                                              const std::optional<mha::Mask<T>>& key_padding_mask, std::size_t N,
                                              std::size_t H, std::size_t L, std::size_t S, const Injections& m) {
  std::optional<xt::xtensor<T, 3>> attn;
  if (auto a = additive(attn_mask, false, m)) {
    if (a->dimension() == 2) a->reshape({1, L, S});  // (L, S) -> (1, L, S)
    attn = xt::xtensor<T, 3>(*a);
  }
  const auto padding = additive(key_padding_mask, true, m);
  if (!padding) return attn;
  const xt::xtensor<T, 2> kpm = xt::reshape_view(*padding, {N, S});  // (S) unbatched -> (1, S)
  const bool wrong_rows = made(m, Mistake::key_padding_mask_wrong_rows).has_value();
  xt::xtensor<T, 3> merged({N * H, L, S});
  for (std::size_t b = 0; b < N * H; ++b) {
    // batch-head b = n*H + h is batch entry n; the mistake repeats the rows instead (b % N)
    const std::size_t n = wrong_rows ? b % N : b / H, a = attn && attn->shape(0) > 1 ? b : 0;
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < S; ++j) merged(b, i, j) = (attn ? (*attn)(a, i, j) : T(0)) + kpm(n, j);
  }
  return merged;
}

// What q is multiplied by: sqrt(1/D), or the mistaken scales.
template <class T>
T scale_of_q(std::size_t D, std::size_t E, const Injections& m) {
  if (made(m, Mistake::no_scaling)) return T(1);
  if (made(m, Mistake::scaled_by_d_not_sqrt)) return T(1) / static_cast<T>(D);
  if (made(m, Mistake::scaled_by_e_not_d)) return lib::attention_scale<T>(E);
  return lib::attention_scale<T>(D);
}

// 8) softmax((q * scale) k^T + mask): over the keys (axis 2), or over the queries (axis 1)
// with softmax_wrong_axis. The maximum is subtracted first; a line of -inf gives NaN.
// mask_after_softmax adds the mask to the softmax of the scores instead.
template <class T>
xt::xtensor<T, 3> attention_weights(const xt::xtensor<T, 3>& qh, const xt::xtensor<T, 3>& kh,
                                    const std::optional<xt::xtensor<T, 3>>& mask, T scale, bool over_queries,
                                    bool mask_after_softmax = false) {
  const std::size_t B = qh.shape(0), L = qh.shape(1), D = qh.shape(2), S = kh.shape(1);
  auto mask_at = [&](std::size_t b, std::size_t i, std::size_t j) {
    return mask ? (*mask)(mask->shape(0) > 1 ? b : 0, i, j) : T(0);
  };
  xt::xtensor<T, 3> w({B, L, S});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < S; ++j) {
        T dot = 0;  // (q * scale) . k: PyTorch scales q before the product
        for (std::size_t d = 0; d < D; ++d) dot += (qh(b, i, d) * scale) * kh(b, j, d);
        w(b, i, j) = dot + (mask_after_softmax ? T(0) : mask_at(b, i, j));
      }
  const std::size_t lines = over_queries ? S : L, along = over_queries ? L : S;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t line = 0; line < lines; ++line) {
      auto at = [&](std::size_t x) -> T& { return over_queries ? w(b, x, line) : w(b, line, x); };
      T top = -std::numeric_limits<T>::infinity(), sum = 0;
      for (std::size_t x = 0; x < along; ++x) top = std::max(top, at(x));
      for (std::size_t x = 0; x < along; ++x) sum += (at(x) = std::exp(at(x) - top));
      for (std::size_t x = 0; x < along; ++x) at(x) /= sum;
    }
  if (mask_after_softmax)
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t i = 0; i < L; ++i)
        for (std::size_t j = 0; j < S; ++j) w(b, i, j) += mask_at(b, i, j);
  return w;
}

// weights (B, L, S) . v (B, S, D) -> (B, L, D)
template <class T>
xt::xtensor<T, 3> weighted_values(const xt::xtensor<T, 3>& w, const xt::xtensor<T, 3>& vh) {
  const std::size_t B = w.shape(0), L = w.shape(1), S = w.shape(2), D = vh.shape(2);
  xt::xtensor<T, 3> out = xt::zeros<T>({B, L, D});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < S; ++j)
        for (std::size_t d = 0; d < D; ++d) out(b, i, d) += w(b, i, j) * vh(b, j, d);
  return out;
}

// The mask step alone, on a case: what forward() uses.
template <class T>
std::optional<xt::xtensor<T, 3>> case_mask(const mha::Case<T>& c, std::size_t N, std::size_t L, std::size_t S,
                                           const Injections& m) {
  const auto H = static_cast<std::size_t>(c.info.options.num_heads);
  return prepare_mask(c.forward.attn_mask, c.forward.key_padding_mask, N, H, L, S, m);
}

// 5) to 10): the attention after the in-projection, from t.q, t.k and t.v (and t's shapes),
// under the mistakes given.
template <class T>
void attend(const mha::Case<T>& c, Trace<T>& t, const Injections& m) {
  // 5) heads
  const HeadLayout layout = head_layout(m);
  t.qh = split_heads(t.q, t.H, layout);  // (B, L, D)
  t.kh = split_heads(t.k, t.H, layout);  // (B, S, D)
  t.vh = split_heads(t.v, t.H, layout);  // (B, S, D)

  // 7) and 8) the mask, the scores, the softmax, the weighted values
  t.mask = case_mask(c, t.N, t.L, t.S, m);  // (1 or B, L, S)
  t.weights = attention_weights(t.qh, t.kh, t.mask, scale_of_q<T>(t.D, t.E, m),
                                made(m, Mistake::softmax_wrong_axis).has_value(),
                                made(m, Mistake::mask_after_softmax).has_value());  // (B, L, S)
  t.heads = weighted_values(t.weights, t.vh);                                       // (B, L, D)

  // 9) heads side by side, out_proj
  t.merged = merge_heads(t.heads, t.H, layout);  // (L, N, E)
  std::optional<xt::xtensor<T, 1>> out_bias;
  if (c.parameters.contains("out_proj.bias")) out_bias = c.parameters.at("out_proj.bias");
  t.output = made(m, Mistake::out_proj_missing)
                 ? t.merged
                 : project(t.merged, xt::xtensor<T, 2>(c.parameters.at("out_proj.weight")), out_bias,
                           made(m, Mistake::weight_not_transposed) == 1);  // (L, N, E)

  // 10) the caller's layout, the weights averaged (or summed) over heads or per head
  t.attn_output = lib::caller_layout(t.output, t.batched, t.batch_first);
  if (c.forward.need_weights) {
    const bool average = c.forward.average_attn_weights;
    t.attn_output_weights = lib::output_weights(t.weights, t.N, t.H, average, t.batched);
    if (average && made(m, Mistake::weights_not_averaged)) *t.attn_output_weights *= static_cast<T>(t.H);
  }
}

// The whole forward of a case, under the mistakes given (none: PyTorch's).
template <class T>
Trace<T> forward(const mha::Case<T>& c, const Injections& m) {
  const mha::Options& o = c.info.options;
  Trace<T> t;
  t.batched = c.query.dimension() == 3, t.batch_first = o.batch_first && t.batched;
  t.E = static_cast<std::size_t>(o.embed_dim), t.H = static_cast<std::size_t>(o.num_heads), t.D = t.E / t.H;
  t.packed = c.parameters.contains("in_proj_weight"), t.has_bias = c.parameters.contains("in_proj_bias");
  const auto not_transposed = made(m, Mistake::weight_not_transposed);

  // 1) the inputs sequence-first and batched
  t.query = lib::seq_first(c.query, t.batch_first);  // (L, N, E)
  t.key = lib::seq_first(c.key, t.batch_first);      // (S, N, Ek)
  t.value = lib::seq_first(c.value, t.batch_first);  // (S, N, Ev)
  t.L = t.query.shape(0), t.N = t.query.shape(1), t.S = t.key.shape(0);

  // 3) in-projection
  t.in = in_projection_weights(c.parameters, t.E, m);
  t.q = project(t.query, t.in.w_q, t.in.b_q, not_transposed.has_value());  // (L, N, E)
  t.k = project(t.key, t.in.w_k, t.in.b_k, not_transposed.has_value());    // (S, N, E)
  t.v = project(t.value, t.in.w_v, t.in.b_v, not_transposed.has_value());  // (S, N, E)

  // 5) to 10)
  attend(c, t, m);
  return t;
}

// The attention alone after PyTorch's own q, k and v (the case's q.npy, k.npy, v.npy), under
// the mistakes given: lab 03's steps, each right one what the next function is given.
template <class T>
Trace<T> forward_after_pytorch_qkv(const mha::Case<T>& c, const Injections& m) {
  Trace<T> t = forward(c, {});  // the shapes
  t.q = c.expected.at("q"), t.k = c.expected.at("k"), t.v = c.expected.at("v");
  attend(c, t, m);
  return t;
}

// The gradients of a forward, by the golden files' names: grad.query, grad.key, grad.value
// (one per input object, as PyTorch's x.grad) and grad.<parameter>.
template <class T>
using GradientMap = std::map<std::string, xt::xarray<T>>;

// A weight gradient as grad_transposed gives it (a square one; another shape would not
// fit the weight, and a student's code stops there).
template <class T>
xt::xarray<T> maybe_transposed(const xt::xtensor<T, 2>& dw, bool transposed) {
  if (transposed && dw.shape(0) == dw.shape(1)) return xt::transpose(dw);
  return dw;
}

// A bias gradient: dY summed over every row (position and batch entry), or as
// bias_grad_not_summed takes it: the first row only (variant 0), or the positions of batch
// entry 0 only (variant 1). dy (L, N, out) -> (out)
template <class T>
xt::xarray<T> bias_gradient(const xt::xtensor<T, 3>& dy, std::optional<int> not_summed) {
  if (!not_summed) return xt::sum(dy, {0, 1});
  if (*not_summed == 0) return xt::view(dy, 0, 0, xt::all());
  return xt::sum(xt::view(dy, xt::all(), 0, xt::all()), {0});
}

// The objects' gradients from each use's: where query is key (and key is value) the
// gradients of one object add up, as PyTorch's x.grad does.
template <class T>
void input_gradients(const mha::CaseInfo& info, const Trace<T>& t, xt::xtensor<T, 3> dq, xt::xtensor<T, 3> dk,
                     xt::xtensor<T, 3> dv, GradientMap<T>& g) {
  if (info.query_is_key && info.key_is_value) dq += dk + dv;
  else if (info.key_is_value) dk += dv;
  else if (info.query_is_key) dq += dk;
  g["grad.query"] = lib::caller_layout(dq, t.batched, t.batch_first);
  if (!info.query_is_key) g["grad.key"] = lib::caller_layout(dk, t.batched, t.batch_first);
  if (!info.key_is_value && !(info.query_is_key && info.key_is_value))
    g["grad.value"] = lib::caller_layout(dv, t.batched, t.batch_first);
}

// The backward of a mistake-free forward, under the backward's mistakes.
template <class T>
GradientMap<T> backward(const mha::Case<T>& c, const Trace<T>& t, const Injections& m) {
  const auto transposed = made(m, Mistake::grad_transposed);        // 0: all, 1: out_proj, 2: in-projection
  const auto scale_missing = made(m, Mistake::grad_scale_missing);  // 0: dq and dk, 1: dq, 2: dk
  const auto not_summed = made(m, Mistake::bias_grad_not_summed);
  const bool out_bias = c.parameters.contains("out_proj.bias");
  GradientMap<T> g;

  // 10) and 9) out_proj: dY (L, N, E) -> d merged (L, N, E), dW_o, db_o
  const auto dy = lib::seq_first(*c.grad_attn_output, t.batch_first);
  const xt::xtensor<T, 2> w_o = c.parameters.at("out_proj.weight");
  const auto out = lib::linear_backward(t.merged, w_o, dy, out_bias);
  g["grad.out_proj.weight"] = maybe_transposed(out.weight, transposed == 0 || transposed == 1);
  if (out_bias) g["grad.out_proj.bias"] = bias_gradient(dy, not_summed);
  const auto d_heads = lib::split_heads(out.input, t.H);  // (B, L, D)

  // 8) P v, the returned weights, the softmax, the scores
  auto pv = lib::weighted_values_backward(t.weights, t.vh, d_heads);  // dP (B, L, S), dV (B, S, D)
  if (c.grad_attn_output_weights)
    pv.weights +=
        lib::output_weights_backward(*c.grad_attn_output_weights, t.N, t.H, t.L, t.S, c.forward.average_attn_weights);
  xt::xtensor<T, 3> ds;  // (B, L, S)
  if (made(m, Mistake::softmax_jacobian_diagonal_missing)) {
    // dS = -P * rowsum(dP * P): the off-diagonal part of the Jacobian alone
    const xt::xtensor<T, 3> dot = xt::sum(pv.weights * t.weights, {2}, xt::keep_dims);
    ds = -t.weights * dot;
  } else {
    ds = lib::softmax_backward(t.weights, pv.weights);
  }
  auto scores = lib::scores_backward(t.qh, t.kh, ds);  // dQ (B, L, D), dK (B, S, D), each scaled once
  const T scale = lib::attention_scale<T>(t.D);
  if (scale_missing == 0 || scale_missing == 1) scores.query /= scale;
  if (scale_missing == 0 || scale_missing == 2) scores.key /= scale;

  // 5) heads side by side: (B, ., D) -> (., N, E)
  const auto dq = lib::merge_heads(scores.query, t.H), dk = lib::merge_heads(scores.key, t.H);
  const auto dv = lib::merge_heads(pv.values, t.H);

  // 3) the in-projection, one linear layer per use
  const bool in_transposed = transposed == 0 || transposed == 2;
  const auto gq = lib::linear_backward(t.query, t.in.w_q, dq, false);
  const auto gk = lib::linear_backward(t.key, t.in.w_k, dk, false);
  const auto gv = lib::linear_backward(t.value, t.in.w_v, dv, false);
  if (t.packed) {
    g["grad.in_proj_weight"] = xt::concatenate(
        xt::xtuple(maybe_transposed(gq.weight, in_transposed), maybe_transposed(gk.weight, in_transposed),
                   maybe_transposed(gv.weight, in_transposed)),
        0);
  } else {
    g["grad.q_proj_weight"] = maybe_transposed(gq.weight, in_transposed);
    g["grad.k_proj_weight"] = maybe_transposed(gk.weight, in_transposed);
    g["grad.v_proj_weight"] = maybe_transposed(gv.weight, in_transposed);
  }
  if (t.has_bias)
    g["grad.in_proj_bias"] = xt::concatenate(
        xt::xtuple(bias_gradient(dq, not_summed), bias_gradient(dk, not_summed), bias_gradient(dv, not_summed)), 0);

  // 1) one gradient per input object, in the caller's layout
  input_gradients(c.info, t, gq.input, gk.input, gv.input, g);
  return g;
}

// The loss whose gradients the case holds: sum(attn_output * dY) [+ sum(weights * dW)].
template <class T>
double loss(const mha::Case<T>& c) {
  const auto t = forward(c, {});
  double l = xt::sum(t.attn_output * *c.grad_attn_output)();
  if (c.grad_attn_output_weights && t.attn_output_weights)
    l += xt::sum(*t.attn_output_weights * *c.grad_attn_output_weights)();
  return l;
}

}  // namespace grader
