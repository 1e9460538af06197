// modules/textbook/parameters.cpp — the weights-version counter of Parameters, once in a process.
//
// parameters.hpp declares detail::new_weights_version(); its body is here, not in the
// interface: a body there would be copied into every unit that imports mha, and with it
// its counter. Not PyTorch's: a module's weights there are tensors with their own version
// counters (torch.Tensor._version), which the engine's cache of W^T stands in for.
module;
#include "third_party_xtensor.hpp"

module mha.textbook;

// mha.core once more, as the interface imports it: clang 16 does not give an implementation
// unit what its interface imports (clang 19 does), and these bodies call shape_string.
import mha.core;

namespace mha::detail {

std::uint64_t new_weights_version() {
  static std::atomic<std::uint64_t> last{0};
  return ++last;
}

}  // namespace mha::detail
