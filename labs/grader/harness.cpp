// labs/grader/harness.cpp — grading a part of a lab: run the student's function on each case, compare with PyTorch,
// and when the answer is wrong, name the catalogued mistakes it shows.
//
// The diagnosis is an experiment, repeated for each mistake of the part's list (each of its
// variants) and then for each pair: recompute the step with that mistake on the case's
// inputs (the part's `expected`) and compare with the student's answer. A set of mistakes
// is named when the answer matches its recomputation on every case the student's code
// answered, and each mistake of the set changes the result somewhere (an answer never has a
// mistake named that it does not show). Single mistakes are tried first; pairs only when no
// single one explains the answer. When nothing does, the report is where the answer first
// departs from PyTorch: the first failing case, and in it the first tensor in the forward's
// order, its index and both values.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads.
#include "third_party.hpp"

#include <chrono>
#include <iostream>

import mha;
import mha.io;
import mha.golden;

#include "grader.hpp"
#include "lab_api.hpp"
#include "library.hpp"

namespace grader {

namespace {

// Tolerances. A right answer is held to the case's own (PyTorch's kernels against each
// other); the gradients to the case's backward tolerance. A mistaken answer is compared with
// the grader's recomputation of the mistake, which PyTorch never computed: the student's
// summation order and the grader's differ, so the match allows a little more (1e-4 relative
// in float32, 1e-9 in float64), still far below what any mistake changes (0.01 and more).
struct Tolerance {
  double rtol, atol;
};

template <class T>
Tolerance right_tolerance(const mha::CaseInfo& info, const Named<T>& n) {
  if (n.rtol >= 0) return {n.rtol, n.atol};
  if (info.format == 2 && n.name.starts_with("grad.")) return {info.backward_rtol, info.backward_atol};
  return {info.rtol, info.atol};
}

template <class T>
Tolerance match_tolerance(const mha::CaseInfo& info, const Named<T>& n) {
  const Tolerance right = right_tolerance(info, n);
  const Tolerance floor = std::is_same_v<T, float> ? Tolerance{1e-4, 1e-5} : Tolerance{1e-9, 1e-10};
  return {std::max(right.rtol, floor.rtol), std::max(right.atol, floor.atol)};
}

template <class T>
const Named<T>* find(const Tensors<T>& tensors, std::string_view name) {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

// One case of a part: the student's answer and the right one.
template <class T>
struct Record {
  mha::Case<T> c;
  std::optional<Tensors<T>> answer;  // none when the student's code threw
  std::string error;
  Tensors<T> right;  // PyTorch's tensors where it has them, the grader's otherwise
  Tensors<T> own;    // the grader's, without mistakes
  bool passed = false;
  std::string departure;  // the first tensor that differs, and where
};

// Does `got` hold each tensor of `want`, within tolerance? `first` gets the first that differs.
template <class T>
bool matches(const mha::CaseInfo& info, const Tensors<T>& got, const Tensors<T>& want, bool strict,
             std::string* first = nullptr) {
  std::vector<std::string> right;  // the tensors before the first that differs: still PyTorch's
  for (const auto& w : want) {
    const Named<T>* g = find(got, w.name);
    if (!g) {
      if (first) *first = fmt::format("{}: not given", w.name);
      return false;
    }
    const Tolerance tol = strict ? right_tolerance(info, w) : match_tolerance(info, w);
    const auto r = lib::compare<T>(g->tensor, w.tensor, tol.rtol, tol.atol);
    if (!r.ok) {
      if (first)
        *first = fmt::format(
            "{}: {}{}", w.name, r.mismatch,
            right.empty() ? std::string() : fmt::format(" (before it, {} match PyTorch's)", fmt::join(right, ", ")));
      return false;
    }
    right.push_back(w.name);
  }
  return true;
}

// The right tensors: the grader's names and order, PyTorch's values where it has them.
template <class T>
Tensors<T> right_tensors(const Tensors<T>& own, const Tensors<T>& pytorch) {
  Tensors<T> right;
  for (const auto& o : own) right.push_back(find(pytorch, o.name) ? *find(pytorch, o.name) : o);
  for (const auto& p : pytorch)
    if (!find(own, p.name)) right.push_back(p);
  return right;
}

enum class Run { graded, not_implemented };

// Loads the part's cases of dtype T and runs the student's function on each.
template <class T>
Run run_cases(const Part& part, const PartFunctions<T>& fns, const std::vector<mha::CaseInfo>& cases,
              const Options& options, std::vector<Record<T>>& records, std::string& not_implemented) {
  const std::string dtype = std::is_same_v<T, float> ? "float32" : "float64";
  for (const auto& info : cases) {
    if (info.dtype != dtype || !part.takes(info)) continue;
    if (!options.only_cases.empty() &&
        std::find(options.only_cases.begin(), options.only_cases.end(), info.name) == options.only_cases.end())
      continue;
    Record<T> r{mha::load_case<T>(info), std::nullopt, {}, {}, {}, false, {}};
    r.own = fns.expected(r.c, {});
    r.right = right_tensors(r.own, fns.pytorch(r.c));
    try {
      r.answer = fns.answer(r.c);
    } catch (const lab::NotImplemented& e) {
      not_implemented = e.what();
      return Run::not_implemented;
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    if (r.answer) r.passed = matches(info, *r.answer, r.right, /*strict=*/true, &r.departure);
    else r.departure = fmt::format("your code stopped with an error: {}", r.error);
    records.push_back(std::move(r));
  }
  return Run::graded;
}

// The evidence for one set of mistakes in the records of dtype T: false when an answer
// contradicts it; `shows` when it changes a result somewhere.
template <class T>
bool consistent(const PartFunctions<T>& fns, const std::vector<Record<T>>& records, const Injections& injections,
                bool& shows) {
  for (const auto& r : records) {
    if (!r.answer) continue;
    Tensors<T> expected;
    try {
      expected = fns.expected(r.c, injections);
    } catch (const std::exception&) {
      return false;
    }
    if (!matches(r.c.info, *r.answer, expected, /*strict=*/false)) return false;
    if (!matches(r.c.info, r.own, expected, /*strict=*/false)) shows = true;
  }
  return true;
}

// Does the set change a result that the set without `m` gives? (each mistake named must show)
template <class T>
bool each_shows(const PartFunctions<T>& fns, const std::vector<Record<T>>& records, const Injections& pair) {
  for (std::size_t drop = 0; drop < pair.size(); ++drop) {
    Injections rest;
    for (std::size_t i = 0; i < pair.size(); ++i)
      if (i != drop) rest.push_back(pair[i]);
    bool differs = false;
    for (const auto& r : records) {
      if (!r.answer) continue;
      if (!matches(r.c.info, fns.expected(r.c, pair), fns.expected(r.c, rest), /*strict=*/false)) {
        differs = true;
        break;
      }
    }
    if (!differs) return false;
  }
  return true;
}

template <class T>
void print_failures(const std::vector<Record<T>>& records, const Options& options, int& printed) {
  for (const auto& r : records) {
    if (r.passed) continue;
    if (printed++ == 3 && !options.verbose) fmt::print("  ... (--verbose lists every failing case)\n");
    if (printed > 3 && !options.verbose) continue;
    fmt::print("  FAIL {} ({}): {}\n", r.c.info.name, r.c.info.dtype, r.departure);
  }
}

template <class T>
int count_passed(const std::vector<Record<T>>& records) {
  return static_cast<int>(std::count_if(records.begin(), records.end(), [](const auto& r) { return r.passed; }));
}

// The grader's own recomputation without a mistake, against PyTorch's tensors on every
// case of the part: what the diagnosis measures "a mistake shows" from must be PyTorch's.
template <class T>
int self_check(const Part& part, const PartFunctions<T>& fns, const std::vector<mha::CaseInfo>& cases) {
  const std::string dtype = std::is_same_v<T, float> ? "float32" : "float64";
  int failed = 0, checked = 0;
  for (const auto& info : cases) {
    if (info.dtype != dtype || !part.takes(info)) continue;
    const auto c = mha::load_case<T>(info);
    std::string first;
    ++checked;
    if (!matches(info, fns.expected(c, {}), fns.pytorch(c), /*strict=*/true, &first)) {
      fmt::print("  {} ({}): the grader's recomputation differs from PyTorch's: {}\n", info.name, dtype, first);
      ++failed;
    }
  }
  fmt::print("{} ({}): the grader's recomputation is PyTorch's on {} of {} cases\n", part.name, dtype, checked - failed,
             checked);
  return failed;
}

}  // namespace

std::vector<mha::CaseInfo> read_cases(const std::filesystem::path& golden) {
  std::vector<mha::CaseInfo> infos;
  for (const auto& dir : mha::find_cases({golden})) infos.push_back(mha::read_case_info(dir));
  return infos;
}

PartResult grade_part(const Part& part, const std::vector<mha::CaseInfo>& cases, const Options& options) {
  PartResult result;
  result.part = part.name;
  std::vector<Record<float>> f32;
  std::vector<Record<double>> f64;
  std::string missing;
  if (run_cases(part, part.f32, cases, options, f32, missing) == Run::not_implemented ||
      run_cases(part, part.f64, cases, options, f64, missing) == Run::not_implemented) {
    result.not_implemented = true;
    fmt::print("{}: not implemented yet ({} still throws lab::NotImplemented)\n", part.name, missing);
    return result;
  }
  result.total = static_cast<int>(f32.size() + f64.size());
  result.passed = count_passed(f32) + count_passed(f64);
  fmt::print("{}: {}/{} cases pass (float32 {}/{}, float64 {}/{})\n", part.name, result.passed, result.total,
             count_passed(f32), f32.size(), count_passed(f64), f64.size());
  if (result.ok() || result.total == 0) return result;
  int printed = 0;
  print_failures(f32, options, printed);
  print_failures(f64, options, printed);

  // The failing cases first: they tell candidates apart soonest.
  auto failing_first = [](auto& records) {
    std::remove_reference_t<decltype(records)> sorted;
    for (bool passed : {false, true})
      for (auto& r : records)
        if (r.passed == passed) sorted.push_back(std::move(r));
    records = std::move(sorted);
  };
  failing_first(f32), failing_first(f64);

  // Singles, then pairs of different mistakes, each in each of its variants.
  std::vector<Injection> singles;
  for (Mistake m : part.mistakes)
    for (int v = 0; v < entry(m).variants; ++v) singles.push_back({m, v});
  auto explains = [&](const Injections& set) {
    bool shows = false;
    return consistent(part.f32, f32, set, shows) && consistent(part.f64, f64, set, shows) && shows;
  };
  for (const auto& s : singles)
    if (explains({s})) result.named.push_back({s});
  if (result.named.empty())
    for (std::size_t i = 0; i < singles.size(); ++i)
      for (std::size_t j = i + 1; j < singles.size(); ++j) {
        if (singles[i].mistake == singles[j].mistake) continue;
        const Injections pair{singles[i], singles[j]};
        if (explains(pair) && each_shows(part.f32, f32, pair) && each_shows(part.f64, f64, pair))
          result.named.push_back(pair);
      }
  // One mistake in two of its variants is one mistake named once.
  std::vector<std::string> seen;
  std::erase_if(result.named, [&](const Injections& set) {
    const std::string n = names(set);
    if (std::find(seen.begin(), seen.end(), n) != seen.end()) return true;
    seen.push_back(n);
    return false;
  });

  if (result.named.empty()) {
    const std::string where = !f32.empty() && !f32.front().passed
                                  ? fmt::format("{} (float32): {}", f32.front().c.info.name, f32.front().departure)
                                  : fmt::format("{} (float64): {}", f64.front().c.info.name, f64.front().departure);
    result.departure = where;
    fmt::print("  no catalogued mistake explains this answer. It first departs from PyTorch at {}\n", where);
    return result;
  }
  if (result.named.size() > 1) fmt::print("  the answer is explained equally by each of these:\n");
  for (const auto& set : result.named)
    for (const auto& i : set) {
      const Entry& e = entry(i.mistake);
      fmt::print("  mistake {} ({}): {}. Reread {}\n", e.name, e.step, e.explanation, e.page);
    }
  return result;
}

std::string result_line(std::string_view lab, const PartResult& r) {
  std::vector<std::string> ids;
  for (const auto& set : r.named)
    for (const auto& i : set) ids.emplace_back(entry(i.mistake).name);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  const std::string status = r.not_implemented ? "not_implemented" : r.ok() ? "pass" : "fail";
  return fmt::format("result {} {} {} {} {} {}", lab, r.part, r.passed, r.total, status,
                     ids.empty() ? "-" : fmt::format("{}", fmt::join(ids, ",")));
}

int run_lab(std::string_view lab, const std::vector<Part>& parts, int argc, char** argv) {
  Options options;
  bool self = false;  // --self-check: the grader's own recomputation against PyTorch, no student code run
  const char* root = std::getenv("MHA_ROOT");
  if (root) options.golden = std::filesystem::path(root) / "golden" / "cases";
#ifdef MHA_SOURCE_DIR
  else if (!std::filesystem::exists(options.golden))
    options.golden = std::filesystem::path(MHA_SOURCE_DIR) / "golden" / "cases";
#endif
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--golden" && i + 1 < argc) options.golden = argv[++i];
    else if (arg == "--case" && i + 1 < argc) options.only_cases.emplace_back(argv[++i]);
    else if (arg == "--verbose") options.verbose = true;
    else if (arg == "--self-check") self = true;
    else {
      fmt::print(stderr, "usage: {} [--golden DIR] [--case NAME]... [--verbose] [--self-check]\n", argv[0]);
      return 2;
    }
  }
  try {
    const auto start = std::chrono::steady_clock::now();
    const auto cases = read_cases(options.golden);
    if (self) {
      int failed = 0;
      for (const auto& part : parts) failed += self_check(part, part.f32, cases) + self_check(part, part.f64, cases);
      fmt::print("self-check: {}\n", failed == 0 ? "OK" : "FAILED");
      return failed == 0 ? 0 : 1;
    }
    fmt::print("lab {}: graded on the golden cases in {}\n", lab, options.golden.string());
    std::vector<PartResult> results;
    for (const auto& part : parts) results.push_back(grade_part(part, cases, options));
    std::vector<std::string> named;
    for (const auto& r : results) {
      fmt::print("{}\n", result_line(lab, r));
      for (const auto& set : r.named)
        for (const auto& i : set) named.emplace_back(entry(i.mistake).name);
    }
    std::sort(named.begin(), named.end());
    named.erase(std::unique(named.begin(), named.end()), named.end());
    const bool ok = std::all_of(results.begin(), results.end(), [](const auto& r) { return r.ok(); });
    const bool none = std::all_of(results.begin(), results.end(), [](const auto& r) { return r.not_implemented; });
    fmt::print("named: {}\n", named.empty() ? "-" : fmt::format("{}", fmt::join(named, " ")));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("verdict: {} ({:.1f} s)\n", ok ? "PASS" : none ? "NOT IMPLEMENTED YET" : "FAIL", seconds);
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  }
}

}  // namespace grader
