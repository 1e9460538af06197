// labs/grader/decoding.hpp — the grader's own decoding with a KV cache: a case's tokens decoded one at a time, each
// step as PyTorch computes its row of the causal forward, or as a catalogued decoding
// mistake computes it.
//
// Lab 07's student writes one step (labs/07-decoding/decode_step.cpp): project the new
// token, append its k and v to the cache, attend over every cached position, out-project.
// decode(d, mistakes) runs that step over the case's tokens, carrying the cache from step
// to step as the student's runner does, so that a mistake in the cache shows in every later
// step. With no mistake it is PyTorch's: each step is the row of the full causal forward
// (docs/19-decoding.md), and the cache is PyTorch's k and v split into heads, the static_k
// and static_v of F.multi_head_attention_forward (`lab07 --self-check` holds it to the
// golden files). The right steps are the library's (library.hpp) and mistakes.hpp's
// attention; the mistaken ones are written here.
//
// Legend: T = tokens decoded, N = batch, E = embed_dim, H = heads, D = head_dim = E / H,
// B = N*H, t = the positions in the cache, t0 = those cached before the first token.
//
// Include it after mistakes.hpp.
#pragma once

namespace grader {

// A cache of k and v, split into heads. (B, t, D) each
template <class T>
struct KV {
  xt::xtensor<T, 3> k, v;
};

// What a case decodes.
template <class T>
struct Decoding {
  mha::StateDict<T> parameters;  // by the module's names: in_proj_weight, in_proj_bias, out_proj.weight, ...
  std::size_t H = 1;
  xt::xtensor<T, 3> tokens;  // (T, N, E), sequence-first
  KV<T> first;               // (B, t0, D): the cache before the first token
};

// What decoding gives: each step's row, and the cache after the last step.
template <class T>
struct Decoded {
  xt::xtensor<T, 3> rows;  // (T, N, E)
  KV<T> cache;             // (B, t0 + T, D)
};

// A module's causal self-attention decodes its whole query from an empty cache. A functional
// decoding step decodes its one token after the positions of static_k and static_v before
// it: their last position is that token's own k and v, which the step appends.
template <class T>
Decoding<T> decoding_of(const mha::Case<T>& c) {
  Decoding<T> d;
  if (!c.info.is_functional()) {
    const mha::Options& o = c.info.options;
    d.parameters = c.parameters, d.H = static_cast<std::size_t>(o.num_heads);
    d.tokens = lib::seq_first(c.query, o.batch_first && c.query.dimension() == 3);  // (T, N, E)
    const std::size_t B = d.tokens.shape(1) * d.H, D = d.tokens.shape(2) / d.H;
    d.first = {xt::xtensor<T, 3>::from_shape({B, 0, D}), xt::xtensor<T, 3>::from_shape({B, 0, D})};
    return d;
  }
  // the function's argument names as the module's state_dict names them
  const std::map<std::string, std::string> module_name{{"out_proj_weight", "out_proj.weight"},
                                                       {"out_proj_bias", "out_proj.bias"}};
  for (const auto& [name, tensor] : c.parameters) {
    if (name == "static_k" || name == "static_v") continue;
    d.parameters[module_name.contains(name) ? module_name.at(name) : name] = tensor;
  }
  d.H = static_cast<std::size_t>(c.info.functional.num_heads);
  d.tokens = lib::seq_first(c.query, false);  // (1, N, E)
  const auto before = [](const xt::xarray<T>& s) -> xt::xtensor<T, 3> {
    return xt::view(s, xt::all(), xt::range(0, s.shape(1) - 1), xt::all());  // (B, t0 + 1, D) -> (B, t0, D)
  };
  d.first = {before(c.parameters.at("static_k")), before(c.parameters.at("static_v"))};
  return d;
}

// A new position at the end of the cache: (B, t, D) + (B, 1, D) -> (B, t + 1, D)
template <class T>
xt::xtensor<T, 3> append(const xt::xtensor<T, 3>& cache, const xt::xtensor<T, 3>& position) {
  return xt::concatenate(xt::xtuple(cache, position), 1);
}

// The keys and values the new query attends to, under the decoding mistakes: every cached
// position, the new one included (PyTorch's); the positions before it only
// (cache_appended_after_attention); the new one twice (new_token_attended_twice); the
// first position only (causal_mask_top_left: row 0 of a causal mask aligned to the top
// left, the one that F.scaled_dot_product_attention's is_causal builds).
template <class T>
KV<T> attended(const KV<T>& before, const KV<T>& after, const KV<T>& position, const Injections& m) {
  KV<T> seen = made(m, Mistake::cache_appended_after_attention) ? before : after;
  if (made(m, Mistake::new_token_attended_twice)) seen = {append(seen.k, position.k), append(seen.v, position.v)};
  if (made(m, Mistake::causal_mask_top_left) && seen.k.shape(1) > 0)
    seen = {xt::view(seen.k, xt::all(), xt::range(0, 1), xt::all()),
            xt::view(seen.v, xt::all(), xt::range(0, 1), xt::all())};
  return seen;
}

// One step: the token's row, and the cache it leaves. token (1, N, E), cache (B, t, D)
template <class T>
xt::xtensor<T, 3> decode_step(const Decoding<T>& d, const xt::xtensor<T, 3>& token, KV<T>& cache, const Injections& m) {
  const std::size_t E = token.shape(2), D = E / d.H;
  const bool wrong_heads = made(m, Mistake::heads_split_wrong).has_value();

  // 1) q, k, v of the token, split into heads: (1, N, E) -> (B, 1, D)
  const auto w = in_projection_weights(d.parameters, E, m);
  const auto qh = split_heads(project(token, w.w_q, w.b_q, false), d.H, wrong_heads);  // (B, 1, D)
  KV<T> position{split_heads(project(token, w.w_k, w.b_k, false), d.H, wrong_heads),   // (B, 1, D)
                 split_heads(project(token, w.w_v, w.b_v, false), d.H, wrong_heads)};
  if (made(m, Mistake::cache_holds_inputs)) position.k = position.v = split_heads(token, d.H, wrong_heads);

  // 2) the cache grows by one position; cache_rescaled_each_step multiplies the keys kept
  //    by the scale at every step, so that key j has it t - j + 1 times, and q not at all
  const KV<T> before = cache;
  cache = {append(cache.k, position.k), append(cache.v, position.v)};  // (B, t + 1, D)
  T scale = scale_of_q<T>(D, E, m);
  if (made(m, Mistake::cache_rescaled_each_step)) cache.k *= scale, scale = T(1);

  // 3) the new query over the positions it sees, with no mask: every position given is one it
  //    may see. (B, 1, D) x (B, D, s) -> (B, 1, s); (B, 1, s) x (B, s, D) -> (B, 1, D)
  const KV<T> seen = attended(before, cache, position, m);
  const std::optional<xt::xtensor<T, 3>> no_mask;
  const auto weights = attention_weights(qh, seen.k, no_mask, scale, /*over_queries=*/false);  // (B, 1, s)
  const auto heads = weighted_values(weights, seen.v);                                         // (B, 1, D)

  // 4) heads side by side, out_proj
  const auto merged = merge_heads(heads, d.H, wrong_heads);  // (1, N, E)
  if (made(m, Mistake::out_proj_missing)) return merged;
  std::optional<xt::xtensor<T, 1>> out_bias;
  if (d.parameters.contains("out_proj.bias")) out_bias = d.parameters.at("out_proj.bias");
  return lib::linear(merged, xt::xtensor<T, 2>(d.parameters.at("out_proj.weight")), out_bias);  // (1, N, E)
}

// Every token of the case, in order, each step on the cache the one before left.
template <class T>
Decoded<T> decode(const Decoding<T>& d, const Injections& m) {
  const std::size_t steps = d.tokens.shape(0), N = d.tokens.shape(1), E = d.tokens.shape(2);
  Decoded<T> r{xt::xtensor<T, 3>::from_shape({steps, N, E}), d.first};
  for (std::size_t t = 0; t < steps; ++t) {
    const xt::xtensor<T, 3> token = xt::view(d.tokens, xt::range(t, t + 1), xt::all(), xt::all());  // (1, N, E)
    const auto row = decode_step(d, token, r.cache, m);                                             // (1, N, E)
    xt::view(r.rows, t, xt::all(), xt::all()) = xt::view(row, 0, xt::all(), xt::all());
  }
  return r;
}

}  // namespace grader
