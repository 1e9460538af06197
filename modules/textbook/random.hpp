// modules/textbook/random.hpp — a small seedable generator for initialisation and dropout.
//
// PyTorch draws from its global generator; here every draw comes from a Generator the
// caller seeds, so a run is reproducible. The numbers are not PyTorch's (its generator
// is not reproduced), and they are the same on every platform: the distributions are
// written out below rather than taken from <random>, whose distributions differ between
// standard libraries.
//
// Included by modules/textbook.cppm, in its module purview: no module line of its own.

export namespace mha {

class Generator {
public:
  explicit Generator(std::uint64_t seed = 0) : engine_(seed) {}

  void seed(std::uint64_t seed) { engine_.seed(seed); }

  // Uniform on [0, 1), from the top 53 bits of one 64-bit draw.
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

  // Uniform on [low, high).
  double uniform(double low, double high) { return low + (high - low) * uniform(); }

  // Standard normal, by the Box-Muller transform.
  double normal(double mean = 0.0, double std = 1.0) {
    const double u1 = 1.0 - uniform();  // (0, 1]: log(u1) is finite
    const double u2 = uniform();
    return mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

  // True with probability p.
  bool bernoulli(double p) { return uniform() < p; }

  // A seed for another generator, drawn from this one: generators seeded one after the
  // other from one generator draw different streams.
  std::uint64_t next_seed() { return engine_(); }

private:
  std::mt19937_64 engine_;
};

}  // namespace mha
