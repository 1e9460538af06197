// modules/error.cppm — the library's one exception type, and how its messages write a shape.
//
// Every invalid argument is reported as an mha::Error whose message starts with the
// argument's name, then says what was expected and what was given, in PyTorch's words
// where PyTorch has a message (torch/nn/functional.py, multi_head_attention_forward).
// A shape in a message is written as PyTorch prints one: shape_string.
//
// A module of its own, the one part of mha.core that a user sees: mha.core re-exports it
// for the layers, and mha for `import mha;`. The checks that throw the Error are mha.core's.
module;
#include "third_party_core.hpp"

export module mha.error;

export namespace mha {

// Thrown for every invalid input, shape, option or file.
class Error : public std::invalid_argument {
public:
  using std::invalid_argument::invalid_argument;
};

// A shape written as PyTorch prints one: (2, 3, 4); a 1-D shape as (5,).
std::string shape_string(std::span<const std::size_t> shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ", "));
}

std::string shape_string(std::initializer_list<std::size_t> shape) {
  return shape_string(std::span<const std::size_t>(shape.begin(), shape.size()));
}

// Any xtensor shape type (std::array, svector, std::vector).
template <class Shape>
requires requires(const Shape& s) {
  s.begin();
  s.end();
}
std::string shape_string(const Shape& shape) {
  std::vector<std::size_t> dims(shape.begin(), shape.end());
  return shape_string(std::span<const std::size_t>(dims));
}

}  // namespace mha
