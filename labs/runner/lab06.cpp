// labs/runner/lab06.cpp — Lab 06's answers program: the student's backward on each case's inputs.
//
// Inputs of a case: lab 05's, and the upstream gradients grad_attn_output and, when the
// loss has it, grad_attn_output_weights. Answers: backward.query, backward.key,
// backward.value (each of its own use, as the student's function gave them) and
// backward.parameter.<state_dict name>.
#include "runner.hpp"

int main(int argc, char** argv) {
  return runner::run(argc, argv, []<class T>(const runner::Call& call, runner::Answers& answers, T) {
    runner::attempt(answers, call, "backward", [&] {
      const auto x = call.inputs<T>();
      std::optional<xt::xarray<T>> grad_weights;
      if (call.has("grad_attn_output_weights")) grad_weights = call.tensor<T>("grad_attn_output_weights");
      const auto g = lab06::backward<T>(call.options(), call.parameters<T>(), x.query, x.key, x.value,
                                        call.forward_options<T>(), call.tensor<T>("grad_attn_output"), grad_weights);
      if (g.query) answers.tensor<T>(call.name(), "backward.query", *g.query);
      if (g.key) answers.tensor<T>(call.name(), "backward.key", *g.key);
      if (g.value) answers.tensor<T>(call.name(), "backward.value", *g.value);
      for (const auto& [name, tensor] : g.parameters)
        answers.tensor<T>(call.name(), "backward.parameter." + name, tensor);
    });
  });
}
