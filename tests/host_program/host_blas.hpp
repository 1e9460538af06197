// tests/host_program/host_blas.hpp — the host program's own use of OpenBLAS, declared without cblas.h: host_blas.cpp includes
// it, main.cpp imports the library, and the two cannot share a unit (cblas.h clashes with
// the BLAS declarations xtensor-blas bundles).
#pragma once

#include <string>
#include <vector>

std::string host_blas_kernel();   // openblas_get_corename()
int host_blas_threads();          // openblas_get_num_threads()
void host_set_blas_threads(int);  // openblas_set_num_threads()
std::vector<float> host_sgemm();  // a fixed (96, 80) x (80, 112) product through cblas_sgemm
