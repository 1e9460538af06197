// modules/core.cppm — what every layer starts from: mha::Error, and the check that throws it.
//
// Every invalid argument is reported as an mha::Error whose message starts with the
// argument's name, then says what was expected and what was given: check() words it so.
// Nothing is checked with assert(): the checks stay in Release builds.
//
// A module of its own, imported by every layer of mha and by mha.io and mha.golden: the
// units that only check and report (a file's bytes, a header, a case.json) need not wait
// for the rest of mha to be compiled (docs/building.md). mha does not re-export it:
// `import mha;` gives mha.error (Error, shape_string), and check() stays the library's
// helper, in mha::detail. A module that calls it as check() says so once, after its imports:
// `namespace mha { using detail::check; }`.
module;
#include "third_party_core.hpp"

export module mha.core;

export import mha.error;

export namespace mha::detail {

// Throws mha::Error("<argument>: <message>") unless the condition holds.
template <class... Args>
void check(bool condition, std::string_view argument, fmt::format_string<Args...> message, Args&&... args) {
  if (!condition) throw Error(fmt::format("{}: {}", argument, fmt::format(message, std::forward<Args>(args)...)));
}

}  // namespace mha::detail
