#!/usr/bin/python3
"""Tests of golden/generate.py itself, each run as the user runs it (a subprocess):

    golden_regeneration_test.py hand-edit --generator golden/generate.py
        A copy of one case (with the layouts, weights and training run) passes
        `--check DIR --case NAME` under each ATen CPU capability this CPU runs
        (ATEN_CPU_CAPABILITY=default and avx2: what the generator draws must not depend
        on PyTorch's kernels);
        then four single values are edited, and --check must fail naming exactly those
        four files: the largest value of attn_output, of a layout's attn_output and of a
        trained parameter (training/reverse/final/), each changed by a relative 1e-5
        (computed tensors: compared within a few ULPs of their largest magnitude, so that
        is the value the bound is stated for), and one value of query moved by one ULP
        (drawn tensors: compared byte for byte).

    golden_regeneration_test.py out-dir --generator golden/generate.py
        `--out DIR --case NAME` writes the case, the layouts, the weights and the
        training run under DIR, and nothing else: every file of the golden folder next
        to the generator keeps its bytes and its modification time, and the working
        directory stays empty.

Under PyTorch 2.x both run on the folder that 2.x writes, golden/pytorch-2.6/, which holds
cases/ alone: the edits and the files looked for are those of cases/.

Exit status 0 when the test passes; otherwise 1, with what went wrong.
"""

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

PYTHON = sys.executable      # the test's own: MHA_PYTHON, Debian's /usr/bin/python3
CASE = "self_seqfirst_f32"   # a float32 case: float32 is where a relative 1e-5 is fewest ULPs
RELATIVE_CHANGE = 1e-5
# A parameter after training: its folder (final/), not its name, makes it a computed tensor.
TRAINED = "training/reverse/final/attention.in_proj_weight.npy"


def under_2x() -> bool:
    """Whether the PyTorch of this Python is 2.x, whose golden folder holds cases/ alone."""
    import torch  # only here: the generator, not this test, sets its threads before import
    return int(torch.__version__.split(".")[0]) >= 2


def own_folder(golden: Path) -> Path:
    """The golden folder the PyTorch here writes (golden/generator/versions.py)."""
    return golden / "pytorch-2.6" if under_2x() else golden


def fail(message: str) -> None:
    print(f"FAIL: {message}")
    sys.exit(1)


def run_generator(generator: Path, *args, cwd: Path = None, env: dict = None) -> tuple:
    """(exit status, stdout and stderr) of generate.py with these arguments, and these
    environment variables added."""
    done = subprocess.run([PYTHON, str(generator), *args], cwd=cwd, capture_output=True,
                          text=True, env={**os.environ, **(env or {})})
    return done.returncode, done.stdout + done.stderr


def capabilities() -> list:
    """The values of ATEN_CPU_CAPABILITY this CPU can run: default, and avx2 with AVX2
    and FMA (what PyTorch 1.13 picks by itself on such a CPU)."""
    flags = set()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    return ["default"] + (["avx2"] if {"avx2", "fma"} <= flags else [])


def copy_golden(golden: Path, into: Path) -> None:
    """A golden folder holding one case and all the layouts, weights and training run."""
    shutil.copytree(golden / "cases" / CASE, into / "cases" / CASE)
    for part in () if under_2x() else ("layouts", "weights", "training"):
        shutil.copytree(golden / part, into / part)


def scale_largest_value(path: Path, factor: float) -> None:
    """Multiply the value of largest magnitude by `factor`, in place: the .npy header
    stays as it is, so --check sees a changed value and nothing else."""
    array = np.load(path, mmap_mode="r+")
    index = np.unravel_index(np.argmax(np.abs(array)), array.shape)
    before = array[index]
    array[index] = before * array.dtype.type(factor)
    if array[index] == before:
        fail(f"{path}: multiplying {before!r} by {factor!r} did not change it")
    array.flush()


def move_first_value_one_ulp(path: Path) -> None:
    """The first value of a tensor, moved to the next representable number, in place."""
    array = np.load(path, mmap_mode="r+")
    flat = array.reshape(-1)
    flat[0] = np.nextafter(flat[0], array.dtype.type(np.inf))
    array.flush()


def hand_edit(generator: Path) -> None:
    golden = own_folder(generator.parent)
    with tempfile.TemporaryDirectory(prefix="golden-hand-edit-") as tmp:
        copy = Path(tmp)
        copy_golden(golden, copy)

        for capability in capabilities():
            status, output = run_generator(generator, "--check", str(copy), "--case", CASE,
                                           env={"ATEN_CPU_CAPABILITY": capability})
            if status != 0:
                fail(f"the untouched copy does not pass --check under ATEN_CPU_CAPABILITY="
                     f"{capability} (exit {status}):\n{output}")
            print(f"the untouched copy passes under ATEN_CPU_CAPABILITY={capability}:\n{output}")

        edits = {
            f"cases/{CASE}/attn_output.npy": "ULPs of its largest magnitude",
            f"cases/{CASE}/query.npy": "(must match byte for byte)",
        }
        if not under_2x():
            edits.update({"layouts/gpt2/attn_output.npy": "ULPs of its largest magnitude",
                          TRAINED: "ULPs of its largest magnitude"})
        for computed in (name for name, reason in edits.items() if "ULPs" in reason):
            scale_largest_value(copy / computed, 1 + RELATIVE_CHANGE)
        move_first_value_one_ulp(copy / f"cases/{CASE}/query.npy")

        status, output = run_generator(generator, "--check", str(copy), "--case", CASE)
        print(f"after the edits (exit {status}):\n{output}")
        if status != 1:
            fail(f"--check exited with {status} after the edits, expected 1")
        reported = sorted(line for line in output.splitlines() if line.startswith("differs: "))
        named = sorted(line.split()[1].rstrip(":") for line in reported)
        if named != sorted(edits):
            fail(f"--check named {named}, expected exactly {sorted(edits)}")
        for line in reported:
            expected_reason = edits[line.split()[1].rstrip(":")]
            if expected_reason not in line:
                fail(f"'{line}' does not say '{expected_reason}'")


def snapshot(folder: Path) -> dict:
    """Every file under `folder`: relative path -> (modification time, SHA-256)."""
    return {p.relative_to(folder).as_posix():
            (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}


def out_dir(generator: Path) -> None:
    golden = generator.parent
    before = snapshot(golden)
    problems = []
    with tempfile.TemporaryDirectory(prefix="golden-out-") as tmp:
        out, cwd = Path(tmp) / "out", Path(tmp) / "cwd"
        cwd.mkdir()
        status, output = run_generator(generator, "--out", str(out), "--case", CASE, cwd=cwd)
        print(output)
        if status != 0:
            problems.append(f"--out exited with {status}")
        expected = [f"cases/{CASE}/attn_output.npy"]
        if not under_2x():
            expected += ["layouts/gpt2/layout.json", "layouts/llama/attn_output.npy",
                         "weights/transformer_encoder/model.safetensors",
                         "weights/dtypes/dtypes.safetensors", "training/reverse/loss.npy"]
        for written in expected:
            if not (out / written).is_file():
                problems.append(f"--out did not write {written} into its folder")
        if any(cwd.iterdir()):
            problems.append(f"--out wrote into the working directory: {sorted(p.name for p in cwd.iterdir())}")
    after = snapshot(golden)
    changed = sorted(n for n in before.keys() | after.keys() if before.get(n) != after.get(n))
    if changed:
        problems.append(f"--out wrote {len(changed)} file(s) outside its folder, in {golden}: "
                        f"{changed[:5]}{' ...' if len(changed) > 5 else ''}")
    if problems:
        fail("\n  ".join(problems))
    print(f"nothing outside the --out folder was written: {len(before)} files of {golden} unchanged")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("test", choices=("hand-edit", "out-dir"))
    parser.add_argument("--generator", type=Path, required=True, help="golden/generate.py")
    args = parser.parse_args()
    {"hand-edit": hand_edit, "out-dir": out_dir}[args.test](args.generator.resolve())
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
