// tutorials/arguments.hpp — a tutorial's command line: its few options, --help, and the
// errors CLI11 prints for a bad one.
//
// Every tutorial takes one to three options (--case, --out, --tile, ...). CLI11 parses
// them, but CLI11 is a header-only library of a few hundred functions, and each program
// that includes it compiles them all again. Here it is compiled once, in arguments.cpp,
// and a tutorial includes this small header instead.
// What a student sees is CLI11's, unchanged: its --help, and its messages and exit status
// for an unknown option or a value out of range.
//
// A tutorial's main() reads:
//   tutorial::Arguments arguments{"Tutorial 19: decoding one token at a time"};
//   std::size_t tokens = 6;
//   arguments.option("--tokens", tokens, "tokens to decode in step 2", /*min=*/1, /*max=*/64);
//   if (const auto stop = arguments.parse(argc, argv)) return *stop;  // --help, or a bad option
#pragma once

#include <cstddef>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace tutorial {

class Arguments {
public:
  explicit Arguments(const std::string& description);
  ~Arguments();
  Arguments(const Arguments&) = delete;
  Arguments& operator=(const Arguments&) = delete;

  // An option and the variable it sets; the variable's value is the default.
  void option(const std::string& name, std::string& value, const std::string& help);
  void option(const std::string& name, std::filesystem::path& value, const std::string& help);
  // A count, refused with CLI11's message unless min <= value <= max.
  void option(const std::string& name, std::size_t& value, const std::string& help, std::size_t min = 0,
              std::size_t max = std::numeric_limits<std::size_t>::max());

  // Parses the command line. Returns the exit status when the program is to stop there (0
  // after --help, CLI11's status after a bad option, its message printed), else nothing.
  std::optional<int> parse(int argc, char** argv);

private:
  std::unique_ptr<CLI::App> app_;
};

}  // namespace tutorial
