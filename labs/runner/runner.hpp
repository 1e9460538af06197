// labs/runner/runner.hpp — the program that runs a student's functions: the inputs of each case in, the answers out.
//
// A lab's answers program is the student's file linked with its lab's runner (lab 01's is
// labs/runner/lab01.cpp) and nothing else: no library, no grader. The grader writes the inputs of every case the lab
// takes into a folder (one subfolder per case: call.txt with the scalar arguments, one
// .npy file per tensor argument); this program calls the student's functions on each and
// writes what they return to file descriptor 3, as tensors, one record each:
//
//   tensor <case> <name> <bytes>\n<a .npy file of that many bytes>
//   status <case> <function> not_implemented|error|none <bytes>\n<a message of that many bytes>
//
// The grader reads that stream in its own process, with a limit on its size, and grades
// it; nothing this program prints to stdout or stderr decides a verdict. A program that
// stops halfway has answered the cases before it stopped.
//
// Legend: L = target length, S = source length, N = batch, E = embed_dim, H = heads.
#pragma once

#include "mha_lab.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace runner {

// A tensor's .npy file, read and written (labs/runner/npy.cpp: xtensor's xnpy, compiled once
// for every lab's runner). A file read holds float, double or bool (a mask); an answer
// written, float or double.
template <class T>
xt::xarray<T> read_npy(const std::filesystem::path& file);
template <class T>
std::string npy_bytes(const xt::xarray<T>& t);

// The answers' stream: file descriptor 3, opened by whoever started this program.
class Answers {
public:
  template <class T>
  void tensor(const std::string& case_name, const std::string& name, const xt::xarray<T>& t) {
    record("tensor " + case_name + " " + name, npy_bytes<T>(t));
  }
  void status(const std::string& case_name, const std::string& function, const std::string& kind,
              const std::string& message) {
    record("status " + case_name + " " + function + " " + kind, message);
  }

private:
  static void write_all(const std::string& bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(3, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) std::_Exit(3);  // the grader stopped reading: nothing more can be answered
      done += static_cast<std::size_t>(n);
    }
  }
  static void record(const std::string& head, const std::string& body) {
    write_all(head + " " + std::to_string(body.size()) + "\n" + body);
  }
};

// One case's arguments, as the grader wrote them.
class Call {
public:
  Call(std::string name, std::filesystem::path dir) : name_(std::move(name)), dir_(std::move(dir)) {
    std::ifstream in(dir_ / "call.txt");
    for (std::string key, value; in >> key >> value;) scalars_[key] = value;
  }
  const std::string& name() const { return name_; }
  std::string dtype() const { return text("dtype"); }

  bool has(const std::string& tensor) const { return std::filesystem::exists(file(tensor)); }
  std::string text(const std::string& key) const {
    const auto it = scalars_.find(key);
    if (it == scalars_.end()) throw std::runtime_error("call.txt of " + name_ + " has no " + key);
    return it->second;
  }
  bool flag(const std::string& key) const { return text(key) == "1"; }
  std::size_t size(const std::string& key) const { return std::stoul(text(key)); }
  std::optional<std::int64_t> maybe_int(const std::string& key) const {
    if (!scalars_.contains(key)) return std::nullopt;
    return std::stoll(text(key));
  }

  template <class T>
  xt::xarray<T> tensor(const std::string& name) const {
    return read_npy<T>(file(name));
  }
  template <class T, std::size_t R>
  xt::xtensor<T, R> fixed(const std::string& name) const {
    return tensor<T>(name);
  }
  template <class T, std::size_t R>
  std::optional<xt::xtensor<T, R>> maybe(const std::string& name) const {
    if (!has(name)) return std::nullopt;
    return fixed<T, R>(name);
  }
  // A mask file holds bool or the case's floating type: call.txt says which ("<name>_bool 1").
  template <class T>
  std::optional<lab::Mask<T>> mask(const std::string& name) const {
    if (!has(name)) return std::nullopt;
    if (flag(name + "_bool")) return lab::Mask<T>{tensor<bool>(name)};
    return lab::Mask<T>{tensor<T>(name)};
  }
  // The state_dict: every tensor file named "parameter.<name>".
  template <class T>
  lab::StateDict<T> parameters() const {
    lab::StateDict<T> p;
    for (const auto& e : std::filesystem::directory_iterator(dir_)) {
      const std::string f = e.path().filename().string();
      if (f.starts_with("parameter.") && f.ends_with(".npy")) {
        const std::string name = f.substr(10, f.size() - 14);
        p[name] = tensor<T>("parameter." + name);
      }
    }
    return p;
  }
  // query, key and value as the caller gave them: one tensor where the caller passed one
  // object twice (call.txt's query_is_key, key_is_value).
  template <class T>
  struct Inputs {
    xt::xarray<T> query, key, value;
  };
  template <class T>
  Inputs<T> inputs() const {
    Inputs<T> x{tensor<T>("query"), {}, {}};
    x.key = flag("query_is_key") ? x.query : tensor<T>("key");
    x.value = flag("key_is_value") ? x.key : tensor<T>("value");
    return x;
  }
  lab::Options options() const {
    lab::Options o;
    o.embed_dim = std::stoll(text("embed_dim"));
    o.num_heads = std::stoll(text("num_heads"));
    o.bias = flag("bias"), o.add_bias_kv = flag("add_bias_kv"), o.add_zero_attn = flag("add_zero_attn");
    o.kdim = maybe_int("kdim"), o.vdim = maybe_int("vdim");
    o.batch_first = flag("batch_first");
    return o;
  }
  template <class T>
  lab::ForwardOptions<T> forward_options() const {
    lab::ForwardOptions<T> f;
    f.key_padding_mask = mask<T>("key_padding_mask");
    f.need_weights = flag("need_weights");
    f.attn_mask = mask<T>("attn_mask");
    f.average_attn_weights = flag("average_attn_weights");
    return f;
  }

private:
  std::filesystem::path file(const std::string& tensor) const { return dir_ / (tensor + ".npy"); }
  std::string name_;
  std::filesystem::path dir_;
  std::map<std::string, std::string> scalars_;
};

// Calls one of the student's functions; what it throws is the case's status, not a crash.
template <class F>
void attempt(Answers& answers, const Call& call, const std::string& function, F&& f) {
  try {
    f();
  } catch (const lab::NotImplemented& e) {
    answers.status(call.name(), function, "not_implemented", e.what());
  } catch (const std::exception& e) {
    answers.status(call.name(), function, "error", e.what());
  } catch (...) {
    answers.status(call.name(), function, "error", "an exception that is not a std::exception");
  }
}

// The program's main: each case folder of argv[1], in name order, through `per_case`, once in
// the case's dtype (`per_case` is a generic lambda taking (Call, Answers, T{})).
template <class PerCase>
int run(int argc, char** argv, PerCase per_case) {
  if (argc != 2 || ::fcntl(3, F_GETFD) == -1) {
    std::fprintf(stderr,
                 "usage: %s INPUTS\n(this program is started by the lab's grader, which reads its answers "
                 "from file descriptor 3: run the lab's grader, build/default/labs/labNN)\n",
                 argc > 0 ? argv[0] : "labNN-answers");
    return 2;
  }
  std::vector<std::filesystem::path> cases;
  for (const auto& e : std::filesystem::directory_iterator(argv[1]))
    if (e.is_directory()) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  Answers answers;
  for (const auto& dir : cases) {
    const Call call(dir.filename().string(), dir);
    if (call.dtype() == "float32") per_case(call, answers, float{});
    else per_case(call, answers, double{});
  }
  return 0;
}

}  // namespace runner
