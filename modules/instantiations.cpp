// The library's explicit instantiations: MultiheadAttention, the template that a program
// importing mha would otherwise compile again in full, compiled here once for float and
// once for double. :multihead_attention declares them `extern template` after the class.
module;
#include "third_party.hpp"

module mha;

namespace mha {
template class MultiheadAttention<float>;
template class MultiheadAttention<double>;
}  // namespace mha
