// The one main() of the Catch2 test executables: Catch2's own, in v2 and in v3.
#if MHA_CATCH2_MAJOR == 3
#include <catch2/catch_session.hpp>

int main(int argc, char* argv[]) { return Catch::Session().run(argc, argv); }
#else
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#endif
