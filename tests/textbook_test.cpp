// tests/textbook_test.cpp — the textbook's small tests: one file per idea, compiled as one unit.
//
// Each unit that imports mha pays a fixed part before its first test: its headers and
// Catch2's, merged with the module's. These eight small files each paid it; included here,
// they pay it once (docs/building.md). Each is still read on its own.
// tests/weights_version_elsewhere.cpp stays a unit of its own: the test it serves asks for a
// weights version made in a second unit.
#include "error_test.cpp"
#include "random_test.cpp"
#include "options_test.cpp"
#include "inputs_test.cpp"
#include "masks_test.cpp"
#include "attention_test.cpp"
#include "extra_keys_test.cpp"
#include "parameters_test.cpp"
