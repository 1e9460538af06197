// labs/runner/lab03.cpp — Lab 03's answers program: the student's split_heads, scaled_dot_product_attention and merge_heads, each on its own.
//
// Each function is given PyTorch's own inputs for its step, not the student's other
// functions' outputs, so that each is graded on its own: split_heads gets PyTorch's q
// (L, N, E), k and v (S, N, E) and call.txt's H; scaled_dot_product_attention gets those
// split into heads, q_heads (B, L, D), k_heads and v_heads (B, S, D), and the case's mask as
// one additive (1 or B, L, S) tensor (none without masks); merge_heads gets the right
// attention output of those heads, attention_output (B, L, D). Answers: split_heads.q,
// split_heads.k, split_heads.v, scaled_dot_product_attention.weights (B, L, S) and .output
// (B, L, D), merge_heads.output (L, N, E).
#include "runner.hpp"

int main(int argc, char** argv) {
  return runner::run(argc, argv, []<class T>(const runner::Call& call, runner::Answers& answers, T) {
    const std::size_t H = call.size("H");
    runner::attempt(answers, call, "split_heads", [&] {
      answers.tensor<T>(call.name(), "split_heads.q", lab03::split_heads<T>(call.fixed<T, 3>("q"), H));  // (B, L, D)
      answers.tensor<T>(call.name(), "split_heads.k", lab03::split_heads<T>(call.fixed<T, 3>("k"), H));  // (B, S, D)
      answers.tensor<T>(call.name(), "split_heads.v", lab03::split_heads<T>(call.fixed<T, 3>("v"), H));  // (B, S, D)
    });
    runner::attempt(answers, call, "scaled_dot_product_attention", [&] {
      const auto a = lab03::scaled_dot_product_attention<T>(call.fixed<T, 3>("q_heads"), call.fixed<T, 3>("k_heads"),
                                                            call.fixed<T, 3>("v_heads"), call.maybe<T, 3>("mask"));
      answers.tensor<T>(call.name(), "scaled_dot_product_attention.weights", a.weights);  // (B, L, S)
      answers.tensor<T>(call.name(), "scaled_dot_product_attention.output", a.output);    // (B, L, D)
    });
    runner::attempt(answers, call, "merge_heads", [&] {
      const auto merged = lab03::merge_heads<T>(call.fixed<T, 3>("attention_output"), H);  // (L, N, E)
      answers.tensor<T>(call.name(), "merge_heads.output", merged);
    });
  });
}
