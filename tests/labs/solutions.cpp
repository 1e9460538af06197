// tests/labs/solutions.cpp — the labs' reference solutions, for teachers and for the tests, with switchable mistakes.
//
// Each lab's functions (labs/grader/lab_api.hpp), written as a student who got them right
// writes them. The environment variable MHA_LAB_INJECT makes them wrong on purpose:
// MHA_LAB_INJECT=qk_swapped,mask_ignored:1 makes the catalogue's mistakes qk_swapped and
// mask_ignored (variant 1: key_padding_mask only) here, written independently of the
// grader's recomputation of them, so that the tests show the grader naming each one.
// Not a starter: students never see this file.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads,
// D = head_dim = E / H, B = N*H.
#include "third_party.hpp"

import mha;

#include "lab_api.hpp"

namespace {

// The variant of mistake `id` that MHA_LAB_INJECT asks for ("id" is variant 0), or none.
std::optional<int> injected(std::string_view id) {
  const char* env = std::getenv("MHA_LAB_INJECT");
  if (!env) return std::nullopt;
  std::string_view list = env;
  while (!list.empty()) {
    const auto comma = list.find(',');
    std::string_view token = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    const auto colon = token.find(':');
    if (token.substr(0, colon) != id) continue;
    return colon == std::string_view::npos ? 0 : std::stoi(std::string(token.substr(colon + 1)));
  }
  return std::nullopt;
}

// Which block of in_proj_weight holds q, k and v: [W_q; W_k; W_v], or a mistaken layout.
std::array<std::size_t, 3> qkv_blocks() {
  if (injected("qk_swapped")) return {1, 0, 2};
  if (injected("kv_swapped")) return {0, 2, 1};
  if (injected("qv_swapped")) return {2, 1, 0};
  if (injected("order_kvq")) return {2, 0, 1};  // [W_k; W_v; W_q]: q in block 2, k in 0, v in 1
  if (injected("order_vqk")) return {1, 2, 0};  // [W_v; W_q; W_k]
  return {0, 1, 2};
}

// y = x W^T + b, or x W + b with weight_not_transposed (`out`: the output projection,
// which variant 1 gets wrong too).
template <class T>
xt::xtensor<T, 3> linear(const xt::xtensor<T, 3>& x, const xt::xtensor<T, 2>& w,
                         const std::optional<xt::xtensor<T, 1>>& b, bool out = false) {
  const auto wrong = injected("weight_not_transposed");
  if (wrong && (!out || *wrong == 1)) return mha::textbook::linear(x, xt::xtensor<T, 2>(xt::transpose(w)), b);
  return mha::textbook::linear(x, w, b);
}

}  // namespace

namespace lab01 {

template <class T>
mha::SeparateProjections<T> split_packed(const xt::xtensor<T, 2>& in_proj_weight,
                                         const std::optional<xt::xtensor<T, 1>>& in_proj_bias) {
  const std::size_t E = in_proj_weight.shape(1);
  const auto block = qkv_blocks();
  auto rows = [&](std::size_t i) { return xt::xtensor<T, 2>(xt::view(in_proj_weight, xt::range(i * E, (i + 1) * E))); };
  mha::SeparateProjections<T> p{rows(block[0]), rows(block[1]), rows(block[2]), {}, {}, {}};
  if (in_proj_bias) {
    auto part = [&](std::size_t i) {
      return xt::xtensor<T, 1>(xt::view(*in_proj_bias, xt::range(i * E, (i + 1) * E)));
    };
    p.b_q = part(block[0]), p.b_k = part(block[1]), p.b_v = part(block[2]);
  }
  return p;
}

template <class T>
mha::textbook::PackedProjection<T> pack(const mha::SeparateProjections<T>& p) {
  const std::size_t E = p.w_q.shape(0);
  const auto block = qkv_blocks();
  mha::textbook::PackedProjection<T> packed{xt::xtensor<T, 2>::from_shape({3 * E, E}), std::nullopt};
  const std::array<const xt::xtensor<T, 2>*, 3> w{&p.w_q, &p.w_k, &p.w_v};
  for (std::size_t x = 0; x < 3; ++x)
    xt::view(packed.in_proj_weight, xt::range(block[x] * E, (block[x] + 1) * E)) = *w[x];
  if (p.b_q) {
    xt::xtensor<T, 1> b = xt::xtensor<T, 1>::from_shape({3 * E});
    const std::array<const xt::xtensor<T, 1>*, 3> bs{&*p.b_q, &*p.b_k, &*p.b_v};
    for (std::size_t x = 0; x < 3; ++x) xt::view(b, xt::range(block[x] * E, (block[x] + 1) * E)) = *bs[x];
    packed.in_proj_bias = b;
  }
  return packed;
}

template mha::SeparateProjections<float> split_packed(const xt::xtensor<float, 2>&,
                                                      const std::optional<xt::xtensor<float, 1>>&);
template mha::SeparateProjections<double> split_packed(const xt::xtensor<double, 2>&,
                                                       const std::optional<xt::xtensor<double, 1>>&);
template mha::textbook::PackedProjection<float> pack(const mha::SeparateProjections<float>&);
template mha::textbook::PackedProjection<double> pack(const mha::SeparateProjections<double>&);

}  // namespace lab01

namespace lab02 {

template <class T>
mha::textbook::QKV<T> in_projection(const xt::xtensor<T, 3>& query, const xt::xtensor<T, 3>& key,
                                    const xt::xtensor<T, 3>& value, const mha::SeparateProjections<T>& p) {
  auto bias = [](const std::optional<xt::xtensor<T, 1>>& b) { return injected("bias_missing") ? std::nullopt : b; };
  return {linear(query, p.w_q, bias(p.b_q)), linear(key, p.w_k, bias(p.b_k)), linear(value, p.w_v, bias(p.b_v))};
}

template <class T>
mha::textbook::QKV<T> in_projection_packed(const xt::xtensor<T, 3>& query, const xt::xtensor<T, 3>& key,
                                           const xt::xtensor<T, 3>& value, const xt::xtensor<T, 2>& in_proj_weight,
                                           const std::optional<xt::xtensor<T, 1>>& in_proj_bias) {
  return lab02::in_projection(query, key, value, lab01::split_packed(in_proj_weight, in_proj_bias));
}

template mha::textbook::QKV<float> in_projection_packed(const xt::xtensor<float, 3>&, const xt::xtensor<float, 3>&,
                                                        const xt::xtensor<float, 3>&, const xt::xtensor<float, 2>&,
                                                        const std::optional<xt::xtensor<float, 1>>&);
template mha::textbook::QKV<double> in_projection_packed(const xt::xtensor<double, 3>&, const xt::xtensor<double, 3>&,
                                                         const xt::xtensor<double, 3>&, const xt::xtensor<double, 2>&,
                                                         const std::optional<xt::xtensor<double, 1>>&);
template mha::textbook::QKV<float> in_projection(const xt::xtensor<float, 3>&, const xt::xtensor<float, 3>&,
                                                 const xt::xtensor<float, 3>&, const mha::SeparateProjections<float>&);
template mha::textbook::QKV<double> in_projection(const xt::xtensor<double, 3>&, const xt::xtensor<double, 3>&,
                                                  const xt::xtensor<double, 3>&,
                                                  const mha::SeparateProjections<double>&);

}  // namespace lab02

namespace lab03 {

// Column e of a row of E, for head h and position d within it: h*D + d (PyTorch's view of
// (H, D)); heads_split_wrong reads (D, H): d*H + h.
inline std::size_t column(std::size_t h, std::size_t d, std::size_t H, std::size_t D) {
  return injected("heads_split_wrong") ? d * H + h : h * D + d;
}

template <class T>
xt::xtensor<T, 3> split_heads(const xt::xtensor<T, 3>& x, std::size_t num_heads) {
  const std::size_t L = x.shape(0), N = x.shape(1), H = num_heads, D = x.shape(2) / H;
  xt::xtensor<T, 3> heads = xt::xtensor<T, 3>::from_shape({N * H, L, D});
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t d = 0; d < D; ++d) heads(n * H + h, i, d) = x(i, n, column(h, d, H, D));
  return heads;
}

template <class T>
xt::xtensor<T, 3> merge_heads(const xt::xtensor<T, 3>& heads, std::size_t num_heads) {
  const std::size_t H = num_heads, N = heads.shape(0) / H, L = heads.shape(1), D = heads.shape(2);
  xt::xtensor<T, 3> x = xt::xtensor<T, 3>::from_shape({L, N, H * D});
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t d = 0; d < D; ++d) x(i, n, column(h, d, H, D)) = heads(n * H + h, i, d);
  return x;
}

template <class T>
mha::textbook::Attention<T> scaled_dot_product_attention(const xt::xtensor<T, 3>& q, const xt::xtensor<T, 3>& k,
                                                         const xt::xtensor<T, 3>& v,
                                                         const std::optional<xt::xtensor<T, 3>>& mask) {
  const std::size_t B = q.shape(0), L = q.shape(1), D = q.shape(2), S = k.shape(1);
  T scale = static_cast<T>(std::sqrt(1.0 / static_cast<double>(D)));
  if (injected("no_scaling")) scale = 1;
  if (injected("scaled_by_d_not_sqrt")) scale = T(1) / static_cast<T>(D);
  xt::xtensor<T, 3> w = xt::xtensor<T, 3>::from_shape({B, L, S});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < S; ++j) {
        T dot = 0;
        for (std::size_t d = 0; d < D; ++d) dot += (q(b, i, d) * scale) * k(b, j, d);
        w(b, i, j) = dot + (mask ? (*mask)(mask->shape(0) == 1 ? 0 : b, i, j) : T(0));
      }
  const bool over_queries = injected("softmax_wrong_axis").has_value();
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t line = 0; line < (over_queries ? S : L); ++line) {
      const std::size_t along = over_queries ? L : S;
      auto at = [&](std::size_t x) -> T& { return over_queries ? w(b, x, line) : w(b, line, x); };
      T top = -std::numeric_limits<T>::infinity(), sum = 0;
      for (std::size_t x = 0; x < along; ++x) top = std::max(top, at(x));
      for (std::size_t x = 0; x < along; ++x) sum += (at(x) = std::exp(at(x) - top));
      for (std::size_t x = 0; x < along; ++x) at(x) /= sum;
    }
  xt::xtensor<T, 3> out = xt::zeros<T>({B, L, D});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < S; ++j)
        for (std::size_t d = 0; d < D; ++d) out(b, i, d) += w(b, i, j) * v(b, j, d);
  return {out, w, {}};
}

template xt::xtensor<float, 3> split_heads(const xt::xtensor<float, 3>&, std::size_t);
template xt::xtensor<double, 3> split_heads(const xt::xtensor<double, 3>&, std::size_t);
template xt::xtensor<float, 3> merge_heads(const xt::xtensor<float, 3>&, std::size_t);
template xt::xtensor<double, 3> merge_heads(const xt::xtensor<double, 3>&, std::size_t);
template mha::textbook::Attention<float> scaled_dot_product_attention(const xt::xtensor<float, 3>&,
                                                                      const xt::xtensor<float, 3>&,
                                                                      const xt::xtensor<float, 3>&,
                                                                      const std::optional<xt::xtensor<float, 3>>&);
template mha::textbook::Attention<double> scaled_dot_product_attention(const xt::xtensor<double, 3>&,
                                                                       const xt::xtensor<double, 3>&,
                                                                       const xt::xtensor<double, 3>&,
                                                                       const std::optional<xt::xtensor<double, 3>>&);

}  // namespace lab03

namespace lab04 {

// Does a mistake of variant 0 (attn_mask), 1 (key_padding_mask) or 2 (both) concern this mask?
inline bool concerns(std::optional<int> variant, bool padding) {
  return variant && (*variant == 2 || (*variant == 1) == padding);
}

// A mask as numbers added to the scores: a bool True (masked) is -inf, False 0.
template <class T>
std::optional<xt::xarray<T>> additive(const std::optional<mha::Mask<T>>& mask, bool padding) {
  if (!mask || concerns(injected("mask_ignored"), padding)) return std::nullopt;
  if (const auto* f = std::get_if<xt::xarray<T>>(&*mask)) return *f;
  const auto& b = std::get<xt::xarray<bool>>(*mask);
  const bool inverted = concerns(injected("mask_inverted"), padding);
  const xt::xarray<bool> masked = inverted ? xt::xarray<bool>(!b) : b;  // True: do not attend
  return xt::xarray<T>(xt::where(masked, -std::numeric_limits<T>::infinity(), T(0)));
}

template <class T>
std::optional<xt::xtensor<T, 3>> prepare_mask(const std::optional<mha::Mask<T>>& attn_mask,
                                              const std::optional<mha::Mask<T>>& key_padding_mask, std::size_t N,
                                              std::size_t num_heads, std::size_t L, std::size_t S) {
  std::optional<xt::xtensor<T, 3>> attn;
  if (auto a = additive(attn_mask, false)) {
    if (a->dimension() == 2) a->reshape({1, L, S});  // (L, S) -> (1, L, S)
    attn = xt::xtensor<T, 3>(*a);
  }
  const auto padding = additive(key_padding_mask, true);
  if (!padding) return attn;
  const std::size_t H = num_heads, B = N * H;
  xt::xtensor<T, 3> merged = xt::xtensor<T, 3>::from_shape({B, L, S});
  const bool wrong_rows = injected("key_padding_mask_wrong_rows").has_value();
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < S; ++j)
        merged(b, i, j) =
            (attn ? (*attn)(attn->shape(0) == 1 ? 0 : b, i, j) : T(0)) + (*padding)(wrong_rows ? b % N : b / H, j);
  return merged;
}

template std::optional<xt::xtensor<float, 3>> prepare_mask(const std::optional<mha::Mask<float>>&,
                                                           const std::optional<mha::Mask<float>>&, std::size_t,
                                                           std::size_t, std::size_t, std::size_t);
template std::optional<xt::xtensor<double, 3>> prepare_mask(const std::optional<mha::Mask<double>>&,
                                                            const std::optional<mha::Mask<double>>&, std::size_t,
                                                            std::size_t, std::size_t, std::size_t);

}  // namespace lab04

namespace lab05 {

// What the forward keeps for the backward.
template <class T>
struct Kept {
  xt::xtensor<T, 3> query, key, value;  // (L, N, E), (S, N, Ek), (S, N, Ev)
  mha::SeparateProjections<T> in;
  xt::xtensor<T, 3> qh, kh, vh, weights, merged;
  std::size_t L = 0, S = 0, N = 0, H = 1;
  bool batched = true, batch_first = false;
};

template <class T>
mha::SeparateProjections<T> in_weights(const mha::StateDict<T>& p) {
  std::optional<xt::xtensor<T, 1>> b;
  if (p.contains("in_proj_bias")) b = p.at("in_proj_bias");
  if (p.contains("in_proj_weight")) return lab01::split_packed(xt::xtensor<T, 2>(p.at("in_proj_weight")), b);
  mha::SeparateProjections<T> w{p.at("q_proj_weight"), p.at("k_proj_weight"), p.at("v_proj_weight"), {}, {}, {}};
  if (b) {
    const std::size_t E = w.w_q.shape(0);
    w.b_q = xt::view(*b, xt::range(0, E)), w.b_k = xt::view(*b, xt::range(E, 2 * E));
    w.b_v = xt::view(*b, xt::range(2 * E, 3 * E));
  }
  return w;
}

template <class T>
mha::Output<T> forward_kept(const mha::Options& options, const mha::StateDict<T>& parameters,
                            const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                            const mha::ForwardOptions<T>& opts, Kept<T>& k) {
  k.batched = query.dimension() == 3, k.batch_first = options.batch_first && k.batched;
  k.H = static_cast<std::size_t>(options.num_heads);
  // 1) sequence-first, batched
  k.query = mha::textbook::to_seq_first_batched(query, k.batch_first);  // (L, N, E)
  k.key = mha::textbook::to_seq_first_batched(key, k.batch_first);      // (S, N, Ek)
  k.value = mha::textbook::to_seq_first_batched(value, k.batch_first);  // (S, N, Ev)
  k.L = k.query.shape(0), k.N = k.query.shape(1), k.S = k.key.shape(0);
  // 3) in-projection
  k.in = in_weights(parameters);
  const auto qkv = lab02::in_projection(k.query, k.key, k.value, k.in);
  // 5) heads
  k.qh = lab03::split_heads(qkv.q, k.H), k.kh = lab03::split_heads(qkv.k, k.H), k.vh = lab03::split_heads(qkv.v, k.H);
  // 2) and 7) one mask
  auto padding = opts.key_padding_mask;
  if (padding && !k.batched) std::visit([&](auto& m) { m.reshape({std::size_t{1}, k.S}); }, *padding);
  const auto mask = lab04::prepare_mask(opts.attn_mask, padding, k.N, k.H, k.L, k.S);
  // 8) attention. scaled_by_e_not_d is made here, where E is known: q / sqrt(E) is
  //    (q * sqrt(D / E)) / sqrt(D).
  xt::xtensor<T, 3> qh = k.qh;
  if (injected("scaled_by_e_not_d"))
    qh *= static_cast<T>(std::sqrt(static_cast<double>(k.qh.shape(2)) / static_cast<double>(qkv.q.shape(2))));
  const auto a = lab03::scaled_dot_product_attention(qh, k.kh, k.vh, mask);
  k.weights = a.weights;
  // 9) heads merged, out_proj
  k.merged = lab03::merge_heads(a.output, k.H);
  std::optional<xt::xtensor<T, 1>> out_bias;
  if (parameters.contains("out_proj.bias")) out_bias = parameters.at("out_proj.bias");
  const auto out = injected("out_proj_missing")
                       ? k.merged
                       : linear(k.merged, xt::xtensor<T, 2>(parameters.at("out_proj.weight")), out_bias, true);
  // 10) the caller's layout
  mha::Output<T> o{mha::textbook::caller_layout(out, k.batched, k.batch_first), std::nullopt};
  if (opts.need_weights) {
    xt::xtensor<T, 4> per_head = xt::reshape_view(a.weights, {k.N, k.H, k.L, k.S});
    xt::xarray<T> w = per_head;
    if (opts.average_attn_weights) {
      w = xt::sum(per_head, {1});
      if (!injected("weights_not_averaged")) w /= static_cast<T>(k.H);
    }
    if (!k.batched) w = xt::view(w, 0);
    o.attn_output_weights = w;
  }
  return o;
}

template <class T>
mha::Output<T> forward(const mha::Options& options, const mha::StateDict<T>& parameters, const xt::xarray<T>& query,
                       const xt::xarray<T>& key, const xt::xarray<T>& value, const mha::ForwardOptions<T>& opts) {
  Kept<T> k;
  return forward_kept(options, parameters, query, key, value, opts, k);
}

template mha::Output<float> forward(const mha::Options&, const mha::StateDict<float>&, const xt::xarray<float>&,
                                    const xt::xarray<float>&, const xt::xarray<float>&,
                                    const mha::ForwardOptions<float>&);
template mha::Output<double> forward(const mha::Options&, const mha::StateDict<double>&, const xt::xarray<double>&,
                                     const xt::xarray<double>&, const xt::xarray<double>&,
                                     const mha::ForwardOptions<double>&);

}  // namespace lab05

namespace lab06 {

// A weight's gradient dY^T X, (out, in); grad_transposed (variant 0: every weight, 1:
// out_proj's, 2: the in-projection's) gives X^T dY.
template <class T>
xt::xarray<T> weight_gradient(const mha::textbook::LinearGradients<T>& g, bool out) {
  const auto wrong = injected("grad_transposed");
  if (wrong && (*wrong == 0 || (*wrong == 1) == out) && g.weight.shape(0) == g.weight.shape(1))
    return xt::transpose(g.weight);
  return g.weight;
}

// A bias's gradient: dY summed over positions and batch; bias_grad_not_summed takes the
// first row (variant 0) or batch entry 0's positions (variant 1). dy (L, N, out)
template <class T>
xt::xarray<T> bias_gradient(const xt::xtensor<T, 3>& dy) {
  const auto wrong = injected("bias_grad_not_summed");
  if (!wrong) return xt::sum(dy, {0, 1});
  if (*wrong == 0) return xt::view(dy, 0, 0, xt::all());
  return xt::sum(xt::view(dy, xt::all(), 0, xt::all()), {0});
}

template <class T>
mha::Gradients<T> backward(const mha::Options& options, const mha::StateDict<T>& parameters, const xt::xarray<T>& query,
                           const xt::xarray<T>& key, const xt::xarray<T>& value, const mha::ForwardOptions<T>& opts,
                           const xt::xarray<T>& grad_attn_output,
                           const std::optional<xt::xarray<T>>& grad_attn_output_weights) {
  lab05::Kept<T> k;
  lab05::forward_kept(options, parameters, query, key, value, opts, k);
  mha::Gradients<T> g;
  // 9) out_proj: dY (L, N, E)
  const auto dy = mha::textbook::to_seq_first_batched(grad_attn_output, k.batch_first);
  const bool has_bias = parameters.contains("out_proj.bias");
  const auto out =
      mha::textbook::linear_backward(k.merged, xt::xtensor<T, 2>(parameters.at("out_proj.weight")), dy, false);
  g.parameters["out_proj.weight"] = weight_gradient(out, true);
  if (has_bias) g.parameters["out_proj.bias"] = bias_gradient(dy);
  // 8) P v, the weights' own gradient, softmax, scores
  const auto d_heads = mha::textbook::split_heads(out.input, k.H);  // (B, L, D)
  auto pv = mha::textbook::weighted_values_backward(k.weights, k.vh, d_heads);
  if (grad_attn_output_weights)
    pv.weights += mha::textbook::output_weights_backward(*grad_attn_output_weights, k.N, k.H, k.L, k.S,
                                                         opts.average_attn_weights);
  xt::xtensor<T, 3> ds;
  if (injected("softmax_jacobian_diagonal_missing")) {
    const xt::xtensor<T, 3> dot = xt::sum(pv.weights * k.weights, {2}, xt::keep_dims);
    ds = -k.weights * dot;
  } else {
    ds = mha::textbook::softmax_backward(k.weights, pv.weights);
  }
  auto scores = mha::textbook::scores_backward(k.qh, k.kh, ds);
  const T scale = mha::textbook::attention_scale<T>(k.qh.shape(2));
  if (const auto wrong = injected("grad_scale_missing")) {
    if (*wrong != 2) scores.query /= scale;
    if (*wrong != 1) scores.key /= scale;
  }
  // 5) heads merged, 3) in-projection
  const auto dq = mha::textbook::merge_heads(scores.query, k.H), dk = mha::textbook::merge_heads(scores.key, k.H);
  const auto dv = mha::textbook::merge_heads(pv.values, k.H);
  const auto gq = mha::textbook::linear_backward(k.query, k.in.w_q, dq, false);
  const auto gk = mha::textbook::linear_backward(k.key, k.in.w_k, dk, false);
  const auto gv = mha::textbook::linear_backward(k.value, k.in.w_v, dv, false);
  if (parameters.contains("in_proj_weight"))
    g.parameters["in_proj_weight"] = xt::concatenate(
        xt::xtuple(weight_gradient(gq, false), weight_gradient(gk, false), weight_gradient(gv, false)), 0);
  else
    g.parameters["q_proj_weight"] = weight_gradient(gq, false),
    g.parameters["k_proj_weight"] = weight_gradient(gk, false),
    g.parameters["v_proj_weight"] = weight_gradient(gv, false);
  if (parameters.contains("in_proj_bias"))
    g.parameters["in_proj_bias"] =
        xt::concatenate(xt::xtuple(bias_gradient(dq), bias_gradient(dk), bias_gradient(dv)), 0);
  g.query = mha::textbook::caller_layout(gq.input, k.batched, k.batch_first);
  g.key = mha::textbook::caller_layout(gk.input, k.batched, k.batch_first);
  g.value = mha::textbook::caller_layout(gv.input, k.batched, k.batch_first);
  return g;
}

template mha::Gradients<float> backward(const mha::Options&, const mha::StateDict<float>&, const xt::xarray<float>&,
                                        const xt::xarray<float>&, const xt::xarray<float>&,
                                        const mha::ForwardOptions<float>&, const xt::xarray<float>&,
                                        const std::optional<xt::xarray<float>>&);
template mha::Gradients<double> backward(const mha::Options&, const mha::StateDict<double>&, const xt::xarray<double>&,
                                         const xt::xarray<double>&, const xt::xarray<double>&,
                                         const mha::ForwardOptions<double>&, const xt::xarray<double>&,
                                         const std::optional<xt::xarray<double>>&);

}  // namespace lab06
