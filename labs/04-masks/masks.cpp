// labs/04-masks/masks.cpp — Lab 04: the masks: bool and float, 2-D and 3-D, key_padding_mask, and their merge.
//
// Write the function below; labs/04-masks/README.md says what to read first. The grader
// adds your mask to the scores of PyTorch's own q and k, and compares the weights and the
// output with PyTorch's. This file is compiled against labs/interface/mha_lab.hpp alone:
// the types are there, the library is not. Build and grade (from the project's root):
//   cmake --build build/default --target lab04 && build/default/labs/lab04
//
// Legend: L = target length, S = source length, N = batch, H = heads, B = N*H.
#include "mha_lab.hpp"

namespace lab04 {

// attn_mask: (L, S) or (B, L, S), or none
// key_padding_mask: (N, S), or none
// Each is bool or float: lab::Mask<T> is a std::variant<xt::xarray<bool>, xt::xarray<T>>.
// -> one mask (1, L, S) or (B, L, S) that the attention adds to its scores, or none
template <class T>
std::optional<xt::xtensor<T, 3>> prepare_mask(const std::optional<lab::Mask<T>>& attn_mask,
                                              const std::optional<lab::Mask<T>>& key_padding_mask, std::size_t N,
                                              std::size_t num_heads, std::size_t L, std::size_t S) {
  // TODO: 1) each mask as numbers to add to the scores: what does a bool True mean here?
  //       2) attn_mask (L, S) -> (1, L, S)
  //       3) key_padding_mask: which batch-heads does row n concern?
  throw lab::NotImplemented("prepare_mask");
}

// The grader runs your function in float and in double. Leave these lines as they are.
template std::optional<xt::xtensor<float, 3>> prepare_mask(const std::optional<lab::Mask<float>>&,
                                                           const std::optional<lab::Mask<float>>&, std::size_t,
                                                           std::size_t, std::size_t, std::size_t);
template std::optional<xt::xtensor<double, 3>> prepare_mask(const std::optional<lab::Mask<double>>&,
                                                            const std::optional<lab::Mask<double>>&, std::size_t,
                                                            std::size_t, std::size_t, std::size_t);

}  // namespace lab04
