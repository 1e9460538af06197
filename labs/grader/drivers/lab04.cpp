// labs/grader/drivers/lab04.cpp — Lab 04's grading program: the student's masks, on every case with a mask.
#include "third_party.hpp"

import mha;
import mha.io;
import mha.golden;

#include "grader.hpp"
#include "lab_api.hpp"

int main(int argc, char** argv) {
  return grader::run_lab("04-masks", {grader::lab04_masks({lab04::prepare_mask<float>, lab04::prepare_mask<double>})},
                         argc, argv);
}
