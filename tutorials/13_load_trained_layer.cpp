// tutorials/13_load_trained_layer.cpp — Tutorial 13: load a trained layer and split it.
//
// The situation: a trained model saved with its state_dict, and the question "for
// model.transformer_encoder.layers[0].self_attn.in_proj_weight, which rows are Q?".
// The shipped example golden/weights/transformer_encoder/model.safetensors is the
// state_dict of a real torch.nn.TransformerEncoder (2 layers, d_model 8, nhead 2),
// written by golden/generate.py together with the input src.npy and what PyTorch's
// layers[0].self_attn returned for it. This program
//   1. opens the file and finds its attention layers by PyTorch's key names;
//   2. selects one layer by its key prefix, "layers.0.self_attn.";
//   3. splits in_proj_weight into W_q, W_k, W_v (rows [0, E), [E, 2E), [2E, 3E));
//   4. builds the module (num_heads comes from the model's definition: the weights
//      cannot tell it) and runs it on src;
//   5. checks the output against PyTorch's, and that layer 1's weights do not give it;
//   6. writes the split weights as .npy and safetensors, and reads them back.
// The same steps from the command line: mha-inspect FILE [--prefix P] [--split DIR]
// [--num-heads H --run].
//
// Legend: L = sequence length, N = batch, E = embed_dim (d_model), H = heads.
#include "arguments.hpp"

#include "third_party.hpp"  // nlohmann/json among them, configured as the library has it

#include <unistd.h>  // getpid

#include "tutorial.hpp"

import mha.io;

int main(int argc, char** argv) try {
  cli::Arguments arguments{"Tutorial 13: load a trained layer and split it"};
  std::string folder = "golden/weights/transformer_encoder";
  std::string prefix = "layers.0.self_attn.";
  arguments.option("--folder", folder, "folder with model.safetensors, model.json, src.npy and PyTorch's output");
  arguments.option("--prefix", prefix, "key prefix of the layer to load");
  if (const auto stop = arguments.parse(argc, argv)) return *stop;  // --help, or a bad option
  mha::use_best_blas_kernel();  // OpenBLAS's best kernel for this CPU (README: the BLAS kernel)

  tutorial::title("13", "load a trained layer and split it",
                  "Demonstrates: layers.0.self_attn.* of a saved nn.TransformerEncoder, loaded from\n"
                  "              safetensors and split into W_q, W_k, W_v, gives PyTorch's output.");
  const std::filesystem::path dir = tutorial::project_path(folder), file = dir / "model.safetensors";
  std::ifstream json_file(dir / "model.json");
  const auto model = nlohmann::json::parse(json_file);
  const auto H = model.at("nhead").get<std::int64_t>();
  fmt::print("Model: {} (d_model={}, nhead={}, num_layers={})\n", model.at("model").get<std::string>(),
             model.at("d_model").get<int>(), H, model.at("num_layers").get<int>());

  tutorial::step(1, "open the file: its tensors, and the attention layers among them");
  const auto st = mha::read_safetensors(file);
  fmt::print("  {}: {} tensors, e.g.\n", file.string(), st.tensors.size());
  for (const auto& [name, t] : st.tensors)
    if (name.starts_with("layers.0.")) fmt::print("    {:<34} {} {}\n", name, t.dtype, mha::shape_string(t.shape));
  std::vector<std::string> names;
  names.reserve(st.tensors.size());
  for (const auto& [name, t] : st.tensors) names.push_back(name);
  for (const auto& p : mha::attention_layer_prefixes(names)) fmt::print("  attention layer: {}\n", p);

  tutorial::step(2, fmt::format("select one layer by its prefix, \"{}\"", prefix));
  const auto dict = mha::load_safetensors<float>(file);
  const auto layer = mha::attention_layer_parameters(dict, prefix);  // the prefix removed
  for (const auto& [name, value] : layer) tutorial::shape(name, value);
  const auto info = mha::describe_attention_layer(layer, prefix);
  fmt::print("  from the weights: embed_dim={} kdim={} vdim={} bias={} add_bias_kv={}\n", info.embed_dim, info.kdim,
             info.vdim, info.bias, info.add_bias_kv);
  fmt::print("  not in the weights: num_heads ({} from the model's definition)\n", H);

  tutorial::step(3, "split in_proj_weight (3E, E) into W_q, W_k, W_v");
  const std::size_t E = static_cast<std::size_t>(info.embed_dim);
  const xt::xtensor<float, 2> in_proj_weight = layer.at("in_proj_weight");                                    // (3E, E)
  const std::optional<xt::xtensor<float, 1>> in_proj_bias = xt::xtensor<float, 1>(layer.at("in_proj_bias"));  // (3E)
  const auto split = mha::textbook::split_packed(in_proj_weight, in_proj_bias);
  fmt::print("  W_q = in_proj_weight rows [0, {}), W_k = rows [{}, {}), W_v = rows [{}, {})\n", E, E, 2 * E, 2 * E,
             3 * E);
  tutorial::shape("W_q (E, E)", split.w_q);
  tutorial::shape("W_k (E, E)", split.w_k);
  tutorial::shape("W_v (E, E)", split.w_v);
  const auto &b_q = tutorial::value_of(split.b_q, "b_q"), &b_k = tutorial::value_of(split.b_k, "b_k"),
             &b_v = tutorial::value_of(split.b_v, "b_v");  // (E) each
  tutorial::shape("b_q, b_k, b_v (E)", b_q);
  tutorial::values("W_q", split.w_q, 3);

  mha::Case<float> pytorch;  // only its tolerance is used: model.json's, PyTorch's float32 defaults
  pytorch.info.rtol = model.at("tolerance").at("rtol").get<double>();
  pytorch.info.atol = model.at("tolerance").at("atol").get<double>();
  tutorial::Verdict verdict(pytorch);
  verdict.equal("W_k == in_proj_weight[E:2E]", split.w_k, xt::view(in_proj_weight, xt::range(E, 2 * E), xt::all()));

  tutorial::step(4, "build the module and run it on src");
  auto mha_layer = mha::load_attention_layer(dict, prefix, H);  // strict load_state_dict, eval mode
  mha_layer.set_attention_path(mha::AttentionPath::reference);  // the readable forward, as every tutorial
  const auto src = mha::load_npy<float>(dir / "src.npy");       // (L, N, E)
  const auto expected = mha::load_npy<float>(dir / "layers.0.self_attn.attn_output.npy");
  const auto out = mha_layer.forward(src, src, src, {.need_weights = false});
  tutorial::shape("src (L, N, E)", src);
  tutorial::shape("attn_output (L, N, E)", out.attn_output);
  tutorial::values("attn_output[:, 0, :] (ours)", xt::view(out.attn_output, xt::all(), 0, xt::all()), 2);
  tutorial::values("attn_output[:, 0, :] (PyTorch)", xt::view(expected, xt::all(), 0, xt::all()), 2);

  tutorial::step(5, "check against PyTorch");
  verdict.matches("layers.0.self_attn(src) vs PyTorch", out.attn_output, expected);
  auto other = mha::load_attention_layer(dict, "layers.1.self_attn.", H);
  verdict.differs("layers.1.self_attn(src) vs layer 0's", other.forward(src, src, src).attn_output, expected);

  tutorial::step(6, "write the split weights, and read them back");
  const auto out_dir = std::filesystem::temp_directory_path() / fmt::format("mha-tutorial-13-{}", ::getpid());
  std::filesystem::create_directories(out_dir);
  const mha::StateDict<float> parts{{"W_q", split.w_q}, {"W_k", split.w_k}, {"W_v", split.w_v},
                                    {"b_q", b_q},       {"b_k", b_k},       {"b_v", b_v}};
  for (const auto& [name, value] : parts) mha::save_npy<float>(out_dir / (name + ".npy"), value);
  mha::save_safetensors(out_dir / "split.safetensors", parts, {{"source", prefix}});
  fmt::print("  wrote W_q.npy .. b_v.npy and split.safetensors to the temporary folder\n");
  verdict.equal("W_v.npy read back", mha::load_npy<float>(out_dir / "W_v.npy"), split.w_v);
  verdict.equal("split.safetensors W_q read back",
                mha::tensor<float>(mha::read_safetensors(out_dir / "split.safetensors"), "W_q"), split.w_q);
  std::filesystem::remove_all(out_dir);
  return verdict.finish();
} catch (const std::exception& e) {  // a file it cannot read, or a layer it cannot load
  fmt::print("error: {}\n", e.what());
  return 2;
}
