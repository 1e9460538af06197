// tests/host_program/openblas_corename.cpp — the kernel OpenBLAS picks by itself, in a program without the library: what the host
// program must still find when its main() starts.
#include <cblas.h>
#include <cstdio>

int main() {
  std::puts(openblas_get_corename());
  return 0;
}
