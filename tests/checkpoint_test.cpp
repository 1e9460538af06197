// tests/checkpoint_test.cpp — checkpoints read by offset: headers first, each tensor from its offset when asked for.
//
// The expected layers and outputs come from golden/: the shipped nn.TransformerEncoder
// (golden/weights/transformer_encoder: d_model 8, nhead 2, 2 layers, model.json) and a
// golden case folder whose case.json gives the module's options, both written by
// golden/generate.py with PyTorch. The other files are written here, into a temporary
// folder, with values given in the test.
//
// Legend: E = embed_dim.
#include "third_party.hpp"  // nlohmann_json too, which support.hpp leaves out
#include "support.hpp"

#include <string>

import mha.io;

using Catch::Matchers::ContainsSubstring;

namespace {

namespace fs = std::filesystem;

// Separate projections (kdim 5, vdim 6), add_bias_kv, float64, and bool masks beside the weights.
const std::string kSeparateCase = "add_bias_kv_add_zero_attn_kdim_vdim_unbatched_f64";
using mha_test::kAtol;
using mha_test::kEmbed;
using mha_test::kEncoder;
using mha_test::kHeads;
using mha_test::kRtol;

using mha_test::error_of;
using mha_test::TempDir;

// The little-endian bytes of integers, as a safetensors file holds them.
template <class Int>
std::vector<char> little_endian(std::initializer_list<Int> values) {
  std::vector<char> bytes;
  for (Int v : values)
    for (std::size_t i = 0; i < sizeof(Int); ++i)
      bytes.push_back(static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff));
  return bytes;
}

// Every tensor of the shipped TransformerEncoder, as the raw tensors of a file.
std::map<std::string, mha::SafetensorsTensor> encoder_tensors() {
  const auto st = mha::read_safetensors(kEncoder);
  std::map<std::string, mha::SafetensorsTensor> tensors;
  for (const auto& [name, _] : st.tensors) tensors.emplace(name, mha::read_tensor(st, name));
  return tensors;
}

}  // namespace

TEST_CASE("a .safetensors checkpoint opened by its header: every tensor's dtype and shape, and its layers",
          "[checkpoint]") {
  const auto checkpoint = mha::open_checkpoint(kEncoder);
  REQUIRE(checkpoint.safetensors.has_value());
  CHECK(checkpoint.tensors.size() == 24);  // 2 layers x (4 self_attn + 4 linear + 4 norm)
  const auto& w = checkpoint.tensors.at("layers.0.self_attn.in_proj_weight");
  CHECK(w.dtype == "float32");
  CHECK(w.shape == std::vector<std::size_t>{3 * kEmbed, kEmbed});

  const auto layers = mha::attention_layers(checkpoint);
  REQUIRE(layers.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(layers[i].prefix == fmt::format("layers.{}.self_attn.", i));
    CHECK(layers[i].embed_dim == kEmbed);
    CHECK(layers[i].kdim == kEmbed);
    CHECK(layers[i].vdim == kEmbed);
    CHECK(layers[i].bias);
    CHECK_FALSE(layers[i].add_bias_kv);
    CHECK(layers[i].packed);
    CHECK(layers[i].dtype == "float32");
  }
  CHECK(mha::attention_layers(checkpoint, "layers.1.").size() == 1);
  CHECK_THAT(error_of([&] { mha::attention_layers(checkpoint, "encoder."); }),
             ContainsSubstring("'encoder.'") && ContainsSubstring("'layers.0.self_attn.', 'layers.1.self_attn.'"));
}

TEST_CASE("a folder of .npy files is a checkpoint too: a separate-projection layer among masks and inputs",
          "[checkpoint][folder]") {
  const auto options = mha::read_case_info(mha_test::golden_cases() / kSeparateCase).options;
  const auto checkpoint = mha::open_checkpoint(mha_test::golden_cases() / kSeparateCase);
  CHECK_FALSE(checkpoint.safetensors.has_value());
  CHECK(checkpoint.tensors.at("attn_mask").dtype == "bool");
  const auto layer = mha::describe_attention_layer(checkpoint, "");
  CHECK(layer.prefix.empty());
  CHECK(layer.embed_dim == options.embed_dim);
  CHECK(layer.kdim == options.kdim);
  CHECK(layer.vdim == options.vdim);
  CHECK(layer.bias == options.bias);
  CHECK(layer.add_bias_kv == options.add_bias_kv);
  CHECK_FALSE(layer.packed);
  CHECK(layer.dtype == "float64");
  // Only the layer's own tensors are read: not the case's inputs, outputs and masks.
  const auto parameters = mha::attention_layer_parameters<double>(checkpoint, "");
  CHECK(parameters.size() == 8);  // q/k/v_proj_weight, in_proj_bias, bias_k, bias_v, out_proj.weight, out_proj.bias
  CHECK_FALSE(parameters.contains("attn_mask"));
}

TEST_CASE("one layer loaded from a checkpoint, its tensors read by offset, gives PyTorch's output",
          "[checkpoint][pytorch]") {
  const auto checkpoint = mha::open_checkpoint(kEncoder);
  const auto src = mha::load_npy<float>(kEncoder.parent_path() / "src.npy");  // (L, N, E)
  const auto expected = mha::load_npy<float>(kEncoder.parent_path() / "layers.0.self_attn.attn_output.npy");
  auto layer0 = mha::load_attention_layer<float>(checkpoint, "layers.0.", kHeads);
  mha_test::require_close("layers.0.self_attn attn_output", layer0.forward(src, src, src).attn_output, expected, kRtol,
                          kAtol);
  SECTION("demonstrates: layer 1's weights, read from their own offsets, do not give layer 0's output") {
    auto layer1 = mha::load_attention_layer<float>(checkpoint, "layers.1.", kHeads);
    CHECK(mha_test::differs(layer1.forward(src, src, src).attn_output, expected, kRtol, kAtol));
  }
}

TEST_CASE("split_attention_layer: W_q, W_k, W_v are the first, second and third E rows, and say so",
          "[checkpoint][split]") {
  const auto layer = mha::load_safetensors<float>(kEncoder, "layers.0.self_attn.");
  const auto parts = mha::split_attention_layer(layer, "layers.0.self_attn.");
  REQUIRE(parts.size() == 6);
  const xt::xarray<float>& w = layer.at("in_proj_weight");  // (3E, E)
  const xt::xarray<float>& b = layer.at("in_proj_bias");    // (3E)
  const char* names[] = {"W_q", "b_q", "W_k", "b_k", "W_v", "b_v"};
  for (std::size_t i = 0; i < 3; ++i) {
    const auto& weight = parts[2 * i];
    const auto& bias = parts[2 * i + 1];
    CHECK(weight.name == names[2 * i]);
    CHECK(bias.name == names[2 * i + 1]);
    CHECK(mha_test::same(weight.value, xt::view(w, xt::range(i * kEmbed, (i + 1) * kEmbed), xt::all())));
    CHECK(mha_test::same(bias.value, xt::view(b, xt::range(i * kEmbed, (i + 1) * kEmbed))));
    CHECK(weight.source ==
          fmt::format("layers.0.self_attn.in_proj_weight rows [{}, {})", i * kEmbed, (i + 1) * kEmbed));
    CHECK(bias.source == fmt::format("layers.0.self_attn.in_proj_bias [{}, {})", i * kEmbed, (i + 1) * kEmbed));
  }
  // demonstrates: W_k is not the first block of rows
  CHECK_FALSE(mha_test::same(parts[2].value, xt::view(w, xt::range(0, kEmbed), xt::all())));

  SECTION("separate projections are whole weights; their biases are still thirds of in_proj_bias") {
    const auto checkpoint = mha::open_checkpoint(mha_test::golden_cases() / kSeparateCase);
    const auto separate = mha::attention_layer_parameters<double>(checkpoint, "");
    const auto split = mha::split_attention_layer(separate);
    REQUIRE(split.size() == 6);
    CHECK(mha_test::same(split[2].value, separate.at("k_proj_weight")));  // W_k (E, kdim)
    CHECK(split[2].source == "k_proj_weight (all rows)");
    CHECK(mha_test::same(split[3].value, xt::view(separate.at("in_proj_bias"), xt::range(kEmbed, 2 * kEmbed))));
  }
}

TEST_CASE("integer and bool tensors: the floating tensors load as weights, the others are left out and kept",
          "[checkpoint][dtype]") {
  TempDir tmp("checkpoint-integers");
  auto tensors = encoder_tensors();
  const auto position_ids = little_endian<std::int64_t>({0, 1, 2, 3, 4, 5, 6, 7});
  tensors.emplace("position_ids", mha::SafetensorsTensor{"I64", {1, 8}, position_ids});
  tensors.emplace("src_key_padding_mask", mha::SafetensorsTensor{"BOOL", {1, 4}, {0, 0, 1, 1}});
  const auto path = tmp.path / "model.safetensors";
  mha::save_safetensors(path, tensors);

  const auto dict = mha::load_safetensors<float>(path);
  const auto original = mha::load_safetensors<float>(kEncoder);
  REQUIRE(dict.size() == original.size());  // the 24 float tensors, not position_ids or the mask
  for (const auto& [name, value] : original) mha_test::require_close(name, dict.at(name), value, 0.0, 0.0);

  const auto st = mha::read_safetensors(path);
  const auto ids = mha::read_tensor(st, "position_ids");
  CHECK(ids.dtype == "I64");
  CHECK(ids.shape == std::vector<std::size_t>{1, 8});
  CHECK(ids.bytes == position_ids);
  CHECK(mha::read_tensor(st, "src_key_padding_mask").bytes == std::vector<char>{0, 0, 1, 1});
  CHECK(mha::open_checkpoint(path).tensors.at("position_ids").dtype == "int64");
  CHECK(mha::attention_layers(mha::open_checkpoint(path)).size() == 2);

  // Asked for by name, an integer tensor is still not a weight.
  CHECK_THAT(error_of([&] { mha::load_safetensors<float>(path, "position_ids"); }),
             ContainsSubstring("'position_ids' int64") && ContainsSubstring("holds integers or bools"));
  CHECK_THAT(error_of([&] { mha::tensor<float>(st, "position_ids"); }), ContainsSubstring("got I64"));

  SECTION("and in a folder of .npy files, the bool masks beside a case's weights") {
    const auto folder = mha::load_npy_folder<double>(mha_test::golden_cases() / kSeparateCase);
    CHECK(folder.contains("k_proj_weight"));
    CHECK_FALSE(folder.contains("attn_mask"));         // |b1
    CHECK_FALSE(folder.contains("key_padding_mask"));  // |b1
  }
}

TEST_CASE("a tensor is read from its offset when asked for, not when the file is opened", "[checkpoint][offsets]") {
  TempDir tmp("checkpoint-offsets");
  const auto path = tmp.path / "two.safetensors";
  mha::save_safetensors<float>(path, {{"a", xt::xarray<float>{1, 2, 3}}, {"b", xt::xarray<float>{4, 5}}});
  const auto st = mha::read_safetensors(path);
  const auto& b = st.tensors.at("b");
  CHECK(b.begin == 12);  // after a's 3 floats
  CHECK(b.end == 20);

  // b's bytes rewritten in place after the header was read: the read sees the new ones.
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    const float replaced[] = {40, 50};
    file.seekp(static_cast<std::streamoff>(st.data_start + b.begin));
    file.write(reinterpret_cast<const char*>(replaced), sizeof replaced);
  }
  CHECK(mha_test::same(mha::tensor<float>(st, "b"), xt::xarray<float>{40, 50}));
  CHECK(mha_test::same(mha::tensor<float>(st, "a"), xt::xarray<float>{1, 2, 3}));

  SECTION("a file cut short after its header was read is an error naming the file and the tensor") {
    fs::resize_file(path, fs::file_size(path) - 4);
    CHECK_THAT(error_of([&] { mha::tensor<float>(st, "b"); }),
               ContainsSubstring("two.safetensors") && ContainsSubstring("'b'") && ContainsSubstring("has changed"));
  }
}

TEST_CASE("listing reads no tensor data: a 64 GiB checkpoint that is all holes lists in an instant",
          "[checkpoint][offsets]") {
  // One layer of E = 65536: in_proj_weight (3E, E) and out_proj.weight (E, E) in float32
  // are 48 GiB and 16 GiB. The file is sparse: its header, then a hole. A reader that
  // read the data would need 64 GiB of memory.
  constexpr std::size_t E = 65536;
  TempDir tmp("checkpoint-sparse");
  const auto path = tmp.path / "huge.safetensors";
  nlohmann::json header;
  std::size_t offset = 0;
  const auto add = [&](const std::string& name, std::vector<std::size_t> shape) {
    std::size_t bytes = 4;
    for (auto d : shape) bytes *= d;
    header[name] = {{"dtype", "F32"}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  };
  add("encoder.self_attn.in_proj_bias", {3 * E});
  add("encoder.self_attn.in_proj_weight", {3 * E, E});
  add("encoder.self_attn.out_proj.bias", {E});
  add("encoder.self_attn.out_proj.weight", {E, E});
  const std::string text = header.dump();
  {
    std::ofstream out(path, std::ios::binary);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((text.size() >> (8 * i)) & 0xff));
    out << text;
  }
  fs::resize_file(path, 8 + text.size() + offset);  // the data: a hole, read as zeros

  const auto layers = mha::attention_layers(mha::open_checkpoint(path));
  REQUIRE(layers.size() == 1);
  CHECK(layers[0].prefix == "encoder.self_attn.");
  CHECK(layers[0].embed_dim == E);
  CHECK(layers[0].packed);
  CHECK(layers[0].bias);
  // One small tensor, read from its offset past the first 48 GiB: the hole's zeros.
  const auto bias = mha::tensor<float>(mha::open_checkpoint(path), "encoder.self_attn.out_proj.bias");
  CHECK(bias.size() == E);
  CHECK(xt::all(xt::equal(bias, 0.0f)));
}
