// tools/arguments.cpp — the programs' command line, on CLI11, compiled once for all of them.
//
// The bodies of what tools/arguments.hpp declares. Each is one call of CLI11, as each
// program made it itself before: add_option, add_flag, add_subcommand, a check, and
// CLI11_PARSE's parse-or-exit.
#include "arguments.hpp"

#include <CLI/CLI.hpp>

#include <filesystem>
#include <vector>

namespace cli {

Option& Option::required() {
  option_->required();
  return *this;
}

Option& Option::existing_path() {
  option_->check(CLI::ExistingPath);
  return *this;
}

Option& Option::existing_directory() {
  option_->check(CLI::ExistingDirectory);
  return *this;
}

Option& Option::positive() {
  option_->check(CLI::PositiveNumber);
  return *this;
}

Option& Option::range(std::size_t min, std::size_t max) {
  option_->check(CLI::Range(min, max));
  return *this;
}

Option& Option::show_default() {
  option_->capture_default_str();
  return *this;
}

template <class T>
Option Command::option(const std::string& name, T& value, const std::string& help) {
  return Option(app_->add_option(name, value, help));
}

// The types the programs give option(); any other is a link error. On the LP64 systems the
// project builds on, long is std::int64_t and unsigned long is std::size_t and std::uint64_t.
template Option Command::option(const std::string&, int&, const std::string&);
template Option Command::option(const std::string&, long&, const std::string&);
template Option Command::option(const std::string&, unsigned long&, const std::string&);
template Option Command::option(const std::string&, std::string&, const std::string&);
template Option Command::option(const std::string&, std::filesystem::path&, const std::string&);
template Option Command::option(const std::string&, std::vector<std::string>&, const std::string&);

Option Command::flag(const std::string& name, bool& value, const std::string& help) {
  return Option(app_->add_flag(name, value, help));
}

Command Command::subcommand(const std::string& name, const std::string& help) {
  return Command(app_->add_subcommand(name, help));
}

bool Command::chosen() const { return app_->parsed(); }

Arguments::Arguments(const std::string& description)
    : Command(nullptr), program_(std::make_unique<CLI::App>(description)) {
  app_ = program_.get();
}

Arguments::~Arguments() = default;

void Arguments::version(const std::string& text) { program_->set_version_flag("--version", text); }

void Arguments::require_subcommand() { program_->require_subcommand(1); }

// CLI11_PARSE(app, argc, argv), returning the status where the macro returns it from main().
std::optional<int> Arguments::parse(int argc, char** argv) {
  try {
    program_->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return program_->exit(e);
  }
  return std::nullopt;
}

}  // namespace cli
