// tutorials/03_projections_by_hand.cpp — Tutorial 03: the projections by hand, and the two mistakes everyone makes once.
//
// q = x W_q^T + b_q, k = x W_k^T + b_k, v = x W_v^T + b_v, with W_q, W_k, W_v the row
// blocks [0, E), [E, 2E), [2E, 3E) of in_proj_weight (tutorial 02). This program writes
// the product out as three loops, compares q, k and v with PyTorch's own (the golden
// case records what _in_projection_packed returned), and shows that
//   - the wrong order (rows [0, E) taken as K, rows [E, 2E) as Q) does not match;
//   - x W without the transpose does not match either (W_q is square, so it even runs).
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim.
#include "arguments.hpp"

#include "tutorial.hpp"

namespace {

// y(i, n, o) = b(o) + sum_c x(i, n, c) W(o, c), i.e. y = x W^T + b: row o of W is the
// weight vector of output feature o. With transpose = false it computes x W instead,
// y(i, n, o) = b(o) + sum_c x(i, n, c) W(c, o): the mistake. (L, N, E) -> (L, N, E)
template <class T>
xt::xtensor<T, 3> project(const xt::xtensor<T, 3>& x, const xt::xtensor<T, 2>& W, const xt::xtensor<T, 1>& b,
                          bool transpose) {
  const std::size_t L = x.shape(0), N = x.shape(1), Ein = x.shape(2), Eout = W.shape(0);
  xt::xtensor<T, 3> y({L, N, Eout});
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t n = 0; n < N; ++n)
      for (std::size_t o = 0; o < Eout; ++o) {
        double sum = b(o);
        for (std::size_t c = 0; c < Ein; ++c) sum += double(x(i, n, c)) * double(transpose ? W(o, c) : W(c, o));
        y(i, n, o) = static_cast<T>(sum);
      }
  return y;
}

// Rows [block E, (block + 1) E) of in_proj_weight, and the same third of in_proj_bias.
template <class T>
std::pair<xt::xtensor<T, 2>, xt::xtensor<T, 1>> block(const xt::xtensor<T, 2>& W, const xt::xtensor<T, 1>& b,
                                                      std::size_t i) {
  const std::size_t E = W.shape(1);
  return {xt::view(W, xt::range(i * E, (i + 1) * E), xt::all()), xt::view(b, xt::range(i * E, (i + 1) * E))};
}

template <class T>
int run(const std::string& case_name) {
  const auto c = tutorial::load<T>(case_name);
  const bool bf = c.info.options.batch_first;
  const xt::xtensor<T, 3> query = mha::textbook::to_seq_first_batched(c.query, bf);  // (L, N, E)
  const xt::xtensor<T, 3> key = mha::textbook::to_seq_first_batched(c.key, bf);      // (S, N, E)
  const xt::xtensor<T, 3> value = mha::textbook::to_seq_first_batched(c.value, bf);  // (S, N, E)
  const xt::xtensor<T, 2> W = tutorial::parameter(c, "in_proj_weight");              // (3E, E)
  const bool has_bias = c.parameters.contains("in_proj_bias");                       // bias=False: none
  const xt::xtensor<T, 1> b = has_bias ? xt::xtensor<T, 1>(c.parameters.at("in_proj_bias"))
                                       : xt::xtensor<T, 1>(xt::zeros<T>({W.shape(0)}));  // (3E)

  tutorial::step(1, "the inputs and the packed weight");
  tutorial::shape("query (L, N, E)", query);
  tutorial::shape("key (S, N, E)", key);
  tutorial::shape("value (S, N, E)", value);
  tutorial::shape("in_proj_weight (3E, E)", W);
  if (has_bias) tutorial::shape("in_proj_bias (3E)", b);
  else fmt::print("  no in_proj_bias (bias=False): b_q = b_k = b_v = 0\n");
  tutorial::values("query[:, 0, :] (batch 0)", xt::view(query, xt::all(), 0, xt::all()));

  tutorial::step(2, "the right way: x W^T + b with blocks Q, K, V in that order");
  const auto [w_q, b_q] = block(W, b, 0);  // (E, E), (E)
  const auto [w_k, b_k] = block(W, b, 1);
  const auto [w_v, b_v] = block(W, b, 2);
  const auto q = project(query, w_q, b_q, /*transpose=*/true);  // (L, N, E) x (E, E)^T -> (L, N, E)
  const auto k = project(key, w_k, b_k, /*transpose=*/true);    // (S, N, E)
  const auto v = project(value, w_v, b_v, /*transpose=*/true);  // (S, N, E)
  tutorial::shape("q = query W_q^T + b_q", q);
  tutorial::shape("k = key W_k^T + b_k", k);
  tutorial::shape("v = value W_v^T + b_v", v);
  tutorial::values("q[:, 0, :] (ours)", xt::view(q, xt::all(), 0, xt::all()), 2);
  tutorial::values("q[:, 0, :] (PyTorch)", xt::view(c.expected.at("q"), xt::all(), 0, xt::all()), 2);
  tutorial::Verdict verdict(c);
  verdict.matches("q = query W_q^T + b_q vs PyTorch's q", q, c.expected.at("q"));
  verdict.matches("k = key W_k^T + b_k vs PyTorch's k", k, c.expected.at("k"));
  verdict.matches("v = value W_v^T + b_v vs PyTorch's v", v, c.expected.at("v"));

  tutorial::step(3, "mistake 1: the order K -> Q -> V (rows [E, 2E) taken as Q)");
  const auto q_wrong_order = project(query, w_k, b_k, /*transpose=*/true);
  const auto k_wrong_order = project(key, w_q, b_q, /*transpose=*/true);
  tutorial::values("q[:, 0, :] from the K rows", xt::view(q_wrong_order, xt::all(), 0, xt::all()), 2);
  verdict.differs("q from rows [E, 2E) vs PyTorch's q", q_wrong_order, c.expected.at("q"));
  verdict.differs("k from rows [0, E) vs PyTorch's k", k_wrong_order, c.expected.at("k"));

  tutorial::step(4, "mistake 2: x W without the transpose");
  const auto q_no_transpose = project(query, w_q, b_q, /*transpose=*/false);
  tutorial::values("q[:, 0, :] = query W_q + b_q", xt::view(q_no_transpose, xt::all(), 0, xt::all()), 2);
  if (xt::all(xt::equal(w_q, xt::transpose(w_q)))) {  // E = 1, or a W_q made symmetric on purpose
    fmt::print(
        "  This W_q is symmetric (W_q = W_q^T), so x W_q is x W_q^T: the mistake cannot\n"
        "  show here. With a W_q that is not symmetric it does (the default case).\n");
    verdict.matches("query W_q + b_q vs PyTorch's q (W_q symmetric)", q_no_transpose, c.expected.at("q"));
  } else {
    verdict.differs("query W_q + b_q vs PyTorch's q", q_no_transpose, c.expected.at("q"));
    fmt::print(
        "  W_q is square (E, E), so x W_q has the right shape and still runs:\n"
        "  only the values give the mistake away.\n");
  }

  tutorial::step(5, "check against PyTorch");
  verdict.matches("mha::textbook::in_projection_packed vs PyTorch's q",
                  mha::textbook::in_projection_packed(query, key, value, W, std::optional(b)).q, c.expected.at("q"));
  return verdict.finish();
}

}  // namespace

int main(int argc, char** argv) try {
  cli::Arguments arguments{"Tutorial 03: the in-projection by hand"};
  std::string case_name = "cross_seqfirst_f32";
  arguments.option("--case", case_name, "golden case (packed, no expected error) to compare with");
  if (const auto stop = arguments.parse(argc, argv)) return *stop;  // --help, or a bad option
  mha::use_best_blas_kernel();  // OpenBLAS's best kernel for this CPU (README: the BLAS kernel)

  tutorial::title("03", "projections by hand",
                  "Demonstrates: q = x W_q^T + b_q (likewise k, v) equals PyTorch's q, k, v;\n"
                  "              the K->Q->V order and x W without the transpose do not.");
  const auto info = mha::read_case_info(tutorial::case_dir(case_name));
  tutorial::refuse_error_case(info);
  return info.dtype == "float32" ? run<float>(case_name) : run<double>(case_name);
} catch (const std::exception& e) {  // a case this tutorial cannot take, or a file it cannot read
  fmt::print("error: {}\n", e.what());
  return 2;
}
