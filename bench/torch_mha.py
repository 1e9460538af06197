"""The peer of mha-bench: torch.nn.MultiheadAttention on the CPU, timed the same way.

    /usr/bin/python3 bench/torch_mha.py --threads N [--quick] [--shapes L,N,E,H ...] [--batch-first-too]
    /usr/bin/python3 bench/torch_mha.py --threads N --config

Self-attention (query is key is value), sequence-first (batch_first=False, the default),
float32. The forward: eval mode, under torch.no_grad(), need_weights True and False; with
--batch-first-too also with batch_first=True, fed (N, L, E), where PyTorch takes its native
fast path (torch._native_multi_head_attention) when its conditions hold: each forward row
says which layout it ran ("batch_first") and whether the fast path ran ("fast_path",
observed on one call before the timing). The
backward (rows with "backward": true): one forward in training mode (dropout 0,
need_weights=False) with x requiring its gradient, outside the timing; then autograd's
backward alone, torch.autograd.grad of loss = sum(attn_output * grad) for x and every
parameter, as mha-bench's mha_backward. A training step (rows with "train_step": true):
module.train(); out = mha(x, x, x, need_weights=False)[0]; then torch.autograd.grad for x
and every parameter, both timed, as mha-bench's mha_train_step. Each sample times a batch of calls long enough to
be measured (at least 20 ms, 5 ms with --quick); the result is the median over samples,
per call, in milliseconds. Prints one JSON list on stdout.
torch.set_num_threads(N) does not reach the OpenBLAS that Debian's torch calls for its
GEMMs; bench/compare runs this script with OPENBLAS_NUM_THREADS=N for that.
--config prints, as one JSON object, what this torch runs on after set_num_threads(N): its
version, the BLAS and oneDNN it was built with and the CPU capability it uses
(torch.__config__), its threads (ATen's, OpenMP's), and the BLAS library loaded into the
process, with OpenBLAS's own build, core and thread count where that library is OpenBLAS.
"""
import argparse
import ctypes
import json
import os
import re
import statistics
import time

import torch

BENCHMARK_SHAPES = [(16, 2, 64, 4), (128, 8, 512, 8), (512, 4, 768, 12), (1024, 1, 1024, 16)]


def time_call(call, min_sample_s, samples):
    start = time.perf_counter()  # warm-up, at least 0.1 s: allocations, thread pools, caches
    while time.perf_counter() - start < 0.1:
        call()
    inner = 1
    while True:
        start = time.perf_counter()
        for _ in range(inner):
            call()
        elapsed = time.perf_counter() - start
        if elapsed >= min_sample_s:
            break
        inner *= 2
    times = [elapsed / inner]
    for _ in range(samples - 1):
        start = time.perf_counter()
        for _ in range(inner):
            call()
        times.append((time.perf_counter() - start) / inner)
    return statistics.median(times) * 1e3


def takes_fast_path(call):
    """Whether one call of the module runs torch._native_multi_head_attention, the native
    fast path, which MultiheadAttention.forward looks up on the torch module at each call."""
    native = torch._native_multi_head_attention
    ran = []

    def counted(*a, **k):
        ran.append(True)
        return native(*a, **k)

    torch._native_multi_head_attention = counted
    try:
        call()
    finally:
        torch._native_multi_head_attention = native
    return bool(ran)


def loaded_blas():
    """The BLAS library in this process (the file that libblas.so.3 resolved to), and, when
    it is OpenBLAS, its build line, the core it chose and its thread count."""
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "/" in line}
    blas = sorted(p for p in paths if re.search(r"/lib(open)?blas[^/]*\.so", p))
    if not blas:
        return {"library": None}
    out = {"library": os.path.realpath(blas[0])}
    lib = ctypes.CDLL(blas[0])
    if hasattr(lib, "openblas_get_config"):
        lib.openblas_get_config.restype = ctypes.c_char_p
        lib.openblas_get_corename.restype = ctypes.c_char_p
        out["openblas"] = {"config": lib.openblas_get_config().decode().strip(),
                           "core": lib.openblas_get_corename().decode(),
                           "threads": lib.openblas_get_num_threads()}
    return out


def config():
    """What this torch reports of itself (torch.__config__), and the BLAS it loaded."""
    shown, parallel = torch.__config__.show(), torch.__config__.parallel_info()

    def found(pattern, text):
        m = re.search(pattern, text)
        return m.group(1).strip() if m else None

    return {"torch_version": torch.__version__,
            "blas_info": found(r"BLAS_INFO=([^,]*)", shown),
            "onednn": found(r"Intel\(R\) (?:MKL-DNN|oneDNN) (v[^ ]*)", shown),
            "cpu_capability": found(r"CPU capability usage: (\S+)", shown),
            "aten_threads": torch.get_num_threads(),
            "interop_threads": torch.get_num_interop_threads(),
            "omp_max_threads": int(found(r"omp_get_max_threads\(\) : (\d+)", parallel) or 0) or None,
            "parallel_backend": found(r"ATen parallel backend: (.*)", parallel),
            "environment": {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                           "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")},
            **loaded_blas()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--shapes", nargs="*", help="L,N,E,H each (default: the benchmark's four)")
    parser.add_argument("--batch-first-too", action="store_true",
                        help="time the forward with batch_first=True too (the native fast path's layout)")
    parser.add_argument("--config", action="store_true",
                        help="print the BLAS, oneDNN and threads this torch runs on, and exit")
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes] if args.shapes else BENCHMARK_SHAPES

    torch.set_num_threads(args.threads)
    if args.config:
        print(json.dumps(config()))
        return
    torch.manual_seed(0)
    min_sample_s, samples = (0.005, 3) if args.quick else (0.02, 7)
    rows = []
    with torch.no_grad():
        for batch_first in (False, True) if args.batch_first_too else (False,):
            for L, N, E, H in shapes:
                module = torch.nn.MultiheadAttention(E, H, batch_first=batch_first).eval()
                x = torch.randn(N, L, E) if batch_first else torch.randn(L, N, E)
                for need_weights in (True, False):
                    def call():
                        return module(x, x, x, need_weights=need_weights)
                    fast_path = takes_fast_path(call)
                    ms = time_call(call, min_sample_s, samples)
                    rows.append({"L": L, "N": N, "E": E, "H": H, "need_weights": need_weights,
                                 "batch_first": batch_first, "fast_path": fast_path,
                                 "threads": torch.get_num_threads(), "torch_ms": ms,
                                 "torch_version": torch.__version__})
    for L, N, E, H in shapes:
        module = torch.nn.MultiheadAttention(E, H).train()
        x = torch.randn(L, N, E, requires_grad=True)
        grad = torch.randn(L, N, E)
        out, _ = module(x, x, x, need_weights=False)
        inputs = [x] + list(module.parameters())
        ms = time_call(lambda: torch.autograd.grad(out, inputs, grad, retain_graph=True), min_sample_s, samples)
        rows.append({"L": L, "N": N, "E": E, "H": H, "backward": True, "threads": torch.get_num_threads(),
                     "torch_ms": ms, "torch_version": torch.__version__})
    for L, N, E, H in shapes:
        module = torch.nn.MultiheadAttention(E, H).train()
        x = torch.randn(L, N, E, requires_grad=True)
        grad = torch.randn(L, N, E)
        inputs = [x] + list(module.parameters())

        def step():
            out = module(x, x, x, need_weights=False)[0]
            return torch.autograd.grad(out, inputs, grad)

        ms = time_call(step, min_sample_s, samples)
        rows.append({"L": L, "N": N, "E": E, "H": H, "train_step": True, "threads": torch.get_num_threads(),
                     "torch_ms": ms, "torch_version": torch.__version__})
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
