#!/usr/bin/python3
"""Generate the golden cases: what real torch.nn.MultiheadAttention computes.

Every case is a folder `<case-name>/` holding `case.json` and `.npy` tensors, in the
format of golden/FORMAT.md: version 1 (the forward), version 2 for the `backward_*`
cases (the forward, and PyTorch's autograd gradients of it; golden/generator/backward.py),
or version 3 for the `functional_*` cases (one call of
`torch.nn.functional.multi_head_attention_forward` with the tensors written to the case,
static_k and static_v among them; golden/generator/functional.py). The expected numbers
of versions 1 and 2 come from a real
`torch.nn.MultiheadAttention` (PyTorch 1.13, Debian's python3-torch) in eval mode, run
on its slow path, `torch.nn.functional.multi_head_attention_forward`: the same math as
the C++ code, step by step. `q.npy`, `k.npy`, `v.npy` come from PyTorch's own
in-projection helpers (`_in_projection_packed`, `_in_projection`), called on exactly
the tensor objects the module passes them. Rejection cases (`expect_error: true`)
hold invalid inputs or options and no expected outputs; where PyTorch 1.13 rejects
them too, the generator checks that it does (and a version-3 case records PyTorch's
message as pytorch_error).

This is not a test and not a reader of cases: it only writes them. Nobody edits a
golden by hand; change the generator and regenerate. This file is the command; the
generator is the package golden/generator/ next to it (its __init__.py lists the
modules). The cases are tables in golden/generator/cases.py, and the version-3 cases
in golden/generator/functional.py.

Run it from anywhere (Debian's /usr/bin/python3: that is where PyTorch is installed):

    golden/generate.py                  # rewrite golden/: cases/, layouts/, weights/,
                                        # training/
    golden/generate.py --out DIR        # write those four folders into DIR instead
    golden/generate.py --check          # regenerate into a temporary folder and compare
                                        # with golden/ (exit 1 if they differ)
    golden/generate.py --check DIR      # the same for a golden folder DIR
    ... --case NAME                     # with any of these: only that case (repeatable),
                                        # plus the layouts, weights and training run,
                                        # which are few

A golden folder holds cases/ (the golden cases), layouts/ (one real MultiheadAttention's
weights permuted into GPT-2, BERT, GPT-NeoX, Megatron, Llama and ONNX Runtime layouts) and
weights/ (a real TransformerEncoder's state_dict as safetensors, and F16/BF16 data) and
training/ (the first steps of a small model built on nn.MultiheadAttention, trained by
Adam: its parameters before and after, its batches and losses): see
golden/generator/layouts.py, golden/generator/weights.py and golden/generator/training.py.
Only cases/ holds golden cases.

--check compares every file, in one of two ways (see golden/generator/check.py). What the
generator draws or copies -- case.json, parameters, inputs, masks, the JSON and
safetensors files -- must match byte for byte. What PyTorch computes with floating-point
kernels -- attn_output, attn_output_weights, q, k, v, the gradients grad.*, a decoding
step's static_k and static_v, a training run's losses and final parameters -- must match
in dtype and shape exactly and in value within a few ULPs of the tensor's largest
magnitude: those kernels (OpenBLAS's GEMMs, ATen's vectorised loops) round differently on
different CPUs. (The bound was measured on forward tensors; the gradients, computed by
the same kinds of kernels, are held to it too.)

Seeds are fixed and derived from each case's name, so adding a case changes no other.

PyTorch 2.x (Debian 13's 2.6) runs --check and --out DIR within the differences listed in
docs/15-versions.md, and refuses to rewrite golden/: that needs 1.13.1 (generator/versions.py).
"""

import argparse
import sys
from pathlib import Path

# The golden folder: cases/, layouts/, weights/ and training/, next to this file; the generator
# package is there too, importable from any working directory.
GOLDEN = Path(__file__).resolve().parent
sys.path.insert(0, str(GOLDEN))
# No __pycache__ under golden/: with --out DIR, nothing is written outside DIR.
sys.dont_write_bytecode = True

from generator.check import check
from generator.golden_folder import generate_golden
from generator.versions import GOLDEN_PYTORCH, PYTORCH, is_golden_pytorch
from generator.writers import case_writers


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="A golden folder holds cases/, layouts/, weights/ and training/; golden/ is one.")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--out", type=Path, default=GOLDEN, metavar="DIR",
                        help="the golden folder to write: DIR/cases, DIR/layouts, "
                             "DIR/weights and DIR/training, nothing outside DIR (default: golden/)")
    action.add_argument("--check", type=Path, nargs="?", const=GOLDEN, metavar="DIR",
                        help="regenerate into a temporary folder and compare the golden "
                             "folder DIR with it (default: golden/); exit 1 if they differ")
    parser.add_argument("--case", action="append", metavar="NAME", dest="cases",
                        help="only this case (repeatable); the layouts, weights and "
                             "training run, which are few, are always included")
    args = parser.parse_args()
    unknown = [name for name in args.cases or [] if name not in case_writers()]
    if unknown:
        parser.error(f"--case: no case named {', '.join(unknown)}")
    if args.check is not None:
        return check(args.check, args.cases)
    if args.out.resolve() == GOLDEN and not is_golden_pytorch():
        print(f"generate.py: regenerating golden/ needs PyTorch {GOLDEN_PYTORCH}.1 (Debian 12's "
              f"python3-torch), which made the goldens; this is PyTorch {PYTORCH}. With it, "
              "--check compares golden/ with a regeneration and --out DIR writes elsewhere "
              "(docs/15-versions.md).", file=sys.stderr)
        return 1
    print(f"wrote {generate_golden(args.out, args.cases)} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
