// tests/io_tests.cpp — the tests of files, compiled as one unit.
//
// golden_harness_test.cpp: the golden cases' harness; npy_test.cpp: .npy files;
// weights_test.cpp: trained weights; checkpoint_test.cpp: checkpoints read by offset;
// layouts_test.cpp: other models' Q/K/V layouts.
//
// Each unit that imports mha pays a fixed part before its first test, as
// tests/textbook_test.cpp explains; included here, these files pay it once. Each is still
// read on its own, and CTest lists its tests under its own name (mha_add_test_unit in
// tests/CMakeLists.txt).
#include "golden_harness_test.cpp"
#include "npy_test.cpp"
#include "weights_test.cpp"
#include "checkpoint_test.cpp"
#include "layouts_test.cpp"
