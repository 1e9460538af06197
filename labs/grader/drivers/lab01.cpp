// labs/grader/drivers/lab01.cpp — Lab 01's grading program: the student's split_packed and pack, on every packed case.
#include "third_party.hpp"

import mha;
import mha.io;
import mha.golden;

#include "grader.hpp"
#include "lab_api.hpp"

int main(int argc, char** argv) {
  return grader::run_lab("01-split-pack",
                         {grader::lab01_split({lab01::split_packed<float>, lab01::split_packed<double>}),
                          grader::lab01_pack({lab01::pack<float>, lab01::pack<double>})},
                         argc, argv);
}
