// tutorials/17_backward_by_hand.cpp — Tutorial 17: the backward pass by hand, one formula per step, checked against autograd.
//
// Golden case backward_cross_unbatched_f64: E = 8, H = 2 heads of D = 4, L = 3 queries,
// S = 4 keys, unbatched, three distinct inputs, float64. PyTorch computed
// loss = sum(attn_output * grad_attn_output) [+ sum(attn_output_weights * grad_attn_output_weights)]
// and loss.backward(); the case holds the upstream gradients and every gradient autograd
// found. The program runs the forward one step at a time (as tutorial 05), then goes back
// through it with the formulas of textbook/gradients.hpp, printing each gradient and checking it
// against PyTorch's. At the end the module's own backward() gives the same, and two
// classic mistakes do not. docs/17-backward-by-hand.md derives each formula.
//
// With --case it takes every backward case (format 2): batched or not, float32 or float64,
// packed or separate projections, masks, a gradient of the weights, bias_k and bias_v,
// the zero key, dropout (replaying PyTorch's mask), self-attention (an input used three
// times gets the sum of its three gradients). A forward-only case is refused, with the
// reason.
//
// Legend: L = target length, S = source length, S' = S with bias_k and the zero key,
// N = batch, E = embed_dim, H = heads, D = E / H, B = N*H; Z = the scores, P = softmax(Z),
// P' = P after dropout, O = P' v per head.
#include "arguments.hpp"

#include "tutorial.hpp"

namespace {

// The case's in-projection as three weights and biases: in_proj_weight cut into its Q, K,
// V row blocks, or q/k/v_proj_weight as they are. (E, E), (E, Ek), (E, Ev); (E) each
template <class T>
mha::SeparateProjections<T> projections(const mha::Case<T>& c) {
  std::optional<xt::xtensor<T, 1>> bias;  // (3E), or none with bias=False
  if (c.parameters.contains("in_proj_bias")) bias = xt::xtensor<T, 1>(c.parameters.at("in_proj_bias"));
  if (c.parameters.contains("in_proj_weight"))
    return mha::textbook::split_packed(xt::xtensor<T, 2>(c.parameters.at("in_proj_weight")), bias);
  const std::size_t E = static_cast<std::size_t>(c.info.options.embed_dim);
  return {c.parameters.at("q_proj_weight"),      c.parameters.at("k_proj_weight"),
          c.parameters.at("v_proj_weight"),      mha::textbook::bias_block(bias, 0, E),
          mha::textbook::bias_block(bias, 1, E), mha::textbook::bias_block(bias, 2, E)};
}

// Gradients by name, in the order the program prints them.
template <class T>
using Named = std::vector<std::pair<std::string, xt::xarray<T>>>;

// The gradients of the in-projection's weights under the case's state_dict names, the
// weights first: in_proj_weight = [dW_q; dW_k; dW_v] packed, else q/k/v_proj_weight;
// in_proj_bias = [db_q; db_k; db_v].
template <class T>
Named<T> weight_gradients(const mha::SeparateProjections<T>& d, bool packed) {
  Named<T> out;
  if (packed) {
    const auto p = mha::textbook::pack(d);
    out.emplace_back("in_proj_weight", p.in_proj_weight);
    if (p.in_proj_bias) out.emplace_back("in_proj_bias", *p.in_proj_bias);
    return out;
  }
  out.emplace_back("q_proj_weight", d.w_q), out.emplace_back("k_proj_weight", d.w_k);
  out.emplace_back("v_proj_weight", d.w_v);
  if (d.b_q) out.emplace_back("in_proj_bias", xt::concatenate(xt::xtuple(*d.b_q, *d.b_k, *d.b_v), 0));
  return out;
}

// One gradient per input object, query first, in the caller's layout, as x.grad: an input
// used as query and key (and value) gets the sum of the gradients of its uses.
template <class T>
Named<T> input_gradients(const mha::Case<T>& c, const mha::textbook::InProjectionGradients<T>& in) {
  const bool batched = c.query.dimension() == 3, bf = c.info.options.batch_first;
  const bool self = c.info.query_is_key && c.info.key_is_value;
  xt::xtensor<T, 3> query = in.query;  // (L, N, E)
  if (self) query += *in.key + *in.value;
  Named<T> out;
  out.emplace_back("query", mha::textbook::caller_layout(query, batched, bf));
  if (self) return out;
  xt::xtensor<T, 3> key = *in.key;  // (S, N, Ek)
  if (c.info.key_is_value) key += *in.value;
  out.emplace_back("key", mha::textbook::caller_layout(key, batched, bf));
  if (!c.info.key_is_value) out.emplace_back("value", mha::textbook::caller_layout(*in.value, batched, bf));
  return out;
}

// A demonstrated mistake must differ from PyTorch's gradient; but where that gradient is
// nan everywhere (a fully masked row's nan reaches every sum that holds it), no wrong
// number can differ from it, and the program says so instead.
template <class T>
void mistake(tutorial::Verdict& verdict, std::string_view what, const xt::xarray<T>& got,
             const xt::xarray<T>& expected) {
  if (xt::all(xt::isnan(expected))) fmt::print("  {:<44} cannot show: PyTorch's is nan everywhere\n", what);
  else verdict.differs(what, got, expected);
}

template <class T>
int run(const std::string& case_name) {
  const auto c = tutorial::load<T>(case_name);
  tutorial::Verdict verdict(c);
  auto module = tutorial::reference_module(c);
  const std::size_t H = module.num_heads();
  const auto& o = c.info.options;
  const bool batched = c.query.dimension() == 3, bf = o.batch_first, has_bias = o.bias;
  const bool packed = c.parameters.contains("in_proj_weight");
  const auto& grad = c.expected_gradients;  // PyTorch's: query, key, value, in_proj_weight, ...

  tutorial::step(1,
                 std::string("the forward, one tensor per step") + (batched ? "" : " (unbatched: a batch of N = 1)"));
  const auto query = mha::textbook::to_seq_first_batched(c.query, bf);                              // (L, N, E)
  const auto key = c.info.query_is_key ? query : mha::textbook::to_seq_first_batched(c.key, bf);    // (S, N, Ek)
  const auto value = c.info.key_is_value ? key : mha::textbook::to_seq_first_batched(c.value, bf);  // (S, N, Ev)
  const std::size_t L = query.shape(0), N = query.shape(1), S = key.shape(0);
  const auto p = projections(c);
  const xt::xtensor<T, 2> out_proj_weight = c.parameters.at("out_proj.weight");  // (E, E)
  std::optional<xt::xtensor<T, 1>> out_proj_bias;                                // (E)
  if (has_bias) out_proj_bias = xt::xtensor<T, 1>(c.parameters.at("out_proj.bias"));
  auto [q, k, v] = mha::textbook::in_projection(query, key, value, p);  // (L, N, E), (S, N, E), (S, N, E)
  auto masks = mha::textbook::prepare_masks(c.forward.attn_mask, c.forward.key_padding_mask, c.forward.is_causal,
                                            c.forward.need_weights, batched, L, N, S, H);
  if (o.add_bias_kv) {  // one more key and value position, learned, for every batch entry
    k = mha::textbook::append_bias(k, xt::xtensor<T, 3>(c.parameters.at("bias_k")));  // (S+1, N, E)
    v = mha::textbook::append_bias(v, xt::xtensor<T, 3>(c.parameters.at("bias_v")));  // (S+1, N, E)
    masks.pad_for_extra_key();
  }
  const auto qh = mha::textbook::split_heads(q, H);                                   // (B, L, D)
  auto kh = mha::textbook::split_heads(k, H), vh = mha::textbook::split_heads(v, H);  // (B, S', D)
  if (o.add_zero_attn) {  // one more key and value, all zeros
    kh = mha::textbook::append_zero_row(kh), vh = mha::textbook::append_zero_row(vh);  // (B, S'+1, D)
    masks.pad_for_extra_key();
  }
  const std::size_t S_total = kh.shape(1);  // S'
  const auto mask = masks.causal_hint
                        ? std::optional(mha::textbook::causal_attn_mask<T>(L, S_total))               // (1, L, S')
                        : mha::textbook::merge_masks(masks.attn_mask, masks.key_padding_mask, H, L);  // (1 or B, L, S')
  const double dropout_p = c.info.training ? o.dropout : 0.0;  // replayed from PyTorch's mask
  const auto attention =
      mha::textbook::scaled_dot_product_attention(qh, kh, vh, mask, dropout_p, c.forward.dropout_mask);
  const auto merged = mha::textbook::merge_heads(attention.output, H);                     // (L, N, E)
  const auto attn_output = mha::textbook::linear(merged, out_proj_weight, out_proj_bias);  // (L, N, E)
  tutorial::shape("q = query W_q^T + b_q", q);
  tutorial::shape("P = softmax(q k^T / sqrt(D) + mask)", attention.probabilities);
  if (dropout_p > 0) tutorial::shape("P' = P * keep / (1 - p), dropout", attention.weights);
  tutorial::shape(dropout_p > 0 ? "O = P' v, per head" : "O = P v, per head", attention.output);
  tutorial::shape("attn_output = merged W_o^T + b_o", attn_output);
  if (mask) fmt::print("  with a mask: masked scores are -inf, so P is 0 there and passes no gradient\n");
  if (o.add_bias_kv) fmt::print("  + bias_k, bias_v: key and value position S, the same for every batch entry\n");
  if (o.add_zero_attn) fmt::print("  + add_zero_attn: a zero key and value after the head split, constants\n");
  verdict.matches("attn_output vs PyTorch", mha::textbook::caller_layout(attn_output, batched, bf),
                  c.expected.at("attn_output"));
  verdict.tolerance(c.info.backward_rtol, c.info.backward_atol);  // the gradients' own, from the case

  tutorial::step(2, "out_proj: dX = dY W_o, dW_o = dY^T X, db_o = sum of dY");
  const auto d_attn_output = mha::textbook::to_seq_first_batched(*c.grad_attn_output, bf);  // dY (L, N, E)
  const auto out_proj = mha::textbook::linear_backward(merged, out_proj_weight, d_attn_output, has_bias);
  tutorial::values("dL/d(out_proj.weight), rows 0-3", xt::view(out_proj.weight, xt::range(0, 4), xt::all()));
  verdict.matches("grad out_proj.weight vs PyTorch", out_proj.weight, grad.at("out_proj.weight"));
  if (has_bias) verdict.matches("grad out_proj.bias vs PyTorch", *out_proj.bias, grad.at("out_proj.bias"));

  tutorial::step(3, "heads apart again: dO = split_heads(dX)");
  const auto d_output = mha::textbook::merge_heads_backward(out_proj.input, H);  // (B, L, D)
  tutorial::shape("dO", d_output);

  tutorial::step(4, dropout_p > 0 ? "O = P' v: dP' = dO v^T, dv = P'^T dO; dropout: dP = dP' * keep / (1 - p)"
                                  : "O = P v: dP = dO v^T, dv = P^T dO");
  auto weighted = mha::textbook::weighted_values_backward(attention.weights, vh, d_output);
  if (c.grad_attn_output_weights) {  // the loss used the returned weights too: their gradient adds to dP'
    weighted.weights += mha::textbook::output_weights_backward(*c.grad_attn_output_weights, N, H, L, S_total,
                                                               c.info.average_attn_weights);
    fmt::print("  + the gradient of attn_output_weights, {}\n",
               c.info.average_attn_weights ? "divided by H (the weights were averaged over heads)"
                                           : "head by head (per-head weights)");
  }
  // Dropout multiplied P by the constant keep / (1 - p): a dropped weight passes no gradient.
  const auto d_probabilities =
      dropout_p > 0 ? mha::textbook::dropout_backward(weighted.weights, *c.forward.dropout_mask, dropout_p)
                    : weighted.weights;  // dP (B, L, S')
  tutorial::shape("dP", d_probabilities);
  tutorial::shape("dv, per head", weighted.values);

  tutorial::step(5, "softmax: dZ = P * (dP - rowsum(dP * P))");
  const auto d_scores = mha::textbook::softmax_backward(attention.probabilities, d_probabilities);  // dZ (B, L, S')
  tutorial::values("dZ, head 0", xt::view(d_scores, 0, xt::all(), xt::all()));
  // Each row of dZ sums to 0, to rounding; a fully masked row is nan (P is) and is left out.
  const xt::xtensor<T, 2> row_sums = xt::sum(d_scores, {2});  // (B, L)
  const T rounding = 1000 * std::numeric_limits<T>::epsilon();
  verdict.holds("every row of dZ sums to 0", xt::all(xt::abs(row_sums) < rounding || xt::isnan(row_sums)));

  tutorial::step(6, "scores Z = (q / sqrt(D)) k^T: dq = dZ k / sqrt(D), dk = dZ^T q / sqrt(D)");
  const auto scores = mha::textbook::scores_backward(qh, kh, d_scores);
  xt::xtensor<T, 3> dkh = scores.key, dvh = weighted.values;  // (B, S', D)
  if (o.add_zero_attn)  // the zero key and value are constants: their rows are dropped
    dkh = mha::textbook::append_zero_row_backward(dkh), dvh = mha::textbook::append_zero_row_backward(dvh);
  const auto dq = mha::textbook::split_heads_backward(scores.query, H);  // (L, N, E)
  auto dk = mha::textbook::split_heads_backward(dkh, H);                 // (S [+1], N, E)
  auto dv = mha::textbook::split_heads_backward(dvh, H);                 // (S [+1], N, E)
  tutorial::shape("dq, heads side by side", dq);
  if (o.add_bias_kv) {  // position S's gradient, summed over the batch, is bias_k's (bias_v's)
    const auto bk = mha::textbook::append_bias_backward(dk), bv = mha::textbook::append_bias_backward(dv);
    dk = bk.input, dv = bv.input;  // (S, N, E)
    verdict.matches("grad bias_k vs PyTorch", bk.bias, grad.at("bias_k"));
    verdict.matches("grad bias_v vs PyTorch", bv.bias, grad.at("bias_v"));
  }

  tutorial::step(7, "in-projection: d query = dq W_q, dW_q = dq^T query, and likewise for k and v");
  const auto in = mha::textbook::in_projection_backward(query, key, value, p, dq, dk, dv);  // one gradient per use
  const auto weights = weight_gradients(in.weights, packed);
  const std::string w_name = packed ? "in_proj_weight" : "q_proj_weight";
  tutorial::values("dL/d(" + w_name + "), rows 0-3 (W_q)",
                   xt::view(weights.front().second, xt::range(0, 4), xt::all()));
  for (const auto& [name, g] : weights) verdict.matches("grad " + name + " vs PyTorch", g, grad.at(name));
  const auto inputs = input_gradients(c, in);
  if (c.info.query_is_key || c.info.key_is_value)
    fmt::print("  {}: one object, the sum of the gradients of its uses\n",
               c.info.query_is_key ? "query is key is value" : "key is value");
  for (const auto& [name, g] : inputs) verdict.matches("grad " + name + " vs PyTorch", g, grad.at(name));

  tutorial::step(8, "the module's backward() gives the same; two mistakes do not");
  auto [out, record] = mha::run_forward_for_backward(module, c);
  const auto g = module.backward(record, *c.grad_attn_output, c.grad_attn_output_weights);
  verdict.matches("backward(): grad " + w_name, g.parameters.at(w_name), grad.at(w_name));
  verdict.matches("backward(): grad query", tutorial::value_of(g.query, "grad query"), grad.at("query"));
  // Autograd gives no gradient of the projected q, only of the query input: the mistake
  // is checked there, as grad query = dq W_q (+ the other uses) from a dq without the scale.
  const auto dq_unscaled = mha::textbook::split_heads_backward(
      xt::xtensor<T, 3>(scores.query / mha::textbook::attention_scale<T>(module.head_dim())), H);
  const auto in_unscaled = mha::textbook::in_projection_backward(query, key, value, p, dq_unscaled, dk, dv);
  mistake(verdict, "grad query from dq without the 1 / sqrt(D)", input_gradients(c, in_unscaled).front().second,
          grad.at("query"));
  if (packed) {
    const auto swapped = mha::textbook::pack(mha::SeparateProjections<T>{
        in.weights.w_k, in.weights.w_q, in.weights.w_v, in.weights.b_k, in.weights.b_q, in.weights.b_v});
    mistake<T>(verdict, "grad in_proj_weight as [dW_k; dW_q; dW_v]", swapped.in_proj_weight, grad.at("in_proj_weight"));
  } else {
    mistake<T>(verdict, "grad q_proj_weight taken from dW_k", in.weights.w_k, grad.at("q_proj_weight"));
  }
  return verdict.finish();
}

}  // namespace

int main(int argc, char** argv) try {
  cli::Arguments arguments{"Tutorial 17: the backward pass by hand, checked against PyTorch's autograd"};
  std::string case_name = "backward_cross_unbatched_f64";
  arguments.option("--case", case_name, "a backward golden case (format 2: backward_*)");
  if (const auto stop = arguments.parse(argc, argv)) return *stop;  // --help, or a bad option
  mha::use_best_blas_kernel();  // OpenBLAS's best kernel for this CPU (README: the BLAS kernel)

  tutorial::title("17", "the backward pass by hand",
                  "Each step of the forward, undone by its own formula, gives autograd's gradients.");
  const auto info = mha::read_case_info(tutorial::case_dir(case_name));
  tutorial::refuse_error_case(info);
  tutorial::refuse_unless(info.format == 2, info,
                          "is a forward-only case: it holds no gradients from PyTorch; choose a backward_* case");
  tutorial::refuse_unless(
      !info.training || info.options.dropout == 0 || std::filesystem::exists(info.dir / "dropout_mask.npy"), info,
      "trains with dropout but holds no dropout_mask.npy to replay PyTorch's dropout");
  return info.dtype == "float32" ? run<float>(case_name) : run<double>(case_name);
} catch (const std::exception& e) {  // a case this tutorial cannot take, or a file it cannot read
  fmt::print("error: {}\n", e.what());
  return 2;
}
