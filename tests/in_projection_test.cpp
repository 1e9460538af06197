// tests/in_projection_test.cpp — the packed in_proj_weight: which rows are Q, K and V, demonstrated against PyTorch.
//
// PyTorch's golden q, k, v are its own internal in-projection (_in_projection_packed).
// Taking rows [0,E) as W_q, [E,2E) as W_k and [2E,3E) as W_v reproduces them; each of
// the five other orders of the three row blocks does not.
#include "support.hpp"

#include <algorithm>
#include <array>
#include <set>
#include <string>

import mha.io;

namespace {

using Blocks = std::array<std::size_t, 3>;  // which row block plays Q, K and V

std::string order_name(const Blocks& order) {
  const char* names = "QKV";
  return {names[order[0]], '-', '>', names[order[1]], '-', '>', names[order[2]]};
}

// q, k, v computed with row blocks taken in `order`, on the case's seq-first inputs.
template <class T>
mha::textbook::QKV<T> project_in_order(const mha::Case<T>& c, const Blocks& order) {
  const auto& w = c.parameters.at("in_proj_weight");  // (3E, E)
  const xt::xtensor<T, 2> in_proj_weight = w;
  std::optional<xt::xtensor<T, 1>> in_proj_bias;
  if (c.parameters.contains("in_proj_bias")) in_proj_bias = c.parameters.at("in_proj_bias");
  const std::size_t E = in_proj_weight.shape(1);
  const bool batched = c.query.dimension() == 3, transpose = c.info.options.batch_first && batched;
  const auto query = mha::textbook::to_seq_first_batched(c.query, transpose);  // (L, N, E)
  const auto key = mha::textbook::to_seq_first_batched(c.key, transpose);      // (S, N, E)
  const auto value = mha::textbook::to_seq_first_batched(c.value, transpose);  // (S, N, E)
  auto project = [&](const xt::xtensor<T, 3>& x, std::size_t block) {
    return mha::textbook::linear(x, mha::textbook::weight_block(in_proj_weight, block),
                                 mha::textbook::bias_block(in_proj_bias, block, E));
  };
  return {project(query, order[0]), project(key, order[1]), project(value, order[2])};
}

template <class T>
bool matches_pytorch(const mha::Case<T>& c, const mha::textbook::QKV<T>& qkv) {
  const double rtol = c.info.rtol, atol = c.info.atol;
  return !mha_test::differs(qkv.q, c.expected.at("q"), rtol, atol) &&
         !mha_test::differs(qkv.k, c.expected.at("k"), rtol, atol) &&
         !mha_test::differs(qkv.v, c.expected.at("v"), rtol, atol);
}

}  // namespace

TEST_CASE("demonstrates: only the Q->K->V split of in_proj_weight reproduces PyTorch's q k v",
          "[in_projection][order]") {
  std::size_t cases = 0;
  for (const auto& name : mha_test::numeric_case_names("float64")) {
    const auto c = mha_test::load<double>(name);
    if (!c.parameters.contains("in_proj_weight") || !c.expected.contains("q")) continue;  // q, k, v: optional
    ++cases;
    Blocks order{0, 1, 2};
    do {
      const bool is_qkv = order == Blocks{0, 1, 2};
      INFO(name << " split as " << order_name(order));
      CHECK(matches_pytorch(c, project_in_order(c, order)) == is_qkv);
    } while (std::next_permutation(order.begin(), order.end()));
  }
  REQUIRE(cases >= 5);
}

TEST_CASE("split_packed gives W_q W_k W_v as row blocks 0 1 2 and the bias thirds", "[in_projection]") {
  const auto c = mha_test::load<float>("self_seqfirst_f32");
  const xt::xtensor<float, 2> w = c.parameters.at("in_proj_weight");
  const xt::xtensor<float, 1> b = c.parameters.at("in_proj_bias");
  const std::size_t E = w.shape(1);
  const auto p = mha::textbook::split_packed(w, std::optional(b));
  REQUIRE(p.w_q.shape() == std::array<std::size_t, 2>{E, E});
  CHECK(mha_test::same(p.w_q, xt::view(w, xt::range(0, E), xt::all())));
  CHECK(mha_test::same(p.w_k, xt::view(w, xt::range(E, 2 * E), xt::all())));
  CHECK(mha_test::same(p.w_v, xt::view(w, xt::range(2 * E, 3 * E), xt::all())));
  CHECK(mha_test::same(mha_test::value_of(p.b_q, "b_q"), xt::view(b, xt::range(0, E))));
  CHECK(mha_test::same(mha_test::value_of(p.b_k, "b_k"), xt::view(b, xt::range(E, 2 * E))));
  CHECK(mha_test::same(mha_test::value_of(p.b_v, "b_v"), xt::view(b, xt::range(2 * E, 3 * E))));
}

// By hand, for E = 4: Q is rows [0, 4), K [4, 8), V [8, 12); K and V together [4, 12), in
// which V starts at row 4.
TEST_CASE("qkv_rows and kv_rows name the packed weight's row blocks", "[in_projection]") {
  using mha::textbook::kv_rows;
  using mha::textbook::qkv_rows;
  const auto rows = [](mha::textbook::RowBlock r) { return std::array<std::size_t, 3>{r.first, r.count, r.end()}; };
  CHECK(rows(qkv_rows(0, 4)) == std::array<std::size_t, 3>{0, 4, 4});
  CHECK(rows(qkv_rows(1, 4)) == std::array<std::size_t, 3>{4, 4, 8});
  CHECK(rows(qkv_rows(2, 4)) == std::array<std::size_t, 3>{8, 4, 12});
  CHECK(rows(kv_rows(4)) == std::array<std::size_t, 3>{4, 8, 12});
  CHECK(rows(qkv_rows(1, 4).within(kv_rows(4))) == std::array<std::size_t, 3>{0, 4, 4});
  CHECK(rows(qkv_rows(2, 4).within(kv_rows(4))) == std::array<std::size_t, 3>{4, 4, 8});
  CHECK_MHA_ERROR(qkv_rows(3, 4), Catch::Matchers::ContainsSubstring("block: expected 0 (q), 1 (k) or 2 (v), got 3"));
}

TEST_CASE("split then pack and pack then split are identities", "[in_projection]") {
  const auto c = mha_test::load<double>("self_seqfirst_f64");
  const xt::xtensor<double, 2> w = c.parameters.at("in_proj_weight");
  const xt::xtensor<double, 1> b = c.parameters.at("in_proj_bias");
  const auto packed = mha::textbook::pack(mha::textbook::split_packed(w, std::optional(b)));
  CHECK(mha_test::same(packed.in_proj_weight, w));
  CHECK(mha_test::same(mha_test::value_of(packed.in_proj_bias, "in_proj_bias"), b));

  const auto split = mha::textbook::split_packed(packed.in_proj_weight, packed.in_proj_bias);
  const auto again =
      mha::textbook::split_packed(mha::textbook::pack(split).in_proj_weight, mha::textbook::pack(split).in_proj_bias);
  CHECK(mha_test::same(again.w_q, split.w_q));
  CHECK(mha_test::same(again.w_k, split.w_k));
  CHECK(mha_test::same(again.w_v, split.w_v));
  CHECK(mha_test::same(mha_test::value_of(again.b_v, "b_v"), mha_test::value_of(split.b_v, "b_v")));

  // Without bias, nothing is invented.
  const auto no_bias = mha::textbook::pack(mha::textbook::split_packed(w, std::optional<xt::xtensor<double, 1>>{}));
  CHECK_FALSE(no_bias.in_proj_bias.has_value());
}

TEST_CASE("the module converts between packed and separate without changing its output", "[in_projection]") {
  const auto c = mha_test::load<double>("attn_mask_float_3d_f64");
  auto packed = mha::make_module(c);
  auto separate = packed.to_separate();
  auto packed_again = separate.to_packed();
  REQUIRE(packed.packed());
  REQUIRE_FALSE(separate.packed());
  REQUIRE(packed_again.packed());
  CHECK(
      mha_test::same(xt::xarray<double>(packed_again.parameter("in_proj_weight")), c.parameters.at("in_proj_weight")));
  CHECK(mha_test::same(separate.parameter("k_proj_weight"),
                       xt::xarray<double>(xt::view(c.parameters.at("in_proj_weight"), xt::range(8, 16), xt::all()))));
  const auto a = mha::run_forward(packed, c), b = mha::run_forward(separate, c), d = mha::run_forward(packed_again, c);
  mha_test::require_close<double>("separate attn_output", b.attn_output, a.attn_output, 1e-12, 1e-12);
  mha_test::require_close<double>("packed again attn_output", d.attn_output, a.attn_output, 0, 0);
}

TEST_CASE("packing is impossible when kdim or vdim differs from embed_dim", "[in_projection][errors]") {
  const auto c = mha_test::load<float>("cross_kdim_vdim_seqfirst_f32");
  const auto module = mha::make_module(c);
  REQUIRE_FALSE(module.qkv_same_embed_dim());
  CHECK_MHA_ERROR(module.to_packed(), Catch::Matchers::ContainsSubstring("kdim, vdim") &&
                                          Catch::Matchers::ContainsSubstring("cannot pack"));
  CHECK_MHA_ERROR(
      mha::textbook::pack(module.separate_projections()),
      Catch::Matchers::ContainsSubstring("k_proj_weight") || Catch::Matchers::ContainsSubstring("v_proj_weight"));
}

TEST_CASE("parameter names and shapes are PyTorch's state_dict", "[in_projection][state_dict]") {
  // The golden folders hold one .npy per parameter, named by PyTorch's named_parameters().
  for (const auto& dir : mha_test::all_cases()) {
    const auto info = mha::read_case_info(dir);
    if (info.expect_error || info.is_functional()) continue;  // a functional call names its arguments, not a state_dict
    std::set<std::string> files;
    for (const char* name : {"in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
                             "bias_k", "bias_v", "out_proj.weight", "out_proj.bias"})
      if (std::filesystem::exists(dir / (std::string(name) + ".npy"))) files.insert(name);
    mha::Options options = info.options;
    options.separate_projections = !files.contains("in_proj_weight");
    const mha::MultiheadAttention<double> module(options);
    const auto names = module.parameter_names();
    INFO(info.name);
    CHECK(std::set<std::string>(names.begin(), names.end()) == files);
    for (const auto& name : names) {
      const auto a = mha::read_npy(dir / (name + ".npy"));
      const auto shape = module.parameter_shape(name);
      INFO(name);
      CHECK(a.shape == shape);
      CHECK(std::equal(shape.begin(), shape.end(), module.parameter(name).shape().begin()));
    }
  }
}

TEST_CASE("the building blocks check their shapes", "[in_projection][errors]") {
  using namespace mha_test::small;
  using Catch::Matchers::ContainsSubstring;
  const xt::xtensor<float, 3> x = xt::zeros<float>({L, N, E});
  const xt::xtensor<float, 2> w_bad = xt::zeros<float>({3 * E, E + 1});
  CHECK_MHA_ERROR(mha::textbook::split_packed(w_bad, std::optional<xt::xtensor<float, 1>>{}),
                  ContainsSubstring("in_proj_weight:") && ContainsSubstring("(27, 9)"));
  CHECK_MHA_ERROR(mha::textbook::in_projection_packed(x, x, x, xt::xtensor<float, 2>(xt::zeros<float>({2 * E, E})),
                                                      std::optional<xt::xtensor<float, 1>>{}),
                  ContainsSubstring("in_proj_weight:") && ContainsSubstring("(24, 8)"));
  const xt::xtensor<float, 2> w = xt::zeros<float>({E, E});
  CHECK_MHA_ERROR(mha::textbook::linear(xt::xtensor<float, 3>(xt::zeros<float>({L, N, E + 1})), w),
                  ContainsSubstring("input:"));
  mha::SeparateProjections<float> p{w, w, xt::zeros<float>({E, E + 3}), {}, {}, {}};
  CHECK_MHA_ERROR(mha::textbook::in_projection(x, x, x, p),
                  ContainsSubstring("v_proj_weight:") && ContainsSubstring("(8, 11)"));
}

TEST_CASE("linear with no input features gives the bias on every row, as PyTorch's", "[in_projection]") {
  // F.linear(torch.zeros(3, 2, 0), torch.zeros(4, 0), b) is b broadcast to (3, 2, 4): an
  // empty sum is 0, plus the bias.
  const xt::xtensor<double, 3> x = xt::zeros<double>({std::size_t{3}, std::size_t{2}, std::size_t{0}});
  const xt::xtensor<double, 2> w = xt::zeros<double>({std::size_t{4}, std::size_t{0}});
  const std::optional<xt::xtensor<double, 1>> b = xt::xtensor<double, 1>{0.5, -1.0, 2.0, 3.5};
  const auto y = mha::textbook::linear(x, w, b);
  REQUIRE(mha_test::shape_of(y) == std::vector<std::size_t>{3, 2, 4});
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t n = 0; n < 2; ++n)
      for (std::size_t o = 0; o < 4; ++o) CHECK(y(i, n, o) == (*b)(o));
  const auto y0 = mha::textbook::linear(x, w);  // no bias: zeros
  CHECK(xt::all(xt::equal(y0, 0.0)));
}

TEST_CASE("the in-projection helpers reject blocks and biases of the wrong size", "[in_projection][errors]") {
  using Catch::Matchers::ContainsSubstring;
  constexpr std::size_t E = 4;
  const xt::xtensor<double, 2> w = xt::zeros<double>({3 * E, E});
  const std::optional<xt::xtensor<double, 1>> short_bias = xt::xtensor<double, 1>(xt::zeros<double>({2 * E}));
  CHECK_MHA_ERROR(mha::textbook::weight_block(w, 3), ContainsSubstring("block"));
  CHECK_MHA_ERROR(mha::textbook::weight_block(xt::xtensor<double, 2>(xt::zeros<double>({2 * E, E})), 2),
                  ContainsSubstring("in_proj_weight") && ContainsSubstring("(12, 4)"));
  CHECK_MHA_ERROR(mha::textbook::bias_block(short_bias, 2, E),
                  ContainsSubstring("in_proj_bias") && ContainsSubstring("(12,)"));
  const xt::xtensor<double, 3> x = xt::zeros<double>({std::size_t{2}, std::size_t{1}, E});
  CHECK_MHA_ERROR(mha::textbook::in_projection_packed(x, x, x, w, short_bias),
                  ContainsSubstring("in_proj_bias") && ContainsSubstring("(8,)"));
}
