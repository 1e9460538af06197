// The library's explicit instantiations: each template that a program importing mha
// would otherwise compile again, compiled here once for float and once for double.
// The partitions declare them `extern template`, next to each template's definition.
module;
#include "third_party.hpp"

module mha;

namespace mha {
template class MultiheadAttention<float>;
template class MultiheadAttention<double>;
}  // namespace mha
