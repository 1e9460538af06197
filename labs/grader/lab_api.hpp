// labs/grader/lab_api.hpp — the labs' functions: what a student writes in each lab, and how a starter says "not yet".
//
// Each lab's starter (a .cpp of labs/01-split-pack/ to labs/06-backward/) defines the
// functions declared here, as templates over the element type, and instantiates them for
// float and double at its end: the grader runs them on every golden case of the lab, in both
// dtypes. The lab's grading program (labs/grader/drivers/lab01.cpp to lab06.cpp) calls them
// through these declarations; a starter whose signatures are changed does not link, and its
// build says which function is missing.
//
// Include it after "third_party.hpp" and `import mha;`. It is not the grader: that is
// labs/grader/grader.hpp, which a student's file never needs.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads,
// D = head_dim = E / H, B = N*H.
#pragma once

#include <stdexcept>
#include <string>

namespace lab {

// What a starter's TODO throws: the grader reports the function as "not implemented yet",
// and grades the lab's other functions.
class NotImplemented : public std::logic_error {
public:
  explicit NotImplemented(const std::string& function) : std::logic_error(function) {}
};

}  // namespace lab

// Lab 01: the packed in_proj_weight, taken apart and put together.
namespace lab01 {
// in_proj_weight (3E, E), in_proj_bias (3E) or none -> W_q, W_k, W_v (E, E), b_q, b_k, b_v (E)
template <class T>
mha::SeparateProjections<T> split_packed(const xt::xtensor<T, 2>& in_proj_weight,
                                         const std::optional<xt::xtensor<T, 1>>& in_proj_bias);
// W_q, W_k, W_v (E, E), b_q, b_k, b_v (E) or none -> in_proj_weight (3E, E), in_proj_bias (3E)
template <class T>
mha::textbook::PackedProjection<T> pack(const mha::SeparateProjections<T>& p);
}  // namespace lab01

// Lab 02: the in-projection, packed and separate.
namespace lab02 {
// query (L, N, E), key (S, N, E), value (S, N, E), in_proj_weight (3E, E), in_proj_bias (3E)
// -> q (L, N, E), k (S, N, E), v (S, N, E)
template <class T>
mha::textbook::QKV<T> in_projection_packed(const xt::xtensor<T, 3>& query, const xt::xtensor<T, 3>& key,
                                           const xt::xtensor<T, 3>& value, const xt::xtensor<T, 2>& in_proj_weight,
                                           const std::optional<xt::xtensor<T, 1>>& in_proj_bias);
// query (L, N, E), key (S, N, Ek), value (S, N, Ev), W_q (E, E), W_k (E, Ek), W_v (E, Ev)
// -> q (L, N, E), k (S, N, E), v (S, N, E)
template <class T>
mha::textbook::QKV<T> in_projection(const xt::xtensor<T, 3>& query, const xt::xtensor<T, 3>& key,
                                    const xt::xtensor<T, 3>& value, const mha::SeparateProjections<T>& p);
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
// -> output (B, L, D), weights (B, L, S); `probabilities` may stay empty.
template <class T>
mha::textbook::Attention<T> scaled_dot_product_attention(const xt::xtensor<T, 3>& q, const xt::xtensor<T, 3>& k,
                                                         const xt::xtensor<T, 3>& v,
                                                         const std::optional<xt::xtensor<T, 3>>& mask);
}  // namespace lab03

// Lab 04: the masks.
namespace lab04 {
// attn_mask (L, S) or (B, L, S), bool or float, or none; key_padding_mask (N, S), bool or
// float, or none -> one additive mask (1 or B, L, S), or none when there is no mask.
template <class T>
std::optional<xt::xtensor<T, 3>> prepare_mask(const std::optional<mha::Mask<T>>& attn_mask,
                                              const std::optional<mha::Mask<T>>& key_padding_mask, std::size_t N,
                                              std::size_t num_heads, std::size_t L, std::size_t S);
}  // namespace lab04

// Lab 05: the whole forward of nn.MultiheadAttention.
namespace lab05 {
// The module's options and parameters (by state_dict name), query, key, value as the caller
// gives them ((L, N, E), (N, L, E) batch_first, (L, E) unbatched), forward's options
// -> attn_output as the query came, attn_output_weights when need_weights.
template <class T>
mha::Output<T> forward(const mha::Options& options, const mha::StateDict<T>& parameters, const xt::xarray<T>& query,
                       const xt::xarray<T>& key, const xt::xarray<T>& value, const mha::ForwardOptions<T>& opts);
}  // namespace lab05

// Lab 06: the backward pass.
namespace lab06 {
// The forward's arguments as in lab 05, and the upstream gradients dL/d(attn_output) and,
// when given, dL/d(attn_output_weights) -> dL/d(query), dL/d(key), dL/d(value) (each of its
// own use: the grader adds them up where two were one tensor) and dL/d(parameter) by
// state_dict name.
template <class T>
mha::Gradients<T> backward(const mha::Options& options, const mha::StateDict<T>& parameters, const xt::xarray<T>& query,
                           const xt::xarray<T>& key, const xt::xarray<T>& value, const mha::ForwardOptions<T>& opts,
                           const xt::xarray<T>& grad_attn_output,
                           const std::optional<xt::xarray<T>>& grad_attn_output_weights);
}  // namespace lab06
