// labs/03-heads-attention/heads_attention.cpp — Lab 03: heads, and scaled dot-product attention.
//
// Write the three functions below; labs/03-heads-attention/README.md says what to read
// first. The grader gives them PyTorch's own q, k, v and the case's mask, and does the
// output projection itself. This file is compiled against labs/interface/mha_lab.hpp
// alone: the types are there, the library is not. Build and grade (from the project's root):
//   cmake --build build/default --target lab03 && build/default/labs/lab03
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads,
// D = head_dim = E / H, B = N*H.
#include "mha_lab.hpp"

namespace lab03 {

// (L, N, E) -> (N*H, L, D): batch-head b = n*H + h holds the columns of head h of entry n.
template <class T>
xt::xtensor<T, 3> split_heads(const xt::xtensor<T, 3>& x, std::size_t num_heads) {
  // TODO: which D columns of a row of E belong to head h?
  throw lab::NotImplemented("split_heads");
}

// (N*H, L, D) -> (L, N, E): the inverse of split_heads.
template <class T>
xt::xtensor<T, 3> merge_heads(const xt::xtensor<T, 3>& heads, std::size_t num_heads) {
  // TODO
  throw lab::NotImplemented("merge_heads");
}

// q (B, L, D), k (B, S, D), v (B, S, D), mask (1 or B, L, S), added to the scores, or none
// -> output (B, L, D) and weights (B, L, S)   (lab::Attention has the fields output, weights)
template <class T>
lab::Attention<T> scaled_dot_product_attention(const xt::xtensor<T, 3>& q, const xt::xtensor<T, 3>& k,
                                               const xt::xtensor<T, 3>& v,
                                               const std::optional<xt::xtensor<T, 3>>& mask) {
  // TODO: the scores of each batch-head, scaled; the mask; a softmax; the weighted values.
  throw lab::NotImplemented("scaled_dot_product_attention");
}

// The grader runs your functions in float and in double. Leave these lines as they are.
template xt::xtensor<float, 3> split_heads(const xt::xtensor<float, 3>&, std::size_t);
template xt::xtensor<double, 3> split_heads(const xt::xtensor<double, 3>&, std::size_t);
template xt::xtensor<float, 3> merge_heads(const xt::xtensor<float, 3>&, std::size_t);
template xt::xtensor<double, 3> merge_heads(const xt::xtensor<double, 3>&, std::size_t);
template lab::Attention<float> scaled_dot_product_attention(const xt::xtensor<float, 3>&, const xt::xtensor<float, 3>&,
                                                            const xt::xtensor<float, 3>&,
                                                            const std::optional<xt::xtensor<float, 3>>&);
template lab::Attention<double> scaled_dot_product_attention(const xt::xtensor<double, 3>&,
                                                             const xt::xtensor<double, 3>&,
                                                             const xt::xtensor<double, 3>&,
                                                             const std::optional<xt::xtensor<double, 3>>&);

}  // namespace lab03
