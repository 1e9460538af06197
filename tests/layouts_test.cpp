// tests/layouts_test.cpp — other models' Q/K/V layouts, converted to PyTorch's [Q; K; V] and back.
//
// Each folder of golden/layouts/ holds one real nn.MultiheadAttention's weights under
// PyTorch's names ("self_attn." prefix) and the same weights permuted by
// golden/generate.py into another model's layout with that model's published formula
// (under a checkpoint-style prefix), plus an input and PyTorch's output. A conversion
// passes when (1) it gives back PyTorch's parameters exactly (it only moves numbers),
// (2) the module loaded with them reproduces PyTorch's output, and (3) converting back
// gives the layout's tensors again.
#include "third_party.hpp"  // nlohmann_json too, which support.hpp leaves out
#include "support.hpp"

#include <string>

import mha.io;

using Catch::Matchers::ContainsSubstring;

namespace {

namespace fs = std::filesystem;

const fs::path kLayouts = fs::path(MHA_SOURCE_DIR) / "golden" / "layouts";

using Dict = mha::StateDict<float>;

struct LayoutCase {
  std::string name, prefix;
  std::size_t embed_dim = 0, num_heads = 0, num_kv_heads = 0;
  bool bias = true;
  double rtol = 0, atol = 0;
  Dict layout;   // the layout's tensors, its prefix removed
  Dict pytorch;  // nn.MultiheadAttention's state_dict
  xt::xarray<float> query, attn_output;
};

LayoutCase load_layout(const std::string& name) {
  const fs::path dir = kLayouts / name;
  std::ifstream in(dir / "layout.json");
  const auto j = nlohmann::json::parse(in);
  LayoutCase c;
  c.name = j.at("layout").get<std::string>();
  c.prefix = j.at("prefix").get<std::string>();
  c.embed_dim = j.at("embed_dim").get<std::size_t>();
  c.num_heads = j.at("num_heads").get<std::size_t>();
  c.num_kv_heads = j.value("num_key_value_heads", c.num_heads);
  c.bias = j.at("bias").get<bool>();
  c.rtol = j.at("tolerance").at("rtol").get<double>();
  c.atol = j.at("tolerance").at("atol").get<double>();
  c.layout = mha::load_npy_folder<float>(dir, c.prefix);
  c.pytorch = mha::load_npy_folder<float>(dir, j.at("pytorch_prefix").get<std::string>());
  c.query = mha::load_npy<float>(dir / "query.npy");
  c.attn_output = mha::load_npy<float>(dir / "attn_output.npy");
  return c;
}

// Layout -> PyTorch's names, by the layout's name. Megatron v2 has GPT-NeoX's order.
Dict to_pytorch(const LayoutCase& c, const Dict& layout) {
  if (c.name == "gpt2") return mha::from_gpt2(layout);
  if (c.name == "bert") return mha::from_bert(layout);
  if (c.name == "gpt_neox" || c.name == "megatron_v2") return mha::from_gpt_neox(layout, c.num_heads);
  if (c.name == "megatron_v1") return mha::from_megatron_v1(layout, c.num_heads);
  if (c.name == "llama") return mha::from_llama(layout, c.num_heads, c.num_kv_heads);
  if (c.name == "onnx_attention") return mha::from_onnx_attention(layout);
  FAIL("unknown layout " << c.name);
  return {};
}

Dict from_pytorch(const LayoutCase& c, const Dict& pytorch) {
  if (c.name == "gpt2") return mha::to_gpt2(pytorch);
  if (c.name == "bert") return mha::to_bert(pytorch);
  if (c.name == "gpt_neox" || c.name == "megatron_v2") return mha::to_gpt_neox(pytorch, c.num_heads);
  if (c.name == "megatron_v1") return mha::to_megatron_v1(pytorch, c.num_heads);
  if (c.name == "llama") return mha::to_llama(pytorch, c.num_heads, c.num_kv_heads);
  if (c.name == "onnx_attention") return mha::to_onnx_attention(pytorch);
  FAIL("unknown layout " << c.name);
  return {};
}

// Every tensor of `expected` is in `got` with the same shape and the very same values.
void require_same(const std::string& what, const Dict& got, const Dict& expected) {
  std::vector<std::string> got_keys, expected_keys;
  for (const auto& [k, _] : got) got_keys.push_back(k);
  for (const auto& [k, _] : expected) expected_keys.push_back(k);
  INFO(what);
  REQUIRE(got_keys == expected_keys);
  // A conversion only moves numbers: equality is exact, hence zero tolerance.
  for (const auto& [k, v] : expected) mha_test::require_close(fmt::format("{} {}", what, k), got.at(k), v, 0.0, 0.0);
}

mha::MultiheadAttention<float> module_for(const LayoutCase& c, const Dict& pytorch) {
  mha::Options o;
  o.embed_dim = static_cast<std::int64_t>(c.embed_dim);
  o.num_heads = static_cast<std::int64_t>(c.num_heads);
  o.bias = c.bias;
  mha::MultiheadAttention<float> m(o);
  m.load_state_dict(pytorch);
  m.eval();
  return m;
}

const char* const kAllLayouts[] = {"gpt2", "bert", "gpt_neox", "megatron_v2", "megatron_v1", "llama", "onnx_attention"};

}  // namespace

TEST_CASE("each layout converts to PyTorch's [Q; K; V] exactly and runs to PyTorch's output", "[layouts][pytorch]") {
  for (const char* name : kAllLayouts) {
    const auto c = load_layout(name);
    INFO("layout " << name << " (prefix " << c.prefix << ")");
    const auto pytorch = to_pytorch(c, c.layout);
    require_same(fmt::format("{} -> pytorch", name), pytorch, c.pytorch);
    auto m = module_for(c, pytorch);
    const auto out = m.forward(c.query, c.query, c.query, {.need_weights = false});
    mha_test::require_close(fmt::format("{} attn_output", name), out.attn_output, c.attn_output, c.rtol, c.atol);
  }
}

TEST_CASE("each conversion round-trips: layout -> PyTorch -> layout, and PyTorch -> layout -> PyTorch",
          "[layouts][round-trip]") {
  for (const char* name : kAllLayouts) {
    const auto c = load_layout(name);
    require_same(fmt::format("{} from PyTorch", name), from_pytorch(c, c.pytorch), c.layout);
    require_same(fmt::format("{} round trip", name), from_pytorch(c, to_pytorch(c, c.layout)), c.layout);
    require_same(fmt::format("{} PyTorch round trip", name), to_pytorch(c, from_pytorch(c, c.pytorch)), c.pytorch);
  }
}

TEST_CASE("demonstrates: a per-head interleaved query_key_value read as [Q; K; V] gives the wrong output",
          "[layouts][demonstration]") {
  const auto c = load_layout("gpt_neox");
  // The right formula matches (checked in full above); taking the fused rows as they are does not.
  Dict naive = c.pytorch;
  naive["in_proj_weight"] = c.layout.at("query_key_value.weight");
  naive["in_proj_bias"] = c.layout.at("query_key_value.bias");
  auto wrong = module_for(c, naive);
  CHECK(mha_test::differs(wrong.forward(c.query, c.query, c.query).attn_output, c.attn_output, c.rtol, c.atol));
  auto right = module_for(c, mha::from_gpt_neox(c.layout, c.num_heads));
  CHECK_FALSE(mha_test::differs(right.forward(c.query, c.query, c.query).attn_output, c.attn_output, c.rtol, c.atol));

  // Megatron v1 and v2 differ: v1's weights read with the v2 (GPT-NeoX) order are wrong too.
  const auto v1 = load_layout("megatron_v1");
  auto mixed = module_for(v1, mha::from_gpt_neox(v1.layout, v1.num_heads));
  CHECK(mha_test::differs(mixed.forward(v1.query, v1.query, v1.query).attn_output, v1.attn_output, v1.rtol, v1.atol));

  // GPT-2's Conv1D weight must be transposed: used as a Linear weight it has the wrong shape.
  const auto g = load_layout("gpt2");
  Dict untransposed = g.pytorch;
  untransposed["in_proj_weight"] = g.layout.at("c_attn.weight");  // (E, 3E), not (3E, E)
  CHECK_THROWS_AS(module_for(g, untransposed), mha::Error);
}

TEST_CASE("the head interleavings are the published permutations, on a small example worked by hand", "[layouts]") {
  // E = 4, H = 2, D = 2: PyTorch's rows are q0 q1 q2 q3 k0 k1 k2 k3 v0 v1 v2 v3, numbered
  // 0..11. Head h owns q/k/v rows 2h and 2h+1.
  //   [head][q,k,v][D] (GPT-NeoX): q0 q1 k0 k1 v0 v1 | q2 q3 k2 k3 v2 v3
  //   [head][D][q,k,v] (Megatron v1): q0 k0 v0 q1 k1 v1 | q2 k2 v2 q3 k3 v3
  const xt::xarray<float> rows = xt::arange<float>(12);
  const xt::xarray<float> neox = {0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11};
  const xt::xarray<float> v1 = {0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11};
  const auto same = [](const char* what, const xt::xarray<float>& got, const xt::xarray<float>& expected) {
    mha_test::require_close(what, got, expected, 0.0, 0.0);  // row moves only: exact
  };
  same("interleave head_qkv_dim", mha::interleave_qkv(rows, 2, mha::HeadInterleave::head_qkv_dim), neox);
  same("interleave head_dim_qkv", mha::interleave_qkv(rows, 2, mha::HeadInterleave::head_dim_qkv), v1);
  same("deinterleave head_qkv_dim", mha::deinterleave_qkv(neox, 2, mha::HeadInterleave::head_qkv_dim), rows);
  same("deinterleave head_dim_qkv", mha::deinterleave_qkv(v1, 2, mha::HeadInterleave::head_dim_qkv), rows);
  // Llama, H = 4, Hkv = 2, D = 1: key/value heads a b -> a a b b (repeat_kv).
  const xt::xarray<float> kv = {{1}, {2}};
  const xt::xarray<float> repeated = {{1}, {1}, {2}, {2}};
  same("repeat_kv_heads", mha::repeat_kv_heads(kv, 4, 2, 1), repeated);
}

TEST_CASE("layout errors name the key or argument, the expected and the actual value", "[layouts][errors]") {
  const auto read = [](auto&& f) { return mha_test::error_of(f); };
  const auto gpt2 = load_layout("gpt2");
  Dict missing = gpt2.layout;
  missing.erase("c_proj.bias");
  CHECK_THAT(read([&] { mha::from_gpt2(missing); }), ContainsSubstring("c_proj.bias") && ContainsSubstring("missing"));
  Dict wrong = gpt2.layout;
  wrong["c_attn.bias"] = xt::zeros<float>({35});
  CHECK_THAT(read([&] { mha::from_gpt2(wrong); }),
             ContainsSubstring("c_attn.bias") && ContainsSubstring("(36,)") && ContainsSubstring("(35,)"));

  const auto neox = load_layout("gpt_neox");
  CHECK_THAT(read([&] { mha::from_gpt_neox(neox.layout, 5); }),
             ContainsSubstring("num_heads") && ContainsSubstring("12") && ContainsSubstring("5"));

  const auto llama = load_layout("llama");
  CHECK_THAT(read([&] { mha::from_llama(llama.layout, 4, 3); }),
             ContainsSubstring("num_key_value_heads") && ContainsSubstring("3"));
  CHECK_THAT(read([&] { mha::from_llama(llama.layout, 4, 1); }),
             ContainsSubstring("k_proj.weight") && ContainsSubstring("(4, 16)"));
  // A module whose K heads are not copies within each group is not a grouped-query layer.
  Dict distinct = llama.pytorch;
  distinct["in_proj_weight"](16 + 4, 0) += 1.0f;  // W_k, head 1, first row: now differs from head 0
  CHECK_THAT(read([&] { mha::to_llama(distinct, 4, 2); }),
             ContainsSubstring("W_k") && ContainsSubstring("head 1 differs from head 0"));
  CHECK_THAT(read([&] { mha::to_llama(gpt2.pytorch, 3, 3); }), ContainsSubstring("bias=False"));
  CHECK_THAT(read([&] { mha::to_gpt2(llama.pytorch); }),
             ContainsSubstring("in_proj_bias") && ContainsSubstring("missing"));
}
