// tests/labs/solutions.cpp — the labs' reference solutions, for teachers and for the tests, with switchable mistakes.
//
// Each lab's functions (labs/interface/mha_lab.hpp), written as a student who got them
// right writes them: against that header alone, on plain xtensor, with lab::linear the one
// step it provides. Nothing of the library is used: each step of PyTorch's
// multi_head_attention_forward (torch/nn/functional.py) and of its autograd is written
// here, in PyTorch's order of operations (q scaled by sqrt(1/D) before the product, the
// row's maximum subtracted before exp, NaN weights in a row whose keys are all masked), so
// that the answers agree with PyTorch's golden tensors within the grader's tolerances.
//
// The environment variable MHA_LAB_INJECT makes them wrong on purpose:
// MHA_LAB_INJECT=qk_swapped,mask_ignored:1 makes the catalogue's mistakes qk_swapped and
// mask_ignored (variant 1: key_padding_mask only) here, written independently of the
// grader's recomputation of them, so that the tests show the grader naming each one. Two
// switches are not in the catalogue: merge_heads_reversed, a mistake the grader cannot name
// (it names the function and its page), and scale_k, k scaled instead of q, which is right
// within rounding. Not a starter: students never see this file.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads,
// D = head_dim = E / H, B = N*H; Ek = kdim, Ev = vdim; in / out = a linear layer's widths.
#include "mha_lab.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string_view>

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

// Which block of in_proj_weight (or, `of_bias`, of in_proj_bias) holds q, k and v:
// [W_q; W_k; W_v], or a mistaken layout. A layout mistake of variant 1 is made in the
// weight alone, of variant 2 in the bias alone (a partial swap), of variant 0 in both.
std::array<std::size_t, 3> qkv_blocks(bool of_bias) {
  auto in_this = [of_bias](std::string_view id) {
    const auto variant = injected(id);
    return variant && (*variant == 0 || *variant == (of_bias ? 2 : 1));
  };
  if (in_this("qk_swapped")) return {1, 0, 2};
  if (in_this("kv_swapped")) return {0, 2, 1};
  if (in_this("qv_swapped")) return {2, 1, 0};
  if (in_this("order_kvq")) return {2, 0, 1};  // [W_k; W_v; W_q]: q in block 2, k in 0, v in 1
  if (in_this("order_vqk")) return {1, 2, 0};  // [W_v; W_q; W_k]
  return {0, 1, 2};
}

// y = x W^T + b, or x W + b with weight_not_transposed (`out`: the output projection,
// which variant 1 gets wrong too). x (L, N, in), w (out, in), b (out) -> (L, N, out)
template <class T>
xt::xtensor<T, 3> linear(const xt::xtensor<T, 3>& x, const xt::xtensor<T, 2>& w,
                         const std::optional<xt::xtensor<T, 1>>& b, bool out = false) {
  const auto wrong = injected("weight_not_transposed");
  if (wrong && (!out || *wrong == 1)) return lab::linear(x, xt::xtensor<T, 2>(xt::transpose(w)), b);
  return lab::linear(x, w, b);
}

// What q is multiplied by before q . k^T: sqrt(1/D), computed in double and then rounded
// to T, as PyTorch writes it (q * math.sqrt(1.0 / float(D))); dividing by sqrt(D) instead
// differs in the last bit.
template <class T>
T attention_scale(std::size_t D) {
  return static_cast<T>(std::sqrt(1.0 / static_cast<double>(D)));
}

// How a row of E is read as heads: PyTorch's view (H, D), column h*D + d for position d of
// head h; or (D, H), column d*H + h, the mistake heads_split_wrong.
enum class HeadColumns { h_then_d, d_then_h };

std::size_t column(std::size_t h, std::size_t d, std::size_t H, std::size_t D, HeadColumns order) {
  return order == HeadColumns::d_then_h ? d * H + h : h * D + d;
}

// How the batch-heads are numbered: PyTorch's b = n*H + h, the heads of one batch entry
// side by side; or b = h*N + n, the mistake heads_numbered_head_major.
enum class BatchHeads { entry_major, head_major };

std::size_t batch_head(std::size_t n, std::size_t h, std::size_t N, std::size_t H, BatchHeads numbering) {
  return numbering == BatchHeads::head_major ? h * N + n : n * H + h;
}

// (L, N, E) -> (N*H, L, D): x.view(L, N*H, D).transpose(0, 1); batch-head b = n*H + h.
template <class T>
xt::xtensor<T, 3> heads_of(const xt::xtensor<T, 3>& x, std::size_t H, HeadColumns order,
                           BatchHeads numbering = BatchHeads::entry_major) {
  if (H == 0 || x.shape(2) % H != 0)
    throw std::invalid_argument("split_heads: " + std::to_string(H) + " heads do not divide embed_dim " +
                                std::to_string(x.shape(2)));
  const std::size_t L = x.shape(0), N = x.shape(1), D = x.shape(2) / H;
  xt::xtensor<T, 3> heads = xt::xtensor<T, 3>::from_shape({N * H, L, D});
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t d = 0; d < D; ++d)
          heads(batch_head(n, h, N, H, numbering), i, d) = x(i, n, column(h, d, H, D, order));
  return heads;
}

// (N*H, L, D) -> (L, N, E): the heads side by side again, heads.transpose(0, 1).view(L, N, E).
template <class T>
xt::xtensor<T, 3> heads_merged(const xt::xtensor<T, 3>& heads, std::size_t H, HeadColumns order,
                               BatchHeads numbering = BatchHeads::entry_major) {
  if (H == 0 || heads.shape(0) % H != 0)
    throw std::invalid_argument("merge_heads: " + std::to_string(H) + " heads do not divide " +
                                std::to_string(heads.shape(0)) + " batch-heads");
  const std::size_t N = heads.shape(0) / H, L = heads.shape(1), D = heads.shape(2);
  xt::xtensor<T, 3> x = xt::xtensor<T, 3>::from_shape({L, N, H * D});
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t d = 0; d < D; ++d)
          x(i, n, column(h, d, H, D, order)) = heads(batch_head(n, h, N, H, numbering), i, d);
  return x;
}

// A query, key or value as multi_head_attention_forward sees it, sequence-first and
// batched: (L, N, E) as it is, (N, L, E) batch_first transposed, (L, E) unbatched a batch
// of one. -> (L, N, E)
template <class T>
xt::xtensor<T, 3> to_seq_first_batched(const xt::xarray<T>& x, bool batch_first) {
  if (x.dimension() == 2) return xt::view(x, xt::all(), xt::newaxis(), xt::all());  // (L, E) -> (L, 1, E)
  if (x.dimension() != 3)
    throw std::invalid_argument("expected a 2-D or 3-D input, got " + std::to_string(x.dimension()) + "-D");
  if (batch_first) return xt::transpose(x, {1, 0, 2});  // (N, L, E) -> (L, N, E)
  return x;
}

// (L, N, E) -> the caller's layout: (N, L, E) batch_first, (L, E) unbatched.
template <class T>
xt::xarray<T> caller_layout(const xt::xtensor<T, 3>& x, bool batched, bool batch_first) {
  if (!batched) return xt::view(x, xt::all(), 0, xt::all());  // (L, E)
  if (batch_first) return xt::transpose(x, {1, 0, 2});        // (N, L, E)
  return x;
}

}  // namespace

namespace lab01 {

template <class T>
lab::SeparateProjections<T> split_packed(const xt::xtensor<T, 2>& in_proj_weight,
                                         const std::optional<xt::xtensor<T, 1>>& in_proj_bias) {
  const std::size_t E = in_proj_weight.shape(1);
  const auto block = qkv_blocks(/*of_bias=*/false), bias_block = qkv_blocks(/*of_bias=*/true);
  auto rows = [&](std::size_t i) { return xt::xtensor<T, 2>(xt::view(in_proj_weight, xt::range(i * E, (i + 1) * E))); };
  lab::SeparateProjections<T> p{rows(block[0]), rows(block[1]), rows(block[2]), {}, {}, {}};
  const auto not_split = injected("bias_not_split");  // 0: the bias left out, 1: given whole to each
  if (in_proj_bias && not_split == 1) p.b_q = p.b_k = p.b_v = *in_proj_bias;
  else if (in_proj_bias && !not_split) {
    auto part = [&](std::size_t i) {
      return xt::xtensor<T, 1>(xt::view(*in_proj_bias, xt::range(i * E, (i + 1) * E)));
    };
    p.b_q = part(bias_block[0]), p.b_k = part(bias_block[1]), p.b_v = part(bias_block[2]);
  }
  return p;
}

template <class T>
lab::PackedProjection<T> pack(const lab::SeparateProjections<T>& p) {
  const std::size_t E = p.w_q.shape(0);
  const auto block = qkv_blocks(/*of_bias=*/false), bias_block = qkv_blocks(/*of_bias=*/true);
  lab::PackedProjection<T> packed{xt::xtensor<T, 2>::from_shape({3 * E, E}), std::nullopt};
  const std::array<const xt::xtensor<T, 2>*, 3> w{&p.w_q, &p.w_k, &p.w_v};
  for (std::size_t x = 0; x < 3; ++x)
    xt::view(packed.in_proj_weight, xt::range(block[x] * E, (block[x] + 1) * E)) = *w[x];
  if (p.b_q) {
    xt::xtensor<T, 1> b = xt::xtensor<T, 1>::from_shape({3 * E});
    const std::array<const xt::xtensor<T, 1>*, 3> bs{&*p.b_q, &*p.b_k, &*p.b_v};
    for (std::size_t x = 0; x < 3; ++x) xt::view(b, xt::range(bias_block[x] * E, (bias_block[x] + 1) * E)) = *bs[x];
    packed.in_proj_bias = b;
  }
  return packed;
}

template lab::SeparateProjections<float> split_packed(const xt::xtensor<float, 2>&,
                                                      const std::optional<xt::xtensor<float, 1>>&);
template lab::SeparateProjections<double> split_packed(const xt::xtensor<double, 2>&,
                                                       const std::optional<xt::xtensor<double, 1>>&);
template lab::PackedProjection<float> pack(const lab::SeparateProjections<float>&);
template lab::PackedProjection<double> pack(const lab::SeparateProjections<double>&);

}  // namespace lab01

namespace lab02 {

template <class T>
lab::QKV<T> in_projection(const xt::xtensor<T, 3>& query, const xt::xtensor<T, 3>& key, const xt::xtensor<T, 3>& value,
                          const lab::SeparateProjections<T>& p) {
  auto bias = [](const std::optional<xt::xtensor<T, 1>>& b) { return injected("bias_missing") ? std::nullopt : b; };
  return {linear(query, p.w_q, bias(p.b_q)), linear(key, p.w_k, bias(p.b_k)), linear(value, p.w_v, bias(p.b_v))};
}

template <class T>
lab::QKV<T> in_projection_packed(const xt::xtensor<T, 3>& query, const xt::xtensor<T, 3>& key,
                                 const xt::xtensor<T, 3>& value, const xt::xtensor<T, 2>& in_proj_weight,
                                 const std::optional<xt::xtensor<T, 1>>& in_proj_bias) {
  return lab02::in_projection(query, key, value, lab01::split_packed(in_proj_weight, in_proj_bias));
}

template lab::QKV<float> in_projection_packed(const xt::xtensor<float, 3>&, const xt::xtensor<float, 3>&,
                                              const xt::xtensor<float, 3>&, const xt::xtensor<float, 2>&,
                                              const std::optional<xt::xtensor<float, 1>>&);
template lab::QKV<double> in_projection_packed(const xt::xtensor<double, 3>&, const xt::xtensor<double, 3>&,
                                               const xt::xtensor<double, 3>&, const xt::xtensor<double, 2>&,
                                               const std::optional<xt::xtensor<double, 1>>&);
template lab::QKV<float> in_projection(const xt::xtensor<float, 3>&, const xt::xtensor<float, 3>&,
                                       const xt::xtensor<float, 3>&, const lab::SeparateProjections<float>&);
template lab::QKV<double> in_projection(const xt::xtensor<double, 3>&, const xt::xtensor<double, 3>&,
                                        const xt::xtensor<double, 3>&, const lab::SeparateProjections<double>&);

}  // namespace lab02

namespace lab03 {

// The columns of a head as PyTorch reads them, or as heads_split_wrong does.
inline HeadColumns head_columns() {
  return injected("heads_split_wrong") ? HeadColumns::d_then_h : HeadColumns::h_then_d;
}

// The batch-heads numbered as PyTorch numbers them, or as heads_numbered_head_major does.
inline BatchHeads batch_heads() {
  return injected("heads_numbered_head_major") ? BatchHeads::head_major : BatchHeads::entry_major;
}

template <class T>
xt::xtensor<T, 3> split_heads(const xt::xtensor<T, 3>& x, std::size_t num_heads) {
  return heads_of(x, num_heads, head_columns(), batch_heads());  // (L, N, E) -> (N*H, L, D)
}

template <class T>
xt::xtensor<T, 3> merge_heads(const xt::xtensor<T, 3>& heads, std::size_t num_heads) {
  if (injected("merge_without_transpose")) {
    // heads.view(L, N, E) without the transpose(0, 1) before it: the (N*H, L, D) numbers in
    // the order they lie, read as (L, N, E).
    const std::size_t L = heads.shape(1), E = num_heads * heads.shape(2), N = heads.shape(0) / num_heads;
    xt::xtensor<T, 3> x = xt::xtensor<T, 3>::from_shape({L, N, E});
    std::copy(heads.begin(), heads.end(), x.begin());
    return x;
  }
  if (injected("merge_heads_reversed")) {
    // Not in the catalogue (the test of what the grader says then): each batch entry's
    // heads merged last to first.
    xt::xtensor<T, 3> reversed = heads;
    const std::size_t N = heads.shape(0) / num_heads;
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t h = 0; h < num_heads; ++h)
        xt::view(reversed, n * num_heads + h) = xt::view(heads, n * num_heads + (num_heads - 1 - h));
    return heads_merged(reversed, num_heads, head_columns(), batch_heads());
  }
  return heads_merged(heads, num_heads, head_columns(), batch_heads());  // (N*H, L, D) -> (L, N, E)
}

template <class T>
lab::Attention<T> scaled_dot_product_attention(const xt::xtensor<T, 3>& q, const xt::xtensor<T, 3>& k,
                                               const xt::xtensor<T, 3>& v,
                                               const std::optional<xt::xtensor<T, 3>>& mask) {
  const std::size_t B = q.shape(0), L = q.shape(1), D = q.shape(2), S = k.shape(1);
  T scale = attention_scale<T>(D);
  if (injected("no_scaling")) scale = 1;
  if (injected("scaled_by_d_not_sqrt")) scale = T(1) / static_cast<T>(D);
  // scale_k is no mistake: k scaled instead of q is the same product, up to rounding within
  // the grader's tolerance (lab 03's README says so; a test holds it).
  const bool scale_k = injected("scale_k").has_value();
  const bool mask_after = injected("mask_after_softmax").has_value();
  auto mask_at = [&](std::size_t b, std::size_t i, std::size_t j) {
    return mask ? (*mask)(mask->shape(0) == 1 ? 0 : b, i, j) : T(0);
  };
  // 1) scores = (q * scale) k^T + mask: (B, L, D) x (B, D, S) -> (B, L, S)
  xt::xtensor<T, 3> w = xt::xtensor<T, 3>::from_shape({B, L, S});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < S; ++j) {
        T dot = 0;
        for (std::size_t d = 0; d < D; ++d)
          dot += scale_k ? q(b, i, d) * (k(b, j, d) * scale) : (q(b, i, d) * scale) * k(b, j, d);
        w(b, i, j) = dot + (mask_after ? T(0) : mask_at(b, i, j));
      }
  // 2) softmax over the keys, the row's maximum subtracted first; a row of -inf gives NaN
  //    (exp(-inf - -inf)), as torch.softmax does. softmax_wrong_axis takes it over the queries.
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
  // mask_after_softmax: the mask added to the weights, after the softmax instead of before
  if (mask_after)
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t i = 0; i < L; ++i)
        for (std::size_t j = 0; j < S; ++j) w(b, i, j) = w(b, i, j) + mask_at(b, i, j);
  // 3) output = weights v: (B, L, S) x (B, S, D) -> (B, L, D)
  xt::xtensor<T, 3> out = xt::zeros<T>({B, L, D});
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < S; ++j)
        for (std::size_t d = 0; d < D; ++d) out(b, i, d) += w(b, i, j) * v(b, j, d);
  return {out, w};
}

template xt::xtensor<float, 3> split_heads(const xt::xtensor<float, 3>&, std::size_t);
template xt::xtensor<double, 3> split_heads(const xt::xtensor<double, 3>&, std::size_t);
template xt::xtensor<float, 3> merge_heads(const xt::xtensor<float, 3>&, std::size_t);
template xt::xtensor<double, 3> merge_heads(const xt::xtensor<double, 3>&, std::size_t);
template lab::Attention<float> scaled_dot_product_attention(const xt::xtensor<float, 3>&, const xt::xtensor<float, 3>&,
                                                            const xt::xtensor<float, 3>&,
                                                            const std::optional<xt::xtensor<float, 3>>&);
template lab::Attention<double> scaled_dot_product_attention(const xt::xtensor<double, 3>&,
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
std::optional<xt::xarray<T>> additive(const std::optional<lab::Mask<T>>& mask, bool padding) {
  if (!mask || concerns(injected("mask_ignored"), padding)) return std::nullopt;
  if (const auto* f = std::get_if<xt::xarray<T>>(&*mask)) return *f;
  const auto& b = std::get<xt::xarray<bool>>(*mask);
  const bool inverted = concerns(injected("mask_inverted"), padding);
  const xt::xarray<bool> masked = inverted ? xt::xarray<bool>(!b) : b;  // True: do not attend
  return xt::xarray<T>(xt::where(masked, -std::numeric_limits<T>::infinity(), T(0)));
}

template <class T>
std::optional<xt::xtensor<T, 3>> prepare_mask(const std::optional<lab::Mask<T>>& attn_mask,
                                              const std::optional<lab::Mask<T>>& key_padding_mask, std::size_t N,
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

template std::optional<xt::xtensor<float, 3>> prepare_mask(const std::optional<lab::Mask<float>>&,
                                                           const std::optional<lab::Mask<float>>&, std::size_t,
                                                           std::size_t, std::size_t, std::size_t);
template std::optional<xt::xtensor<double, 3>> prepare_mask(const std::optional<lab::Mask<double>>&,
                                                            const std::optional<lab::Mask<double>>&, std::size_t,
                                                            std::size_t, std::size_t, std::size_t);

}  // namespace lab04

namespace lab05 {

// What the forward keeps for the backward.
template <class T>
struct Kept {
  xt::xtensor<T, 3> query, key, value;  // (L, N, E), (S, N, Ek), (S, N, Ev)
  lab::SeparateProjections<T> in;
  xt::xtensor<T, 3> qh, kh, vh;  // (B, L, D), (B, S, D), (B, S, D)
  xt::xtensor<T, 3> weights;     // (B, L, S)
  xt::xtensor<T, 3> merged;      // (L, N, E): the heads' output side by side, before out_proj
  std::size_t L = 0, S = 0, N = 0, H = 1;
  bool batched = true, batch_first = false;
};

// The in-projection's weights by state_dict name: the packed in_proj_weight split (lab 01),
// or q_proj_weight, k_proj_weight, v_proj_weight with the thirds of in_proj_bias.
template <class T>
lab::SeparateProjections<T> in_weights(const lab::StateDict<T>& p) {
  std::optional<xt::xtensor<T, 1>> b;
  if (p.contains("in_proj_bias")) b = p.at("in_proj_bias");
  if (p.contains("in_proj_weight")) return lab01::split_packed(xt::xtensor<T, 2>(p.at("in_proj_weight")), b);
  lab::SeparateProjections<T> w{p.at("q_proj_weight"), p.at("k_proj_weight"), p.at("v_proj_weight"), {}, {}, {}};
  if (b) {
    const std::size_t E = w.w_q.shape(0);
    w.b_q = xt::view(*b, xt::range(0, E)), w.b_k = xt::view(*b, xt::range(E, 2 * E));
    w.b_v = xt::view(*b, xt::range(2 * E, 3 * E));
  }
  return w;
}

template <class T>
lab::Output<T> forward_kept(const lab::Options& options, const lab::StateDict<T>& parameters,
                            const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                            const lab::ForwardOptions<T>& opts, Kept<T>& k) {
  k.batched = query.dimension() == 3, k.batch_first = options.batch_first && k.batched;
  k.H = static_cast<std::size_t>(options.num_heads);
  // 1) sequence-first, batched
  k.query = to_seq_first_batched(query, k.batch_first);  // (L, N, E)
  k.key = to_seq_first_batched(key, k.batch_first);      // (S, N, Ek)
  k.value = to_seq_first_batched(value, k.batch_first);  // (S, N, Ev)
  k.L = k.query.shape(0), k.N = k.query.shape(1), k.S = k.key.shape(0);
  // 3) in-projection
  k.in = in_weights(parameters);
  const auto qkv = lab02::in_projection(k.query, k.key, k.value, k.in);  // (L, N, E), (S, N, E), (S, N, E)
  // 5) heads
  k.qh = lab03::split_heads(qkv.q, k.H);  // (B, L, D)
  k.kh = lab03::split_heads(qkv.k, k.H);  // (B, S, D)
  k.vh = lab03::split_heads(qkv.v, k.H);  // (B, S, D)
  // 2) and 7) one mask; an unbatched key_padding_mask (S) is a batch of one, (1, S)
  auto padding = opts.key_padding_mask;
  if (padding && !k.batched) std::visit([&](auto& m) { m.reshape({std::size_t{1}, k.S}); }, *padding);
  const auto mask = lab04::prepare_mask(opts.attn_mask, padding, k.N, k.H, k.L, k.S);  // (1 or B, L, S)
  // 8) attention. scaled_by_e_not_d is made here, where E is known: q / sqrt(E) is
  //    (q * sqrt(D / E)) / sqrt(D).
  xt::xtensor<T, 3> qh = k.qh;
  if (injected("scaled_by_e_not_d"))
    qh *= static_cast<T>(std::sqrt(static_cast<double>(k.qh.shape(2)) / static_cast<double>(qkv.q.shape(2))));
  const auto a = lab03::scaled_dot_product_attention(qh, k.kh, k.vh, mask);  // (B, L, D), (B, L, S)
  k.weights = a.weights;
  // 9) heads merged, out_proj
  k.merged = lab03::merge_heads(a.output, k.H);  // (L, N, E)
  std::optional<xt::xtensor<T, 1>> out_bias;
  if (parameters.contains("out_proj.bias")) out_bias = parameters.at("out_proj.bias");
  const auto out = injected("out_proj_missing")
                       ? k.merged
                       : linear(k.merged, xt::xtensor<T, 2>(parameters.at("out_proj.weight")), out_bias, true);
  // 10) the caller's layout; the weights per head (N, H, L, S) or their mean over heads (N, L, S)
  lab::Output<T> o{caller_layout(out, k.batched, k.batch_first), std::nullopt};
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
lab::Output<T> forward(const lab::Options& options, const lab::StateDict<T>& parameters, const xt::xarray<T>& query,
                       const xt::xarray<T>& key, const xt::xarray<T>& value, const lab::ForwardOptions<T>& opts) {
  Kept<T> k;
  return forward_kept(options, parameters, query, key, value, opts, k);
}

template lab::Output<float> forward(const lab::Options&, const lab::StateDict<float>&, const xt::xarray<float>&,
                                    const xt::xarray<float>&, const xt::xarray<float>&,
                                    const lab::ForwardOptions<float>&);
template lab::Output<double> forward(const lab::Options&, const lab::StateDict<double>&, const xt::xarray<double>&,
                                     const xt::xarray<double>&, const xt::xarray<double>&,
                                     const lab::ForwardOptions<double>&);

}  // namespace lab05

namespace lab06 {

// The gradients of y = x W^T: dX and dW (the bias's is bias_gradient's).
template <class T>
struct LinearGradients {
  xt::xtensor<T, 3> input;   // dX (L, N, in)
  xt::xtensor<T, 2> weight;  // dW (out, in)
};

// y = x W^T + b backward:  dX = dY W,  dW = dY^T X.
// x (L, N, in), weight (out, in), dy (L, N, out)
template <class T>
LinearGradients<T> linear_backward(const xt::xtensor<T, 3>& x, const xt::xtensor<T, 2>& weight,
                                   const xt::xtensor<T, 3>& dy) {
  const std::size_t out = weight.shape(0), in = weight.shape(1), rows = x.shape(0) * x.shape(1);
  if (x.shape(2) != in || dy.shape(0) != x.shape(0) || dy.shape(1) != x.shape(1) || dy.shape(2) != out)
    throw std::invalid_argument("linear_backward: the shapes of x, W and dY do not agree");
  LinearGradients<T> g{xt::xtensor<T, 3>::from_shape({x.shape(0), x.shape(1), in}),
                       xt::xtensor<T, 2>::from_shape({out, in})};
  const T *X = x.data(), *W = weight.data(), *dY = dy.data();
  // dX = dY W: (rows, out) x (out, in) -> (rows, in)
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t i = 0; i < in; ++i) {
      T sum = 0;
      for (std::size_t o = 0; o < out; ++o) sum += dY[r * out + o] * W[o * in + i];
      g.input.data()[r * in + i] = sum;
    }
  // dW = dY^T X: (out, rows) x (rows, in) -> (out, in)
  for (std::size_t o = 0; o < out; ++o)
    for (std::size_t i = 0; i < in; ++i) {
      T sum = 0;
      for (std::size_t r = 0; r < rows; ++r) sum += dY[r * out + o] * X[r * in + i];
      g.weight(o, i) = sum;
    }
  return g;
}

// The gradients of the weighted values O = P V.
template <class T>
struct WeightedValuesGradients {
  xt::xtensor<T, 3> weights;  // dP (B, L, S)
  xt::xtensor<T, 3> values;   // dV (B, S, D)
};

// O = P V backward:  dP = dO V^T,  dV = P^T dO.
// weights P (B, L, S), values V (B, S, D), d_output dO (B, L, D)
template <class T>
WeightedValuesGradients<T> weighted_values_backward(const xt::xtensor<T, 3>& weights, const xt::xtensor<T, 3>& values,
                                                    const xt::xtensor<T, 3>& d_output) {
  const std::size_t B = weights.shape(0), L = weights.shape(1), S = weights.shape(2), D = values.shape(2);
  WeightedValuesGradients<T> g{xt::xtensor<T, 3>::from_shape({B, L, S}), xt::xtensor<T, 3>::from_shape({B, S, D})};
  for (std::size_t b = 0; b < B; ++b) {
    // dP = dO V^T: (L, D) x (D, S) -> (L, S)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t j = 0; j < S; ++j) {
        T sum = 0;
        for (std::size_t d = 0; d < D; ++d) sum += d_output(b, i, d) * values(b, j, d);
        g.weights(b, i, j) = sum;
      }
    // dV = P^T dO: (S, L) x (L, D) -> (S, D)
    for (std::size_t j = 0; j < S; ++j)
      for (std::size_t d = 0; d < D; ++d) {
        T sum = 0;
        for (std::size_t i = 0; i < L; ++i) sum += weights(b, i, j) * d_output(b, i, d);
        g.values(b, j, d) = sum;
      }
  }
  return g;
}

// attn_output_weights backward: its gradient as each head's. Averaged weights (the sum over
// heads / H) give every head the gradient / H; per-head weights pass theirs as they are.
// d_weights (N, L, S) averaged or (N, H, L, S) per head, without N unbatched -> (B, L, S)
template <class T>
xt::xtensor<T, 3> output_weights_backward(const xt::xarray<T>& d_weights, std::size_t N, std::size_t H, std::size_t L,
                                          std::size_t S, bool average) {
  const std::size_t heads_given = average ? N : N * H, LS = L * S;
  if (d_weights.size() != heads_given * LS)
    throw std::invalid_argument("grad_attn_output_weights: expected " + std::to_string(heads_given * LS) +
                                " values, got " + std::to_string(d_weights.size()));
  xt::xtensor<T, 3> d = xt::zeros<T>({N * H, L, S});
  for (std::size_t b = 0; b < N * H; ++b)  // head b = n*H + h: its share of the gradient, (L, S)
    for (std::size_t x = 0; x < LS; ++x)
      d.data()[b * LS + x] +=
          average ? d_weights.data()[(b / H) * LS + x] / static_cast<T>(H) : d_weights.data()[b * LS + x];
  return d;
}

// softmax backward, row by row:  dZ = P * (dP - rowsum(dP * P)).  (B, L, S)
// A row of P that is NaN (all keys masked) gives a row of NaN, as in PyTorch.
template <class T>
xt::xtensor<T, 3> softmax_backward(const xt::xtensor<T, 3>& probabilities, const xt::xtensor<T, 3>& d_probabilities) {
  const std::size_t S = probabilities.shape(2), rows = S == 0 ? 0 : probabilities.size() / S;
  xt::xtensor<T, 3> d_scores = xt::xtensor<T, 3>::from_shape(probabilities.shape());
  for (std::size_t r = 0; r < rows; ++r) {
    const T *P = probabilities.data() + r * S, *dP = d_probabilities.data() + r * S;
    T dot = 0;  // rowsum(dP * P)
    for (std::size_t j = 0; j < S; ++j) dot += dP[j] * P[j];
    for (std::size_t j = 0; j < S; ++j) d_scores.data()[r * S + j] = P[j] * (dP[j] - dot);
  }
  return d_scores;
}

// The gradients of the scores (q * scale) K^T + mask.
template <class T>
struct ScoresGradients {
  xt::xtensor<T, 3> query;  // dQ (B, L, D)
  xt::xtensor<T, 3> key;    // dK (B, S, D)
};

// scores = (q * scale) K^T + mask backward, scale = sqrt(1/D):
//   dQ = dZ K * scale   (PyTorch scales q before the product, so the scale comes last),
//   dK = dZ^T (q * scale).  The mask is a constant: it takes no gradient.
// q (B, L, D), k (B, S, D), d_scores dZ (B, L, S)
template <class T>
ScoresGradients<T> scores_backward(const xt::xtensor<T, 3>& q, const xt::xtensor<T, 3>& k,
                                   const xt::xtensor<T, 3>& d_scores) {
  const std::size_t B = q.shape(0), L = q.shape(1), D = q.shape(2), S = k.shape(1);
  const T scale = attention_scale<T>(D);
  ScoresGradients<T> g{xt::xtensor<T, 3>::from_shape({B, L, D}), xt::xtensor<T, 3>::from_shape({B, S, D})};
  for (std::size_t b = 0; b < B; ++b) {
    // dQ = dZ K * scale: (L, S) x (S, D) -> (L, D)
    for (std::size_t i = 0; i < L; ++i)
      for (std::size_t d = 0; d < D; ++d) {
        T sum = 0;
        for (std::size_t j = 0; j < S; ++j) sum += d_scores(b, i, j) * k(b, j, d);
        g.query(b, i, d) = sum * scale;
      }
    // dK = dZ^T (q * scale): (S, L) x (L, D) -> (S, D)
    for (std::size_t j = 0; j < S; ++j)
      for (std::size_t d = 0; d < D; ++d) {
        T sum = 0;
        for (std::size_t i = 0; i < L; ++i) sum += d_scores(b, i, j) * (q(b, i, d) * scale);
        g.key(b, j, d) = sum;
      }
  }
  return g;
}

// A weight's gradient dY^T X, (out, in); grad_transposed (variant 0: every weight, 1:
// out_proj's, 2: the in-projection's) gives X^T dY.
template <class T>
xt::xarray<T> weight_gradient(const LinearGradients<T>& g, bool out) {
  const auto wrong = injected("grad_transposed");
  if (wrong && (*wrong == 0 || (*wrong == 1) == out) && g.weight.shape(0) == g.weight.shape(1))
    return xt::transpose(g.weight);
  return g.weight;
}

// A bias's gradient: dY summed over positions and batch; bias_grad_not_summed takes the
// first row (variant 0) or batch entry 0's positions (variant 1). dy (L, N, out) -> (out)
template <class T>
xt::xarray<T> bias_gradient(const xt::xtensor<T, 3>& dy) {
  const auto wrong = injected("bias_grad_not_summed");
  if (!wrong) return xt::sum(dy, {0, 1});
  if (*wrong == 0) return xt::view(dy, 0, 0, xt::all());
  return xt::sum(xt::view(dy, xt::all(), 0, xt::all()), {0});
}

template <class T>
lab::Gradients<T> backward(const lab::Options& options, const lab::StateDict<T>& parameters, const xt::xarray<T>& query,
                           const xt::xarray<T>& key, const xt::xarray<T>& value, const lab::ForwardOptions<T>& opts,
                           const xt::xarray<T>& grad_attn_output,
                           const std::optional<xt::xarray<T>>& grad_attn_output_weights) {
  lab05::Kept<T> k;
  lab05::forward_kept(options, parameters, query, key, value, opts, k);
  lab::Gradients<T> g;
  // 9) out_proj: dY (L, N, E)
  const auto dy = to_seq_first_batched(grad_attn_output, k.batch_first);  // (L, N, E)
  const bool has_bias = parameters.contains("out_proj.bias");
  const auto out = linear_backward(k.merged, xt::xtensor<T, 2>(parameters.at("out_proj.weight")), dy);
  g.parameters["out_proj.weight"] = weight_gradient(out, true);
  if (has_bias) g.parameters["out_proj.bias"] = bias_gradient(dy);
  // 8) P v, the weights' own gradient, softmax, scores. The heads are split and merged here
  //    as PyTorch does, whatever the forward's split was.
  const auto d_heads = heads_of(out.input, k.H, HeadColumns::h_then_d);  // (B, L, D)
  auto pv = weighted_values_backward(k.weights, k.vh, d_heads);          // dP (B, L, S), dV (B, S, D)
  if (grad_attn_output_weights)
    pv.weights += output_weights_backward(*grad_attn_output_weights, k.N, k.H, k.L, k.S, opts.average_attn_weights);
  xt::xtensor<T, 3> ds;  // (B, L, S)
  if (injected("softmax_jacobian_diagonal_missing")) {
    const xt::xtensor<T, 3> dot = xt::sum(pv.weights * k.weights, {2}, xt::keep_dims);
    ds = -k.weights * dot;
  } else {
    ds = softmax_backward(k.weights, pv.weights);
  }
  auto scores = scores_backward(k.qh, k.kh, ds);  // dQ (B, L, D), dK (B, S, D)
  const T scale = attention_scale<T>(k.qh.shape(2));
  if (const auto wrong = injected("grad_scale_missing")) {
    if (*wrong != 2) scores.query /= scale;
    if (*wrong != 1) scores.key /= scale;
  }
  // 5) heads merged, 3) in-projection
  const auto dq = heads_merged(scores.query, k.H, HeadColumns::h_then_d);  // (L, N, E)
  const auto dk = heads_merged(scores.key, k.H, HeadColumns::h_then_d);    // (S, N, E)
  const auto dv = heads_merged(pv.values, k.H, HeadColumns::h_then_d);     // (S, N, E)
  const auto gq = linear_backward(k.query, k.in.w_q, dq);                  // dX (L, N, E)
  const auto gk = linear_backward(k.key, k.in.w_k, dk);                    // dX (S, N, Ek)
  const auto gv = linear_backward(k.value, k.in.w_v, dv);                  // dX (S, N, Ev)
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
  g.query = caller_layout(gq.input, k.batched, k.batch_first);
  g.key = caller_layout(gk.input, k.batched, k.batch_first);
  g.value = caller_layout(gv.input, k.batched, k.batch_first);
  return g;
}

template lab::Gradients<float> backward(const lab::Options&, const lab::StateDict<float>&, const xt::xarray<float>&,
                                        const xt::xarray<float>&, const xt::xarray<float>&,
                                        const lab::ForwardOptions<float>&, const xt::xarray<float>&,
                                        const std::optional<xt::xarray<float>>&);
template lab::Gradients<double> backward(const lab::Options&, const lab::StateDict<double>&, const xt::xarray<double>&,
                                         const xt::xarray<double>&, const xt::xarray<double>&,
                                         const lab::ForwardOptions<double>&, const xt::xarray<double>&,
                                         const std::optional<xt::xarray<double>>&);

}  // namespace lab06

namespace lab07 {

// A new position at the end of a cache: (B, t, D) + (B, 1, D) -> (B, t + 1, D)
template <class T>
xt::xtensor<T, 3> appended(const xt::xtensor<T, 3>& cache, const xt::xtensor<T, 3>& position) {
  return xt::concatenate(xt::xtuple(cache, position), 1);
}

// Positions [0, count) of a cache. (B, t, D) -> (B, count, D)
template <class T>
xt::xtensor<T, 3> first_positions(const xt::xtensor<T, 3>& cache, std::size_t count) {
  return xt::view(cache, xt::all(), xt::range(0, std::min(count, cache.shape(1))), xt::all());
}

// One query per batch-head over s keys: softmax(q k^T) v, q already scaled; no mask, since
// every position given is one the query may see. q (B, 1, D), k (B, s, D), v (B, s, D) -> (B, 1, D)
template <class T>
xt::xtensor<T, 3> attend(const xt::xtensor<T, 3>& q, const xt::xtensor<T, 3>& k, const xt::xtensor<T, 3>& v) {
  const std::size_t B = q.shape(0), D = q.shape(2), s = k.shape(1);
  xt::xtensor<T, 3> out = xt::zeros<T>({B, std::size_t{1}, D});
  std::vector<T> w(s);
  for (std::size_t b = 0; b < B; ++b) {
    T top = -std::numeric_limits<T>::infinity(), sum = 0;
    for (std::size_t j = 0; j < s; ++j) {
      T dot = 0;
      for (std::size_t d = 0; d < D; ++d) dot += q(b, 0, d) * k(b, j, d);
      top = std::max(top, w[j] = dot);
    }
    for (std::size_t j = 0; j < s; ++j) sum += (w[j] = std::exp(w[j] - top));
    for (std::size_t j = 0; j < s; ++j)
      for (std::size_t d = 0; d < D; ++d) out(b, 0, d) += (w[j] / sum) * v(b, j, d);
  }
  return out;
}

template <class T>
xt::xtensor<T, 3> decode_step(const lab::StateDict<T>& parameters, std::size_t num_heads,
                              const xt::xtensor<T, 3>& token, lab::KVCache<T>& cache) {
  const std::size_t H = num_heads, D = token.shape(2) / H;
  // 1) q, k, v of the token, split into heads: (1, N, E) -> (B, 1, D)
  const auto x = lab02::in_projection(token, token, token, lab05::in_weights(parameters));
  xt::xtensor<T, 3> qh = lab03::split_heads(x.q, H);  // (B, 1, D)
  auto kh = lab03::split_heads(x.k, H), vh = lab03::split_heads(x.v, H);
  if (injected("cache_holds_inputs")) kh = vh = lab03::split_heads(token, H);
  // 2) the new position appended to the cache before the query attends: (B, t + 1, D)
  const lab::KVCache<T> before = cache;
  cache.k = appended(cache.k, kh), cache.v = appended(cache.v, vh);
  // PyTorch scales q, once; cache_rescaled_each_step scales the kept keys, at every step.
  T scale = attention_scale<T>(D);
  if (injected("no_scaling")) scale = 1;
  if (injected("cache_rescaled_each_step")) cache.k *= scale, scale = 1;
  // 3) the new query over every cached position, itself included
  lab::KVCache<T> seen = injected("cache_appended_after_attention") ? before : cache;
  if (injected("new_token_attended_twice")) seen = {appended(seen.k, kh), appended(seen.v, vh)};
  if (injected("causal_mask_top_left")) seen = {first_positions(seen.k, 1), first_positions(seen.v, 1)};
  qh *= scale;
  const auto heads = attend(qh, seen.k, seen.v);  // (B, 1, s) weights . (B, s, D) -> (B, 1, D)
  // 4) heads merged, out_proj
  const auto merged = lab03::merge_heads(heads, H);  // (1, N, E)
  if (injected("out_proj_missing")) return merged;
  std::optional<xt::xtensor<T, 1>> out_bias;
  if (parameters.contains("out_proj.bias")) out_bias = parameters.at("out_proj.bias");
  return linear(merged, xt::xtensor<T, 2>(parameters.at("out_proj.weight")), out_bias, true);
}

template xt::xtensor<float, 3> decode_step(const lab::StateDict<float>&, std::size_t, const xt::xtensor<float, 3>&,
                                           lab::KVCache<float>&);
template xt::xtensor<double, 3> decode_step(const lab::StateDict<double>&, std::size_t, const xt::xtensor<double, 3>&,
                                            lab::KVCache<double>&);

}  // namespace lab07
