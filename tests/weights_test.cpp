// tests/weights_test.cpp — trained weights: safetensors reading and writing, .npy folders, one layer by prefix.
//
// The expected numbers come from golden/weights/, written by golden/generate.py with
// PyTorch: a real nn.TransformerEncoder's state_dict as safetensors (its layer 0
// self-attention output next to it), and one set of values stored as F32, F64, F16 and
// BF16 with PyTorch's own widening of the half types. The corrupt files of the error
// tests are written here, into a temporary folder, one defect each.
#include "third_party.hpp"  // nlohmann_json too, which support.hpp leaves out
#include "support.hpp"

#include <string>

import mha.io;

using Catch::Matchers::ContainsSubstring;

namespace {

namespace fs = std::filesystem;

const fs::path kWeights = fs::path(MHA_SOURCE_DIR) / "golden" / "weights";
const fs::path kDtypes = kWeights / "dtypes" / "dtypes.safetensors";
using mha_test::kAtol;
using mha_test::kEmbed;
using mha_test::kEncoder;
using mha_test::kHeads;
using mha_test::kRtol;

using mha_test::error_of;
using mha_test::TempDir;

// A safetensors file from a header text (given as is) and `data_bytes` zero bytes.
fs::path write_raw(const fs::path& dir, const std::string& name, std::uint64_t header_length, const std::string& header,
                   std::size_t data_bytes) {
  fs::path path = dir / name;
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((header_length >> (8 * i)) & 0xff));
  out << header << std::string(data_bytes, '\0');
  return path;
}

fs::path write_header(const fs::path& dir, const std::string& name, const nlohmann::json& header,
                      std::size_t data_bytes) {
  const std::string text = header.dump();
  return write_raw(dir, name, text.size(), text, data_bytes);
}

nlohmann::json entry(const char* dtype, std::vector<std::size_t> shape, std::size_t begin, std::size_t end) {
  return {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, end}}};
}

}  // namespace

TEST_CASE("the shipped TransformerEncoder file: keys, dtypes, shapes and metadata", "[safetensors]") {
  const auto st = mha::read_safetensors(kEncoder);
  CHECK(st.tensors.size() == 24);  // 2 layers x (4 self_attn + 4 linear + 4 norm)
  CHECK(st.metadata_value("format") == "pt");
  const auto& w = st.tensors.at("layers.0.self_attn.in_proj_weight");
  CHECK(w.dtype == "F32");
  CHECK(w.shape == std::vector<std::size_t>{3 * kEmbed, kEmbed});
  CHECK(w.byte_size() == 3 * kEmbed * kEmbed * 4);
  const auto layers = mha::attention_layer_prefixes([&] {
    std::vector<std::string> names;
    names.reserve(st.tensors.size());
    for (const auto& [name, _] : st.tensors) names.push_back(name);
    return names;
  }());
  CHECK(layers == std::vector<std::string>{"layers.0.self_attn.", "layers.1.self_attn."});
}

TEST_CASE("layer 0 of a real TransformerEncoder, selected by prefix, gives PyTorch's self_attn output",
          "[safetensors][pytorch]") {
  const auto dict = mha::load_safetensors<float>(kEncoder);
  const auto src = mha::load_npy<float>(kEncoder.parent_path() / "src.npy");  // (L, N, E)
  const auto expected = mha::load_npy<float>(kEncoder.parent_path() / "layers.0.self_attn.attn_output.npy");

  auto layer0 = mha::load_attention_layer(dict, "layers.0.self_attn.", kHeads);
  CHECK(layer0.embed_dim() == kEmbed);
  CHECK(layer0.packed());
  CHECK(layer0.options().bias);
  const auto out = layer0.forward(src, src, src, {.need_weights = false});
  mha_test::require_close("layers.0.self_attn attn_output", out.attn_output, expected, kRtol, kAtol);

  SECTION("demonstrates: layer 1's weights do not give layer 0's output") {
    auto layer1 = mha::load_attention_layer(dict, "layers.1.self_attn.", kHeads);
    CHECK(mha_test::differs(layer1.forward(src, src, src).attn_output, expected, kRtol, kAtol));
  }
  SECTION("the layer's own prefix, a shorter one and the whole key all select the same layer") {
    for (const char* prefix : {"layers.0.", "layers.0.self_attn", "layers.0.self_attn."}) {
      auto m = mha::load_attention_layer(dict, prefix, kHeads);
      mha_test::require_close(prefix, m.forward(src, src, src).attn_output, expected, kRtol, kAtol);
    }
  }
}

TEST_CASE("describe_attention_layer reads embed_dim, kdim, vdim, bias and add_bias_kv from the weights",
          "[safetensors]") {
  mha::Options o;
  o.embed_dim = 8, o.num_heads = 2, o.kdim = 5, o.vdim = 3, o.add_bias_kv = true;
  const auto layer = mha::describe_attention_layer(mha::MultiheadAttention<float>(o).state_dict());
  CHECK(layer.embed_dim == 8);
  CHECK(layer.kdim == 5);
  CHECK(layer.vdim == 3);
  CHECK(layer.bias);
  CHECK(layer.add_bias_kv);
  CHECK_FALSE(layer.packed);
  mha::Options no_bias;
  no_bias.embed_dim = 6, no_bias.num_heads = 3, no_bias.bias = false;
  const auto packed = mha::describe_attention_layer(mha::MultiheadAttention<float>(no_bias).state_dict());
  CHECK(packed.packed);
  CHECK_FALSE(packed.bias);
  CHECK(packed.kdim == 6);
}

TEST_CASE("F16 and BF16 widen to float and double exactly as PyTorch widens them", "[safetensors][dtype]") {
  const auto st = mha::read_safetensors(kDtypes);
  const auto dir = kDtypes.parent_path();
  for (const char* source : {"f16", "bf16"}) {
    // Exact: widening a half or bfloat16 is lossless, so PyTorch and this reader agree bit for bit.
    mha_test::require_close(fmt::format("{} as float32", source), mha::tensor<float>(st, source),
                            mha::load_npy<float>(dir / fmt::format("{}_as_float32.npy", source)), 0.0, 0.0);
    mha_test::require_close(fmt::format("{} as float64", source), mha::tensor<double>(st, source),
                            mha::load_npy<double>(dir / fmt::format("{}_as_float64.npy", source)), 0.0, 0.0);
  }
  // F32 and F64 hold the same values (PyTorch's .double() of the F32 tensor).
  const xt::xarray<double> widened = xt::cast<double>(mha::tensor<float>(st, "f32"));
  mha_test::require_close("f64", mha::tensor<double>(st, "f64"), widened, 0.0, 0.0);
}

TEST_CASE("dtype mismatch: F64 is not narrowed to float, nor an integer tensor read as weights",
          "[safetensors][dtype][errors]") {
  const auto st = mha::read_safetensors(kDtypes);
  CHECK(st.tensors.at("position_ids").dtype == "I64");  // read, just not as weights
  const auto f64 = error_of([&] { mha::tensor<float>(st, "f64"); });
  CHECK_THAT(f64, ContainsSubstring("f64") && ContainsSubstring("expected dtype F32") && ContainsSubstring("got F64"));
  const auto i64 = error_of([&] { mha::tensor<double>(st, "position_ids"); });
  CHECK_THAT(i64, ContainsSubstring("position_ids") && ContainsSubstring("got I64"));
  CHECK_THAT(error_of([&] { mha::tensor<float>(st, "nope"); }),
             ContainsSubstring("nope") && ContainsSubstring("no such tensor"));
}

TEST_CASE("the writer round-trips parameters, metadata and every shape", "[safetensors][writer]") {
  TempDir tmp("weights-writer");
  mha::Options o;
  o.embed_dim = 6, o.num_heads = 2, o.kdim = 4, o.vdim = 5, o.add_bias_kv = true;
  const auto dict = mha::MultiheadAttention<double>(o, /*seed=*/7).state_dict();
  const auto path = tmp.path / "layer.safetensors";
  mha::save_safetensors(path, dict, {{"source", "weights_test"}});

  const auto st = mha::read_safetensors(path);
  CHECK(st.metadata_value("source") == "weights_test");
  CHECK(st.tensors.at("bias_k").shape == std::vector<std::size_t>{1, 1, 6});
  CHECK(st.tensors.at("k_proj_weight").dtype == "F64");
  const auto back = mha::load_safetensors<double>(path);
  REQUIRE(back.size() == dict.size());
  for (const auto& [name, value] : dict) mha_test::require_close(name, back.at(name), value, 0.0, 0.0);

  SECTION("and the shipped file, read, written and read again, is unchanged") {
    const auto original = mha::load_safetensors<float>(kEncoder);
    mha::save_safetensors(tmp.path / "copy.safetensors", original);
    const auto copy = mha::load_safetensors<float>(tmp.path / "copy.safetensors");
    REQUIRE(copy.size() == original.size());
    for (const auto& [name, value] : original) mha_test::require_close(name, copy.at(name), value, 0.0, 0.0);
  }
}

TEST_CASE("a folder of .npy files named by state_dict keys loads like a safetensors file", "[npy][folder]") {
  TempDir tmp("weights-npy-folder");
  const auto dict = mha::load_safetensors<float>(kEncoder);
  for (const auto& [name, value] : dict) mha::save_npy<float>(tmp.path / (name + ".npy"), value);
  const auto src = mha::load_npy<float>(kEncoder.parent_path() / "src.npy");
  const auto expected = mha::load_npy<float>(kEncoder.parent_path() / "layers.0.self_attn.attn_output.npy");

  const auto layer = mha::load_npy_folder<float>(tmp.path, "layers.0.self_attn.");
  CHECK(layer.size() == 4);  // in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias
  mha::MultiheadAttention<float> m(mha::options_for(mha::describe_attention_layer(layer), kHeads));
  m.load_state_dict(layer);
  m.eval();
  mha_test::require_close("attn_output", m.forward(src, src, src).attn_output, expected, kRtol, kAtol);
  CHECK_THAT(error_of([&] { mha::load_npy_folder<float>(tmp.path, "encoder."); }),
             ContainsSubstring("encoder.") && ContainsSubstring("no .npy file"));
}

TEST_CASE("selecting a layer: a missing or ambiguous prefix is an error that names it",
          "[safetensors][prefix][errors]") {
  const auto dict = mha::load_safetensors<float>(kEncoder);
  const auto missing = error_of([&] { mha::load_attention_layer(dict, "transformer_encoder.layers.0.", kHeads); });
  CHECK_THAT(missing, ContainsSubstring("prefix") && ContainsSubstring("'transformer_encoder.layers.0.'") &&
                          ContainsSubstring("'layers.0.self_attn.'"));  // and lists what there is
  const auto ambiguous = error_of([&] { mha::load_attention_layer(dict, "layers.", kHeads); });
  CHECK_THAT(ambiguous, ContainsSubstring("'layers.' is ambiguous") && ContainsSubstring("'layers.0.self_attn.'") &&
                            ContainsSubstring("'layers.1.self_attn.'"));
  CHECK_THAT(error_of([&] { mha::load_safetensors<float>(kEncoder, "decoder."); }),
             ContainsSubstring("decoder.") && ContainsSubstring("no tensor"));
}

TEST_CASE("shape mismatch: a layer whose weights PyTorch would not load is rejected by name", "[safetensors][errors]") {
  TempDir tmp("weights-shape");
  auto dict = mha::load_safetensors<float>(kEncoder, "layers.0.self_attn.");
  dict["in_proj_bias"] = xt::zeros<float>({3 * kEmbed - 1});  // (23) instead of (24)
  mha::save_safetensors(tmp.path / "bad.safetensors", dict);
  const auto loaded = mha::load_safetensors<float>(tmp.path / "bad.safetensors");
  const auto message = error_of([&] { mha::load_attention_layer(loaded, "", kHeads); });
  CHECK_THAT(message, ContainsSubstring("in_proj_bias") && ContainsSubstring("(24,)") && ContainsSubstring("(23,)"));

  // num_heads must divide embed_dim: the module says so, naming both.
  CHECK_THAT(error_of([&] { mha::load_attention_layer(dict, "", 3); }), ContainsSubstring("embed_dim"));
}

TEST_CASE("truncated files are errors that name the defect, never an out-of-bounds read", "[safetensors][errors]") {
  TempDir tmp("weights-truncated");
  const auto& dir = tmp.path;
  const auto read = [](const fs::path& p) { return error_of([&] { mha::read_safetensors(p); }); };

  SECTION("a file shorter than the 8-byte header length") {
    std::ofstream(dir / "short.safetensors", std::ios::binary) << "abc";
    CHECK_THAT(read(dir / "short.safetensors"), ContainsSubstring("truncated") && ContainsSubstring("3 bytes"));
  }
  SECTION("a header length beyond the end of the file") {
    const auto p = write_raw(dir, "long.safetensors", 1000, "{}", 0);
    CHECK_THAT(read(p), ContainsSubstring("header length 1000 goes beyond the end of the file"));
  }
  SECTION("a header length of 2^64 - 1 (no overflow in the check)") {
    const auto p = write_raw(dir, "huge.safetensors", ~std::uint64_t{0}, "{}", 0);
    CHECK_THAT(read(p), ContainsSubstring("goes beyond the end of the file"));
  }
  SECTION("the shipped file cut short: the last tensor's data is missing") {
    std::ifstream in(kEncoder, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    bytes.resize(bytes.size() - 10);
    std::ofstream(dir / "cut.safetensors", std::ios::binary) << bytes;
    CHECK_THAT(read(dir / "cut.safetensors"), ContainsSubstring("go beyond the data section"));
  }
  SECTION("a missing file") {
    CHECK_THAT(read(dir / "absent.safetensors"),
               ContainsSubstring("absent.safetensors") && ContainsSubstring("cannot open"));
  }
}

TEST_CASE("corrupt headers are errors that name the tensor and the defect", "[safetensors][errors]") {
  TempDir tmp("weights-corrupt");
  const auto& dir = tmp.path;
  const auto read = [](const fs::path& p) { return error_of([&] { mha::read_safetensors(p); }); };

  SECTION("data_offsets out of range") {
    const auto p = write_header(dir, "range.safetensors", {{"w", entry("F32", {4, 4}, 0, 64)}}, 16);
    CHECK_THAT(read(p), ContainsSubstring("'w'") && ContainsSubstring("[0, 64] go beyond the data section (16 bytes)"));
  }
  SECTION("overlapping tensors") {
    const auto p = write_header(dir, "overlap.safetensors",
                                {{"a", entry("F32", {4}, 0, 16)}, {"b", entry("F32", {4}, 8, 24)}}, 24);
    CHECK_THAT(read(p), ContainsSubstring("'b'") && ContainsSubstring("overlap") && ContainsSubstring("'a'"));
  }
  SECTION("a size that does not match shape and dtype (misaligned)") {
    const auto p = write_header(dir, "size.safetensors", {{"w", entry("F32", {2, 2}, 0, 12)}}, 12);
    CHECK_THAT(read(p),
               ContainsSubstring("'w'") && ContainsSubstring("hold 12 bytes, but shape (2, 2) of F32 needs 16"));
  }
  SECTION("a zero dimension beside huge ones (xtensor's strides would overflow), as the .npy reader rejects it") {
    const auto p =
        write_header(dir, "strides.safetensors", {{"w", entry("F32", {0, 18446744073709, 512154}, 0, 0)}}, 0);
    CHECK_THAT(read(p),
               ContainsSubstring("'w'") && ContainsSubstring("shape (0, 18446744073709, 512154) is too large"));
  }
  SECTION("a gap between tensors, and bytes left over after them") {
    const auto gap =
        write_header(dir, "gap.safetensors", {{"a", entry("F32", {2}, 0, 8)}, {"b", entry("F32", {2}, 12, 20)}}, 20);
    CHECK_THAT(read(gap), ContainsSubstring("'b' begins at byte 12, expected 8"));
    const auto extra = write_header(dir, "extra.safetensors", {{"a", entry("F32", {2}, 0, 8)}}, 12);
    CHECK_THAT(read(extra), ContainsSubstring("cover 8 bytes") && ContainsSubstring("12"));
  }
  SECTION("offsets that end before they begin, or are negative") {
    const auto p = write_header(dir, "backwards.safetensors", {{"w", entry("F32", {0}, 8, 0)}}, 8);
    CHECK_THAT(read(p), ContainsSubstring("'w'") && ContainsSubstring("end before they begin"));
    nlohmann::json negative = {{"w", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {-4, 0}}}}};
    CHECK_THAT(read(write_header(dir, "negative.safetensors", negative, 4)),
               ContainsSubstring("data_offsets") && ContainsSubstring("non-negative integer, got -4"));
  }
}

TEST_CASE("a header that is not the JSON of safetensors is an error that says what is wrong", "[safetensors][errors]") {
  TempDir tmp("weights-json");
  const auto& dir = tmp.path;
  const auto read = [](const fs::path& p) { return error_of([&] { mha::read_safetensors(p); }); };

  SECTION("an unknown dtype, and a header that is not JSON") {
    const auto p = write_header(dir, "dtype.safetensors", {{"w", entry("F8", {2}, 0, 2)}}, 2);
    CHECK_THAT(read(p), ContainsSubstring("'w'") && ContainsSubstring("unknown dtype 'F8'"));
    CHECK_THAT(read(write_raw(dir, "json.safetensors", 5, "{\"a\":", 0)), ContainsSubstring("not valid JSON"));
    CHECK_THAT(read(write_raw(dir, "array.safetensors", 2, "[]", 0)), ContainsSubstring("not a JSON object"));
  }
  SECTION("an entry without data_offsets, and __metadata__ that is not strings") {
    nlohmann::json no_offsets = {{"w", {{"dtype", "F32"}, {"shape", {1}}}}};
    CHECK_THAT(read(write_header(dir, "entry.safetensors", no_offsets, 4)),
               ContainsSubstring("'w'") && ContainsSubstring("no 'data_offsets'"));
    nlohmann::json metadata = {{"__metadata__", {{"epoch", 3}}}};
    CHECK_THAT(read(write_header(dir, "meta.safetensors", metadata, 0)),
               ContainsSubstring("__metadata__ 'epoch' must be a string"));
  }
}

TEST_CASE("a tensor put together by hand must hold the bytes its shape needs", "[safetensors][errors]") {
  const mha::SafetensorsTensor bad{"F32", {2, 2}, std::vector<char>(12)};
  CHECK_THAT(error_of([&] { mha::to_xarray<float>(bad, "bad"); }),
             ContainsSubstring("bad") && ContainsSubstring("holds 12 bytes, but shape (2, 2) of F32 needs 16"));
}

TEST_CASE("an empty safetensors file (no tensors) is valid, as in the reference implementation", "[safetensors]") {
  TempDir tmp("weights-empty");
  const auto p = write_raw(tmp.path, "empty.safetensors", 2, "{}", 0);
  CHECK(mha::read_safetensors(p).tensors.empty());
}
