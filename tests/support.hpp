// tests/support.hpp — shared helpers of the test suite: where the goldens are, a tensor comparison that names
// the tensor, the first mismatching index and the max error on failure, random tensors,
// and a small module's sizes for the tests of bad input.
#pragma once

#include "third_party_xtensor.hpp"

#include "catch2.hpp"  // Catch2 v2 or v3, spelled as v3

#include <unistd.h>  // getpid

import mha;
import mha.golden;

// The expression throws mha::Error, and its message matches (e.g. names the argument).
#define CHECK_MHA_ERROR(expression, message_matcher) \
  do {                                               \
    CHECK_THROWS_AS(expression, mha::Error);         \
    CHECK_THROWS_WITH(expression, message_matcher);  \
  } while (false)

namespace mha_test {

inline std::filesystem::path golden_cases() { return std::filesystem::path(MHA_SOURCE_DIR) / "golden" / "cases"; }

// The shipped nn.TransformerEncoder (golden/weights/transformer_encoder, model.json), which
// weights_test.cpp and checkpoint_test.cpp both load: its file, nhead and d_model, and
// PyTorch's float32 tolerances for its outputs.
inline const std::filesystem::path kEncoder =
    std::filesystem::path(MHA_SOURCE_DIR) / "golden" / "weights" / "transformer_encoder" / "model.safetensors";
inline constexpr std::int64_t kHeads = 2;              // nhead
inline constexpr std::size_t kEmbed = 8;               // d_model
inline constexpr double kRtol = 1.3e-6, kAtol = 1e-5;  // PyTorch's float32 defaults

// Every case folder under golden/cases (PyTorch 1.13's), as mha-golden finds them.
inline std::vector<std::filesystem::path> all_cases() { return mha::find_cases({golden_cases()}); }

// The cases PyTorch 2.6 made: golden/pytorch-2.6/cases.
inline std::filesystem::path golden_cases_2_6() {
  return std::filesystem::path(MHA_SOURCE_DIR) / "golden" / "pytorch-2.6" / "cases";
}

// Every case of both generations: PyTorch 1.13's, then PyTorch 2.6's.
inline std::vector<std::filesystem::path> cases_of_every_generation() {
  return mha::find_cases({golden_cases(), golden_cases_2_6()});
}

// The numeric (not expect_error) cases of one dtype that describe a module (versions 1
// and 2; a version-3 case is a call of the functional form).
inline std::vector<std::string> numeric_case_names(const std::string& dtype) {
  std::vector<std::string> names;
  for (const auto& dir : all_cases()) {
    const auto info = mha::read_case_info(dir);
    if (!info.expect_error && !info.is_functional() && info.dtype == dtype) names.push_back(info.name);
  }
  return names;
}

// The value of an optional that the test expects to hold one. An empty one fails the
// test with `what` in the message (Catch reports the exception), never dereferences.
template <class T>
const T& value_of(const std::optional<T>& optional, const std::string& what) {
  if (!optional.has_value()) throw std::logic_error(what + ": expected a value, got none");
  return *optional;
}

// The same for a temporary, whose value is moved out rather than left dangling.
template <class T>
T value_of(std::optional<T>&& optional, const std::string& what) {
  if (!optional.has_value()) throw std::logic_error(what + ": expected a value, got none");
  return std::move(*optional);
}

// attn_output_weights of a forward run that was asked for them (need_weights).
template <class T>
const xt::xarray<T>& weights(const mha::Output<T>& out) {
  return value_of(out.attn_output_weights, "attn_output_weights");
}

template <class T>
xt::xarray<T> weights(mha::Output<T>&& out) {
  return value_of(std::move(out.attn_output_weights), "attn_output_weights");
}

// A fresh folder under the system's temporary folder, removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / fmt::format("mha-test-{}-{}", name, ::getpid())) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

// The library's thread count for the rest of a test, put back as it was at the end of the
// test, whether it passes or fails.
struct LibraryThreadCount {
  int before = mha::num_threads();
  explicit LibraryThreadCount(int threads) { mha::set_num_threads(threads); }
  LibraryThreadCount(const LibraryThreadCount&) = delete;
  LibraryThreadCount& operator=(const LibraryThreadCount&) = delete;
  ~LibraryThreadCount() { mha::set_num_threads(before); }
};

// The message of the mha::Error that `f` throws; fails the test if it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const mha::Error& e) {
    return e.what();
  }
  FAIL("expected an mha::Error, none was thrown");
  return {};
}

// Exact equality of two xtensor expressions (shape and every element), as one bool.
template <class A, class B>
bool same(const A& a, const B& b) {
  return bool(a == b);
}

template <class E>
std::vector<std::size_t> shape_of(const E& x) {
  return {x.shape().begin(), x.shape().end()};
}

template <class T>
mha::Case<T> load(const std::string& name) {
  return mha::load_case<T>(mha::read_case_info(golden_cases() / name));
}

// Checks shapes first, then values within atol + rtol * |expected| (NaN equal to NaN).
template <class T, class E>
void require_close(const std::string& name, const E& got, const xt::xarray<T>& expected, double rtol, double atol) {
  const auto cmp = mha::compare<T>(xt::xarray<T>(got), expected, rtol, atol);
  INFO(name << ": max_abs_err=" << cmp.max_abs_err << " " << cmp.mismatch);
  REQUIRE(cmp.ok);
}

// True when got and expected differ somewhere beyond the tolerance (or in shape).
template <class T, class E>
bool differs(const E& got, const xt::xarray<T>& expected, double rtol, double atol) {
  return !mha::compare<T>(xt::xarray<T>(got), expected, rtol, atol).ok;
}

// Every attention path, by name: each must give PyTorch's results.
inline const std::vector<std::pair<std::string, mha::AttentionPath>> all_paths = {
    {"reference", mha::AttentionPath::reference},
    {"fast", mha::AttentionPath::fast},
    {"memory_efficient", mha::AttentionPath::memory_efficient},
    {"automatic", mha::AttentionPath::automatic}};

// A tensor of standard normal values drawn from `g`, anything with a normal() (mha::Generator).
template <class T, class G>
xt::xarray<T> random_tensor(const std::vector<std::size_t>& shape, G& g) {
  xt::xarray<T> x = xt::zeros<T>(shape);
  for (auto& v : x) v = static_cast<T>(g.normal());
  return x;
}

// A small module and its sizes, for the tests of bad input.
namespace small {

constexpr std::size_t E = 8, H = 2, L = 3, S = 4, N = 2;

inline mha::Options options() {
  mha::Options o;
  o.embed_dim = static_cast<std::int64_t>(E);
  o.num_heads = static_cast<std::int64_t>(H);
  return o;
}

inline xt::xarray<float> zeros(const std::vector<std::size_t>& shape) { return xt::zeros<float>(shape); }

// forward() on inputs of the given shapes must throw mha::Error mentioning `argument`.
inline void require_rejected(mha::MultiheadAttention<float>& m, const xt::xarray<float>& q, const xt::xarray<float>& k,
                             const xt::xarray<float>& v, const mha::ForwardOptions<float>& opts,
                             const std::string& argument, const std::string& detail = "") {
  CHECK_MHA_ERROR(m.forward(q, k, v, opts),
                  Catch::Matchers::ContainsSubstring(argument + ":") && Catch::Matchers::ContainsSubstring(detail));
}

}  // namespace small

}  // namespace mha_test
