"""A whole golden folder: cases/, layouts/, weights/ and training/, written together.

Under PyTorch 1.13 all four (golden/ itself); under 2.x the cases alone
(golden/pytorch-2.6/cases/): the layouts, weights and training run are drawn or computed
the same by both generations, within --check's bound, and stay 1.13's (versions.py)."""

from pathlib import Path
from typing import Optional

from .layouts import generate_layouts
from .training import generate_training
from .versions import is_golden_pytorch
from .weights import generate_weights
from .writers import generate_cases

# The parts of a golden folder that each generation writes.
PARTS_1_13 = ("cases", "layouts", "weights", "training")
PARTS_2X = ("cases",)


def golden_parts() -> tuple:
    """The parts of a golden folder that the PyTorch here writes."""
    return PARTS_1_13 if is_golden_pytorch() else PARTS_2X


def generate_golden(root: Path, case_names: Optional[list] = None) -> str:
    """Write a golden folder: root/cases, and under 1.13 root/layouts, root/weights,
    root/training; nothing outside root. Returns what was written, for the user."""
    cases = generate_cases(root / "cases", case_names)
    if not is_golden_pytorch():
        return f"{cases} cases"
    layouts = generate_layouts(root / "layouts")
    weights = generate_weights(root / "weights")
    training = generate_training(root / "training")
    return f"{cases} cases, {layouts} layouts, {weights} weight sets, {training} training run"
