// tutorials/19_decoding.cpp — Tutorial 19: decoding one token at a time, with a KV cache; and cross-attention.
//
// A decoder generates token t by attending with t's query to the keys and values of
// tokens 0..t. Those of 0..t-1 do not change when t arrives, so they are kept (a KV
// cache) and only t is projected. PyTorch feeds such a cache to its attention as static_k
// and static_v of F.multi_head_attention_forward: keys and values already projected and
// split into heads, (N*H, t, D), which replace k and v. This program runs one cached
// step from PyTorch's golden case through mha::multi_head_attention_forward, decodes a
// sequence with mha::KVCache and compares every step with the full causal forward, and
// runs cross-attention (a decoder's queries on an encoder's keys and values) against
// PyTorch. docs/19-decoding.md is its chapter.
//
// Legend: T = tokens decoded, t = tokens cached, N = batch, E = embed_dim, H = heads,
// D = head_dim = E / H, kdim/vdim = the encoder's feature sizes.
#include "arguments.hpp"

#include "tutorial.hpp"

namespace {

// A version-3 golden case (a call of the functional form), read as double.
mha::Case<double> load_functional(std::string_view name) {
  const auto info = mha::read_case_info(tutorial::case_dir(name));
  tutorial::refuse_unless(info.is_functional() && !info.expect_error && info.dtype == "float64", info,
                          "is not a float64 call of the functional form (format 3, functional_*_f64)");
  fmt::print("  Golden case: {} ({})\n", info.name, info.dtype);
  return mha::load_case<double>(info);
}

// The case's tensor argument `name`, or None.
const xt::xarray<double>* argument(const mha::Case<double>& c, const std::string& name) {
  const auto it = c.parameters.find(name);
  return it == c.parameters.end() ? nullptr : &it->second;
}

}  // namespace

int main(int argc, char** argv) try {
  cli::Arguments arguments{"Tutorial 19: decoding one token at a time, and cross-attention"};
  std::size_t tokens = 6;
  arguments.option("--tokens", tokens, "tokens to decode in step 2").range(1, 64);
  if (const auto stop = arguments.parse(argc, argv)) return *stop;  // --help, or a bad option
  mha::use_best_blas_kernel();  // OpenBLAS's best kernel for this CPU (README: the BLAS kernel)

  tutorial::title("19", "decoding one token at a time",
                  "Demonstrates: a cached step (static_k, static_v) is the last row of the causal\n"
                  "              forward; the cache grows by one position per token.");
  tutorial::Verdict verdict;

  tutorial::step(1, "one cached step through F.multi_head_attention_forward");
  const auto c = load_functional("functional_decode_step_f64");
  verdict.tolerance(c);
  tutorial::shape("query: the newest token (1, N, E)", c.query);
  tutorial::shape("static_k: the cache (N*H, t, D)", c.parameters.at("static_k"));
  tutorial::shape("static_v (N*H, t, D)", c.parameters.at("static_v"));
  // The call as PyTorch's: every argument by name. key and value are the token itself;
  // static_k and static_v replace their projections.
  const auto step =
      mha::multi_head_attention_forward<double>(c.query, c.query, c.query,
                                                {.embed_dim_to_check = c.info.functional.embed_dim_to_check,
                                                 .num_heads = c.info.functional.num_heads,
                                                 .in_proj_weight = argument(c, "in_proj_weight"),
                                                 .in_proj_bias = argument(c, "in_proj_bias"),
                                                 .out_proj_weight = argument(c, "out_proj_weight"),
                                                 .out_proj_bias = argument(c, "out_proj_bias"),
                                                 .training = false,
                                                 .static_k = argument(c, "static_k"),
                                                 .static_v = argument(c, "static_v")},
                                                mha::AttentionPath::reference);
  tutorial::shape("attn_output (1, N, E)", step.attn_output);
  tutorial::shape("attn_output_weights (N, 1, t)", *step.attn_output_weights);
  verdict.matches("attn_output vs PyTorch's", step.attn_output, c.expected.at("attn_output"));
  verdict.matches("attn_output_weights vs PyTorch's", *step.attn_output_weights, c.expected.at("attn_output_weights"));

  tutorial::step(2, fmt::format("decoding {} tokens one at a time with mha::KVCache", tokens));
  constexpr std::size_t E = 8, H = 2, N = 2;
  mha::MultiheadAttention<double> module(mha::Options{.embed_dim = E, .num_heads = H}, /*seed=*/13);
  module.eval();
  module.set_attention_path(mha::AttentionPath::reference);
  mha::Generator g(14);
  xt::xarray<double> x = xt::zeros<double>({tokens, N, E});  // (T, N, E)
  for (auto& v : x) v = g.uniform(-1, 1);
  mha::ForwardOptions<double> causal;
  causal.attn_mask = xt::xarray<bool>(mha::textbook::causal_mask(tokens, tokens));  // row t sees 0..t
  causal.need_weights = false;
  const xt::xarray<double> full = module.forward(x, x, x, causal).attn_output;  // (T, N, E)
  fmt::print("  the full causal forward over all {} tokens: attn_output {}\n", tokens, mha::shape_string(full.shape()));
  mha::KVCache<double> cache;
  std::vector<std::size_t> lengths;
  bool all_equal = true;
  for (std::size_t t = 0; t < tokens; ++t) {
    const xt::xarray<double> token = xt::view(x, xt::range(t, t + 1), xt::all(), xt::all());  // (1, N, E)
    const auto out = cache.step(module, token);                                               // (1, N, E)
    const xt::xarray<double> row = xt::view(full, xt::range(t, t + 1), xt::all(), xt::all());
    // float64: the step and the row sum the same products, in a different order at most
    const bool equal = xt::amax(xt::abs(out.attn_output - row))() <= 1e-12;
    all_equal = all_equal && equal;
    lengths.push_back(cache.length());
    fmt::print("  token {}: the step's output {} row {} of the causal forward (within 1e-12)\n", t,
               equal ? "equals" : "DIFFERS from", t);
  }
  verdict.holds("every step equals its causal row", all_equal);

  tutorial::step(3, "what the cache holds: k and v of every token so far, split into heads");
  for (std::size_t t = 0; t < tokens; ++t)
    fmt::print("  after token {}: static_k and static_v {}\n", t, mha::shape_string({N * H, lengths[t], E / H}));
  // The cache is the in-projection of all tokens, split into heads: what one step at a
  // time appended is what a forward over the whole sequence computes.
  const auto qkv = module.in_projection(x, x, x);  // k, v (T, N, E)
  verdict.matches("static_k == split_heads(k of all tokens)", cache.static_k(), mha::textbook::split_heads(qkv.k, H));
  verdict.matches("static_v == split_heads(v of all tokens)", cache.static_v(), mha::textbook::split_heads(qkv.v, H));
  fmt::print(
      "  A step projects one token and attends to t + 1 positions: its cost grows linearly\n"
      "  with t. Without the cache every step projects the k and v of all t + 1 positions\n"
      "  again (docs/19-decoding.md; measured in docs/performance.md).\n");

  tutorial::step(4, "cross-attention: a decoder's queries on an encoder's keys and values");
  const auto x_attn = load_functional("functional_cross_attention_kdim_vdim_f64");
  tutorial::shape("query: the decoder (L, N, E)", x_attn.query);
  tutorial::shape("key: the encoder (S, N, kdim)", x_attn.key);
  tutorial::shape("value: the encoder (S, N, vdim)", x_attn.value);
  tutorial::shape("k_proj_weight (E, kdim)", x_attn.parameters.at("k_proj_weight"));
  tutorial::shape("v_proj_weight (E, vdim)", x_attn.parameters.at("v_proj_weight"));
  const auto cross = mha::run_functional(x_attn, mha::AttentionPath::reference);
  verdict.tolerance(x_attn);
  verdict.matches("cross-attention attn_output vs PyTorch's", cross.attn_output, x_attn.expected.at("attn_output"));
  return verdict.finish();
} catch (const std::exception& e) {  // a case this tutorial cannot take, or a file it cannot read
  fmt::print("error: {}\n", e.what());
  return 2;
}
