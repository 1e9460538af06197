// labs/grader/catalogue.cpp — the catalogue of mistakes: each one's stable id, the step it is made in, one line for the
// student and the page to read again. docs/labs.md has this table (`mha-grade catalogue`
// prints it; the test labs-catalogue-table fails when the two differ).
//
// How each mistake is recomputed is in mistakes.hpp; which lab can show it is the `labs`
// column, and each lab's part lists its mistakes (labs.cpp). The second table, steps(), is
// for an answer no mistake explains: the step each function computes and the page about it.
#include "third_party.hpp"

import mha;
import mha.io;
import mha.golden;

#include "grader.hpp"

namespace grader {

const std::vector<Entry>& catalogue() {
  using M = Mistake;
  // A split mistake is one belief about the layout, held for the weight and the bias alike
  // (variant 0), or for one of them only: a partial swap (1, 2).
  const std::vector<std::string_view> split_ways{"in in_proj_weight and in_proj_bias alike",
                                                 "in in_proj_weight only: in_proj_bias split in order",
                                                 "in in_proj_bias only: in_proj_weight split in order"};
  static const std::vector<Entry> entries{
      {M::qk_swapped, "qk_swapped", "split",
       "rows [0, E) and [E, 2E) of in_proj_weight, of in_proj_bias or of both exchanged: Q and K are swapped",
       "docs/02-packed-layout.md", "01 02 05 07", 3, split_ways},
      {M::kv_swapped, "kv_swapped", "split",
       "rows [E, 2E) and [2E, 3E) of in_proj_weight, of in_proj_bias or of both exchanged: K and V are swapped",
       "docs/02-packed-layout.md", "01 02 05 07", 3, split_ways},
      {M::qv_swapped, "qv_swapped", "split",
       "rows [0, E) and [2E, 3E) of in_proj_weight, of in_proj_bias or of both exchanged: Q and V are swapped",
       "docs/02-packed-layout.md", "01 02 05 07", 3, split_ways},
      {M::order_kvq, "order_kvq", "split",
       "in_proj_weight, in_proj_bias or both read as [W_k; W_v; W_q]: the blocks are Q, K, V from the top",
       "docs/02-packed-layout.md", "01 02 05", 3, split_ways},
      {M::order_vqk, "order_vqk", "split",
       "in_proj_weight, in_proj_bias or both read as [W_v; W_q; W_k]: the blocks are Q, K, V from the top",
       "docs/02-packed-layout.md", "01 02 05", 3, split_ways},
      {M::bias_not_split,
       "bias_not_split",
       "split",
       "in_proj_bias (3E) not split into b_q, b_k, b_v: each is its third [i*E, (i+1)*E), as the weight's blocks",
       "docs/02-packed-layout.md",
       "01",
       2,
       {"left out: b_q, b_k, b_v not given", "given whole: b_q, b_k, b_v each the (3E) in_proj_bias"}},
      {M::weight_not_transposed, "weight_not_transposed", "projection",
       "x W instead of x W^T: a weight is stored (out, in), and a square one still runs",
       "docs/03-projections-by-hand.md", "02 05", 2},
      {M::bias_missing, "bias_missing", "projection", "the in-projection's bias b_q, b_k, b_v left out",
       "docs/03-projections-by-hand.md", "02 05 07"},
      {M::no_scaling, "no_scaling", "scaling", "the scores q k^T not scaled: q is multiplied by 1/sqrt(D) first",
       "docs/07-why-scaling.md", "03 05 07"},
      {M::scaled_by_d_not_sqrt, "scaled_by_d_not_sqrt", "scaling", "q divided by D instead of sqrt(D)",
       "docs/07-why-scaling.md", "03 05"},
      {M::scaled_by_e_not_d, "scaled_by_e_not_d", "scaling",
       "q divided by sqrt(E) instead of sqrt(D): the scale is the head's size, D = E / H", "docs/07-why-scaling.md",
       "05"},
      {M::heads_split_wrong, "heads_split_wrong", "heads",
       "each row of E read as (D, H) instead of (H, D): head h is columns [h*D, (h+1)*D), not every H-th column",
       "docs/05-heads.md", "03 05 07"},
      {M::heads_numbered_head_major, "heads_numbered_head_major", "heads",
       "batch-heads numbered b = h*N + n, in the split and the merge alike: PyTorch's are b = n*H + h, the heads "
       "of one batch entry side by side",
       "docs/05-heads.md", "03 05"},
      {M::merge_without_transpose, "merge_without_transpose", "heads",
       "the heads (N*H, L, D) read as (L, N, E) without transposing back: merge is transpose(0, 1), then the view",
       "docs/05-heads.md", "03 05"},
      {M::softmax_wrong_axis, "softmax_wrong_axis", "softmax",
       "softmax over the queries instead of the keys: each row of weights (one query) must sum to 1",
       "docs/05-heads.md", "03 05"},
      {M::mask_inverted, "mask_inverted", "masks",
       "a bool mask's True read as \"may attend\": in nn.MultiheadAttention True means masked", "docs/09-masks.md",
       "04 05", 3},
      {M::mask_ignored, "mask_ignored", "masks", "a mask given but not applied to the scores", "docs/09-masks.md",
       "04 05", 3},
      {M::key_padding_mask_wrong_rows, "key_padding_mask_wrong_rows", "masks",
       "key_padding_mask (N, S) given to the wrong batch-heads: batch-head b = n*H + h takes row n = b / H",
       "docs/09-masks.md", "04 05"},
      {M::mask_after_softmax, "mask_after_softmax", "masks",
       "the mask added to the weights after the softmax: it is added to the scores, so that a masked key gets weight 0",
       "docs/09-masks.md", "03 05"},
      {M::weights_not_averaged, "weights_not_averaged", "output",
       "attn_output_weights summed over the heads, not averaged", "docs/11-attention-maps.md", "05"},
      {M::out_proj_missing, "out_proj_missing", "output",
       "the output projection out_proj left out: attn_output is the heads side by side", "docs/05-heads.md", "05 07"},
      {M::grad_transposed, "grad_transposed", "backward: linear",
       "a weight gradient transposed: dW = dY^T X is (out, in), as the weight", "docs/17-backward-by-hand.md", "06", 3},
      {M::softmax_jacobian_diagonal_missing, "softmax_jacobian_diagonal_missing", "backward: softmax",
       "the softmax backward without its diagonal: dZ = P * (dP - rowsum(dP * P)), not -P * rowsum(dP * P)",
       "docs/17-backward-by-hand.md", "06"},
      {M::grad_scale_missing, "grad_scale_missing", "backward: scores",
       "the 1/sqrt(D) missing from dq or dk: the scores are (q / sqrt(D)) k^T", "docs/17-backward-by-hand.md", "06", 3},
      {M::bias_grad_not_summed, "bias_grad_not_summed", "backward: linear",
       "a bias gradient not summed over the batch and the positions: every row of dY used the bias",
       "docs/17-backward-by-hand.md", "06", 2},
      {M::cache_appended_after_attention, "cache_appended_after_attention", "decoding",
       "the new token's k and v appended after attending: its query sees positions 0 to t-1, not itself "
       "(its causal row off by one)",
       "docs/19-decoding.md", "07"},
      {M::cache_holds_inputs, "cache_holds_inputs", "decoding",
       "the cache holds the tokens as they came, split into heads: it holds their k and v, after the in-projection",
       "docs/19-decoding.md", "07"},
      {M::new_token_attended_twice, "new_token_attended_twice", "decoding",
       "the new token's k and v appended to the cache and added again: its position counts twice in the softmax",
       "docs/19-decoding.md", "07"},
      {M::cache_rescaled_each_step, "cache_rescaled_each_step", "decoding",
       "the cached keys multiplied by 1/sqrt(D) at every step instead of q once: key j is scaled t - j + 1 times",
       "docs/19-decoding.md", "07"},
      {M::causal_mask_top_left, "causal_mask_top_left", "decoding",
       "a causal mask aligned to the top left (is_causal's) on the step's one query: row 0 sees position 0 only",
       "docs/19-decoding.md", "07"},
  };
  return entries;
}

// Found by its id, not its position: the table lists each mistake beside its step's others.
const Entry& entry(Mistake m) {
  for (const auto& e : catalogue())
    if (e.id == m) return e;
  throw std::logic_error(fmt::format("the catalogue has no entry for mistake {}", static_cast<int>(m)));
}

const std::vector<Step>& steps() {
  static const std::vector<Step> table{
      {"split_packed", "in_proj_weight split into W_q, W_k, W_v (and in_proj_bias into b_q, b_k, b_v)",
       "docs/02-packed-layout.md"},
      {"pack", "W_q, W_k, W_v (and b_q, b_k, b_v) packed into in_proj_weight (and in_proj_bias)",
       "docs/02-packed-layout.md"},
      {"in_projection_packed", "the in-projection: q = query W_q^T + b_q, and k, v the same way",
       "docs/03-projections-by-hand.md"},
      {"in_projection", "the in-projection: q = query W_q^T + b_q, and k, v the same way",
       "docs/03-projections-by-hand.md"},
      {"split_heads", "the split into heads: (L, N, E) -> (N*H, L, D), batch-head b = n*H + h", "docs/05-heads.md"},
      {"scaled_dot_product_attention", "the scaled scores, the mask, the softmax over the keys, the weighted values",
       "docs/05-heads.md"},
      {"merge_heads", "the heads side by side again: (N*H, L, D) -> (L, N, E)", "docs/05-heads.md"},
      {"prepare_mask", "attn_mask and key_padding_mask made one additive (1 or N*H, L, S) mask", "docs/09-masks.md"},
      {"forward", "the whole forward, in PyTorch's order", "docs/05-heads.md"},
      {"backward", "the gradients of the forward, step by step backwards", "docs/17-backward-by-hand.md"},
      {"decode_step", "one decoding step with a KV cache", "docs/19-decoding.md"},
  };
  return table;
}

const Step* step_of(std::string_view function) {
  function = function.substr(0, function.find(' '));  // "forward (.npy answers)" is the forward
  for (const auto& s : steps())
    if (s.function == function) return &s;
  return nullptr;
}

std::optional<Mistake> mistake_named(std::string_view name) {
  for (const auto& e : catalogue())
    if (e.name == name) return e.id;
  return std::nullopt;
}

std::string catalogue_markdown() {
  std::string table = "| id | step | what went wrong | reread | labs |\n| --- | --- | --- | --- | --- |\n";
  for (const auto& e : catalogue()) {
    // docs/labs.md sits in docs/: its links drop the folder.
    std::string_view page = e.page;
    if (page.starts_with("docs/")) page.remove_prefix(5);
    table += fmt::format("| `{}` | {} | {} | [{}]({}) | {} |\n", e.name, e.step, e.explanation, page, page, e.labs);
  }
  return table;
}

std::optional<int> made(const Injections& injections, Mistake m) {
  for (const auto& i : injections)
    if (i.mistake == m) return i.variant;
  return std::nullopt;
}

std::string names(const Injections& injections) {
  std::vector<std::string> ids;
  for (const auto& i : injections) ids.emplace_back(entry(i.mistake).name);
  std::sort(ids.begin(), ids.end());
  return fmt::format("{}", fmt::join(ids, " + "));
}

}  // namespace grader
