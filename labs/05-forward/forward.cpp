// labs/05-forward/forward.cpp — Lab 05: the whole forward of nn.MultiheadAttention.
//
// Write forward() below; labs/05-forward/README.md says what to read first. This file is
// compiled against labs/interface/mha_lab.hpp alone: the types and lab::linear are there,
// the library is not. Copy in your own functions of labs 01 to 04, above forward(), and
// use them. Build and grade (from the project's root):
//   cmake --build build/default --target lab05 && build/default/labs/lab05
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads,
// D = head_dim = E / H, B = N*H.
#include "mha_lab.hpp"

namespace lab05 {

// options: embed_dim, num_heads, batch_first, ... (lab::Options, as nn.MultiheadAttention's)
// parameters by state_dict name: "in_proj_weight" (3E, E) or "q_proj_weight",
//   "k_proj_weight", "v_proj_weight"; "in_proj_bias" (3E) when bias; "out_proj.weight" (E, E);
//   "out_proj.bias" (E) when bias
// query (L, N, E), or (N, L, E) with batch_first, or (L, E) unbatched; key, value alike with S
// opts: key_padding_mask, need_weights, attn_mask, average_attn_weights (lab::ForwardOptions)
// -> attn_output shaped as the query; attn_output_weights (N, L, S) averaged or (N, H, L, S)
//    per head (without N unbatched), only when opts.need_weights   (lab::Output)
template <class T>
lab::Output<T> forward(const lab::Options& options, const lab::StateDict<T>& parameters, const xt::xarray<T>& query,
                       const xt::xarray<T>& key, const xt::xarray<T>& value, const lab::ForwardOptions<T>& opts) {
  // TODO: 1) inputs sequence-first   2) masks   3) in-projection   5) heads
  //       7) one mask   8) attention   9) heads merged, out_proj   10) the caller's layout
  throw lab::NotImplemented("forward");
}

// The grader runs your function in float and in double. Leave these lines as they are.
template lab::Output<float> forward(const lab::Options&, const lab::StateDict<float>&, const xt::xarray<float>&,
                                    const xt::xarray<float>&, const xt::xarray<float>&,
                                    const lab::ForwardOptions<float>&);
template lab::Output<double> forward(const lab::Options&, const lab::StateDict<double>&, const xt::xarray<double>&,
                                     const xt::xarray<double>&, const xt::xarray<double>&,
                                     const lab::ForwardOptions<double>&);

}  // namespace lab05
