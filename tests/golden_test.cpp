// Every golden case PyTorch generated, through every variant this library has.
//
// A case with in_proj_weight runs packed and, after splitting, separate; a case with
// q/k/v_proj_weight runs separate. Each expected tensor (attn_output,
// attn_output_weights, and PyTorch's internal q, k, v) must match within the case's
// tolerance; each rejection case must be rejected with mha::Error.
#include "support.hpp"

#include <cstdlib>
#include <string>

TEST_CASE("every golden case passes in every variant", "[golden]") {
  const auto cases = mha_test::all_cases();
  REQUIRE(cases.size() >= 30);
  for (const auto& dir : cases) {
    const auto result = mha::check_case(dir);
    INFO(result.line);
    CHECK(result.passed);
  }
}

TEST_CASE("packed cases also run as separate projections", "[golden]") {
  for (const auto& name : mha_test::numeric_case_names("float32")) {
    const auto c = mha_test::load<float>(name);
    const auto v = mha::variants(c);
    INFO(name);
    if (c.parameters.contains("in_proj_weight")) {
      REQUIRE(v.size() == 2);
      CHECK(v[0].first == "packed");
      CHECK(v[1].first == "separate");
      CHECK(v[0].second.packed());
      CHECK_FALSE(v[1].second.packed());
    } else {
      REQUIRE(v.size() == 1);
      CHECK(v[0].first == "separate");
    }
  }
}

TEST_CASE("the golden files regenerate from golden/generate.py", "[golden][regenerate]") {
  // Runs PyTorch (Debian's /usr/bin/python3) and compares every golden file with a fresh
  // regeneration: byte for byte what the generator draws, copies or writes as text;
  // within a few ULPs of each tensor's largest magnitude what PyTorch computes with
  // floating-point kernels (attn_output, attn_output_weights, q, k, v), whose last bits
  // depend on the CPU. tests/golden_regeneration_test.py shows that a hand edit fails.
  const std::string command =
      std::string("\"") + MHA_PYTHON + "\" \"" + MHA_SOURCE_DIR + "/golden/generate.py\" --check";
  INFO(command);
  REQUIRE(std::system(command.c_str()) == 0);
}
