// labs/grader/harness.cpp — grading a part of a lab: take the student's answer to each case, compare with PyTorch,
// and when the answer is wrong, name the catalogued mistakes it shows. Also the student's
// quick loop (run_lab), the answers' stream and the inputs' folder.
//
// The diagnosis is an experiment, repeated for each mistake of the part's list (each of its
// variants) and then for each pair: recompute the step with that mistake on the case's
// inputs (the part's `expected`) and compare with the student's answer. A set of mistakes
// is named when the answer matches its recomputation on every case the student's code
// answered, and each mistake of the set changes the result somewhere (an answer never has a
// mistake named that it does not show). Single mistakes are tried first; pairs only when no
// single one explains the answer. When nothing does, the report is where the answer first
// departs from PyTorch: the first failing case, and in it the first tensor in the forward's
// order, its index and both values; and the function whose output it is (a part is one
// function), with the page about its step (catalogue.cpp's steps()).
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads.
#include "third_party.hpp"

#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include <stdlib.h>

import mha;
import mha.io;
import mha.golden;

#include "grader.hpp"
#include "library.hpp"
#include "sandbox.hpp"

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

// Loads the part's cases of dtype T and takes the student's answer to each from `answers`.
template <class T>
Run run_cases(const Part& part, const PartFunctions<T>& fns, const std::vector<mha::CaseInfo>& cases,
              const Options& options, const Answers& answers, std::vector<Record<T>>& records,
              std::string& not_implemented) {
  const std::string dtype = std::is_same_v<T, float> ? "float32" : "float64";
  for (const auto& info : cases) {
    if (info.dtype != dtype || !part.takes(info)) continue;
    if (!options.only_cases.empty() &&
        std::find(options.only_cases.begin(), options.only_cases.end(), info.name) == options.only_cases.end())
      continue;
    Record<T> r{mha::load_case<T>(info), std::nullopt, {}, {}, {}, false, {}};
    r.own = fns.expected(r.c, {});
    r.right = right_tensors(r.own, fns.pytorch(r.c));
    const auto it = answers.cases.find(info.name);
    const Given<T> given(it == answers.cases.end() ? nullptr : &it->second, info.name, part.name);
    try {
      r.answer = fns.answer(r.c, given);
    } catch (const NotImplementedYet& e) {
      not_implemented = e.what();
      return Run::not_implemented;
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    if (r.answer) r.passed = matches(info, *r.answer, r.right, /*strict=*/true, &r.departure);
    else r.departure = r.error;
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

// Does the set change a result of the records that the set without its mistake `drop` gives?
// (each mistake named must show, in one dtype or the other)
template <class T>
bool differs_without(const PartFunctions<T>& fns, const std::vector<Record<T>>& records, const Injections& set,
                     std::size_t drop) {
  Injections rest;
  for (std::size_t i = 0; i < set.size(); ++i)
    if (i != drop) rest.push_back(set[i]);
  for (const auto& r : records)
    if (r.answer && !matches(r.c.info, fns.expected(r.c, set), fns.expected(r.c, rest), /*strict=*/false)) return true;
  return false;
}

// What a part's grading prints: to the caller's report when it gives one, else to stdout
// unless it asked for quiet.
template <class... Args>
void say(const Options& options, fmt::format_string<Args...> format, Args&&... args) {
  if (options.report) *options.report += fmt::format(format, std::forward<Args>(args)...);
  else if (!options.quiet) fmt::print(format, std::forward<Args>(args)...);
}

template <class T>
void print_failures(const std::vector<Record<T>>& records, const Options& options, int& printed) {
  for (const auto& r : records) {
    if (r.passed) continue;
    if (printed++ == 3 && !options.verbose) say(options, "  ... (--verbose lists every failing case)\n");
    if (printed > 3 && !options.verbose) continue;
    say(options, "  FAIL {} ({}): {}\n", r.c.info.name, r.c.info.dtype, r.departure);
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

PartResult grade_part(const Part& part, const std::vector<mha::CaseInfo>& cases, const Options& options,
                      const Answers& answers) {
  PartResult result;
  result.part = part.name;
  std::vector<Record<float>> f32;
  std::vector<Record<double>> f64;
  std::string missing;
  if (run_cases(part, part.f32, cases, options, answers, f32, missing) == Run::not_implemented ||
      run_cases(part, part.f64, cases, options, answers, f64, missing) == Run::not_implemented) {
    result.not_implemented = true;
    say(options, "{}: not implemented yet ({} still throws lab::NotImplemented)\n", part.name, missing);
    return result;
  }
  result.total = static_cast<int>(f32.size() + f64.size());
  result.passed = count_passed(f32) + count_passed(f64);
  say(options, "{}: {}/{} cases pass (float32 {}/{}, float64 {}/{})\n", part.name, result.passed, result.total,
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
        if (!explains(pair)) continue;  // the cheap test first: most pairs fail on the first case
        bool each_shows = true;
        for (std::size_t drop = 0; drop < pair.size(); ++drop)
          each_shows =
              each_shows && (differs_without(part.f32, f32, pair, drop) || differs_without(part.f64, f64, pair, drop));
        if (each_shows) result.named.push_back(pair);
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
    // The part is one function (or, in lab 05 and 06, the whole forward or backward): its
    // output is the first that departs, and its step's page is the one to reread.
    const Step* step = step_of(part.name);
    result.departure = step ? fmt::format("{}: {}; reread {}", part.name, where, step->page) : where;
    say(options, "  no catalogued mistake explains this answer. It first departs from PyTorch at {}\n", where);
    if (step)
      say(options, "  the first function whose output departs: {} ({}). Reread {}\n", part.name, step->step,
          step->page);
    return result;
  }
  if (result.named.size() > 1) say(options, "  the answer is explained equally by each of these:\n");
  for (const auto& set : result.named)
    for (const auto& i : set) {
      const Entry& e = entry(i.mistake);
      const std::size_t way = static_cast<std::size_t>(i.variant);
      const std::string how = way < e.ways.size() ? fmt::format("; {}", e.ways[way]) : std::string();
      say(options, "  mistake {} ({}{}): {}. Reread {}\n", e.name, e.step, how, e.explanation, e.page);
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

std::vector<PartResult> grade_lab(const Lab& lab, const std::vector<mha::CaseInfo>& cases, const Options& options,
                                  const Answers& answers) {
  std::vector<PartResult> results;
  for (const auto& part : lab.parts) results.push_back(grade_part(part, cases, options, answers));
  std::vector<std::string> named;
  for (const auto& r : results) {
    say(options, "{}\n", result_line(lab.name, r));
    for (const auto& set : r.named)
      for (const auto& i : set) named.emplace_back(entry(i.mistake).name);
  }
  std::sort(named.begin(), named.end());
  named.erase(std::unique(named.begin(), named.end()), named.end());
  say(options, "named: {}\n", named.empty() ? "-" : fmt::format("{}", fmt::join(named, " ")));
  return results;
}

int self_check(const Lab& lab, const std::vector<mha::CaseInfo>& cases) {
  int failed = 0;
  for (const auto& part : lab.parts) failed += self_check(part, part.f32, cases) + self_check(part, part.f64, cases);
  return failed;
}

namespace {

// A folder of its own under the system's temporary folder, removed when this goes.
struct TemporaryFolder {
  std::filesystem::path path;
  TemporaryFolder() {
    std::string pattern = (std::filesystem::temp_directory_path() / "mha-lab.XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw mha::Error("cannot make a temporary folder for the lab's inputs");
    path = pattern;
  }
  TemporaryFolder(const TemporaryFolder&) = delete;
  TemporaryFolder& operator=(const TemporaryFolder&) = delete;
  ~TemporaryFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::filesystem::path this_program() {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/exe", ec);
}

// Why a run gave fewer answers than cases, in the student's words; empty when it ended well.
std::string how_it_stopped(const sandbox::Outcome& ran, const sandbox::Limits& limits) {
  if (ran.timed_out) return fmt::format("your program took longer than {} s", limits.wall_seconds);
  if (ran.signal) return fmt::format("your program was ended by signal {} ({})", ran.signal, strsignal(ran.signal));
  if (ran.answers_too_large) return fmt::format("your program answered more than {} bytes", limits.answers);
  if (ran.exit_status != 0) return fmt::format("your program exited with status {}", ran.exit_status);
  return {};
}

}  // namespace

int run_lab(std::string_view number, int argc, char** argv) {
  Options options;
  bool self = false;  // --self-check: the grader's own recomputation against PyTorch, no student code run
  const char* root = std::getenv("MHA_ROOT");
  if (root) options.golden = std::filesystem::path(root) / "golden" / "cases";
#ifdef MHA_SOURCE_DIR
  else if (!std::filesystem::exists(options.golden))
    options.golden = std::filesystem::path(MHA_SOURCE_DIR) / "golden" / "cases";
#endif
  std::filesystem::path program = this_program().parent_path() / fmt::format("lab{}-answers", number);
  sandbox::Limits limits;
  limits.output = 1ull << 20;
  // The student's own program on their own machine: no limit on its address space, which a
  // sanitizer's build of it reserves by terabytes (the gradebook's sandbox limits memory).
  limits.memory = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--golden" && i + 1 < argc) options.golden = argv[++i];
    else if (arg == "--case" && i + 1 < argc) options.only_cases.emplace_back(argv[++i]);
    else if (arg == "--verbose") options.verbose = true;
    else if (arg == "--self-check") self = true;
    else if (arg == "--answers-program" && i + 1 < argc) program = argv[++i];
    else if (arg == "--timeout" && i + 1 < argc) limits.wall_seconds = limits.cpu_seconds = std::atoi(argv[++i]);
    else {
      fmt::print(stderr,
                 "usage: {} [--golden DIR] [--case NAME]... [--verbose] [--self-check] [--answers-program PATH] "
                 "[--timeout SECONDS]\n",
                 argv[0]);
      return 2;
    }
  }
  try {
    const Lab& l = lab(number);
    const auto start = std::chrono::steady_clock::now();
    const auto cases = read_cases(options.golden);
    if (self) {
      const int failed = self_check(l, cases);
      fmt::print("self-check: {}\n", failed == 0 ? "OK" : "FAILED");
      return failed == 0 ? 0 : 1;
    }
    // 1) the inputs, 2) the student's program on them, in a process of its own, 3) the grading.
    const TemporaryFolder inputs;
    write_inputs(l, cases, options, inputs.path);
    // Readable by the user the program runs as when this one is root (sandbox.hpp).
    std::filesystem::permissions(inputs.path, std::filesystem::perms(0755));
    for (const auto& e : std::filesystem::recursive_directory_iterator(inputs.path))
      std::filesystem::permissions(e.path(),
                                   e.is_directory() ? std::filesystem::perms(0755) : std::filesystem::perms(0644));
    sandbox::Job job;
    job.argv = {std::filesystem::absolute(program).string(), inputs.path.string()};
    job.isolation = sandbox::Isolation::none;
    job.answers_channel = true;
    std::fflush(stdout);
    const sandbox::Outcome ran = sandbox::run(job, limits);
    fmt::print("{}", ran.output);  // what the student's code printed, for the student
    if (ran.output_truncated) fmt::print("\n(your program's output was cut at {} bytes)\n", limits.output);
    if (ran.could_not_start) throw mha::Error(fmt::format("cannot run {}", program.string()));
    const Answers answers = parse_answers(ran.answers);
    fmt::print("lab {}: graded on the golden cases in {}\n", l.name, options.golden.string());
    if (const std::string stopped = how_it_stopped(ran, limits); !stopped.empty())
      fmt::print("{}: the cases it did not answer fail\n", stopped);
    if (!answers.problem.empty()) fmt::print("its answers: {}\n", answers.problem);
    const auto results = grade_lab(l, cases, options, answers);
    const bool ok = std::all_of(results.begin(), results.end(), [](const auto& r) { return r.ok(); });
    const bool none = std::all_of(results.begin(), results.end(), [](const auto& r) { return r.not_implemented; });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("verdict: {} ({:.1f} s)\n", ok ? "PASS" : none ? "NOT IMPLEMENTED YET" : "FAIL", seconds);
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  }
}

// --- the answers' stream, and the inputs' folder ---

namespace {

// A case's, a function's or a tensor's name in the stream: letters, digits and _ . - /.
bool valid_name(std::string_view s) {
  return !s.empty() && s.size() <= 200 && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == '/';
  });
}

}  // namespace

Answers parse_answers(std::string_view stream) {
  Answers a;
  std::size_t at = 0;
  while (at < stream.size()) {
    const std::size_t eol = stream.find('\n', at);
    if (eol == std::string_view::npos || eol - at > 1000) {
      a.problem = fmt::format("the stream is cut short or malformed at byte {}", at);
      break;
    }
    std::istringstream head{std::string(stream.substr(at, eol - at))};
    std::string kind, case_name, name, status, size_text;
    head >> kind >> case_name >> name;
    if (kind == "status") head >> status;
    head >> size_text;
    const bool number = !size_text.empty() && size_text.size() < 19 &&
                        std::all_of(size_text.begin(), size_text.end(), [](char c) { return c >= '0' && c <= '9'; });
    const std::size_t size = number ? std::stoull(size_text) : 0;
    if ((kind != "tensor" && kind != "status") || !valid_name(case_name) || !valid_name(name) || !number ||
        size > stream.size() - eol - 1) {
      a.problem = fmt::format("the stream is cut short or malformed at byte {}", at);
      break;
    }
    const std::string body(stream.substr(eol + 1, size));
    if (kind == "tensor") a.cases[case_name].tensors[name] = body;
    else a.cases[case_name].statuses[name] = Status{status, body.substr(0, 2000)};
    at = eol + 1 + size;
  }
  return a;
}

template <class T>
void Given<T>::check() const {
  if (!a_) throw std::runtime_error("your program gave no answer for this case (did it stop before?)");
  const auto it = a_->statuses.find(function_);
  if (it == a_->statuses.end()) return;
  if (it->second.kind == "not_implemented") throw NotImplementedYet(it->second.message);
  if (it->second.kind == "error")
    throw std::runtime_error(fmt::format("your code stopped with an error: {}", it->second.message));
}

template <class T>
xt::xarray<T> Given<T>::tensor(const std::string& name) const {
  if (auto t = maybe(name)) return *t;
  throw std::runtime_error(fmt::format("{}: not given", name));
}

template <class T>
std::optional<xt::xarray<T>> Given<T>::maybe(const std::string& name) const {
  check();
  const auto it = a_->tensors.find(name);
  if (it == a_->tensors.end()) return std::nullopt;
  const mha::NpyArray array = mha::parse_npy(std::span<const char>(it->second.data(), it->second.size()), name);
  return mha::to_xarray<T>(array, name);
}

template <class T>
bool Given<T>::none() const {
  check();
  const auto it = a_->statuses.find(function_);
  return it != a_->statuses.end() && it->second.kind == "none";
}

template <class T>
std::vector<std::string> Given<T>::names(const std::string& prefix) const {
  check();
  std::vector<std::string> n;
  for (const auto& [name, bytes] : a_->tensors)
    if (name.starts_with(prefix)) n.push_back(name);
  return n;
}

template class Given<float>;
template class Given<double>;

InputWriter::InputWriter(std::filesystem::path dir) : dir_(std::move(dir)) {
  std::filesystem::create_directories(dir_);
}

template <class T>
void InputWriter::tensor(const std::string& name, const xt::xarray<T>& t) {
  mha::save_npy<T>(dir_ / (name + ".npy"), t);
}

// A mask as the caller gave it: bool, or the case's floating type (a uint8 mask, which
// PyTorch 1.13 read as bool, as bool).
template <class T>
void InputWriter::mask(const std::string& name, const mha::Mask<T>& m) {
  std::visit(
      [&](const auto& a) {
        using E = typename std::decay_t<decltype(a)>::value_type;
        if constexpr (std::is_same_v<E, T>) tensor<T>(name, a), flag(name + "_bool", false);
        else tensor<bool>(name, xt::xarray<bool>(xt::not_equal(a, E(0)))), flag(name + "_bool", true);
      },
      m);
}

void InputWriter::scalar(const std::string& key, const std::string& value) { scalars_[key] = value; }

InputWriter::~InputWriter() {
  std::ofstream out(dir_ / "call.txt");
  for (const auto& [key, value] : scalars_) out << key << ' ' << value << '\n';
}

template void InputWriter::tensor<float>(const std::string&, const xt::xarray<float>&);
template void InputWriter::tensor<double>(const std::string&, const xt::xarray<double>&);
template void InputWriter::tensor<bool>(const std::string&, const xt::xarray<bool>&);
template void InputWriter::mask<float>(const std::string&, const mha::Mask<float>&);
template void InputWriter::mask<double>(const std::string&, const mha::Mask<double>&);

}  // namespace grader
