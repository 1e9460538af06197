#!/usr/bin/env python3
"""tests/mask_homes_test.py — the kinds of mask are named in their homes only: the engine sees one mask.

Every path takes one mask, step 7's additive mask (textbook::MergedMask, modules/textbook/masks.hpp),
made in one place of the API from PyTorch's arguments (modules/api/mask_preparation.hpp). So a
kind of mask (attn_mask, key_padding_mask, the is_causal hint, a causal mask) is named in
  - the textbook's masks: masks.hpp and masks.cpp (what it means, its additive form, which part
    of MergedMask it folds into), generations.hpp (what each generation of PyTorch does with it),
    options.hpp (the argument, ForwardOptions) and inputs.hpp (step 1 checks its rank);
  - the one place, modules/api/mask_preparation.hpp, and functional.hpp, whose
    FunctionalArguments are the functional form's arguments as options.hpp's are the module's;
and nowhere else, so that adding a kind touches those files (docs/building.md, "Adding a mask
kind"). Elsewhere in the API a kind may appear only as a field of the arguments passed on or
read whole (`opts.attn_mask`, `args.is_causal`): forward's options handed through, and PyTorch's
fast-path conditions, which ask whether a mask is given. The engine (modules/engine/) and the
rest of the textbook (the reference's steps 3 to 10) name none, not even so: they take the mask
made. mha.io and mha.golden, modules of their own that read files into ForwardOptions, are not
read. Nothing in the compiler keeps any of this. Comments and strings are left out.

  mask_homes_test.py SOURCE_DIR            the check
  mask_homes_test.py SOURCE_DIR --plant    the same, with the engine reading the causal hint
                                           and forward's is_causal, and the module making a
                                           KV cache step's causal mask itself: must report
                                           all three (ctest checks)
"""
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layers_test import check_modules, code_only  # noqa: E402  (the same reading of code, comments left out)

KIND = re.compile(r"\b(attn_mask|key_padding_mask|causal_hint|is_causal|causal_mask|causal_mask_after|"
                  r"causal_attn_mask|generate_square_subsequent_mask)\b")
# The kinds' homes: named there freely.
HOMES = {
    "modules/textbook/masks.hpp", "modules/textbook/masks.cpp", "modules/textbook/generations.hpp",
    "modules/textbook/options.hpp", "modules/textbook/inputs.hpp",
    "modules/api/mask_preparation.hpp", "modules/api/functional.hpp",
}
ONE_PLACE = "modules/api/mask_preparation.hpp"
# A field of forward's or the functional form's arguments, passed on or read whole: the API only.
PASSED_THROUGH = re.compile(r"\b(opts|args)\.$")
NOT_READ = ("modules/io/", "modules/golden/", "modules/io.cppm", "modules/golden.cppm")

# --plant: each file's text as read, with a fault planted
PLANTS = {
    "modules/engine/engine.hpp": lambda t: t + "\ntemplate <class T>\nbool planted_hint(const textbook::PreparedMasks<T>& "
    "m) { return m.causal_hint; }\n",
    "modules/engine/training_forward.hpp": lambda t: t + "\ntemplate <class T>\nbool planted_causal(const "
    "ForwardOptions<T>& opts) { return opts.is_causal; }\n",
    "modules/api/multihead_attention.hpp": lambda t: t + "\ninline auto planted_cache_mask() { return "
    "mha::textbook::causal_mask_after(0, 2); }\n",
}


def problems_of(where, text):
    """The problems of one file of modules/."""
    if where in HOMES:
        return []
    found = []
    for number, line in enumerate(code_only(text).splitlines(), 1):
        for m in KIND.finditer(line):
            if where.startswith("modules/api/") and PASSED_THROUGH.search(line[:m.start()]):
                continue
            found.append(f"{where}:{number}: names {m.group(1)}, a kind of mask: only the textbook's masks and "
                         f"{ONE_PLACE} make step 7's mask from it (MergedMask)")
    return found


def homes_missing(root):
    """The check's own premises: the one representation and the one place exist and hold the kinds."""
    missing = []
    if not re.search(r"\bstruct MergedMask\b", code_only((root / "modules/textbook/masks.hpp").read_text())):
        missing.append("modules/textbook/masks.hpp: defines no MergedMask: this test checks nothing")
    place = root / ONE_PLACE
    named = set(KIND.findall(code_only(place.read_text()))) if place.exists() else set()
    for kind in ("attn_mask", "key_padding_mask", "is_causal", "causal_mask_after"):
        if kind not in named:
            missing.append(f"{ONE_PLACE}: never names {kind}: the one place does not make the mask from it")
    return missing


def main():
    root = Path(sys.argv[1])
    return check_modules(root, problems_of, homes_missing(root), PLANTS, "--plant" in sys.argv[2:], left_out=NOT_READ)

if __name__ == "__main__":
    sys.exit(main())
