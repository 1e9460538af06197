// Tutorial 03: the right way to verify the split, and the wrong one.
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
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads.
#include <CLI/CLI.hpp>

#include "tutorial.hpp"

namespace {

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
  tutorial::values("[1]: " + which + "rows sum to 1", map, 3);
  fmt::print("  row sums:");
  for (std::size_t i = 0; i < map.shape(0); ++i) fmt::print(" {:.4f}", double(xt::sum(xt::view(map, i))()));
  fmt::print("\n  These are softmax probabilities over the keys, {}.\n",
             per_head ? "one map per head (average_attn_weights=False)" : "after the heads were averaged");

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

  tutorial::step(5, "a wrong split fails right way b) too");
  // Swap the Q and K row blocks: the K -> Q -> V mistake of tutorial 02.
  xt::xtensor<T, 2> swapped = tutorial::parameter(c, "in_proj_weight");  // (3E, E)
  const std::size_t E = swapped.shape(1);
  const xt::xtensor<T, 2> w_q = xt::view(swapped, xt::range(0, E), xt::all());
  xt::view(swapped, xt::range(0, E), xt::all()) = xt::view(swapped, xt::range(E, 2 * E), xt::all());
  xt::view(swapped, xt::range(E, 2 * E), xt::all()) = w_q;
  module.set_parameter("in_proj_weight", swapped);
  const auto wrong = mha::run_forward(module, c);
  if (qkv.k.shape(0) > 1)
    verdict.differs("Q, K blocks swapped: attn_output vs PyTorch's", wrong.attn_output, c.expected.at("attn_output"));
  else  // softmax over one key is 1 whatever the scores: q and k cannot matter
    fmt::print(
        "  S = 1: the one key gets weight 1 whatever q and k are, so this check\n"
        "  cannot see a Q/K swap. Choose a case with S > 1.\n");

  return verdict.finish();
}

}  // namespace

int main(int argc, char** argv) try {
  CLI::App app{"Tutorial 03: verifying the in_proj_weight split"};
  std::string case_name = "self_seqfirst_f32";
  app.add_option("--case", case_name, "golden case (packed, with q.npy, need_weights) to verify against");
  CLI11_PARSE(app, argc, argv);

  tutorial::title("03", "the right way to verify the split",
                  "Demonstrates: element [1] of F.multi_head_attention_forward is the attention\n"
                  "              weights (N, L, S), not Q, K, V; compare with _in_projection_packed\n"
                  "              or with the whole forward output instead.");
  const auto info = mha::read_case_info(tutorial::case_dir(case_name));
  return info.dtype == "float32" ? run<float>(case_name) : run<double>(case_name);
} catch (const std::exception& e) {  // a case this tutorial cannot take, or a file it cannot read
  fmt::print("error: {}\n", e.what());
  return 2;
}
