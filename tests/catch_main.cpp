// The one main() of the Catch2 test executables.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
