// tutorials/02_packed_layout.cpp — Tutorial 02: the packed layout of in_proj_weight.
//
// nn.MultiheadAttention keeps W_q, W_k and W_v in ONE parameter, in_proj_weight (3E, E):
// rows [0, E) are W_q, rows [E, 2E) are W_k, rows [2E, 3E) are W_v. This program builds a
// tiny module (E = 4, H = 2) whose weights are readable, W(r, c) = 0.01 r + 0.001 c, so a
// weight's value tells you its row and column; prints the packed matrix with its three
// blocks marked; splits it and packs it back; shows that xavier initialisation runs over
// the whole (3E, E) matrix (fan_out = 3E). Then it checks the same split on a module
// PyTorch made (golden case self_seqfirst_f32): each block must be the rows named above,
// and query W_q^T + b_q must give PyTorch's own q. The state_dict keys come out too.
//
// Legend: E = embed_dim, H = heads, L = target length, N = batch.
#include "arguments.hpp"
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xsort.hpp>

#include "tutorial.hpp"

namespace {

// The readable weight: the number at (row, col) is 0.01 row + 0.001 col. (rows, cols)
xt::xtensor<double, 2> readable_weight(std::size_t rows, std::size_t cols) {
  xt::xtensor<double, 2> w({rows, cols});
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) w(r, c) = 0.01 * static_cast<double>(r) + 0.001 * static_cast<double>(c);
  return w;
}

// Prints the (3E, E) matrix with each row's block (W_q, W_k, W_v) and row number.
void print_packed(const xt::xtensor<double, 2>& w) {
  const std::size_t E = w.shape(1);
  const char* block[] = {"W_q", "W_k", "W_v"};
  for (std::size_t r = 0; r < w.shape(0); ++r) {
    if (r % E == 0) fmt::print("   {:-<40}\n", fmt::format("- {} (rows {}..{}) ", block[r / E], r, r + E - 1));
    std::string line = fmt::format("   row {:2} |", r);
    for (std::size_t c = 0; c < E; ++c) line += fmt::format(" {:6.3f}", w(r, c));
    fmt::print("{}\n", line);
  }
}

}  // namespace

int main(int argc, char** argv) try {
  cli::Arguments arguments{"Tutorial 02: the packed layout of in_proj_weight"};
  std::string case_name = "self_seqfirst_f32";
  arguments.option("--case", case_name, "golden case (packed, float32) to split");
  if (const auto stop = arguments.parse(argc, argv)) return *stop;  // --help, or a bad option
  mha::use_best_blas_kernel();  // OpenBLAS's best kernel for this CPU (README: the BLAS kernel)

  tutorial::title("02", "the packed layout",
                  "Demonstrates: in_proj_weight (3E, E) is W_q, W_k, W_v stacked by rows, in that order.");

  tutorial::step(1, "a tiny module: E = 4, H = 2, weights 0.01 row + 0.001 col");
  constexpr std::size_t E = 4;
  mha::MultiheadAttention<double> module(mha::Options{.embed_dim = E, .num_heads = 2});
  module.set_parameter("in_proj_weight", readable_weight(3 * E, E));
  for (const auto& name : module.parameter_names())
    fmt::print("  state_dict[{:<18}] {}\n", fmt::format("\"{}\"", name),
               mha::shape_string(module.parameter_shape(name)));

  tutorial::step(2, "in_proj_weight (3E, E) = (12, 4), blocks marked");
  const xt::xtensor<double, 2> w = module.parameter("in_proj_weight");
  print_packed(w);

  tutorial::step(3, "split into W_q, W_k, W_v: three (E, E) blocks of rows");
  const auto p =
      mha::textbook::split_packed(w, std::optional<xt::xtensor<double, 1>>(module.parameter("in_proj_bias")));
  tutorial::values("W_q = rows [0, E)", p.w_q);
  tutorial::values("W_k = rows [E, 2E)", p.w_k);
  tutorial::values("W_v = rows [2E, 3E)", p.w_v);
  fmt::print("  W_k(0, 0) = {:.3f}: row 4 of in_proj_weight, so K starts at row E.\n", p.w_k(0, 0));

  tutorial::step(4, "pack them back and compare");
  const auto packed = mha::textbook::pack(p);
  tutorial::shape("pack(W_q, W_k, W_v)", packed.in_proj_weight);
  tutorial::Verdict verdict;
  verdict.equal("pack(split(W)) == W", packed.in_proj_weight, w);

  tutorial::step(5, "initialisation: xavier_uniform over the whole (3E, E) matrix");
  // PyTorch's _reset_parameters runs xavier_uniform_ on in_proj_weight as ONE matrix:
  // fan_in = E, fan_out = 3E, bound = sqrt(6 / (E + 3E)). The separate variant initialises
  // each (E, E) block on its own: bound = sqrt(6 / (E + E)), sqrt(2) times larger.
  // PyTorch itself always packs when kdim == vdim == E; separate (E, E) projections at
  // kdim = E are this library's option (Options::separate_projections), which PyTorch
  // builds only when kdim or vdim differs from E (tutorial 10).
  constexpr std::size_t Ei = 64;
  const double packed_bound = std::sqrt(6.0 / (Ei + 3 * Ei)), block_bound = std::sqrt(6.0 / (Ei + Ei));
  const mha::MultiheadAttention<double> fresh(mha::Options{.embed_dim = Ei, .num_heads = 1}, /*seed=*/1);
  const mha::MultiheadAttention<double> fresh_separate(
      mha::Options{.embed_dim = Ei, .num_heads = 1, .separate_projections = true}, /*seed=*/1);
  const double packed_max = xt::amax(xt::abs(fresh.parameter("in_proj_weight")))();
  const double separate_max = xt::amax(xt::abs(fresh_separate.parameter("q_proj_weight")))();
  fmt::print("  E = {}: bound over (3E, E)  sqrt(6 / 4E) = {:.4f}\n", Ei, packed_bound);
  fmt::print("         bound over (E, E)   sqrt(6 / 2E) = {:.4f}\n", block_bound);
  fmt::print("  max |in_proj_weight| (packed module)      = {:.4f}\n", packed_max);
  fmt::print("  max |q_proj_weight|  (separate module)    = {:.4f}\n", separate_max);
  fmt::print(
      "  (PyTorch packs whenever kdim == vdim == E; the separate module at kdim = E is this\n"
      "   library's Options::separate_projections, PyTorch's layout when kdim or vdim != E)\n");
  verdict.holds("packed init within sqrt(6 / 4E)", packed_max <= packed_bound);
  verdict.holds("separate init beyond it, within sqrt(6 / 2E)",
                separate_max > packed_bound && separate_max <= block_bound);

  tutorial::step(6, "the same split on a module PyTorch made");
  const auto c = tutorial::load<float>(case_name);
  const xt::xtensor<float, 2> W = tutorial::parameter(c, "in_proj_weight");  // (3E, E)
  const xt::xtensor<float, 1> b = tutorial::parameter(c, "in_proj_bias");    // (3E)
  const std::size_t Ec = W.shape(1);
  tutorial::shape("in_proj_weight", W);
  tutorial::shape("in_proj_bias", b);
  const auto s = mha::textbook::split_packed(W, std::optional(b));
  const char* names[] = {"W_q", "W_k", "W_v"};
  const xt::xtensor<float, 2>* blocks[] = {&s.w_q, &s.w_k, &s.w_v};
  for (std::size_t i = 0; i < 3; ++i)
    verdict.equal(fmt::format("{} == in_proj_weight[{}:{}]", names[i], i * Ec, (i + 1) * Ec), *blocks[i],
                  xt::view(W, xt::range(i * Ec, (i + 1) * Ec), xt::all()));
  verdict.equal("pack(split(in_proj_weight)) == in_proj_weight", mha::textbook::pack(s).in_proj_weight, W);

  tutorial::step(7, "and PyTorch agrees that the first block is Q");
  const xt::xtensor<float, 3> x =
      mha::textbook::to_seq_first_batched(c.query, c.info.options.batch_first);  // (L, N, E)
  const auto q = mha::textbook::linear(x, s.w_q, s.b_q);                         // (L, N, E) x (E, E)^T -> (L, N, E)
  tutorial::shape("query W_q^T + b_q", q);
  verdict.tolerance(c);
  verdict.matches("query W_q^T + b_q vs PyTorch's q", q, c.expected.at("q"));
  return verdict.finish();
} catch (const std::exception& e) {  // a case this tutorial cannot take, or a file it cannot read
  fmt::print("error: {}\n", e.what());
  return 2;
}
