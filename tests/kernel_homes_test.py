#!/usr/bin/env python3
"""tests/kernel_homes_test.py — the engine's softmax and its CPU dispatcher each live in one file.

The engine's softmax of a row of scores is one family, modules/engine/softmax_kernels.hpp:
every path (the weights, their mean over heads, the exponentials left undivided, the online
softmax of the flash tiles, the decoding step's) goes through it, so that a change to the exp
core or to the mask pass is a change to every path at once, and their results stay the same
to the last bit. And every kernel runs at the SIMD level that one dispatcher,
run_for_this_cpu in modules/platform/cpu.hpp, picks, so that mha::testing::
limit_kernel_simd_level reaches them all. Nothing in the compiler keeps either so. This test
reads modules/ (comments and strings left out) and fails on
  - a call of the exp core (exp_nonpositive, exp_and_sum) or of the mask pass
    (add_masks_and_max) outside modules/engine/softmax_kernels.hpp;
  - a function compiled for an instruction set (`gnu::target`, `gnu::target_clones` or
    `__attribute__((target(...)))`, the making of a dispatcher)
    outside modules/platform/cpu.hpp, but for modules/engine/attention_tiles.hpp, whose AVX-512
    intrinsics exist at that one level only (use_attention_tiles chooses them, no dispatch).

  kernel_homes_test.py SOURCE_DIR            the check
  kernel_homes_test.py SOURCE_DIR --plant    the same, with the flash tile calling the exp core
                                             itself and the decoding step compiling its own
                                             AVX2 kernel: must report both (ctest checks)
"""
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layers_test import check_modules, code_only  # noqa: E402  (the same reading of code, comments left out)

SOFTMAX = "modules/engine/softmax_kernels.hpp"
DISPATCHER = "modules/platform/cpu.hpp"
ONE_LEVEL = {"modules/engine/attention_tiles.hpp"}  # AVX-512 intrinsics: compiled for AVX-512 only
EXP_CORE = re.compile(r"\b(exp_nonpositive|exp_and_sum|add_masks_and_max)\b")
TARGET = re.compile(r"\bgnu::target(?:_clones)?\b|__attribute__\s*\(\(\s*target")  # either spelling

# --plant: each file's text as read, with a fault planted
PLANTS = {
    "modules/engine/flash_attention.hpp": lambda t: t + "\ntemplate <class T>\nT planted_correction(T m, T m_new) "
    "{ return exp_nonpositive(m - m_new); }\n",
    "modules/engine/decode_step.hpp": lambda t: t + "\ntemplate <class Kernel>\n[[gnu::target(\"avx2,fma\")]] "
    "void planted_run_avx2() { Kernel::template run<32>(); }\n",
}


def problems_of(where, text):
    """The problems of one file of modules/."""
    found = []
    for number, line in enumerate(code_only(text).splitlines(), 1):
        if where != SOFTMAX:
            for m in EXP_CORE.finditer(line):
                found.append(f"{where}:{number}: calls {m.group(1)}, which only {SOFTMAX} may (its softmax family)")
        if where != DISPATCHER and where not in ONE_LEVEL and TARGET.search(line):
            found.append(f"{where}:{number}: compiles a function for an instruction set (gnu::target): "
                         f"a second dispatcher; kernels run through run_for_this_cpu in {DISPATCHER}")
    return found


def homes_missing(root):
    """The check's own premises: each home exists and holds what it is the home of."""
    missing = []
    if not EXP_CORE.search(code_only((root / SOFTMAX).read_text())):
        missing.append(f"{SOFTMAX}: defines no exp core: this test checks nothing")
    if not re.search(r"\brun_for_this_cpu\b", code_only((root / DISPATCHER).read_text())):
        missing.append(f"{DISPATCHER}: defines no run_for_this_cpu: this test checks nothing")
    return missing


def main():
    root = Path(sys.argv[1])
    return check_modules(root, problems_of, homes_missing(root), PLANTS, "--plant" in sys.argv[2:])

if __name__ == "__main__":
    sys.exit(main())
