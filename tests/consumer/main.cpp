// tests/consumer/main.cpp — the smallest program that uses an installed mha: one self-attention forward.
//
// Builds a module with embed_dim 4 and 2 heads, runs it on a (L, N, E) = (3, 2, 4) input,
// and checks what holds for any parameters: the output shape, and attention weights that
// are probabilities (each row sums to 1). Then the two other modules of the package:
// mha.io writes the module's state_dict as a .safetensors file, lists its one attention
// layer and loads it back, and mha.golden's compare finds the loaded layer's output equal
// to the original's. Exits non-zero otherwise.

// `import mha;` makes mha's names visible, not those of the headers its units include: a
// source that names xtensor's types includes them itself, in the order the units do.
#include "third_party.hpp"

#include <unistd.h>  // getpid

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

import mha;
import mha.io;
import mha.golden;

namespace {

// The module's parameters through a .safetensors file and back: one attention layer,
// listed from the header, loaded, and giving the same output for `x`.
bool round_trips(const mha::MultiheadAttention<double>& attention, const xt::xarray<double>& x,
                 const xt::xarray<double>& attn_output) {
  const auto path =
      std::filesystem::temp_directory_path() / ("mha-consumer-" + std::to_string(::getpid()) + ".safetensors");
  mha::save_safetensors(path, attention.state_dict());
  const auto checkpoint = mha::open_checkpoint(path);
  const auto layers = mha::attention_layers(checkpoint);
  auto loaded = mha::load_attention_layer<double>(checkpoint, "", 2);
  std::filesystem::remove(path);
  const auto again = loaded.forward(x, x, x).attn_output;
  const bool ok = layers.size() == 1 && mha::compare<double>(again, attn_output, 0.0, 0.0).ok;
  std::printf("mha.io round trip: %zu attention layer, same attn_output: %s\n", layers.size(), ok ? "OK" : "MISMATCH");
  return ok;
}

}  // namespace

int main() {
  constexpr std::size_t L = 3, N = 2, E = 4;
  mha::Options options;
  options.embed_dim = E;
  options.num_heads = 2;
  mha::MultiheadAttention<double> attention(options, /*seed=*/7);
  attention.eval();

  xt::xarray<double> x = xt::zeros<double>({L, N, E});
  for (std::size_t i = 0; i < x.size(); ++i) x.data()[i] = std::sin(0.5 * static_cast<double>(i));
  const mha::Output<double> out = attention.forward(x, x, x);

  const std::vector<std::size_t> expected_shape{L, N, E};
  const auto& shape = out.attn_output.shape();
  const bool shape_ok = std::equal(shape.begin(), shape.end(), expected_shape.begin(), expected_shape.end());
  double worst = 0;                          // the largest |sum of a row of weights - 1|
  const auto& w = *out.attn_output_weights;  // (N, L, S)
  for (std::size_t n = 0; n < N; ++n)
    for (std::size_t i = 0; i < L; ++i) {
      double sum = 0;
      for (std::size_t j = 0; j < L; ++j) sum += w(n, i, j);
      worst = std::fmax(worst, std::abs(sum - 1.0));
    }
  const bool ok = round_trips(attention, x, out.attn_output) && shape_ok && worst < 1e-12;
  std::printf("attn_output shape (%zu, %zu, %zu), max |row sum - 1| = %.3g: %s\n", out.attn_output.shape(0),
              out.attn_output.shape(1), out.attn_output.shape(2), worst, ok ? "OK" : "MISMATCH");
  return ok ? 0 : 1;
}
