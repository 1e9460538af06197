// tests/engine_tests.cpp — the engine's tests, compiled as one unit.
//
// engine_test.cpp: the fast paths held to the reference; gemm_library_test.cpp: which
// library multiplies the float matrices; blas_test.cpp: the OpenBLAS kernel.
//
// Each unit that imports mha pays a fixed part before its first test, as
// tests/textbook_test.cpp explains; included here, these files pay it once. Each is still
// read on its own, and CTest lists its tests under its own name (mha_add_test_unit in
// tests/CMakeLists.txt).
#include "engine_test.cpp"
#include "gemm_library_test.cpp"
#include "blas_test.cpp"
