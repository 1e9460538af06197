// tests/golden_harness_test.cpp — the golden-case harness of mha.golden (modules/golden/): case.json read strictly, a malformed case a FAIL.
#include "third_party.hpp"  // nlohmann_json too, which support.hpp leaves out
#include "support.hpp"

#include <fstream>
#include <iterator>

using Catch::Matchers::ContainsSubstring;

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

}  // namespace

TEST_CASE("a malformed golden case is a FAIL with its reason and never a crash", "[golden][errors]") {
  const auto dir = std::filesystem::temp_directory_path() / "mha-bad-case";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto check_with_json = [&](const std::string& json) {
    std::ofstream(dir / "case.json") << json;
    return mha::check_case(dir);
  };
  auto r = check_with_json("{\"format\": 4}");
  CHECK_FALSE(r.passed);
  CHECK_THAT(r.line, ContainsSubstring("FAIL") && ContainsSubstring("unknown case format version 4"));
  r = check_with_json("{\"format\": 3, \"dtype\": \"float32\"}");  // a functional call names no module
  CHECK_FALSE(r.passed);
  CHECK_THAT(r.line, ContainsSubstring("no 'functional' object"));
  r = check_with_json("{\"format\": 1, \"dtype\": \"float32\"}");
  CHECK_FALSE(r.passed);
  CHECK_THAT(r.line, ContainsSubstring("no 'module' object"));
  r = check_with_json("{\"format\": 1, \"dtype\": \"float32\", \"module\": {\"num_heads\": 2}}");
  CHECK_FALSE(r.passed);
  CHECK_THAT(r.line, ContainsSubstring("missing 'module.embed_dim'"));
  r = check_with_json("{\"format\": 1, \"dtype\": \"int8\"}");
  CHECK_FALSE(r.passed);
  CHECK_THAT(r.line, ContainsSubstring("dtype") && ContainsSubstring("int8"));
  r = check_with_json("not json");
  CHECK_FALSE(r.passed);
  CHECK_THAT(r.line, ContainsSubstring("not valid JSON"));
  // A valid case.json whose tensors are missing.
  std::ifstream good(mha_test::golden_cases() / "self_seqfirst_f32" / "case.json");
  r = check_with_json(std::string((std::istreambuf_iterator<char>(good)), std::istreambuf_iterator<char>()));
  CHECK_FALSE(r.passed);
  CHECK_THAT(r.line, ContainsSubstring("cannot open file"));
  // The same case.json as version 2, without the backward object that version 2 requires.
  std::ifstream v1(mha_test::golden_cases() / "self_seqfirst_f32" / "case.json");
  std::string json((std::istreambuf_iterator<char>(v1)), std::istreambuf_iterator<char>());
  json.replace(json.find("\"format\": 1"), 11, "\"format\": 2");
  r = check_with_json(json);
  CHECK_FALSE(r.passed);
  CHECK_THAT(r.line, ContainsSubstring("format 2 but no 'backward' object"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("parse_case_info reads a real case.json unchanged", "[golden][errors]") {
  const auto info = mha::parse_case_info(case_json_with("description", "\"d\""), "self_seqfirst_f32");
  CHECK(info.name == "self_seqfirst_f32");
  CHECK(info.description == "d");
  CHECK(info.options.embed_dim == 8);
  CHECK(info.options.num_heads == 2);
  CHECK(info.query_is_key);
}

TEST_CASE("parse_case_info rejects fields of the wrong kind with mha::Error", "[golden][errors]") {
  // Fuzzer findings: an escaping nlohmann type_error, and float-to-integer overflow (UB);
  // and nothing silently changed: 8.5 is not read as 8, 2^64 - 1 not as -1.
  struct Rejected {
    const char* field;
    const char* json_value;
    const char* says;  // besides the field's name
  };
  const Rejected rejected[] = {
      {"description", "5", "expected a string"},
      {"inputs.query_is_key", "3", "expected true or false"},
      {"module.embed_dim", "1e300", "expected an integer"},
      {"format", "1e20", "expected an integer"},
      {"module.embed_dim", "8.5", "8.5"},
      {"module.kdim", "18446744073709551615", "18446744073709551615"},
      {"tolerance.rtol", "-1e-5", "rtol=-1e-05"},
  };
  for (const auto& r : rejected) {
    INFO(r.field << " = " << r.json_value);
    const std::string name = std::string(r.field).starts_with("tolerance") ? "tolerance" : r.field;
    CHECK_MHA_ERROR(mha::parse_case_info(case_json_with(r.field, r.json_value), "c"),
                    ContainsSubstring(name) && ContainsSubstring(r.says));
  }
  CHECK_MHA_ERROR(mha::parse_case_info("{\"format\": 1,", "c"), ContainsSubstring("not valid JSON"));
}
