// tests/paths_tests.cpp — every path held to PyTorch and to the others, compiled as one unit.
//
// golden_test.cpp: the golden cases; generations_test.cpp: PyTorch 1.13 and 2.x;
// differential_test.cpp: the randomised differential suite; mask_kind_test.cpp: a mask kind
// of the tests' own.
//
// Each unit that imports mha pays a fixed part before its first test, as
// tests/textbook_test.cpp explains; included here, these files pay it once. Each is still
// read on its own, and CTest lists its tests under its own name (mha_add_test_unit in
// tests/CMakeLists.txt).
#include "golden_test.cpp"
#include "generations_test.cpp"
#include "differential_test.cpp"
#include "mask_kind_test.cpp"
