// Rejection of malformed files and arguments found by fuzzing and by auditing the public
// functions: each is an mha::Error naming the field or argument, never a crash, an
// escaping third-party exception, or a value silently changed. The fuzzers' crash inputs
// themselves are checked in under fuzz/regressions/ and run by the fuzz build's CTest.
#include "support.hpp"

#include <fstream>
#include <iterator>

import mha.io;

using Catch::Matchers::Contains;

namespace {

// The case.json of a real golden case, with one field replaced by `json_value` (text).
std::string case_json_with(const std::string& field, const std::string& json_value) {
  std::ifstream in(mha_test::golden_cases() / "self_seqfirst_f32" / "case.json");
  nlohmann::json j = nlohmann::json::parse(in);
  const auto dot = field.find('.');
  const auto value = nlohmann::json::parse(json_value);
  if (dot == std::string::npos) j[field] = value;
  else j[field.substr(0, dot)][field.substr(dot + 1)] = value;
  return j.dump();
}

// A .npy file's bytes: magic, version 1.0, the header padded to 64 bytes, then the data.
std::vector<char> npy_bytes(const std::string& dict, std::size_t data_bytes) {
  std::string header = dict;
  header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
  header.push_back('\n');
  std::vector<char> bytes = {'\x93', 'N', 'U', 'M', 'P', 'Y', '\x01', '\x00'};
  bytes.push_back(static_cast<char>(header.size() & 0xff));
  bytes.push_back(static_cast<char>(header.size() >> 8));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.resize(bytes.size() + data_bytes, '\0');
  return bytes;
}

}  // namespace

TEST_CASE("parse_case_info reads a real case.json unchanged", "[errors][golden]") {
  const auto info = mha::parse_case_info(case_json_with("description", "\"d\""), "self_seqfirst_f32");
  CHECK(info.name == "self_seqfirst_f32");
  CHECK(info.description == "d");
  CHECK(info.options.embed_dim == 8);
  CHECK(info.options.num_heads == 2);
  CHECK(info.query_is_key);
}

TEST_CASE("parse_case_info rejects fields of the wrong kind with mha::Error", "[errors][golden]") {
  // Fuzzer findings: an escaping nlohmann type_error, and float-to-integer overflow (UB).
  CHECK_MHA_ERROR(mha::parse_case_info(case_json_with("description", "5"), "c"),
                  Contains("description") && Contains("expected a string"));
  CHECK_MHA_ERROR(mha::parse_case_info(case_json_with("inputs.query_is_key", "3"), "c"),
                  Contains("inputs.query_is_key") && Contains("expected true or false"));
  CHECK_MHA_ERROR(mha::parse_case_info(case_json_with("module.embed_dim", "1e300"), "c"),
                  Contains("module.embed_dim") && Contains("expected an integer"));
  CHECK_MHA_ERROR(mha::parse_case_info(case_json_with("format", "1e20"), "c"),
                  Contains("format") && Contains("expected an integer"));
  // Nothing silently changed: 8.5 is not read as 8, 2^64 - 1 not as -1.
  CHECK_MHA_ERROR(mha::parse_case_info(case_json_with("module.embed_dim", "8.5"), "c"),
                  Contains("module.embed_dim") && Contains("8.5"));
  CHECK_MHA_ERROR(mha::parse_case_info(case_json_with("module.kdim", "18446744073709551615"), "c"),
                  Contains("module.kdim") && Contains("18446744073709551615"));
  CHECK_MHA_ERROR(mha::parse_case_info(case_json_with("tolerance.rtol", "-1e-5"), "c"),
                  Contains("tolerance") && Contains("rtol=-1e-05"));
  CHECK_MHA_ERROR(mha::parse_case_info("{\"format\": 1,", "c"), Contains("not valid JSON"));
}

TEST_CASE("parse_npy reads a well-formed file and rejects malformed shapes", "[errors][npy]") {
  const auto ok = mha::parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24), "a");
  CHECK(ok.shape == std::vector<std::size_t>{2, 3});
  CHECK(mha::to_xarray<float>(ok, "a").size() == 6);
  const auto empty = mha::parse_npy(npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (0, 5), }", 0), "e");
  CHECK(mha::to_xarray<double>(empty, "e").size() == 0);

  // Python writes tuples with commas: "(2 3)" is not a shape.
  CHECK_MHA_ERROR(mha::parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2 3), }", 24), "a"),
                  Contains("not a tuple of integers"));
  CHECK_MHA_ERROR(mha::parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,,3), }", 24), "a"),
                  Contains("not a tuple of integers"));
  // Fuzzer finding: a zero dimension beside huge ones overflowed xtensor's strides (UB).
  CHECK_MHA_ERROR(
      mha::parse_npy(npy_bytes("{'descr': '|b1', 'fortran_order': False, 'shape': (0, 18446744073709, 512154), }", 0),
                     "z"),
      Contains("too large"));
  CHECK_MHA_ERROR(mha::parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 23), "t"),
                  Contains("expected 24 data bytes"));
}

TEST_CASE("the in-projection helpers reject blocks and biases of the wrong size", "[errors][in_projection]") {
  constexpr std::size_t E = 4;
  const xt::xtensor<double, 2> w = xt::zeros<double>({3 * E, E});
  const std::optional<xt::xtensor<double, 1>> short_bias = xt::xtensor<double, 1>(xt::zeros<double>({2 * E}));
  CHECK_MHA_ERROR(mha::weight_block(w, 3), Contains("block"));
  CHECK_MHA_ERROR(mha::weight_block(xt::xtensor<double, 2>(xt::zeros<double>({2 * E, E})), 2),
                  Contains("in_proj_weight") && Contains("(12, 4)"));
  CHECK_MHA_ERROR(mha::bias_block(short_bias, 2, E), Contains("in_proj_bias") && Contains("(12,)"));
  const xt::xtensor<double, 3> x = xt::zeros<double>({std::size_t{2}, std::size_t{1}, E});
  CHECK_MHA_ERROR(mha::in_projection_packed(x, x, x, w, short_bias), Contains("in_proj_bias") && Contains("(8,)"));
}

TEST_CASE("merge_masks rejects an attn_mask that does not match key_padding_mask", "[errors][masks]") {
  constexpr std::size_t N = 2, H = 2, L = 3, S = 4;
  const std::optional<xt::xtensor<double, 2>> padding = xt::xtensor<double, 2>(xt::zeros<double>({N, S}));
  const std::optional<xt::xtensor<double, 3>> good = xt::xtensor<double, 3>(xt::zeros<double>({N * H, L, S}));
  CHECK(mha::merge_masks(good, padding, H, L)->shape(0) == N * H);
  const std::optional<xt::xtensor<double, 3>> wrong = xt::xtensor<double, 3>(xt::zeros<double>({N, L, S}));
  CHECK_MHA_ERROR(mha::merge_masks(wrong, padding, H, L), Contains("attn_mask") && Contains("(2, 3, 4)"));
  CHECK_MHA_ERROR(mha::merge_masks(good, padding, 0, L), Contains("num_heads"));
}
