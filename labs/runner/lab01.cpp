// labs/runner/lab01.cpp — Lab 01's answers program: the student's split_packed and pack on each case's inputs.
//
// Inputs of a case: in_proj_weight (3E, E) and in_proj_bias (3E) for split_packed; W_q, W_k,
// W_v (E, E) and b_q, b_k, b_v (E), the right split, for pack. Answers: split_packed.W_q, ...,
// split_packed.b_v, and pack.in_proj_weight, pack.in_proj_bias (runner.hpp's stream).
#include "runner.hpp"

int main(int argc, char** argv) {
  return runner::run(argc, argv, []<class T>(const runner::Call& call, runner::Answers& answers, T) {
    runner::attempt(answers, call, "split_packed", [&] {
      const auto p = lab01::split_packed<T>(call.fixed<T, 2>("in_proj_weight"), call.maybe<T, 1>("in_proj_bias"));
      answers.tensor<T>(call.name(), "split_packed.W_q", p.w_q);
      answers.tensor<T>(call.name(), "split_packed.W_k", p.w_k);
      answers.tensor<T>(call.name(), "split_packed.W_v", p.w_v);
      if (p.b_q) answers.tensor<T>(call.name(), "split_packed.b_q", *p.b_q);
      if (p.b_k) answers.tensor<T>(call.name(), "split_packed.b_k", *p.b_k);
      if (p.b_v) answers.tensor<T>(call.name(), "split_packed.b_v", *p.b_v);
    });
    runner::attempt(answers, call, "pack", [&] {
      const lab::SeparateProjections<T> p{call.fixed<T, 2>("W_q"), call.fixed<T, 2>("W_k"), call.fixed<T, 2>("W_v"),
                                          call.maybe<T, 1>("b_q"), call.maybe<T, 1>("b_k"), call.maybe<T, 1>("b_v")};
      const auto packed = lab01::pack<T>(p);
      answers.tensor<T>(call.name(), "pack.in_proj_weight", packed.in_proj_weight);
      if (packed.in_proj_bias) answers.tensor<T>(call.name(), "pack.in_proj_bias", *packed.in_proj_bias);
    });
  });
}
