"""bench/debian13_torch.py: PyTorch 2.6, the one in the Debian 13 chroot, as a peer of bench/compare.

scripts/test-debian13 builds a Debian 13 (trixie) root in build/debian13-root, with
trixie's python3-torch (2.6), OpenBLAS 0.3.29 and oneDNN 3.7. bench/compare runs the same
bench/torch_mha.py there as on the host (PyTorch 1.13.1), with the same arguments and the
same OpenBLAS and OpenMP variables, so that the two PyTorches are timed the same way on the
same machine in the same sitting:

    unshare --mount chroot ROOT /usr/bin/env -i VARIABLES /usr/bin/python3 /mnt/torch_mha.py ...

The call runs in a mount namespace of its own, where /proc is mounted into the root and
bench/ bound read-only onto its /mnt; both mounts end with the process, so nothing stays
mounted in the chroot or on the host. Needs root (unshare, mount, chroot).
"""

import os
import shlex
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_ROOT = HERE.parent / "build" / "debian13-root"
PYTHON = "/usr/bin/python3"
# The variables the chroot's python gets (env -i: nothing else of the caller's environment).
PASSED = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "ATEN_CPU_CAPABILITY")


def unavailable(root: Path):
    """Why PyTorch 2.6 cannot be run from `root`, or None when it can."""
    if not (root / "usr" / "bin" / "python3").exists():
        return (f"no Debian 13 root at {root} (scripts/test-debian13 builds it; "
                "--debian13-root names another)")
    if not list((root / "usr" / "lib" / "python3" / "dist-packages").glob("torch/version.py")):
        return f"{root} has no python3-torch (scripts/test-debian13 installs it with scripts/setup)"
    if (blas := reference_blas(root)) is not None:
        return blas
    if os.geteuid() != 0:
        return "running the chroot needs root (unshare, mount and chroot)"
    return None


def reference_blas(root: Path):
    """Why the root's PyTorch would run on a BLAS no user runs it on, or None. Its
    libblas.so.3 is chosen by Debian's alternatives: OpenBLAS when a libopenblas0 package
    is installed (scripts/setup installs one), else the reference BLAS of libblas3, which
    python3-torch alone pulls in and which is many times slower. A peer timed on that
    would be a peer at its worst."""
    links = sorted((root / "etc" / "alternatives").glob("libblas.so.3-*"))
    target = os.readlink(links[0]) if links and links[0].is_symlink() else None
    if target is None or "openblas" not in target:
        return (f"{root}'s libblas.so.3 is {target or 'not installed'}, not OpenBLAS: PyTorch 2.6 would run "
                "on the reference BLAS (install libopenblas0-pthread in the root)")
    return None


def command(root: Path, args, env):
    """The command that runs bench/torch_mha.py ARGS in the chroot at `root`, with the
    variables of PASSED that `env` sets."""
    variables = [f"{k}={env[k]}" for k in PASSED if k in env]
    inner = (["chroot", str(root), "/usr/bin/env", "-i", "HOME=/root", "LANG=C.UTF-8", "PATH=/usr/bin:/bin"]
             + variables + [PYTHON, "/mnt/torch_mha.py"] + list(args))
    script = (f"mount -t proc proc {shlex.quote(str(root / 'proc'))} && "
              f"mount --bind -o ro {shlex.quote(str(HERE))} {shlex.quote(str(root / 'mnt'))} && "
              f"exec {shlex.join(inner)}")
    return ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script]


def run(root: Path, args, env):
    """bench/torch_mha.py ARGS under PyTorch 2.6: its standard output."""
    done = subprocess.run(command(root, args, env), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"bench/torch_mha.py in {root} failed (status {done.returncode}):\n{done.stderr}")
    return done.stdout
