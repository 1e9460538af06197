"""The PyTorch that runs the generator, and the generation of cases it writes.

PyTorch 1.13.1 and PyTorch 2.x compute some calls differently (docs/15-versions.md: a fully
masked row through scaled_dot_product_attention, the is_causal hint, uint8 and
mismatched masks, the native fast path). Each generation writes its own golden cases,
marked as ../shared/golden-format.md says:

  1.13  golden/: cases/, layouts/, weights/, training/, written by Debian 12's
        python3-torch (whose torch.__version__ reads 1.13.0a0); case.json has no
        "pytorch" field, which means "1.13";
  2.6   golden/pytorch-2.6/cases/, written by Debian 13's python3-torch 2.6; every
        case.json says "pytorch": "2.6".

A run writes and checks the folder of its own generation: golden/generate.py under 1.13
rewrites golden/, under 2.6 golden/pytorch-2.6/. Another version has no folder here: it
may write --out DIR, and --check names what it would need.
"""

from pathlib import Path

import torch

GOLDEN_PYTORCH = "1.13"             # the generation of golden/ itself (no "pytorch" field)
GENERATIONS = ("1.13", "2.6")       # the generations that have a golden folder here
PYTORCH = torch.__version__         # the PyTorch here


def generation() -> str:
    """The major.minor version of the PyTorch here: "1.13" for "1.13.0a0", "2.6" for "2.6.0"."""
    return ".".join(PYTORCH.split("+")[0].split(".")[:2])


def is_golden_pytorch() -> bool:
    """True when the PyTorch here is 1.13, the generation of golden/ itself."""
    return generation() == GOLDEN_PYTORCH


def is_2x() -> bool:
    """True under PyTorch 2.x: the is_causal argument, _canonical_mask, SDPA."""
    return int(generation().split(".")[0]) >= 2


def generation_folder(golden: Path, version: str) -> Path:
    """Where the golden files of `version` live: golden/ for 1.13, golden/pytorch-<v>/ else."""
    return golden if version == GOLDEN_PYTORCH else golden / f"pytorch-{version}"


def describe_pytorch() -> str:
    """The PyTorch here, and the generation of cases it writes."""
    return f"PyTorch {PYTORCH}, which writes the cases of PyTorch {generation()}"
