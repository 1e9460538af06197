// mha-inspect: find the attention layers in a trained model's weights, split and run one.
//
//   mha-inspect FILE                          list the nn.MultiheadAttention layers in FILE
//   mha-inspect FILE --prefix P --split DIR   write W_q, W_k, W_v, b_q, b_k, b_v of one layer
//   mha-inspect FILE --prefix P --num-heads H --run    run it on seeded random input
//
// FILE is a .safetensors file or a folder of .npy files named by state_dict keys. A layer
// is found by PyTorch's key names: a prefix P with P + "out_proj.weight" and
// P + "in_proj_weight" (packed) or P + "q_proj_weight" (separate). num_heads is not in
// the weights (in_proj_weight is (3E, E) whatever H is), so --run needs --num-heads.
#include <CLI/CLI.hpp>

#include "third_party.hpp"

#include <cstdio>

import mha;
import mha.io;

namespace {

namespace fs = std::filesystem;

struct Arguments {
  std::string file, prefix, split;
  std::int64_t num_heads = 0;
  bool run = false;
  std::size_t length = 4, batch = 1;
  std::uint64_t seed = 0;
};

// The tensor names of FILE, without reading any as weights (a model may also hold
// integer buffers, such as position ids).
std::vector<std::string> tensor_names(const fs::path& file) {
  std::vector<std::string> names;
  if (fs::is_directory(file)) {
    for (const auto& entry : fs::directory_iterator(file))
      if (entry.path().extension() == ".npy") names.push_back(entry.path().stem().string());
    std::sort(names.begin(), names.end());
  } else {
    for (const auto& [name, _] : mha::read_safetensors(file).tensors) names.push_back(name);
  }
  return names;
}

// The parameters of the layer at `prefix` as T, by PyTorch's names (the prefix removed).
// Only nn.MultiheadAttention's keys are read: a folder of a golden case, say, also holds
// inputs and bool masks.
template <class T>
mha::StateDict<T> load_layer(const fs::path& file, const std::vector<std::string>& names, const std::string& prefix) {
  std::optional<mha::Safetensors> st;
  if (!fs::is_directory(file)) st = mha::read_safetensors(file);
  mha::StateDict<T> layer;
  for (const auto& key : mha::multihead_attention_keys()) {
    const std::string name = prefix + key;
    if (std::find(names.begin(), names.end(), name) == names.end()) continue;
    layer.emplace(key, st ? mha::tensor<T>(*st, name) : mha::load_npy<T>(file / (name + ".npy")));
  }
  return layer;
}

// Double when the file's attention weights are F64 (or .npy '<f8'), float otherwise.
bool holds_double(const fs::path& file) {
  if (fs::is_directory(file)) {
    for (const auto& entry : fs::directory_iterator(file))
      if (entry.path().extension() == ".npy" && mha::read_npy(entry.path()).descr == "<f8") return true;
    return false;
  }
  for (const auto& [name, t] : mha::read_safetensors(file).tensors)
    if (name.ends_with("out_proj.weight") && t.dtype == "F64") return true;
  return false;
}

// A layer's prefix as printed: the keys of a folder of one layer have none.
std::string shown_prefix(const std::string& prefix) { return prefix.empty() ? "(no prefix)" : prefix; }

void list_layers(const Arguments& args, const std::vector<std::string>& names,
                 const std::vector<mha::AttentionLayer>& layers) {
  fmt::print("{}: {} tensors, {} attention layer{}\n", args.file, names.size(), layers.size(),
             layers.size() == 1 ? "" : "s");
  for (const auto& l : layers) {
    fmt::print("  {}\n", shown_prefix(l.prefix));
    fmt::print("    embed_dim={} kdim={} vdim={} bias={} add_bias_kv={}\n", l.embed_dim, l.kdim, l.vdim, l.bias,
               l.add_bias_kv);
    if (l.packed)
      fmt::print("    {}in_proj_weight ({}, {}) = [W_q; W_k; W_v]\n", l.prefix, 3 * l.embed_dim, l.embed_dim);
    else
      fmt::print("    {}q_proj_weight, k_proj_weight, v_proj_weight (separate: kdim or vdim differs from embed_dim)\n",
                 l.prefix);
  }
}

// W_q .. b_v of one layer as .npy files and as one safetensors file, with where each came from.
template <class T>
void split_layer(const fs::path& out, const mha::AttentionLayer& info, const mha::StateDict<T>& layer) {
  fs::create_directories(out);
  const std::size_t E = static_cast<std::size_t>(info.embed_dim);
  mha::StateDict<T> parts;
  std::vector<std::pair<std::string, std::string>> sources;  // name -> where it came from
  const char* names[] = {"q", "k", "v"};
  for (std::size_t i = 0; i < 3; ++i) {
    const std::string w = fmt::format("W_{}", names[i]), b = fmt::format("b_{}", names[i]);
    if (info.packed) {
      parts[w] = xt::view(layer.at("in_proj_weight"), xt::range(i * E, (i + 1) * E), xt::all());  // (E, E)
      sources.emplace_back(w, fmt::format("{}in_proj_weight rows [{}, {})", info.prefix, i * E, (i + 1) * E));
    } else {
      const std::string key = fmt::format("{}_proj_weight", names[i]);
      parts[w] = layer.at(key);
      sources.emplace_back(w, fmt::format("{}{} (all rows)", info.prefix, key));
    }
    if (info.bias) {
      parts[b] = xt::view(layer.at("in_proj_bias"), xt::range(i * E, (i + 1) * E));  // (E)
      sources.emplace_back(b, fmt::format("{}in_proj_bias [{}, {})", info.prefix, i * E, (i + 1) * E));
    }
  }
  for (const auto& [name, source] : sources) {
    mha::save_npy<T>(out / (name + ".npy"), parts.at(name));
    fmt::print("{} {:<8} = {}  -> {}\n", name, mha::shape_string(parts.at(name).shape()), source,
               (out / (name + ".npy")).string());
  }
  mha::save_safetensors(out / "split.safetensors", parts, {{"source", info.prefix}});
  fmt::print("all of them -> {}\n", (out / "split.safetensors").string());
}

template <class T>
void run_layer(const Arguments& args, const mha::StateDict<T>& layer, const std::string& prefix) {
  auto module = mha::load_attention_layer(layer, "", args.num_heads);
  std::mt19937_64 engine(args.seed);
  // Standard normal by Box-Muller on 53-bit uniforms: the same numbers with every standard
  // library (std::normal_distribution's algorithm is left to the implementation).
  const auto uniform = [&] { return static_cast<double>(engine() >> 11) * 0x1.0p-53; };
  const auto normal = [&] {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  };
  const std::size_t L = args.length, N = args.batch;
  auto random = [&](std::size_t dim) {
    xt::xarray<T> x = xt::xarray<T>::from_shape({L, N, dim});  // (L, N, dim), seq-first
    for (auto& v : x) v = static_cast<T>(normal());
    return x;
  };
  const auto query = random(module.embed_dim());
  const auto key = module.qkv_same_embed_dim() ? query : random(module.kdim());
  const auto value = module.qkv_same_embed_dim() ? query : random(module.vdim());
  const auto out = module.forward(query, key, value);
  fmt::print("run {} (num_heads={}, head_dim={}), seed {}:\n", shown_prefix(prefix), module.num_heads(),
             module.head_dim(), args.seed);
  fmt::print("  query {} (L, N, E), standard normal\n", mha::shape_string(query.shape()));
  if (module.qkv_same_embed_dim()) fmt::print("  key = value = query (self-attention)\n");
  else
    fmt::print("  key {}, value {} (S, N, kdim), (S, N, vdim)\n", mha::shape_string(key.shape()),
               mha::shape_string(value.shape()));
  fmt::print("  attn_output {} (L, N, E)\n", mha::shape_string(out.attn_output.shape()));
  if (out.attn_output_weights)  // need_weights=true (the default) returns them
    fmt::print("  attn_output_weights {} (N, L, S), averaged over heads\n",
               mha::shape_string(out.attn_output_weights->shape()));
  const std::size_t shown = std::min<std::size_t>(module.embed_dim(), 6);
  std::vector<T> first(out.attn_output.data(), out.attn_output.data() + shown);
  fmt::print("  attn_output[0, 0, :{}] = [{:.6f}]\n", shown, fmt::join(first, ", "));
}

template <class T>
int inspect(const Arguments& args) {
  const auto names = tensor_names(args.file);

  // 1) without --split or --run: list the layers under --prefix (all of them without it)
  if (args.split.empty() && !args.run) {
    std::vector<mha::AttentionLayer> layers;
    for (const auto& prefix : mha::attention_layer_prefixes(names))
      if (prefix.starts_with(args.prefix))
        layers.push_back(mha::describe_attention_layer(load_layer<T>(args.file, names, prefix), prefix));
    if (layers.empty()) mha::select_attention_layer(names, args.prefix);  // the error, with what there is
    list_layers(args, names, layers);
    return 0;
  }

  // 2) --split and --run work on one layer: the prefix must select exactly one
  const std::string prefix = mha::select_attention_layer(names, args.prefix);
  const auto layer = load_layer<T>(args.file, names, prefix);
  const auto info = mha::describe_attention_layer(layer, prefix);
  if (!args.split.empty()) split_layer<T>(args.split, info, layer);
  if (args.run) run_layer<T>(args, layer, prefix);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "List, split and run the nn.MultiheadAttention layers in a trained model's weights.\n\n"
      "Workflow on the shipped example (a torch.nn.TransformerEncoder, 2 layers, d_model 8, nhead 2):\n"
      "  mha-inspect golden/weights/transformer_encoder/model.safetensors\n"
      "      lists layers.0.self_attn. and layers.1.self_attn.\n"
      "  mha-inspect golden/weights/transformer_encoder/model.safetensors --prefix layers.0.self_attn. --split out/\n"
      "      writes W_q.npy .. b_v.npy and split.safetensors; W_q = in_proj_weight rows [0, 8)\n"
      "  mha-inspect golden/weights/transformer_encoder/model.safetensors --prefix layers.0. --num-heads 2 --run\n"
      "      runs the layer on seeded random input\n"};
  app.set_version_flag("--version", fmt::format("mha-inspect {}", MHA_VERSION));
  Arguments args;
  app.add_option("FILE", args.file, "A .safetensors file, or a folder of .npy files named by state_dict keys")
      ->required()
      ->check(CLI::ExistingPath);
  app.add_option("--prefix", args.prefix,
                 "Key prefix of one layer, e.g. transformer_encoder.layers.0.self_attn. (any unambiguous start of it)");
  app.add_option("--num-heads", args.num_heads, "num_heads of the layer: not recorded in the weights; needed by --run")
      ->check(CLI::PositiveNumber);
  app.add_option("--split", args.split,
                 "Write W_q, W_k, W_v, b_q, b_k, b_v of the layer to this folder (.npy and split.safetensors)");
  app.add_flag("--run", args.run, "Run a forward pass of the layer on seeded random input (needs --num-heads)");
  app.add_option("--length", args.length, "Sequence length L of the random input for --run")->capture_default_str();
  app.add_option("--batch", args.batch, "Batch size N of the random input for --run")->capture_default_str();
  app.add_option("--seed", args.seed, "Seed of the random input for --run")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    if (args.run && args.num_heads == 0)
      throw mha::Error(
          "--num-heads: required by --run: num_heads cannot be inferred from the weights "
          "(in_proj_weight is (3E, E) for every num_heads that divides E)");
    return holds_double(args.file) ? inspect<double>(args) : inspect<float>(args);
  } catch (const mha::Error& e) {
    fmt::print(stderr, "mha-inspect: error: {}\n", e.what());
    return 1;
  }
}
