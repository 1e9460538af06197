"""The PyTorch that runs the generator: 1.13.1 made the goldens, 2.x can check them.

golden/ holds what PyTorch 1.13.1 computed (Debian 12's python3-torch, whose
torch.__version__ reads 1.13.0a0). PyTorch 2.x (Debian 13 has 2.6) draws the same inputs,
computes the same tensors within --check's bound and rejects the same broken calls, but
words one rejection differently (FunctionalRejection.error_2x; docs/15-versions.md lists the
differences). So under 2.x:

  --check and --out DIR work: where 2.x words a rejection differently, its message must
  hold error_2x, and the case records 1.13.1's message, as golden/ does;
  writing golden/ itself is refused: the goldens are regenerated with 1.13.1 only.
"""

import torch

GOLDEN_PYTORCH = "1.13"
PYTORCH = torch.__version__  # the PyTorch here


def is_golden_pytorch() -> bool:
    """True when the PyTorch here is 1.13, the version that made golden/."""
    return PYTORCH.startswith(GOLDEN_PYTORCH + ".")


def describe_pytorch() -> str:
    """The PyTorch here, and how it stands to the goldens' version."""
    if is_golden_pytorch():
        return f"PyTorch {PYTORCH}, the goldens' own version"
    return (f"PyTorch {PYTORCH}, not {GOLDEN_PYTORCH}.1 which made the goldens: "
            "within the differences of docs/15-versions.md")
