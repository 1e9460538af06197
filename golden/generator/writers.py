"""Writing case folders (golden/cases/<name>/): case.json, the parameters and inputs as
.npy files, and, for a numeric case, what PyTorch returned. A rejection case has no
outputs; an extreme case is a numeric case whose drawn inputs get one extreme value. The
version-3 cases (calls of the functional form) are written by functional.py, and listed
here with the others."""

import functools
from pathlib import Path
from typing import Callable, Optional

import torch

from .case_tensors import make_tensors
from .backward import run_backward_case
from .cases import (BACKWARD_CASES, CASES, DTYPE_NAME, EXTREME_CASES, REJECTIONS, Case,
                    Rejection)
from .files import new_folder, remove_stale_folders, save_npy, write_json
from .functional import FUNCTIONAL_CASES, FUNCTIONAL_REJECTIONS, functional_writers
from .generations import (GENERATION_CASES, GENERATION_FUNCTIONAL_CASES,
                          GENERATION_FUNCTIONAL_REJECTIONS, GENERATION_REJECTIONS)
from .runner import check_torch_rejects, pytorch_path, run_case
from .versions import generation, is_2x, is_golden_pytorch


def save_parameters(folder: Path, mha: torch.nn.MultiheadAttention) -> None:
    """PyTorch's own parameter names: in_proj_weight, out_proj.weight, bias_k, ..."""
    for name, p in mha.named_parameters():
        save_npy(folder, name, p)


def save_inputs(folder: Path, tensors: dict) -> None:
    for name in ("query", "key", "value", "key_padding_mask", "attn_mask"):
        if tensors[name] is not None:
            save_npy(folder, name, tensors[name])


def case_document(case: Case, module: dict, forward: dict, tensors: dict,
                  expect_error: bool, facts: Optional[dict] = None) -> dict:
    """What case.json holds: the options of the call and how its inputs relate; in
    format 2, the gradients' tolerance too. Under 2.x, the generation ("pytorch"); under
    2.x or with grad disabled, what PyTorch did and the warnings it gave (`facts`)."""
    document = {"format": case.format}
    if not is_golden_pytorch():
        document["pytorch"] = generation()
    document.update({
        "description": case.description,
        "dtype": DTYPE_NAME[case.dtype],
        "module": module,
        "forward": forward,
        "tolerance": case.tolerance,
        "expect_error": expect_error,
        # Our own field: was forward called with the same tensor object? (The packed
        # in-projection takes a different route for self- and encoder-decoder attention.)
        "inputs": {"query_is_key": tensors["query"] is tensors["key"],
                   "key_is_value": tensors["key"] is tensors["value"]},
    })
    if case.backward:
        document["backward"] = {"tolerance": case.backward_tolerance}
    if case.generations_differ:
        document["generations_differ"] = True
    if facts is not None and (not is_golden_pytorch() or not case.grad_enabled
                              or case.generations_differ or facts["pytorch_warnings"]):
        document.update(facts)
    return document


def write_case_inputs(out: Path, case: Case, document: dict, mha, tensors: dict) -> Path:
    """A new folder for the case holding case.json, the parameters and the inputs:
    everything but what PyTorch returned. Returns the folder."""
    folder = new_folder(out / case.name)
    write_json(folder / "case.json", document)
    save_parameters(folder, mha)
    save_inputs(folder, tensors)
    return folder


def write_case(out: Path, case: Case, alter: Optional[Callable[[dict], None]] = None) -> None:
    """A numeric case: its inputs and what PyTorch returned for them. alter, when given,
    changes the drawn inputs before PyTorch runs (an extreme case's poke)."""
    mha, tensors, outputs, qkv, facts = run_case(case, alter)
    document = case_document(case, case.module_options(), case.forward_options(), tensors,
                             expect_error=False, facts=facts)
    folder = write_case_inputs(out, case, document, mha, tensors)
    for name, tensor in {**outputs, **qkv}.items():
        save_npy(folder, name, tensor)


def write_backward_case(out: Path, case: Case) -> None:
    """A format-2 case: a numeric case, plus the upstream gradients, the dropout mask
    PyTorch drew (in training) and PyTorch's gradients (backward.py)."""
    mha, tensors, outputs, qkv, written = run_backward_case(case)
    facts = {"pytorch_path": pytorch_path(case, fast_path_taken=False),
             "pytorch_warnings": written.pop("pytorch_warnings")}
    document = case_document(case, case.module_options(), case.forward_options(), tensors,
                             expect_error=False, facts=facts)
    folder = write_case_inputs(out, case, document, mha, tensors)
    for name, tensor in {**outputs, **qkv, **written}.items():
        save_npy(folder, name, tensor)


def write_rejection(out: Path, rejection: Rejection) -> None:
    """A rejection case: the valid base case's tensors, broken by its defect, and its
    options with the overrides; no outputs. Where PyTorch 1.13 rejects it too, that is
    checked first."""
    case = rejection.case
    mha, tensors = make_tensors(case, rejection.defect)
    if rejection.torch_rejects or is_2x():  # 2.x rejects every rejection case
        check_torch_rejects(rejection, mha, tensors)
    document = case_document(case, rejection.module_options(), rejection.forward_options(),
                             tensors, expect_error=True)
    write_case_inputs(out, case, document, mha, tensors)


def written_here(generations: tuple) -> bool:
    """Whether the PyTorch here writes a case of these generations ("1.13", "2.x")."""
    return ("2.x" if is_2x() else generation()) in generations


def case_writers() -> dict:
    """Every golden case that the PyTorch here writes, by name, with the function that
    writes it: name -> write(out). The cases of generations.py come after the others."""
    cases = [c for c in CASES + GENERATION_CASES if written_here(c.generations)]
    rejections = [r for r in REJECTIONS + GENERATION_REJECTIONS if written_here(r.generations)]
    writers = [(c.name, functools.partial(write_case, case=c)) for c in cases]
    writers += [(r.name, functools.partial(write_rejection, rejection=r)) for r in rejections]
    writers += [(x.case.name, functools.partial(write_case, case=x.case, alter=x.poke))
                for x in EXTREME_CASES]
    writers += [(c.name, functools.partial(write_backward_case, case=c)) for c in BACKWARD_CASES]
    writers += functional_writers(
        [s for s in FUNCTIONAL_CASES + GENERATION_FUNCTIONAL_CASES if written_here(s.generations)],
        [r for r in FUNCTIONAL_REJECTIONS + GENERATION_FUNCTIONAL_REJECTIONS
         if written_here(r.generations)])
    assert len(writers) == len(dict(writers)), "case names must be unique"
    return dict(writers)


def generate_cases(out: Path, names: Optional[list] = None) -> int:
    """Write the cases called `names` (all cases when None) into `out`. Each case draws
    from its own seed, so a case written alone is the same as written with the others."""
    writers = case_writers()
    out.mkdir(parents=True, exist_ok=True)
    if names is None:
        names = list(writers)
        remove_stale_folders(out, "case.json")
    for name in names:
        writers[name](out)
    return len(names)
