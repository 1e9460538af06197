// tutorials/arguments.cpp — the tutorials' command line, on CLI11, compiled once for all of them.
//
// The bodies of what tutorials/arguments.hpp declares. Each is one call of CLI11, as a
// tutorial made it itself before: add_option, check(CLI::Range), and CLI11_PARSE's
// parse-or-exit.
#include "arguments.hpp"

#include <CLI/CLI.hpp>

namespace tutorial {

Arguments::Arguments(const std::string& description) : app_(std::make_unique<CLI::App>(description)) {}

Arguments::~Arguments() = default;

void Arguments::option(const std::string& name, std::string& value, const std::string& help) {
  app_->add_option(name, value, help);
}

void Arguments::option(const std::string& name, std::filesystem::path& value, const std::string& help) {
  app_->add_option(name, value, help);
}

void Arguments::option(const std::string& name, std::size_t& value, const std::string& help, std::size_t min,
                       std::size_t max) {
  auto* option = app_->add_option(name, value, help);
  if (min != 0 || max != std::numeric_limits<std::size_t>::max()) option->check(CLI::Range(min, max));
}

// CLI11_PARSE(app, argc, argv), returning the status where the macro returns it from main().
std::optional<int> Arguments::parse(int argc, char** argv) {
  try {
    app_->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app_->exit(e);
  }
  return std::nullopt;
}

}  // namespace tutorial
