// labs/07-decoding/decode_step.cpp — Lab 07: one decoding step of causal self-attention, with a KV cache.
//
// Write decode_step() below; labs/07-decoding/README.md says what to read first. The grader
// decodes each case's tokens one at a time with your function, carrying your cache from
// step to step, and checks every step's output against its row of PyTorch's causal forward,
// and the cache against PyTorch's k and v. This file is compiled against
// labs/interface/mha_lab.hpp alone: the types (lab::KVCache, lab::StateDict) and
// lab::linear are there, the library is not. Copy in what you need of your labs 01 to 05.
// Build and grade (from the project's root):
//   cmake --build build/default --target lab07 && build/default/labs/lab07
//
// Legend: N = batch, E = embed_dim, H = heads, D = head_dim = E / H, B = N*H,
// t = the positions in the cache before this step.
#include "mha_lab.hpp"

namespace lab07 {

// parameters by state_dict name: "in_proj_weight" (3E, E), "in_proj_bias" (3E) when bias,
//   "out_proj.weight" (E, E), "out_proj.bias" (E) when bias
// token (1, N, E): the new position's input, sequence-first (query = key = value)
// cache: k and v (N*H, t, D), after the in-projection and split into heads, as
//   F.multi_head_attention_forward's static_k and static_v
// -> the step's attn_output (1, N, E); on return the cache holds t + 1 positions
template <class T>
xt::xtensor<T, 3> decode_step(const lab::StateDict<T>& parameters, std::size_t num_heads,
                              const xt::xtensor<T, 3>& token, lab::KVCache<T>& cache) {
  // TODO: 1) q, k, v of the token   2) the cache   3) attention over the cached positions
  //       4) heads merged, out_proj
  throw lab::NotImplemented("decode_step");
}

// The grader runs your function in float and in double. Leave these lines as they are.
template xt::xtensor<float, 3> decode_step(const lab::StateDict<float>&, std::size_t, const xt::xtensor<float, 3>&,
                                           lab::KVCache<float>&);
template xt::xtensor<double, 3> decode_step(const lab::StateDict<double>&, std::size_t, const xt::xtensor<double, 3>&,
                                            lab::KVCache<double>&);

}  // namespace lab07
