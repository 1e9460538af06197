// labs/runner/lab04.cpp — Lab 04's answers program: the student's prepare_mask on each case's masks.
//
// Inputs of a case: attn_mask and key_padding_mask as the module's forward was given them
// (an unbatched key_padding_mask (S) as (1, S)), bool or floating (call.txt says which), and
// N, H, L, S. Answer: prepare_mask.mask (1 or B, L, S), or the status "none" when the
// student's function returned no mask.
#include "runner.hpp"

int main(int argc, char** argv) {
  return runner::run(argc, argv, []<class T>(const runner::Call& call, runner::Answers& answers, T) {
    runner::attempt(answers, call, "prepare_mask", [&] {
      const auto mask = lab04::prepare_mask<T>(call.mask<T>("attn_mask"), call.mask<T>("key_padding_mask"),
                                               call.size("N"), call.size("H"), call.size("L"), call.size("S"));
      if (mask) answers.tensor<T>(call.name(), "prepare_mask.mask", *mask);
      else answers.status(call.name(), "prepare_mask", "none", "no mask");
    });
  });
}
