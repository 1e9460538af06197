// tests/generations_test.cpp — the switch between PyTorch 1.13 and PyTorch 2.x, proved by the golden cases each made.
//
// For each difference of docs/15-versions.md, one test: the case PyTorch 2.6 made
// (golden/pytorch-2.6/cases) passes under the 2.x setting and fails under the 1.13 one;
// where 1.13 made the same call (golden/cases), its case passes under 1.13 and fails under
// 2.x. A case that both generations compute alike passes under both. Checked as
// mha-golden checks it (mha::check_case_as), every variant and, for the functional form,
// every path.
#include "support.hpp"

#include <fstream>
#include <string>

namespace {

using mha::PyTorchVersion;

// The case `name` of a golden folder, checked as if PyTorch `version` had made it.
mha::CaseResult check_as(const std::filesystem::path& folder, const std::string& name, PyTorchVersion version) {
  auto info = mha::read_case_info(folder / name);
  info.version = version;
  try {  // as mha::check_case: an error where outputs are expected is a FAIL line
    return info.dtype == "float64" ? mha::check_case_as<double>(info) : mha::check_case_as<float>(info);
  } catch (const mha::Error& e) {
    return {name, false, fmt::format("FAIL {} {}", name, e.what()), 0};
  }
}

// 2.6's case passes under 2.x and fails under 1.13; 1.13's, if it has one, the other way.
void require_generations_differ(const std::string& name, bool made_by_1_13_too) {
  const auto v2 = mha_test::golden_cases_2_6();
  INFO(name);
  const auto as_2x = check_as(v2, name, PyTorchVersion::v2);
  INFO("2.6's case under 2.x: " << as_2x.line);
  CHECK(as_2x.passed);
  const auto as_1_13 = check_as(v2, name, PyTorchVersion::v1_13);
  INFO("2.6's case under 1.13: " << as_1_13.line);
  CHECK_FALSE(as_1_13.passed);
  if (!made_by_1_13_too) return;
  const auto own = check_as(mha_test::golden_cases(), name, PyTorchVersion::v1_13);
  INFO("1.13's case under 1.13: " << own.line);
  CHECK(own.passed);
  const auto other = check_as(mha_test::golden_cases(), name, PyTorchVersion::v2);
  INFO("1.13's case under 2.x: " << other.line);
  CHECK_FALSE(other.passed);
}

// A case both generations compute alike: each generation's case passes under both.
void require_generations_agree(const std::string& name) {
  INFO(name);
  for (const auto& folder : {mha_test::golden_cases(), mha_test::golden_cases_2_6()})
    for (const auto version : {PyTorchVersion::v1_13, PyTorchVersion::v2}) {
      const auto result = check_as(folder, name, version);
      INFO(folder.parent_path().filename().string()
           << " under " << (version == PyTorchVersion::v1_13 ? "1.13" : "2.x") << ": " << result.line);
      CHECK(result.passed);
    }
}

}  // namespace

TEST_CASE("a fully masked row through 2.x's SDPA is out_proj.bias, 1.13 and the weights' branch give NaN",
          "[generations]") {
  require_generations_differ("sdpa_fully_masked_row_f32", /*made_by_1_13_too=*/true);
  require_generations_differ("sdpa_fully_padded_batch_f64", true);
  require_generations_differ("sdpa_float_mask_fully_masked_row_unbatched_f32", true);
  require_generations_differ("functional_fully_masked_row_need_weights_false_f32", true);
  // With the weights asked for, both give NaN.
  require_generations_agree("attn_mask_bool_2d_fully_masked_row");
}

TEST_CASE("2.6's SDPA output of a fully masked row is out_proj.bias, as the case says", "[generations]") {
  // What the test above relies on, read from PyTorch's own files: row 2 of attn_output
  // equals out_proj.bias (the row's attention output is 0), in every batch entry.
  const auto c = mha::load_case<float>(mha::read_case_info(mha_test::golden_cases_2_6() / "sdpa_fully_masked_row_f32"));
  const auto& out = c.expected.at("attn_output");  // (L, N, E)
  const auto& bias = c.parameters.at("out_proj.bias");
  REQUIRE(out.dimension() == 3);
  for (std::size_t n = 0; n < out.shape(1); ++n)
    for (std::size_t e = 0; e < out.shape(2); ++e) CHECK(out(2, n, e) == bias(e));
  CHECK(out(1, 0, 0) != bias(0));  // and another row is not
}

TEST_CASE("the native fast path gives a fully masked row NaN, grad enabled, 2.x's slow path gives out_proj.bias",
          "[generations]") {
  require_generations_agree("fast_path_fully_padded_batch_f32");
  require_generations_agree("fast_path_fully_masked_row_f32");
  require_generations_differ("grad_enabled_fully_padded_batch_f32", true);
}

TEST_CASE("2.x decides the fast path as PyTorch does: each condition that rules it out gives SDPA's 0",
          "[generations]") {
  // Each case is grad disabled with one condition of the fast path broken: 2.x then runs
  // the slow path, whose SDPA gives the fully masked row out_proj.bias; 1.13 gives NaN.
  for (const char* name :
       {"grad_disabled_seq_first_fully_padded_batch_f32", "grad_disabled_odd_heads_fully_padded_batch_f32",
        "grad_disabled_cross_fully_padded_batch_f32", "grad_disabled_float_attn_mask_fully_masked_row_f32",
        "grad_disabled_unbatched_fully_padded_f32"})
    require_generations_differ(name, true);
  // Without in_proj_bias, 2.x runs the slow path; 1.13 hands the fast path None, and fails.
  require_generations_differ("grad_disabled_no_bias_fully_padded_batch_f32", false);
  const auto refused = check_as(mha_test::golden_cases(), "reject_fast_path_without_bias", PyTorchVersion::v1_13);
  INFO(refused.line);
  CHECK(refused.passed);
  const auto computed = check_as(mha_test::golden_cases(), "reject_fast_path_without_bias", PyTorchVersion::v2);
  INFO(computed.line);
  CHECK_FALSE(computed.passed);
}

TEST_CASE("dropout in eval: 2.x's fast path runs, 1.13's is ruled out, and both give the padded entry NaN",
          "[generations]") {
  // Under 2.x the case passes only through the fast path: its slow path (SDPA) would give
  // the padded batch entry out_proj.bias where PyTorch 2.6 gave NaN.
  const char* name = "fast_path_dropout_eval_fully_padded_batch_f32";
  require_generations_agree(name);
  auto info = mha::read_case_info(mha_test::golden_cases_2_6() / name);
  REQUIRE(info.options.dropout == 0.5);
  const auto c2 = mha::load_case<float>(info);
  auto opts = c2.forward;
  CHECK(mha::make_module(c2).pytorch_path(c2.query, c2.query, c2.query, opts).path == mha::PyTorchPath::fast_path);
  info.version = PyTorchVersion::v1_13;
  const auto c1 = mha::load_case<float>(info);
  const auto as_1_13 = mha::make_module(c1).pytorch_path(c1.query, c1.query, c1.query, opts);
  CHECK(as_1_13.path == mha::PyTorchPath::weights);
  CHECK(as_1_13.why_not_fast_path == "dropout was 0.5, required zero");
}

TEST_CASE("grad_enabled decides: the fast path's case run with grad enabled fails under 2.x", "[generations]") {
  auto info = mha::read_case_info(mha_test::golden_cases_2_6() / "fast_path_fully_padded_batch_f32");
  REQUIRE_FALSE(info.grad_enabled);
  CHECK(mha::check_case_as<float>(info).passed);
  info.grad_enabled = true;  // the slow path: SDPA's 0 where PyTorch's fast path gave NaN
  const auto result = mha::check_case_as<float>(info);
  INFO(result.line);
  CHECK_FALSE(result.passed);
}

TEST_CASE("the module says which code PyTorch runs, and why not the fast path", "[generations]") {
  const auto c = mha::load_case<float>(mha::read_case_info(mha_test::golden_cases_2_6() / "fast_path_f32"));
  auto module = mha::make_module(c);
  auto opts = c.forward;
  CHECK(module.pytorch_path(c.query, c.query, c.query, opts).path == mha::PyTorchPath::fast_path);
  opts.grad_enabled = true;
  const auto slow = module.pytorch_path(c.query, c.query, c.query, opts);
  CHECK(slow.path == mha::PyTorchPath::weights);
  CHECK(slow.why_not_fast_path.starts_with("grad is enabled"));
  opts.need_weights = false;
  CHECK(module.pytorch_path(c.query, c.query, c.query, opts).path == mha::PyTorchPath::sdpa);
  opts.grad_enabled = false;
  module.train();
  CHECK(module.pytorch_path(c.query, c.query, c.query, opts).why_not_fast_path == "training is enabled");
}

TEST_CASE("is_causal: 2.x's SDPA branch never reads a mask that is not causal, 1.13 applies the mask",
          "[generations]") {
  require_generations_differ("is_causal_hint_noncausal_mask_f32", false);
  require_generations_differ("is_causal_hint_noncausal_float_mask_cross_f64", false);
  // With the weights, or with a key_padding_mask, 2.x drops the hint and applies the mask:
  // the 1.13 setting computes the same.
  for (const char* name :
       {"is_causal_hint_noncausal_mask_need_weights_f32", "is_causal_hint_noncausal_mask_key_padding_mask_f32",
        "fast_path_is_causal_hint_noncausal_mask_f32"}) {
    const auto result = check_as(mha_test::golden_cases_2_6(), name, PyTorchVersion::v1_13);
    INFO(result.line);
    CHECK(result.passed);
  }
}

TEST_CASE("is_causal without attn_mask: refused by 2.x's slow path, ignored by its fast path, refused by 1.13",
          "[generations]") {
  require_generations_agree("reject_is_causal_without_attn_mask");  // both refuse it
  require_generations_differ("fast_path_is_causal_without_attn_mask_f32", false);
}

TEST_CASE("a uint8 attn_mask: 2.x refuses it, 1.13 reads it as bool, with its warning", "[generations]") {
  require_generations_differ("reject_attn_mask_uint8", false);
  require_generations_differ("functional_reject_attn_mask_uint8", false);
  // 1.13 side, from PyTorch 1.13's own numbers: the bool case's mask as uint8 gives the
  // bool case's outputs, and the warning 1.13 gave.
  auto c = mha::load_case<float>(mha::read_case_info(mha_test::golden_cases() / "attn_mask_bool_2d_f32"));
  const auto& as_bool = std::get<xt::xarray<bool>>(mha_test::value_of(c.forward.attn_mask, "attn_mask"));
  c.forward.attn_mask = mha::Mask<float>(xt::xarray<std::uint8_t>(xt::cast<std::uint8_t>(as_bool)));
  auto module = mha::make_module(c);
  REQUIRE(module.options().pytorch == PyTorchVersion::v1_13);
  const auto out = mha::run_forward(module, c);
  mha_test::require_close<float>("attn_output", out.attn_output, c.expected.at("attn_output"), c.info.rtol,
                                 c.info.atol);
  REQUIRE(out.warnings.size() == 1);
  CHECK(out.warnings[0].argument == "attn_mask");
  CHECK(out.warnings[0].message ==
        "Byte tensor for attn_mask in nn.MultiheadAttention is deprecated. Use bool tensor instead.");
  mha::Options v2 = module.options();
  v2.pytorch = PyTorchVersion::v2;
  mha::MultiheadAttention<float> module_2x(v2);
  module_2x.load_state_dict(module.state_dict());
  module_2x.eval();
  CHECK_MHA_ERROR(mha::run_forward(module_2x, c),
                  Catch::Matchers::ContainsSubstring("only bool and floating types of attn_mask are supported"));
  // A uint8 key_padding_mask is refused by both.
  require_generations_agree("reject_key_padding_mask_uint8");
}

TEST_CASE("mismatched masks: 2.x warns and adds them, 1.13 merges by logical_or, or not at all", "[generations]") {
  // A float attn_mask and a bool key_padding_mask: the same numbers; only 2.x warns.
  require_generations_differ("mismatched_masks_float_attn_mask_bool_key_padding_mask_f32", true);
  // A bool attn_mask and a float key_padding_mask: 1.13's logical_or masks the -1.0.
  require_generations_differ("mismatched_masks_bool_attn_mask_float_key_padding_mask_f32", true);
  // Two float masks: 1.13 merges nothing, the padding is ignored.
  require_generations_differ("float_masks_both_f64", true);
}

TEST_CASE("1.13's fast path makes a float key_padding_mask bool, with a warning, 2.x's takes no float mask",
          "[generations]") {
  require_generations_differ("grad_disabled_float_key_padding_mask_f32", true);
  const auto info = mha::read_case_info(mha_test::golden_cases() / "grad_disabled_float_key_padding_mask_f32");
  REQUIRE(info.pytorch_warnings.has_value());
  REQUIRE(info.pytorch_warnings->size() == 1);
  CHECK(info.pytorch_warnings->at(0).starts_with("Converting mask without torch.bool dtype to bool"));
}

TEST_CASE("a case naming a PyTorch version the library does not know fails", "[generations]") {
  mha_test::TempDir tmp("generations-unknown");
  const auto dir = tmp.path / "sdpa_fully_masked_row_f32";
  std::filesystem::copy(mha_test::golden_cases_2_6() / "sdpa_fully_masked_row_f32", dir);
  std::ifstream in(dir / "case.json");
  std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  const auto at = json.find("\"2.6\"");
  REQUIRE(at != std::string::npos);
  json.replace(at, 5, "\"2.7\"");
  std::ofstream(dir / "case.json") << json;
  const auto result = mha::check_case(dir);
  INFO(result.line);
  CHECK_FALSE(result.passed);
  CHECK(result.line.find("unknown PyTorch version \"2.7\"") != std::string::npos);
}
