// modules/io/layouts.hpp — other models' fused or separate Q/K/V weights, to and from PyTorch's.
//
// PyTorch's nn.MultiheadAttention keeps the in-projection as in_proj_weight (3E, E) =
// [W_q; W_k; W_v] with y = x W^T + b (see mha's textbook/in_projection.hpp). Other model families
// store the same three matrices differently. Each pair of functions here converts one
// such layout to PyTorch's state_dict names (in_proj_weight, in_proj_bias,
// out_proj.weight, out_proj.bias) and back, with nothing but transposes, reshapes and
// row permutations, so a round trip gives back the very same numbers:
//
//   from_gpt2 / to_gpt2                  HF GPT-2 attn.c_attn, attn.c_proj (Conv1D)
//   from_bert / to_bert                  BERT attention.self.query/key/value, output.dense
//   from_gpt_neox / to_gpt_neox          GPT-NeoX and Megatron checkpoint v2 query_key_value
//   from_megatron_v1 / to_megatron_v1    Megatron checkpoint v1 query_key_value
//   from_llama / to_llama                Llama q_proj, k_proj, v_proj, o_proj (Hkv <= H)
//   from_onnx_attention / to_onnx_attention   ONNX Runtime com.microsoft.Attention
//
// The formulas, with the source of each, are in docs/13-weights.md. A layout's tensors are
// passed under the names its checkpoints use after the layer's prefix ("c_attn.weight"
// for "h.0.attn.c_attn.weight"); keys a conversion does not need (BERT's
// output.LayerNorm.*, say) are not read. Only the attention's weights are converted: a
// Llama layer's rotary embedding, for one, is not part of nn.MultiheadAttention.
//
// Legend: E = embed_dim, H = heads, D = head_dim = E / H, Hkv = key/value heads (Llama).
//
// Included by modules/io.cppm, in its module purview: no module line of its own.
// Uses mha.

namespace mha::detail {

// The tensor `key` of a layout, which must be there with the given shape.
// An empty `shape` checks presence only.
template <class T>
xt::xarray<T> layout_tensor(const StateDict<T>& d, const std::string& key, const std::vector<std::size_t>& shape) {
  check(d.contains(key), key, "missing (keys given: {})", [&] {
    std::vector<std::string> names;
    for (const auto& [name, _] : d) names.push_back(name);
    return fmt::format("{}", fmt::join(names, ", "));
  }());
  const auto& t = d.at(key);
  if (shape.empty()) return t;
  check(std::equal(shape.begin(), shape.end(), t.shape().begin(), t.shape().end()), key, "expected shape {}, got {}",
        shape_string(shape), shape_string(t.shape()));
  return t;
}

// One extent of a weight that must be there and be 2-D: axis 1 of (rows, E) is E.
template <class T>
std::size_t layout_extent(const StateDict<T>& d, const std::string& key, std::size_t axis) {
  layout_tensor(d, key, {});
  const auto& t = d.at(key);
  check(t.dimension() == 2, key, "expected a 2-D weight, got shape {}", shape_string(t.shape()));
  return t.shape(axis);
}

template <class T>
std::size_t layout_columns(const StateDict<T>& d, const std::string& key) {
  return layout_extent(d, key, 1);
}

std::size_t layout_head_dim(std::size_t E, std::size_t H) {
  check(H > 0 && E % H == 0, "num_heads", "embed_dim {} must be divisible by num_heads, got num_heads = {}", E, H);
  return E / H;
}

template <class T>
xt::xarray<T> transposed_copy(const xt::xarray<T>& w) {
  return xt::xarray<T>(xt::transpose(w));  // (a, b) -> (b, a)
}

// The 3E rows of a fused weight (3E, C), or of a bias (3E) seen as (3E, 1), regrouped by
// an axis permutation of a 4-D view: (a0, a1, a2, C) -> the axes in `order`.
template <class T>
xt::xarray<T> permute_fused_rows(const xt::xarray<T>& w, std::array<std::size_t, 3> view,
                                 std::array<std::size_t, 4> order) {
  const std::size_t C = w.dimension() == 2 ? w.shape(1) : 1;
  const xt::xarray<T> grouped = xt::reshape_view(w, std::vector<std::size_t>{view[0], view[1], view[2], C});
  xt::xarray<T> moved = xt::transpose(grouped, {order[0], order[1], order[2], order[3]});
  moved.reshape(w.shape());
  return moved;
}

// Llama's key/value heads: between 1 and H, and a divisor of H.
void check_kv_heads(std::size_t H, std::size_t Hkv) {
  check(Hkv > 0 && Hkv <= H && H % Hkv == 0, "num_key_value_heads", "must divide num_heads = {}, got {}", H, Hkv);
}

}  // namespace mha::detail

export namespace mha {

// ---- HF GPT-2: Conv1D, y = x W + b, so each weight is the transpose of Linear's -------

// c_attn.weight (E, 3E), c_attn.bias (3E), c_proj.weight (E, E), c_proj.bias (E)
//   -> in_proj_weight = c_attn.weight^T (3E, E), out_proj.weight = c_proj.weight^T.
template <class T>
StateDict<T> from_gpt2(const StateDict<T>& gpt2) {
  using namespace detail;
  const std::size_t E = layout_extent(gpt2, "c_attn.weight", 0);
  return {{"in_proj_weight", transposed_copy(layout_tensor(gpt2, "c_attn.weight", {E, 3 * E}))},  // (E, 3E) -> (3E, E)
          {"in_proj_bias", layout_tensor(gpt2, "c_attn.bias", {3 * E})},
          {"out_proj.weight", transposed_copy(layout_tensor(gpt2, "c_proj.weight", {E, E}))},
          {"out_proj.bias", layout_tensor(gpt2, "c_proj.bias", {E})}};
}

template <class T>
StateDict<T> to_gpt2(const StateDict<T>& torch) {
  using namespace detail;
  const std::size_t E = layout_columns(torch, "in_proj_weight");
  return {{"c_attn.weight", transposed_copy(layout_tensor(torch, "in_proj_weight", {3 * E, E}))},  // (3E, E) -> (E, 3E)
          {"c_attn.bias", layout_tensor(torch, "in_proj_bias", {3 * E})},
          {"c_proj.weight", transposed_copy(layout_tensor(torch, "out_proj.weight", {E, E}))},
          {"c_proj.bias", layout_tensor(torch, "out_proj.bias", {E})}};
}

// ---- BERT: three nn.Linear, stacked ----------------------------------------------------

// self.query / self.key / self.value .weight (E, E) and .bias (E), output.dense
//   -> in_proj_weight = [query.weight; key.weight; value.weight], out_proj = output.dense.
template <class T>
StateDict<T> from_bert(const StateDict<T>& bert) {
  using namespace detail;
  const std::size_t E = layout_columns(bert, "self.query.weight");
  const auto w = [&](const char* name) { return layout_tensor(bert, fmt::format("self.{}.weight", name), {E, E}); };
  const auto b = [&](const char* name) { return layout_tensor(bert, fmt::format("self.{}.bias", name), {E}); };
  return {{"in_proj_weight", xt::concatenate(xt::xtuple(w("query"), w("key"), w("value")), 0)},  // (3E, E)
          {"in_proj_bias", xt::concatenate(xt::xtuple(b("query"), b("key"), b("value")), 0)},    // (3E)
          {"out_proj.weight", layout_tensor(bert, "output.dense.weight", {E, E})},
          {"out_proj.bias", layout_tensor(bert, "output.dense.bias", {E})}};
}

template <class T>
StateDict<T> to_bert(const StateDict<T>& torch) {
  using namespace detail;
  const std::size_t E = layout_columns(torch, "in_proj_weight");
  const auto w = layout_tensor(torch, "in_proj_weight", {3 * E, E});
  const auto b = layout_tensor(torch, "in_proj_bias", {3 * E});
  StateDict<T> bert;
  const char* names[] = {"query", "key", "value"};
  for (std::size_t i = 0; i < 3; ++i) {
    const auto rows = mha::textbook::qkv_rows(i, E);  // rows [iE, (i+1)E)
    bert.emplace(fmt::format("self.{}.weight", names[i]), xt::view(w, xt::range(rows.first, rows.end()), xt::all()));
    bert.emplace(fmt::format("self.{}.bias", names[i]), xt::view(b, xt::range(rows.first, rows.end())));
  }
  bert.emplace("output.dense.weight", layout_tensor(torch, "out_proj.weight", {E, E}));
  bert.emplace("output.dense.bias", layout_tensor(torch, "out_proj.bias", {E}));
  return bert;
}

// ---- GPT-NeoX / Megatron v2 and Megatron v1: one fused weight, interleaved per head ---

// The fused rows of a query_key_value weight or bias, in one of two per-head orders.
enum class HeadInterleave {
  head_qkv_dim,  // [head][q,k,v][head_dim]: GPT-NeoX, Megatron checkpoint v2
  head_dim_qkv,  // [head][head_dim][q,k,v]: Megatron checkpoint v1
};

// A per-head fused weight (3E, C) or bias (3E) -> PyTorch's [Q; K; V] rows.
template <class T>
xt::xarray<T> deinterleave_qkv(const xt::xarray<T>& fused, std::size_t H, HeadInterleave order) {
  const std::size_t D = detail::layout_head_dim(fused.shape(0) / 3, H);
  if (order == HeadInterleave::head_qkv_dim)
    return detail::permute_fused_rows(fused, {H, 3, D}, {1, 0, 2, 3});  // (H, 3, D, C) -> (3, H, D, C)
  return detail::permute_fused_rows(fused, {H, D, 3}, {2, 0, 1, 3});    // (H, D, 3, C) -> (3, H, D, C)
}

// PyTorch's [Q; K; V] rows (3E, C) or (3E) -> the per-head fused order.
template <class T>
xt::xarray<T> interleave_qkv(const xt::xarray<T>& packed, std::size_t H, HeadInterleave order) {
  const std::size_t D = detail::layout_head_dim(packed.shape(0) / 3, H);
  if (order == HeadInterleave::head_qkv_dim)
    return detail::permute_fused_rows(packed, {3, H, D}, {1, 0, 2, 3});  // (3, H, D, C) -> (H, 3, D, C)
  return detail::permute_fused_rows(packed, {3, H, D}, {1, 2, 0, 3});    // (3, H, D, C) -> (H, D, 3, C)
}

// query_key_value.weight (3E, E), query_key_value.bias (3E), dense.weight (E, E),
// dense.bias (E) -> PyTorch's names, the fused rows regrouped from `order`.
template <class T>
StateDict<T> from_query_key_value(const StateDict<T>& fused, std::size_t num_heads, HeadInterleave order) {
  using namespace detail;
  const std::size_t E = layout_columns(fused, "query_key_value.weight");
  layout_head_dim(E, num_heads);
  return {{"in_proj_weight",
           deinterleave_qkv(layout_tensor(fused, "query_key_value.weight", {3 * E, E}), num_heads, order)},
          {"in_proj_bias", deinterleave_qkv(layout_tensor(fused, "query_key_value.bias", {3 * E}), num_heads, order)},
          {"out_proj.weight", layout_tensor(fused, "dense.weight", {E, E})},
          {"out_proj.bias", layout_tensor(fused, "dense.bias", {E})}};
}

template <class T>
StateDict<T> to_query_key_value(const StateDict<T>& torch, std::size_t num_heads, HeadInterleave order) {
  using namespace detail;
  const std::size_t E = layout_columns(torch, "in_proj_weight");
  layout_head_dim(E, num_heads);
  return {
      {"query_key_value.weight", interleave_qkv(layout_tensor(torch, "in_proj_weight", {3 * E, E}), num_heads, order)},
      {"query_key_value.bias", interleave_qkv(layout_tensor(torch, "in_proj_bias", {3 * E}), num_heads, order)},
      {"dense.weight", layout_tensor(torch, "out_proj.weight", {E, E})},
      {"dense.bias", layout_tensor(torch, "out_proj.bias", {E})}};
}

template <class T>
StateDict<T> from_gpt_neox(const StateDict<T>& neox, std::size_t num_heads) {
  return from_query_key_value(neox, num_heads, HeadInterleave::head_qkv_dim);
}
template <class T>
StateDict<T> to_gpt_neox(const StateDict<T>& torch, std::size_t num_heads) {
  return to_query_key_value(torch, num_heads, HeadInterleave::head_qkv_dim);
}
template <class T>
StateDict<T> from_megatron_v1(const StateDict<T>& megatron, std::size_t num_heads) {
  return from_query_key_value(megatron, num_heads, HeadInterleave::head_dim_qkv);
}
template <class T>
StateDict<T> to_megatron_v1(const StateDict<T>& torch, std::size_t num_heads) {
  return to_query_key_value(torch, num_heads, HeadInterleave::head_dim_qkv);
}

// ---- Llama: separate projections, no biases, Hkv key/value heads ----------------------

// Each of the Hkv heads (Hkv*D, C) used by H/Hkv query heads in turn -> (H*D, C), as
// HF's repeat_kv: query head h reads key/value head h / (H/Hkv).
template <class T>
xt::xarray<T> repeat_kv_heads(const xt::xarray<T>& w, std::size_t H, std::size_t Hkv, std::size_t D) {
  const std::size_t C = w.shape(1), group = H / Hkv;
  xt::xarray<T> out = xt::xarray<T>::from_shape({H * D, C});
  for (std::size_t h = 0; h < H; ++h)
    xt::view(out, xt::range(h * D, (h + 1) * D), xt::all()) =
        xt::view(w, xt::range((h / group) * D, (h / group + 1) * D), xt::all());
  return out;
}

// The inverse: one head of each group of H/Hkv, after checking the group's heads are
// equal (otherwise the layer is not a grouped-query layer and the conversion would lose
// weights).
template <class T>
xt::xarray<T> group_kv_heads(const xt::xarray<T>& w, std::size_t H, std::size_t Hkv, std::size_t D,
                             const std::string& name) {
  const std::size_t C = w.shape(1), group = H / Hkv;
  xt::xarray<T> out = xt::xarray<T>::from_shape({Hkv * D, C});
  for (std::size_t h = 0; h < H; ++h) {
    const auto head = xt::view(w, xt::range(h * D, (h + 1) * D), xt::all());
    const std::size_t g = h / group;
    if (h % group == 0) xt::view(out, xt::range(g * D, (g + 1) * D), xt::all()) = head;
    else
      check(head == xt::view(out, xt::range(g * D, (g + 1) * D), xt::all()), name,
            "head {} differs from head {}: with num_key_value_heads = {}, heads {}..{} must be copies of one head", h,
            g * group, Hkv, g * group, (g + 1) * group - 1);
  }
  return out;
}

// q_proj.weight (H*D, E), k_proj.weight, v_proj.weight (Hkv*D, E), o_proj.weight (E, H*D)
//   -> in_proj_weight = [q_proj; repeat(k_proj); repeat(v_proj)] (3E, E), out_proj = o_proj.
template <class T>
StateDict<T> from_llama(const StateDict<T>& llama, std::size_t num_heads, std::size_t num_kv_heads) {
  using namespace detail;
  const std::size_t E = layout_columns(llama, "q_proj.weight"), D = layout_head_dim(E, num_heads);
  detail::check_kv_heads(num_heads, num_kv_heads);
  const auto k = layout_tensor(llama, "k_proj.weight", {num_kv_heads * D, E});
  const auto v = layout_tensor(llama, "v_proj.weight", {num_kv_heads * D, E});
  return {{"in_proj_weight", xt::concatenate(xt::xtuple(layout_tensor(llama, "q_proj.weight", {E, E}),
                                                        repeat_kv_heads(k, num_heads, num_kv_heads, D),
                                                        repeat_kv_heads(v, num_heads, num_kv_heads, D)),
                                             0)},  // (3E, E)
          {"out_proj.weight", layout_tensor(llama, "o_proj.weight", {E, E})}};
}

template <class T>
StateDict<T> to_llama(const StateDict<T>& torch, std::size_t num_heads, std::size_t num_kv_heads) {
  using namespace detail;
  const std::size_t E = layout_columns(torch, "in_proj_weight"), D = layout_head_dim(E, num_heads);
  detail::check_kv_heads(num_heads, num_kv_heads);
  check(!torch.contains("in_proj_bias") && !torch.contains("out_proj.bias"), "in_proj_bias",
        "Llama's projections have no bias; the module must have bias=False");
  const auto w = layout_tensor(torch, "in_proj_weight", {3 * E, E});
  const auto rows = [&](std::size_t block) {
    const auto r = mha::textbook::qkv_rows(block, E);
    return xt::xarray<T>(xt::view(w, xt::range(r.first, r.end()), xt::all()));
  };
  return {{"q_proj.weight", rows(0)},
          {"k_proj.weight", group_kv_heads(rows(1), num_heads, num_kv_heads, D, "in_proj_weight rows [E, 2E) (W_k)")},
          {"v_proj.weight", group_kv_heads(rows(2), num_heads, num_kv_heads, D, "in_proj_weight rows [2E, 3E) (W_v)")},
          {"o_proj.weight", layout_tensor(torch, "out_proj.weight", {E, E})}};
}

// ---- ONNX Runtime com.microsoft.Attention: input 1 weights (E, 3E), input 2 bias (3E) --

// weight (E, 3E) with Q = X weight[:, 0:E] + bias[0:E], bias (3E) -> in_proj_weight =
// weight^T. The op has no output projection: an exported graph keeps it as a separate
// MatMul, so out_proj.weight and out_proj.bias pass through under PyTorch's names.
template <class T>
StateDict<T> from_onnx_attention(const StateDict<T>& onnx) {
  using namespace detail;
  const std::size_t E = layout_extent(onnx, "weight", 0);
  return {{"in_proj_weight", transposed_copy(layout_tensor(onnx, "weight", {E, 3 * E}))},  // (E, 3E) -> (3E, E)
          {"in_proj_bias", layout_tensor(onnx, "bias", {3 * E})},
          {"out_proj.weight", layout_tensor(onnx, "out_proj.weight", {E, E})},
          {"out_proj.bias", layout_tensor(onnx, "out_proj.bias", {E})}};
}

template <class T>
StateDict<T> to_onnx_attention(const StateDict<T>& torch) {
  using namespace detail;
  const std::size_t E = layout_columns(torch, "in_proj_weight");
  return {{"weight", transposed_copy(layout_tensor(torch, "in_proj_weight", {3 * E, E}))},  // (3E, E) -> (E, 3E)
          {"bias", layout_tensor(torch, "in_proj_bias", {3 * E})},
          {"out_proj.weight", layout_tensor(torch, "out_proj.weight", {E, E})},
          {"out_proj.bias", layout_tensor(torch, "out_proj.bias", {E})}};
}

}  // namespace mha
