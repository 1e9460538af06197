// labs/grader/drivers/lab06.cpp — Lab 06's grading program: the student's backward pass, against PyTorch's gradients and
// finite differences.
#include "third_party.hpp"

import mha;
import mha.io;
import mha.golden;

#include "grader.hpp"
#include "lab_api.hpp"

int main(int argc, char** argv) {
  return grader::run_lab("06-backward", {grader::lab06_backward({lab06::backward<float>, lab06::backward<double>})},
                         argc, argv);
}
