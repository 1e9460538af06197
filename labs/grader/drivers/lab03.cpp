// labs/grader/drivers/lab03.cpp — Lab 03's grading program: the student's heads and scaled dot-product attention.
#include "third_party.hpp"

import mha;
import mha.io;
import mha.golden;

#include "grader.hpp"
#include "lab_api.hpp"

int main(int argc, char** argv) {
  return grader::run_lab("03-heads-attention",
                         {grader::lab03_attention({lab03::split_heads<float>, lab03::split_heads<double>},
                                                  {lab03::merge_heads<float>, lab03::merge_heads<double>},
                                                  {lab03::scaled_dot_product_attention<float>,
                                                   lab03::scaled_dot_product_attention<double>})},
                         argc, argv);
}
