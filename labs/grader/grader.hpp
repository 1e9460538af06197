// labs/grader/grader.hpp — the grading harness of the labs: the catalogue of mistakes, and how a lab is graded.
//
// A lab is graded in parts, one per function a student writes (or per group of functions
// that only make sense together). A part takes the golden cases that exercise it, in both
// dtypes; on each it runs the student's function and compares what comes out with PyTorch's
// tensors. When an answer is wrong, the grader does not stop at the error: it recomputes
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
#include <optional>
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
  weight_not_transposed,
  bias_missing,
  no_scaling,
  scaled_by_d_not_sqrt,
  scaled_by_e_not_d,
  heads_split_wrong,
  softmax_wrong_axis,
  mask_inverted,
  mask_ignored,
  key_padding_mask_wrong_rows,
  weights_not_averaged,
  out_proj_missing,
  grad_transposed,
  softmax_jacobian_diagonal_missing,
  grad_scale_missing,
  bias_grad_not_summed,
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
};

const std::vector<Entry>& catalogue();
const Entry& entry(Mistake m);
std::optional<Mistake> mistake_named(std::string_view name);
// The catalogue as the Markdown table of docs/labs.md.
std::string catalogue_markdown();

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

// What a part does with a case of dtype T.
template <class T>
struct PartFunctions {
  std::function<Tensors<T>(const mha::Case<T>&)> answer;                       // the student's (may throw)
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
};

// Grades a part on the cases of `golden` it takes, printing what it finds to stdout.
PartResult grade_part(const Part& part, const std::vector<mha::CaseInfo>& cases, const Options& options);
// The case folders under `golden`, read.
std::vector<mha::CaseInfo> read_cases(const std::filesystem::path& golden);
// The line a gradebook reads: "result <lab> <part> <passed> <total> <status> <ids>".
std::string result_line(std::string_view lab, const PartResult& r);
// A lab's grading program: parses argv (--golden DIR, --case NAME, --verbose), grades
// each part, and returns 0 when every part passes, 1 otherwise. With --self-check it runs
// no student code: it checks the grader's own recomputation against PyTorch's tensors.
int run_lab(std::string_view lab, const std::vector<Part>& parts, int argc, char** argv);

// Each lab's parts, made from the student's functions (lab_api.hpp), for float and double.
template <template <class> class F>
struct ForBoth {
  F<float> f32;
  F<double> f64;
};
template <class T>
using SplitFn =
    std::function<mha::SeparateProjections<T>(const xt::xtensor<T, 2>&, const std::optional<xt::xtensor<T, 1>>&)>;
template <class T>
using PackFn = std::function<mha::textbook::PackedProjection<T>(const mha::SeparateProjections<T>&)>;
template <class T>
using PackedProjectionFn =
    std::function<mha::textbook::QKV<T>(const xt::xtensor<T, 3>&, const xt::xtensor<T, 3>&, const xt::xtensor<T, 3>&,
                                        const xt::xtensor<T, 2>&, const std::optional<xt::xtensor<T, 1>>&)>;
template <class T>
using SeparateProjectionFn = std::function<mha::textbook::QKV<T>(
    const xt::xtensor<T, 3>&, const xt::xtensor<T, 3>&, const xt::xtensor<T, 3>&, const mha::SeparateProjections<T>&)>;
template <class T>
using HeadsFn = std::function<xt::xtensor<T, 3>(const xt::xtensor<T, 3>&, std::size_t)>;
template <class T>
using AttentionFn =
    std::function<mha::textbook::Attention<T>(const xt::xtensor<T, 3>&, const xt::xtensor<T, 3>&,
                                              const xt::xtensor<T, 3>&, const std::optional<xt::xtensor<T, 3>>&)>;
template <class T>
using MaskFn = std::function<std::optional<xt::xtensor<T, 3>>(const std::optional<mha::Mask<T>>&,
                                                              const std::optional<mha::Mask<T>>&, std::size_t,
                                                              std::size_t, std::size_t, std::size_t)>;
template <class T>
using ForwardFn =
    std::function<mha::Output<T>(const mha::Options&, const mha::StateDict<T>&, const xt::xarray<T>&,
                                 const xt::xarray<T>&, const xt::xarray<T>&, const mha::ForwardOptions<T>&)>;
template <class T>
using BackwardFn = std::function<mha::Gradients<T>(
    const mha::Options&, const mha::StateDict<T>&, const xt::xarray<T>&, const xt::xarray<T>&, const xt::xarray<T>&,
    const mha::ForwardOptions<T>&, const xt::xarray<T>&, const std::optional<xt::xarray<T>>&)>;

Part lab01_split(ForBoth<SplitFn> split);
Part lab01_pack(ForBoth<PackFn> pack);
Part lab02_packed(ForBoth<PackedProjectionFn> f);
Part lab02_separate(ForBoth<SeparateProjectionFn> f);
Part lab03_attention(ForBoth<HeadsFn> split, ForBoth<HeadsFn> merge, ForBoth<AttentionFn> attention);
Part lab04_masks(ForBoth<MaskFn> prepare);
Part lab05_forward(ForBoth<ForwardFn> forward);
Part lab06_backward(ForBoth<BackwardFn> backward);

// The forward's catalogue, as `mha-grade diagnose` uses it: the whole forward (lab 05's part)
// with the answer read from .npy files of ANSWER_DIR. Prints the verdict; returns 0 for a
// right answer, 1 for a wrong one, 2 when the files cannot be graded (missing, corrupt,
// another shape or dtype).
int diagnose_npy(const std::filesystem::path& case_dir, const std::filesystem::path& answer_dir);

}  // namespace grader
