// labs/02-in-projection/in_projection.cpp — Lab 02: the in-projection, packed and separate: q, k and v from the inputs.
//
// Write the two functions below; labs/02-in-projection/README.md says what to read first.
// This file is compiled against labs/interface/mha_lab.hpp alone: the types are there,
// the library is not. Build and grade (from the project's root):
//   cmake --build build/default --target lab02 && build/default/labs/lab02
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, Ek = kdim,
// Ev = vdim. You may use lab::linear(x, W, b) from mha_lab.hpp, which computes y = x W^T + b.
#include "mha_lab.hpp"

namespace lab02 {

// query (L, N, E), key (S, N, E), value (S, N, E),
// in_proj_weight (3E, E), in_proj_bias (3E) or none
// -> q (L, N, E), k (S, N, E), v (S, N, E)   (lab::QKV has the fields q, k, v)
template <class T>
lab::QKV<T> in_projection_packed(const xt::xtensor<T, 3>& query, const xt::xtensor<T, 3>& key,
                                 const xt::xtensor<T, 3>& value, const xt::xtensor<T, 2>& in_proj_weight,
                                 const std::optional<xt::xtensor<T, 1>>& in_proj_bias) {
  // TODO: q = query W_q^T + b_q, and k and v alike, each from its own block of rows.
  throw lab::NotImplemented("in_projection_packed");
}

// query (L, N, E), key (S, N, Ek), value (S, N, Ev),
// p.w_q (E, E), p.w_k (E, Ek), p.w_v (E, Ev), p.b_q, p.b_k, p.b_v (E) or none
// -> q (L, N, E), k (S, N, E), v (S, N, E)
template <class T>
lab::QKV<T> in_projection(const xt::xtensor<T, 3>& query, const xt::xtensor<T, 3>& key, const xt::xtensor<T, 3>& value,
                          const lab::SeparateProjections<T>& p) {
  // TODO: the same three projections, with three separate weights (kdim, vdim may differ from E).
  throw lab::NotImplemented("in_projection");
}

// The grader runs your functions in float and in double. Leave these lines as they are.
template lab::QKV<float> in_projection_packed(const xt::xtensor<float, 3>&, const xt::xtensor<float, 3>&,
                                              const xt::xtensor<float, 3>&, const xt::xtensor<float, 2>&,
                                              const std::optional<xt::xtensor<float, 1>>&);
template lab::QKV<double> in_projection_packed(const xt::xtensor<double, 3>&, const xt::xtensor<double, 3>&,
                                               const xt::xtensor<double, 3>&, const xt::xtensor<double, 2>&,
                                               const std::optional<xt::xtensor<double, 1>>&);
template lab::QKV<float> in_projection(const xt::xtensor<float, 3>&, const xt::xtensor<float, 3>&,
                                       const xt::xtensor<float, 3>&, const lab::SeparateProjections<float>&);
template lab::QKV<double> in_projection(const xt::xtensor<double, 3>&, const xt::xtensor<double, 3>&,
                                        const xt::xtensor<double, 3>&, const lab::SeparateProjections<double>&);

}  // namespace lab02
