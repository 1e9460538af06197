// labs/runner/lab02.cpp — Lab 02's answers program: the student's in-projections on each case's inputs.
//
// Inputs of a case: query (L, N, E), key (S, N, Ek), value (S, N, Ev), sequence-first, and
// either in_proj_weight (3E, E) with in_proj_bias (3E) (a packed case) or W_q, W_k, W_v with
// b_q, b_k, b_v (a case of separate projections). Answers: <function>.q, .k, .v.
#include "runner.hpp"

template <class T>
void answer_qkv(runner::Answers& answers, const runner::Call& call, const std::string& function, const lab::QKV<T>& x) {
  answers.tensor<T>(call.name(), function + ".q", x.q);
  answers.tensor<T>(call.name(), function + ".k", x.k);
  answers.tensor<T>(call.name(), function + ".v", x.v);
}

int main(int argc, char** argv) {
  return runner::run(argc, argv, []<class T>(const runner::Call& call, runner::Answers& answers, T) {
    const auto query = call.fixed<T, 3>("query"), key = call.fixed<T, 3>("key"), value = call.fixed<T, 3>("value");
    if (call.has("in_proj_weight"))
      runner::attempt(answers, call, "in_projection_packed", [&] {
        answer_qkv<T>(answers, call, "in_projection_packed",
                      lab02::in_projection_packed<T>(query, key, value, call.fixed<T, 2>("in_proj_weight"),
                                                     call.maybe<T, 1>("in_proj_bias")));
      });
    if (call.has("W_q"))
      runner::attempt(answers, call, "in_projection", [&] {
        const lab::SeparateProjections<T> p{call.fixed<T, 2>("W_q"), call.fixed<T, 2>("W_k"), call.fixed<T, 2>("W_v"),
                                            call.maybe<T, 1>("b_q"), call.maybe<T, 1>("b_k"), call.maybe<T, 1>("b_v")};
        answer_qkv<T>(answers, call, "in_projection", lab02::in_projection<T>(query, key, value, p));
      });
  });
}
