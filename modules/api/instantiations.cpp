// modules/api/instantiations.cpp — the library's explicit instantiations of MultiheadAttention.
//
// MultiheadAttention, the template that a program importing mha would otherwise compile
// again in full, compiled here once for float and once for double. multihead_attention.hpp
// declares them `extern template` after the class.
module;
#include "third_party_xtensor.hpp"

module mha;

namespace mha {
template class MultiheadAttention<float>;
template class MultiheadAttention<double>;
}  // namespace mha
