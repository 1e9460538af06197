// The one main() of the Catch2 test executables. Like the tools, tutorials and benchmarks,
// it has OpenBLAS run its best kernel for this CPU first (mha::use_best_blas_kernel: the
// library itself switches nothing when it is imported; tests/host_program checks that).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

import mha;

int main(int argc, char** argv) {
  mha::use_best_blas_kernel();
  return Catch::Session().run(argc, argv);
}
