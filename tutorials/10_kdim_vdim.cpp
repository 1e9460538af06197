// tutorials/10_kdim_vdim.cpp — Tutorial 10: kdim/vdim, and the separate-projection variant.
//
// in_proj_weight (3E, E) stacks W_q, W_k, W_v by rows, so all three must have E columns:
// the key and the value must have E features. When they do not (kdim or vdim != E), a
// (E, kdim) block cannot stand in a (3E, E) matrix, and PyTorch keeps three parameters
// instead (its flag _qkv_same_embed_dim is False):
//   q_proj_weight (E, E), k_proj_weight (E, kdim), v_proj_weight (E, vdim)
// with in_proj_bias (3E) still packed. The state_dict keys differ between the two forms.
// This program runs a kdim/vdim case, shows that packing it is impossible (mha::Error),
// then converts a packed module to the separate form and back, checking every form
// against PyTorch.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim.
#include "arguments.hpp"

#include "tutorial.hpp"

namespace {

void print_parameters(const mha::MultiheadAttention<float>& m) {
  for (const auto& name : m.parameter_names())
    fmt::print("    {:<18} {}\n", name, mha::shape_string(m.parameter_shape(name)));
}

// Forward (and the in-projection) of `module` on the case, against PyTorch's numbers.
void check_forward(tutorial::Verdict& verdict, std::string_view form, mha::MultiheadAttention<float>& module,
                   const mha::Case<float>& c) {
  const auto out = mha::run_forward(module, c);
  const auto qkv = mha::run_in_projection(module, c);
  verdict.matches(fmt::format("{}: k vs PyTorch's", form), qkv.k, c.expected.at("k"));
  verdict.matches(fmt::format("{}: attn_output vs PyTorch's", form), out.attn_output, c.expected.at("attn_output"));
}

}  // namespace

int main(int argc, char** argv) try {
  cli::Arguments arguments{"Tutorial 10: kdim, vdim and the separate projections"};
  std::string case_name = "cross_kdim_vdim_seqfirst_f32";
  arguments.option("--case", case_name, "golden case with kdim or vdim != E (float32)");
  if (const auto stop = arguments.parse(argc, argv)) return *stop;  // --help, or a bad option
  mha::use_best_blas_kernel();  // OpenBLAS's best kernel for this CPU (README: the BLAS kernel)

  tutorial::title("10", "kdim/vdim and the separate projections",
                  "Demonstrates: kdim/vdim != E forces q/k/v_proj_weight; packing is then\n"
                  "              impossible; packed <-> separate conversion keeps the numbers.");

  tutorial::step(1, "a module with kdim and vdim different from E");
  const auto c = tutorial::load<float>(case_name);
  tutorial::Verdict verdict(c);
  auto module = tutorial::reference_module(c);
  fmt::print("  E = {}, kdim = {}, vdim = {}: packed = {}\n", module.embed_dim(), module.kdim(), module.vdim(),
             module.packed());
  tutorial::shape("query (L, N, E)", c.query);
  tutorial::shape("key (S, N, kdim)", c.key);
  tutorial::shape("value (S, N, vdim)", c.value);
  fmt::print("  state_dict:\n");
  print_parameters(module);

  tutorial::step(2, "the separate form against PyTorch");
  const auto qkv = mha::run_in_projection(module, c);
  tutorial::shape("k = key k_proj_weight^T + b_k", qkv.k);
  tutorial::shape("v = value v_proj_weight^T + b_v", qkv.v);
  fmt::print(
      "  After the projections every feature size is E again: heads and attention\n"
      "  are the same as in the packed form.\n");
  check_forward(verdict, "separate", module, c);

  const bool packable = module.qkv_same_embed_dim();  // kdim == vdim == E
  tutorial::step(3, packable ? "packing it: kdim == vdim == E, so to_packed() can"
                             : "packing it is impossible: to_packed() raises mha::Error");
  bool raised = false;
  try {
    fmt::print("  to_packed() gives in_proj_weight {}\n",
               mha::shape_string(module.to_packed().parameter("in_proj_weight").shape()));
  } catch (const mha::Error& e) {
    raised = true;
    fmt::print("  mha::Error: {}\n", e.what());
  }
  verdict.holds(packable ? "to_packed() accepted: kdim == vdim == E" : "to_packed() was refused", raised != packable);

  tutorial::step(4, "a packed module, made separate and packed again");
  const auto p = tutorial::load<float>("cross_seqfirst_f32");
  auto packed = tutorial::reference_module(p);
  auto separate = packed.to_separate();
  fmt::print("  packed state_dict:\n");
  print_parameters(packed);
  fmt::print("  to_separate() state_dict:\n");
  print_parameters(separate);
  const xt::xtensor<float, 2> W = packed.parameter("in_proj_weight");  // (3E, E)
  const std::size_t E = packed.embed_dim();
  verdict.equal("q_proj_weight == in_proj_weight[0:E]", separate.parameter("q_proj_weight"),
                xt::view(W, xt::range(0, E), xt::all()));
  verdict.equal("v_proj_weight == in_proj_weight[2E:3E]", separate.parameter("v_proj_weight"),
                xt::view(W, xt::range(2 * E, 3 * E), xt::all()));
  verdict.equal("to_separate().to_packed() == in_proj_weight", separate.to_packed().parameter("in_proj_weight"), W);
  check_forward(verdict, "packed", packed, p);
  check_forward(verdict, "separate", separate, p);

  tutorial::step(5, "the keys are part of the format: loading across forms fails");
  try {
    separate.load_state_dict(packed.state_dict());
    verdict.holds("separate.load_state_dict(packed keys) refused", false);
  } catch (const mha::Error& e) {
    fmt::print("  mha::Error: {}\n", e.what());
    verdict.holds("separate.load_state_dict(packed keys) refused", true);
  }
  return verdict.finish();
} catch (const std::exception& e) {  // a case this tutorial cannot take, or a file it cannot read
  fmt::print("error: {}\n", e.what());
  return 2;
}
