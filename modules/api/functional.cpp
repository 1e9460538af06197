// modules/api/functional.cpp — F.multi_head_attention_forward's checks, then the steps.
//
// The definitions of what modules/api/functional.hpp declares, and their instantiations for
// float and double. The checks come in torch/nn/functional.py's order (PyTorch 1.13.1):
// the shapes, embed_dim_to_check, the head split, the projection weights, the masks,
// bias_k/bias_v against static_k/static_v, the static sizes, key_padding_mask's length.
// The masks' own checks are made where every mask is made (mask_preparation.hpp,
// functional_mask).
//
// Legend: L = target length, S = source length (static_k's when given), N = batch,
// E = embed_dim, H = heads, D = head_dim = E / H, B = N*H, Ek = kdim, Ev = vdim.
module;
#include "third_party_xtensor.hpp"

module mha;

namespace mha::detail {

// ---- the arguments, checked as multi_head_attention_forward checks them ---------------

// A tensor argument of exactly `shape`, copied into the rank the steps take.
template <class T, std::size_t R>
xt::xtensor<T, R> tensor_argument(const xt::xarray<T>& x, std::string_view name,
                                  const std::array<std::size_t, R>& shape) {
  check(std::equal(shape.begin(), shape.end(), x.shape().begin(), x.shape().end()), name, "expected shape {}, got {}",
        shape_string(shape), shape_string(x.shape()));
  return xt::xtensor<T, R>(x);
}

// The last dimension of an input, 0 for a 0-D one (which the shape check then refuses).
template <class T>
std::size_t width(const xt::xarray<T>& x) {
  return x.dimension() == 0 ? 0 : x.shape(x.dimension() - 1);
}

// The module these arguments describe: embed_dim_to_check and num_heads, kdim and vdim
// from key and value when the projections are separate.
template <class T>
Options functional_options(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                           const FunctionalArguments<T>& a) {
  check(a.num_heads > 0, "num_heads", "expected a positive number of heads, got {}", a.num_heads);
  check(a.embed_dim_to_check > 0, "embed_dim_to_check", "expected a positive embedding dimension, got {}",
        a.embed_dim_to_check);
  if (query.dimension() == 2 || query.dimension() == 3)
    check(width(query) == static_cast<std::size_t>(a.embed_dim_to_check), "embed_dim_to_check",
          "was expecting embedding dimension of {}, but got {} (the query's last dimension)", a.embed_dim_to_check,
          width(query));
  check(a.embed_dim_to_check % a.num_heads == 0, "num_heads", "embed_dim {} not divisible by num_heads {}",
        a.embed_dim_to_check, a.num_heads);
  if (a.training)
    check(a.dropout_p >= 0.0 && a.dropout_p <= 1.0, "dropout_p",
          "dropout probability has to be between 0 and 1, but got {}", a.dropout_p);
  Options o;
  o.embed_dim = a.embed_dim_to_check, o.num_heads = a.num_heads, o.dropout = a.dropout_p, o.pytorch = a.pytorch;
  o.add_bias_kv = a.bias_k != nullptr, o.add_zero_attn = a.add_zero_attn;
  o.separate_projections = a.use_separate_proj_weight;
  // The packed weight multiplies key and value by (E, E) blocks: they must be E wide,
  // which the size checks then say. Separate weights take any width, theirs.
  if (a.use_separate_proj_weight)
    o.kdim = static_cast<std::int64_t>(width(key)), o.vdim = static_cast<std::int64_t>(width(value));
  return o;
}

// The projection weights: in_proj_weight, or q/k/v_proj_weight with use_separate_proj_weight.
template <class T>
void functional_projection_weights(textbook::Parameters<T>& p, const FunctionalArguments<T>& a, const Sizes& s) {
  if (!a.use_separate_proj_weight) {
    check(a.in_proj_weight != nullptr, "in_proj_weight",
          "use_separate_proj_weight is False but in_proj_weight is None");
    p.in_proj_weight = tensor_argument<T, 2>(*a.in_proj_weight, "in_proj_weight", textbook::in_proj_weight_shape(s.E));
    return;
  }
  check(a.q_proj_weight != nullptr, "q_proj_weight", "use_separate_proj_weight is True but q_proj_weight is None");
  check(a.k_proj_weight != nullptr, "k_proj_weight", "use_separate_proj_weight is True but k_proj_weight is None");
  check(a.v_proj_weight != nullptr, "v_proj_weight", "use_separate_proj_weight is True but v_proj_weight is None");
  p.separate.w_q = tensor_argument<T, 2>(*a.q_proj_weight, "q_proj_weight", {s.E, s.E});
  p.separate.w_k = tensor_argument<T, 2>(*a.k_proj_weight, "k_proj_weight", {s.E, s.kdim});
  p.separate.w_v = tensor_argument<T, 2>(*a.v_proj_weight, "v_proj_weight", {s.E, s.vdim});
}

// The parameters of the call, as a module would hold them: each bias present or None on its own.
template <class T>
textbook::Parameters<T> functional_parameters(const Options& options, const FunctionalArguments<T>& a) {
  const Sizes s(options);
  textbook::Parameters<T> p(options);
  functional_projection_weights(p, a, s);
  if (a.in_proj_bias) p.in_proj_bias = tensor_argument<T, 1>(*a.in_proj_bias, "in_proj_bias", {3 * s.E});
  else p.in_proj_bias.reset();
  check(a.out_proj_weight != nullptr, "out_proj_weight",
        "expected a tensor of shape {}, got None (PyTorch 1.13.1 fails on it inside linear())",
        shape_string({s.E, s.E}));
  p.out_proj_weight = tensor_argument<T, 2>(*a.out_proj_weight, "out_proj_weight", {s.E, s.E});
  if (a.out_proj_bias) p.out_proj_bias = tensor_argument<T, 1>(*a.out_proj_bias, "out_proj_bias", {s.E});
  else p.out_proj_bias.reset();
  check((a.bias_k == nullptr) == (a.bias_v == nullptr), a.bias_k ? "bias_v" : "bias_k",
        "expected bias_k and bias_v both or neither, got only {}", a.bias_k ? "bias_k" : "bias_v");
  if (a.bias_k) {
    p.bias_k = tensor_argument<T, 3>(*a.bias_k, "bias_k", {1, 1, s.E});
    p.bias_v = tensor_argument<T, 3>(*a.bias_v, "bias_v", {1, 1, s.E});
  }
  return p;
}

// static_k or static_v, checked: (B, S_static, D), B = N*H (H unbatched).
template <class T>
StaticHeads<T> static_argument(const xt::xarray<T>* x, std::string_view name, std::size_t B, std::size_t D) {
  if (x == nullptr) return {};
  check(x->dimension() == 3, name, "expected a 3-D tensor (N*num_heads, S, head_dim), got shape {}",
        shape_string(x->shape()));
  check(x->shape(0) == B, name, "expecting {}.size(0) of {}, but got {}", name, B, x->shape(0));
  check(x->shape(2) == D, name, "expecting {}.size(2) of {}, but got {}", name, D, x->shape(2));
  return {x->data(), B, x->shape(1), D, x->shape(1) * D};
}

// static_k and static_v: never with bias_k/bias_v, of (N*H, S_static, D), and keys and
// values of one length.
template <class T>
StaticKV<T> functional_statics(const FunctionalArguments<T>& a, const Geometry& g, const Sizes& s) {
  check(a.static_k == nullptr || a.bias_k == nullptr, "static_k", "bias cannot be added to static key.");
  check(a.static_v == nullptr || a.bias_v == nullptr, "static_v", "bias cannot be added to static value.");
  StaticKV<T> st{static_argument(a.static_k, "static_k", g.N * s.H, s.D),
                 static_argument(a.static_v, "static_v", g.N * s.H, s.D)};
  const std::size_t S_k = st.k ? st.k.S : g.S, S_v = st.v ? st.v.S : g.S;
  check(S_k == S_v, st.v ? "static_v" : "static_k",
        "expected keys and values of one length, got {} keys ({}) and {} values ({})", S_k,
        st.k ? "static_k" : "the key's", S_v, st.v ? "static_v" : "the value's");
  return st;
}

}  // namespace mha::detail

namespace mha {

template <class T>
Output<T> multi_head_attention_forward(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                                       const FunctionalArguments<T>& args, AttentionPath path, Generator* generator) {
  // 0) the arguments: a module's options and parameters, as PyTorch checks them
  const Options options = detail::functional_options(query, key, value, args);
  const detail::Sizes s(options);
  ForwardOptions<T> opts;
  if (args.key_padding_mask) opts.key_padding_mask = *args.key_padding_mask;
  if (args.attn_mask) opts.attn_mask = *args.attn_mask;
  opts.need_weights = args.need_weights, opts.average_attn_weights = args.average_attn_weights;

  // 1) the shapes; the weights, which need kdim and vdim; static_k and static_v
  const detail::Geometry g = detail::geometry(query, key, value, opts, options);
  const textbook::Parameters<T> params = detail::functional_parameters(options, args);
  const detail::StaticKV<T> statics = detail::functional_statics(args, g, s);

  // 2) the masks as the generation reads them, against the key's length and static_k's,
  //    made step 7's one mask (mask_preparation.hpp); 2.x's branch without weights is SDPA
  std::vector<Warning> warnings;
  const PyTorchPath pytorch_path = detail::functional_path(args.pytorch, args.need_weights).path;
  textbook::MergedMask<T> mask = detail::functional_mask(args, opts, options, pytorch_path, g, statics, warnings);

  // 3)-10) the steps the module runs too; dropout only in training
  const double dropout_p = args.training ? args.dropout_p : 0.0;
  check(dropout_p == 0 || generator != nullptr, "generator",
        "expected a Generator: training=True with dropout_p={} draws a dropout mask; got none", dropout_p);
  Generator unused;
  detail::Engine<T> engine;  // W^T made for this call: the arguments are not kept
  Output<T> out = detail::attention_steps(engine, options, params, query, key, value, g, std::move(mask), opts, statics,
                                          path, dropout_p, generator ? *generator : unused);
  out.warnings = std::move(warnings);
  return out;
}

// Compiled here once for each dtype the library has.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define MHA_INSTANTIATE_FUNCTIONAL(T)                                                                               \
  template Output<T> multi_head_attention_forward(const xt::xarray<T>&, const xt::xarray<T>&, const xt::xarray<T>&, \
                                                  const FunctionalArguments<T>&, AttentionPath, Generator*);
MHA_INSTANTIATE_FUNCTIONAL(float)
MHA_INSTANTIATE_FUNCTIONAL(double)
#undef MHA_INSTANTIATE_FUNCTIONAL
// NOLINTEND(bugprone-macro-parentheses)

}  // namespace mha
