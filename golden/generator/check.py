"""--check: regenerate a golden folder into a temporary folder, then compare a given one
with it file by file, byte for byte or, for what PyTorch computes, within a bound in ULPs."""

import dataclasses
import filecmp
import math
import tempfile
from pathlib import Path
from typing import Optional

import numpy as np

from .functional import computed_inputs
from .golden_folder import generate_golden, golden_parts
from .versions import describe_pytorch

# A file is compared in one of two ways, decided by how this generator makes it.
#
# Byte for byte: everything the generator draws from a seeded generator, copies,
# permutes, casts or writes as text -- case.json, layout.json, model.json, training.json,
# the parameters, inputs and masks, the layouts' permuted weights, both safetensors files
# (parameters and dtype casts only), a training run's initial parameters and batches.
# Those bits depend on no CPU kernel: nothing in them passes through OpenBLAS, and every
# random value is drawn as randn() and uniform() draw it, the same under every ATen
# capability (see draws.py).
#
# Within a bound: the tensors PyTorch computes with floating-point kernels, named in
# COMPUTED_TENSORS. Their GEMMs run in OpenBLAS, whose kernel (chosen per CPU, or by
# OPENBLAS_CORETYPE) sums in its own order; softmax and the element-wise steps run in
# ATen's vectorised loops (chosen per CPU, or by ATEN_CPU_CAPABILITY). Both are
# deterministic on one machine but round differently on another.

# File stems (without .npy) of the tensors that write_case (extreme cases included),
# write_functional, write_layout, write_transformer_encoder and write_reverse (the losses
# of a training run) compute; every other file is exact.
COMPUTED_TENSORS = {"attn_output", "attn_output_weights", "q", "k", "v",
                    "layers.0.self_attn.attn_output", "loss"}
# The gradients of the backward cases (grad.query, grad.in_proj_weight, ...) are computed
# too; grad_attn_output and grad_attn_output_weights, drawn, are not.
COMPUTED_PREFIX = "grad."
# Folders whose tensors are all computed: a training run's parameters after its last step
# (training/reverse/final/); its initial/ parameters are drawn, so exact.
COMPUTED_FOLDERS = {"final"}
# Inputs that PyTorch computed, by path under cases/: a decoding step's static_k and
# static_v, its in-projection of the whole sequence (functional.computed_inputs). The
# static_k and static_v of the other cases are drawn, so exact.
COMPUTED_CASE_FILES = computed_inputs()

# The bound: |generated - file| <= MAX_ULPS * ulp(max |generated|), elementwise, the ulp
# taken in the tensor's own dtype (np.spacing). Why 8: across the kernels that could be
# run on the machine where this was measured (OpenBLAS's Prescott, Sandybridge, Haswell
# and Zen, each with ATen's default and AVX2 loops: 8 combinations, 28 pairs), the
# largest distance between two of them is 4 ULPs (extreme_1e30_in_query_f32/attn_output,
# default against AVX2 loops; layouts/megatron_v2/attn_output, Prescott against
# Haswell); 98% of the computed tensors differ by at most 2. 8 is twice that, left for
# kernels that could not be run there (OpenBLAS's SkylakeX needs AVX-512). It stays
# tight: a float32 value changed by a relative 1e-5 moves by 84 to 168 of its own ULPs,
# so the bound catches that change in any value of at least a tenth of the tensor's
# largest magnitude (tests/golden_regeneration_test.py changes the largest value and
# expects a failure). The training run's final parameters went through 20 steps of
# forward, backward and Adam, and stay within it: across OpenBLAS's Prescott, Haswell and
# SkylakeX with ATen's default and AVX2 loops (6 combinations, 15 pairs) the largest
# distance is 5 ULPs (final/attention.in_proj_weight), and 1 for the losses. (That model's
# attention has no biases: the key bias's gradient is zero but for round-off, and Adam,
# which divides a gradient by its own size, turned that round-off into differences of a
# million ULPs between two kernels.)
MAX_ULPS = 8


@dataclasses.dataclass
class Comparison:
    """What comparing a fresh golden folder with a given one found."""
    problems: list = dataclasses.field(default_factory=list)   # one line per bad file
    exact_files: int = 0          # files compared byte for byte
    computed_tensors: int = 0     # tensors compared within the bound
    inexact_tensors: int = 0      # ... of which not bit for bit identical
    largest: tuple = (0.0, "")    # (distance in ULPs, file) of the farthest tensor

    def add_distance(self, distance: float, name: str) -> None:
        self.computed_tensors += 1
        self.inexact_tensors += distance > 0
        if distance > self.largest[0] or not self.largest[1]:
            self.largest = (distance, name)


def read_npy(path: Path) -> tuple:
    """(header, array, trailing bytes): the bytes before the data (magic, version, dtype,
    order and shape), the data, and whatever follows it (nothing, in a good file)."""
    with open(path, "rb") as f:
        array = np.lib.format.read_array(f, allow_pickle=False)
        end = f.tell()
        trailing = f.read()
    header = path.read_bytes()[:end - array.nbytes]
    return header, array, trailing


def ulp_distance(expected: np.ndarray, got: np.ndarray) -> tuple:
    """(distance, index): the largest |got - expected| over the finite entries, in ULPs of
    the largest finite |expected|, and where it is. A NaN or +-inf must be the same in
    both (NaN equal to NaN); where it is not, the distance is inf."""
    nonfinite = ~np.isfinite(expected) | ~np.isfinite(got)
    same = (expected == got) | (np.isnan(expected) & np.isnan(got))
    if (nonfinite & ~same).any():
        return math.inf, np.unravel_index(np.argmax(nonfinite & ~same), expected.shape)
    finite = ~nonfinite
    if not finite.any():
        return 0.0, None
    # The unit: the gap between the largest magnitude and the next value of the dtype.
    unit = float(np.spacing(np.abs(expected[finite]).max()))
    difference = np.zeros(expected.shape)  # float64: a float32 difference cannot overflow
    difference[finite] = np.abs(got[finite].astype(np.float64) -
                                expected[finite].astype(np.float64))
    index = np.unravel_index(np.argmax(difference), expected.shape)
    return float(difference[index]) / unit, index


def compare_computed_tensor(fresh: Path, given: Path, name: str, found: Comparison) -> None:
    """A tensor PyTorch computed: the same header (dtype, shape) and bytes after it, and
    values within MAX_ULPS of the freshly generated ones. The unit comes from the fresh
    tensor, so an edited file cannot widen its own bound."""
    expected_header, expected, _ = read_npy(fresh)
    try:
        header, got, trailing = read_npy(given)
    except ValueError as error:
        found.problems.append(f"differs: {name}: not a readable .npy file ({error})")
        return
    if header != expected_header or trailing:
        found.problems.append(f"differs: {name}: {got.dtype.str} {got.shape}, generated "
                              f"{expected.dtype.str} {expected.shape} (header or size differs)")
        return
    distance, index = ulp_distance(expected, got)
    if distance > MAX_ULPS:
        what = ("NaN or inf not matched" if math.isinf(distance) else
                f"{distance:.4g} ULPs of its largest magnitude (bound {MAX_ULPS})")
        found.problems.append(f"differs: {name}: {what} at {tuple(int(i) for i in index)}: "
                              f"generated {expected[index]!r}, the file holds {got[index]!r}")
        return
    found.add_distance(distance, name)


def relative_files(root: Path) -> set:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def by_folder(names: set, other: Path) -> list:
    """The relative file names, sorted; the files of a top-level folder that `other` lacks
    as a whole are named once, as that folder ("bert/"), not file by file."""
    named = set()
    for name in names:
        top = name.split("/")[0]
        whole_folder = "/" in name and not (other / top).exists()
        named.add(top + "/" if whole_folder else name)
    return sorted(named)


def compare_folders(fresh: Path, given: Path, prefix: str, found: Comparison,
                    only: Optional[list] = None, computed_files: frozenset = frozenset()) -> None:
    """Every file of `given` against the freshly generated `fresh`: none missing, none
    extra, each equal byte for byte or, for a computed tensor, within the bound. With
    `only`, just the files under those top-level folders (cases, by name);
    computed_files names further computed tensors by their path under `fresh`."""
    expected = relative_files(fresh)
    present = relative_files(given) if given.is_dir() else set()
    if only is not None:
        expected = {n for n in expected if n.split("/")[0] in only}
        present = {n for n in present if n.split("/")[0] in only}
    found.problems += [f"missing: {prefix}{n}" for n in by_folder(expected - present, given)]
    found.problems += [f"extra: {prefix}{n}" for n in by_folder(present - expected, fresh)]
    for n in sorted(expected & present):
        stem, folder = Path(n).name[:-len(".npy")], Path(n).parent.name
        computed = (stem in COMPUTED_TENSORS or stem.startswith(COMPUTED_PREFIX)
                    or folder in COMPUTED_FOLDERS or n in computed_files)
        if n.endswith(".npy") and computed:
            compare_computed_tensor(fresh / n, given / n, prefix + n, found)
        elif filecmp.cmp(fresh / n, given / n, shallow=False):
            found.exact_files += 1
        else:
            found.problems.append(f"differs: {prefix}{n} (must match byte for byte)")


def compare_golden(fresh: Path, given: Path, case_names: Optional[list]) -> Comparison:
    """Two golden folders, part by part; with case_names, only those cases of cases/
    (layouts/, weights/ and training/, which only 1.13 writes, are always compared whole)."""
    found = Comparison()
    compare_folders(fresh / "cases", given / "cases", "cases/", found, only=case_names,
                    computed_files=COMPUTED_CASE_FILES)
    for part in golden_parts()[1:]:
        compare_folders(fresh / part, given / part, f"{part}/", found)
    return found


def print_agreement(found: Comparison) -> None:
    """What agreed: the exact files, the computed tensors, and the largest distance."""
    distance, name = found.largest
    print(f"  {found.exact_files} files match byte for byte, {found.computed_tensors} computed "
          f"tensors within {MAX_ULPS} ULPs of their largest magnitude "
          f"({found.inexact_tensors} of them not bit for bit)\n"
          f"  largest distance: {distance:.2f} ULPs, {name or '(no computed tensor)'}")


def check(given: Path, case_names: Optional[list]) -> int:
    """Regenerate into a temporary folder and compare `given` with it; 0 when they agree."""
    with tempfile.TemporaryDirectory(prefix="golden-check-") as tmp:
        written = generate_golden(Path(tmp), case_names)
        found = compare_golden(Path(tmp), given, case_names)
    for line in found.problems:
        print(line)
    if found.problems:
        print_agreement(found)
        print(f"{given} does not regenerate from golden/generate.py: "
              f"{len(found.problems)} difference(s), with {describe_pytorch()}")
        return 1
    print(f"{given} regenerates from golden/generate.py ({written}):")
    print_agreement(found)
    print(f"  with {describe_pytorch()}")
    return 0
