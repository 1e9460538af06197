"""The files of a golden folder: .npy tensors, JSON documents, and the folders that hold
them (made anew on each run, stale ones removed)."""

import json
import shutil
from pathlib import Path

import numpy as np
import torch

# The "format" of case.json, layout.json and model.json: the version of golden/FORMAT.md.
FORMAT_VERSION = 1

ALLOWED_NPY_DTYPES = {"<f4", "<f8", "|b1", "<i4", "|u1"}


def save_npy(folder: Path, name: str, tensor: torch.Tensor) -> None:
    array = np.ascontiguousarray(tensor.detach().cpu().numpy())
    assert array.dtype.str in ALLOWED_NPY_DTYPES, (name, array.dtype.str)
    np.save(folder / f"{name}.npy", array, allow_pickle=False)


def write_json(path: Path, document: dict) -> None:
    """The document as JSON, indented by 2, with a final newline."""
    path.write_text(json.dumps(document, indent=2) + "\n")


def new_folder(path: Path) -> Path:
    """An empty folder at `path`, replacing the one an earlier run wrote there."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def remove_stale_folders(out: Path, marker: str) -> None:
    """Delete every folder in `out` that holds `marker` (case.json, layout.json): what an
    earlier run wrote, including cases or layouts that no longer exist. Nothing else in
    `out` is touched, so --out may point at a folder that holds other things too."""
    for child in sorted(out.iterdir()):
        if child.is_dir() and (child / marker).exists():
            shutil.rmtree(child)
