// tools/mha_inspect.cpp — mha-inspect: find the attention layers in a trained model's weights, split and run one.
//
//   mha-inspect FILE                          list the nn.MultiheadAttention layers in FILE
//   mha-inspect FILE --prefix P --split DIR   write W_q, W_k, W_v, b_q, b_k, b_v of one layer
//   mha-inspect FILE --prefix P --num-heads H --run    run it on seeded random input
//
// FILE is a .safetensors file or a folder of .npy files named by state_dict keys. A layer
// is found by PyTorch's key names: a prefix P with P + "out_proj.weight" and
// P + "in_proj_weight" (packed) or P + "q_proj_weight" (separate). num_heads is not in
// the weights (in_proj_weight is (3E, E) whatever H is), so --run needs --num-heads.
//
// A thin command over mha.io: the file is opened by its headers (mha::open_checkpoint),
// listing reads no tensor data, and --split and --run read the one layer's tensors.
#include "third_party_xtensor.hpp"

#include "arguments.hpp"

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

// A layer's prefix as printed: the keys of a folder of one layer have none.
std::string shown_prefix(const std::string& prefix) { return prefix.empty() ? "(no prefix)" : prefix; }

void list_layers(const Arguments& args, const mha::Checkpoint& checkpoint,
                 const std::vector<mha::AttentionLayer>& layers) {
  fmt::print("{}: {} tensors, {} attention layer{}\n", args.file, checkpoint.tensors.size(), layers.size(),
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
void split_layer(const fs::path& out, const mha::StateDict<T>& layer, const std::string& prefix) {
  fs::create_directories(out);
  mha::StateDict<T> parts;
  for (const auto& part : mha::split_attention_layer(layer, prefix)) {
    mha::save_npy<T>(out / (part.name + ".npy"), part.value);
    fmt::print("{} {:<8} = {}  -> {}\n", part.name, mha::shape_string(part.value.shape()), part.source,
               (out / (part.name + ".npy")).string());
    parts.emplace(part.name, part.value);
  }
  mha::save_safetensors(out / "split.safetensors", parts, {{"source", prefix}});
  fmt::print("all of them -> {}\n", (out / "split.safetensors").string());
}

// A (L, N, dim) sequence-first input of standard normal values, from the library's
// generator: the same numbers with every standard library.
template <class T>
xt::xarray<T> random_input(mha::Generator& generator, std::size_t L, std::size_t N, std::size_t dim) {
  xt::xarray<T> x = xt::xarray<T>::from_shape({L, N, dim});
  for (auto& v : x) v = static_cast<T>(generator.normal());
  return x;
}

template <class T>
void run_layer(const Arguments& args, const mha::StateDict<T>& layer, const std::string& prefix) {
  auto module = mha::load_attention_layer(layer, "", args.num_heads);
  mha::Generator generator(args.seed);
  const std::size_t L = args.length, N = args.batch;
  const auto query = random_input<T>(generator, L, N, module.embed_dim());
  const auto key = module.qkv_same_embed_dim() ? query : random_input<T>(generator, L, N, module.kdim());
  const auto value = module.qkv_same_embed_dim() ? query : random_input<T>(generator, L, N, module.vdim());
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

// --split and --run on the one layer the prefix selects, read as T.
template <class T>
void split_and_run(const Arguments& args, const mha::Checkpoint& checkpoint, const std::string& prefix) {
  const auto layer = mha::attention_layer_parameters<T>(checkpoint, prefix);  // that layer's tensors only
  if (!args.split.empty()) split_layer<T>(args.split, layer, prefix);
  if (args.run) run_layer<T>(args, layer, prefix);
}

int inspect(const Arguments& args) {
  const auto checkpoint = mha::open_checkpoint(args.file);  // the headers only

  // 1) without --split or --run: list the layers under --prefix (all of them without it)
  if (args.split.empty() && !args.run) {
    list_layers(args, checkpoint, mha::attention_layers(checkpoint, args.prefix));
    return 0;
  }

  // 2) --split and --run work on one layer: the prefix must select exactly one. Its
  // weights are read as double when they are float64, as float otherwise (F16 and BF16
  // widen to float exactly).
  const auto layer = mha::describe_attention_layer(checkpoint, args.prefix);
  if (layer.dtype == "float64") split_and_run<double>(args, checkpoint, layer.prefix);
  else split_and_run<float>(args, checkpoint, layer.prefix);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cli::Arguments arguments{
      "List, split and run the nn.MultiheadAttention layers in a trained model's weights.\n\n"
      "Workflow on the shipped example (a torch.nn.TransformerEncoder, 2 layers, d_model 8, nhead 2):\n"
      "  mha-inspect golden/weights/transformer_encoder/model.safetensors\n"
      "      lists layers.0.self_attn. and layers.1.self_attn.\n"
      "  mha-inspect golden/weights/transformer_encoder/model.safetensors --prefix layers.0.self_attn. --split out/\n"
      "      writes W_q.npy .. b_v.npy and split.safetensors; W_q = in_proj_weight rows [0, 8)\n"
      "  mha-inspect golden/weights/transformer_encoder/model.safetensors --prefix layers.0. --num-heads 2 --run\n"
      "      runs the layer on seeded random input\n"};
  arguments.version(fmt::format("mha-inspect {}", MHA_VERSION));
  Arguments args;
  arguments.option("FILE", args.file, "A .safetensors file, or a folder of .npy files named by state_dict keys")
      .required()
      .existing_path();
  arguments.option(
      "--prefix", args.prefix,
      "Key prefix of one layer, e.g. transformer_encoder.layers.0.self_attn. (any unambiguous start of it)");
  arguments
      .option("--num-heads", args.num_heads, "num_heads of the layer: not recorded in the weights; needed by --run")
      .positive();
  arguments.option("--split", args.split,
                   "Write W_q, W_k, W_v, b_q, b_k, b_v of the layer to this folder (.npy and split.safetensors)");
  arguments.flag("--run", args.run, "Run a forward pass of the layer on seeded random input (needs --num-heads)");
  arguments.option("--length", args.length, "Sequence length L of the random input for --run").show_default();
  arguments.option("--batch", args.batch, "Batch size N of the random input for --run").show_default();
  arguments.option("--seed", args.seed, "Seed of the random input for --run").show_default();
  if (const auto stop = arguments.parse(argc, argv)) return *stop;  // --help, --version, or a bad option
  mha::use_best_blas_kernel();  // OpenBLAS's best kernel for this CPU (README: the BLAS kernel)

  try {
    if (args.run && args.num_heads == 0)
      throw mha::Error(
          "--num-heads: required by --run: num_heads cannot be inferred from the weights "
          "(in_proj_weight is (3E, E) for every num_heads that divides E)");
    return inspect(args);
  } catch (const mha::Error& e) {
    fmt::print(stderr, "mha-inspect: error: {}\n", e.what());
    return 1;
  }
}
