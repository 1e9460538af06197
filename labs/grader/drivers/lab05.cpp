// labs/grader/drivers/lab05.cpp — Lab 05's grading program: the student's whole forward.
#include "third_party.hpp"

import mha;
import mha.io;
import mha.golden;

#include "grader.hpp"
#include "lab_api.hpp"

int main(int argc, char** argv) {
  return grader::run_lab("05-forward", {grader::lab05_forward({lab05::forward<float>, lab05::forward<double>})}, argc,
                         argv);
}
