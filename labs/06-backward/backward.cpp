// labs/06-backward/backward.cpp — Lab 06: the backward pass: every gradient of nn.MultiheadAttention, by hand.
//
// Write backward() below; labs/06-backward/README.md says what to read first. The grader
// checks each gradient against PyTorch's, and in float64 against finite differences of the
// loss. This file is compiled against labs/interface/mha_lab.hpp alone: the types and
// lab::linear are there, the library is not. Copy in your lab 05 forward, with the
// functions it uses, and keep what the gradients need. Build and grade (from the project's
// root):
//   cmake --build build/default --target lab06 && build/default/labs/lab06
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads,
// D = head_dim = E / H, B = N*H.
#include "mha_lab.hpp"

namespace lab06 {

// The forward's arguments as in lab 05; the loss is
//   sum(attn_output * grad_attn_output) [+ sum(attn_output_weights * grad_attn_output_weights)]
// -> lab::Gradients: query, key, value (each of its own use, shaped as the input; the grader
//    adds them up where two inputs were one tensor) and parameters by state_dict name:
//    "in_proj_weight" (or "q_proj_weight", ...), "in_proj_bias", "out_proj.weight", "out_proj.bias"
template <class T>
lab::Gradients<T> backward(const lab::Options& options, const lab::StateDict<T>& parameters, const xt::xarray<T>& query,
                           const xt::xarray<T>& key, const xt::xarray<T>& value, const lab::ForwardOptions<T>& opts,
                           const xt::xarray<T>& grad_attn_output,
                           const std::optional<xt::xarray<T>>& grad_attn_output_weights) {
  // TODO: run the forward, keeping what each gradient needs; then the steps in reverse:
  //       out_proj, heads, P v, the weights' own gradient, softmax, the scores, heads, in-projection.
  throw lab::NotImplemented("backward");
}

// The grader runs your function in float and in double. Leave these lines as they are.
template lab::Gradients<float> backward(const lab::Options&, const lab::StateDict<float>&, const xt::xarray<float>&,
                                        const xt::xarray<float>&, const xt::xarray<float>&,
                                        const lab::ForwardOptions<float>&, const xt::xarray<float>&,
                                        const std::optional<xt::xarray<float>>&);
template lab::Gradients<double> backward(const lab::Options&, const lab::StateDict<double>&, const xt::xarray<double>&,
                                         const xt::xarray<double>&, const xt::xarray<double>&,
                                         const lab::ForwardOptions<double>&, const xt::xarray<double>&,
                                         const std::optional<xt::xarray<double>>&);

}  // namespace lab06
