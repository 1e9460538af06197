"""The peer of mha-bench: torch.nn.MultiheadAttention on the CPU, timed the same way.

    /usr/bin/python3 bench/torch_mha.py --threads N [--quick] [--shapes L,N,E,H ...]

Self-attention (query is key is value), sequence-first (batch_first=False, the default),
float32. The forward: eval mode, under torch.no_grad(), need_weights True and False. The
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
"""
import argparse
import json
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--shapes", nargs="*", help="L,N,E,H each (default: the benchmark's four)")
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes] if args.shapes else BENCHMARK_SHAPES

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    min_sample_s, samples = (0.005, 3) if args.quick else (0.02, 7)
    rows = []
    with torch.no_grad():
        for L, N, E, H in shapes:
            module = torch.nn.MultiheadAttention(E, H).eval()
            x = torch.randn(L, N, E)
            for need_weights in (True, False):
                ms = time_call(lambda: module(x, x, x, need_weights=need_weights), min_sample_s, samples)
                rows.append({"L": L, "N": N, "E": E, "H": H, "need_weights": need_weights,
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
