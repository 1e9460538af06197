"""The golden generator behind golden/generate.py, one idea per module:

    cases.py          the case tables: Case, Rejection, Extreme; CASES, REJECTIONS,
                      EXTREME_CASES, BACKWARD_CASES
    draws.py          random draws that are the same under every CPU kernel; seeds
    case_tensors.py   a case's module, inputs and masks, drawn from its seed
    runner.py         running PyTorch: slow path only, its own q, k, v, and the checks
    backward.py       the backward cases: PyTorch's dropout mask and gradients
    functional.py     the version-3 cases: calls of F.multi_head_attention_forward,
                      FUNCTIONAL_CASES and FUNCTIONAL_REJECTIONS, drawn, run and written
    files.py          .npy and JSON files, and the folders that hold them
    writers.py        case folders: numeric, rejection and extreme-value cases
    layouts.py        golden/layouts/: other models' weight layouts
    weights.py        golden/weights/: a TransformerEncoder as safetensors, F16/BF16 data
    training.py       golden/training/: a small model's first steps of training by Adam
    golden_folder.py  a whole golden folder: cases/, layouts/, weights/ and training/
    check.py          --check: regenerate and compare, byte for byte or within MAX_ULPS
    versions.py       the generation of the PyTorch here (1.13 or 2.x), and its golden folder
    generations.py    the cases where PyTorch 1.13 and 2.x differ, written by each
"""

import os

# One thread everywhere: BLAS and PyTorch sum in a different order with more threads,
# and the last bits of the goldens would then depend on the machine.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

# Imported only now: OpenBLAS reads the variables above when it is loaded.
import torch

torch.set_num_threads(1)
