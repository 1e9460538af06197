// tools/arguments.hpp — a program's command line: its options, flags and subcommands,
// --help and --version, and the errors CLI11 prints for a bad one.
//
// Every program of the project that takes options (the tutorials, mha-golden, mha-inspect,
// mha-grade, mha-checkpoint-bench) parses them with CLI11. CLI11 is a header-only library
// of a few hundred functions, and each program that includes it compiles them all again.
// Here it is compiled once, in arguments.cpp, and a program includes this small header
// instead. What a user sees is CLI11's, unchanged: its --help, its messages and its exit
// status for an unknown option, a missing one or a value out of range.
//
// A tutorial's main() reads:
//   cli::Arguments arguments{"Tutorial 19: decoding one token at a time"};
//   std::size_t tokens = 6;
//   arguments.option("--tokens", tokens, "tokens to decode in step 2").range(1, 64);
//   if (const auto stop = arguments.parse(argc, argv)) return *stop;  // --help, or a bad option
//
// A tool with subcommands:
//   cli::Arguments arguments{"mha-golden: ..."};
//   arguments.require_subcommand();
//   cli::Command check = arguments.subcommand("check", "Run every case found under PATH...");
//   check.option("PATH", paths, "Case folders").required();
//   if (const auto stop = arguments.parse(argc, argv)) return *stop;
//   if (check.chosen()) ...
#pragma once

#include <cstddef>
#include <limits>
#include <memory>
#include <optional>
#include <string>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace cli {

// One option as added: what it further requires of its value. Each call returns the
// option, so that they chain as CLI11's do.
class Option {
public:
  explicit Option(CLI::Option* option) : option_(option) {}

  Option& required();            // the program stops with CLI11's message when it is missing
  Option& existing_path();       // a file or a folder that exists (CLI::ExistingPath)
  Option& existing_directory();  // a folder that exists (CLI::ExistingDirectory)
  Option& positive();            // a number above 0 (CLI::PositiveNumber)
  // min <= value <= max (CLI::Range), refused with CLI11's message otherwise.
  Option& range(std::size_t min, std::size_t max = std::numeric_limits<std::size_t>::max());
  Option& show_default();  // --help prints the variable's value as the default

private:
  CLI::Option* option_;
};

// A command: the program itself, or one of its subcommands (`mha-grade gradebook`).
class Command {
public:
  // An option and the variable it sets; the variable's value is the default. A name
  // without dashes is a positional argument. T is one of the types arguments.cpp
  // instantiates: int, std::int64_t, std::size_t (also std::uint64_t), std::string,
  // std::filesystem::path and std::vector<std::string> (an argument taken many times).
  template <class T>
  Option option(const std::string& name, T& value, const std::string& help);
  // A flag: value becomes true when it is given.
  Option flag(const std::string& name, bool& value, const std::string& help);

  Command subcommand(const std::string& name, const std::string& help);
  bool chosen() const;  // this subcommand was given on the command line

protected:
  explicit Command(CLI::App* app) : app_(app) {}
  CLI::App* app_;  // owned by the program's Arguments
};

// The program's command line.
class Arguments : public Command {
public:
  explicit Arguments(const std::string& description);
  ~Arguments();
  Arguments(const Arguments&) = delete;
  Arguments& operator=(const Arguments&) = delete;

  void version(const std::string& text);  // --version prints text and stops
  void require_subcommand();              // exactly one subcommand must be given

  // Parses the command line. Returns the exit status when the program is to stop there (0
  // after --help or --version, CLI11's status after a bad option, its message printed),
  // else nothing.
  std::optional<int> parse(int argc, char** argv);

private:
  std::unique_ptr<CLI::App> program_;
};

}  // namespace cli
