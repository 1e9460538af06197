"""A whole golden folder: cases/, layouts/, weights/ and training/, written together."""

from pathlib import Path
from typing import Optional

from .layouts import generate_layouts
from .training import generate_training
from .weights import generate_weights
from .writers import generate_cases


def generate_golden(root: Path, case_names: Optional[list] = None) -> str:
    """Write a golden folder: root/cases, root/layouts, root/weights, root/training;
    nothing outside root.
    Returns what was written, for the user."""
    cases = generate_cases(root / "cases", case_names)
    layouts = generate_layouts(root / "layouts")
    weights = generate_weights(root / "weights")
    training = generate_training(root / "training")
    return f"{cases} cases, {layouts} layouts, {weights} weight sets, {training} training run"
