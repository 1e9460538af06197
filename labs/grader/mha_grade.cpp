// labs/grader/mha_grade.cpp — mha-grade: the labs' grader for teachers, and for answers from any language.
//
//   mha-grade diagnose CASE ANSWER_DIR   an answer written as .npy files (attn_output.npy,
//                                        attn_output_weights.npy) for one golden case: checked
//                                        against PyTorch's, its mistake named. Exit 0 right,
//                                        1 wrong, 2 when the files cannot be graded.
//   mha-grade gradebook SUBMISSIONS      one subfolder per student, each with its lab files
//                                        (split_pack.cpp, ...) and/or npy/<case>/*.npy: each
//                                        built and run on its own with a time limit; writes
//                                        gradebook.md and gradebook.csv.
//   mha-grade catalogue                  the catalogue of mistakes, docs/labs.md's table.
//
// A student's lab file is compiled with the very command that builds the lab's starter in
// the build folder (ninja -t commands), its source and object swapped, and linked with the
// lab's grading program: no configure, and nothing else is compiled again.
#include "third_party.hpp"

#include <CLI/CLI.hpp>
#include <sys/wait.h>

#include <fstream>
#include <iostream>
#include <sstream>

import mha;
import mha.io;
import mha.golden;

#include "grader.hpp"

namespace {

namespace fs = std::filesystem;

// The labs, as labs/CMakeLists.txt lists them.
struct LabFile {
  std::string number, folder, file;
};
const std::vector<LabFile> lab_files{{"01", "01-split-pack", "split_pack.cpp"},
                                     {"02", "02-in-projection", "in_projection.cpp"},
                                     {"03", "03-heads-attention", "heads_attention.cpp"},
                                     {"04", "04-masks", "masks.cpp"},
                                     {"05", "05-forward", "forward.cpp"},
                                     {"06", "06-backward", "backward.cpp"}};

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs a shell command with its output into `log`, within `seconds`; the exit status, 124
// when it ran out of time, 128 + N when signal N ended it.
int run(const std::string& command, const fs::path& log, int seconds) {
  const std::string line =
      fmt::format("timeout --kill-after=5 {} sh -c {} >{} 2>&1", seconds, quoted(command), quoted(log.string()));
  const int status = std::system(line.c_str());
  if (status == -1) return 127;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

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

// The commands that compile a lab's starter and link its program, from the build folder.
struct LabCommands {
  std::vector<std::string> compile, link;
  std::string object, executable;
};

LabCommands lab_commands(const fs::path& build, const fs::path& source_dir, const LabFile& lab) {
  const std::string target = "lab" + lab.number;
  const fs::path log = build / "labs" / (target + ".commands");
  if (run(fmt::format("cmake --build {} --target {} && ninja -C {} -t commands {}", quoted(build.string()), target,
                      quoted(build.string()), target),
          log, 900) != 0)
    throw mha::Error(fmt::format("build: cannot build {} in {}: {}", target, build.string(), read_text(log)));
  const std::string starter = (source_dir / "labs" / lab.folder / lab.file).string();
  LabCommands c;
  for (const auto& line : lines_of(read_text(log))) {
    auto w = words(line);
    if (std::find(w.begin(), w.end(), starter) != w.end() && std::find(w.begin(), w.end(), "-c") != w.end()) {
      c.compile = w;
      for (std::size_t i = 0; i + 1 < w.size(); ++i)
        if (w[i] == "-o") c.object = w[i + 1];
    }
    if (!c.object.empty() && std::find(w.begin(), w.end(), c.object) != w.end() &&
        std::find(w.begin(), w.end(), "-c") == w.end())
      c.link = w;
  }
  if (c.compile.empty() || c.link.empty())
    throw mha::Error(fmt::format("build: no compile or link command of {} in {}", target, log.string()));
  for (std::size_t i = 0; i + 1 < c.link.size(); ++i)
    if (c.link[i] == "-o") c.executable = c.link[i + 1];
  return c;
}

// The lab's commands with the student's file and a work folder in place of the starter's.
std::string swapped(const std::vector<std::string>& words, const std::map<std::string, std::string>& swap) {
  std::string command;
  for (const auto& w : words) command += (swap.contains(w) ? quoted(swap.at(w)) : w) + " ";
  return command;
}

struct Row {
  std::string student, lab, part, passed, total, verdict, diagnosis;
};

// The result lines of a lab's run: "result <lab> <part...> <passed> <total> <status> <ids>".
void read_results(const std::string& student, const std::string& lab, const std::string& output,
                  std::vector<Row>& rows) {
  bool any = false;
  std::string departure;
  for (const auto& line : lines_of(output))
    if (line.find("first departs from PyTorch at") != std::string::npos) departure = line;
  for (const auto& line : lines_of(output)) {
    if (!line.starts_with("result ")) continue;
    auto w = words(line);
    if (w.size() < 7) continue;
    const std::size_t n = w.size();
    std::string part;
    for (std::size_t i = 2; i + 4 < n; ++i) part += (part.empty() ? "" : " ") + w[i];
    std::string diagnosis = w[n - 1] == "-" ? "" : w[n - 1];
    if (w[n - 2] == "fail" && diagnosis.empty()) diagnosis = departure.empty() ? "no catalogued mistake" : departure;
    rows.push_back({student, lab, part, w[n - 4], w[n - 3], w[n - 2], diagnosis});
    any = true;
  }
  if (!any) rows.push_back({student, lab, "-", "0", "0", "no result", "the program printed no result"});
}

// The line of a build's log that says why: the compiler's first error, or the linker's
// first missing function (a signature changed from the starter's).
std::string first_error(const std::string& log) {
  for (const char* what : {"error:", "undefined reference"})
    for (const auto& line : lines_of(log))
      if (line.find(what) != std::string::npos && line.find("linker command failed") == std::string::npos)
        return line.substr(0, 200);
  return "see the log";
}

// The time limits of one submission: its build, and its run.
struct Limits {
  int build = 300, run = 60;
};

void grade_lab_file(const std::string& student, const fs::path& file, const LabFile& lab, const LabCommands& c,
                    const fs::path& build, const fs::path& source_dir, const fs::path& golden, const fs::path& work,
                    Limits limits, std::vector<Row>& rows) {
  fs::create_directories(work);
  const std::string starter = (source_dir / "labs" / lab.folder / lab.file).string();
  const std::string object = (work / "student.o").string(), program = (work / ("lab" + lab.number)).string();
  const std::string compile = swapped(
      c.compile, {{starter, fs::absolute(file).string()}, {c.object, object}, {c.object + ".d", object + ".d"}});
  const std::string link = swapped(c.link, {{c.object, object}, {c.executable, program}});
  const int built =
      run(fmt::format("cd {} && {} && {}", quoted(build.string()), compile, link), work / "build.log", limits.build);
  if (built != 0) {
    const std::string why = built == 124 ? fmt::format("the build took longer than {} s", limits.build)
                                         : "does not compile: " + first_error(read_text(work / "build.log"));
    rows.push_back({student, lab.number, "-", "0", "0", "build failed", why});
    return;
  }
  const int ran =
      run(fmt::format("cd {} && {} --golden {}", quoted(source_dir.string()), quoted(program), quoted(golden.string())),
          work / "run.log", limits.run);
  if (ran == 124 || ran >= 128) {
    rows.push_back(
        {student, lab.number, "-", "0", "0", ran == 124 ? "timed out" : "crashed",
         ran == 124 ? fmt::format("no answer within {} s", limits.run) : fmt::format("ended by signal {}", ran - 128)});
    return;
  }
  read_results(student, lab.number, read_text(work / "run.log"), rows);
}

void grade_npy_answers(const std::string& student, const fs::path& npy, const fs::path& golden, const fs::path& work,
                       int seconds, const std::string& self, std::vector<Row>& rows) {
  std::vector<fs::path> answers;
  for (const auto& e : fs::directory_iterator(npy))
    if (e.is_directory()) answers.push_back(e.path());
  std::sort(answers.begin(), answers.end());
  for (const auto& answer : answers) {
    const std::string name = answer.filename().string();
    fs::create_directories(work);
    const fs::path log = work / (name + ".log");
    const int status =
        run(fmt::format("{} diagnose {} {}", quoted(self), quoted((golden / name).string()), quoted(answer.string())),
            log, seconds);
    const std::string out = read_text(log);
    std::string named, error;
    for (const auto& line : lines_of(out)) {
      if (line.starts_with("named: ")) named = line.substr(7);
      if (line.starts_with("error: ")) error = line.substr(7);
    }
    const std::string verdict = status == 0 ? "pass" : status == 1 ? "fail" : status == 124 ? "timed out" : "error";
    rows.push_back({student, "npy " + name, "forward", status == 0 ? "1" : "0", "1", verdict,
                    !error.empty() ? error
                    : named == "-" ? ""
                                   : named});
  }
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string md_field(std::string s) {
  std::string out;
  for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
  return out;
}

int gradebook(const fs::path& submissions, const fs::path& build, const fs::path& source_dir, const fs::path& golden,
              const fs::path& out, Limits limits, const std::string& self) {
  if (!fs::is_directory(submissions))
    throw mha::Error(fmt::format("submissions: {} is not a folder", submissions.string()));
  std::vector<fs::path> students;
  for (const auto& e : fs::directory_iterator(submissions))
    if (e.is_directory()) students.push_back(e.path());
  std::sort(students.begin(), students.end());
  std::map<std::string, LabCommands> commands;
  std::vector<Row> rows;
  for (const auto& dir : students) {
    const std::string student = dir.filename().string();
    bool handed_in = false;
    for (const auto& lab : lab_files) {
      fs::path file = dir / lab.file;
      if (!fs::exists(file)) file = dir / lab.folder / lab.file;
      if (!fs::exists(file)) continue;
      handed_in = true;
      if (!commands.contains(lab.number)) commands[lab.number] = lab_commands(build, source_dir, lab);
      fmt::print("{}: lab {} ...\n", student, lab.number);
      std::fflush(stdout);
      grade_lab_file(student, file, lab, commands[lab.number], build, source_dir, golden,
                     out / "work" / student / lab.number, limits, rows);
    }
    if (fs::is_directory(dir / "npy")) {
      handed_in = true;
      grade_npy_answers(student, dir / "npy", golden, out / "work" / student / "npy", limits.run, self, rows);
    }
    if (!handed_in) rows.push_back({student, "-", "-", "0", "0", "nothing handed in", ""});
  }
  fs::create_directories(out);
  std::ofstream csv(out / "gradebook.csv"), md(out / "gradebook.md");
  csv << "student,lab,part,passed,total,verdict,diagnosis\n";
  md << "| student | lab | part | passed | verdict | diagnosis |\n| --- | --- | --- | ---: | --- | --- |\n";
  for (const auto& r : rows) {
    csv << fmt::format("{},{},{},{},{},{},{}\n", csv_field(r.student), csv_field(r.lab), csv_field(r.part), r.passed,
                       r.total, csv_field(r.verdict), csv_field(r.diagnosis));
    md << fmt::format("| {} | {} | {} | {}/{} | {} | {} |\n", md_field(r.student), r.lab, md_field(r.part), r.passed,
                      r.total, r.verdict, md_field(r.diagnosis));
  }
  csv.close(), md.close();
  fmt::print("{}", read_text(out / "gradebook.md"));
  fmt::print("wrote {} and {}\n", (out / "gradebook.md").string(), (out / "gradebook.csv").string());
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
  CLI::App app{"mha-grade: the labs' grader (labs/, docs/labs.md)"};
  app.require_subcommand(1);
  std::string case_dir, answer_dir;
  auto* diagnose = app.add_subcommand("diagnose", "grade .npy answers of one golden case, and name the mistake");
  diagnose->add_option("CASE", case_dir, "the golden case's folder")->required();
  diagnose->add_option("ANSWER_DIR", answer_dir, "the folder of attn_output.npy (and attn_output_weights.npy)")
      ->required();
  std::string submissions, out = "gradebook";
  std::string build = MHA_BINARY_DIR, source = MHA_SOURCE_DIR, golden;
  Limits limits;
  auto* book = app.add_subcommand("gradebook", "grade a folder of submissions, one subfolder per student");
  book->add_option("SUBMISSIONS", submissions, "the folder of submissions")->required();
  book->add_option("--out", out, "where gradebook.md and gradebook.csv go")->capture_default_str();
  book->add_option("--build-dir", build, "the configured build folder with the labs")->capture_default_str();
  book->add_option("--build-timeout", limits.build, "seconds for each submission's build")->capture_default_str();
  book->add_option("--run-timeout", limits.run, "seconds for each submission's grading run")->capture_default_str();
  book->add_option("--golden", golden, "the golden cases (default: the source tree's golden/cases)");
  auto* cat = app.add_subcommand("catalogue", "print the catalogue of mistakes as docs/labs.md's table");
  std::string check_page, write_page;
  cat->add_option("--check", check_page, "fail when the page's <!-- catalogue --> block is not the table");
  cat->add_option("--write", write_page, "write the table into the page's <!-- catalogue --> block");
  CLI11_PARSE(app, argc, argv);
  try {
    if (*diagnose) return grader::diagnose_npy(case_dir, answer_dir);
    if (*cat) return catalogue(check_page, write_page);
    if (golden.empty()) golden = (fs::path(source) / "golden" / "cases").string();
    return gradebook(submissions, fs::absolute(build), fs::absolute(source), fs::absolute(golden), fs::absolute(out),
                     limits, fs::absolute(fs::path(argv[0])).string());
  } catch (const std::exception& e) {
    fmt::print(stderr, "mha-grade: {}\n", e.what());
    return 2;
  }
}
