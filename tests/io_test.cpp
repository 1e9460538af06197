// tests/io_test.cpp — the tests of reading files, compiled as one unit: the golden cases'
// harness (golden_harness_test.cpp) and .npy files (npy_test.cpp).
//
// Each unit that imports mha pays a fixed part before its first test, as
// tests/textbook_test.cpp explains; included here, the two files pay it once. Each is
// still read on its own.
#include "golden_harness_test.cpp"
#include "npy_test.cpp"
