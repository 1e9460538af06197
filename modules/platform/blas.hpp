// modules/platform/blas.hpp — which OpenBLAS kernel runs the GEMMs, and getting the best one this CPU has.
//
// Debian's OpenBLAS is one library with a kernel per CPU family inside (DYNAMIC_ARCH).
// When it loads, it picks one by the CPU's model number, from a table fixed when that
// OpenBLAS was released. A CPU newer than the table (a recent Xeon, Zen 4/5 with
// OpenBLAS 0.3.21) gets the generic `Prescott` kernel, SSE3 only: 4-5x slower than the
// kernel its features support, with no message.
//
// Importing the library changes nothing here: OpenBLAS runs the kernel it picked, or the
// one OPENBLAS_CORETYPE names. use_best_blas_kernel() is the explicit step that compares
// that kernel with the CPU's real features (cpu.hpp) and, if the CPU can run a better family,
// has OpenBLAS load that one through its own start-up path (gotoblas_dynamic_init, which
// reads OPENBLAS_CORETYPE; the variable is set for that call and then restored). The
// project's tools, tutorials and benchmarks call it first thing in main(). It changes the
// kernel for the whole process, the host program's own BLAS calls included, and it is
// for the start of a program: no other thread may be inside a BLAS call or reading the
// environment meanwhile. It never overrides an OPENBLAS_CORETYPE the user set, never picks
// a kernel the CPU cannot run, and leaves a kernel name it does not know alone.
//
// Every kernel gives PyTorch's results within the tests' tolerances: they differ only in
// the last bits, as any two CPUs do. blas_kernel() says which one runs and why.
//
// Included by modules/platform.cppm, in its module purview: no module line of its own.
// Uses mha.core, cpu.hpp.

// OpenBLAS's own functions, declared here rather than through cblas.h (which clashes with
// the BLAS declarations xtensor-blas bundles). The start-up pair exists only in OpenBLAS
// builds with a kernel per CPU (DYNAMIC_ARCH, as Debian's); weak, so that an OpenBLAS
// built for one CPU links too, and is left as it is.
extern "C" char* openblas_get_corename(void);
extern "C" [[gnu::weak]] void gotoblas_dynamic_init(void);
extern "C" [[gnu::weak]] void gotoblas_dynamic_quit(void);

export namespace mha {

// The OpenBLAS kernel in use and how it came to be.
struct BlasKernel {
  std::string name;       // openblas_get_corename(): "Haswell", "SkylakeX", "Zen", "Prescott", ...
  std::string chosen_by;  // "OpenBLAS", "OPENBLAS_CORETYPE", or "mha (the CPU has AVX-512; OpenBLAS picked Prescott)"
};

}  // namespace mha

namespace mha::detail {

// The vector instruction set an OpenBLAS 0.3.x kernel family is written for; nullopt for
// a name this table does not know (a newer OpenBLAS's: then it is left alone).
// inline for its static: see cpu_simd_level() in cpu.hpp.
inline std::optional<SimdLevel> blas_kernel_simd_level(std::string_view name) {
  static const std::map<std::string, SimdLevel, std::less<>> levels{
      {"SkylakeX", SimdLevel::avx512}, {"Cooperlake", SimdLevel::avx512}, {"SapphireRapids", SimdLevel::avx512},
      {"Haswell", SimdLevel::avx2},    {"Zen", SimdLevel::avx2},          {"Sandybridge", SimdLevel::avx},
      {"Bulldozer", SimdLevel::avx},   {"Piledriver", SimdLevel::avx},    {"Steamroller", SimdLevel::avx},
      {"Excavator", SimdLevel::avx},   {"Prescott", SimdLevel::sse2},     {"Core2", SimdLevel::sse2},
      {"Penryn", SimdLevel::sse2},     {"Dunnington", SimdLevel::sse2},   {"Nehalem", SimdLevel::sse2},
      {"Atom", SimdLevel::sse2},       {"Nano", SimdLevel::sse2},         {"Barcelona", SimdLevel::sse2},
      {"Bobcat", SimdLevel::sse2},     {"Opteron", SimdLevel::sse2},      {"Opteron(SSE3)", SimdLevel::sse2},
      {"Katmai", SimdLevel::sse2},     {"Coppermine", SimdLevel::sse2},   {"Northwood", SimdLevel::sse2},
      {"Banias", SimdLevel::sse2},     {"Athlon", SimdLevel::sse2}};
  const auto it = levels.find(name);
  if (it == levels.end()) return std::nullopt;
  return it->second;
}

// The kernel family written for a SIMD level, as OPENBLAS_CORETYPE spells it.
std::string blas_kernel_for(SimdLevel level) {
  switch (level) {
    case SimdLevel::avx512:
      return "SkylakeX";
    case SimdLevel::avx2:
      return "Haswell";
    case SimdLevel::avx:
      return "Sandybridge";
    case SimdLevel::sse2:
      break;
  }
  return "Prescott";
}

// The kernel to load instead of OpenBLAS's choice, or nullopt to keep it: only when the
// user did not choose (no OPENBLAS_CORETYPE), OpenBLAS's choice is a kernel we know, and
// the CPU runs a higher SIMD level than that kernel uses.
std::optional<std::string> better_blas_kernel(std::string_view openblas_choice, SimdLevel cpu, bool user_chose) {
  if (user_chose) return std::nullopt;
  const auto level = blas_kernel_simd_level(openblas_choice);
  if (!level || *level >= cpu) return std::nullopt;
  return blas_kernel_for(cpu);
}

std::string current_blas_kernel() {
  const char* name = openblas_get_corename();
  return name != nullptr ? std::string(name) : std::string("unknown");
}

// Has OpenBLAS load `kernel` (an OPENBLAS_CORETYPE name) in place of the one it runs,
// through its own start-up: OPENBLAS_CORETYPE is set for the moment of the call, then
// restored. False where this OpenBLAS has one kernel only.
bool reload_blas_kernel(const std::string& kernel) {
  if (gotoblas_dynamic_init == nullptr || gotoblas_dynamic_quit == nullptr) return false;
  const char* previous = std::getenv("OPENBLAS_CORETYPE");
  const std::optional<std::string> saved = previous != nullptr ? std::optional<std::string>(previous) : std::nullopt;
  ::setenv("OPENBLAS_CORETYPE", kernel.c_str(), 1);
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  if (saved) ::setenv("OPENBLAS_CORETYPE", saved->c_str(), 1);
  else ::unsetenv("OPENBLAS_CORETYPE");
  return true;
}

// What the library knows of the kernel: the one OpenBLAS runs, and who chose it. inline
// for its static: see cpu_simd_level() in cpu.hpp.
inline BlasKernel& blas_kernel_record() {
  static BlasKernel kernel{current_blas_kernel(),
                           std::getenv("OPENBLAS_CORETYPE") != nullptr ? "OPENBLAS_CORETYPE" : "OpenBLAS"};
  return kernel;
}

}  // namespace mha::detail

export namespace mha {

// The OpenBLAS kernel that runs the GEMMs now, and who chose it: "OpenBLAS" for its own
// pick, "OPENBLAS_CORETYPE", or the library's call that loaded it.
BlasKernel blas_kernel() {
  const BlasKernel& record = detail::blas_kernel_record();
  const std::string now = detail::current_blas_kernel();
  if (now == record.name) return record;
  return BlasKernel{now, "OpenBLAS"};  // switched since by something other than this library
}

// Has OpenBLAS run `kernel` (an OPENBLAS_CORETYPE name: "Haswell", "SkylakeX", ...) from
// now on, as OPENBLAS_CORETYPE does at start-up. Process-wide: call it at the start of
// the program, while no other thread is inside a BLAS call. Refuses a kernel this CPU
// cannot run.
void use_blas_kernel(const std::string& kernel) {
  const auto known = detail::blas_kernel_simd_level(kernel);
  check(known.has_value(), "kernel", "expected an OpenBLAS kernel name such as Haswell or SkylakeX, got '{}'", kernel);
  const SimdLevel level = known.value_or(SimdLevel::sse2);  // known: checked above
  check(level <= cpu_simd_level(), "kernel", "expected a kernel this CPU runs (up to {}), got '{}', which needs {}",
        to_string(cpu_simd_level()), kernel, to_string(level));
  detail::blas_kernel_record();  // what ran before, recorded first
  check(detail::reload_blas_kernel(kernel) && detail::current_blas_kernel() == kernel, "kernel",
        "expected OpenBLAS to load '{}', but it runs '{}' (an OpenBLAS built for one CPU has one kernel)", kernel,
        detail::current_blas_kernel());
  detail::blas_kernel_record() = BlasKernel{kernel, "use_blas_kernel"};
}

// Has OpenBLAS run the best kernel this CPU runs, when it picked a weaker one by itself
// (see above), and says which kernel runs now. Leaves OPENBLAS_CORETYPE's choice alone.
// Process-wide, for the start of a program, like use_blas_kernel.
BlasKernel use_best_blas_kernel() {
  BlasKernel before = blas_kernel();
  const bool user_chose = std::getenv("OPENBLAS_CORETYPE") != nullptr;
  const auto better = detail::better_blas_kernel(before.name, cpu_simd_level(), user_chose);
  if (!better) return before;
  if (detail::reload_blas_kernel(*better) && detail::current_blas_kernel() == *better) {
    detail::blas_kernel_record() = BlasKernel{
        *better, fmt::format("mha (the CPU has {}; OpenBLAS picked {})", to_string(cpu_simd_level()), before.name)};
  } else if (detail::current_blas_kernel() != before.name) {
    detail::reload_blas_kernel(before.name);  // never leave one we did not mean
  }
  return blas_kernel();
}

}  // namespace mha

export namespace mha::testing {

// For tests: the choice use_best_blas_kernel() makes, on any CPU and any OpenBLAS choice
// (detail::better_blas_kernel above).
std::optional<std::string> better_blas_kernel(std::string_view openblas_choice, SimdLevel cpu, bool user_chose) {
  return detail::better_blas_kernel(openblas_choice, cpu, user_chose);
}

// The SIMD level of an OpenBLAS kernel name, nullopt for one the table does not know.
std::optional<SimdLevel> blas_kernel_simd_level(std::string_view name) { return detail::blas_kernel_simd_level(name); }

// The OpenBLAS kernel name for a SIMD level.
std::string blas_kernel_for(SimdLevel level) { return detail::blas_kernel_for(level); }

}  // namespace mha::testing
