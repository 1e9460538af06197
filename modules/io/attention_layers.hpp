// modules/io/attention_layers.hpp — the nn.MultiheadAttention layers in a model's weights.
//
// A layer is found by PyTorch's key names: a prefix P ("transformer_encoder.layers.0.
// self_attn.") with P + "out_proj.weight" and P + "in_proj_weight" (packed) or
// P + "q_proj_weight" (separate). Its weights' shapes tell most of its Options: embed_dim,
// kdim, vdim, bias, add_bias_kv, packed or separate. Not num_heads: in_proj_weight is
// (3E, E) for every H that divides E, so the caller gives it.
//
// Layers are found in a state_dict in memory (StateDict<T>), or in a checkpoint
// (checkpoint.hpp) from its headers alone: listing and describing the layers of a file reads
// no tensor data, and loading one layer reads that layer's tensors only. A layer can then
// be loaded as a module, or split into W_q, W_k, W_v, b_q, b_k, b_v with the rows each
// came from.
//
// Legend: E = embed_dim.
//
// Included by modules/io.cppm, in its module purview: no module line of its own.
// Uses mha, npy.hpp, checkpoint.hpp.

export namespace mha {

// What the weights of one nn.MultiheadAttention say about it.
struct AttentionLayer {
  std::string prefix;  // "layers.0.self_attn."
  std::int64_t embed_dim = 0;
  std::int64_t kdim = 0, vdim = 0;
  bool bias = false;
  bool add_bias_kv = false;
  bool packed = false;  // in_proj_weight, or q/k/v_proj_weight
  std::string dtype;    // of out_proj.weight, as NumPy prints it: float32, float64, float16, bfloat16
};

// Every state_dict key nn.MultiheadAttention can have, in PyTorch's order.
std::vector<std::string> multihead_attention_keys() {
  return {"in_proj_weight", "q_proj_weight", "k_proj_weight",   "v_proj_weight", "in_proj_bias",
          "bias_k",         "bias_v",        "out_proj.weight", "out_proj.bias"};
}

// The attention layers among `names`: every prefix P with P + "out_proj.weight" and
// P + "in_proj_weight" (packed) or P + "q_proj_weight" (separate), sorted by prefix.
std::vector<std::string> attention_layer_prefixes(const std::vector<std::string>& names) {
  std::vector<std::string> sorted = names, prefixes;
  std::sort(sorted.begin(), sorted.end());
  const auto has = [&](const std::string& key) { return std::binary_search(sorted.begin(), sorted.end(), key); };
  const std::string out = "out_proj.weight";
  for (const auto& name : sorted) {
    if (!name.ends_with(out)) continue;
    const std::string p = name.substr(0, name.size() - out.size());
    if (has(p + "in_proj_weight") || has(p + "q_proj_weight")) prefixes.push_back(p);
  }
  return prefixes;
}

// The one attention layer under `prefix`: an Error when there is none, or more than one.
std::string select_attention_layer(const std::vector<std::string>& names, std::string_view prefix) {
  const auto all = attention_layer_prefixes(names);
  std::vector<std::string> matching;
  for (const auto& p : all)
    if (p.starts_with(prefix)) matching.push_back(p);
  const auto quoted = [](const std::vector<std::string>& v) {
    std::string text;
    for (const auto& s : v) text += fmt::format("{}'{}'", text.empty() ? "" : ", ", s);
    return text.empty() ? std::string("none") : text;
  };
  check(!matching.empty(), "prefix",
        "no attention layer (out_proj.weight with in_proj_weight or q_proj_weight) starts with '{}'; attention layers "
        "found: {}",
        prefix, quoted(all));
  check(matching.size() == 1, "prefix",
        "'{}' is ambiguous: it matches {} attention layers: {}; give the full prefix of one", prefix, matching.size(),
        quoted(matching));
  return matching.front();
}

// Options for a MultiheadAttention that can load this layer; num_heads is the caller's.
Options options_for(const AttentionLayer& layer, std::int64_t num_heads) {
  Options options;
  options.embed_dim = layer.embed_dim;
  options.num_heads = num_heads;
  options.bias = layer.bias;
  options.add_bias_kv = layer.add_bias_kv;
  options.kdim = layer.kdim;
  options.vdim = layer.vdim;
  options.separate_projections = !layer.packed;
  return options;
}

}  // namespace mha

namespace mha::detail {

// The shapes of one layer's parameters, by PyTorch's names (the prefix removed).
using LayerShapes = std::map<std::string, std::vector<std::size_t>>;

// What the shapes say: embed_dim from out_proj.weight (E, E), kdim and vdim from the
// separate k/v_proj_weight (E, kdim) and (E, vdim), bias and add_bias_kv by presence.
AttentionLayer describe_layer_shapes(const LayerShapes& layer, const std::string& prefix, const std::string& dtype) {
  AttentionLayer info;
  info.prefix = prefix;
  info.dtype = dtype;
  const auto shape_of = [&](const std::string& key) -> const auto& {
    check(layer.contains(key), info.prefix + key, "missing from the state_dict");
    return layer.at(key);
  };
  const auto& out = shape_of("out_proj.weight");
  check(out.size() == 2 && out[0] == out[1], info.prefix + "out_proj.weight", "expected shape (E, E), got {}",
        shape_string(out));
  info.embed_dim = static_cast<std::int64_t>(out[0]);
  info.packed = layer.contains("in_proj_weight");
  if (info.packed) {
    info.kdim = info.vdim = info.embed_dim;
  } else {
    const auto& k = shape_of("k_proj_weight");
    const auto& v = shape_of("v_proj_weight");
    check(k.size() == 2 && v.size() == 2, info.prefix + "k_proj_weight, v_proj_weight",
          "expected 2-D weights, got {} and {}", shape_string(k), shape_string(v));
    info.kdim = static_cast<std::int64_t>(k[1]);
    info.vdim = static_cast<std::int64_t>(v[1]);
  }
  info.bias = layer.contains("in_proj_bias");
  info.add_bias_kv = layer.contains("bias_k");
  return info;
}

// The layer at the full prefix `layer` of a checkpoint, from its headers.
AttentionLayer describe_checkpoint_layer(const Checkpoint& c, const std::string& layer) {
  LayerShapes shapes;
  for (const auto& key : multihead_attention_keys())
    if (const auto it = c.tensors.find(layer + key); it != c.tensors.end()) shapes.emplace(key, it->second.shape);
  const auto out = c.tensors.find(layer + "out_proj.weight");
  return describe_layer_shapes(shapes, layer, out == c.tensors.end() ? "" : out->second.dtype);
}

// A module (in eval mode) holding one layer's parameters, loaded strictly: every key
// must be one of the module's and every shape PyTorch's.
template <class T>
MultiheadAttention<T> module_of_layer(const StateDict<T>& layer, const AttentionLayer& info, std::int64_t num_heads) {
  MultiheadAttention<T> module(options_for(info, num_heads));
  module.load_state_dict(layer);
  module.eval();
  return module;
}

}  // namespace mha::detail

export namespace mha {

// The layer's Options as far as its weights tell: embed_dim, kdim, vdim, bias,
// add_bias_kv. `layer` holds PyTorch's parameter names, the prefix removed.
template <class T>
AttentionLayer describe_attention_layer(const StateDict<T>& layer, const std::string& prefix = "") {
  detail::LayerShapes shapes;
  for (const auto& [key, value] : layer)
    shapes.emplace(key, std::vector<std::size_t>(value.shape().begin(), value.shape().end()));
  return detail::describe_layer_shapes(shapes, prefix, dtype_name(npy_descr<T>()));
}

// The same for the one layer of a checkpoint under `prefix` (its full prefix or any
// unambiguous start of it), from the headers alone.
AttentionLayer describe_attention_layer(const Checkpoint& c, std::string_view prefix) {
  return detail::describe_checkpoint_layer(c, select_attention_layer(c.names(), prefix));
}

// Every attention layer of a checkpoint whose prefix starts with `prefix` (all of them by
// default), described from the headers alone: no tensor data is read. An Error, listing
// the layers there are, when none matches.
std::vector<AttentionLayer> attention_layers(const Checkpoint& c, std::string_view prefix = "") {
  const auto names = c.names();
  std::vector<AttentionLayer> layers;
  for (const auto& p : attention_layer_prefixes(names))
    if (p.starts_with(prefix)) layers.push_back(detail::describe_checkpoint_layer(c, p));
  if (layers.empty()) select_attention_layer(names, prefix);  // throws, naming what there is
  return layers;
}

// The parameters of the one attention layer under `prefix`, the prefix removed.
template <class T>
StateDict<T> attention_layer_parameters(const StateDict<T>& dict, std::string_view prefix) {
  std::vector<std::string> names;
  for (const auto& [name, _] : dict) names.push_back(name);
  const std::string layer = select_attention_layer(names, prefix);
  StateDict<T> out;
  for (const auto& [name, value] : dict)
    if (name.starts_with(layer)) out.emplace(name.substr(layer.size()), value);
  return out;
}

// The same from a checkpoint, as T: only the layer's own tensors are read (the keys of
// multihead_attention_keys() under its prefix), each from its offset in the file.
template <class T>
StateDict<T> attention_layer_parameters(const Checkpoint& c, std::string_view prefix) {
  const std::string layer = select_attention_layer(c.names(), prefix);
  StateDict<T> out;
  for (const auto& key : multihead_attention_keys())
    if (c.tensors.contains(layer + key)) out.emplace(key, tensor<T>(c, layer + key));
  return out;
}

// A MultiheadAttention (in eval mode) holding the layer under `prefix` of a state_dict:
// load_state_dict is strict, so every key must be one of the module's and every shape
// PyTorch's.
template <class T>
MultiheadAttention<T> load_attention_layer(const StateDict<T>& dict, std::string_view prefix, std::int64_t num_heads) {
  const auto layer = attention_layer_parameters(dict, prefix);
  return detail::module_of_layer(layer, describe_attention_layer(layer), num_heads);
}

// The same from a checkpoint, reading that layer's tensors only.
template <class T>
MultiheadAttention<T> load_attention_layer(const Checkpoint& c, std::string_view prefix, std::int64_t num_heads) {
  const auto layer = attention_layer_parameters<T>(c, prefix);
  return detail::module_of_layer(layer, describe_attention_layer(layer), num_heads);
}

// One of W_q, W_k, W_v, b_q, b_k, b_v of a layer, and where in its tensors it came from.
template <class T>
struct ProjectionPart {
  std::string name;     // "W_q", ..., "b_v"
  xt::xarray<T> value;  // W_q (E, E), W_k (E, kdim), W_v (E, vdim), b_* (E)
  std::string source;   // "layers.0.self_attn.in_proj_weight rows [0, 8)"
};

// The projections of a layer taken apart, W_q, b_q, W_k, b_k, W_v, b_v in that order (no
// b_* without bias): as the module's separate_projections() gives them, which splits a
// packed in_proj_weight by rows with split_packed. `layer` holds PyTorch's parameter
// names, the prefix removed; `prefix` only names the sources.
template <class T>
std::vector<ProjectionPart<T>> split_attention_layer(const StateDict<T>& layer, const std::string& prefix = "") {
  const AttentionLayer info = describe_attention_layer(layer, prefix);
  const auto p = detail::module_of_layer(layer, info, /*num_heads=*/1).separate_projections();
  const std::size_t E = static_cast<std::size_t>(info.embed_dim);
  const std::pair<const xt::xtensor<T, 2>*, const std::optional<xt::xtensor<T, 1>>*> qkv[] = {
      {&p.w_q, &p.b_q}, {&p.w_k, &p.b_k}, {&p.w_v, &p.b_v}};
  const char* letters[] = {"q", "k", "v"};
  std::vector<ProjectionPart<T>> parts;
  for (std::size_t i = 0; i < 3; ++i) {
    const auto rows = fmt::format("[{}, {})", i * E, (i + 1) * E);  // block i of the packed rows
    parts.push_back({fmt::format("W_{}", letters[i]), *qkv[i].first,
                     info.packed ? fmt::format("{}in_proj_weight rows {}", prefix, rows)
                                 : fmt::format("{}{}_proj_weight (all rows)", prefix, letters[i])});
    if (*qkv[i].second)
      parts.push_back(
          {fmt::format("b_{}", letters[i]), **qkv[i].second, fmt::format("{}in_proj_bias {}", prefix, rows)});
  }
  return parts;
}

}  // namespace mha
