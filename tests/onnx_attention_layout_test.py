"""golden/layouts/onnx_attention/ run by ONNX Runtime itself: the layout is what the engine reads.

    /usr/bin/python3 tests/onnx_attention_layout_test.py CHECK [--golden DIR] [--ort-dir DIR]

The folder holds one nn.MultiheadAttention's weights in the layout of ONNX Runtime's
contrib op com.microsoft.Attention (what to_onnx_attention writes): attention.weight
(E, 3E) = in_proj_weight^T, attention.bias (3E), and attention.out_proj.weight (E, E) and
.bias, which are PyTorch's own, out_proj.weight in PyTorch's (out, in) orientation. The
graph is bench/ort_mha.py's: x (L, N, E) -> Transpose -> com.microsoft.Attention(weight,
bias) -> MatMul(out_proj.weight^T) -> Add(out_proj.bias) -> Transpose, run on the folder's
query.npy through onnxruntime-node (bench/ort_run.js), and compared with the folder's
attn_output.npy (PyTorch's) within layout.json's tolerance (|ort - torch| <= atol + rtol |torch|).

CHECK is one of:
  matches                     the weights as documented (docs/13-weights.md): within tolerance.
  out-proj-untransposed       out_proj.weight (out, in) put in the MatMul as it is, where the
                              MatMul needs (in, out): square, so the engine runs it, and the
                              comparison must fail.
  in-proj-blocks-untransposed [W_q | W_k | W_v], PyTorch's three (E, E) blocks side by side
                              untransposed: the (E, 3E) shape the op wants, so it runs, and
                              the comparison must fail.
  in-proj-untransposed        in_proj_weight (3E, E) as the weights input: the engine must
                              refuse it (its input 1 must have E rows, the hidden size of x).
Exits 0 when the check holds, 1 otherwise (saying why); ONNX Runtime not installed (scripts/setup
installs it into build/onnxruntime-node) is a failure too. Runs offline: nothing is installed here.
"""
import argparse
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import ort_mha  # noqa: E402  (bench/ort_mha.py: the graph and the runner)

CHECKS = ("matches", "out-proj-untransposed", "in-proj-blocks-untransposed", "in-proj-untransposed")


def load(folder: str) -> dict:
    names = ["attention.weight", "attention.bias", "attention.out_proj.weight", "attention.out_proj.bias",
             "self_attn.in_proj_weight", "self_attn.out_proj.weight", "query", "attn_output"]
    tensors = {name: np.load(os.path.join(folder, name + ".npy")) for name in names}
    with open(os.path.join(folder, "layout.json")) as f:
        tensors["layout"] = json.load(f)
    return tensors


def fail(message: str) -> None:
    print(f"FAIL: {message}")
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("check", choices=CHECKS)
    parser.add_argument("--golden", default=os.path.join(ROOT, "golden", "layouts", "onnx_attention"))
    parser.add_argument("--ort-dir", default=ort_mha.ORT_DIR)
    args = parser.parse_args()
    t = load(args.golden)
    layout = t["layout"]
    E, H = layout["embed_dim"], layout["num_heads"]
    rtol, atol = layout["tolerance"]["rtol"], layout["tolerance"]["atol"]

    # The premises: the folder holds what docs/13-weights.md says it holds.
    if t["attention.weight"].shape != (E, 3 * E) or not np.array_equal(t["attention.weight"], t["self_attn.in_proj_weight"].T):
        fail("attention.weight is not in_proj_weight^T (E, 3E)")
    if not np.array_equal(t["attention.out_proj.weight"], t["self_attn.out_proj.weight"]):
        fail("attention.out_proj.weight is not PyTorch's out_proj.weight (out, in)")
    out_w = t["attention.out_proj.weight"]  # (out, in): the MatMul needs its transpose

    weight, out_weight_t = t["attention.weight"], out_w.T
    if args.check == "out-proj-untransposed":
        out_weight_t = out_w
    elif args.check == "in-proj-blocks-untransposed":
        weight = np.concatenate(np.split(t["self_attn.in_proj_weight"], 3, axis=0), axis=1)  # [W_q | W_k | W_v]
    elif args.check == "in-proj-untransposed":
        weight = t["self_attn.in_proj_weight"]  # (3E, E)
    model = ort_mha.microsoft_attention_model(H, weight, t["attention.bias"], out_weight_t, t["attention.out_proj.bias"])

    try:
        ort_mha.ensure_onnxruntime(args.ort_dir, install=False)
        got = ort_mha.run_model(model, t["query"], threads=1, ort_dir=args.ort_dir)["attn_output"]
    except ort_mha.Unavailable as why:
        fail(f"ONNX Runtime unavailable: {why}")
    except RuntimeError as error:  # the engine refused the graph
        if args.check == "in-proj-untransposed":
            # bench/ort_run.js's error line: the Attention node's status message about input 1.
            reason = [line for line in str(error).splitlines()
                      if line.startswith("bench/ort_run.js: Error:") and "Attention node" in line
                      and "Input 1 dimension 0" in line]
            if not reason:
                fail(f"ONNX Runtime failed, but not on the weights' shape:\n{error}")
            print(f"PASS: ONNX Runtime refuses in_proj_weight {weight.shape} as com.microsoft.Attention's weights: "
                  + reason[0].split("Status Message: ", 1)[-1])
            return
        fail(f"ONNX Runtime failed:\n{error}")
    if args.check == "in-proj-untransposed":
        fail(f"ONNX Runtime ran com.microsoft.Attention with weights {weight.shape}; it should need ({E}, {3 * E})")

    want = t["attn_output"]
    if got.shape != want.shape:
        fail(f"attn_output {got.shape}, PyTorch's is {want.shape}")
    excess = np.abs(got.astype(np.float64) - want) - (atol + rtol * np.abs(want))
    worst = float(np.max(np.abs(got.astype(np.float64) - want)))
    within = bool(np.all(excess <= 0))
    what = f"attn_output {got.shape}: largest |ort - torch| = {worst:.3g} (tolerance atol {atol} + rtol {rtol} |torch|)"
    if args.check == "matches":
        if not within:
            fail(f"{what}: ONNX Runtime does not give PyTorch's output from the documented layout")
        print(f"PASS: ONNX Runtime on golden/layouts/onnx_attention gives PyTorch's {what}")
    else:
        if within:
            fail(f"{what}: the wrong weights ({args.check}) pass the comparison, so it cannot tell")
        print(f"PASS: {args.check} fails the comparison as it must: {what}")


if __name__ == "__main__":
    main()
