// labs/runner/lab03.cpp — Lab 03's answers program: the student's split_heads, attention and merge_heads, chained.
//
// Inputs of a case: PyTorch's own q (L, N, E), k and v (S, N, E), the case's mask as one
// additive (1 or B, L, S) tensor (none without masks), and call.txt's H. The student's
// functions are chained as the forward chains them: their split of q, k, v feeds their
// attention, whose output feeds their merge. Answers: split_heads.q (B, L, D), attention.weights
// (B, L, S), attention.output (B, L, D), merge_heads.output (L, N, E).
#include "runner.hpp"

int main(int argc, char** argv) {
  return runner::run(argc, argv, []<class T>(const runner::Call& call, runner::Answers& answers, T) {
    runner::attempt(answers, call, "split_heads/merge_heads/scaled_dot_product_attention", [&] {
      const std::size_t H = call.size("H");
      const auto qh = lab03::split_heads<T>(call.fixed<T, 3>("q"), H);  // (B, L, D)
      const auto kh = lab03::split_heads<T>(call.fixed<T, 3>("k"), H);  // (B, S, D)
      const auto vh = lab03::split_heads<T>(call.fixed<T, 3>("v"), H);  // (B, S, D)
      answers.tensor<T>(call.name(), "split_heads.q", qh);
      const auto a = lab03::scaled_dot_product_attention<T>(qh, kh, vh, call.maybe<T, 3>("mask"));
      answers.tensor<T>(call.name(), "attention.weights", a.weights);
      answers.tensor<T>(call.name(), "attention.output", a.output);
      answers.tensor<T>(call.name(), "merge_heads.output", lab03::merge_heads<T>(a.output, H));  // (L, N, E)
    });
  });
}
