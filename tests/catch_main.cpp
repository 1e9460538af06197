// tests/catch_main.cpp — the one main() of the Catch2 test executables, in Catch2 v2 and v3. Like the tools,
// tutorials and benchmarks, it has OpenBLAS run its best kernel for this CPU first
// (mha::use_best_blas_kernel: the library itself switches nothing when it is imported;
// tests/host_program checks that).
#if MHA_CATCH2_MAJOR == 3
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

import mha;

int main(int argc, char* argv[]) {
  mha::use_best_blas_kernel();
  return Catch::Session().run(argc, argv);
}
