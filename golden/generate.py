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
                                        # training/ (under 2.6: golden/pytorch-2.6/cases/)
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

Each generation of PyTorch writes its own cases (generator/versions.py, docs/15-versions.md):
PyTorch 1.13.1 (Debian 12) golden/ itself, PyTorch 2.6 (Debian 13) golden/pytorch-2.6/,
whose cases say "pytorch": "2.6". Without DIR, --out and --check mean the folder of the
PyTorch that runs them. --generation V with --check checks only under PyTorch V: under
another it says why it is skipped and exits 77 (CTest's SKIP_RETURN_CODE).
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
from generator.versions import GENERATIONS, PYTORCH, generation, generation_folder
from generator.writers import case_writers


# The exit status of a check that cannot run under the PyTorch here (CTest: skipped).
SKIPPED = 77


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="A golden folder holds cases/, layouts/, weights/ and training/; golden/ is one.")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--out", type=Path, metavar="DIR",
                        help="the golden folder to write: DIR/cases, DIR/layouts, "
                             "DIR/weights and DIR/training, nothing outside DIR (default: the "
                             "folder of the PyTorch here, golden/ or golden/pytorch-2.6/)")
    action.add_argument("--check", type=Path, nargs="?", const=True, metavar="DIR",
                        help="regenerate into a temporary folder and compare the golden "
                             "folder DIR with it (default: the PyTorch here's); exit 1 if they differ")
    parser.add_argument("--generation", choices=GENERATIONS, metavar="VERSION",
                        help="with --check: check only under PyTorch VERSION (1.13 or 2.6), "
                             f"else say so and exit {SKIPPED}")
    parser.add_argument("--case", action="append", metavar="NAME", dest="cases",
                        help="only this case (repeatable); the layouts, weights and "
                             "training run, which are few, are always included")
    args = parser.parse_args()
    unknown = [name for name in args.cases or [] if name not in case_writers()]
    if unknown:
        parser.error(f"--case: no case named {', '.join(unknown)}")
    if args.generation is not None and args.check is None:
        parser.error("--generation goes with --check")
    if args.generation is not None and args.generation != generation():
        print(f"skipped: the golden cases of PyTorch {args.generation} are checked under "
              f"PyTorch {args.generation}; this is PyTorch {PYTORCH} "
              "(scripts/test-debian13 runs PyTorch 2.6)")
        return SKIPPED
    own = generation_folder(GOLDEN, generation()) if generation() in GENERATIONS else None
    target = args.out if args.out is not None else args.check if isinstance(args.check, Path) else own
    if target is None:
        print(f"generate.py: PyTorch {PYTORCH} has no golden folder here (only "
              f"{', '.join(GENERATIONS)}: docs/15-versions.md); name one with --out DIR or "
              "--check DIR", file=sys.stderr)
        return 1
    others = [v for v in GENERATIONS if v != generation()
              and generation_folder(GOLDEN, v).resolve() == target.resolve()]
    if others and args.check is None:
        print(f"generate.py: {target} holds the cases of PyTorch {others[0]}, which only "
              f"PyTorch {others[0]} rewrites; this is PyTorch {PYTORCH}", file=sys.stderr)
        return 1
    if args.check is not None:
        return check(target, args.cases)
    print(f"wrote {generate_golden(target, args.cases)} to {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
