// tests/random_test.cpp — textbook/random.hpp: the seedable generator behind initialisation and dropout.
#include "support.hpp"

TEST_CASE("a generator repeats its draws from the same seed, and only from it", "[random]") {
  mha::Generator a(5), b(5), c(6);
  for (int i = 0; i < 100; ++i) {
    const double x = a.uniform();
    CHECK(x == b.uniform());
    CHECK((x >= 0.0 && x < 1.0));
  }
  CHECK(a.uniform() != c.uniform());
  a.seed(6);
  c.seed(6);
  CHECK(a.normal() == c.normal());
}

TEST_CASE("uniform, normal and bernoulli have the laws they are named after", "[random]") {
  mha::Generator g(11);
  constexpr int n = 20000;
  double sum = 0, sum_sq = 0, low = 1, high = -1;
  int kept = 0;
  for (int i = 0; i < n; ++i) {
    const double u = g.uniform(-0.5, 0.5);
    low = std::min(low, u), high = std::max(high, u);
    const double z = g.normal(2.0, 3.0);
    sum += z, sum_sq += z * z;
    kept += g.bernoulli(0.25) ? 1 : 0;
  }
  CHECK((low >= -0.5 && high < 0.5));
  // Mean 2 and standard deviation 3: over 20000 draws the sample mean is within 4 standard
  // errors (4 * 3 / sqrt(20000) = 0.085) and the variance within 0.5 of 9.
  const double mean = sum / n, variance = sum_sq / n - mean * mean;
  CHECK(std::abs(mean - 2.0) < 0.085);
  CHECK(std::abs(variance - 9.0) < 0.5);
  // p = 0.25: 5000 expected, standard deviation sqrt(20000 * 0.25 * 0.75) = 61; within 4 of them.
  CHECK(std::abs(kept - 5000) < 245);
  CHECK_FALSE(g.bernoulli(0.0));
  CHECK(g.bernoulli(1.0));
}
