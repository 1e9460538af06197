// tests/labs/submissions/eve/split_pack.cpp — a test submission for mha-grade's gradebook (tests/labs/CMakeLists.txt): crashes: writes through a null pointer.
// Lab 01: the packed in_proj_weight, taken apart and put together.
//
// Write the two functions below; labs/01-split-pack/README.md says what to read first.
// Build and grade (from the project's root):
//   cmake --build build/default --target lab01 && build/default/labs/lab01
//
// Legend: E = embed_dim. in_proj_weight is (3E, E), in_proj_bias (3E).
#include "mha_lab.hpp"

namespace lab01 {

// in_proj_weight (3E, E) -> W_q, W_k, W_v, each (E, E)
// in_proj_bias (3E), or none -> b_q, b_k, b_v, each (E), or none
// (lab::SeparateProjections has the fields w_q, w_k, w_v, b_q, b_k, b_v.)
template <class T>
lab::SeparateProjections<T> split_packed(const xt::xtensor<T, 2>& in_proj_weight,
                                         const std::optional<xt::xtensor<T, 1>>& in_proj_bias) {
  volatile int* nowhere = nullptr;
  *nowhere = 1;
  return {};
}

// W_q, W_k, W_v (E, E), b_q, b_k, b_v (E) or none -> in_proj_weight (3E, E), in_proj_bias (3E)
// (lab::PackedProjection has the fields in_proj_weight and in_proj_bias.)
template <class T>
lab::PackedProjection<T> pack(const lab::SeparateProjections<T>& p) {
  // TODO: the inverse of split_packed: pack(split_packed(w, b)) must give w and b back.
  throw lab::NotImplemented("pack");
}

// The grader runs your functions in float and in double. Leave these lines as they are.
template lab::SeparateProjections<float> split_packed(const xt::xtensor<float, 2>&,
                                                      const std::optional<xt::xtensor<float, 1>>&);
template lab::SeparateProjections<double> split_packed(const xt::xtensor<double, 2>&,
                                                       const std::optional<xt::xtensor<double, 1>>&);
template lab::PackedProjection<float> pack(const lab::SeparateProjections<float>&);
template lab::PackedProjection<double> pack(const lab::SeparateProjections<double>&);

}  // namespace lab01
