// tests/catch2.hpp — Catch2 v2 (Debian 12) or v3 (Debian 13), for one test source written in v3's names.
//
// tests/CMakeLists.txt finds either version and defines MHA_CATCH2_MAJOR, 2 or 3. Version
// 3 split the one header of v2 into one per feature, and renamed two things the tests use;
// below, v2 is given v3's names, so that every test reads as v3:
//
//   v3 (the tests' spelling)               v2
//   Catch::Approx                           Approx (Catch::Detail::Approx)
//   Catch::Matchers::ContainsSubstring      Catch::Matchers::Contains
//
// In v3, Catch::Matchers::Contains is a different matcher: "the range holds this element".
// Catch::Matchers::StartsWith and the macros are spelled the same in both.
#pragma once

#if MHA_CATCH2_MAJOR == 3
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#elif MHA_CATCH2_MAJOR == 2
#include <catch2/catch.hpp>

#include <string>

namespace Catch {
using Detail::Approx;
namespace Matchers {
inline StdString::ContainsMatcher ContainsSubstring(const std::string& text,
                                                    CaseSensitive::Choice case_sensitivity = CaseSensitive::Yes) {
  return Contains(text, case_sensitivity);
}
}  // namespace Matchers
}  // namespace Catch
#else
#error "MHA_CATCH2_MAJOR must be 2 or 3 (tests/CMakeLists.txt defines it from the Catch2 it finds)"
#endif
