// The library's explicit instantiations: MultiheadAttention, the template that a program
// importing mha would otherwise compile again in full, compiled here once for float and
// once for double. :multihead_attention declares them `extern template` after the class.
// And the one thing that must exist once in a process: the weights-version counter.
module;
#include "third_party.hpp"

module mha;

namespace mha::detail {
// Declared in :parameters. Here, not in the interface: a body there would be copied into
// every unit that imports mha, and with it its counter.
std::uint64_t new_weights_version() {
  static std::atomic<std::uint64_t> last{0};
  return ++last;
}
}  // namespace mha::detail

namespace mha {
template class MultiheadAttention<float>;
template class MultiheadAttention<double>;
}  // namespace mha
