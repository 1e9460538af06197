// mha:multihead_attention — the module: torch.nn.MultiheadAttention in C++.
//
// Holds the parameters under PyTorch's state_dict names and runs the forward pass of
// torch/nn/modules/activation.py (MultiheadAttention.forward) and
// torch/nn/functional.py (multi_head_attention_forward), step by step and in the same
// order, with the same shape checks. It is not a fused or approximate kernel: every
// intermediate of PyTorch's slow path exists here too.
//
// Two variants, as in PyTorch:
//   packed    in_proj_weight (3E, E) = [W_q; W_k; W_v], used when kdim == vdim == E;
//   separate  q_proj_weight (E, E), k_proj_weight (E, kdim), v_proj_weight (E, vdim):
//             three independent projections, forced when kdim or vdim differs from E
//             and available on request (Options::separate_projections) otherwise.
// in_proj_bias (3E) = [b_q; b_k; b_v] is packed in both.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads,
// D = head_dim = E / H, B = N*H.
module;
#include "third_party.hpp"

export module mha:multihead_attention;

import :error;
import :random;
import :in_projection;
import :masks;
import :attention;

export namespace mha {

// The arguments of torch.nn.MultiheadAttention(...).
struct Options {
  std::int64_t embed_dim = 0;
  std::int64_t num_heads = 0;
  double dropout = 0.0;
  bool bias = true;
  bool add_bias_kv = false;
  bool add_zero_attn = false;
  std::optional<std::int64_t> kdim;  // none: embed_dim
  std::optional<std::int64_t> vdim;  // none: embed_dim
  bool batch_first = false;
  // Keep q/k/v_proj_weight separate even when kdim == vdim == embed_dim.
  bool separate_projections = false;
};

// The arguments of MultiheadAttention.forward(...) after query, key and value.
template <class T>
struct ForwardOptions {
  std::optional<Mask<T>> key_padding_mask;  // (N, S), or (S) unbatched; True = padding
  bool need_weights = true;
  std::optional<Mask<T>> attn_mask;  // (L, S) or (N*H, L, S); unbatched (L, S) or (H, L, S)
  bool average_attn_weights = true;
  bool is_causal = false;  // a hint that attn_mask is the causal mask; needs attn_mask
};

// What forward returns: attn_output, and attn_output_weights when need_weights.
template <class T>
struct Output {
  xt::xarray<T> attn_output;                         // (L, N, E), (N, L, E) or (L, E)
  std::optional<xt::xarray<T>> attn_output_weights;  // (N, L, S) or (N, H, L, S); unbatched without N
};

// A name -> tensor map, keyed by PyTorch's state_dict names.
template <class T>
using StateDict = std::map<std::string, xt::xarray<T>>;

// A query, key or value made sequence-first and batched, as multi_head_attention_forward
// sees it: (N, L, E) batch_first is transposed, (L, E) unbatched gets a batch of 1.
template <class T>
xt::xtensor<T, 3> to_seq_first_batched(const xt::xarray<T>& x, bool batch_first) {
  if (x.dimension() == 2) return xt::xtensor<T, 3>(xt::view(x, xt::all(), xt::newaxis(), xt::all()));  // (L, 1, E)
  check(x.dimension() == 3, "input", "expected a 2-D or 3-D tensor, got {}-D", x.dimension());
  if (batch_first) return xt::xtensor<T, 3>(xt::transpose(x, {1, 0, 2}));  // (N, L, E) -> (L, N, E)
  return xt::xtensor<T, 3>(x);
}

template <class T>
class MultiheadAttention {
public:
  // Parameters are initialised as PyTorch's _reset_parameters does, from `generator`.
  MultiheadAttention(const Options& options, Generator& generator) : options_(options) {
    validate_options();
    allocate_parameters();
    reset_parameters(generator);
  }
  explicit MultiheadAttention(const Options& options, std::uint64_t seed = 0)
      : options_(options), dropout_generator_(seed) {
    validate_options();
    allocate_parameters();
    Generator generator(seed);
    reset_parameters(generator);
  }

  const Options& options() const { return options_; }
  std::size_t embed_dim() const { return static_cast<std::size_t>(options_.embed_dim); }
  std::size_t num_heads() const { return static_cast<std::size_t>(options_.num_heads); }
  std::size_t head_dim() const { return embed_dim() / num_heads(); }
  std::size_t kdim() const { return static_cast<std::size_t>(options_.kdim.value_or(options_.embed_dim)); }
  std::size_t vdim() const { return static_cast<std::size_t>(options_.vdim.value_or(options_.embed_dim)); }
  // PyTorch's _qkv_same_embed_dim: true when the packed in_proj_weight is possible.
  bool qkv_same_embed_dim() const { return kdim() == embed_dim() && vdim() == embed_dim(); }
  // True when the parameters hold in_proj_weight; false for q/k/v_proj_weight.
  bool packed() const { return qkv_same_embed_dim() && !options_.separate_projections; }

  // Training mode (dropout on) or evaluation mode, as nn.Module.train() / eval().
  // A new module is in training mode, as in PyTorch.
  void train(bool mode = true) { training_ = mode; }
  void eval() { training_ = false; }
  bool training() const { return training_; }
  Generator& dropout_generator() { return dropout_generator_; }

  // ---- parameters, by PyTorch's state_dict names -----------------------------------

  // The state_dict keys, in PyTorch's order.
  std::vector<std::string> parameter_names() const {
    std::vector<std::string> names;
    if (packed()) names = {"in_proj_weight"};
    else names = {"q_proj_weight", "k_proj_weight", "v_proj_weight"};
    if (options_.bias) names.push_back("in_proj_bias");
    if (options_.add_bias_kv) names.insert(names.end(), {"bias_k", "bias_v"});
    names.push_back("out_proj.weight");
    if (options_.bias) names.push_back("out_proj.bias");
    return names;
  }

  // The shape PyTorch gives the parameter `name`.
  std::vector<std::size_t> parameter_shape(std::string_view name) const {
    const std::size_t E = embed_dim();
    if (name == "in_proj_weight") return {3 * E, E};
    if (name == "q_proj_weight" || name == "out_proj.weight") return {E, E};
    if (name == "k_proj_weight") return {E, kdim()};
    if (name == "v_proj_weight") return {E, vdim()};
    if (name == "in_proj_bias") return {3 * E};
    if (name == "out_proj.bias") return {E};
    if (name == "bias_k" || name == "bias_v") return {1, 1, E};
    throw Error(fmt::format("name: unknown parameter '{}'", name));
  }

  xt::xarray<T> parameter(std::string_view name) const {
    require_parameter(name);
    if (name == "in_proj_weight") return in_proj_weight_;
    if (name == "q_proj_weight") return separate_.w_q;
    if (name == "k_proj_weight") return separate_.w_k;
    if (name == "v_proj_weight") return separate_.w_v;
    if (name == "in_proj_bias") return *in_proj_bias_;
    if (name == "bias_k") return *bias_k_;
    if (name == "bias_v") return *bias_v_;
    if (name == "out_proj.weight") return out_proj_weight_;
    return *out_proj_bias_;
  }

  // Sets one parameter; its shape must be PyTorch's. Nothing is reshaped or cast.
  void set_parameter(std::string_view name, const xt::xarray<T>& value) {
    require_parameter(name);
    const auto expected = parameter_shape(name);
    check(std::equal(expected.begin(), expected.end(), value.shape().begin(), value.shape().end()),
          name, "expected shape {}, got {}", shape_string(expected), shape_string(value.shape()));
    if (name == "in_proj_weight") in_proj_weight_ = value;
    else if (name == "q_proj_weight") separate_.w_q = value;
    else if (name == "k_proj_weight") separate_.w_k = value;
    else if (name == "v_proj_weight") separate_.w_v = value;
    else if (name == "in_proj_bias") in_proj_bias_ = value;
    else if (name == "bias_k") bias_k_ = value;
    else if (name == "bias_v") bias_v_ = value;
    else if (name == "out_proj.weight") out_proj_weight_ = value;
    else out_proj_bias_ = value;
  }

  StateDict<T> state_dict() const {
    StateDict<T> dict;
    for (const auto& name : parameter_names()) dict.emplace(name, parameter(name));
    return dict;
  }

  // As nn.Module.load_state_dict(strict=True): every name must be known and present.
  void load_state_dict(const StateDict<T>& dict) {
    const auto names = parameter_names();
    for (const auto& [name, _] : dict)
      check(std::find(names.begin(), names.end(), name) != names.end(), "state_dict",
            "unexpected key '{}' (expected keys: {})", name, fmt::join(names, ", "));
    for (const auto& name : names)
      check(dict.contains(name), "state_dict", "missing key '{}'", name);
    for (const auto& name : names) set_parameter(name, dict.at(name));
  }

  // ---- the two variants --------------------------------------------------------------

  // The projections as three separate weights and biases, whichever variant this is.
  SeparateProjections<T> separate_projections() const {
    if (packed()) return split_packed(in_proj_weight_, in_proj_bias_);
    SeparateProjections<T> p = separate_;
    if (in_proj_bias_) {
      p.b_q = bias_block(in_proj_bias_, 0, embed_dim());
      p.b_k = bias_block(in_proj_bias_, 1, embed_dim());
      p.b_v = bias_block(in_proj_bias_, 2, embed_dim());
    }
    return p;
  }

  // The same module with three separate projections (the packed weight split into rows).
  MultiheadAttention to_separate() const {
    Options options = options_;
    options.separate_projections = true;
    return converted(options);
  }

  // The same module with the packed in_proj_weight; an error unless kdim == vdim == E.
  MultiheadAttention to_packed() const {
    check(qkv_same_embed_dim(), "kdim, vdim",
          "cannot pack: in_proj_weight needs kdim == vdim == embed_dim = {}, got kdim = {}, vdim = {}",
          embed_dim(), kdim(), vdim());
    Options options = options_;
    options.separate_projections = false;
    return converted(options);
  }

  // ---- forward -----------------------------------------------------------------------

  // The in-projection on sequence-first batched inputs, as multi_head_attention_forward
  // computes it before bias_k/bias_v: q (L, N, E), k (S, N, E), v (S, N, E).
  QKV<T> in_projection(const xt::xtensor<T, 3>& query, const xt::xtensor<T, 3>& key,
                       const xt::xtensor<T, 3>& value, Aliasing aliasing = Aliasing::none) const {
    if (packed()) return in_projection_packed(query, key, value, in_proj_weight_, in_proj_bias_, aliasing);
    return mha::in_projection(query, key, value, separate_projections());
  }

  // q, k and v exactly as forward() computes them from these inputs (steps 1 and 3).
  QKV<T> in_projection(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value) const {
    const auto in = inputs(query, key, value, {});
    return in_projection(in.query, in.key, in.value, in.aliasing);
  }

  // MultiheadAttention.forward(query, key, value, ...). Pass the same object as query,
  // key and value for self-attention (Python's `query is key is value`).
  Output<T> forward(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                    const ForwardOptions<T>& opts = {}) {
    // 1) check shapes, and make everything sequence-first and batched
    const auto in = inputs(query, key, value, opts);
    const bool batched = in.batched, transpose = options_.batch_first && batched;
    const std::size_t L = in.query.shape(0), N = in.query.shape(1), S = in.key.shape(0);

    // 2) masks as float masks: bool True -> -inf (_canonical_mask), shapes checked
    auto key_padding_mask = prepare_key_padding_mask(opts.key_padding_mask, batched, N, S);  // (N, S)
    const bool causal_hint = opts.is_causal && !key_padding_mask && !opts.need_weights;
    auto attn_mask = causal_hint ? std::nullopt : prepare_attn_mask(opts.attn_mask, batched, L, N, S);  // (1 or N*H, L, S)

    // 3) in-projection: the packed (3E, E) weight, or three separate ones
    auto [q, k, v] = in_projection(in.query, in.key, in.value, in.aliasing);  // (L, N, E), (S, N, E), (S, N, E)

    // 4) bias_k, bias_v: one more key and value position, the masks padded to match
    if (options_.add_bias_kv) append_bias_kv(k, v, attn_mask, key_padding_mask);  // (S+1, N, E)

    // 5) heads: (L, N, E) -> (N*H, L, D)
    auto qh = split_heads(q, num_heads());  // (N*H, L, D)
    auto kh = split_heads(k, num_heads());  // (N*H, S', D)
    auto vh = split_heads(v, num_heads());  // (N*H, S', D)

    // 6) add_zero_attn: one more key and value, all zeros, the masks padded to match
    if (options_.add_zero_attn) {
      kh = append_zero_row(kh);  // (N*H, S'+1, D)
      vh = append_zero_row(vh);
      if (attn_mask) attn_mask = pad_last(*attn_mask);
      if (key_padding_mask) key_padding_mask = pad_last(*key_padding_mask);
    }
    const std::size_t S_total = kh.shape(1);

    // 7) one additive mask: attn_mask + key_padding_mask, or the causal mask of the hint
    std::optional<xt::xtensor<T, 3>> mask;
    if (causal_hint) mask = xt::xtensor<T, 3>(xt::view(canonical_mask<T>(xt::xarray<bool>(causal_mask(L, S_total))), xt::newaxis(), xt::all(), xt::all()));
    else mask = merge_masks(attn_mask, key_padding_mask, num_heads(), L);  // (1 or N*H, L, S')

    // 8) attention per head: softmax(q k^T / sqrt(D) + mask) v, dropout in training only
    const double dropout_p = training_ ? options_.dropout : 0.0;
    auto attention = scaled_dot_product_attention(qh, kh, vh, mask, dropout_p, dropout_generator_);

    // 9) heads side by side again, then out_proj: (N*H, L, D) -> (L, N, E)
    auto attn_output = linear(merge_heads(attention.output, N), out_proj_weight_, out_proj_bias_);  // (L, N, E)

    // 10) back to the caller's layout; the weights per head or averaged over heads
    Output<T> out;
    out.attn_output = batched ? (transpose ? xt::xarray<T>(xt::transpose(attn_output, {1, 0, 2})) : xt::xarray<T>(attn_output))
                              : xt::xarray<T>(xt::view(attn_output, xt::all(), 0, xt::all()));  // (L, E)
    if (opts.need_weights) out.attn_output_weights = output_weights(attention.weights, N, L, S_total, opts.average_attn_weights, batched);
    return out;
  }

private:
  // The inputs as multi_head_attention_forward works on them.
  struct Inputs {
    xt::xtensor<T, 3> query;  // (L, N, E)
    xt::xtensor<T, 3> key;    // (S, N, Ek)
    xt::xtensor<T, 3> value;  // (S, N, Ev)
    bool batched;
    Aliasing aliasing;
  };

  Inputs inputs(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                const ForwardOptions<T>& opts) const {
    const bool batched = shape_check(query, key, value, opts);
    const bool transpose = options_.batch_first && batched;
    // Unbatched inputs lose their identity in PyTorch (each is unsqueezed on its own), so
    // only batched inputs take the one-GEMM or two-GEMM path.
    const Aliasing aliasing = !batched                               ? Aliasing::none
                              : &query == &key && &key == &value     ? Aliasing::self_attention
                              : &key == &value                       ? Aliasing::key_is_value
                                                                     : Aliasing::none;
    Inputs in{to_seq_first_batched(query, transpose), to_seq_first_batched(key, transpose),
              to_seq_first_batched(value, transpose), batched, aliasing};
    check_inputs(in.query, in.key, in.value);
    return in;
  }

  void validate_options() const {
    check(options_.embed_dim > 0 && options_.num_heads > 0, "embed_dim, num_heads",
          "embed_dim and num_heads must be greater than 0, got embed_dim={} and num_heads={} instead",
          options_.embed_dim, options_.num_heads);
    check(options_.embed_dim % options_.num_heads == 0, "embed_dim",
          "embed_dim must be divisible by num_heads, got embed_dim={} and num_heads={}",
          options_.embed_dim, options_.num_heads);
    check(options_.kdim.value_or(1) > 0, "kdim", "kdim must be greater than 0, got {}", options_.kdim.value_or(0));
    check(options_.vdim.value_or(1) > 0, "vdim", "vdim must be greater than 0, got {}", options_.vdim.value_or(0));
    check(options_.dropout >= 0.0 && options_.dropout <= 1.0, "dropout",
          "dropout probability has to be between 0 and 1, but got {}", options_.dropout);
  }

  void require_parameter(std::string_view name) const {
    const auto names = parameter_names();
    check(std::find(names.begin(), names.end(), name) != names.end(), name,
          "no such parameter in this module (its parameters: {})", fmt::join(names, ", "));
  }

  void allocate_parameters() {
    const std::size_t E = embed_dim();
    auto zeros2 = [](std::size_t rows, std::size_t cols) { return xt::xtensor<T, 2>(xt::zeros<T>({rows, cols})); };
    if (packed()) in_proj_weight_ = zeros2(3 * E, E);
    else separate_ = {zeros2(E, E), zeros2(E, kdim()), zeros2(E, vdim()), std::nullopt, std::nullopt, std::nullopt};
    out_proj_weight_ = zeros2(E, E);
    if (options_.bias) {
      in_proj_bias_ = xt::xtensor<T, 1>(xt::zeros<T>({3 * E}));
      out_proj_bias_ = xt::xtensor<T, 1>(xt::zeros<T>({E}));
    }
    if (options_.add_bias_kv) {
      bias_k_ = xt::xtensor<T, 3>(xt::zeros<T>({std::size_t{1}, std::size_t{1}, E}));
      bias_v_ = bias_k_;
    }
  }

  // PyTorch's MultiheadAttention._reset_parameters, and Linear's init for out_proj:
  //   in_proj_weight   xavier_uniform over the whole (3E, E): fan_in = E, fan_out = 3E,
  //                    so the bound is sqrt(6 / (E + 3E)), not sqrt(6 / 2E);
  //   q/k/v_proj       xavier_uniform, each on its own (E, E), (E, kdim), (E, vdim);
  //   out_proj.weight  kaiming_uniform(a = sqrt(5)): bound 1 / sqrt(fan_in) = 1 / sqrt(E);
  //   in_proj_bias, out_proj.bias   zeros;
  //   bias_k, bias_v   xavier_normal on (1, 1, E): fan_in = fan_out = E, std = sqrt(1 / E).
  void reset_parameters(Generator& g) {
    auto xavier_uniform = [&g](xt::xtensor<T, 2>& w) {
      const double bound = std::sqrt(6.0 / static_cast<double>(w.shape(0) + w.shape(1)));
      for (auto& x : w) x = static_cast<T>(g.uniform(-bound, bound));
    };
    if (packed()) xavier_uniform(in_proj_weight_);
    else xavier_uniform(separate_.w_q), xavier_uniform(separate_.w_k), xavier_uniform(separate_.w_v);
    const double out_bound = 1.0 / std::sqrt(static_cast<double>(embed_dim()));
    for (auto& x : out_proj_weight_) x = static_cast<T>(g.uniform(-out_bound, out_bound));
    const double std = std::sqrt(1.0 / static_cast<double>(embed_dim()));
    for (auto* b : {&bias_k_, &bias_v_})
      if (*b) for (auto& x : **b) x = static_cast<T>(g.normal(0.0, std));
  }

  MultiheadAttention converted(const Options& options) const {
    MultiheadAttention m(*this);
    m.options_ = options;
    const auto p = separate_projections();
    if (m.packed()) m.in_proj_weight_ = pack(p).in_proj_weight, m.separate_ = {};
    else m.separate_ = {p.w_q, p.w_k, p.w_v, {}, {}, {}}, m.in_proj_weight_ = {};
    return m;
  }

  // _mha_shape_check: batched (3-D) or unbatched (2-D) query, and the ranks that go with it.
  bool shape_check(const xt::xarray<T>& query, const xt::xarray<T>& key, const xt::xarray<T>& value,
                   const ForwardOptions<T>& opts) const {
    check(!opts.is_causal || opts.attn_mask, "is_causal",
          "Need attn_mask if specifying the is_causal hint. You may use "
          "generate_square_subsequent_mask to create this mask.");
    const std::size_t qd = query.dimension();
    check(qd == 2 || qd == 3, "query", "query should be unbatched 2D or batched 3D tensor but received {}-D query tensor", qd);
    const bool batched = qd == 3;
    const char* kind = batched ? "batched (3-D)" : "unbatched (2-D)";
    check(key.dimension() == qd && value.dimension() == qd, "key, value",
          "For {} `query`, expected `key` and `value` to be {}-D but found {}-D and {}-D tensors respectively",
          kind, qd, key.dimension(), value.dimension());
    if (opts.key_padding_mask) {
      const std::size_t d = mask_dimension(*opts.key_padding_mask);
      check(d == qd - 1, "key_padding_mask", "For {} `query`, expected `key_padding_mask` to be `None` or {}-D but found {}-D tensor instead", kind, qd - 1, d);
    }
    if (opts.attn_mask) {
      const std::size_t d = mask_dimension(*opts.attn_mask);
      check(d == 2 || d == 3, "attn_mask", "For {} `query`, expected `attn_mask` to be `None`, 2-D or 3-D but found {}-D tensor instead", kind, d);
      if (!batched && d == 3) {
        const std::vector<std::size_t> expected{num_heads(), query.shape(0), key.shape(0)};
        const auto got = mask_shape(*opts.attn_mask);
        check(std::equal(expected.begin(), expected.end(), got.begin(), got.end()), "attn_mask",
              "Expected `attn_mask` shape to be {} but got {}", shape_string(expected), shape_string(got));
      }
    }
    return batched;
  }

  // The checks of multi_head_attention_forward on the sequence-first inputs.
  void check_inputs(const xt::xtensor<T, 3>& q, const xt::xtensor<T, 3>& k, const xt::xtensor<T, 3>& v) const {
    check(q.shape(2) == embed_dim(), "query", "was expecting embedding dimension of {}, but got {}", embed_dim(), q.shape(2));
    check(k.shape(1) == q.shape(1), "key", "expected batch size {} (the query's), but got {}", q.shape(1), k.shape(1));
    check(k.shape(0) == v.shape(0) && k.shape(1) == v.shape(1), "value",
          "key's sequence and batch dims {} do not match value's {}", shape_string({k.shape(0), k.shape(1)}),
          shape_string({v.shape(0), v.shape(1)}));
    check(k.shape(2) == kdim(), "key", "expected embedding dimension kdim = {}, but got {}", kdim(), k.shape(2));
    check(v.shape(2) == vdim(), "value", "expected embedding dimension vdim = {}, but got {}", vdim(), v.shape(2));
  }

  // key_padding_mask as a float (N, S) mask; unbatched (S) becomes (1, S).
  std::optional<xt::xtensor<T, 2>> prepare_key_padding_mask(const std::optional<Mask<T>>& m, bool batched,
                                                            std::size_t N, std::size_t S) const {
    if (!m) return std::nullopt;
    xt::xarray<T> mask = canonical_mask(*m);
    if (!batched) mask = xt::view(mask, xt::newaxis(), xt::all());
    check(mask.shape(0) == N && mask.shape(1) == S, "key_padding_mask",
          "expecting key_padding_mask shape of {}, but got {}", shape_string({N, S}), shape_string(mask.shape()));
    return xt::xtensor<T, 2>(mask);
  }

  // attn_mask as a float (1, L, S) or (N*H, L, S) mask, with PyTorch's shape checks.
  std::optional<xt::xtensor<T, 3>> prepare_attn_mask(const std::optional<Mask<T>>& m, bool batched,
                                                     std::size_t L, std::size_t N, std::size_t S) const {
    if (!m) return std::nullopt;
    const xt::xarray<T> mask = canonical_mask(*m);
    if (mask.dimension() == 2) {
      check(mask.shape(0) == L && mask.shape(1) == S, "attn_mask", "The shape of the 2D attn_mask is {}, but should be {}.",
            shape_string(mask.shape()), shape_string({L, S}));
      return xt::xtensor<T, 3>(xt::view(mask, xt::newaxis(), xt::all(), xt::all()));  // (1, L, S)
    }
    const std::size_t B = (batched ? N : 1) * num_heads();
    check(mask.shape(0) == B && mask.shape(1) == L && mask.shape(2) == S, "attn_mask",
          "The shape of the 3D attn_mask is {}, but should be {}.", shape_string(mask.shape()), shape_string({B, L, S}));
    return xt::xtensor<T, 3>(mask);
  }

  // Appends bias_k to k and bias_v to v as one more position for every batch entry.
  void append_bias_kv(xt::xtensor<T, 3>& k, xt::xtensor<T, 3>& v, std::optional<xt::xtensor<T, 3>>& attn_mask,
                      std::optional<xt::xtensor<T, 2>>& key_padding_mask) const {
    auto append = [](const xt::xtensor<T, 3>& x, const xt::xtensor<T, 3>& bias) {
      const std::size_t S = x.shape(0), N = x.shape(1), E = x.shape(2);
      xt::xtensor<T, 3> out({S + 1, N, E});
      xt::view(out, xt::range(0, S), xt::all(), xt::all()) = x;
      for (std::size_t n = 0; n < N; ++n) xt::view(out, S, n, xt::all()) = xt::view(bias, 0, 0, xt::all());
      return out;
    };
    k = append(k, *bias_k_);  // (S+1, N, E)
    v = append(v, *bias_v_);
    if (attn_mask) attn_mask = pad_last(*attn_mask);
    if (key_padding_mask) key_padding_mask = pad_last(*key_padding_mask);
  }

  // (N*H, L, S) -> (N, H, L, S), or its mean over heads (N, L, S); unbatched without N.
  xt::xarray<T> output_weights(const xt::xtensor<T, 3>& w, std::size_t N, std::size_t L, std::size_t S,
                               bool average, bool batched) const {
    xt::xarray<T> weights = xt::reshape_view(w, {N, num_heads(), L, S});  // (N, H, L, S)
    if (average) weights = xt::mean(weights, {1});                         // (N, L, S)
    if (!batched) weights = xt::xarray<T>(xt::strided_view(weights, {0, xt::ellipsis()}));  // drop N
    return weights;
  }

  Options options_;
  bool training_ = true;
  Generator dropout_generator_;
  xt::xtensor<T, 2> in_proj_weight_;          // (3E, E) packed
  SeparateProjections<T> separate_;            // W_q (E, E), W_k (E, kdim), W_v (E, vdim); biases unused
  std::optional<xt::xtensor<T, 1>> in_proj_bias_;   // (3E)
  xt::xtensor<T, 2> out_proj_weight_;          // (E, E)
  std::optional<xt::xtensor<T, 1>> out_proj_bias_;  // (E)
  std::optional<xt::xtensor<T, 3>> bias_k_, bias_v_;  // (1, 1, E)
};

}  // namespace mha
