// labs/interface/mha_lab.hpp — the labs' interface: what a student's file may use, and the functions each lab asks for.
//
// A lab's file (labs/01-split-pack/split_pack.cpp to labs/07-decoding/decode_step.cpp)
// includes this header and nothing of the library: the types below mirror the library's
// (mha::SeparateProjections, mha::Options, mha::Output, ...) field for field, so that the
// course's pages read the same, but none of the library's functions is here or linked
// into the program that runs a student's code. The labs are written without the
// library's own split, attention, forward or backward; that is what they teach.
//
// A student's functions are templates over the element type, instantiated for float and
// double at the end of the file: the grader runs them on every golden case of the lab, in
// both dtypes. The program that runs them (labs/runner/) reads the case's inputs, calls
// them, and hands what they return back to the grader as tensors; the grader, in its own
// process, compares them with PyTorch's and names the mistakes it finds (docs/labs.md).
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads,
// D = head_dim = E / H, B = N*H; Ek = kdim, Ev = vdim; t = the positions in a KV cache.
#pragma once

#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xmanipulation.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xreducer.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace lab {

// What a starter's TODO throws: the grader reports the function as "not implemented yet",
// and grades the lab's other functions.
class NotImplemented : public std::logic_error {
public:
  explicit NotImplemented(const std::string& function) : std::logic_error(function) {}
};

// The three projections held separately: q_proj_weight, k_proj_weight, v_proj_weight and
// the three thirds of in_proj_bias.
template <class T>
struct SeparateProjections {
  xt::xtensor<T, 2> w_q;                           // (E, E)
  xt::xtensor<T, 2> w_k;                           // (E, Ek)
  xt::xtensor<T, 2> w_v;                           // (E, Ev)
  std::optional<xt::xtensor<T, 1>> b_q, b_k, b_v;  // (E) each, or none when bias=False
};

// The packed form, as PyTorch stores it when kdim == vdim == E.
template <class T>
struct PackedProjection {
  xt::xtensor<T, 2> in_proj_weight;               // (3E, E)
  std::optional<xt::xtensor<T, 1>> in_proj_bias;  // (3E)
};

// q, k and v after the in-projection, sequence-first.
template <class T>
struct QKV {
  xt::xtensor<T, 3> q;  // (L, N, E)
  xt::xtensor<T, 3> k;  // (S, N, E)
  xt::xtensor<T, 3> v;  // (S, N, E)
};

// What scaled dot-product attention gives for every batch-head.
template <class T>
struct Attention {
  xt::xtensor<T, 3> output;   // (B, L, D): weights . v
  xt::xtensor<T, 3> weights;  // (B, L, S): the softmax of the scaled, masked scores
};

// A mask as the caller gives it: bool (True = masked) or floating (added to the scores).
template <class T>
using Mask = std::variant<xt::xarray<bool>, xt::xarray<T>>;

// The arguments of torch.nn.MultiheadAttention(...).
struct Options {
  std::int64_t embed_dim = 0;
  std::int64_t num_heads = 0;
  bool bias = true;
  bool add_bias_kv = false;
  bool add_zero_attn = false;
  std::optional<std::int64_t> kdim;  // none: embed_dim
  std::optional<std::int64_t> vdim;  // none: embed_dim
  bool batch_first = false;
};

// The arguments of MultiheadAttention.forward(...) after query, key and value.
template <class T>
struct ForwardOptions {
  std::optional<Mask<T>> key_padding_mask;  // (N, S), or (S) unbatched; True = padding
  bool need_weights = true;
  std::optional<Mask<T>> attn_mask;  // (L, S) or (N*H, L, S); unbatched (L, S) or (H, L, S)
  bool average_attn_weights = true;
};

// What forward returns: attn_output, and attn_output_weights when need_weights.
template <class T>
struct Output {
  xt::xarray<T> attn_output;                         // (L, N, E), (N, L, E) or (L, E)
  std::optional<xt::xarray<T>> attn_output_weights;  // (N, L, S) or (N, H, L, S); unbatched without N
};

// A name -> tensor map, keyed by PyTorch's state_dict names.
template <class T>
using StateDict = std::map<std::string, xt::xarray<T>>;

// dL/d(query), dL/d(key), dL/d(value), each of its own use and shaped as the input, and
// dL/d(parameter) by state_dict name.
template <class T>
struct Gradients {
  std::optional<xt::xarray<T>> query, key, value;
  StateDict<T> parameters;
};

// The KV cache of one attention layer while decoding: the k and v of every position so
// far, after the in-projection and split into heads, in the layout of
// F.multi_head_attention_forward's static_k and static_v (docs/19-decoding.md). Batch-head
// b = n*H + h, as split_heads numbers them; a new position goes at the end of axis 1.
template <class T>
struct KVCache {
  xt::xtensor<T, 3> k;  // (N*H, t, D)
  xt::xtensor<T, 3> v;  // (N*H, t, D)
};

// y = x W^T + b over the last dimension, as torch.nn.functional.linear: the one step of the
// library a lab may call (labs 02, 05 and 06). x (..., in), W (out, in), b (out) -> (..., out)
template <class T, std::size_t R>
xt::xtensor<T, R> linear(const xt::xtensor<T, R>& x, const xt::xtensor<T, 2>& W,
                         const std::optional<xt::xtensor<T, 1>>& b = std::nullopt) {
  if (x.shape(R - 1) != W.shape(1))
    throw std::invalid_argument("linear: x's last dimension is " + std::to_string(x.shape(R - 1)) + ", W has " +
                                std::to_string(W.shape(1)) + " columns");
  if (b && b->shape(0) != W.shape(0))
    throw std::invalid_argument("linear: b has " + std::to_string(b->shape(0)) + " entries, W has " +
                                std::to_string(W.shape(0)) + " rows");
  const std::size_t in = W.shape(1), out = W.shape(0), rows = x.size() / (in == 0 ? 1 : in);
  auto shape = x.shape();
  shape[R - 1] = out;
  xt::xtensor<T, R> y = xt::xtensor<T, R>::from_shape(shape);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t o = 0; o < out; ++o) {
      T sum = 0;
      for (std::size_t i = 0; i < in; ++i) sum += x.data()[r * in + i] * W(o, i);
      y.data()[r * out + o] = sum + (b ? (*b)(o) : T(0));
    }
  return y;
}

}  // namespace lab

// Lab 01: the packed in_proj_weight, taken apart and put together.
namespace lab01 {
// in_proj_weight (3E, E), in_proj_bias (3E) or none -> W_q, W_k, W_v (E, E), b_q, b_k, b_v (E)
template <class T>
lab::SeparateProjections<T> split_packed(const xt::xtensor<T, 2>& in_proj_weight,
                                         const std::optional<xt::xtensor<T, 1>>& in_proj_bias);
// W_q, W_k, W_v (E, E), b_q, b_k, b_v (E) or none -> in_proj_weight (3E, E), in_proj_bias (3E)
template <class T>
lab::PackedProjection<T> pack(const lab::SeparateProjections<T>& p);
}  // namespace lab01

// Lab 02: the in-projection, packed and separate.
namespace lab02 {
// query (L, N, E), key (S, N, E), value (S, N, E), in_proj_weight (3E, E), in_proj_bias (3E)
// -> q (L, N, E), k (S, N, E), v (S, N, E)
template <class T>
lab::QKV<T> in_projection_packed(const xt::xtensor<T, 3>& query, const xt::xtensor<T, 3>& key,
                                 const xt::xtensor<T, 3>& value, const xt::xtensor<T, 2>& in_proj_weight,
                                 const std::optional<xt::xtensor<T, 1>>& in_proj_bias);
// query (L, N, E), key (S, N, Ek), value (S, N, Ev), W_q (E, E), W_k (E, Ek), W_v (E, Ev)
// -> q (L, N, E), k (S, N, E), v (S, N, E)
template <class T>
lab::QKV<T> in_projection(const xt::xtensor<T, 3>& query, const xt::xtensor<T, 3>& key, const xt::xtensor<T, 3>& value,
                          const lab::SeparateProjections<T>& p);
}  // namespace lab02

// Lab 03: heads, and scaled dot-product attention.
namespace lab03 {
// (L, N, E) -> (N*H, L, D)
template <class T>
xt::xtensor<T, 3> split_heads(const xt::xtensor<T, 3>& x, std::size_t num_heads);
// (N*H, L, D) -> (L, N, E)
template <class T>
xt::xtensor<T, 3> merge_heads(const xt::xtensor<T, 3>& heads, std::size_t num_heads);
// q (B, L, D), k (B, S, D), v (B, S, D), mask (1 or B, L, S) additive, or none
// -> output (B, L, D), weights (B, L, S)
template <class T>
lab::Attention<T> scaled_dot_product_attention(const xt::xtensor<T, 3>& q, const xt::xtensor<T, 3>& k,
                                               const xt::xtensor<T, 3>& v,
                                               const std::optional<xt::xtensor<T, 3>>& mask);
}  // namespace lab03

// Lab 04: the masks.
namespace lab04 {
// attn_mask (L, S) or (B, L, S), bool or float, or none; key_padding_mask (N, S), bool or
// float, or none -> one additive mask (1 or B, L, S), or none when there is no mask.
template <class T>
std::optional<xt::xtensor<T, 3>> prepare_mask(const std::optional<lab::Mask<T>>& attn_mask,
                                              const std::optional<lab::Mask<T>>& key_padding_mask, std::size_t N,
                                              std::size_t num_heads, std::size_t L, std::size_t S);
}  // namespace lab04

// Lab 05: the whole forward of nn.MultiheadAttention.
namespace lab05 {
// The module's options and parameters (by state_dict name), query, key, value as the caller
// gives them ((L, N, E), (N, L, E) batch_first, (L, E) unbatched), forward's options
// -> attn_output as the query came, attn_output_weights when need_weights.
template <class T>
lab::Output<T> forward(const lab::Options& options, const lab::StateDict<T>& parameters, const xt::xarray<T>& query,
                       const xt::xarray<T>& key, const xt::xarray<T>& value, const lab::ForwardOptions<T>& opts);
}  // namespace lab05

// Lab 06: the backward pass.
namespace lab06 {
// The forward's arguments as in lab 05, and the upstream gradients dL/d(attn_output) and,
// when given, dL/d(attn_output_weights) -> dL/d(query), dL/d(key), dL/d(value) (each of its
// own use: the grader adds them up where two were one tensor) and dL/d(parameter) by
// state_dict name.
template <class T>
lab::Gradients<T> backward(const lab::Options& options, const lab::StateDict<T>& parameters, const xt::xarray<T>& query,
                           const xt::xarray<T>& key, const xt::xarray<T>& value, const lab::ForwardOptions<T>& opts,
                           const xt::xarray<T>& grad_attn_output,
                           const std::optional<xt::xarray<T>>& grad_attn_output_weights);
}  // namespace lab06

// Lab 07: one decoding step of causal self-attention, with a KV cache.
namespace lab07 {
// parameters by state_dict name: "in_proj_weight" (3E, E), "in_proj_bias" (3E) when bias,
// "out_proj.weight" (E, E), "out_proj.bias" (E) when bias; token (1, N, E): the new
// position's input, sequence-first; cache: k and v (N*H, t, D) of the t positions before it
// -> the step's attn_output (1, N, E), the row of the new position in the causal forward;
// the cache then holds t + 1 positions.
template <class T>
xt::xtensor<T, 3> decode_step(const lab::StateDict<T>& parameters, std::size_t num_heads,
                              const xt::xtensor<T, 3>& token, lab::KVCache<T>& cache);
}  // namespace lab07
