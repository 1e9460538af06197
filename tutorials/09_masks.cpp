// tutorials/09_masks.cpp — Tutorial 09: masks — causal, key padding, bool versus float, and the fully masked row.
//
// A mask decides which keys a query may attend to. nn.MultiheadAttention takes
//   attn_mask         (L, S) or (N*H, L, S)   per query and key,
//   key_padding_mask  (N, S)                  per batch entry and key.
// A bool mask means True = MASKED and becomes -inf; a float mask is added to the scores
// as it is. (scaled_dot_product_attention and ONNX read bool the other way round:
// True = attend.) A query whose keys are all masked has only -inf scores: softmax gives
// 0/0 = NaN, and NaN runs through to its output row. add_zero_attn appends one all-zero
// key that no mask covers, so such a row attends to it alone and stays finite.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads.
#include "arguments.hpp"

#include "tutorial.hpp"

namespace {

// A bool mask as a grid: x = masked (True), . = may attend (False). One row per query.
void grid(std::string_view label, const xt::xarray<bool>& mask) {
  fmt::print("  {} {}   x = masked, . = attend\n", label, mha::shape_string(mask.shape()));
  for (std::size_t i = 0; i < mask.shape(0); ++i) {
    std::string line = fmt::format("    row {} ", i);
    for (std::size_t j = 0; j < mask.shape(1); ++j) line += mask(i, j) ? " x" : " .";
    fmt::print("{}\n", line);
  }
}

// A bool mask of the case (attn_mask or key_padding_mask), as the golden case gives it.
const xt::xarray<bool>& bool_mask_of(const std::optional<mha::Mask<float>>& mask, std::string_view name) {
  return std::get<xt::xarray<bool>>(tutorial::value_of(mask, name));
}

// Runs the case and checks both outputs against PyTorch's.
mha::Output<float> run_and_check(tutorial::Verdict& verdict, const mha::Case<float>& c) {
  auto module = tutorial::reference_module(c);
  auto out = mha::run_forward(module, c);
  verdict.matches("attn_output vs PyTorch's", out.attn_output, c.expected.at("attn_output"));
  verdict.matches("attn_output_weights vs PyTorch's", tutorial::weights(out), c.expected.at("attn_output_weights"));
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  cli::Arguments arguments{"Tutorial 09: masks"};
  std::size_t L = 4;
  arguments.option("--causal", L, "size of the causal mask printed in step 1").range(1, 10);
  if (const auto stop = arguments.parse(argc, argv)) return *stop;  // --help, or a bad option
  mha::use_best_blas_kernel();  // OpenBLAS's best kernel for this CPU (README: the BLAS kernel)

  tutorial::title("09", "masks",
                  "Demonstrates: causal and key padding masks; bool True = masked = -inf, the\n"
                  "              opposite of SDPA/ONNX; a fully masked row gives NaN; add_zero_attn\n"
                  "              keeps it finite.");

  tutorial::step(1, "the causal mask: query i sees keys 0..i");
  grid("causal_mask(L, L), bool", mha::textbook::causal_mask(L, L));
  tutorial::values("generate_square_subsequent_mask(L), float",
                   mha::textbook::generate_square_subsequent_mask<float>(L), L, L);
  auto c = tutorial::load<float>("is_causal_self_f32");
  tutorial::Verdict verdict(c);
  const auto& causal = bool_mask_of(c.forward.attn_mask, "attn_mask");  // (L, S), with is_causal=True
  verdict.equal("causal_mask(L, S) == the case's attn_mask",
                mha::textbook::causal_mask(causal.shape(0), causal.shape(1)), causal);
  run_and_check(verdict, c);

  tutorial::step(2, "bool or float: True -> -inf, False -> 0");
  c = tutorial::load<float>("attn_mask_bool_2d_f32");
  const xt::xarray<bool> bool_mask = bool_mask_of(c.forward.attn_mask, "attn_mask");  // (L, S)
  grid("attn_mask", bool_mask);
  run_and_check(verdict, c);
  const xt::xarray<float> float_mask = mha::textbook::canonical_mask<float>(bool_mask);  // (L, S)
  tutorial::values("the same mask as float", float_mask, 5, 8);
  c.forward.attn_mask = float_mask;
  auto module = tutorial::reference_module(c);
  verdict.matches("float mask: attn_output vs PyTorch's", mha::run_forward(module, c).attn_output,
                  c.expected.at("attn_output"));
  c.forward.attn_mask = xt::xarray<bool>(!bool_mask);  // True = attend, as SDPA and ONNX mean it
  verdict.differs("SDPA's meaning (True = attend) vs PyTorch's", mha::run_forward(module, c).attn_output,
                  c.expected.at("attn_output"));

  tutorial::step(3, "key padding: whole key columns masked, per batch entry");
  c = tutorial::load<float>("key_padding_mask_bool_f32");
  const auto padding = bool_mask_of(c.forward.key_padding_mask, "key_padding_mask");  // (N, S)
  grid("key_padding_mask (one row per batch entry)", padding);
  auto out = run_and_check(verdict, c);
  tutorial::values("weights, batch 2 (padded keys get 0)", xt::view(tutorial::weights(out), 2), 4, 8);

  tutorial::step(4, "a fully masked row: softmax of all -inf is NaN");
  c = tutorial::load<float>("attn_mask_bool_2d_fully_masked_row");
  grid("attn_mask (row 2 all masked)", bool_mask_of(c.forward.attn_mask, "attn_mask"));
  out = run_and_check(verdict, c);
  tutorial::values("weights, batch 0", xt::view(tutorial::weights(out), 0), 5, 8);
  tutorial::values("attn_output[:, 0, :]", xt::view(out.attn_output, xt::all(), 0, xt::all()), 5, 6);
  fmt::print(
      "  PyTorch's math path (and this library) give NaN here, and NaN matched NaN above.\n"
      "  PyTorch 2.5+ with need_weights=False goes through scaled_dot_product_attention,\n"
      "  whose _safe_softmax gives such a row weight 0 instead: no NaN, a zero row.\n");

  tutorial::step(5, "add_zero_attn: one more key, all zeros, never masked");
  c = tutorial::load<float>("attn_mask_bool_2d_fully_masked_row_add_zero_attn");
  out = run_and_check(verdict, c);
  tutorial::values("weights, batch 0 (S + 1 keys)", xt::view(tutorial::weights(out), 0), 5, 8);
  tutorial::values("attn_output[2, 0, :] (row 2)", xt::view(out.attn_output, 2, 0, xt::all()), 1, 6);
  tutorial::values("out_proj.bias", c.parameters.at("out_proj.bias"), 1, 6);
  fmt::print(
      "  Row 2 gives weight 1 to the zero key: its attention output is 0, so\n"
      "  attn_output = 0 W_o^T + b_o = out_proj.bias.\n");
  verdict.matches(
      "attn_output[2, n, :] vs out_proj.bias", xt::view(out.attn_output, 2, xt::all(), xt::all()),
      xt::broadcast(c.parameters.at("out_proj.bias"), {out.attn_output.shape(1), out.attn_output.shape(2)}));

  return verdict.finish();
} catch (const std::exception& e) {  // a case this tutorial cannot take, or a file it cannot read
  fmt::print("error: {}\n", e.what());
  return 2;
}
