// tutorials/01_worked_example.cpp — Tutorial 01: the whole forward on numbers small enough to do by hand.
//
// E = 4, H = 2 heads of D = 2, L = S = 3 positions, one batch entry, self-attention; every
// weight and input is a small integer (golden case worked_example_f64, written out in
// golden/generator/case_tensors.py, WORKED_EXAMPLE). The program prints every
// intermediate of multi_head_attention_forward, computed with plain loops, and checks q,
// k, v, the weights and the output against what PyTorch computed for the same numbers.
// docs/01-worked-example.md does the first rows by hand.
//
// Legend: L = target length, S = source length (= L), E = embed_dim, H = heads, D = E / H.
#include "arguments.hpp"

#include "tutorial.hpp"

namespace {

using Matrix = xt::xtensor<double, 2>;

// y = x W^T + b, written out: y(i, o) = b(o) + sum_c x(i, c) W(o, c). (L, in) -> (L, out)
Matrix linear(const Matrix& x, const Matrix& W, const xt::xtensor<double, 1>& b) {
  Matrix y({x.shape(0), W.shape(0)});
  for (std::size_t i = 0; i < x.shape(0); ++i)
    for (std::size_t o = 0; o < W.shape(0); ++o) {
      double sum = b(o);
      for (std::size_t c = 0; c < x.shape(1); ++c) sum += x(i, c) * W(o, c);
      y(i, o) = sum;
    }
  return y;
}

// Columns [h*D, (h+1)*D) of x: head h. (L, E) -> (L, D)
Matrix head(const Matrix& x, std::size_t h, std::size_t D) {
  return xt::view(x, xt::all(), xt::range(h * D, (h + 1) * D));
}

// scores(i, j) = q_i . k_j. (L, D) x (D, S) -> (L, S)
Matrix q_dot_k(const Matrix& q, const Matrix& k) {
  Matrix s({q.shape(0), k.shape(0)});
  for (std::size_t i = 0; i < q.shape(0); ++i)
    for (std::size_t j = 0; j < k.shape(0); ++j) {
      double dot = 0;
      for (std::size_t d = 0; d < q.shape(1); ++d) dot += q(i, d) * k(j, d);
      s(i, j) = dot;
    }
  return s;
}

// Softmax of each row: exp(s_ij - max_i) / sum_j exp(s_ij - max_i). (L, S) -> (L, S)
Matrix softmax_rows(const Matrix& s) {
  Matrix p(s.shape());
  for (std::size_t i = 0; i < s.shape(0); ++i) {
    const double max = xt::amax(xt::view(s, i))();
    double sum = 0;
    for (std::size_t j = 0; j < s.shape(1); ++j) sum += p(i, j) = std::exp(s(i, j) - max);
    for (std::size_t j = 0; j < s.shape(1); ++j) p(i, j) /= sum;
  }
  return p;
}

// out(i, d) = sum_j p(i, j) v(j, d). (L, S) x (S, D) -> (L, D)
Matrix weighted_sum(const Matrix& p, const Matrix& v) {
  Matrix out = xt::zeros<double>({p.shape(0), v.shape(1)});
  for (std::size_t i = 0; i < p.shape(0); ++i)
    for (std::size_t j = 0; j < p.shape(1); ++j)
      for (std::size_t d = 0; d < v.shape(1); ++d) out(i, d) += p(i, j) * v(j, d);
  return out;
}

// Rows [block*E, (block+1)*E) of in_proj_weight and the same third of in_proj_bias.
std::pair<Matrix, xt::xtensor<double, 1>> block(const Matrix& W, const xt::xtensor<double, 1>& b, std::size_t i) {
  const std::size_t E = W.shape(1);
  return {xt::view(W, xt::range(i * E, (i + 1) * E), xt::all()), xt::view(b, xt::range(i * E, (i + 1) * E))};
}

}  // namespace

int main(int argc, char** argv) try {
  cli::Arguments arguments{"Tutorial 01: a worked example, every intermediate printed"};
  if (const auto stop = arguments.parse(argc, argv)) return *stop;  // --help, or a bad option
  mha::use_best_blas_kernel();  // OpenBLAS's best kernel for this CPU (README: the BLAS kernel)
  tutorial::title("01", "a worked example",
                  "Demonstrates: the whole forward on small integers, every intermediate printed,\n"
                  "              each one what PyTorch computes for the same numbers.");
  const auto c = tutorial::load<double>("worked_example_f64");
  tutorial::Verdict verdict(c);
  const Matrix x = xt::view(c.query, xt::all(), 0, xt::all());  // (L, E): the one batch entry
  const Matrix W = tutorial::parameter(c, "in_proj_weight");    // (3E, E)
  const xt::xtensor<double, 1> b = tutorial::parameter(c, "in_proj_bias");
  const std::size_t L = x.shape(0), E = x.shape(1), H = 2, D = E / H;

  tutorial::step(1, "the numbers: x, and in_proj_weight's three row blocks");
  tutorial::values("x = query[:, 0, :] (L, E)", x);
  const auto [W_q, b_q] = block(W, b, 0);
  const auto [W_k, b_k] = block(W, b, 1);
  const auto [W_v, b_v] = block(W, b, 2);
  tutorial::values("W_q = in_proj_weight[0:4]", W_q);
  tutorial::values("W_k = in_proj_weight[4:8]", W_k);
  tutorial::values("W_v = in_proj_weight[8:12]", W_v);
  tutorial::values("b_v = in_proj_bias[8:12] (b_q = b_k = 0)", b_v);

  tutorial::step(2, "in-projection: q = x W_q^T + b_q, and k, v likewise");
  const Matrix q = linear(x, W_q, b_q), k = linear(x, W_k, b_k), v = linear(x, W_v, b_v);  // (L, E) each
  tutorial::values("q (L, E)", q);
  tutorial::values("k (S, E)", k);
  tutorial::values("v (S, E)", v);
  verdict.matches("q vs PyTorch's q", q, xt::view(c.expected.at("q"), xt::all(), 0, xt::all()));
  verdict.matches("k vs PyTorch's k", k, xt::view(c.expected.at("k"), xt::all(), 0, xt::all()));
  verdict.matches("v vs PyTorch's v", v, xt::view(c.expected.at("v"), xt::all(), 0, xt::all()));

  Matrix concat({L, E});  // the heads' outputs side by side
  Matrix mean_weights = xt::zeros<double>({L, L});
  const double scale = std::sqrt(1.0 / double(D));
  for (std::size_t h = 0; h < H; ++h) {
    tutorial::step(3 + int(h), fmt::format("head {}: columns [{}, {}) of q, k and v", h, h * D, (h + 1) * D));
    const Matrix qh = head(q, h, D), kh = head(k, h, D), vh = head(v, h, D);  // (L, D) each
    const Matrix scores = q_dot_k(qh, kh);                                    // (L, S)
    tutorial::values("q_h . k_h^T: integers (L, S)", scores);
    const Matrix scaled = scores * scale;
    fmt::print("  times sqrt(1/D) = sqrt(1/2) = {:.4f}\n", scale);
    tutorial::values("scores (L, S)", scaled);
    const Matrix p = softmax_rows(scaled);
    tutorial::values("weights = softmax of each row (L, S)", p);
    const Matrix out = weighted_sum(p, vh);
    tutorial::values("weights . v_h (L, D)", out);
    xt::view(concat, xt::all(), xt::range(h * D, (h + 1) * D)) = out;
    mean_weights += p / double(H);
  }

  tutorial::step(5, "heads side by side, then out_proj");
  tutorial::values("heads concatenated (L, E)", concat);
  const Matrix W_o = tutorial::parameter(c, "out_proj.weight");
  const xt::xtensor<double, 1> b_o = tutorial::parameter(c, "out_proj.bias");
  tutorial::values("out_proj.weight (E, E)", W_o);
  tutorial::values("out_proj.bias (E)", b_o);
  const Matrix y = linear(concat, W_o, b_o);  // (L, E)
  tutorial::values("attn_output = concat W_o^T + b_o (L, E)", y);
  tutorial::values("attn_output_weights: the heads' mean (L, S)", mean_weights);
  verdict.matches("attn_output vs PyTorch's", y, xt::view(c.expected.at("attn_output"), xt::all(), 0, xt::all()));
  verdict.matches("attn_output_weights vs PyTorch's", mean_weights,
                  xt::view(c.expected.at("attn_output_weights"), 0, xt::all(), xt::all()));

  tutorial::step(6, "the library's reference forward on the same numbers");
  auto module = tutorial::reference_module(c);
  const auto forward = mha::run_forward(module, c);
  verdict.matches("forward(): attn_output vs the loops above", xt::view(forward.attn_output, xt::all(), 0, xt::all()),
                  y);
  return verdict.finish();
} catch (const std::exception& e) {
  fmt::print("error: {}\n", e.what());
  return 2;
}
