// labs/grader/grader.hpp — the grading harness of the labs: the catalogue of mistakes, and how a lab is graded.
//
// A lab is graded in parts, one per function a student writes (or per group of functions
// that only make sense together). A part takes the golden cases that exercise it, in both
// dtypes. The student's functions never run in the grader's process: the part writes what
// they are given for each case (`inputs`), the lab's answers program (labs/runner/) calls
// them and hands back what they returned as tensors (Answers), and the part compares those
// with PyTorch's tensors. When an answer is wrong, the grader does not stop at the error: it recomputes
// the step under each mistake of the catalogue that the part can show (mistakes.hpp), and
// under each pair of them, and names those that the answer matches on every case. An answer
// that no catalogued mistake explains is told where it first departs from PyTorch: the case,
// the tensor, its index and the values, the tensors being in the forward's order
// (q, k, v, the weights, the output), so that the first one named is the first step wrong.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads,
// D = head_dim, B = N*H.
//
// Include it after "third_party.hpp", `import mha;`, `import mha.io;` and `import mha.golden;`.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace grader {

// The catalogue's mistakes. Their names (catalogue()) are the stable ids that the grader
// prints, the gradebook lists and docs/labs.md documents.
enum class Mistake {
  qk_swapped,
  kv_swapped,
  qv_swapped,
  order_kvq,
  order_vqk,
  bias_not_split,
  weight_not_transposed,
  bias_missing,
  no_scaling,
  scaled_by_d_not_sqrt,
  scaled_by_e_not_d,
  heads_split_wrong,
  heads_numbered_head_major,
  merge_without_transpose,
  softmax_wrong_axis,
  mask_inverted,
  mask_ignored,
  key_padding_mask_wrong_rows,
  mask_after_softmax,
  weights_not_averaged,
  out_proj_missing,
  grad_transposed,
  softmax_jacobian_diagonal_missing,
  grad_scale_missing,
  bias_grad_not_summed,
  cache_appended_after_attention,
  cache_holds_inputs,
  new_token_attended_twice,
  cache_rescaled_each_step,
  causal_mask_top_left,
};

// One entry of the catalogue. A mistake may be made in more than one way (`variants`): the
// 1/sqrt(D) missing from dq, from dk, or from both is one mistake, grad_scale_missing.
struct Entry {
  Mistake id;
  std::string_view name;         // the stable snake_case id
  std::string_view step;         // the step of the forward or backward it is made in
  std::string_view explanation;  // one line, for the student
  std::string_view page;         // the page to read again, docs/...
  std::string_view labs;         // the labs that can show it
  int variants = 1;
  std::vector<std::string_view> ways = {};  // each variant in words, where the line does not say it
};

const std::vector<Entry>& catalogue();
const Entry& entry(Mistake m);
std::optional<Mistake> mistake_named(std::string_view name);
// The catalogue as the Markdown table of docs/labs.md.
std::string catalogue_markdown();

// The step each function of the labs computes, and the page about it: where an answer
// departs from PyTorch and no catalogued mistake explains it, the grader names the function
// and this page.
struct Step {
  std::string_view function;  // the student's function, a graded part's name
  std::string_view step;      // what it computes, in the forward's words
  std::string_view page;      // the page about that step, docs/...
};
const std::vector<Step>& steps();
// The step of a part's function; none for a part the table does not list.
const Step* step_of(std::string_view function);

// A mistake, made in one of its ways.
struct Injection {
  Mistake mistake;
  int variant = 0;
};
using Injections = std::vector<Injection>;
// The variant of `m` among the injections, or none.
std::optional<int> made(const Injections& injections, Mistake m);
// "qk_swapped", "no_scaling + mask_ignored"
std::string names(const Injections& injections);

// A named tensor of an answer, with a tolerance of its own where the case's does not apply
// (finite differences); negative: the case's.
template <class T>
struct Named {
  std::string name;
  xt::xarray<T> tensor;
  double rtol = -1, atol = -1;
};
template <class T>
using Tensors = std::vector<Named<T>>;

// What a lab's answers program (labs/runner/) said of one case: its tensors, as .npy bytes
// by name ("split_packed.W_q"), and the status of each function that did not answer
// ("not_implemented", "error", or "none" for a function that answered no tensor).
struct Status {
  std::string kind, message;
};
struct CaseAnswers {
  std::map<std::string, std::string> tensors;
  std::map<std::string, Status> statuses;
};
// Every case's answers, read from the program's stream. `problem` says what was wrong with
// the stream itself (cut short, malformed): the cases before it are still answered.
struct Answers {
  std::map<std::string, CaseAnswers> cases;
  std::string problem;
};
// Parses the stream runner.hpp writes; never throws, and keeps nothing it cannot parse.
Answers parse_answers(std::string_view stream);

// What the student's function threw: lab::NotImplemented, in the answers program.
struct NotImplementedYet : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One case's answers to one part (its function's status, its tensors by full name), of dtype T.
template <class T>
class Given {
public:
  Given(const CaseAnswers* answers, std::string case_name, std::string function)
      : a_(answers), case_(std::move(case_name)), function_(std::move(function)) {}
  // The tensor; throws NotImplementedYet, or an error saying why there is none.
  xt::xarray<T> tensor(const std::string& name) const;
  // The tensor, or none when the function answered without it.
  std::optional<xt::xarray<T>> maybe(const std::string& name) const;
  // Did the function answer "none" (a mask function that returned no mask)?
  bool none() const;
  // The names of the tensors answered that start with `prefix`.
  std::vector<std::string> names(const std::string& prefix) const;

private:
  void check() const;
  const CaseAnswers* a_;
  std::string case_, function_;
};

// The inputs of one case, written for the answers program: call.txt and .npy files.
class InputWriter {
public:
  explicit InputWriter(std::filesystem::path dir);
  template <class T>
  void tensor(const std::string& name, const xt::xarray<T>& t);
  template <class T>
  void mask(const std::string& name, const mha::Mask<T>& m);
  void scalar(const std::string& key, const std::string& value);
  void flag(const std::string& key, bool value) { scalar(key, value ? "1" : "0"); }
  ~InputWriter();  // writes call.txt

private:
  std::filesystem::path dir_;
  std::map<std::string, std::string> scalars_;
};

// What a part does with a case of dtype T.
template <class T>
struct PartFunctions {
  std::function<void(const mha::Case<T>&, InputWriter&)> inputs;               // what the student's code is given
  std::function<Tensors<T>(const mha::Case<T>&, const Given<T>&)> answer;      // what it answered (may throw)
  std::function<Tensors<T>(const mha::Case<T>&)> pytorch;                      // PyTorch's own, where it has them
  std::function<Tensors<T>(const mha::Case<T>&, const Injections&)> expected;  // the grader's, under mistakes
};

// One graded part of a lab.
struct Part {
  std::string name;               // the student's function(s): "split_packed"
  std::vector<Mistake> mistakes;  // what this part can show
  std::function<bool(const mha::CaseInfo&)> takes;
  PartFunctions<float> f32;
  PartFunctions<double> f64;
};

// A lab: its number, its folder's name, its parts.
struct Lab {
  std::string number, name;  // "01", "01-split-pack": the lab's folder in labs/
  std::string file;          // the file a student edits there, "split_pack.cpp"
  std::vector<Part> parts;
};
// The labs, in the course's order; lab("05") one of them (mha::Error for another number).
const std::vector<Lab>& labs();
const Lab& lab(std::string_view number);

// The outcome of grading one part.
struct PartResult {
  std::string part;
  int passed = 0, total = 0;
  bool not_implemented = false;
  std::vector<Injections> named;  // each alone explains every answer; usually one
  std::string departure;          // where the answer first departs from PyTorch, when nothing is named
  bool ok() const { return !not_implemented && total > 0 && passed == total; }
};

struct Options {
  std::filesystem::path golden = "golden/cases";
  std::vector<std::string> only_cases;  // empty: every case the part takes
  bool verbose = false;
  bool quiet = false;             // print nothing (the caller reports)
  std::string* report = nullptr;  // where the report goes instead of stdout, when given
};

// Writes the inputs of every case of `cases` that a part of `lab` takes, one folder each.
void write_inputs(const Lab& lab, const std::vector<mha::CaseInfo>& cases, const Options& options,
                  const std::filesystem::path& dir);

// Grades a part on the cases it takes, from the answers of the lab's program, printing what
// it finds to stdout.
PartResult grade_part(const Part& part, const std::vector<mha::CaseInfo>& cases, const Options& options,
                      const Answers& answers);
// The case folders under `golden`, read.
std::vector<mha::CaseInfo> read_cases(const std::filesystem::path& golden);
// The line a lab's report ends a part with: "result <lab> <part> <passed> <total> <status> <ids>".
std::string result_line(std::string_view lab, const PartResult& r);
// Every part of a lab graded from the answers, printed as the student reads it, ending in
// the result lines and "named: ...".
std::vector<PartResult> grade_lab(const Lab& lab, const std::vector<mha::CaseInfo>& cases, const Options& options,
                                  const Answers& answers);
// The grader's own recomputation without a mistake against PyTorch's tensors, on every
// case of the lab (no student code runs); the number of cases where they differ.
int self_check(const Lab& lab, const std::vector<mha::CaseInfo>& cases);
// labNN, the student's quick loop: parses argv (--golden DIR, --case NAME, --verbose,
// --self-check, --answers-program PATH, --timeout SECONDS), writes the inputs into a
// temporary folder, runs the answers program (labNN-answers beside this program) without
// the sandbox, and grades what it answered. Returns 0 when every part passes, 1 otherwise,
// 2 when it could not grade.
int run_lab(std::string_view number, int argc, char** argv);

// The forward's catalogue, as `mha-grade diagnose` uses it: the whole forward (lab 05's part)
// with the answer read from .npy files of ANSWER_DIR. Prints the verdict (as one JSON object
// with `json`); returns 0 for a right answer, 1 for a wrong one, 2 when the files cannot be
// graded (missing, corrupt, another shape or dtype, larger than the answer can be).
int diagnose_npy(const std::filesystem::path& case_dir, const std::filesystem::path& answer_dir, bool json = false);
// The same, as data: "pass", "fail" or "error", the error, the mistakes named, the departure.
struct Diagnosis {
  std::string case_name, verdict, error, departure;
  std::vector<Mistake> named;
};
Diagnosis diagnose(const std::filesystem::path& case_dir, const std::filesystem::path& answer_dir);

}  // namespace grader
