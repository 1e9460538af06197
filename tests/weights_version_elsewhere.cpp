// tests/weights_version_elsewhere.cpp — a second translation unit of textbook_test that makes a weights version, for the test
// in parameters_test.cpp that versions made in different units never repeat.
#include "support.hpp"

std::uint64_t weights_version_made_in_another_unit() {
  return mha::textbook::Parameters<double>(mha::Options{.embed_dim = 4, .num_heads = 2}).version();
}
