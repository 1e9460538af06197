// Bad input is rejected with mha::Error, whose message names the offending argument.
//
// Every check of PyTorch's _mha_shape_check and multi_head_attention_forward, plus the
// ones PyTorch leaves to a failing view() or bmm(): each test asserts the exception
// type and that the message names the argument (and, where it helps, the shapes).
#include "support.hpp"

#include <fstream>
#include <string>

import mha.io;

using Catch::Matchers::Contains;

namespace {

constexpr std::size_t E = 8, H = 2, L = 3, S = 4, N = 2;

mha::Options options() {
  mha::Options o;
  o.embed_dim = static_cast<std::int64_t>(E);
  o.num_heads = static_cast<std::int64_t>(H);
  return o;
}

xt::xarray<float> zeros(const std::vector<std::size_t>& shape) { return xt::zeros<float>(shape); }

// forward() on inputs of the given shapes must throw mha::Error mentioning `argument`.
void require_rejected(mha::MultiheadAttention<float>& m, const xt::xarray<float>& q, const xt::xarray<float>& k,
                      const xt::xarray<float>& v, const mha::ForwardOptions<float>& opts, const std::string& argument,
                      const std::string& detail = "") {
  CHECK_MHA_ERROR(m.forward(q, k, v, opts), Contains(argument + ":") && Contains(detail));
}

}  // namespace

TEST_CASE("construction rejects impossible options", "[errors][options]") {
  auto with = [](auto change) {
    auto o = options();
    change(o);
    return o;
  };
  using M = mha::MultiheadAttention<float>;
  CHECK_MHA_ERROR(M(with([](auto& o) { o.embed_dim = 0; })), Contains("embed_dim") && Contains("embed_dim=0"));
  CHECK_MHA_ERROR(M(with([](auto& o) { o.num_heads = 0; })), Contains("num_heads=0"));
  CHECK_MHA_ERROR(M(with([](auto& o) { o.num_heads = -2; })), Contains("num_heads=-2"));
  CHECK_MHA_ERROR(M(with([](auto& o) { o.num_heads = 3; })),
                  Contains("embed_dim:") && Contains("divisible") && Contains("num_heads=3"));
  CHECK_MHA_ERROR(M(with([](auto& o) { o.kdim = 0; })), Contains("kdim:"));
  CHECK_MHA_ERROR(M(with([](auto& o) { o.vdim = -1; })), Contains("vdim:") && Contains("-1"));
  CHECK_MHA_ERROR(M(with([](auto& o) { o.dropout = 1.5; })), Contains("dropout:") && Contains("1.5"));
  CHECK_MHA_ERROR(M(with([](auto& o) { o.dropout = -0.1; })), Contains("dropout:"));
}

TEST_CASE("forward rejects inputs of the wrong rank or size", "[errors][forward]") {
  mha::MultiheadAttention<float> m(options());
  const auto q = zeros({L, N, E}), kv = zeros({S, N, E});
  const mha::ForwardOptions<float> none;
  require_rejected(m, zeros({L, N, E, 1}), kv, kv, none, "query", "4-D");
  require_rejected(m, zeros({L}), zeros({S}), zeros({S}), none, "query", "1-D");
  require_rejected(m, q, zeros({S, E}), zeros({S, E}), none, "key, value", "3-D");
  require_rejected(m, zeros({L, E}), kv, kv, none, "key, value", "2-D");
  require_rejected(m, zeros({L, N, E + 1}), kv, kv, none, "query", "was expecting embedding dimension of 8, but got 9");
  require_rejected(m, q, zeros({S, N + 1, E}), zeros({S, N + 1, E}), none, "key", "batch size 2");
  require_rejected(m, q, kv, zeros({S + 1, N, E}), none, "value", "(4, 2)");
  require_rejected(m, q, zeros({S, N, E + 1}), zeros({S, N, E + 1}), none, "key", "kdim = 8");
  require_rejected(m, q, kv, zeros({S, N, E + 2}), none, "value", "vdim = 8");
}

TEST_CASE("forward rejects masks of the wrong rank or shape", "[errors][masks]") {
  mha::MultiheadAttention<float> m(options());
  const auto q = zeros({L, N, E}), kv = zeros({S, N, E});
  auto with_attn_mask = [](xt::xarray<bool> mask) {
    mha::ForwardOptions<float> o;
    o.attn_mask = mask;
    return o;
  };
  auto with_kpm = [](xt::xarray<float> mask) {
    mha::ForwardOptions<float> o;
    o.key_padding_mask = mask;
    return o;
  };
  require_rejected(m, q, kv, kv, with_attn_mask(xt::zeros<bool>({L, S + 1})), "attn_mask",
                   "The shape of the 2D attn_mask is (3, 5), but should be (3, 4).");
  require_rejected(m, q, kv, kv, with_attn_mask(xt::zeros<bool>({N, L, S})), "attn_mask",
                   "The shape of the 3D attn_mask is (2, 3, 4), but should be (4, 3, 4).");
  require_rejected(m, q, kv, kv, with_attn_mask(xt::zeros<bool>({std::size_t{1}, N * H, L, S})), "attn_mask", "4-D");
  require_rejected(m, q, kv, kv, with_attn_mask(xt::zeros<bool>({S})), "attn_mask", "1-D");
  require_rejected(m, q, kv, kv, with_kpm(zeros({N, S + 1})), "key_padding_mask", "(2, 4), but got (2, 5)");
  require_rejected(m, q, kv, kv, with_kpm(zeros({S})), "key_padding_mask", "2-D");
  // Unbatched: attn_mask (H, L, S), key_padding_mask (S).
  require_rejected(m, zeros({L, E}), zeros({S, E}), zeros({S, E}), with_attn_mask(xt::zeros<bool>({H + 1, L, S})),
                   "attn_mask", "Expected `attn_mask` shape to be (2, 3, 4)");
  require_rejected(m, zeros({L, E}), zeros({S, E}), zeros({S, E}), with_kpm(zeros({N, S})), "key_padding_mask", "1-D");
}

TEST_CASE("is_causal is a hint that needs attn_mask", "[errors][masks]") {
  mha::MultiheadAttention<float> m(options());
  mha::ForwardOptions<float> o;
  o.is_causal = true;
  const auto x = zeros({L, N, E});
  require_rejected(m, x, x, x, o, "is_causal", "Need attn_mask");
}

TEST_CASE("parameters are checked by name and shape", "[errors][state_dict]") {
  mha::MultiheadAttention<float> m(options());
  CHECK_MHA_ERROR(m.set_parameter("in_proj_weight", zeros({3 * E, E + 1})),
                  Contains("in_proj_weight:") && Contains("expected shape (24, 8), got (24, 9)"));
  CHECK_MHA_ERROR(m.set_parameter("in_proj_bias", zeros({E})), Contains("in_proj_bias:") && Contains("(24,)"));
  CHECK_MHA_ERROR(m.set_parameter("q_proj_weight", zeros({E, E})),
                  Contains("q_proj_weight:") && Contains("no such parameter"));
  CHECK_MHA_ERROR(m.parameter("bias_k"), Contains("bias_k:"));

  auto dict = m.state_dict();
  dict.erase("out_proj.bias");
  CHECK_MHA_ERROR(m.load_state_dict(dict), Contains("state_dict:") && Contains("missing key 'out_proj.bias'"));
  dict = m.state_dict();
  dict.emplace("in_proj.weight", zeros({3 * E, E}));
  CHECK_MHA_ERROR(m.load_state_dict(dict), Contains("state_dict:") && Contains("unexpected key 'in_proj.weight'"));

  // add_bias_kv: bias_k and bias_v are required parameters.
  auto o = options();
  o.add_bias_kv = true;
  mha::MultiheadAttention<float> with_bias_kv(o);
  dict = m.state_dict();  // from a module without bias_k/bias_v
  CHECK_MHA_ERROR(with_bias_kv.load_state_dict(dict), Contains("missing key 'bias_k'"));
  CHECK_MHA_ERROR(with_bias_kv.set_parameter("bias_v", zeros({E})), Contains("bias_v:") && Contains("(1, 1, 8)"));
}

TEST_CASE("the building blocks check their shapes", "[errors][in_projection]") {
  const xt::xtensor<float, 3> x = xt::zeros<float>({L, N, E});
  const xt::xtensor<float, 2> w_bad = xt::zeros<float>({3 * E, E + 1});
  CHECK_MHA_ERROR(mha::split_packed(w_bad, std::optional<xt::xtensor<float, 1>>{}),
                  Contains("in_proj_weight:") && Contains("(27, 9)"));
  CHECK_MHA_ERROR(mha::in_projection_packed(x, x, x, xt::xtensor<float, 2>(xt::zeros<float>({2 * E, E})),
                                            std::optional<xt::xtensor<float, 1>>{}),
                  Contains("in_proj_weight:") && Contains("(24, 8)"));
  const xt::xtensor<float, 2> w = xt::zeros<float>({E, E});
  CHECK_MHA_ERROR(mha::linear(xt::xtensor<float, 3>(xt::zeros<float>({L, N, E + 1})), w), Contains("input:"));
  mha::SeparateProjections<float> p{w, w, xt::zeros<float>({E, E + 3}), {}, {}, {}};
  CHECK_MHA_ERROR(mha::in_projection(x, x, x, p), Contains("v_proj_weight:") && Contains("(8, 11)"));
}

TEST_CASE("the npy reader rejects malformed files", "[errors][npy]") {
  const auto dir = std::filesystem::temp_directory_path() / "mha-errors-test";
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return dir / name;
  };
  const auto good = dir / "good.npy";
  mha::save_npy<float>(good, xt::xarray<float>{{1, 2, 3}, {4, 5, 6}});
  std::ifstream in(good, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(mha_test::same(mha::load_npy<float>(good), xt::xarray<float>{{1, 2, 3}, {4, 5, 6}}));

  CHECK_MHA_ERROR(mha::read_npy(dir / "missing.npy"), Contains("missing.npy") && Contains("cannot open"));
  CHECK_MHA_ERROR(mha::read_npy(write("magic.npy", "NUMPY" + bytes)), Contains("bad magic"));
  CHECK_MHA_ERROR(mha::read_npy(write("short.npy", bytes.substr(0, bytes.size() - 4))),
                  Contains("short.npy") && Contains("expected 24 data bytes") && Contains("got 20"));
  CHECK_MHA_ERROR(mha::read_npy(write("header.npy", bytes.substr(0, 40))), Contains("truncated .npy header"));
  std::string fortran = bytes;
  fortran.replace(fortran.find("False"), 5, "True ");
  CHECK_MHA_ERROR(mha::read_npy(write("fortran.npy", fortran)), Contains("Fortran"));
  std::string big_endian = bytes;
  big_endian[big_endian.find("<f4")] = '>';
  CHECK_MHA_ERROR(mha::read_npy(write("big.npy", big_endian)), Contains("'>f4'"));
  CHECK_MHA_ERROR(mha::load_npy<double>(good), Contains("expected dtype float64, got float32"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a malformed golden case is a FAIL with its reason and never a crash", "[errors][golden]") {
  const auto dir = std::filesystem::temp_directory_path() / "mha-bad-case";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto check_with_json = [&](const std::string& json) {
    std::ofstream(dir / "case.json") << json;
    return mha::check_case(dir);
  };
  auto r = check_with_json("{\"format\": 2}");
  CHECK_FALSE(r.passed);
  CHECK_THAT(r.line, Contains("FAIL") && Contains("unknown case format version 2"));
  r = check_with_json("{\"format\": 1, \"dtype\": \"float32\"}");
  CHECK_FALSE(r.passed);
  CHECK_THAT(r.line, Contains("no 'module' object"));
  r = check_with_json("{\"format\": 1, \"dtype\": \"float32\", \"module\": {\"num_heads\": 2}}");
  CHECK_FALSE(r.passed);
  CHECK_THAT(r.line, Contains("missing 'module.embed_dim'"));
  r = check_with_json("{\"format\": 1, \"dtype\": \"int8\"}");
  CHECK_FALSE(r.passed);
  CHECK_THAT(r.line, Contains("dtype") && Contains("int8"));
  r = check_with_json("not json");
  CHECK_FALSE(r.passed);
  CHECK_THAT(r.line, Contains("not valid JSON"));
  // A valid case.json whose tensors are missing.
  std::ifstream good(mha_test::golden_cases() / "self_seqfirst_f32" / "case.json");
  r = check_with_json(std::string((std::istreambuf_iterator<char>(good)), std::istreambuf_iterator<char>()));
  CHECK_FALSE(r.passed);
  CHECK_THAT(r.line, Contains("cannot open file"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("splitting and merging heads reject a number of heads that does not divide", "[errors][forward]") {
  CHECK_MHA_ERROR(mha::merge_heads(xt::xtensor<float, 3>(xt::zeros<float>({std::size_t{4}, L, std::size_t{2}})), 0),
                  Contains("num_heads:"));
  CHECK_MHA_ERROR(mha::merge_heads(xt::xtensor<float, 3>(xt::zeros<float>({std::size_t{4}, L, std::size_t{2}})), 3),
                  Contains("num_heads: expected a number of heads that divides the 4 batch-heads, got 3"));
  CHECK_MHA_ERROR(mha::split_heads(xt::xtensor<float, 3>(xt::zeros<float>({L, N, E})), 3), Contains("num_heads:"));
}
