// tests/labs/lab07_student.cpp — a student's lab 07, written apart from the reference solution and the grader.
//
// Another way to write decode_step than solutions.cpp's: the packed weight cut with views,
// heads by a reshape, the scores divided by sqrt(D) after the product (not q scaled before
// it), the softmax with xtensor's reducers. It shows that a right step written in its own
// way passes, and that the grader names the mistakes a student makes in such code, not only
// in the reference's. MHA_LAB_INJECT makes three of them as a student writes them:
// cache_appended_after_attention (the concatenation moved after the attention),
// cache_rescaled_each_step (the cache divided by sqrt(D) in place, the scores not) and
// cache_holds_inputs (the token's heads cached, not its k and v).
//
// Legend: N = batch, E = embed_dim, H = heads, D = head_dim = E / H, B = N*H,
// t = the positions cached.
#include "mha_lab.hpp"

#include <cstdlib>
#include <string>

namespace {

bool injected(const std::string& id) {
  const char* env = std::getenv("MHA_LAB_INJECT");
  return env && std::string(env) == id;
}

// (1, N, E) -> (N*H, 1, D): with one position, the heads are a reshape.
template <class T>
xt::xtensor<T, 3> heads(const xt::xtensor<T, 3>& x, std::size_t H) {
  const std::size_t N = x.shape(1), D = x.shape(2) / H;
  return xt::reshape_view(x, {N * H, std::size_t{1}, D});
}

// Block i of the packed in-projection applied to the token, in heads. -> (N*H, 1, D)
template <class T>
xt::xtensor<T, 3> projected(const lab::StateDict<T>& p, const xt::xtensor<T, 3>& token, std::size_t i, std::size_t H) {
  const std::size_t E = token.shape(2);
  const xt::xtensor<T, 2> w = xt::view(p.at("in_proj_weight"), xt::range(i * E, (i + 1) * E), xt::all());
  std::optional<xt::xtensor<T, 1>> b;
  if (p.contains("in_proj_bias")) b = xt::xtensor<T, 1>(xt::view(p.at("in_proj_bias"), xt::range(i * E, (i + 1) * E)));
  return heads<T>(lab::linear(token, w, b), H);
}

}  // namespace

namespace lab07 {

template <class T>
xt::xtensor<T, 3> decode_step(const lab::StateDict<T>& p, std::size_t H, const xt::xtensor<T, 3>& token,
                              lab::KVCache<T>& cache) {
  const std::size_t N = token.shape(1), E = token.shape(2), D = E / H;
  const auto q = projected(p, token, 0, H), k = projected(p, token, 1, H), v = projected(p, token, 2, H);
  auto append = [&] {
    const auto new_k = injected("cache_holds_inputs") ? heads(token, H) : k;
    const auto new_v = injected("cache_holds_inputs") ? heads(token, H) : v;
    cache.k = xt::concatenate(xt::xtuple(cache.k, new_k), 1);  // (B, t + 1, D)
    cache.v = xt::concatenate(xt::xtuple(cache.v, new_v), 1);
  };
  if (!injected("cache_appended_after_attention")) append();
  const T root_d = std::sqrt(static_cast<T>(D));
  if (injected("cache_rescaled_each_step")) cache.k /= root_d;
  const std::size_t t = cache.k.shape(1);
  xt::xtensor<T, 3> out = xt::zeros<T>({N * H, std::size_t{1}, D});  // (B, 1, D)
  for (std::size_t b = 0; b < N * H; ++b) {
    xt::xtensor<T, 1> scores = xt::zeros<T>({t});  // (t)
    for (std::size_t j = 0; j < t; ++j) {
      for (std::size_t d = 0; d < D; ++d) scores(j) += q(b, 0, d) * cache.k(b, j, d);
      if (!injected("cache_rescaled_each_step")) scores(j) /= root_d;
    }
    xt::xtensor<T, 1> weights = xt::exp(scores - xt::amax(scores)());
    weights /= xt::sum(weights)();
    for (std::size_t j = 0; j < t; ++j)
      for (std::size_t d = 0; d < D; ++d) out(b, 0, d) += weights(j) * cache.v(b, j, d);
  }
  if (injected("cache_appended_after_attention")) append();
  const xt::xtensor<T, 3> merged = xt::reshape_view(out, {std::size_t{1}, N, E});  // (1, N, E)
  std::optional<xt::xtensor<T, 1>> out_bias;
  if (p.contains("out_proj.bias")) out_bias = xt::xtensor<T, 1>(p.at("out_proj.bias"));
  return lab::linear(merged, xt::xtensor<T, 2>(p.at("out_proj.weight")), out_bias);
}

template xt::xtensor<float, 3> decode_step(const lab::StateDict<float>&, std::size_t, const xt::xtensor<float, 3>&,
                                           lab::KVCache<float>&);
template xt::xtensor<double, 3> decode_step(const lab::StateDict<double>&, std::size_t, const xt::xtensor<double, 3>&,
                                            lab::KVCache<double>&);

}  // namespace lab07
