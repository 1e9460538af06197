// labs/runner/lab07.cpp — Lab 07's answers program: the student's decoding step, run over each case's tokens.
//
// Inputs of a case: the layer's parameters (parameter.<state_dict name>), num_heads, the
// tokens to decode (T, N, E), sequence-first, and, where the case starts from a cache that
// PyTorch filled, cache_k and cache_v (N*H, t0, D); otherwise the cache starts empty. The
// student's decode_step is called once per token, in order, on the cache its previous
// calls left: a mistake in the cache shows in every later step, as it would while
// generating. Answers: decode_step.attn_output, the steps' rows stacked (T, N, E), and
// decode_step.cache_k, decode_step.cache_v, the cache after the last step (N*H, t0 + T, D).
//
// Legend: T = tokens decoded, N = batch, E = embed_dim, H = heads, D = head_dim = E / H,
// t0 = the positions cached before the first step.
#include "runner.hpp"

namespace {

template <class S>
std::string shape_of(const S& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

// The cache the first step sees: PyTorch's, or empty.
template <class T>
lab::KVCache<T> first_cache(const runner::Call& call, std::size_t B, std::size_t D) {
  if (call.has("cache_k")) return {call.fixed<T, 3>("cache_k"), call.fixed<T, 3>("cache_v")};
  return {xt::xtensor<T, 3>::from_shape({B, 0, D}), xt::xtensor<T, 3>::from_shape({B, 0, D})};
}

}  // namespace

int main(int argc, char** argv) {
  return runner::run(argc, argv, []<class T>(const runner::Call& call, runner::Answers& answers, T) {
    runner::attempt(answers, call, "decode_step", [&] {
      const auto parameters = call.parameters<T>();
      const std::size_t H = call.size("num_heads");
      const auto tokens = call.fixed<T, 3>("tokens");  // (T, N, E)
      const std::size_t steps = tokens.shape(0), N = tokens.shape(1), E = tokens.shape(2);
      auto cache = first_cache<T>(call, N * H, E / H);
      xt::xtensor<T, 3> rows = xt::xtensor<T, 3>::from_shape({steps, N, E});  // (T, N, E)
      for (std::size_t t = 0; t < steps; ++t) {
        const xt::xtensor<T, 3> token = xt::view(tokens, xt::range(t, t + 1), xt::all(), xt::all());  // (1, N, E)
        const xt::xtensor<T, 3> row = lab07::decode_step<T>(parameters, H, token, cache);
        if (row.shape() != token.shape())
          throw std::invalid_argument("decode_step returned shape " + shape_of(row.shape()) + " for token " +
                                      std::to_string(t) + ", expected " + shape_of(token.shape()));
        xt::view(rows, t, xt::all(), xt::all()) = xt::view(row, 0, xt::all(), xt::all());
      }
      answers.tensor<T>(call.name(), "decode_step.attn_output", rows);
      answers.tensor<T>(call.name(), "decode_step.cache_k", cache.k);
      answers.tensor<T>(call.name(), "decode_step.cache_v", cache.v);
    });
  });
}
