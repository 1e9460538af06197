// modules/textbook/parameters.hpp — the learnable parameters of nn.MultiheadAttention, under PyTorch's
// state_dict names, and their initialisation (_reset_parameters).
//
//   packed    in_proj_weight (3E, E) = [W_q; W_k; W_v], when kdim == vdim == E;
//   separate  q_proj_weight (E, E), k_proj_weight (E, kdim), v_proj_weight (E, vdim);
//   both      in_proj_bias (3E) = [b_q; b_k; b_v], out_proj.weight (E, E), out_proj.bias (E),
//             and with add_bias_kv bias_k, bias_v (1, 1, E).
// The module (api/multihead_attention.hpp) holds one Parameters and lets the user read and set
// them by name; the forward paths read them.
//
// Legend: E = embed_dim, Ek = kdim, Ev = vdim.
//
// Included by modules/textbook.cppm, in its module purview: no module line of its own.
// Uses mha.core, random.hpp, options.hpp, in_projection.hpp.

namespace mha::detail {

template <class T>
xt::xtensor<T, 2> zeros(std::size_t rows, std::size_t cols) {
  return xt::xtensor<T, 2>(xt::zeros<T>({rows, cols}));
}

// A number no other state of any module's weights has had: a Parameters takes a new one
// at every change, so equal numbers mean equal weights, even across copies. Defined once,
// in the library (modules/textbook/parameters.cpp): one counter for every translation unit
// that makes Parameters, the library's and the program's.
std::uint64_t new_weights_version();

}  // namespace mha::detail

export namespace mha::textbook {

template <class T>
struct Parameters {
  bool packed = true;                               // in_proj_weight, or q/k/v_proj_weight
  xt::xtensor<T, 2> in_proj_weight;                 // (3E, E) packed
  SeparateProjections<T> separate;                  // W_q (E, E), W_k (E, Ek), W_v (E, Ev); biases unused
  std::optional<xt::xtensor<T, 1>> in_proj_bias;    // (3E)
  xt::xtensor<T, 2> out_proj_weight;                // (E, E)
  std::optional<xt::xtensor<T, 1>> out_proj_bias;   // (E)
  std::optional<xt::xtensor<T, 3>> bias_k, bias_v;  // (1, 1, E)

  // Every parameter of `options`, zero, in PyTorch's shapes.
  explicit Parameters(const Options& options) : packed(packs(options)) {
    const detail::Sizes s(options);
    if (packed) in_proj_weight = xt::xtensor<T, 2>(xt::zeros<T>(in_proj_weight_shape(s.E)));
    else
      separate = {detail::zeros<T>(s.E, s.E), detail::zeros<T>(s.E, s.kdim), detail::zeros<T>(s.E, s.vdim), {}, {}, {}};
    out_proj_weight = detail::zeros<T>(s.E, s.E);
    if (options.bias) in_proj_bias = xt::xtensor<T, 1>(xt::zeros<T>({3 * s.E}));
    if (options.bias) out_proj_bias = xt::xtensor<T, 1>(xt::zeros<T>({s.E}));
    if (options.add_bias_kv) bias_k = bias_v = xt::xtensor<T, 3>(xt::zeros<T>({std::size_t{1}, std::size_t{1}, s.E}));
  }

  // True when `options` give the packed in_proj_weight (PyTorch's _qkv_same_embed_dim).
  static bool packs(const Options& o) {
    const detail::Sizes s(o);
    return s.kdim == s.E && s.vdim == s.E && !o.separate_projections;
  }

  // The state_dict keys, in PyTorch's order.
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    if (packed) n = {"in_proj_weight"};
    else n = {"q_proj_weight", "k_proj_weight", "v_proj_weight"};
    if (in_proj_bias) n.push_back("in_proj_bias");
    if (bias_k) n.insert(n.end(), {"bias_k", "bias_v"});
    n.push_back("out_proj.weight");
    if (out_proj_bias) n.push_back("out_proj.bias");
    return n;
  }

  // The tensor under `name`; an error naming the parameters there are otherwise.
  xt::xarray<T> get(std::string_view name) const {
    require(name);
    if (name == "in_proj_weight") return in_proj_weight;
    if (name == "q_proj_weight") return separate.w_q;
    if (name == "k_proj_weight") return separate.w_k;
    if (name == "v_proj_weight") return separate.w_v;
    if (name == "in_proj_bias") return present(in_proj_bias, name);
    if (name == "bias_k") return present(bias_k, name);
    if (name == "bias_v") return present(bias_v, name);
    if (name == "out_proj.weight") return out_proj_weight;
    return present(out_proj_bias, name);
  }

  // An optional parameter that this module has: bias=True gives the biases, add_bias_kv=True
  // bias_k and bias_v, and set() cannot take them away.
  template <class Tensor>
  static const Tensor& present(const std::optional<Tensor>& parameter, std::string_view name) {
    if (!parameter) throw Error(fmt::format("{}: no such parameter in this module", name));
    return *parameter;
  }

  // Sets `name` to `value`, whose shape must be the parameter's. Nothing is reshaped or cast.
  void set(std::string_view name, const xt::xarray<T>& value) {
    const xt::xarray<T> current = get(name);
    check(std::equal(current.shape().begin(), current.shape().end(), value.shape().begin(), value.shape().end()), name,
          "expected shape {}, got {}", shape_string(current.shape()), shape_string(value.shape()));
    if (name == "in_proj_weight") in_proj_weight = value;
    else if (name == "q_proj_weight") separate.w_q = value;
    else if (name == "k_proj_weight") separate.w_k = value;
    else if (name == "v_proj_weight") separate.w_v = value;
    else if (name == "in_proj_bias") in_proj_bias = value;
    else if (name == "bias_k") bias_k = value;
    else if (name == "bias_v") bias_v = value;
    else if (name == "out_proj.weight") out_proj_weight = value;
    else out_proj_bias = value;
    version_ = detail::new_weights_version();
  }

  // PyTorch's MultiheadAttention._reset_parameters, and Linear's init for out_proj:
  //   in_proj_weight   xavier_uniform over the whole (3E, E): fan_in = E, fan_out = 3E,
  //                    so the bound is sqrt(6 / (E + 3E)), not sqrt(6 / 2E);
  //   q/k/v_proj       xavier_uniform, each on its own (E, E), (E, Ek), (E, Ev);
  //   out_proj.weight  kaiming_uniform(a = sqrt(5)): bound 1 / sqrt(fan_in) = 1 / sqrt(E);
  //   in_proj_bias, out_proj.bias   zeros;
  //   bias_k, bias_v   xavier_normal on (1, 1, E): fan_in = fan_out = E, std = sqrt(1 / E).
  void reset(Generator& g) {
    auto xavier_uniform = [&g](xt::xtensor<T, 2>& w) {
      const double bound = std::sqrt(6.0 / static_cast<double>(w.shape(0) + w.shape(1)));
      for (auto& x : w) x = static_cast<T>(g.uniform(-bound, bound));
    };
    if (packed) xavier_uniform(in_proj_weight);
    else xavier_uniform(separate.w_q), xavier_uniform(separate.w_k), xavier_uniform(separate.w_v);
    const double E = static_cast<double>(out_proj_weight.shape(0));
    for (auto& x : out_proj_weight) x = static_cast<T>(g.uniform(-1.0 / std::sqrt(E), 1.0 / std::sqrt(E)));
    for (auto* b : {&bias_k, &bias_v})
      if (*b)
        for (auto& x : **b) x = static_cast<T>(g.normal(0.0, std::sqrt(1.0 / E)));
    version_ = detail::new_weights_version();
  }

  // The projections as three separate weights and biases, whichever variant this is.
  SeparateProjections<T> separate_projections() const {
    if (packed) return split_packed(in_proj_weight, in_proj_bias);
    SeparateProjections<T> p = separate;
    const std::size_t E = out_proj_weight.shape(0);
    p.b_q = bias_block(in_proj_bias, 0, E), p.b_k = bias_block(in_proj_bias, 1, E);
    p.b_v = bias_block(in_proj_bias, 2, E);
    return p;
  }

  // The same weights, packed into in_proj_weight or split into q/k/v_proj_weight.
  Parameters repacked(bool to_packed) const {
    Parameters p = *this;
    const auto s = separate_projections();
    p.packed = to_packed;
    if (to_packed) p.in_proj_weight = pack(s).in_proj_weight, p.separate = {};
    else p.separate = {s.w_q, s.w_k, s.w_v, {}, {}, {}}, p.in_proj_weight = {};
    p.version_ = detail::new_weights_version();
    return p;
  }

  // Step 3 of forward(): the in-projection, packed (_in_projection_packed) or separate
  // (_in_projection). q (L, N, E), k (S, N, E), v (S, N, E)
  QKV<T> in_projection(const xt::xtensor<T, 3>& query, const xt::xtensor<T, 3>& key, const xt::xtensor<T, 3>& value,
                       Aliasing aliasing) const {
    if (packed) return in_projection_packed(query, key, value, in_proj_weight, in_proj_bias, aliasing);
    return textbook::in_projection(query, key, value, separate_projections());
  }

  // A number that changes with every change of these weights through set(), reset() or
  // repacked(), and that no other state of any Parameters has had: a cache's key.
  std::uint64_t version() const { return version_; }

private:
  std::uint64_t version_ = detail::new_weights_version();

  void require(std::string_view name) const {
    const auto n = names();
    check(std::find(n.begin(), n.end(), name) != n.end(), name, "no such parameter in this module (its parameters: {})",
          fmt::join(n, ", "));
  }
};

}  // namespace mha::textbook
