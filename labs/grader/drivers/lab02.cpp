// labs/grader/drivers/lab02.cpp — Lab 02's grading program: the student's in-projections, packed and separate.
#include "third_party.hpp"

import mha;
import mha.io;
import mha.golden;

#include "grader.hpp"
#include "lab_api.hpp"

int main(int argc, char** argv) {
  return grader::run_lab(
      "02-in-projection",
      {grader::lab02_packed({lab02::in_projection_packed<float>, lab02::in_projection_packed<double>}),
       grader::lab02_separate({lab02::in_projection<float>, lab02::in_projection<double>})},
      argc, argv);
}
