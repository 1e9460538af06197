// tutorials/16_online_softmax.cpp — Tutorial 16: the online softmax — attention without the attention matrix.
//
// softmax(s) . v needs all S scores of a row before the first weight is known: the
// maximum (for stability) and the sum (to normalise) are over the whole row. The online
// softmax reads the keys in tiles and keeps, per query row, only
//   m  the largest score so far,
//   l  the sum of exp(s_j - m) so far,
//   o  the sum of exp(s_j - m) v_j so far (a D-vector).
// When a tile brings a larger maximum m', the old l and o were computed against m, so
// both are multiplied by exp(m - m') before the tile's own terms are added. After the
// last tile, output = o / l: the same numbers, without ever holding S weights. This is
// the memory-efficient path of the library (AttentionPath::memory_efficient, FlashAttention
// on the CPU); docs/16-online-softmax.md explains it at length.
//
// Legend: S = source length (keys), D = head_dim, L = target length, N = batch,
// E = embed_dim, H = heads.
#include "arguments.hpp"

#include "tutorial.hpp"

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

// softmax(s) . v the usual way: all S weights at once. s (S), v (S, D) -> (D)
xt::xarray<double> softmax_then_v(const xt::xarray<double>& s, const xt::xarray<double>& v) {
  const std::size_t S = s.size(), D = v.shape(1);
  double m = -inf, l = 0;
  for (std::size_t j = 0; j < S; ++j) m = std::fmax(m, s(j));
  for (std::size_t j = 0; j < S; ++j) l += std::exp(s(j) - m);
  xt::xarray<double> out = xt::zeros<double>({D});
  for (std::size_t j = 0; j < S; ++j)
    for (std::size_t d = 0; d < D; ++d) out(d) += std::exp(s(j) - m) / l * v(j, d);
  return out;
}

// The result of the online softmax, and how many tiles after the first raised the running
// maximum (each such tile rescales what was summed before it; with none, nothing is).
struct Online {
  xt::xarray<double> out;  // (D)
  std::size_t rescales = 0;
};

// The same, tile by tile, with the running (m, l, o). With rescale=false it forgets to
// rescale l and o when the maximum grows: the classic mistake.
Online online(const xt::xarray<double>& s, const xt::xarray<double>& v, std::size_t tile, bool rescale, bool print) {
  const std::size_t S = s.size(), D = v.shape(1);
  double m = -inf, l = 0;
  std::size_t rescales = 0;
  xt::xarray<double> o = xt::zeros<double>({D});
  for (std::size_t j0 = 0; j0 < S; j0 += tile) {
    const std::size_t j1 = std::min(S, j0 + tile);
    // 1) the tile's maximum, and the new running maximum
    double tile_max = -inf;
    for (std::size_t j = j0; j < j1; ++j) tile_max = std::fmax(tile_max, s(j));
    const double new_m = std::fmax(m, tile_max);
    if (new_m == -inf) continue;  // every score so far is -inf: nothing to add yet
    // 2) rescale what was summed against the old maximum: exp(m - m') (0 on the first tile)
    const double correction = rescale ? std::exp(m - new_m) : 1.0;
    rescales += m != -inf && new_m > m;
    l *= correction;
    o *= correction;
    // 3) the tile's own terms
    for (std::size_t j = j0; j < j1; ++j) {
      const double p = std::exp(s(j) - new_m);
      l += p;
      for (std::size_t d = 0; d < D; ++d) o(d) += p * v(j, d);
    }
    m = new_m;
    if (print)
      fmt::print("    keys [{}, {}): tile max {}  m {}  correction {}  l {}\n", j0, j1, tutorial::number(tile_max),
                 tutorial::number(m), tutorial::number(correction), tutorial::number(l));
  }
  return {o / l, rescales};  // a row that never saw a finite score: 0 / 0 = NaN, as softmax of all -inf
}

// One golden case through the memory-efficient path with need_weights=false, checked
// against PyTorch's attn_output and against the reference path.
void check_case(tutorial::Verdict& verdict, const std::string& name) {
  auto c = tutorial::load<float>(name);
  verdict.tolerance(c);
  c.forward.need_weights = false;  // attn_output does not depend on it; the path needs it off
  auto module = tutorial::reference_module(c);
  module.set_attention_path(mha::AttentionPath::memory_efficient);
  const auto out = mha::run_forward(module, c);
  tutorial::shape("attn_output (memory_efficient)", out.attn_output);
  verdict.matches("memory_efficient vs PyTorch's attn_output", out.attn_output, c.expected.at("attn_output"));
  module.set_attention_path(mha::AttentionPath::reference);
  verdict.matches("memory_efficient vs the reference path", out.attn_output, mha::run_forward(module, c).attn_output);
}

}  // namespace

int main(int argc, char** argv) try {
  cli::Arguments arguments{"Tutorial 16: the online softmax"};
  std::size_t tile = 3;
  // Every size from 1 up is right. Step 3's mistake shows only up to 6: the row's maximum
  // is key 6, and from 7 on it is in the first tile, so no later tile raises it.
  arguments.option("--tile", tile, "keys per tile in steps 2 and 3 (1 or more)").range(/*min=*/1);
  if (const auto stop = arguments.parse(argc, argv)) return *stop;  // --help, or a bad option
  mha::use_best_blas_kernel();  // OpenBLAS's best kernel for this CPU (README: the BLAS kernel)

  tutorial::title("16", "the online softmax",
                  "Demonstrates: softmax(s) . v computed tile by tile with a running maximum,\n"
                  "              sum and output, equal to the whole-row softmax; forgetting to\n"
                  "              rescale is wrong; the memory-efficient path matches PyTorch.");

  // One query row of 8 scores and a (8, 2) v; the maximum arrives late, in the last tile.
  const xt::xarray<double> s = {0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 4.0, 3.0};                          // (S)
  const xt::xarray<double> v = {{1, 0}, {0, 1}, {1, 1}, {2, 0}, {0, 2}, {-1, 1}, {1, -1}, {3, 3}};  // (S, D)
  tutorial::Verdict verdict;  // steps 1-4 in float64, held to the float32 goldens' tolerance
  verdict.tolerance(tutorial::load<float>("need_weights_false_f32"));

  tutorial::step(1, "softmax then v, the whole row at once");
  tutorial::values("scores s", s, 1, 8);
  tutorial::values("v^T (column j is key j's value)", xt::transpose(v), 2, 8);
  const auto whole = softmax_then_v(s, v);
  tutorial::values("softmax(s) . v", whole, 1, 2);

  tutorial::step(2, fmt::format("the same, {} keys at a time: running m, l and o", tile));
  const auto tiled = online(s, v, tile, /*rescale=*/true, /*print=*/true);
  tutorial::values("o / l", tiled.out, 1, 2);
  verdict.matches("online softmax vs whole-row softmax", tiled.out, whole);
  if (tile >= s.size())
    fmt::print("  One tile holds all {} keys: the maximum is known before any sum, nothing is rescaled.\n", s.size());

  tutorial::step(3, "forgetting exp(m - m') when the maximum grows");
  const auto wrong = online(s, v, tile, /*rescale=*/false, /*print=*/false);
  tutorial::values("o / l without rescaling", wrong.out, 1, 2);
  if (tiled.rescales > 0) {
    verdict.differs("without rescaling vs whole-row softmax", wrong.out, whole);
  } else {  // no tile after the first raised the maximum: every correction would be exp(0) = 1
    if (tile >= s.size()) fmt::print("  With one tile there is nothing to rescale: forgetting it changes nothing.\n");
    else
      fmt::print(
          "  The maximum ({:g}) is in the first tile, so no later tile raises it and every\n"
          "  correction is exp(0) = 1: forgetting it changes nothing here.\n",
          double(xt::amax(s)()));
    fmt::print("  The mistake shows when the maximum arrives after the first tile: --tile 6 or less.\n");
    verdict.matches("without rescaling vs whole-row softmax", wrong.out, whole);
  }

  tutorial::step(4, "a row whose keys are all masked");
  const xt::xarray<double> masked = xt::full_like(s, -inf);
  const auto nan_row = online(masked, v, tile, /*rescale=*/true, /*print=*/false);
  tutorial::values("o / l (l = 0, o = 0)", nan_row.out, 1, 2);
  verdict.holds("NaN, as softmax of a row of -inf", std::isnan(nan_row.out(0)) && std::isnan(nan_row.out(1)));

  tutorial::step(5, "the library's memory-efficient path against PyTorch");
  check_case(verdict, "need_weights_false_f32");
  check_case(verdict, "largest_e16_h4_f32");
  check_case(verdict, "attn_mask_bool_2d_key_padding_mask_bool_f32");
  check_case(verdict, "attn_mask_bool_2d_fully_masked_row");
  fmt::print(
      "  At L = S = 8192, N = 1, H = 8 the (N*H, L, S) float weights would take 2048 MiB;\n"
      "  this path holds one 128 x 256 tile of scores per thread instead.\n");

  return verdict.finish();
} catch (const std::exception& e) {  // a case this tutorial cannot take, or a file it cannot read
  fmt::print("error: {}\n", e.what());
  return 2;
}
