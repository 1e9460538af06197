#!/usr/bin/python3
"""tests/debian13_torch_test.py: bench/compare times PyTorch 2.6 only on OpenBLAS.

python3-torch alone, in a Debian 13 root, pulls in the reference BLAS (libblas3), many
times slower than OpenBLAS; a comparison against it would be against PyTorch at its worst.
bench/debian13_torch.py's reference_blas() reads which libblas.so.3 Debian's alternatives
chose in the root. This test builds fake roots: one whose alternative is OpenBLAS (no
reason given), one whose alternative is the reference BLAS and one with none (each refused,
with the library named).

    tests/debian13_torch_test.py
"""
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import debian13_torch  # noqa: E402


def fake_root(base: Path, target):
    """A root whose /etc/alternatives/libblas.so.3-x86_64-linux-gnu points at target."""
    alternatives = base / "etc" / "alternatives"
    alternatives.mkdir(parents=True)
    if target is not None:
        os.symlink(target, alternatives / "libblas.so.3-x86_64-linux-gnu")
    return base


def main():
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        openblas = fake_root(Path(tmp) / "openblas", "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3")
        reference = fake_root(Path(tmp) / "reference", "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3")
        none = fake_root(Path(tmp) / "none", None)
        if (why := debian13_torch.reference_blas(openblas)) is not None:
            failures.append(f"a root on OpenBLAS was refused: {why}")
        why = debian13_torch.reference_blas(reference)
        if why is None or "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3" not in why or "not OpenBLAS" not in why:
            failures.append(f"a root on the reference BLAS was not refused with the library named: {why}")
        why = debian13_torch.reference_blas(none)
        if why is None or "not installed" not in why:
            failures.append(f"a root without libblas.so.3 was not refused: {why}")
    for f in failures:
        print("FAIL", f)
    print("OK" if not failures else f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
