// tests/host_program/main.cpp — a host program: it uses OpenBLAS itself, before and after using the library, and checks
// that the library left everything of its own alone:
//   - the OpenBLAS kernel, from before main() (argv[1], what OpenBLAS picks in a program
//     without the library) to the end;
//   - OpenBLAS's thread count, and OPENBLAS_CORETYPE;
//   - its own sgemm's result, bit for bit;
// and that the library's results do not depend on the host's OpenBLAS threads: the same
// forward, float and double, with OpenBLAS at 1 thread and at 2, bit for bit.
// Run by tests/host_program/run.cmake; exit 0 when every check holds.
// `import mha;` makes mha's names visible, not xtensor's: included first, as the units do.
#include "third_party.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "host_blas.hpp"

import mha;

namespace {

constexpr std::size_t L = 64, S = 96, N = 2, E = 128, H = 4;  // past the ~20 MFLOP at which a forward uses threads

int failures = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "OK      " : "MISMATCH", what.c_str());
  if (!ok) ++failures;
}

std::optional<std::string> coretype_variable() {
  const char* v = std::getenv("OPENBLAS_CORETYPE");
  return v != nullptr ? std::optional<std::string>(v) : std::nullopt;
}

template <class T>
xt::xarray<T> filled(const std::vector<std::size_t>& shape, std::size_t seed) {
  xt::xarray<T> x(shape);
  std::size_t i = seed;
  for (auto& v : x) v = static_cast<T>((i++ * 7919) % 1009) / T(1009) - T(0.5);
  return x;
}

// attn_output and the averaged weights of one fast forward of a seeded module.
template <class T>
std::vector<T> forward_once() {
  mha::Options options;
  options.embed_dim = E, options.num_heads = H;
  mha::MultiheadAttention<T> module(options, /*seed=*/3);
  module.eval();
  module.set_attention_path(mha::AttentionPath::fast);
  const auto query = filled<T>({L, N, E}, 1), memory = filled<T>({S, N, E}, 2);
  const auto out = module.forward(query, memory, memory);
  std::vector<T> values(out.attn_output.begin(), out.attn_output.end());
  if (out.attn_output_weights)
    values.insert(values.end(), out.attn_output_weights->begin(), out.attn_output_weights->end());
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: mha_host_program KERNEL (the kernel OpenBLAS picks without the library)\n");
    return 2;
  }
  const std::string own_pick = argv[1];
  expect(host_blas_kernel() == own_pick, "at main(), OpenBLAS runs its own pick, " + own_pick +
                                             ": linking the "
                                             "library switched nothing (runs " +
                                             host_blas_kernel() + ")");
  const auto variable = coretype_variable();
  const int threads = host_blas_threads();
  const std::vector<float> before = host_sgemm();

  mha::set_num_threads(2);
  const auto f32 = forward_once<float>();
  const auto f64 = forward_once<double>();

  expect(host_blas_kernel() == own_pick, "after forwards, OpenBLAS still runs " + own_pick);
  expect(host_blas_threads() == threads, "OpenBLAS's thread count is still " + std::to_string(threads));
  expect(coretype_variable() == variable, "OPENBLAS_CORETYPE is as it was");
  expect(host_sgemm() == before, "the host's own sgemm gives the same result, bit for bit");
  expect(mha::blas_kernel().chosen_by != "use_best_blas_kernel" && mha::blas_kernel().name == own_pick,
         "mha::blas_kernel() reports OpenBLAS's own pick, chosen by " + mha::blas_kernel().chosen_by);

  // The host's OpenBLAS threads change nothing in the library's results.
  for (const int host_threads : {1, 2}) {
    host_set_blas_threads(host_threads);
    const std::string with = " with the host's OpenBLAS at " + std::to_string(host_threads) + " thread(s)";
    expect(forward_once<float>() == f32, "float forward, bit for bit," + with);
    expect(forward_once<double>() == f64, "double forward, bit for bit," + with);
  }
  host_set_blas_threads(threads);
  expect(host_blas_threads() == threads, "OpenBLAS's thread count put back");
  std::printf("%s\n", failures == 0 ? "host program: every check holds" : "host program: FAILED");
  return failures == 0 ? 0 : 1;
}
