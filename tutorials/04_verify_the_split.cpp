// tutorials/04_verify_the_split.cpp — Tutorial 04: the right way to verify the split, and the wrong one.
//
// A widely shared answer checks a hand-made Q, K, V split against element [1] of
//   F.multi_head_attention_forward(query, key, value, ...)
// But that function returns (attn_output, attn_output_weights): element [1] is the
// attention weights, (N, L, S) averaged over heads, not anything projected. Its shape
// alone gives it away; when N = L and S = E it even looks like q's (L, N, E). This program shows the
// shapes side by side, then verifies the split the two right ways:
//   a) against PyTorch's own in-projection (_in_projection_packed), which the golden case
//      records as q.npy, k.npy, v.npy;
//   b) by reproducing the whole forward pass and comparing its output (and weights).
// Last, it swaps the Q and K blocks. That shows in the output only through a row of
// weights that changes: a row that sees one key only, or none, or whose swapped scores
// differ from the right ones by a constant along the row, keeps its output. On a case
// where every row is such a row, the program says so and checks the output is unchanged.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads.
#include "arguments.hpp"

#include "tutorial.hpp"

namespace {

// in_proj_weight with its Q and K row blocks exchanged: [W_k; W_q; W_v]. (3E, E)
template <class T>
xt::xtensor<T, 2> swap_q_and_k(const xt::xtensor<T, 2>& in_proj_weight) {
  xt::xtensor<T, 2> swapped = in_proj_weight;  // (3E, E)
  const std::size_t E = swapped.shape(1);
  xt::view(swapped, xt::range(0, E), xt::all()) = xt::view(in_proj_weight, xt::range(E, 2 * E), xt::all());
  xt::view(swapped, xt::range(E, 2 * E), xt::all()) = xt::view(in_proj_weight, xt::range(0, E), xt::all());
  return swapped;
}

// The rows of the per-head attention weights, sorted by what a Q/K swap does to them.
struct Rows {
  std::size_t total = 0, changed = 0, one_key = 0, no_key = 0, shifted = 0;
};

// Runs the right and the swapped module with per-head weights and no dropout (which would
// hide a key at random), and compares them row by row: output = weights v, with the same
// v on both sides, so a row whose weights the swap leaves alone keeps its output.
template <class T>
Rows classify_rows(mha::MultiheadAttention<T> right, mha::MultiheadAttention<T> swapped, const mha::Case<T>& c) {
  auto probe = c;
  probe.forward.need_weights = true, probe.forward.average_attn_weights = false;
  probe.forward.dropout_mask.reset();
  right.train(false), swapped.train(false);
  const xt::xarray<T> w = tutorial::weights(mha::run_forward(right, probe));     // ([N,] H, L, S')
  const xt::xarray<T> w2 = tutorial::weights(mha::run_forward(swapped, probe));  // ([N,] H, L, S')
  const std::size_t S = w.shape(w.dimension() - 1), R = w.size() / S;
  const auto a = xt::reshape_view(w, {R, S}), b = xt::reshape_view(w2, {R, S});  // (rows, S')
  Rows rows;  // one_key: the others masked, or their weights 0 in float; no_key: nan rows
  rows.total = R;
  for (std::size_t r = 0; r < R; ++r) {
    std::size_t seen = 0;  // keys with a weight: the others are masked (or underflow to 0)
    bool same = true;
    for (std::size_t j = 0; j < S; ++j) {
      seen += a(r, j) > 0;
      same = same && (a(r, j) == b(r, j) || (std::isnan(a(r, j)) && std::isnan(b(r, j))) ||
                      std::abs(a(r, j) - b(r, j)) <= c.info.atol + c.info.rtol * std::abs(a(r, j)));
    }
    if (!same) ++rows.changed;
    else if (std::isnan(a(r, 0))) ++rows.no_key;  // no key seen, or a nan in the inputs
    else if (seen == 1) ++rows.one_key;
    else ++rows.shifted;
  }
  return rows;
}

template <class T>
int run(const std::string& case_name) {
  const auto c = tutorial::load<T>(case_name);
  auto module = tutorial::reference_module(c);
  tutorial::Verdict verdict(c);

  tutorial::step(1, "what F.multi_head_attention_forward returns");
  const auto out = mha::run_forward(module, c);  // (attn_output, attn_output_weights)
  const auto& weights = tutorial::weights(out);  // (N, L, S); (N, H, L, S) per head; without N unbatched
  const bool batched = c.query.dimension() == 3, per_head = !c.forward.average_attn_weights;
  const std::string layout = std::string(batched ? "N, " : "") + (per_head ? "H, " : "") + "L, S";
  tutorial::shape("[0] attn_output " + std::string(batched ? "(L, N, E)" : "(L, E)"), out.attn_output);
  tutorial::shape("[1] attn_output_weights (" + layout + ")", weights);
  // One (L, S) map: the first batch entry's, and with per-head weights its first head's.
  xt::xarray<T> map = weights;
  while (map.dimension() > 2) map = xt::view(map, 0);  // (L, S)
  const std::string which = std::string(batched ? "batch 0" : "") + (batched && per_head ? ", " : "") +
                            (per_head ? "head 0" : "") + (batched || per_head ? ": " : "");
  // In training with dropout, PyTorch returns the weights after dropout: kept weights are
  // scaled by 1 / (1 - p), dropped ones are 0, so a row sums to 1 only on average.
  const double p = c.info.training ? c.info.options.dropout : 0.0;
  tutorial::values("[1]: " + which + (p > 0 ? "softmax, then dropout" : "rows sum to 1"), map, 3);
  fmt::print("  row sums:");
  bool nan_row = false;
  for (std::size_t i = 0; i < map.shape(0); ++i) {
    const double sum = xt::sum(xt::view(map, i))();
    nan_row = nan_row || std::isnan(sum);
    fmt::print(" {}", std::isnan(sum) ? "nan" : fmt::format("{:.4f}", sum));  // not "-nan"
  }
  if (p > 0)
    fmt::print(
        "\n  These are softmax probabilities after dropout (training, p = {}): each weight\n"
        "  is dropped (0) or kept and scaled by 1 / (1 - p) = {:.4f}, so rows need not sum to 1.\n",
        p, 1.0 / (1.0 - p));
  else
    fmt::print("\n  These are softmax probabilities over the keys, {}.\n",
               per_head ? "one map per head (average_attn_weights=False)" : "after the heads were averaged");
  if (nan_row)
    fmt::print(
        "  A row of nan: all its keys are masked (a softmax of -inf only is 0 / 0), or a nan\n"
        "  in the inputs reached its scores.\n");

  tutorial::step(2, "the projections it is mistaken for");
  const auto qkv = mha::run_in_projection(module, c);  // q (L, N, E), k (S, N, E), v (S, N, E)
  tutorial::shape("q = query W_q^T + b_q (L, N, E)", qkv.q);
  tutorial::shape("k = key W_k^T + b_k (S, N, E)", qkv.k);
  tutorial::shape("v = value W_v^T + b_v (S, N, E)", qkv.v);
  verdict.differs("q vs element [1] (the wrong check)", qkv.q, weights);
  if (mha::shape_string(qkv.q.shape()) == mha::shape_string(weights.shape()))
    fmt::print(
        "  The shapes agree here (N = L and S = E), so the comparison runs, and fails:\n"
        "  probabilities are not projections, whatever the split.\n");
  else
    fmt::print(
        "  Here the shapes differ. With N = L and S = E they would agree, and the\n"
        "  comparison would run, and fail for every split, right or wrong.\n");

  tutorial::step(3, "right way a): PyTorch's own in-projection, _in_projection_packed");
  tutorial::values("q[:, 0, :] (ours)", xt::view(qkv.q, xt::all(), 0, xt::all()), 2);
  tutorial::values("q[:, 0, :] (PyTorch)", xt::view(c.expected.at("q"), xt::all(), 0, xt::all()), 2);
  verdict.matches("q vs PyTorch's q (q.npy)", qkv.q, c.expected.at("q"));
  verdict.matches("k vs PyTorch's k (k.npy)", qkv.k, c.expected.at("k"));
  verdict.matches("v vs PyTorch's v (v.npy)", qkv.v, c.expected.at("v"));

  tutorial::step(4, "right way b): reproduce the whole forward and compare its output");
  tutorial::values("attn_output[:, 0, :] (ours)", xt::view(out.attn_output, xt::all(), 0, xt::all()), 2);
  tutorial::values("attn_output[:, 0, :] (PyTorch)", xt::view(c.expected.at("attn_output"), xt::all(), 0, xt::all()),
                   2);
  verdict.matches("attn_output vs PyTorch's", out.attn_output, c.expected.at("attn_output"));
  verdict.matches("attn_output_weights vs PyTorch's", weights, c.expected.at("attn_output_weights"));

  tutorial::step(5, "a wrong split fails right way b) too, where the scores matter");
  // Swap the Q and K row blocks: the K -> Q -> V mistake of tutorial 03.
  auto wrong_module = tutorial::reference_module(c);
  wrong_module.set_parameter("in_proj_weight", swap_q_and_k<T>(tutorial::parameter(c, "in_proj_weight")));
  const auto wrong = mha::run_forward(wrong_module, c);
  const auto rows = classify_rows(module, wrong_module, c);
  fmt::print("  rows of the weights (batch, head, query): {}, changed by the swap: {}\n", rows.total, rows.changed);
  fmt::print("  unchanged: {} weigh one key only, {} are nan, {} shifted by a constant\n", rows.one_key, rows.no_key,
             rows.shifted);
  if (rows.changed > 0) {
    verdict.differs("Q, K blocks swapped: attn_output vs PyTorch's", wrong.attn_output, c.expected.at("attn_output"));
  } else {  // the output cannot tell: say why, and check that it indeed does not
    fmt::print(
        "  A row's output is unchanged by the swap when the row sees one key only (its\n"
        "  weight is 1 whatever q and k are), no key (0 / 0 = nan either way), or when\n"
        "  the swapped scores differ from the right ones by a constant along the row\n"
        "  (softmax ignores it). Every row here is such a row, so this case cannot show\n"
        "  a Q/K swap; one where a row sees two keys or more can (the default case).\n");
    verdict.matches("Q, K swapped: attn_output unchanged", wrong.attn_output, c.expected.at("attn_output"));
  }

  return verdict.finish();
}

}  // namespace

int main(int argc, char** argv) try {
  cli::Arguments arguments{"Tutorial 04: verifying the in_proj_weight split"};
  std::string case_name = "self_seqfirst_f32";
  arguments.option("--case", case_name, "golden case (packed, need_weights, no expected error) to verify against");
  if (const auto stop = arguments.parse(argc, argv)) return *stop;  // --help, or a bad option
  mha::use_best_blas_kernel();  // OpenBLAS's best kernel for this CPU (README: the BLAS kernel)

  tutorial::title("04", "the right way to verify the split",
                  "Demonstrates: element [1] of F.multi_head_attention_forward is the attention\n"
                  "              weights (N, L, S), not Q, K, V; compare with _in_projection_packed\n"
                  "              or with the whole forward output instead.");
  const auto info = mha::read_case_info(tutorial::case_dir(case_name));
  tutorial::refuse_error_case(info);
  tutorial::refuse_unless(info.need_weights, info,
                          "has need_weights=False: element [1] is None, and step 1 is about it");
  tutorial::refuse_unless(std::filesystem::exists(info.dir / "in_proj_weight.npy"), info,
                          "has separate q/k/v_proj_weight (kdim or vdim != E): no in_proj_weight to split");
  return info.dtype == "float32" ? run<float>(case_name) : run<double>(case_name);
} catch (const std::exception& e) {  // a case this tutorial cannot take, or a file it cannot read
  fmt::print("error: {}\n", e.what());
  return 2;
}
