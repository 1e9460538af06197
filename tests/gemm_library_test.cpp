// tests/gemm_library_test.cpp — which library multiplies the float matrices (platform/gemm_library.hpp): oneDNN for the large ones
// where the build has it, OpenBLAS for the rest; the same forward and backward either way,
// both held to float64; and the caller's OpenMP setting left as it was found.
#include "support.hpp"

#if MHA_ONEDNN
// GCC's libgomp, which oneDNN runs on (clang has no omp.h for it).
extern "C" int omp_get_max_threads(void);
extern "C" void omp_set_num_threads(int num_threads);
#endif

namespace {

using mha::AttentionPath;
using mha::GemmLibrary;

// Large enough that every GEMM of the forward and backward is past oneDNN's threshold of
// 256K multiply-adds: the in-projection (L*N, E) x (E, 3E) = 192 x 128 x 384, q.k^T and P.v
// per head (L, D) x (D, S) = 96 x 64 x 96 = 590K.
constexpr std::size_t L = 96, N = 2, E = 128, H = 2;

TEST_CASE("float GEMMs run on oneDNN where the build has it, and only past its threshold") {
  mha::set_num_threads(2);
  const GemmLibrary built = mha::onednn_version() ? GemmLibrary::onednn : GemmLibrary::openblas;
  REQUIRE(mha::gemm_library() == built);
  // 64 x 64 x 64 = 262144 multiply-adds, the threshold itself; one row fewer is below it.
  REQUIRE(mha::testing::gemm_library_for(64, 64, 64) == built);
  REQUIRE(mha::testing::gemm_library_for(63, 64, 64) == GemmLibrary::openblas);
  REQUIRE(mha::testing::gemm_library_for(16, 16, 16) == GemmLibrary::openblas);

  mha::use_gemm_library(GemmLibrary::openblas);
  REQUIRE(mha::testing::gemm_library_for(1024, 1024, 1024) == GemmLibrary::openblas);
  mha::use_gemm_library(built);
  REQUIRE(mha::gemm_library() == built);
}

TEST_CASE("use_gemm_library refuses oneDNN in a build without it, naming the argument") {
  if (mha::onednn_version()) {
    REQUIRE_NOTHROW(mha::use_gemm_library(GemmLibrary::onednn));
    return;
  }
  REQUIRE_THROWS_WITH(mha::use_gemm_library(GemmLibrary::onednn),
                      "library: expected a library this build has (OpenBLAS; oneDNN with MHA_ONEDNN=ON), got oneDNN");
  REQUIRE(mha::gemm_library() == GemmLibrary::openblas);
}

// A float64 copy of a float module: the same parameters, widened exactly.
mha::MultiheadAttention<double> widened(const mha::MultiheadAttention<float>& m, const mha::Options& o) {
  mha::MultiheadAttention<double> wide(o, /*seed=*/0);
  for (const auto& name : m.parameter_names()) wide.set_parameter(name, xt::xarray<double>(m.parameter(name)));
  return wide;
}

// The forward's output and weights, and the backward's gradients, in float, on `library`.
struct Results {
  xt::xarray<float> output, weights;
  std::map<std::string, xt::xarray<float>> gradients;
};

Results run_on(GemmLibrary library, mha::MultiheadAttention<float> m, const xt::xarray<float>& x,
               const xt::xarray<float>& grad) {
  mha::use_gemm_library(library);
  Results r;
  m.eval();
  auto out = m.forward(x, x, x);  // need_weights=true, averaged over heads
  r.output = out.attn_output;
  r.weights = mha_test::weights(std::move(out));
  m.train();
  mha::ForwardOptions<float> opts;
  opts.need_weights = false;
  const auto [output, record] = m.forward_for_backward(x, x, x, opts);
  const auto g = m.backward(record, grad);
  r.gradients["query"] = mha_test::value_of(g.query, "query gradient");
  for (const auto& [name, value] : g.parameters) r.gradients[name] = value;
  return r;
}

TEST_CASE("oneDNN and OpenBLAS give the same float forward and backward, both held to float64") {
  mha::set_num_threads(2);
  mha::Options o;
  o.embed_dim = E, o.num_heads = H;
  mha::MultiheadAttention<float> m(o, /*seed=*/7);
  m.set_attention_path(AttentionPath::fast);
  mha::Generator g(11);
  const xt::xarray<float> x = mha_test::random_tensor<float>({L, N, E}, g);     // (L, N, E)
  const xt::xarray<float> grad = mha_test::random_tensor<float>({L, N, E}, g);  // (L, N, E)

  // The float64 reference path: what both float results are held to.
  auto wide = widened(m, o);
  wide.set_attention_path(AttentionPath::reference);
  const xt::xarray<double> x64 = x, grad64 = grad;
  wide.eval();
  auto out64 = wide.forward(x64, x64, x64);
  const xt::xarray<double> output64 = out64.attn_output, weights64 = mha_test::weights(std::move(out64));
  wide.train();
  mha::ForwardOptions<double> opts64;
  opts64.need_weights = false;
  const auto g64 = wide.backward(wide.forward_for_backward(x64, x64, x64, opts64).second, grad64);

  const GemmLibrary built = mha::onednn_version() ? GemmLibrary::onednn : GemmLibrary::openblas;
  for (const GemmLibrary library : {GemmLibrary::openblas, built}) {
    INFO("float GEMMs on " << mha::to_string(library));
    const Results r = run_on(library, m, x, grad);
    // float32 against float64: sums of E = 128 products of values near 1 round to a few
    // 1e-6 relative in float32; 2e-5 leaves room for the softmax and the backward's chains,
    // and is still 50x below the smallest error a wrong operand or transposition makes.
    constexpr double rtol = 2e-5, atol = 2e-5;
    mha_test::require_close("attn_output", r.output, output64, rtol, atol);
    mha_test::require_close("attn_output_weights", r.weights, weights64, rtol, atol);
    mha_test::require_close("query gradient", r.gradients.at("query"), mha_test::value_of(g64.query, "query"), rtol,
                            atol);
    for (const auto& [name, value] : g64.parameters)
      mha_test::require_close(name, r.gradients.at(name), value, rtol, atol);
  }
  mha::use_gemm_library(built);
}

// The fast forward's float projections run on oneDNN's matmul, with W^T reordered once per
// version of the weights (platform/packed_linear.hpp); the readable path's run on dnnl_sgemm with the
// bias copied in first. Both are held to each other after every kind of change a module's
// weights can go through, for self-attention, key is value, three inputs and separate
// projection weights, and at 75 row counts: more than the 64 matmuls a packed weight keeps,
// so the last ones run on dnnl_sgemm again.
TEST_CASE("the float projections on oneDNN follow every change of the weights, at every row count") {
  mha::set_num_threads(2);
  mha::Generator g(21);
  const bool separate = GENERATE(false, true);
  mha::Options o;
  o.embed_dim = E, o.num_heads = H, o.separate_projections = separate;
  INFO((separate ? "separate projection weights" : "packed in_proj_weight"));
  mha::MultiheadAttention<float> fast(o, /*seed=*/5);
  fast.set_attention_path(AttentionPath::fast);
  auto reference = [&](const xt::xarray<float>& q, const xt::xarray<float>& k, const xt::xarray<float>& v) {
    auto r = fast;
    r.set_attention_path(AttentionPath::reference);
    return r.forward(q, k, v).attn_output;
  };
  // float32 against float32 in another order (bias after the products, other kernels):
  // a few 1e-6 relative, as in the test above; a stale or misplaced weight is off by O(1).
  constexpr double rtol = 2e-5, atol = 2e-5;
  const xt::xarray<float> x = mha_test::random_tensor<float>({L, N, E}, g);        // (L, N, E)
  const xt::xarray<float> memory = mha_test::random_tensor<float>({80, N, E}, g);  // (S, N, E)
  const xt::xarray<float> value = mha_test::random_tensor<float>({80, N, E}, g);   // (S, N, E)
  auto check_every_input = [&](const std::string& when) {
    INFO(when);
    mha_test::require_close("self-attention", fast.forward(x, x, x).attn_output, reference(x, x, x), rtol, atol);
    mha_test::require_close("key is value", fast.forward(x, memory, memory).attn_output, reference(x, memory, memory),
                            rtol, atol);
    mha_test::require_close("three inputs", fast.forward(x, memory, value).attn_output, reference(x, memory, value),
                            rtol, atol);
  };
  check_every_input("the weights it was made with");
  for (const auto& name : fast.parameter_names()) {
    const auto before = fast.forward(x, memory, value).attn_output;
    // new values of the initial weights' size (1 / sqrt(E)): values near 1 would make
    // scores of ~sqrt(E) whose softmax magnifies the last bits past any float tolerance
    const xt::xarray<float> w = mha_test::random_tensor<float>(fast.parameter_shape(name), g) / std::sqrt(float(E));
    fast.set_parameter(name, w);
    REQUIRE_FALSE(xt::allclose(fast.forward(x, memory, value).attn_output, before, rtol, atol));
    check_every_input("after set_parameter(\"" + name + "\")");
  }
  // L = 6 .. 80 with N = 1 on one thread: every in-projection of at least 6 x 384 x 128
  // multiply-adds, past oneDNN's threshold, and each a GEMM of its own row count.
  mha::set_num_threads(1);
  for (std::size_t len = 6; len <= 80; ++len) {
    INFO("L = " << len);
    const xt::xarray<float> seq = xt::view(x, xt::range(0, len), xt::range(0, 1), xt::all());  // (len, 1, E)
    mha_test::require_close("self-attention", fast.forward(seq, seq, seq).attn_output, reference(seq, seq, seq), rtol,
                            atol);
  }
  mha::set_num_threads(2);
}

#if MHA_ONEDNN
// oneDNN threads its GEMMs with OpenMP as the calling thread's setting says; the library
// holds it to one thread for each call. Whatever the caller had set stays set.
TEST_CASE("a forward on oneDNN leaves the caller's OpenMP thread count as it was") {
  mha::set_num_threads(1);  // the GEMMs run on this thread, where the setting lives
  REQUIRE(mha::testing::gemm_library_for(L * N, 3 * E, E) == GemmLibrary::onednn);
  const int before = omp_get_max_threads();
  omp_set_num_threads(3);
  mha::Options o;
  o.embed_dim = E, o.num_heads = H;
  mha::MultiheadAttention<float> m(o, /*seed=*/3);
  m.eval();
  mha::Generator g(5);
  const xt::xarray<float> x = mha_test::random_tensor<float>({L, N, E}, g);  // (L, N, E)
  const auto out = m.forward(x, x, x);
  REQUIRE(out.attn_output.shape(0) == L);
  REQUIRE(omp_get_max_threads() == 3);
  omp_set_num_threads(before);
  mha::set_num_threads(2);
}
#endif

}  // namespace
