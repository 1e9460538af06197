// labs/grader/labs.cpp — each lab's graded parts: which golden cases a part takes, what the student's function is
// given and what it answers, PyTorch's tensors for it, and the grader's recomputation under
// the part's mistakes.
//
// A part's tensors are named and listed in the forward's order (q, k, v, heads, weights,
// attn_output; in the backward, out_proj's gradients first): the first that differs is the
// first step that went wrong.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads,
// D = head_dim = E / H, B = N*H.
#include "third_party.hpp"

import mha;
import mha.core;
import mha.io;
import mha.golden;

#include "grader.hpp"
#include "library.hpp"
#include "mistakes.hpp"
#include "decoding.hpp"

namespace grader {

namespace {

using M = Mistake;
const std::vector<Mistake> split_mistakes{M::qk_swapped, M::kv_swapped, M::qv_swapped, M::order_kvq, M::order_vqk};

bool has_file(const mha::CaseInfo& info, const char* name) {
  return std::filesystem::exists(info.dir / (std::string(name) + ".npy"));
}

// A forward case of a module (versions 1 and 2) that PyTorch computed, with its q, k, v;
// not one where PyTorch 1.13 and 2.x compute differently (docs/15-versions.md): the labs'
// steps are one generation's.
bool module_case(const mha::CaseInfo& info) {
  return !info.is_functional() && !info.expect_error && !info.generations_differ && has_file(info, "q");
}

// What the labs from 03 on take: the module's forward without bias_k/bias_v, the zero key
// or dropout (the tutorials cover those; the labs leave them out).
bool attention_case(const mha::CaseInfo& info) {
  return module_case(info) && !info.options.add_bias_kv && !info.options.add_zero_attn && !info.training;
}

template <class T>
xt::xtensor<T, 3> tensor3(const xt::xarray<T>& a) {
  return a;
}

template <class T>
std::optional<xt::xtensor<T, 1>> parameter1(const mha::Case<T>& c, const std::string& name) {
  if (!c.parameters.contains(name)) return std::nullopt;
  return xt::xtensor<T, 1>(c.parameters.at(name));
}

// PyTorch's tensors of the case, by name.
template <class T>
Tensors<T> files(const mha::Case<T>& c, std::initializer_list<const char*> names) {
  Tensors<T> t;
  for (const char* name : names)
    if (c.expected.contains(name)) t.push_back({name, c.expected.at(name)});
  return t;
}

// The inputs as the in-projection sees them: (L, N, E), (S, N, Ek), (S, N, Ev).
template <class T>
struct SeqFirst {
  xt::xtensor<T, 3> query, key, value;
};
template <class T>
SeqFirst<T> seq_first(const mha::Case<T>& c) {
  const bool bf = c.info.options.batch_first && c.query.dimension() == 3;
  return {lib::seq_first(c.query, bf), lib::seq_first(c.key, bf), lib::seq_first(c.value, bf)};
}

// The projections of q, k, v with the given weights.
template <class T>
Tensors<T> qkv(const SeqFirst<T>& x, const mha::SeparateProjections<T>& w, bool not_transposed) {
  return {{"q", project(x.query, w.w_q, w.b_q, not_transposed)},
          {"k", project(x.key, w.w_k, w.b_k, not_transposed)},
          {"v", project(x.value, w.w_v, w.b_v, not_transposed)}};
}

template <class T>
Tensors<T> blocks(const mha::SeparateProjections<T>& w) {
  Tensors<T> t{{"W_q", w.w_q}, {"W_k", w.w_k}, {"W_v", w.w_v}};
  for (auto [name, b] : {std::pair{"b_q", &w.b_q}, {"b_k", &w.b_k}, {"b_v", &w.b_v}})
    if (*b) t.push_back({name, **b});
  return t;
}

// --- what the student's code is given ---

// The sequence-first inputs as the in-projection takes them, aliases as one object.
template <class T>
void seq_first_inputs(const mha::Case<T>& c, InputWriter& in) {
  const auto x = seq_first(c);
  in.tensor<T>("query", x.query);
  in.tensor<T>("key", c.info.query_is_key ? x.query : x.key);
  in.tensor<T>("value", c.info.key_is_value ? (c.info.query_is_key ? x.query : x.key) : x.value);
}

template <class T>
void separate_inputs(const mha::SeparateProjections<T>& w, InputWriter& in) {
  in.tensor<T>("W_q", w.w_q), in.tensor<T>("W_k", w.w_k), in.tensor<T>("W_v", w.w_v);
  if (w.b_q) in.tensor<T>("b_q", *w.b_q), in.tensor<T>("b_k", *w.b_k), in.tensor<T>("b_v", *w.b_v);
}

template <class T>
void packed_inputs(const mha::Case<T>& c, InputWriter& in) {
  in.tensor<T>("in_proj_weight", c.parameters.at("in_proj_weight"));
  if (c.parameters.contains("in_proj_bias")) in.tensor<T>("in_proj_bias", c.parameters.at("in_proj_bias"));
}

// The whole module's call: its options, its parameters, query, key and value as the caller
// gave them, the forward's options (labs 05 and 06).
template <class T>
void module_inputs(const mha::Case<T>& c, InputWriter& in) {
  const mha::Options& o = c.info.options;
  in.scalar("embed_dim", std::to_string(o.embed_dim)), in.scalar("num_heads", std::to_string(o.num_heads));
  in.flag("bias", o.bias), in.flag("add_bias_kv", o.add_bias_kv), in.flag("add_zero_attn", o.add_zero_attn);
  if (o.kdim) in.scalar("kdim", std::to_string(*o.kdim));
  if (o.vdim) in.scalar("vdim", std::to_string(*o.vdim));
  in.flag("batch_first", o.batch_first);
  for (const auto& [name, tensor] : c.parameters) in.tensor<T>("parameter." + name, tensor);
  in.tensor<T>("query", c.query);
  if (!c.info.query_is_key) in.tensor<T>("key", c.key);
  if (!c.info.key_is_value) in.tensor<T>("value", c.value);
  in.flag("query_is_key", c.info.query_is_key), in.flag("key_is_value", c.info.key_is_value);
  in.flag("need_weights", c.forward.need_weights), in.flag("average_attn_weights", c.forward.average_attn_weights);
  if (c.forward.attn_mask) in.mask<T>("attn_mask", *c.forward.attn_mask);
  if (c.forward.key_padding_mask) in.mask<T>("key_padding_mask", *c.forward.key_padding_mask);
}

// --- lab 01 ---

template <class T>
mha::SeparateProjections<T> answered_blocks(const Given<T>& g) {
  auto b = [&](const char* name) -> std::optional<xt::xtensor<T, 1>> {
    if (auto t = g.maybe(std::string("split_packed.") + name)) return xt::xtensor<T, 1>(*t);
    return std::nullopt;
  };
  return {g.tensor("split_packed.W_q"),
          g.tensor("split_packed.W_k"),
          g.tensor("split_packed.W_v"),
          b("b_q"),
          b("b_k"),
          b("b_v")};
}

// The blocks, then the q, k, v they give where they fit a linear layer: each weight
// (E, E), each bias (E) or none. Blocks that do not fit (a bias left whole) give no q, k, v.
template <class T>
Tensors<T> blocks_and_qkv(const mha::Case<T>& c, const mha::SeparateProjections<T>& w) {
  Tensors<T> t = blocks(w);
  const std::size_t E = static_cast<std::size_t>(c.info.options.embed_dim);
  const bool fits = std::all_of(t.begin(), t.end(), [&](const Named<T>& b) {
    const auto& s = b.tensor.shape();
    return (s.size() == 1 || s.size() == 2) && s[0] == E && (s.size() == 1 || s[1] == E);
  });
  if (fits)
    for (auto& x : qkv(seq_first(c), w, false)) t.push_back(std::move(x));
  return t;
}

template <class T>
PartFunctions<T> split_functions() {
  return {packed_inputs<T>,
          [](const mha::Case<T>& c, const Given<T>& g) { return blocks_and_qkv(c, answered_blocks(g)); },
          [](const mha::Case<T>& c) {
            return files(c, {"q", "k", "v"});
          },
          [](const mha::Case<T>& c, const Injections& m) {
            return blocks_and_qkv(
                c, in_projection_weights(c.parameters, static_cast<std::size_t>(c.info.options.embed_dim), m));
          }};
}

template <class T>
PartFunctions<T> pack_functions() {
  return {[](const mha::Case<T>& c, InputWriter& in) {
            separate_inputs(
                lib::split_packed(xt::xtensor<T, 2>(c.parameters.at("in_proj_weight")), parameter1(c, "in_proj_bias")),
                in);
          },
          [](const mha::Case<T>&, const Given<T>& g) {
            Tensors<T> t{{"in_proj_weight", g.tensor("pack.in_proj_weight")}};
            if (auto b = g.maybe("pack.in_proj_bias")) t.push_back({"in_proj_bias", *b});
            return t;
          },
          [](const mha::Case<T>& c) {
            Tensors<T> t{{"in_proj_weight", c.parameters.at("in_proj_weight")}};
            if (c.parameters.contains("in_proj_bias")) t.push_back({"in_proj_bias", c.parameters.at("in_proj_bias")});
            return t;
          },
          [](const mha::Case<T>& c, const Injections& m) {
            // The blocks put where the mistaken layout says they go: W_q in block qkv_blocks[0].
            const std::size_t E = static_cast<std::size_t>(c.info.options.embed_dim);
            Tensors<T> t;
            for (const char* name : {"in_proj_weight", "in_proj_bias"}) {
              if (!c.parameters.contains(name)) continue;
              const auto block = qkv_blocks(m, /*of_bias=*/std::string_view(name) == "in_proj_bias");
              const xt::xarray<T>& right = c.parameters.at(name);
              xt::xarray<T> packed = right;
              for (std::size_t x = 0; x < 3; ++x)
                xt::view(packed, xt::range(block[x] * E, (block[x] + 1) * E)) =
                    xt::view(right, xt::range(x * E, (x + 1) * E));
              t.push_back({name, packed});
            }
            return t;
          }};
}

// --- lab 02 ---

// The in-projection of a case under the mistakes: q, k, v.
template <class T>
Tensors<T> in_projection_under(const mha::Case<T>& c, const Injections& m) {
  const auto w = in_projection_weights(c.parameters, static_cast<std::size_t>(c.info.options.embed_dim), m);
  return qkv(seq_first(c), w, made(m, Mistake::weight_not_transposed).has_value());
}

template <class T>
std::function<Tensors<T>(const mha::Case<T>&, const Given<T>&)> qkv_answer(const std::string& function) {
  return [function](const mha::Case<T>&, const Given<T>& g) {
    return Tensors<T>{
        {"q", g.tensor(function + ".q")}, {"k", g.tensor(function + ".k")}, {"v", g.tensor(function + ".v")}};
  };
}

template <class T>
PartFunctions<T> packed_projection_functions() {
  return {[](const mha::Case<T>& c, InputWriter& in) {
            seq_first_inputs(c, in);
            packed_inputs(c, in);
          },
          qkv_answer<T>("in_projection_packed"),
          [](const mha::Case<T>& c) {
            return files(c, {"q", "k", "v"});
          },
          in_projection_under<T>};
}

template <class T>
PartFunctions<T> separate_projection_functions() {
  return {[](const mha::Case<T>& c, InputWriter& in) {
            seq_first_inputs(c, in);
            separate_inputs(in_projection_weights(c.parameters, static_cast<std::size_t>(c.info.options.embed_dim), {}),
                            in);
          },
          qkv_answer<T>("in_projection"),
          [](const mha::Case<T>& c) {
            return files(c, {"q", "k", "v"});
          },
          in_projection_under<T>};
}

// --- lab 03: each function on PyTorch's own inputs for its step ---

template <class T>
xt::xtensor<T, 3> out_projection(const mha::Case<T>& c, const xt::xtensor<T, 3>& merged) {
  return lib::linear(merged, xt::xtensor<T, 2>(c.parameters.at("out_proj.weight")), parameter1(c, "out_proj.bias"));
}

template <class T>
bool same_shape(const xt::xtensor<T, 3>& a, const xt::xtensor<T, 3>& b) {
  return a.shape() == b.shape();
}

// What follows a step, done right by the grader on what the step gave, up to PyTorch's own
// outputs: after merge_heads, out_proj; after the attention, the merge; after split_heads,
// the attention. A step's answer of another shape than the right one is followed no further.
template <class T>
void after_merge(const mha::Case<T>& c, const Trace<T>& t, const xt::xtensor<T, 3>& merged, Tensors<T>& r) {
  if (same_shape(merged, t.merged))
    r.push_back({"attn_output", lib::caller_layout(out_projection(c, merged), t.batched, t.batch_first)});
}
template <class T>
void after_attention(const mha::Case<T>& c, const Trace<T>& t, const xt::xtensor<T, 3>& weights,
                     const xt::xtensor<T, 3>& heads, Tensors<T>& r) {
  if (!same_shape(weights, t.weights) || !same_shape(heads, t.heads)) return;
  if (c.forward.need_weights)
    r.push_back(
        {"attn_output_weights", lib::output_weights(weights, t.N, t.H, c.forward.average_attn_weights, t.batched)});
  after_merge(c, t, lib::merge_heads(heads, t.H), r);
}
template <class T>
void after_split(const mha::Case<T>& c, const Trace<T>& t, const xt::xtensor<T, 3>& qh, const xt::xtensor<T, 3>& kh,
                 const xt::xtensor<T, 3>& vh, Tensors<T>& r) {
  if (!same_shape(qh, t.qh) || !same_shape(kh, t.kh) || !same_shape(vh, t.vh)) return;
  const auto weights = attention_weights(qh, kh, t.mask, lib::attention_scale<T>(t.D), /*over_queries=*/false);
  after_attention(c, t, weights, weighted_values(weights, vh), r);
}

// split_heads on PyTorch's q, k and v.
template <class T>
Tensors<T> split_tensors(const mha::Case<T>& c, const Trace<T>& t, const xt::xtensor<T, 3>& qh,
                         const xt::xtensor<T, 3>& kh, const xt::xtensor<T, 3>& vh) {
  Tensors<T> r{
      {"split_heads(q) (N*H, L, D)", qh}, {"split_heads(k) (N*H, S, D)", kh}, {"split_heads(v) (N*H, S, D)", vh}};
  after_split(c, t, qh, kh, vh, r);
  return r;
}

template <class T>
PartFunctions<T> split_heads_functions() {
  return {[](const mha::Case<T>& c, InputWriter& in) {
            for (const char* name : {"q", "k", "v"}) in.tensor<T>(name, c.expected.at(name));  // (L or S, N, E)
            in.scalar("H", std::to_string(c.info.options.num_heads));
          },
          [](const mha::Case<T>& c, const Given<T>& g) {
            return split_tensors(c, forward_after_pytorch_qkv(c, {}), tensor3(g.tensor("split_heads.q")),
                                 tensor3(g.tensor("split_heads.k")), tensor3(g.tensor("split_heads.v")));
          },
          [](const mha::Case<T>& c) {
            return files(c, {"attn_output_weights", "attn_output"});
          },
          [](const mha::Case<T>& c, const Injections& m) {
            const auto t = forward_after_pytorch_qkv(c, {});
            const HeadLayout layout = head_layout(m);
            return split_tensors(c, t, split_heads(t.q, t.H, layout), split_heads(t.k, t.H, layout),
                                 split_heads(t.v, t.H, layout));
          }};
}

// scaled_dot_product_attention on PyTorch's q, k and v split into heads, and the case's mask.
template <class T>
Tensors<T> attention_tensors(const mha::Case<T>& c, const Trace<T>& t, const xt::xtensor<T, 3>& weights,
                             const xt::xtensor<T, 3>& heads) {
  Tensors<T> r{{"weights (N*H, L, S)", weights}, {"output (N*H, L, D)", heads}};
  after_attention(c, t, weights, heads, r);
  return r;
}

template <class T>
PartFunctions<T> attention_functions() {
  return {[](const mha::Case<T>& c, InputWriter& in) {
            const auto t = forward_after_pytorch_qkv(c, {});
            in.tensor<T>("q_heads", t.qh), in.tensor<T>("k_heads", t.kh), in.tensor<T>("v_heads", t.vh);
            if (t.mask) in.tensor<T>("mask", xt::xarray<T>(*t.mask));  // (1 or B, L, S)
          },
          [](const mha::Case<T>& c, const Given<T>& g) {
            return attention_tensors(c, forward_after_pytorch_qkv(c, {}),
                                     tensor3(g.tensor("scaled_dot_product_attention.weights")),
                                     tensor3(g.tensor("scaled_dot_product_attention.output")));
          },
          [](const mha::Case<T>& c) {
            return files(c, {"attn_output_weights", "attn_output"});
          },
          [](const mha::Case<T>& c, const Injections& m) {
            const auto t = forward_after_pytorch_qkv(c, {});
            const auto weights = attention_weights(t.qh, t.kh, t.mask, scale_of_q<T>(t.D, t.E, m),
                                                   made(m, Mistake::softmax_wrong_axis).has_value(),
                                                   made(m, Mistake::mask_after_softmax).has_value());  // (B, L, S)
            return attention_tensors(c, t, weights, weighted_values(weights, t.vh));
          }};
}

// merge_heads on the right attention output of PyTorch's q, k and v.
template <class T>
Tensors<T> merge_tensors(const mha::Case<T>& c, const Trace<T>& t, const xt::xtensor<T, 3>& merged) {
  Tensors<T> r{{"merge_heads(attention output) (L, N, E)", merged}};
  after_merge(c, t, merged, r);
  return r;
}

template <class T>
PartFunctions<T> merge_heads_functions() {
  return {[](const mha::Case<T>& c, InputWriter& in) {
            in.tensor<T>("attention_output", forward_after_pytorch_qkv(c, {}).heads);  // (B, L, D)
            in.scalar("H", std::to_string(c.info.options.num_heads));
          },
          [](const mha::Case<T>& c, const Given<T>& g) {
            return merge_tensors(c, forward_after_pytorch_qkv(c, {}), tensor3(g.tensor("merge_heads.output")));
          },
          [](const mha::Case<T>& c) { return files(c, {"attn_output"}); },
          [](const mha::Case<T>& c, const Injections& m) {
            const auto t = forward_after_pytorch_qkv(c, {});
            return merge_tensors(c, t, merge_heads(t.heads, t.H, head_layout(m)));
          }};
}

// --- lab 04: the masks, with PyTorch's own q, k, v ---

// A mask as the weights see it: (1 or B, L, S) broadcast to (B, L, S); none is all zeros.
template <class T>
xt::xtensor<T, 3> broadcast_mask(const std::optional<xt::xtensor<T, 3>>& mask, std::size_t B, std::size_t L,
                                 std::size_t S) {
  if (!mask) return xt::zeros<T>({B, L, S});
  mha::detail::check(mask->dimension() == 3 && (mask->shape(0) == 1 || mask->shape(0) == B) && mask->shape(1) == L &&
                         mask->shape(2) == S,
                     "mask", "expected shape {} or {}, got {}", mha::shape_string({1, L, S}),
                     mha::shape_string({B, L, S}), mha::shape_string(mask->shape()));
  return xt::broadcast(*mask, {B, L, S});
}

template <class T>
Tensors<T> mask_tensors(const mha::Case<T>& c, const Trace<T>& t, const std::optional<xt::xtensor<T, 3>>& mask) {
  // The weights and the output of PyTorch's q, k, v under this mask.
  const auto qh = lib::split_heads(tensor3(c.expected.at("q")), t.H);
  const auto kh = lib::split_heads(tensor3(c.expected.at("k")), t.H);
  const auto vh = lib::split_heads(tensor3(c.expected.at("v")), t.H);
  const auto weights = attention_weights(qh, kh, mask, lib::attention_scale<T>(t.D), false);
  const auto output = out_projection(c, lib::merge_heads(weighted_values(weights, vh), t.H));
  Tensors<T> r{{"mask (N*H, L, S)", broadcast_mask(mask, t.N * t.H, t.L, t.S)}};
  if (c.forward.need_weights)
    r.push_back(
        {"attn_output_weights", lib::output_weights(weights, t.N, t.H, c.forward.average_attn_weights, t.batched)});
  r.push_back({"attn_output", lib::caller_layout(output, t.batched, t.batch_first)});
  return r;
}

template <class T>
PartFunctions<T> mask_functions() {
  return {[](const mha::Case<T>& c, InputWriter& in) {
            const auto t = forward(c, {});
            auto padding = c.forward.key_padding_mask;  // (S) unbatched -> (1, S)
            if (padding && !t.batched) std::visit([&](auto& m) { m.reshape({std::size_t{1}, t.S}); }, *padding);
            if (c.forward.attn_mask) in.mask<T>("attn_mask", *c.forward.attn_mask);
            if (padding) in.mask<T>("key_padding_mask", *padding);
            in.scalar("N", std::to_string(t.N)), in.scalar("H", std::to_string(t.H));
            in.scalar("L", std::to_string(t.L)), in.scalar("S", std::to_string(t.S));
          },
          [](const mha::Case<T>& c, const Given<T>& g) {
            const auto t = forward(c, {});
            std::optional<xt::xtensor<T, 3>> mask;
            if (!g.none()) mask = tensor3(g.tensor("prepare_mask.mask"));
            return mask_tensors(c, t, mask);
          },
          [](const mha::Case<T>& c) {
            return files(c, {"attn_output_weights", "attn_output"});
          },
          [](const mha::Case<T>& c, const Injections& m) {
            const auto t = forward(c, {});
            return mask_tensors(c, t, case_mask(c, t.N, t.L, t.S, m));
          }};
}

// --- lab 05 ---

template <class T>
Tensors<T> output_tensors(const mha::Case<T>& c, const mha::Output<T>& o) {
  Tensors<T> r;
  if (c.forward.need_weights && o.attn_output_weights) r.push_back({"attn_output_weights", *o.attn_output_weights});
  r.push_back({"attn_output", o.attn_output});
  return r;
}

template <class T>
PartFunctions<T> forward_functions(std::function<Tensors<T>(const mha::Case<T>&, const Given<T>&)> answer) {
  return {module_inputs<T>, answer,
          [](const mha::Case<T>& c) {
            return files(c, {"attn_output_weights", "attn_output"});
          },
          [](const mha::Case<T>& c, const Injections& m) {
            const auto t = forward(c, m);
            return output_tensors(c, mha::Output<T>{t.attn_output, t.attn_output_weights, {}});
          }};
}

template <class T>
Tensors<T> forward_answer(const mha::Case<T>& c, const Given<T>& g) {
  return output_tensors(c, mha::Output<T>{g.tensor("forward.attn_output"), g.maybe("forward.attn_output_weights"), {}});
}

// --- lab 06 ---

// The entries of a gradient that finite differences check: the first, the middle, the last.
std::vector<std::size_t> sampled(std::size_t size) {
  if (size == 0) return {};
  return size < 3 ? std::vector<std::size_t>{0} : std::vector<std::size_t>{0, size / 2, size - 1};
}

template <class T>
xt::xarray<T> sample(const xt::xarray<T>& g) {
  const auto at = sampled(g.size());
  xt::xarray<T> s = xt::zeros<T>({at.size()});
  for (std::size_t i = 0; i < at.size(); ++i) s(i) = g.data()[at[i]];
  return s;
}

// The tensors of a case that a gradient belongs to: a parameter, or an input object (all
// its aliases: query is key is value is one tensor).
template <class T>
std::vector<xt::xarray<T>*> perturbed(mha::Case<T>& c, const std::string& name) {
  if (name == "query") {
    std::vector<xt::xarray<T>*> p{&c.query};
    if (c.info.query_is_key) p.push_back(&c.key);
    if (c.info.query_is_key && c.info.key_is_value) p.push_back(&c.value);
    return p;
  }
  if (name == "key") return c.info.key_is_value ? std::vector{&c.key, &c.value} : std::vector{&c.key};
  if (name == "value") return {&c.value};
  return {&c.parameters.at(name)};
}

// Central differences of the case's loss at the sampled entries of each gradient, in
// float64: h = 1e-6 leaves an error near 1e-10 (h^2 and rounding / h), well within the
// tolerance they are held to (1e-6 relative, 1e-7 absolute).
template <class T>
Tensors<T> finite_differences(const mha::Case<T>& c, const Tensors<T>& gradients) {
  Tensors<T> fd;
  if constexpr (std::is_same_v<T, double>) {
    const double h = 1e-6;
    for (const auto& g : gradients) {
      mha::Case<T> d = c;
      const auto targets = perturbed(d, g.name.substr(5));  // "grad.query" -> query
      const auto at = sampled(g.tensor.size());
      xt::xarray<T> values = xt::zeros<T>({at.size()});
      for (std::size_t i = 0; i < at.size(); ++i) {
        const T x = targets.front()->data()[at[i]];
        for (auto* t : targets) t->data()[at[i]] = x + h;
        const double up = loss(d);
        for (auto* t : targets) t->data()[at[i]] = x - h;
        const double down = loss(d);
        for (auto* t : targets) t->data()[at[i]] = x;
        values(i) = (up - down) / (2 * h);
      }
      fd.push_back({g.name + " by finite differences (first, middle, last entry)", values, 1e-6, 1e-7});
    }
  }
  return fd;
}

template <class T>
Tensors<T> with_samples(Tensors<T> gradients) {
  if constexpr (std::is_same_v<T, double>) {
    const std::size_t n = gradients.size();
    for (std::size_t i = 0; i < n; ++i)
      gradients.push_back(
          {gradients[i].name + " by finite differences (first, middle, last entry)", sample(gradients[i].tensor)});
  }
  return gradients;
}

// The order of the gradients: the backward's, out_proj first, the inputs last.
int backward_rank(const std::string& name) {
  const std::vector<std::string> order{
      "grad.out_proj.weight", "grad.out_proj.bias", "grad.in_proj_weight", "grad.q_proj_weight", "grad.k_proj_weight",
      "grad.v_proj_weight",   "grad.in_proj_bias",  "grad.query",          "grad.key",           "grad.value"};
  return static_cast<int>(std::find(order.begin(), order.end(), name) - order.begin());
}

template <class T>
Tensors<T> ordered(const GradientMap<T>& g) {
  // Rank by rank, each rank's in the map's (the names') order; a name without a rank comes
  // last. (Not std::stable_sort: libstdc++'s takes its buffer from get_temporary_buffer,
  // deprecated in C++20, and the warning would be the first thing a student's build prints.)
  Tensors<T> t;
  const int unranked = backward_rank("");
  for (int rank = 0; rank <= unranked; ++rank)
    for (const auto& [name, tensor] : g)
      if (backward_rank(name) == rank) t.push_back({name, tensor});
  return t;
}

template <class T>
PartFunctions<T> backward_functions() {
  return {
      [](const mha::Case<T>& c, InputWriter& in) {
        module_inputs(c, in);
        in.tensor<T>("grad_attn_output", *c.grad_attn_output);
        if (c.grad_attn_output_weights) in.tensor<T>("grad_attn_output_weights", *c.grad_attn_output_weights);
      },
      [](const mha::Case<T>& c, const Given<T>& given) {
        const auto query = given.maybe("backward.query"), key = given.maybe("backward.key"),
                   value = given.maybe("backward.value");
        mha::detail::check(query && key && value, "Gradients", "expected query, key and value each");
        // one gradient per input object: the uses of one tensor add up
        GradientMap<T> m;
        xt::xarray<T> dq = *query, dk = *key, dv = *value;
        if (c.info.query_is_key && c.info.key_is_value) dq += dk + dv;
        else if (c.info.key_is_value) dk += dv;
        else if (c.info.query_is_key) dq += dk;
        m["grad.query"] = dq;
        if (!c.info.query_is_key) m["grad.key"] = dk;
        if (!c.info.key_is_value && !(c.info.query_is_key && c.info.key_is_value)) m["grad.value"] = dv;
        const std::string prefix = "backward.parameter.";
        for (const auto& name : given.names(prefix)) m["grad." + name.substr(prefix.size())] = given.tensor(name);
        return with_samples(ordered(m));
      },
      [](const mha::Case<T>& c) {
        GradientMap<T> m;
        for (const auto& [name, tensor] : c.expected_gradients) m["grad." + name] = tensor;
        auto t = ordered(m);
        for (auto& fd : finite_differences(c, t)) t.push_back(std::move(fd));
        return t;
      },
      [](const mha::Case<T>& c, const Injections& m) { return with_samples(ordered(backward(c, forward(c, {}), m))); }};
}

// --- lab 07 ---

// A decoding case: causal self-attention of the module (its is_causal mask, one object as
// query, key and value, packed, no key_padding_mask), decoded from an empty cache; or a
// functional decoding step, static_k and static_v its cache. `lab07 --self-check` holds
// each case's decoding to PyTorch's causal forward, or to PyTorch's step.
bool decoding_case(const mha::CaseInfo& i) {
  const bool self = i.query_is_key && i.key_is_value && has_file(i, "in_proj_weight");
  if (i.is_functional())
    return self && !i.expect_error && !i.generations_differ && has_file(i, "static_k") && !has_file(i, "bias_k") &&
           !i.functional.add_zero_attn && !has_file(i, "attn_mask") && !has_file(i, "key_padding_mask");
  return self && attention_case(i) && i.is_causal && !has_file(i, "key_padding_mask");
}

// The tensors of a decoding, in the step's order: the cache (k, then v), then the rows.
template <class T>
Tensors<T> decoding_tensors(const xt::xarray<T>& k, const xt::xarray<T>& v, const xt::xarray<T>& rows) {
  return {{"cache k (N*H, t, D)", k}, {"cache v (N*H, t, D)", v}, {"attn_output: each step's row (T, N, E)", rows}};
}

template <class T>
PartFunctions<T> decoding_functions() {
  return {[](const mha::Case<T>& c, InputWriter& in) {
            const auto d = decoding_of(c);
            for (const auto& [name, tensor] : d.parameters) in.tensor<T>("parameter." + name, tensor);
            in.scalar("num_heads", std::to_string(d.H));
            in.tensor<T>("tokens", d.tokens);
            if (d.first.k.shape(1) > 0) in.tensor<T>("cache_k", d.first.k), in.tensor<T>("cache_v", d.first.v);
          },
          [](const mha::Case<T>&, const Given<T>& g) {
            return decoding_tensors(g.tensor("decode_step.cache_k"), g.tensor("decode_step.cache_v"),
                                    g.tensor("decode_step.attn_output"));
          },
          [](const mha::Case<T>& c) {
            if (c.info.is_functional())
              return decoding_tensors(c.parameters.at("static_k"), c.parameters.at("static_v"),
                                      c.expected.at("attn_output"));
            // PyTorch's own k and v, split into heads as the cache holds them; its causal forward's rows
            const auto H = static_cast<std::size_t>(c.info.options.num_heads);
            const bool bf = c.info.options.batch_first && c.query.dimension() == 3;
            return decoding_tensors(xt::xarray<T>(lib::split_heads(tensor3(c.expected.at("k")), H)),
                                    xt::xarray<T>(lib::split_heads(tensor3(c.expected.at("v")), H)),
                                    xt::xarray<T>(lib::seq_first(c.expected.at("attn_output"), bf)));
          },
          [](const mha::Case<T>& c, const Injections& m) {
            const auto r = decode(decoding_of(c), m);
            return decoding_tensors(xt::xarray<T>(r.cache.k), xt::xarray<T>(r.cache.v), xt::xarray<T>(r.rows));
          }};
}

}  // namespace

namespace {

bool packed_case(const mha::CaseInfo& i) { return module_case(i) && has_file(i, "in_proj_weight"); }

// Every forward mistake of the catalogue.
std::vector<Mistake> forward_mistakes() {
  std::vector<Mistake> all;
  for (const auto& e : catalogue())
    if (e.labs.find("05") != std::string_view::npos) all.push_back(e.id);
  return all;
}

// Every mistake the catalogue says lab `number` can show (its `labs` column).
std::vector<Mistake> mistakes_of_lab(std::string_view number) {
  std::vector<Mistake> all;
  for (const auto& e : catalogue())
    if (e.labs.find(number) != std::string_view::npos) all.push_back(e.id);
  return all;
}

std::vector<Lab> make_labs() {
  auto split = split_mistakes, packed = split_mistakes, split_packed = split_mistakes;
  packed.insert(packed.end(), {M::weight_not_transposed, M::bias_missing});
  split_packed.push_back(M::bias_not_split);
  return {
      {"01",
       "01-split-pack",
       "split_pack.cpp",
       {{"split_packed", split_packed, packed_case, split_functions<float>(), split_functions<double>()},
        {"pack", split, packed_case, pack_functions<float>(), pack_functions<double>()}}},
      {"02",
       "02-in-projection",
       "in_projection.cpp",
       {{"in_projection_packed", packed, packed_case, packed_projection_functions<float>(),
         packed_projection_functions<double>()},
        {"in_projection",
         {M::weight_not_transposed, M::bias_missing},
         [](const mha::CaseInfo& i) { return module_case(i) && has_file(i, "q_proj_weight"); },
         separate_projection_functions<float>(),
         separate_projection_functions<double>()}}},
      {"03",
       "03-heads-attention",
       "heads_attention.cpp",
       {{"split_heads",
         {M::heads_split_wrong, M::heads_numbered_head_major},
         attention_case,
         split_heads_functions<float>(),
         split_heads_functions<double>()},
        {"scaled_dot_product_attention",
         {M::no_scaling, M::scaled_by_d_not_sqrt, M::softmax_wrong_axis, M::mask_after_softmax},
         attention_case,
         attention_functions<float>(),
         attention_functions<double>()},
        {"merge_heads",
         {M::heads_split_wrong, M::heads_numbered_head_major, M::merge_without_transpose},
         attention_case,
         merge_heads_functions<float>(),
         merge_heads_functions<double>()}}},
      {"04",
       "04-masks",
       "masks.cpp",
       {{"prepare_mask",
         {M::mask_inverted, M::mask_ignored, M::key_padding_mask_wrong_rows},
         [](const mha::CaseInfo& i) {
           return attention_case(i) && (has_file(i, "attn_mask") || has_file(i, "key_padding_mask"));
         },
         mask_functions<float>(),
         mask_functions<double>()}}},
      {"05",
       "05-forward",
       "forward.cpp",
       {{"forward", forward_mistakes(), attention_case, forward_functions<float>(forward_answer<float>),
         forward_functions<double>(forward_answer<double>)}}},
      {"06",
       "06-backward",
       "backward.cpp",
       {{"backward",
         {M::grad_transposed, M::softmax_jacobian_diagonal_missing, M::grad_scale_missing, M::bias_grad_not_summed},
         [](const mha::CaseInfo& i) { return attention_case(i) && i.format == 2; },
         backward_functions<float>(),
         backward_functions<double>()}}},
      {"07",
       "07-decoding",
       "decode_step.cpp",
       {{"decode_step", mistakes_of_lab("07"), decoding_case, decoding_functions<float>(),
         decoding_functions<double>()}}},
  };
}

template <class T>
void write_case_inputs(const Lab& lab, const mha::CaseInfo& info, const std::filesystem::path& dir) {
  const auto c = mha::load_case<T>(info);
  InputWriter in(dir / info.name);
  in.scalar("dtype", info.dtype);
  for (const auto& part : lab.parts)
    if (part.takes(info)) {
      if constexpr (std::is_same_v<T, float>) part.f32.inputs(c, in);
      else part.f64.inputs(c, in);
    }
}

}  // namespace

const std::vector<Lab>& labs() {
  static const std::vector<Lab> all = make_labs();
  return all;
}

const Lab& lab(std::string_view number) {
  for (const auto& l : labs())
    if (l.number == number) return l;
  throw mha::Error(fmt::format("lab: expected one of 01 to {:02}, got {}", labs().size(), number));
}

void write_inputs(const Lab& lab, const std::vector<mha::CaseInfo>& cases, const Options& options,
                  const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  for (const auto& info : cases) {
    if (!options.only_cases.empty() &&
        std::find(options.only_cases.begin(), options.only_cases.end(), info.name) == options.only_cases.end())
      continue;
    if (std::none_of(lab.parts.begin(), lab.parts.end(), [&](const Part& p) { return p.takes(info); })) continue;
    if (info.dtype == "float32") write_case_inputs<float>(lab, info, dir);
    else if (info.dtype == "float64") write_case_inputs<double>(lab, info, dir);
  }
}

// --- answers in .npy files ---

namespace {

// An answer file of the case's dtype and the shape PyTorch's has; anything else is an
// Error naming the file. The file is not read past what such an answer can weigh: a file
// larger than that, or a header that claims another shape, is refused before its data is
// used; a link is refused as a file that is not the student's own.
template <class T>
xt::xarray<T> answer_file(const std::filesystem::path& dir, const std::string& name, const xt::xarray<T>& expected) {
  const auto path = dir / (name + ".npy");
  const auto status = std::filesystem::symlink_status(path);
  if (!std::filesystem::is_regular_file(status))
    throw mha::Error(fmt::format("{}: {}: the answer folder needs {}.npy, {} of dtype {}", path.string(),
                                 std::filesystem::exists(status) ? "not a plain file" : "missing", name,
                                 mha::shape_string(expected.shape()), mha::dtype_name(mha::npy_descr<T>())));
  const std::uintmax_t most = 65536 + expected.size() * sizeof(T);  // the largest header NumPy writes, and the data
  const std::uintmax_t size = std::filesystem::file_size(path);
  mha::detail::check(size <= most, path.string(), "expected at most {} bytes ({} of dtype {}), got a file of {} bytes",
                     most, mha::shape_string(expected.shape()), mha::dtype_name(mha::npy_descr<T>()), size);
  const mha::NpyArray a = mha::read_npy(path);  // an Error naming the file when it is not a valid .npy
  mha::detail::check(a.descr == mha::npy_descr<T>(), path.string(), "expected dtype {} (the case's), got {}",
                     mha::dtype_name(mha::npy_descr<T>()), mha::dtype_name(a.descr));
  mha::detail::check(std::equal(a.shape.begin(), a.shape.end(), expected.shape().begin(), expected.shape().end()),
                     path.string(), "expected shape {} (PyTorch's {}), got {}", mha::shape_string(expected.shape()),
                     name, mha::shape_string(a.shape));
  return mha::to_xarray<T>(a, path.string());
}

void print_diagnosis(const Diagnosis& d, bool json) {
  if (!json) {
    if (!d.error.empty()) fmt::print("error: {}\n", d.error);
    if (d.verdict == "error") return;
    std::vector<std::string> ids;
    for (Mistake m : d.named) ids.emplace_back(entry(m).name);
    fmt::print("named: {}\n", ids.empty() ? "-" : fmt::format("{}", fmt::join(ids, " ")));
    fmt::print("verdict: {}\n", d.verdict == "pass" ? "PASS" : "FAIL");
    return;
  }
  nlohmann::json named = nlohmann::json::array();
  for (Mistake m : d.named) {
    const Entry& e = entry(m);
    named.push_back({{"id", e.name}, {"step", e.step}, {"explanation", e.explanation}, {"page", e.page}});
  }
  const nlohmann::json j{
      {"case", d.case_name}, {"verdict", d.verdict}, {"error", d.error}, {"named", named}, {"departure", d.departure}};
  fmt::print("{}\n", j.dump(2));
}

template <class T>
Diagnosis diagnose_as(const mha::CaseInfo& info, const std::filesystem::path& answer_dir, bool quiet) {
  // The files are read and checked first: a file that cannot be graded is said so, once.
  const auto c = mha::load_case<T>(info);
  Diagnosis d{info.name, "error", {}, {}, {}};
  Tensors<T> answer;
  try {
    if (c.forward.need_weights)
      answer.push_back({"attn_output_weights",
                        answer_file(answer_dir, "attn_output_weights", c.expected.at("attn_output_weights"))});
    answer.push_back({"attn_output", answer_file(answer_dir, "attn_output", c.expected.at("attn_output"))});
  } catch (const mha::Error& e) {
    d.error = e.what();
    return d;
  }
  std::function<Tensors<T>(const mha::Case<T>&, const Given<T>&)> given = [answer](const mha::Case<T>&,
                                                                                   const Given<T>&) { return answer; };
  // The part of the case's dtype answers from the files; the other dtype has no case here.
  Part part{"forward (.npy answers)", forward_mistakes(), attention_case, {}, {}};
  if constexpr (std::is_same_v<T, float>) part.f32 = forward_functions<float>(given);
  else part.f64 = forward_functions<double>(given);
  Options options;
  options.golden = info.dir.parent_path();
  options.only_cases = {info.name};
  options.quiet = quiet;
  const auto r = grade_part(part, {info}, options, Answers{});
  for (const auto& set : r.named)
    for (const auto& i : set)
      if (std::find(d.named.begin(), d.named.end(), i.mistake) == d.named.end()) d.named.push_back(i.mistake);
  std::sort(d.named.begin(), d.named.end(), [](Mistake a, Mistake b) { return entry(a).name < entry(b).name; });
  d.verdict = r.ok() ? "pass" : "fail";
  d.departure = r.departure;
  return d;
}

Diagnosis diagnose_with(const std::filesystem::path& case_dir, const std::filesystem::path& answer_dir, bool quiet) {
  Diagnosis d;
  try {
    const mha::CaseInfo info = mha::read_case_info(case_dir);
    d.case_name = info.name, d.verdict = "error";
    if (!attention_case(info))
      d.error = fmt::format(
          "{}: the labs grade the module's forward without bias_k/bias_v, the zero key, dropout or a "
          "rejection; this case is not among them",
          info.name);
    else if (!std::filesystem::is_directory(answer_dir))
      d.error = fmt::format("{}: not a folder of .npy answers", answer_dir.string());
    else
      d = info.dtype == "float32" ? diagnose_as<float>(info, answer_dir, quiet)
                                  : diagnose_as<double>(info, answer_dir, quiet);
  } catch (const std::exception& e) {
    d.verdict = "error", d.error = e.what();
  }
  return d;
}

}  // namespace

Diagnosis diagnose(const std::filesystem::path& case_dir, const std::filesystem::path& answer_dir) {
  return diagnose_with(case_dir, answer_dir, /*quiet=*/true);
}

int diagnose_npy(const std::filesystem::path& case_dir, const std::filesystem::path& answer_dir, bool json) {
  const Diagnosis d = diagnose_with(case_dir, answer_dir, /*quiet=*/json);
  print_diagnosis(d, json);
  return d.verdict == "pass" ? 0 : d.verdict == "fail" ? 1 : 2;
}

}  // namespace grader
