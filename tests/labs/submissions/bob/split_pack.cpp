// tests/labs/submissions/bob/split_pack.cpp — a test submission for mha-grade's gradebook (tests/labs/CMakeLists.txt): wrong: rows [E, 2E) taken as W_q and [0, E) as W_k (qk_swapped).
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
  const std::size_t E = in_proj_weight.shape(1);
  auto rows = [&](std::size_t i) { return xt::xtensor<T, 2>(xt::view(in_proj_weight, xt::range(i * E, (i + 1) * E))); };
  lab::SeparateProjections<T> p{rows(1), rows(0), rows(2), {}, {}, {}};
  if (in_proj_bias) {
    auto part = [&](std::size_t i) {
      return xt::xtensor<T, 1>(xt::view(*in_proj_bias, xt::range(i * E, (i + 1) * E)));
    };
    p.b_q = part(1), p.b_k = part(0), p.b_v = part(2);
  }
  return p;
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
