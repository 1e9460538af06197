// labs/grader/mha_grade.cpp — mha-grade: the labs' grader for teachers, and for answers from any language.
//
//   mha-grade diagnose CASE ANSWER_DIR [--json]
//        an answer written as .npy files (attn_output.npy, attn_output_weights.npy) for one
//        golden case: checked against PyTorch's, its mistakes named. Exit 0 right, 1 wrong, 2
//        when the files cannot be graded.
//   mha-grade gradebook SUBMISSIONS [-j N] [--points FILE] [limits...]
//        one subfolder per student, each with its lab files (split_pack.cpp, ...) and/or
//        npy/<case>/*.npy. Each lab file is built and run in a sandbox of its own
//        (sandbox.hpp), N at a time; its answers come back as tensors and are graded here.
//        Writes gradebook.md and gradebook.csv (a row per part) and lms.csv (a row per
//        student: each lab's points and the total, for a learning management system).
//   mha-grade catalogue                  the catalogue of mistakes, docs/labs.md's table.
//
// What a submission's program prints is kept for the teacher to read and decides nothing:
// the verdicts come from the grader's comparison of its tensors with PyTorch's.
#include "third_party.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

import mha;
import mha.io;
import mha.golden;

#include "arguments.hpp"
#include "grader.hpp"
#include "sandbox.hpp"

namespace {

namespace fs = std::filesystem;
using grader::sandbox::Bind;
using grader::sandbox::Isolation;
using grader::sandbox::Job;
using grader::sandbox::Limits;
using grader::sandbox::Outcome;

std::string read_text(const fs::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> w;
  std::istringstream in(line);
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

std::string joined(const std::vector<std::string>& w) {
  std::string s;
  for (const auto& x : w) s += (s.empty() ? "" : " ") + x;
  return s;
}

// --- the kit: what a submission is built with (labs/CMakeLists.txt writes lab-kit.txt) ---

struct Kit {
  std::string compiler;
  std::vector<std::string> compile, link;
  std::vector<fs::path> include_dirs;
  std::map<std::string, fs::path> runner;  // lab number -> its runner's object
  fs::path runner_npy;                     // the .npy files every runner reads and writes
};

Kit read_kit(const fs::path& build) {
  const fs::path file = build / "labs" / "lab-kit.txt";
  if (!fs::exists(file))
    throw mha::Error(
        fmt::format("build: {} not found: configure and build mha-grade in {} first", file.string(), build.string()));
  Kit k;
  for (const auto& line : lines_of(read_text(file))) {
    auto w = words(line);
    if (w.empty()) continue;
    const std::string key = w.front();
    w.erase(w.begin());
    if (key == "compiler" && w.size() == 1) k.compiler = w[0];
    else if (key == "compile") k.compile = w;
    else if (key == "link") k.link = w;
    else if (key == "include" && w.size() == 1) k.include_dirs.emplace_back(w[0]);
    else if (key == "runner" && w.size() == 2) k.runner[w[0]] = w[1];
    else if (key == "runner_npy" && w.size() == 1) k.runner_npy = w[0];
  }
  if (k.compiler.empty() || k.runner.size() != grader::labs().size() || k.runner_npy.empty())
    throw mha::Error(fmt::format(
        "build: {} is incomplete: expected a compiler line, {} runner lines and a runner_npy line, got {}, {} runner "
        "lines and {}",
        file.string(), grader::labs().size(), k.compiler.empty() ? "no compiler line" : "a compiler line",
        k.runner.size(), k.runner_npy.empty() ? "no runner_npy line" : "a runner_npy line"));
  return k;
}

// A folder every job's user may read: the grader's staging area is 0711, each file in it
// 0644, each folder 0755 (when the grader is root, jobs run as users of their own).
void readable(const fs::path& p) {
  fs::permissions(p, fs::is_directory(p) ? fs::perms(0755) : fs::perms(0644));
  if (fs::is_directory(p))
    for (const auto& e : fs::recursive_directory_iterator(p))
      fs::permissions(e.path(), e.is_directory() ? fs::perms(0755) : fs::perms(0644));
}

// --- rows, points ---

struct Row {
  std::string student, lab, part;
  int passed = 0, total = 0;
  std::string verdict, diagnosis;
  double points = 0, max_points = 0;
};

// Points per part: `NN part points` lines of a file the teacher edits (labs/points.txt is
// the default); a part not listed shares its lab's 10 points equally with the lab's others.
struct Points {
  std::map<std::pair<std::string, std::string>, double> of;
  double part(const grader::Lab& lab, const std::string& part) const {
    const auto it = of.find({lab.number, part});
    return it != of.end() ? it->second : 10.0 / static_cast<double>(lab.parts.size());
  }
};

Points read_points(const fs::path& file) {
  Points p;
  if (file.empty()) return p;
  if (!fs::exists(file)) throw mha::Error(fmt::format("points: {} not found", file.string()));
  int n = 0;
  for (const auto& line : lines_of(read_text(file))) {
    ++n;
    const auto w = words(line);
    if (w.empty() || w[0].starts_with("#")) continue;
    double value = -1;
    try {
      if (w.size() == 3) value = std::stod(w[2]);
    } catch (const std::exception&) {}
    bool known = false;
    for (const auto& lab : grader::labs())
      if (lab.number == w[0])
        for (const auto& part : lab.parts) known = known || (w.size() == 3 && part.name == w[1]);
    if (!known || value < 0)
      throw mha::Error(
          fmt::format("points: {} line {}: expected `NN part points` (a lab's number, one of its parts, a number "
                      ">= 0), got `{}`",
                      file.string(), n, line));
    p.of[{w[0], w[1]}] = value;
  }
  return p;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string md_field(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
  return out;
}

// A student's name, as the submissions folder gives it, in a file name or a table: what is
// not a letter, a digit or one of - _ . @ becomes _.
std::string safe_name(const std::string& s) {
  std::string out;
  for (char c : s)
    out += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '@' ? c : '_';
  return out.empty() || out == "." || out == ".." ? "_" : out;
}

// --- one submission's lab: built and run in the sandbox, graded here ---

struct Settings {
  fs::path out, golden, staging;
  Limits build, run;
  Isolation isolation = Isolation::bubblewrap;
  Points points;
};

// The grader's staging area: the kit (the interface's headers, each lab's runner), each
// lab's inputs, and each job's own work folder; in the system's temporary folder, 0711.
struct Staging {
  fs::path root;
  explicit Staging(const fs::path& parent) {
    std::string pattern = (parent / "mha-grade.XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw mha::Error("cannot make the grader's staging folder");
    root = pattern;
    fs::permissions(root, fs::perms(0711));
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

// The kit in the staging area, seen as /kit: include/*.hpp, labNN-runner.o and runner-npy.o.
void stage_kit(const Kit& kit, const fs::path& dir) {
  fs::create_directories(dir / "include");
  for (const auto& d : kit.include_dirs)
    for (const auto& e : fs::directory_iterator(d))
      if (e.path().extension() == ".hpp") fs::copy_file(e.path(), dir / "include" / e.path().filename());
  for (const auto& [number, object] : kit.runner) fs::copy_file(object, dir / fmt::format("lab{}-runner.o", number));
  fs::copy_file(kit.runner_npy, dir / "runner-npy.o");
  readable(dir);
}

// Where a job sees the kit, its work folder and the lab's inputs: /kit, /box and /inputs in
// the sandbox; the folders themselves without it.
struct Places {
  fs::path kit, box, inputs;
};

// The build's shell line: the student's file BOX/src/FILE compiled against KIT/include alone,
// linked with the lab's runner and the runners' .npy files.
std::string build_line(const Kit& kit, const grader::Lab& lab, const Places& at) {
  const std::string box = at.box.string(), kit_dir = at.kit.string();
  return fmt::format(
      "{} {} -I{}/include -c {}/src/{} -o {}/student.o && {} {} {}/student.o {}/lab{}-runner.o {}/runner-npy.o -o "
      "{}/lab{}-answers",
      kit.compiler, joined(kit.compile), kit_dir, box, lab.file, box, kit.compiler, joined(kit.link), box, kit_dir,
      lab.number, kit_dir, box, lab.number);
}

// The line of a build's log that says why: the compiler's first error, or the linker's
// first missing function; a file that reaches for the library is told the labs' rule.
std::string build_failure(const std::string& log, const std::string& source) {
  std::string first = "see the build log";
  for (const char* what : {"error:", "undefined reference"})
    if (first == "see the build log")
      for (const auto& line : lines_of(log))
        if (const auto at = line.find(what);
            at != std::string::npos && line.find("linker command failed") == std::string::npos) {
          // a compiler's line from its start (the file and line); a linker's from what is missing
          first = line.substr(std::string_view(what) == "error:" ? 0 : at, 200);
          break;
        }
  const bool library = source.find("import mha") != std::string::npos || source.find("mha::") != std::string::npos ||
                       log.find("module 'mha") != std::string::npos;
  return library ? "does not compile: the labs are written without the library's own functions (a lab file "
                   "includes mha_lab.hpp alone): " +
                       first
                 : "does not compile: " + first;
}

// "its output was cut at N bytes", after what is already said.
std::string cut_note(const Outcome& o, const Limits& limits, const std::string& before = "x") {
  if (!o.output_truncated) return {};
  return fmt::format("{}its output was cut at {} bytes", before.empty() ? "" : "; ", limits.output);
}

// Kept for the teacher: what the job printed (already bounded), and the grader's report.
void keep_log(const fs::path& dir, const std::string& name, const std::string& text) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << text;
}

struct Task {
  std::string student;
  fs::path source;                   // a lab file, or a folder of .npy answers
  const grader::Lab* lab = nullptr;  // none: .npy answers
  int index = 0;
};

// A file of the student's, read as the grader: a plain file (not a link to one elsewhere),
// at most 1 MiB.
std::optional<std::string> student_file(const fs::path& file, std::string& why) {
  const auto st = fs::symlink_status(file);
  if (!fs::is_regular_file(st)) {
    why = "not a plain file (a link or a folder)";
    return std::nullopt;
  }
  if (fs::file_size(file) > (1u << 20)) {
    why = "larger than 1 MiB";
    return std::nullopt;
  }
  return read_text(file);
}

std::vector<Row> grade_lab_file(const Task& task, const Settings& s, const Kit& kit, const fs::path& kit_dir,
                                const std::vector<mha::CaseInfo>& cases, int slot) {
  const grader::Lab& lab = *task.lab;
  const grader::Lab& graded = lab;
  const fs::path logs = s.out / "work" / safe_name(task.student) / lab.number;
  auto one_row = [&](const std::string& verdict, const std::string& why) {
    double max = 0;
    for (const auto& p : graded.parts) max += s.points.part(graded, p.name);
    return std::vector<Row>{{task.student, lab.number, "-", 0, 0, verdict, why, 0, max}};
  };
  std::string why;
  const auto source = student_file(task.source, why);
  if (!source) return one_row("not graded", lab.file + ": " + why);

  // 1) the build, in a sandbox where only the student's file, the kit and the system are
  const fs::path work = s.staging / "work" / std::to_string(task.index);
  fs::create_directories(work / "src");
  std::ofstream(work / "src" / lab.file, std::ios::binary) << *source;
  readable(work);
  if (::geteuid() == 0) {
    const uid_t user = grader::sandbox::box_user(slot);
    for (const auto& p : {work, work / "src", work / "src" / lab.file}) [[maybe_unused]]
      int r = ::chown(p.c_str(), user, user);
  }
  const fs::path inputs = s.staging / "inputs" / lab.number;
  const Places at =
      s.isolation == Isolation::bubblewrap ? Places{"/kit", "/box", "/inputs"} : Places{kit_dir, work, inputs};
  Job build;
  build.argv = {"/bin/sh", "-c", build_line(kit, lab, at)};
  build.binds = {{kit_dir, "/kit", false}, {work, "/box", true}};
  build.cwd = at.box;
  build.isolation = s.isolation;
  build.slot = slot;
  const Outcome built = grader::sandbox::run(build, s.build);
  keep_log(logs, "build.log", built.output);
  if (!built.ok()) {
    if (built.could_not_start)
      return one_row("not graded", "the sandbox could not start: " + built.output.substr(0, 200));
    if (built.timed_out)
      return one_row("build failed", fmt::format("the build took longer than {} s", s.build.wall_seconds));
    if (built.signal)
      return one_row("build failed",
                     fmt::format("the compiler was ended by signal {} ({})", built.signal, strsignal(built.signal)));
    return one_row("build failed", build_failure(built.output, *source));
  }

  // 2) the run: the program reads the inputs and answers on descriptor 3, nothing writable
  //    but its private /tmp
  Job run;
  run.argv = {(at.box / fmt::format("lab{}-answers", lab.number)).string(), at.inputs.string()};
  run.binds = {{work, "/box", false}, {inputs, "/inputs", false}};
  run.cwd = s.isolation == Isolation::bubblewrap ? fs::path("/tmp") : work;
  run.answers_channel = true;
  run.isolation = s.isolation;
  run.slot = slot;
  const Outcome ran = grader::sandbox::run(run, s.run);
  keep_log(logs, "run.log", ran.output);
  std::error_code ec;
  fs::remove_all(work, ec);
  if (ran.timed_out)
    return one_row("timed out", fmt::format("no answer within {} s{}", s.run.wall_seconds, cut_note(ran, s.run)));
  if (ran.signal) return one_row("crashed", fmt::format("ended by signal {}{}", ran.signal, cut_note(ran, s.run)));
  if (ran.answers_too_large)
    return one_row("not graded", fmt::format("its answers were larger than {} bytes", s.run.answers));
  if (ran.could_not_start) return one_row("not graded", "the sandbox could not start: " + ran.output.substr(0, 200));

  // 3) the grading, here: the answers are tensors, compared with PyTorch's
  const grader::Answers answers = grader::parse_answers(ran.answers);
  std::string report;
  grader::Options options;
  options.golden = s.golden;
  options.report = &report;
  const auto results = grader::grade_lab(graded, cases, options, answers);
  keep_log(logs, "report.txt", report);
  std::vector<Row> rows;
  for (const auto& r : results) {
    std::vector<std::string> ids;
    for (const auto& set : r.named)
      for (const auto& i : set) ids.emplace_back(grader::entry(i.mistake).name);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    std::string diagnosis =
        ids.empty() ? (r.ok() || r.not_implemented ? "" : r.departure) : fmt::format("{}", fmt::join(ids, ","));
    if (ran.exit_status != 0 && !r.ok())
      diagnosis += fmt::format("{}its program exited with status {}", diagnosis.empty() ? "" : "; ", ran.exit_status);
    diagnosis += cut_note(ran, s.run, diagnosis);
    const double max = s.points.part(graded, r.part);
    const double points = r.total > 0 && !r.not_implemented ? max * r.passed / r.total : 0;
    rows.push_back({task.student, lab.number, r.part, r.passed, r.total,
                    r.not_implemented ? "not_implemented"
                    : r.ok()          ? "pass"
                                      : "fail",
                    diagnosis, points, max});
  }
  return rows;
}

// .npy answers: no code of the student's runs; each case's files are read with limits.
std::vector<Row> grade_npy_answers(const Task& task, const Settings& s) {
  std::vector<Row> rows;
  std::vector<fs::path> answers;
  for (const auto& e : fs::directory_iterator(task.source))
    if (fs::is_directory(e.symlink_status())) answers.push_back(e.path());
  std::sort(answers.begin(), answers.end());
  for (const auto& answer : answers) {
    const std::string name = answer.filename().string();
    const fs::path case_dir = s.golden / name;
    if (safe_name(name) != name || !fs::exists(case_dir / "case.json")) {
      rows.push_back(
          {task.student, "npy " + safe_name(name), "forward", 0, 1, "error", "no golden case of that name", 0, 0});
      continue;
    }
    const grader::Diagnosis d = grader::diagnose(case_dir, answer);
    std::vector<std::string> ids;
    for (auto m : d.named) ids.emplace_back(grader::entry(m).name);
    rows.push_back({task.student, "npy " + name, "forward", d.verdict == "pass" ? 1 : 0, 1, d.verdict,
                    !d.error.empty() ? d.error : fmt::format("{}", fmt::join(ids, ",")), 0, 0});
  }
  return rows;
}

// The gradebook's three files: a row per part (gradebook.md, gradebook.csv), and a row per
// student (lms.csv: each lab's points, the .npy cases right, the total).
void write_gradebook(const std::vector<Row>& rows, const std::vector<std::string>& students, const fs::path& out) {
  fs::create_directories(out);
  std::ofstream csv(out / "gradebook.csv"), md(out / "gradebook.md"), lms(out / "lms.csv");
  csv << "student,lab,part,passed,total,verdict,diagnosis,points,max_points\n";
  md << "| student | lab | part | passed | verdict | diagnosis | points |\n| --- | --- | --- | ---: | --- | --- | ---: "
        "|\n";
  for (const auto& r : rows) {
    csv << fmt::format("{},{},{},{},{},{},{},{:.2f},{:.2f}\n", csv_field(r.student), csv_field(r.lab),
                       csv_field(r.part), r.passed, r.total, csv_field(r.verdict), csv_field(r.diagnosis), r.points,
                       r.max_points);
    md << fmt::format("| {} | {} | {} | {}/{} | {} | {} | {:.2f} / {:.2f} |\n", md_field(r.student), r.lab,
                      md_field(r.part), r.passed, r.total, r.verdict, md_field(r.diagnosis), r.points, r.max_points);
  }
  lms << "student";
  for (const auto& lab : grader::labs()) lms << ",lab" << lab.number;
  lms << ",npy_cases_right,total\n";
  for (const auto& student : students) {
    lms << csv_field(student);
    double total = 0;
    int npy = 0;
    for (const auto& lab : grader::labs()) {
      double points = 0;
      for (const auto& r : rows)
        if (r.student == student && r.lab == lab.number) points += r.points;
      lms << fmt::format(",{:.2f}", points);
      total += points;
    }
    for (const auto& r : rows)
      if (r.student == student && r.lab.starts_with("npy ")) npy += r.passed;
    lms << fmt::format(",{},{:.2f}\n", npy, total);
  }
}

int gradebook(const fs::path& submissions, const fs::path& build, Settings s, int jobs) {
  if (!fs::is_directory(submissions))
    throw mha::Error(fmt::format("submissions: {} is not a folder", submissions.string()));
  if (s.isolation == Isolation::bubblewrap) {
    const std::string missing = grader::sandbox::unavailable();
    if (!missing.empty())
      throw mha::Error(
          fmt::format("the sandbox cannot start: {}. Grading without it runs every student's code with "
                      "your rights: only with --no-sandbox, and only for code you trust",
                      missing));
  } else {
    fmt::print("mha-grade: --no-sandbox: each submission runs with your rights, within the limits only\n");
  }
  const Kit kit = read_kit(build);
  const auto cases = grader::read_cases(s.golden);
  const Staging staging(fs::temp_directory_path());
  s.staging = staging.root;
  stage_kit(kit, staging.root / "kit");

  // The tasks: each student's lab files, and their .npy answers.
  std::vector<std::string> students;
  std::vector<Task> tasks;
  std::vector<std::vector<Row>> early;  // rows known without running anything
  for (const auto& e : fs::directory_iterator(submissions))
    if (fs::is_directory(e.symlink_status())) students.push_back(e.path().filename().string());
  std::sort(students.begin(), students.end());
  std::set<std::string> labs_needed;
  for (const auto& student : students) {
    const fs::path dir = submissions / student;
    bool handed_in = false;
    for (const auto& lab : grader::labs()) {
      fs::path file = dir / lab.file;
      if (!fs::exists(fs::symlink_status(file))) file = dir / lab.name / lab.file;
      if (!fs::exists(fs::symlink_status(file))) continue;
      handed_in = true;
      tasks.push_back({student, file, &lab, static_cast<int>(tasks.size())});
      labs_needed.insert(lab.number);
    }
    if (fs::is_directory(fs::symlink_status(dir / "npy"))) {
      handed_in = true;
      tasks.push_back({student, dir / "npy", nullptr, static_cast<int>(tasks.size())});
    }
    if (!handed_in) tasks.push_back({student, {}, nullptr, -1 - static_cast<int>(tasks.size())});
  }
  // Each lab's inputs, once: every case the lab takes, written for its answers program.
  for (const auto& number : labs_needed) {
    grader::Options options;
    options.golden = s.golden;
    grader::write_inputs(grader::lab(number), cases, options, staging.root / "inputs" / number);
    readable(staging.root / "inputs" / number);
  }
  fs::create_directories(staging.root / "work");
  fs::permissions(staging.root / "work", fs::perms(0711));

  // The tasks, `jobs` at a time: each worker has a slot, the user its jobs run as (root).
  std::vector<std::vector<Row>> results(tasks.size());
  std::atomic<std::size_t> next = 0;
  std::mutex print;
  auto worker = [&](int slot) {
    for (std::size_t i = next++; i < tasks.size(); i = next++) {
      const Task& t = tasks[i];
      std::vector<Row> rows;
      try {
        if (t.index < 0) rows = {{t.student, "-", "-", 0, 0, "nothing handed in", "", 0, 0}};
        else if (t.lab) rows = grade_lab_file(t, s, kit, staging.root / "kit", cases, slot);
        else rows = grade_npy_answers(t, s);
      } catch (const std::exception& e) {
        rows = {{t.student, t.lab ? t.lab->number : "npy", "-", 0, 0, "not graded", e.what(), 0, 0}};
      }
      {
        const std::lock_guard<std::mutex> lock(print);
        for (const auto& r : rows)
          fmt::print("{}: lab {} {}: {} {}/{}\n", t.student, r.lab, r.part, r.verdict, r.passed, r.total);
        std::fflush(stdout);
      }
      results[i] = std::move(rows);
    }
  };
  std::vector<std::thread> workers;
  for (int slot = 0; slot < std::max(1, jobs); ++slot) workers.emplace_back(worker, slot);
  for (auto& w : workers) w.join();
  grader::sandbox::kill_descendants();

  std::vector<Row> rows;
  for (auto& r : results) rows.insert(rows.end(), r.begin(), r.end());
  write_gradebook(rows, students, s.out);
  fmt::print("{}", read_text(s.out / "gradebook.md"));
  fmt::print("wrote {}, {} and {}\n", (s.out / "gradebook.md").string(), (s.out / "gradebook.csv").string(),
             (s.out / "lms.csv").string());
  return 0;
}

// The catalogue's table in a page, between <!-- catalogue --> and <!-- end catalogue -->.
int catalogue(const std::string& check_page, const std::string& write_page) {
  const std::string table = grader::catalogue_markdown();
  const std::string page = check_page.empty() ? write_page : check_page;
  if (page.empty()) {
    fmt::print("{}", table);
    return 0;
  }
  std::string text = read_text(page);
  const std::string open = "<!-- catalogue -->\n", close = "<!-- end catalogue -->";
  const auto begin = text.find(open), end = text.find(close);
  if (begin == std::string::npos || end == std::string::npos || end < begin)
    throw mha::Error(fmt::format("{}: no <!-- catalogue --> ... <!-- end catalogue --> block", page));
  const std::string block = text.substr(begin + open.size(), end - begin - open.size());
  if (!check_page.empty()) {
    if (block == table) {
      fmt::print("{}: the catalogue's table is the grader's: OK\n", page);
      return 0;
    }
    fmt::print("{}: the catalogue's table differs from the grader's (mha-grade catalogue --write {}); expected:\n{}",
               page, page, table);
    return 1;
  }
  text.replace(begin + open.size(), block.size(), table);
  std::ofstream(page) << text;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cli::Arguments arguments{"mha-grade: the labs' grader (labs/, docs/labs.md)"};
  arguments.require_subcommand();
  std::string case_dir, answer_dir;
  bool json = false;
  cli::Command diagnose =
      arguments.subcommand("diagnose", "grade .npy answers of one golden case, and name the mistakes");
  diagnose.option("CASE", case_dir, "the golden case's folder").required();
  diagnose.option("ANSWER_DIR", answer_dir, "the folder of attn_output.npy (and attn_output_weights.npy)").required();
  diagnose.flag("--json", json, "print the verdict as one JSON object (case, verdict, error, named, departure)");

  std::string submissions, out = "gradebook", points_file;
  std::string build = MHA_BINARY_DIR, source = MHA_SOURCE_DIR, golden;
  Settings s;
  s.build.wall_seconds = 300, s.build.cpu_seconds = 300;
  s.run.wall_seconds = 60, s.run.cpu_seconds = 60;
  int memory_mib = 2048, output_kib = 2048;
  int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool no_sandbox = false;
  cli::Command book = arguments.subcommand("gradebook", "grade a folder of submissions, one subfolder per student");
  book.option("SUBMISSIONS", submissions, "the folder of submissions").required();
  book.option("--out", out, "where gradebook.md, gradebook.csv and lms.csv go").show_default();
  book.option("--build-dir", build, "the configured build folder with the labs").show_default();
  book.option("--golden", golden, "the golden cases (default: the source tree's golden/cases)");
  book.option("-j,--jobs", jobs, "submissions graded at once, each in its own sandbox").show_default();
  book.option("--points", points_file, "points per part: `NN part points` lines (labs/points.txt)");
  book.option("--build-timeout", s.build.wall_seconds, "seconds on the clock for each build").show_default();
  book.option("--run-timeout", s.run.wall_seconds, "seconds on the clock for each run").show_default();
  book.option("--cpu-time", s.run.cpu_seconds, "CPU seconds of each process of a run").show_default();
  book.option("--memory", memory_mib, "MiB of memory for each run (a build gets at least 2048)").show_default();
  book.option("--processes", s.run.processes, "processes and threads of each run").show_default();
  book.option("--output", output_kib, "KiB kept of what each build or run prints").show_default();
  book.flag("--no-sandbox", no_sandbox,
            "grade without the sandbox (limits only): each submission runs with your rights");

  cli::Command cat = arguments.subcommand("catalogue", "print the catalogue of mistakes as docs/labs.md's table");
  std::string check_page, write_page;
  cat.option("--check", check_page, "fail when the page's <!-- catalogue --> block is not the table");
  cat.option("--write", write_page, "write the table into the page's <!-- catalogue --> block");
  if (const auto stop = arguments.parse(argc, argv)) return *stop;  // --help, or a bad option
  try {
    if (diagnose.chosen()) return grader::diagnose_npy(case_dir, answer_dir, json);
    if (cat.chosen()) return catalogue(check_page, write_page);
    s.out = fs::absolute(out);
    s.golden = fs::absolute(golden.empty() ? fs::path(source) / "golden" / "cases" : fs::path(golden));
    // A run gets what --memory says; a build at least 2 GiB, what the compiler needs.
    s.run.memory = static_cast<std::uint64_t>(std::max(64, memory_mib)) << 20;
    s.build.memory = std::max(s.run.memory, std::uint64_t{2} << 30);
    s.build.output = s.run.output = static_cast<std::uint64_t>(std::max(1, output_kib)) << 10;
    s.build.processes = std::max(s.build.processes, s.run.processes);
    s.isolation = no_sandbox ? Isolation::none : Isolation::bubblewrap;
    s.points = read_points(points_file);
    return gradebook(fs::absolute(submissions), fs::absolute(build), s, jobs);
  } catch (const std::exception& e) {
    fmt::print(stderr, "mha-grade: {}\n", e.what());
    return 2;
  }
}
