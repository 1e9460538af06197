"""Plots the ratio torch_ms / mha_ms per shape from a bench/compare JSON file.

    /usr/bin/python3 bench/plot_ratio.py RESULTS.json OUT.png [--ort]

Two bars per shape (need_weights true and false), a line at ratio 1 (as fast as PyTorch)
and a note in the title. With --ort, the ratio against ONNX Runtime, ort_ms / mha_ms (the
JSON's "ort_ratio"), instead. Needs matplotlib (Debian: python3-matplotlib).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) not in (3, 4) or sys.argv[3:] not in ([], ["--ort"]):
        sys.exit(__doc__)
    if sys.argv[3:]:
        key, engine, engine_ms = "ort_ratio", "ONNX Runtime", "ort_ms"
    else:
        key, engine, engine_ms = "ratio", "torch.nn.MultiheadAttention", "torch_ms"
    with open(sys.argv[1]) as f:
        results = json.load(f)
    rows = results["rows"]
    shapes = []
    for r in rows:
        shape = (r["L"], r["N"], r["E"], r["H"])
        if shape not in shapes:
            shapes.append(shape)
    if any(key not in r for r in rows):
        sys.exit(f"plot_ratio: {sys.argv[1]} has no {key} in every row (a run without {engine}?)")
    ratio = {(r["L"], r["N"], r["E"], r["H"], r["need_weights"]): r[key] for r in rows}
    threads = rows[0]["threads"]

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    width = 0.38
    for offset, need_weights, color in ((-width / 2, True, "#4c72b0"), (width / 2, False, "#dd8452")):
        xs = [i + offset for i in range(len(shapes))]
        ys = [ratio[s + (need_weights,)] for s in shapes]
        bars = ax.bar(xs, ys, width, label=f"need_weights={str(need_weights).lower()}", color=color)
        ax.bar_label(bars, labels=[f"{y:.2f}" for y in ys], fontsize=8, padding=2)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels([f"L={L} N={N}\nE={E} H={H}" for L, N, E, H in shapes])
    ax.set_ylabel(f"ratio = {engine_ms} / mha_ms")
    ax.set_title(f"mha vs {engine}, float32, CPU, {threads} threads\n"
                 "above the dashed line: mha is faster", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2])


if __name__ == "__main__":
    main()
