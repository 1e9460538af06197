// tests/blas_test.cpp — the OpenBLAS kernel: the best this CPU runs, chosen by its features and not by a table
// of CPU models; the user's OPENBLAS_CORETYPE obeyed; and the results PyTorch's with any
// kernel. CTest runs this file twice: as it is, and with OPENBLAS_CORETYPE=Prescott (the
// "[forced]" test, hidden otherwise), the generic kernel a CPU newer than OpenBLAS 0.3.21 gets.
#include "support.hpp"

namespace {

using mha::SimdLevel;

TEST_CASE("better_blas_kernel: a CPU newer than OpenBLAS's table gets the kernel its features run") {
  // An AVX-512 Xeon that OpenBLAS 0.3.21 does not know (family 6, model 207) gets Prescott.
  REQUIRE(mha::testing::better_blas_kernel("Prescott", SimdLevel::avx512, /*user_chose=*/false) == "SkylakeX");
  // An AVX2 CPU on the generic kernel, and an AVX-512 one (Zen 4) on the AVX2 kernel.
  REQUIRE(mha::testing::better_blas_kernel("Prescott", SimdLevel::avx2, false) == "Haswell");
  REQUIRE(mha::testing::better_blas_kernel("Zen", SimdLevel::avx512, false) == "SkylakeX");
  REQUIRE(mha::testing::better_blas_kernel("Nehalem", SimdLevel::avx, false) == "Sandybridge");
}

TEST_CASE("better_blas_kernel keeps a kernel that already fits, the user's choice, and names it does not know") {
  REQUIRE_FALSE(mha::testing::better_blas_kernel("Haswell", SimdLevel::avx2, false).has_value());
  REQUIRE_FALSE(mha::testing::better_blas_kernel("Zen", SimdLevel::avx2, false).has_value());
  REQUIRE_FALSE(mha::testing::better_blas_kernel("SkylakeX", SimdLevel::avx512, false).has_value());
  REQUIRE_FALSE(mha::testing::better_blas_kernel("Prescott", SimdLevel::sse2, false).has_value());
  REQUIRE_FALSE(mha::testing::better_blas_kernel("Prescott", SimdLevel::avx512, /*user_chose=*/true).has_value());
  REQUIRE_FALSE(mha::testing::better_blas_kernel("SomeFutureCore", SimdLevel::avx512, false).has_value());
}

TEST_CASE("the kernel in use runs this CPU's best SIMD level, unless OPENBLAS_CORETYPE chose it") {
  const auto& kernel = mha::blas_kernel();
  INFO("kernel " << kernel.name << ", chosen by " << kernel.chosen_by << ", CPU "
                 << mha::to_string(mha::cpu_simd_level()));
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) {
    REQUIRE(kernel.chosen_by == "OPENBLAS_CORETYPE");
    return;
  }
  const auto level = mha::testing::blas_kernel_simd_level(kernel.name);
  REQUIRE(level.has_value());
  REQUIRE(*level == mha::cpu_simd_level());
}

TEST_CASE("use_blas_kernel refuses a name it does not know and a kernel this CPU cannot run") {
  const std::string before = mha::blas_kernel().name;
  REQUIRE_THROWS_WITH(mha::use_blas_kernel("Pentium"),
                      "kernel: expected an OpenBLAS kernel name such as Haswell or SkylakeX, got 'Pentium'");
  if (mha::cpu_simd_level() < SimdLevel::avx512)
    REQUIRE_THROWS_WITH(mha::use_blas_kernel("SkylakeX"),
                        Catch::Matchers::StartsWith("kernel: expected a kernel this CPU runs"));
  REQUIRE(mha::blas_kernel().name == before);
}

// Started with OPENBLAS_CORETYPE=Prescott (see tests/CMakeLists.txt): the user's choice is
// kept at start-up; switching to the best kernel then works, gives PyTorch's numbers, and
// leaves the user's environment as it was.
TEST_CASE("OPENBLAS_CORETYPE is obeyed, and switching kernels keeps PyTorch's results", "[.forced]") {
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  REQUIRE(forced != nullptr);
  REQUIRE(mha::blas_kernel().name == forced);
  REQUIRE(mha::blas_kernel().chosen_by == "OPENBLAS_CORETYPE");

  const auto c = mha_test::load<float>("self_seqfirst_f32");
  auto run = [&] {  // both variants, the fast path: a GEMM for every projection and head
    std::vector<xt::xarray<float>> outputs;
    for (auto& [variant, module] : mha::variants(c)) {
      module.eval();
      module.set_attention_path(mha::AttentionPath::fast);
      outputs.push_back(mha::run_forward(module, c).attn_output);
    }
    return outputs;
  };
  const auto on_forced = run();

  const std::string best = mha::testing::blas_kernel_for(mha::cpu_simd_level());
  mha::use_blas_kernel(best);
  REQUIRE(mha::blas_kernel().name == best);
  REQUIRE(std::string(std::getenv("OPENBLAS_CORETYPE")) == forced);  // the user's variable, untouched
  const auto on_best = run();
  // PyTorch's float32 tolerances (rtol 1.3e-6, atol 1e-5): both kernels within them.
  for (std::size_t i = 0; i < on_best.size(); ++i) {
    mha_test::require_close<float>("attn_output on " + best, on_best[i], c.expected.at("attn_output"), 1.3e-6, 1e-5);
    mha_test::require_close<float>(std::string("attn_output on ") + forced, on_forced[i], c.expected.at("attn_output"),
                                   1.3e-6, 1e-5);
  }
}

}  // namespace
