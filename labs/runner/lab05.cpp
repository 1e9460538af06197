// labs/runner/lab05.cpp — Lab 05's answers program: the student's whole forward on each case's inputs.
//
// Inputs of a case: the module's options and parameters (parameter.<state_dict name>),
// query, key and value as the caller gives them (one tensor where the caller passed one
// object twice: call.txt's query_is_key, key_is_value), and the forward's options. Answers:
// forward.attn_output, and forward.attn_output_weights when the student's forward gave them.
#include "runner.hpp"

int main(int argc, char** argv) {
  return runner::run(argc, argv, []<class T>(const runner::Call& call, runner::Answers& answers, T) {
    runner::attempt(answers, call, "forward", [&] {
      const auto x = call.inputs<T>();
      const auto o =
          lab05::forward<T>(call.options(), call.parameters<T>(), x.query, x.key, x.value, call.forward_options<T>());
      answers.tensor<T>(call.name(), "forward.attn_output", o.attn_output);
      if (o.attn_output_weights) answers.tensor<T>(call.name(), "forward.attn_output_weights", *o.attn_output_weights);
    });
  });
}
