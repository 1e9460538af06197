// tutorials/tutorial.hpp — how every tutorial prints and checks, so that each program can be about
// its one idea.
//
// A tutorial prints a title, numbered steps with labelled shapes and short value slices,
// and ends with a check against PyTorch's numbers from a golden case (golden/cases/):
// `OK`, or `MISMATCH max_abs_err=...` and a non-zero exit. Values are printed with a
// fixed format (4 decimals) so that the output is the same on every run; docs/ shows
// this output verbatim, and scripts/docs-output checks that it has not drifted.
//
// Include it after the other headers: it ends with `import mha;`, `import mha.core;` (for
// check) and `import mha.golden;`.
#pragma once

#include <fmt/format.h>

#include <xtensor/xarray.hpp>
#include <xtensor/xview.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

import mha;
import mha.core;
import mha.golden;

namespace tutorial {

// Throws mha::Error("<argument>: <message>") unless the condition holds: the library's own
// helper (mha.core's), so that a tutorial words its errors as the library does.
using mha::detail::check;

// "== Tutorial 03: projections by hand ==" and what the program demonstrates.
inline void title(std::string_view number, std::string_view name, std::string_view demonstrates) {
  fmt::print("== Tutorial {}: {} ==\n{}\n", number, name, demonstrates);
}

// "-- 3) split heads --": one numbered step.
inline void step(int n, std::string_view what) { fmt::print("\n-- {}) {} --\n", n, what); }

// "  q  (5, 3, 8)": a labelled shape.
template <class E>
void shape(std::string_view label, const E& x) {
  fmt::print("  {:<34} {}\n", label, mha::shape_string(x.shape()));
}

inline void shape(std::string_view label, std::initializer_list<std::size_t> dims) {
  fmt::print("  {:<34} {}\n", label, mha::shape_string(dims));
}

// One number as the tutorials print it: 4 decimals, nan and -inf spelled out.
inline std::string number(double x) {
  if (std::isnan(x)) return "     nan";  // the C library may print the sign of a NaN, "-nan"
  return fmt::format("{:>8.4f}", x);
}

// A labelled 1-D or 2-D slice: at most `rows` x `cols` values, "..." where cut.
template <class E>
void values(std::string_view label, const E& expression, std::size_t rows = 4, std::size_t cols = 6) {
  xt::xarray<double> x = expression;
  if (x.dimension() == 1) x.reshape({1, x.size()});
  const std::size_t R = x.shape(0), C = x.shape(1);
  fmt::print("  {} {}\n", label, mha::shape_string(expression.shape()));
  for (std::size_t i = 0; i < std::min(R, rows); ++i) {
    std::string line = "   ";
    for (std::size_t j = 0; j < std::min(C, cols); ++j) line += number(x(i, j));
    if (C > cols) line += "     ...";
    fmt::print("{}\n", line);
  }
  if (R > rows) fmt::print("        ... ({} more {})\n", R - rows, R - rows == 1 ? "row" : "rows");
}

// The project's root, where golden/ is: $MHA_ROOT when set, else the current folder when
// it has golden/cases/, else the source folder this tutorial was built from. So a tutorial
// runs from anywhere, and when its data cannot be found it says where it looked.
inline std::filesystem::path project_root() {
  namespace fs = std::filesystem;
  auto has_cases = [](const fs::path& root) { return fs::is_directory(root / "golden" / "cases"); };
  if (const char* root = std::getenv("MHA_ROOT")) {
    check(has_cases(root), "MHA_ROOT", "expected the project's root, with golden/cases/ in it, got '{}'", root);
    return root;
  }
  if (has_cases(fs::current_path())) return fs::current_path();
  if (has_cases(MHA_SOURCE_DIR)) return MHA_SOURCE_DIR;
  throw mha::Error(
      fmt::format("golden/cases: not found in the current folder '{}' nor in '{}' (where this tutorial "
                  "was built from); run it from the project's root, or set MHA_ROOT to that folder",
                  fs::current_path().string(), MHA_SOURCE_DIR));
}

// The path of a file or folder of the project, e.g. "golden/weights/transformer_encoder".
inline std::filesystem::path project_path(const std::filesystem::path& relative) {
  return relative.is_absolute() ? relative : project_root() / relative;
}

// The folder of a golden case.
inline std::filesystem::path case_dir(std::string_view name) { return project_path("golden") / "cases" / name; }

// A case a tutorial cannot reproduce is refused before it runs, with an mha::Error that
// names the case and says why ("--case: NAME records an error ..."); the tutorial then ends
// with "error: ..." and exit status 2, never with a MISMATCH it could not avoid.
inline void refuse_unless(bool accepted, const mha::CaseInfo& info, std::string_view why) {
  check(accepted, "--case", "{} {}", info.name, why);
}

// The refusals every tutorial with --case shares: a case that records an error PyTorch
// raised has no outputs to reproduce, and a call of the functional form (format 3, the
// functional_* cases) describes no module to build (tutorial 19 reads those).
inline void refuse_error_case(const mha::CaseInfo& info) {
  refuse_unless(!info.expect_error, info,
                "records an error PyTorch raised (expect_error), not outputs: choose a case that runs");
  refuse_unless(!info.generations_differ, info,
                "shows where PyTorch 1.13 and 2.x compute differently (docs/15-versions.md): the tutorials' steps are "
                "one generation's; mha-golden checks it under its own");
  refuse_unless(!info.is_functional(), info,
                "is a call of F.multi_head_attention_forward (format 3), not a module: choose a case that is not "
                "functional_*");
}

// A golden case, read as T. A case that records an error, or one of the other dtype, is
// refused, not converted.
template <class T>
mha::Case<T> load(std::string_view name) {
  const auto info = mha::read_case_info(case_dir(name));
  refuse_error_case(info);
  constexpr std::string_view dtype = std::is_same_v<T, float> ? "float32" : "float64";
  refuse_unless(info.dtype == dtype, info, fmt::format("is {}: this tutorial reads {} cases", info.dtype, dtype));
  fmt::print("Golden case: {} ({})\n", info.name, info.dtype);
  return mha::load_case<T>(info);
}

// The case's module on the reference path, the one that reads like PyTorch's source: step
// into its forward() to follow multi_head_attention_forward step by step. (A module's
// default path is `automatic`, the fast engine; every path gives the same numbers.)
template <class T>
mha::MultiheadAttention<T> reference_module(const mha::Case<T>& c) {
  auto module = mha::make_module(c);
  module.set_attention_path(mha::AttentionPath::reference);
  return module;
}

// A parameter of the case by its state_dict name, or an mha::Error that says why not.
template <class T>
const xt::xarray<T>& parameter(const mha::Case<T>& c, const std::string& name) {
  const char* why = name.ends_with("bias")                          ? "bias=False?"
                    : name == "in_proj_weight"                      ? "kdim or vdim != E: q/k/v_proj_weight instead"
                    : name.find("proj_weight") != std::string::npos ? "kdim == vdim == E: in_proj_weight instead"
                                                                    : "not in this case's options";
  check(c.parameters.contains(name), "--case", "{} has no {} ({})", c.info.name, name, why);
  return c.parameters.at(name);
}

// The value of an optional the tutorial relies on (attn_output_weights of a run with
// need_weights, a bias of a module with bias=True), or an mha::Error that names it.
template <class T>
const T& value_of(const std::optional<T>& optional, std::string_view what) {
  if (!optional) throw mha::Error(fmt::format("{}: expected a value, got none", what));
  return *optional;
}

// attn_output_weights of a forward run with need_weights (the default), or an mha::Error.
template <class T>
const xt::xarray<T>& weights(const mha::Output<T>& out) {
  return value_of(out.attn_output_weights, "attn_output_weights");
}

// Collects the checks of one tutorial: every comparison with PyTorch's numbers, and every
// demonstrated mistake (which must NOT match: a mistake that matched would prove nothing).
class Verdict {
public:
  Verdict() = default;
  template <class T>
  explicit Verdict(const mha::Case<T>& c) {
    tolerance(c);
  }

  // matches() compares within the case's tolerance: atol + rtol * |expected|.
  template <class T>
  void tolerance(const mha::Case<T>& c) {
    rtol_ = c.info.rtol, atol_ = c.info.atol;
  }

  // A tolerance of the tutorial's own, for numbers that come from no golden case; the
  // tutorial says why it is that one.
  void tolerance(double rtol, double atol) { rtol_ = rtol, atol_ = atol; }

  // `got` must equal PyTorch's `expected` within the case's tolerance.
  template <class A, class B>
  bool matches(std::string_view what, const A& got, const B& expected) {
    const auto r = compare(got, expected);
    max_err_ = std::max(max_err_, r.max_abs_err);
    ok_ = ok_ && r.ok;
    fmt::print("  {:<44} {}\n", what, r.ok ? "OK" : "MISMATCH " + r.mismatch);
    return r.ok;
  }

  // A demonstrated mistake: `got` must differ from `expected`.
  template <class A, class B>
  bool differs(std::string_view what, const A& got, const B& expected) {
    const auto r = compare(got, expected);
    ok_ = ok_ && !r.ok;
    if (r.ok) fmt::print("  {:<44} gives the same numbers, but this mistake should not!\n", what);
    else if (r.max_abs_err > 0)
      fmt::print("  {:<44} differs, as it should (max_abs_err={:.2f})\n", what, r.max_abs_err);
    else fmt::print("  {:<44} differs, as it should ({})\n", what, r.mismatch);
    return !r.ok;
  }

  // Exact equality (rearranging numbers must not change a single bit).
  template <class A, class B>
  bool equal(std::string_view what, const A& got, const B& expected) {
    const xt::xarray<double> g = got, e = expected;
    const bool same = g.shape() == e.shape() && g == e;
    ok_ = ok_ && same;
    fmt::print("  {:<44} {}\n", what, same ? "OK (bit for bit)" : "MISMATCH");
    return same;
  }

  // A fact the tutorial relies on (an error raised, a flag set): must hold.
  bool holds(std::string_view what, bool condition) {
    ok_ = ok_ && condition;
    fmt::print("  {:<44} {}\n", what, condition ? "OK" : "MISMATCH");
    return condition;
  }

  // The last line: `OK`, or `MISMATCH max_abs_err=...`; the exit status to return.
  int finish() const {
    if (ok_) fmt::print("\nOK\n");
    else fmt::print("\nMISMATCH max_abs_err={:.3g}\n", max_err_);
    return ok_ ? EXIT_SUCCESS : EXIT_FAILURE;
  }

private:
  template <class A, class B>
  mha::Comparison compare(const A& got, const B& expected) const {
    return mha::compare<double>(xt::xarray<double>(got), xt::xarray<double>(expected), rtol_, atol_);
  }

  double rtol_ = 0, atol_ = 0;
  double max_err_ = 0;
  bool ok_ = true;
};

}  // namespace tutorial
