// modules/core.cppm — the library's one exception type, and how its messages are worded.
//
// Every invalid argument is reported as an mha::Error whose message starts with the
// argument's name, then says what was expected and what was given, in PyTorch's words
// where PyTorch has a message (torch/nn/functional.py, multi_head_attention_forward).
// Nothing is checked with assert(): the checks stay in Release builds.
//
// A module of its own, re-exported by mha: the units of mha.io and mha.golden that only
// check and report (a file's bytes, a header, a case.json) import this and need not wait
// for the rest of mha to be compiled (docs/building.md).
module;
#include "third_party_core.hpp"

export module mha.core;

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

// Throws mha::Error("<argument>: <message>") unless the condition holds.
template <class... Args>
void check(bool condition, std::string_view argument, fmt::format_string<Args...> message, Args&&... args) {
  if (!condition) throw Error(fmt::format("{}: {}", argument, fmt::format(message, std::forward<Args>(args)...)));
}

}  // namespace mha
