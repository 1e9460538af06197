// tests/error_test.cpp — mha::Error and check(): the argument's name first, then what was expected and got.
#include "support.hpp"

import mha.core; // detail::check, the library's helper, which `import mha;` does not give

TEST_CASE("check throws mha::Error as '<argument>: <message>' and only when the condition fails", "[error]") {
  CHECK_NOTHROW(mha::detail::check(true, "x", "never formatted {}", 1));
  CHECK_THROWS_AS(mha::detail::check(false, "x", "bad"), mha::Error);
  CHECK_THROWS_WITH(mha::detail::check(false, "num_heads", "expected {}, got {}", 2, 3),
                    "num_heads: expected 2, got 3");
  CHECK_THROWS_AS(mha::detail::check(false, "x", "bad"), std::invalid_argument);  // catchable as the standard type
}

TEST_CASE("shape_string writes shapes as PyTorch prints them", "[error]") {
  CHECK(mha::shape_string({2, 3, 4}) == "(2, 3, 4)");
  CHECK(mha::shape_string({5}) == "(5,)");
  CHECK(mha::shape_string(std::vector<std::size_t>{}) == "()");
}
