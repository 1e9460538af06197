// modules/api/pytorch_paths.hpp — which code of PyTorch runs a call: its native fast path or not.
//
// MultiheadAttention.forward (torch/nn/modules/activation.py) first checks whether it can
// hand the whole layer to torch._native_multi_head_attention, building a string
// why_not_fast_path; otherwise it calls F.multi_head_attention_forward, whose 2.x branch
// without weights is scaled_dot_product_attention. The conditions differ by generation
// (docs/15-versions.md, the switch); they are decided here from the same inputs. The masks
// are then prepared as that code reads them in mask_preparation.hpp (module_mask), and
// which AttentionPath computes it is the library's own choice (attention_steps).
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads.
//
// Included by modules/api.cppm, in its module purview: no module line of its own.
// Uses mha.core, textbook/versions.hpp, textbook/options.hpp, textbook/inputs.hpp, textbook/generations.hpp.

export namespace mha {

// The path PyTorch takes, and why not the fast path (empty when it is taken), in
// PyTorch's words.
struct PathChoice {
  PyTorchPath path = PyTorchPath::weights;
  std::string why_not_fast_path;
};

}  // namespace mha

namespace mha::detail {

// MultiheadAttention.forward's reasons not to take the native fast path, in its order,
// for the generation chosen; empty when it takes it. (Autocast, nested tensors, devices
// and __torch_function__ have no counterpart here.)
template <class T>
std::string why_not_fast_path(const Options& o, bool training, const ForwardOptions<T>& opts, const Geometry& g) {
  const Sizes s(o);
  const bool v2 = o.pytorch == PyTorchVersion::v2;
  if (!g.batched) return "input not batched; expected query.dim() of 3 but got 2";
  if (g.aliasing != textbook::Aliasing::self_attention)
    return "non-self attention was used (query, key, and value are not the same Tensor)";
  if (training) return "training is enabled";
  if (v2 && s.H % 2 != 0) return "self.num_heads is not even";
  if (!o.batch_first) return "batch_first was not True";
  if (o.add_bias_kv) return "self.bias_k was not None";
  if (!v2 && o.dropout > 0) return fmt::format("dropout was {}, required zero", o.dropout);
  if (o.add_zero_attn) return "add_zero_attn was enabled";
  if (s.kdim != s.E || s.vdim != s.E) return "_qkv_same_embed_dim was not True";
  if (!v2 && opts.attn_mask) return "attn_mask was not None";
  if (!v2 && s.H % 2 == 1) return "num_heads is odd";
  // 2.x sets this first, and any reason above replaces it.
  if (v2 && (is_float_mask(opts.attn_mask) || is_float_mask(opts.key_padding_mask)))
    return "floating-point masks are not supported for fast path.";
  if (opts.grad_enabled)
    return "grad is enabled and at least one of query or the input/output projection weights or biases "
           "requires_grad";
  // 2.x hands the fast path only a module with in_proj_bias, else runs the slow path.
  if (v2 && !o.bias) return "in_proj_bias was None";
  return {};
}

// The path of a module's forward: the fast path when nothing rules it out, else
// multi_head_attention_forward, whose 2.x branch without weights is SDPA.
template <class T>
PathChoice module_path(const Options& o, bool training, const ForwardOptions<T>& opts, const Geometry& g) {
  PathChoice choice{PyTorchPath::weights, why_not_fast_path(o, training, opts, g)};
  if (choice.why_not_fast_path.empty()) choice.path = PyTorchPath::fast_path;
  else if (o.pytorch == PyTorchVersion::v2 && !opts.need_weights) choice.path = PyTorchPath::sdpa;
  return choice;
}

// The path of F.multi_head_attention_forward, which has no fast path.
inline PathChoice functional_path(PyTorchVersion version, bool need_weights) {
  const bool sdpa = version == PyTorchVersion::v2 && !need_weights;
  return {sdpa ? PyTorchPath::sdpa : PyTorchPath::weights, "the functional form has no fast path"};
}

}  // namespace mha::detail
