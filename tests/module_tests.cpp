// tests/module_tests.cpp — the module's tests beyond the goldens, compiled as one unit.
//
// in_projection_test.cpp: which rows of in_proj_weight are Q, K and V; module_test.cpp: the
// module's own behaviour; decoding_test.cpp: decoding and the functional form;
// backward_test.cpp: the backward pass.
//
// Each unit that imports mha pays a fixed part before its first test, as
// tests/textbook_test.cpp explains; included here, these files pay it once. Each is still
// read on its own, and CTest lists its tests under its own name (mha_add_test_unit in
// tests/CMakeLists.txt).
#include "in_projection_test.cpp"
#include "module_test.cpp"
#include "decoding_test.cpp"
#include "backward_test.cpp"
