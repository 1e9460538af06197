"""The peer of mha-bench in ONNX Runtime: nn.MultiheadAttention as an ONNX graph, checked, then timed.

    /usr/bin/python3 bench/ort_mha.py --threads N [--quick] [--shapes L,N,E,H ...] [--ort-dir DIR]

For each shape, a real torch.nn.MultiheadAttention(E, H) (float32, eval mode, seeded; its
two biases drawn at random too, so that a misplaced bias shows) becomes two ONNX graphs,
each taking the module's own sequence-first input x (L, N, E) (self-attention: x is query,
key and value) and giving its outputs in PyTorch's layout:

  need_weights=false: Transpose to (N, L, E), ONNX Runtime's contrib op
      com.microsoft.Attention (weights = in_proj_weight^T (E, 3E), bias = in_proj_bias (3E),
      num_heads = H), then out_proj as MatMul (initializer out_proj.weight^T, (in, out))
      + Add (out_proj.bias), Transpose back to (L, N, E).
  need_weights=true: Transpose, the q, k and v projections as MatMul + Add (W_q^T ...),
      the standard ONNX Attention (opset 23; 3-D inputs, q_num_heads = kv_num_heads = H,
      qk_matmul_output_mode = 3: its fourth output is the softmax, (N, H, L, S)), out_proj
      as above; the weights PyTorch returns are that softmax's ReduceMean over the heads,
      (N, L, S). Debian's python3-onnx 1.12 knows opsets up to 17: the node and the opset
      import are written into the proto as they are, unchecked by it; ONNX Runtime checks them.

Each graph runs first on a random input (bench/ort_run.js --save) and its outputs must match
the module's (attn_output, and the averaged weights for need_weights=true): the largest
difference at most 1e-5 times max(1, largest |value| of PyTorch's). Only then is it timed,
with bench/ort_run.js: intraOpNumThreads = N, interOpNumThreads = 1, the median over samples
as bench/torch_mha.py takes it. Prints one JSON list on stdout, one row per shape and
need_weights with ort_ms.

ONNX Runtime's CPU build comes from npm (onnxruntime-node, run by Node.js): when DIR
(default $MHA_ORT_DIR, else build/onnxruntime-node, which git ignores) does not hold version ORT_VERSION,
the script installs it there with `npm install --ignore-scripts` (the package's install
script would download GPU binaries; the CPU one is in the package). That is the only
network access. If it cannot be installed or loaded, the script says why on stderr and
exits with status 3 (UNAVAILABLE), which bench/compare reads as "no ONNX Runtime column";
any other failure, a wrong output first of all, exits with another non-zero status.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ORT_VERSION = "1.30.0"
ORT_DIR = os.environ.get("MHA_ORT_DIR", os.path.join(ROOT, "build", "onnxruntime-node"))
RUNNER = os.path.join(HERE, "ort_run.js")
UNAVAILABLE = 3  # exit status: ONNX Runtime could not be installed or loaded
BENCHMARK_SHAPES = [(16, 2, 64, 4), (128, 8, 512, 8), (512, 4, 768, 12), (1024, 1, 1024, 16)]
TOLERANCE = 1e-5  # largest |ort - torch| <= TOLERANCE * max(1, largest |torch|)


class Unavailable(Exception):
    """ONNX Runtime cannot be installed or loaded here; the message says why."""


# ---- onnxruntime-node: installed once into ort_dir, run through bench/ort_run.js ----------

def installed_version(ort_dir: str):
    try:
        with open(os.path.join(ort_dir, "node_modules", "onnxruntime-node", "package.json")) as f:
            return json.load(f)["version"]
    except (OSError, ValueError, KeyError):
        return None


def ensure_onnxruntime(ort_dir: str = ORT_DIR, install: bool = True) -> None:
    """onnxruntime-node ORT_VERSION in ort_dir, installed with npm if missing and `install`."""
    if shutil.which("node") is None:
        raise Unavailable("Node.js (node) is not installed")
    if installed_version(ort_dir) == ORT_VERSION:
        return
    if not install:
        raise Unavailable(f"onnxruntime-node {ORT_VERSION} is not installed in {ort_dir} (scripts/setup installs it)")
    if shutil.which("npm") is None:
        raise Unavailable("npm is not installed")
    os.makedirs(ort_dir, exist_ok=True)
    cmd = ["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund", "--prefix", ort_dir,
           f"onnxruntime-node@{ORT_VERSION}"]
    print(f"bench/ort_mha.py: installing onnxruntime-node {ORT_VERSION} into {ort_dir}", file=sys.stderr)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0 or installed_version(ort_dir) != ORT_VERSION:
        # npm's summary ("npm error code ECONNREFUSED", ..., the message), not its stack trace.
        lines = [re.sub(r"^npm (error|ERR!)\s*", "", line).strip()
                 for line in (done.stderr.strip() or done.stdout.strip()).splitlines()]
        summary = [line for line in lines if line and not line.startswith("at ")][:4]
        raise Unavailable(f"`{' '.join(cmd)}` failed (status {done.returncode}): " + " / ".join(summary))


def node(args: list, ort_dir: str) -> dict:
    """bench/ort_run.js with `args`; its JSON answer. Status 3 from it: Unavailable."""
    done = subprocess.run(["node", RUNNER, "--ort-dir", ort_dir] + args, capture_output=True, text=True)
    if done.returncode == UNAVAILABLE:
        raise Unavailable(done.stderr.strip())
    if done.returncode != 0:
        raise RuntimeError(f"bench/ort_run.js {' '.join(args)} failed (status {done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout)


def run_model(model: onnx.ModelProto, x: np.ndarray, threads: int = 1, ort_dir: str = ORT_DIR,
              time_it: bool = False, quick: bool = False) -> dict:
    """Runs `model` on x through ONNX Runtime: {output name: array}, or, with time_it, the
    timing answer of bench/ort_run.js ({"median_ms": ...}) after the same run."""
    with tempfile.TemporaryDirectory(prefix="ort_mha_") as tmp:
        model_path, x_path = os.path.join(tmp, "model.onnx"), os.path.join(tmp, "x.f32")
        onnx.save(model, model_path)
        np.ascontiguousarray(x, dtype=np.float32).tofile(x_path)
        common = [model_path, "--input", f"x={x_path}", "--shape", ",".join(map(str, x.shape)),
                  "--threads", str(threads)]
        if time_it:
            samples, min_sample_ms = (3, 5) if quick else (7, 20)
            return node(common + ["--samples", str(samples), "--min-sample-ms", str(min_sample_ms)], ort_dir)
        answer = node(common + ["--save", tmp], ort_dir)
        return {name: np.fromfile(os.path.join(tmp, name + ".f32"), dtype=np.float32).reshape(dims)
                for name, dims in answer["outputs"].items()}


# ---- the graphs ------------------------------------------------------------------------

def initializer(name: str, array) -> TensorProto:
    return numpy_helper.from_array(np.ascontiguousarray(array, dtype=np.float32), name)


def sequence_first_io(E: int, outputs: list):
    """Graph input x (L, N, E) and the given outputs, L, N and S symbolic."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["L", "N", E])
    return [x], [helper.make_tensor_value_info(name, TensorProto.FLOAT, dims) for name, dims in outputs]


def out_projection(heads: str, out_weight_t, out_bias) -> tuple:
    """(nodes, initializers): heads (N, L, E) @ out_weight_t + out_bias, back to (L, N, E) as
    attn_output. out_weight_t is the MatMul's (in, out) matrix: out_proj.weight^T."""
    nodes = [helper.make_node("MatMul", [heads, "out_proj.weight_t"], ["projected"]),
             helper.make_node("Add", ["projected", "out_proj.bias"], ["attn_output_nle"]),
             helper.make_node("Transpose", ["attn_output_nle"], ["attn_output"], perm=[1, 0, 2])]
    return nodes, [initializer("out_proj.weight_t", out_weight_t), initializer("out_proj.bias", out_bias)]


def microsoft_attention_model(num_heads: int, weight, bias, out_weight_t, out_bias) -> onnx.ModelProto:
    """need_weights=false: x (L, N, E) -> com.microsoft.Attention -> out_proj -> attn_output (L, N, E).

    weight (E, 3E) and bias (3E) are the contrib op's inputs 1 and 2 (Q = X weight[:, :E] +
    bias[:E]: to_onnx_attention's "weight", "bias"); out_weight_t (E, E) is the MatMul's
    initializer, the transpose of PyTorch's out_proj.weight."""
    E = np.shape(bias)[0] // 3  # x's hidden size; weight is checked by the engine, not here
    inputs, outputs = sequence_first_io(E, [("attn_output", ["L", "N", E])])
    proj_nodes, proj_init = out_projection("heads", out_weight_t, out_bias)
    nodes = [helper.make_node("Transpose", ["x"], ["x_nle"], perm=[1, 0, 2]),  # (N, L, E): batch first
             helper.make_node("Attention", ["x_nle", "attention.weight", "attention.bias"], ["heads"],
                              domain="com.microsoft", num_heads=num_heads)] + proj_nodes
    graph = helper.make_graph(nodes, "mha_com_microsoft_attention", inputs, outputs,
                              [initializer("attention.weight", weight), initializer("attention.bias", bias)] + proj_init)
    model = helper.make_model(graph, producer_name="mha bench/ort_mha.py",
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


def standard_attention_model(num_heads: int, in_proj_weight, in_proj_bias, out_weight_t, out_bias) -> onnx.ModelProto:
    """need_weights=true: x (L, N, E) -> q, k, v MatMul + Add -> Attention (opset 23) ->
    out_proj -> attn_output (L, N, E); its softmax output averaged over heads -> attn_weights (N, L, S).

    in_proj_weight (3E, E) and in_proj_bias (3E) are PyTorch's; the MatMuls hold W^T."""
    E = np.shape(in_proj_weight)[1]
    inputs, outputs = sequence_first_io(E, [("attn_output", ["L", "N", E]), ("attn_weights", ["N", "L", "L"])])
    nodes = [helper.make_node("Transpose", ["x"], ["x_nle"], perm=[1, 0, 2])]
    inits = []
    for i, name in enumerate(("q", "k", "v")):
        rows = slice(i * E, (i + 1) * E)
        inits += [initializer(f"w_{name}_t", np.asarray(in_proj_weight)[rows].T),
                  initializer(f"b_{name}", np.asarray(in_proj_bias)[rows])]
        nodes += [helper.make_node("MatMul", ["x_nle", f"w_{name}_t"], [f"{name}_mm"]),
                  helper.make_node("Add", [f"{name}_mm", f"b_{name}"], [name])]  # (N, L, E)
    # 3-D q, k, v: the op splits them into heads itself (q_num_heads, kv_num_heads) and
    # returns Y as (N, L, E), heads concatenated; output 3 with mode 3 is softmax(q k^T / sqrt(D)).
    nodes.append(helper.make_node("Attention", ["q", "k", "v"], ["heads", "", "", "probabilities"],
                                  q_num_heads=num_heads, kv_num_heads=num_heads, qk_matmul_output_mode=3))
    nodes.append(helper.make_node("ReduceMean", ["probabilities", "head_axis"], ["attn_weights"], keepdims=0))
    inits.append(numpy_helper.from_array(np.array([1], dtype=np.int64), "head_axis"))  # (N, H, L, S) -> (N, L, S)
    proj_nodes, proj_init = out_projection("heads", out_weight_t, out_bias)
    graph = helper.make_graph(nodes + proj_nodes, "mha_onnx_attention_23", inputs, outputs, inits + proj_init)
    model = helper.make_model(graph, producer_name="mha bench/ort_mha.py", opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10  # opset 23 is newer than this onnx package; ONNX Runtime 1.30 reads IR 10
    return model


def models_from_module(module: torch.nn.MultiheadAttention) -> dict:
    """{need_weights: model} from a packed-projection module's parameters."""
    p = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    H = module.num_heads
    return {False: microsoft_attention_model(H, p["in_proj_weight"].T, p["in_proj_bias"],
                                             p["out_proj.weight"].T, p["out_proj.bias"]),
            True: standard_attention_model(H, p["in_proj_weight"], p["in_proj_bias"],
                                           p["out_proj.weight"].T, p["out_proj.bias"])}


def max_error(got: np.ndarray, want: np.ndarray) -> float:
    """Largest |got - want| over max(1, largest |want|); inf on a shape mismatch."""
    if got.shape != want.shape:
        return float("inf")
    return float(np.max(np.abs(got.astype(np.float64) - want)) / max(1.0, float(np.max(np.abs(want)))))


def check_outputs(label: str, got: dict, want: dict) -> dict:
    """Each output of `want` in `got` within TOLERANCE; raises AssertionError naming the
    output otherwise. Returns {name: scaled error}."""
    errors = {}
    for name, expected in want.items():
        if name not in got:
            raise AssertionError(f"{label}: ONNX Runtime returned no {name} (outputs: {', '.join(got)})")
        errors[name] = max_error(got[name], expected)
        if not errors[name] <= TOLERANCE:
            raise AssertionError(f"{label}: {name} {got[name].shape} differs from PyTorch's {expected.shape}: "
                                 f"largest |difference| / max(1, largest |value|) = {errors[name]:.3g} > {TOLERANCE}")
    return errors


# ---- the benchmark ---------------------------------------------------------------------

def seeded_module(E: int, H: int) -> torch.nn.MultiheadAttention:
    module = torch.nn.MultiheadAttention(E, H).eval()
    with torch.no_grad():  # PyTorch starts both biases at 0, where a misplaced bias would not show
        module.in_proj_bias.normal_(0.0, 0.1)
        module.out_proj.bias.normal_(0.0, 0.1)
    return module


def bench_shape(L: int, N: int, E: int, H: int, threads: int, quick: bool, ort_dir: str) -> list:
    module = seeded_module(E, H)
    x = torch.randn(L, N, E)
    rows = []
    for need_weights, model in sorted(models_from_module(module).items(), reverse=True):
        with torch.no_grad():
            out, weights = module(x, x, x, need_weights=need_weights)
        want = {"attn_output": out.numpy()}
        if need_weights:
            want["attn_weights"] = weights.numpy()
        label = f"L={L} N={N} E={E} H={H} need_weights={str(need_weights).lower()}"
        errors = check_outputs(label, run_model(model, x.numpy(), threads, ort_dir), want)
        timing = run_model(model, x.numpy(), threads, ort_dir, time_it=True, quick=quick)
        rows.append({"L": L, "N": N, "E": E, "H": H, "need_weights": need_weights, "threads": timing["threads"],
                     "ort_ms": timing["median_ms"], "ort_version": timing["ort_version"],
                     "op": "Attention (opset 23)" if need_weights else "com.microsoft.Attention",
                     "max_scaled_error": errors})
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--shapes", nargs="*", help="L,N,E,H each (default: the benchmark's four)")
    parser.add_argument("--ort-dir", default=ORT_DIR, help=f"where onnxruntime-node is installed (default {ORT_DIR})")
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes] if args.shapes else BENCHMARK_SHAPES

    torch.manual_seed(0)
    try:
        ensure_onnxruntime(args.ort_dir)
        rows = [row for shape in shapes for row in bench_shape(*shape, args.threads, args.quick, args.ort_dir)]
    except Unavailable as why:
        print(f"bench/ort_mha.py: ONNX Runtime unavailable: {why}", file=sys.stderr)
        sys.exit(UNAVAILABLE)
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
