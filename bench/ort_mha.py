"""The peer of mha-bench in ONNX Runtime: nn.MultiheadAttention as every ONNX graph that computes it, checked, timed.

    /usr/bin/python3 bench/ort_mha.py --threads N [--quick] [--shapes L,N,E,H ...] [--ort-dir DIR]

For each shape, a real torch.nn.MultiheadAttention(E, H) (float32, eval mode, seeded; its
two biases drawn at random too, so that a misplaced bias shows) becomes several ONNX graphs.
All compute self-attention (x is query, key and value) with the module's weights:
attn_output, and for need_weights=true also attn_weights, the softmax averaged over heads.
ONNX Runtime's figure for a shape and need_weights is its fastest graph's time.

The layout. Each graph takes x batch-first, (N, L, E), and gives attn_output as (N, L, E)
and attn_weights as (N, L, S): that is the layout ONNX Runtime's attention ops read, so no
Transpose is paid on ORT's side. mha-bench times the library on its own native layout,
sequence-first (L, N, E) as nn.MultiheadAttention's default. The attention math is the
same; each side is fed the layout it takes natively. (tests/onnx_attention_layout_test.py
builds the com.microsoft.Attention graph sequence-first, with the two Transposes, to test
the weights' layout on the module's own input; the benchmark never does.)

The graphs (q = x W_q^T + b_q and so on; W^T is what an ONNX MatMul holds, (in, out)):

  com.microsoft.Attention             need_weights=false. ONNX Runtime's contrib op with the
      packed projection inside it (weights = in_proj_weight^T (E, 3E), bias = in_proj_bias
      (3E), num_heads = H), then out_proj as MatMul (out_proj.weight^T) + Add (out_proj.bias).
  Attention-23                        both. The standard ONNX Attention (opset 23): q, k, v
      each as MatMul + Add on x, then Attention on 3-D q, k, v (q_num_heads = kv_num_heads = H;
      it splits the heads itself and gives them back concatenated, (N, L, E)), then out_proj.
      With need_weights: qk_matmul_output_mode = 3, whose output 3 is the softmax (N, H, L, S),
      and a ReduceMean over the heads for attn_weights.
  Attention-23, packed projection     both. The same, with one MatMul (E, 3E) + Add for the
      three projections and a Split into q, k, v.
  com.microsoft.MultiHeadAttention    need_weights=false. ONNX Runtime's contrib op on q, k,
      v each projected with MatMul + Add (num_heads = H), then out_proj.
  com.microsoft.MultiHeadAttention, bias input   need_weights=false. q, k, v projected by
      MatMul alone; the op adds the packed bias (in_proj_bias, 3E, its input 3) itself.
  com.microsoft.MultiHeadAttention, packed QKV   need_weights=false. One MatMul + Add with
      its columns ordered (H, 3, D), reshaped to the op's packed query (N, L, H, 3, D).
  MatMul-Softmax-MatMul               both. No attention op at all: the graph
      torch.onnx.export writes for the module, q, k, v as MatMul + Add, heads split by
      Reshape and Transpose, q k^T / sqrt(D), Softmax, times v, heads merged, out_proj;
      with need_weights the Softmax's ReduceMean over heads. ONNX Runtime may fuse it.
  ..., weights given too              need_weights=false. The three graphs above that can
      give the weights, built with them (Attention-23, Attention-23 with the packed
      projection, MatMul-Softmax-MatMul), their attn_output alone checked and used. A user
      who wants only attn_output can run one and drop the weights, so they count among
      ONNX Runtime's ways of computing it: at (128, 8, 512, 8) opset-23 Attention giving its
      softmax measured faster than any graph without it in two sittings out of three.

The com.microsoft.MultiHeadAttention graphs are optional: ONNX Runtime's CPU engine may not
run every form of the op. When one fails to load or to run, the reason goes to stderr and
into the row's ort_graphs_left_out, and the graph is not timed. Every other graph must run.

Each graph runs first on a random input (bench/ort_run.js --save) and its outputs must match
the module's (attn_output, and the averaged weights for need_weights=true): the largest
difference at most 1e-5 times max(1, largest |value| of PyTorch's). A graph that fails that
check stops the script with an error, whichever graph it is. Only then is it timed, with
bench/ort_run.js: intraOpNumThreads = N, interOpNumThreads = 1, graph optimisation level
"all" (ORT_ENABLE_ALL, the highest), its thread pool spinning while it waits (ORT's
default, set explicitly), the median over samples as bench/torch_mha.py takes it.

Prints one JSON list on stdout, one row per shape and need_weights: ort_ms is the fastest
graph's median time, ort_best_graph its name (op too, as before), ort_graphs every timed
graph's median, ort_graphs_left_out {graph: why} for the ones that would not run,
max_scaled_error {graph: {output: error}}, ort_input_layout "(N, L, E)", and
ort_session_options, the session's settings as bench/ort_run.js reports them.

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
# L = target length, S = source length (= L: self-attention), N = batch, E = embed_dim,
# H = heads, D = head_dim = E / H. Every graph below but the sequence-first form of
# microsoft_attention_model takes x as (N, L, E) and gives attn_output as (N, L, E).

PRODUCER = "mha bench/ort_mha.py"


def initializer(name: str, array) -> TensorProto:
    return numpy_helper.from_array(np.ascontiguousarray(array, dtype=np.float32), name)


def int64_initializer(name: str, values: list) -> TensorProto:
    """Shapes, axes and split sizes: ONNX takes them as int64 tensors."""
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def graph_io(E: int, outputs: list, sequence_first: bool = False):
    """Graph input x, (L, N, E) or (N, L, E), and the given outputs; L, N and S symbolic."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["L", "N", E] if sequence_first else ["N", "L", E])
    return [x], [helper.make_tensor_value_info(name, TensorProto.FLOAT, dims) for name, dims in outputs]


def make_model(nodes, name: str, inputs, outputs, inits, opsets: dict) -> onnx.ModelProto:
    """The graph as a model. Opset 23 is newer than Debian's onnx package (it knows 17): the
    model is written as it is, unchecked by it; ONNX Runtime checks it when it loads it."""
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, producer_name=PRODUCER,
                              opset_imports=[helper.make_opsetid(domain, v) for domain, v in opsets.items()])
    model.ir_version = 10 if opsets.get("", 0) >= 21 else 8  # ONNX Runtime 1.30 reads IR 10
    return model


def out_projection(heads: str, out_weight_t, out_bias, sequence_first: bool = False) -> tuple:
    """(nodes, initializers): heads (N, L, E) @ out_weight_t + out_bias as attn_output, (N, L, E),
    or back to (L, N, E) when sequence_first. out_weight_t is the MatMul's (in, out)
    matrix: out_proj.weight^T."""
    last = "attn_output_nle" if sequence_first else "attn_output"
    nodes = [helper.make_node("MatMul", [heads, "out_proj.weight_t"], ["projected"]),  # (N, L, E) x (E, E)
             helper.make_node("Add", ["projected", "out_proj.bias"], [last])]
    if sequence_first:
        nodes.append(helper.make_node("Transpose", [last], ["attn_output"], perm=[1, 0, 2]))  # (L, N, E)
    return nodes, [initializer("out_proj.weight_t", out_weight_t), initializer("out_proj.bias", out_bias)]


def in_projections(p: dict, packed: bool = False, with_bias: bool = True) -> tuple:
    """(nodes, initializers) giving q, k and v, each (N, L, E), from x (N, L, E).

    Three MatMul (+ Add), one per W_q^T, W_k^T, W_v^T; or, packed, one MatMul with
    in_proj_weight^T (E, 3E) (+ Add in_proj_bias) and a Split of its last axis in three.
    Without with_bias the Adds are left out: the op that follows adds the bias itself."""
    W, b = p["in_proj_weight"], p["in_proj_bias"]  # (3E, E), (3E): W_q, W_k, W_v stacked
    E = W.shape[1]
    if packed:
        nodes = [helper.make_node("MatMul", ["x", "w_qkv_t"], ["qkv_mm"]),      # (N, L, E) x (E, 3E)
                 helper.make_node("Add", ["qkv_mm", "b_qkv"], ["qkv"]),          # (N, L, 3E)
                 helper.make_node("Split", ["qkv", "qkv_split"], ["q", "k", "v"], axis=-1)]  # 3 x (N, L, E)
        return nodes, [initializer("w_qkv_t", W.T), initializer("b_qkv", b), int64_initializer("qkv_split", [E] * 3)]
    nodes, inits = [], []
    for i, name in enumerate(("q", "k", "v")):
        rows = slice(i * E, (i + 1) * E)
        inits.append(initializer(f"w_{name}_t", W[rows].T))
        if with_bias:
            inits.append(initializer(f"b_{name}", b[rows]))
            nodes += [helper.make_node("MatMul", ["x", f"w_{name}_t"], [f"{name}_mm"]),  # (N, L, E) x (E, E)
                      helper.make_node("Add", [f"{name}_mm", f"b_{name}"], [name])]
        else:
            nodes.append(helper.make_node("MatMul", ["x", f"w_{name}_t"], [name]))
    return nodes, inits


def microsoft_attention_model(num_heads: int, weight, bias, out_weight_t, out_bias,
                              sequence_first: bool = True) -> onnx.ModelProto:
    """need_weights=false: x -> com.microsoft.Attention -> out_proj -> attn_output.

    weight (E, 3E) and bias (3E) are the contrib op's inputs 1 and 2 (Q = X weight[:, :E] +
    bias[:E]: to_onnx_attention's "weight", "bias"); out_weight_t (E, E) is the MatMul's
    initializer, the transpose of PyTorch's out_proj.weight. The op reads (N, L, E): with
    sequence_first (the default, tests/onnx_attention_layout_test.py's graph) x is the
    module's own (L, N, E) and a Transpose on either side turns it round; the benchmark
    passes sequence_first=False and feeds (N, L, E)."""
    E = np.shape(bias)[0] // 3  # x's hidden size; weight is checked by the engine, not here
    inputs, outputs = graph_io(E, [("attn_output", ["L", "N", E] if sequence_first else ["N", "L", E])], sequence_first)
    proj_nodes, proj_init = out_projection("heads", out_weight_t, out_bias, sequence_first)
    nodes = []
    source = "x"
    if sequence_first:
        nodes.append(helper.make_node("Transpose", ["x"], ["x_nle"], perm=[1, 0, 2]))  # (N, L, E): batch first
        source = "x_nle"
    nodes.append(helper.make_node("Attention", [source, "attention.weight", "attention.bias"], ["heads"],
                                  domain="com.microsoft", num_heads=num_heads))  # (N, L, E)
    inits = [initializer("attention.weight", weight), initializer("attention.bias", bias)] + proj_init
    return make_model(nodes + proj_nodes, "mha_com_microsoft_attention", inputs, outputs, inits,
                      {"": 17, "com.microsoft": 1})


def weights_outputs(E: int, need_weights: bool) -> list:
    """The graph outputs: attn_output (N, L, E), and attn_weights (N, L, S) when asked for."""
    return [("attn_output", ["N", "L", E])] + ([("attn_weights", ["N", "L", "L"])] if need_weights else [])


def onnx_attention_model(num_heads: int, p: dict, need_weights: bool, packed: bool = False) -> onnx.ModelProto:
    """x (N, L, E) -> q, k, v projections -> Attention (opset 23) -> out_proj -> attn_output;
    with need_weights, its softmax averaged over heads -> attn_weights (N, L, S)."""
    E = p["in_proj_weight"].shape[1]
    inputs, outputs = graph_io(E, weights_outputs(E, need_weights))
    nodes, inits = in_projections(p, packed=packed)
    # 3-D q, k, v: the op splits them into heads itself (q_num_heads, kv_num_heads) and
    # returns Y as (N, L, E), heads concatenated; output 3 with mode 3 is softmax(q k^T / sqrt(D)).
    if need_weights:
        nodes.append(helper.make_node("Attention", ["q", "k", "v"], ["heads", "", "", "probabilities"],
                                      q_num_heads=num_heads, kv_num_heads=num_heads, qk_matmul_output_mode=3))
        nodes.append(helper.make_node("ReduceMean", ["probabilities", "head_axis"], ["attn_weights"], keepdims=0))
        inits.append(int64_initializer("head_axis", [1]))  # (N, H, L, S) -> (N, L, S)
    else:
        nodes.append(helper.make_node("Attention", ["q", "k", "v"], ["heads"],
                                      q_num_heads=num_heads, kv_num_heads=num_heads))
    proj_nodes, proj_init = out_projection("heads", p["out_proj.weight"].T, p["out_proj.bias"])
    return make_model(nodes + proj_nodes, "mha_onnx_attention_23", inputs, outputs, inits + proj_init, {"": 23})


def multihead_attention_model(num_heads: int, p: dict, bias_input: bool = False) -> onnx.ModelProto:
    """need_weights=false: x (N, L, E) -> q, k, v -> com.microsoft.MultiHeadAttention -> out_proj.

    With bias_input the projections are MatMuls alone and in_proj_bias (3E, q's then k's then
    v's) is the op's input 3, which it adds to q, k and v as it splits the heads."""
    E = p["in_proj_weight"].shape[1]
    inputs, outputs = graph_io(E, weights_outputs(E, False))
    nodes, inits = in_projections(p, with_bias=not bias_input)
    op_inputs = ["q", "k", "v"]
    if bias_input:
        op_inputs.append("attention.bias")
        inits.append(initializer("attention.bias", p["in_proj_bias"]))
    nodes.append(helper.make_node("MultiHeadAttention", op_inputs, ["heads"], domain="com.microsoft",
                                  num_heads=num_heads))  # (N, L, E), heads concatenated
    proj_nodes, proj_init = out_projection("heads", p["out_proj.weight"].T, p["out_proj.bias"])
    return make_model(nodes + proj_nodes, "mha_com_microsoft_multihead_attention", inputs, outputs,
                      inits + proj_init, {"": 17, "com.microsoft": 1})


def multihead_attention_packed_qkv_model(num_heads: int, p: dict) -> onnx.ModelProto:
    """need_weights=false: x (N, L, E) -> one MatMul + Add -> packed query (N, L, H, 3, D) ->
    com.microsoft.MultiHeadAttention with key and value left empty -> out_proj.

    The op reads the packed query head by head, each head's q, k, v side by side: the
    projection's 3E output columns are in_proj's rows reordered from (3, H, D) to (H, 3, D)."""
    W, b = p["in_proj_weight"], p["in_proj_bias"]  # (3E, E), (3E)
    E = W.shape[1]
    D = E // num_heads
    order = np.arange(3 * E).reshape(3, num_heads, D).transpose(1, 0, 2).reshape(-1)  # (3, H, D) -> (H, 3, D)
    inputs, outputs = graph_io(E, weights_outputs(E, False))
    nodes = [helper.make_node("MatMul", ["x", "w_qkv_t"], ["qkv_mm"]),                  # (N, L, E) x (E, 3E)
             helper.make_node("Add", ["qkv_mm", "b_qkv"], ["qkv"]),                      # (N, L, 3E)
             helper.make_node("Reshape", ["qkv", "packed_shape"], ["packed"]),           # (N, L, H, 3, D)
             helper.make_node("MultiHeadAttention", ["packed", "", ""], ["heads"], domain="com.microsoft",
                              num_heads=num_heads)]                                      # (N, L, E)
    inits = [initializer("w_qkv_t", W[order].T), initializer("b_qkv", b[order]),
             int64_initializer("packed_shape", [0, 0, num_heads, 3, D])]  # 0: keep that dimension
    proj_nodes, proj_init = out_projection("heads", p["out_proj.weight"].T, p["out_proj.bias"])
    return make_model(nodes + proj_nodes, "mha_com_microsoft_multihead_attention_packed_qkv", inputs, outputs,
                      inits + proj_init, {"": 17, "com.microsoft": 1})


def primitives_model(num_heads: int, p: dict, need_weights: bool) -> onnx.ModelProto:
    """x (N, L, E) -> attention from MatMul, Softmax and reshapes alone, the way
    torch.onnx.export writes nn.MultiheadAttention -> out_proj -> attn_output; with
    need_weights, the Softmax averaged over heads -> attn_weights (N, L, S)."""
    E = p["in_proj_weight"].shape[1]
    D = E // num_heads
    inputs, outputs = graph_io(E, weights_outputs(E, need_weights))
    nodes, inits = in_projections(p)
    inits += [int64_initializer("heads_shape", [0, 0, num_heads, D]),  # 0: keep N and L
              int64_initializer("merged_shape", [0, 0, E]),
              numpy_helper.from_array(np.array(1.0 / np.sqrt(D), dtype=np.float32), "scaling")]
    nodes += [
        # PyTorch scales q before q k^T, not the scores; the last bits differ otherwise.
        helper.make_node("Mul", ["q", "scaling"], ["q_scaled"]),
        helper.make_node("Reshape", ["q_scaled", "heads_shape"], ["q_split"]),     # (N, L, H, D)
        helper.make_node("Transpose", ["q_split"], ["qh"], perm=[0, 2, 1, 3]),     # (N, H, L, D)
        helper.make_node("Reshape", ["k", "heads_shape"], ["k_split"]),            # (N, S, H, D)
        helper.make_node("Transpose", ["k_split"], ["kh_t"], perm=[0, 2, 3, 1]),   # (N, H, D, S)
        helper.make_node("Reshape", ["v", "heads_shape"], ["v_split"]),            # (N, S, H, D)
        helper.make_node("Transpose", ["v_split"], ["vh"], perm=[0, 2, 1, 3]),     # (N, H, S, D)
        # (N, H, L, D) x (N, H, D, S) -> (N, H, L, S)
        helper.make_node("MatMul", ["qh", "kh_t"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["probabilities"], axis=-1),       # (N, H, L, S)
        # (N, H, L, S) x (N, H, S, D) -> (N, H, L, D)
        helper.make_node("MatMul", ["probabilities", "vh"], ["context"]),
        helper.make_node("Transpose", ["context"], ["context_t"], perm=[0, 2, 1, 3]),  # (N, L, H, D)
        helper.make_node("Reshape", ["context_t", "merged_shape"], ["heads"]),     # (N, L, E)
    ]
    if need_weights:
        nodes.append(helper.make_node("ReduceMean", ["probabilities", "head_axis"], ["attn_weights"], keepdims=0))
        inits.append(int64_initializer("head_axis", [1]))  # (N, H, L, S) -> (N, L, S)
    proj_nodes, proj_init = out_projection("heads", p["out_proj.weight"].T, p["out_proj.bias"])
    return make_model(nodes + proj_nodes, "mha_primitives", inputs, outputs, inits + proj_init, {"": 23})


# Every graph: (name, the need_weights it serves, builder(H, p, need_weights), optional).
# An optional graph that ONNX Runtime will not load or run is left out with the reason; any
# other failure, and any graph whose outputs differ from PyTorch's, is an error.
GRAPHS = [
    ("com.microsoft.Attention", (False,),
     lambda H, p, nw: microsoft_attention_model(H, p["in_proj_weight"].T, p["in_proj_bias"], p["out_proj.weight"].T,
                                                p["out_proj.bias"], sequence_first=False), False),
    ("Attention-23", (False, True), lambda H, p, nw: onnx_attention_model(H, p, nw), False),
    ("Attention-23, packed projection", (False, True), lambda H, p, nw: onnx_attention_model(H, p, nw, packed=True),
     False),
    ("com.microsoft.MultiHeadAttention", (False,), lambda H, p, nw: multihead_attention_model(H, p), True),
    ("com.microsoft.MultiHeadAttention, bias input", (False,),
     lambda H, p, nw: multihead_attention_model(H, p, bias_input=True), True),
    ("com.microsoft.MultiHeadAttention, packed QKV", (False,),
     lambda H, p, nw: multihead_attention_packed_qkv_model(H, p), True),
    ("MatMul-Softmax-MatMul", (False, True), lambda H, p, nw: primitives_model(H, p, nw), False),
    ("Attention-23, weights given too", (False,), lambda H, p, nw: onnx_attention_model(H, p, True), False),
    ("Attention-23, packed projection, weights given too", (False,),
     lambda H, p, nw: onnx_attention_model(H, p, True, packed=True), False),
    ("MatMul-Softmax-MatMul, weights given too", (False,), lambda H, p, nw: primitives_model(H, p, True), False),
]


def models_from_module(module: torch.nn.MultiheadAttention, need_weights: bool) -> list:
    """[(name, model, optional)]: every graph for need_weights, from a packed-projection
    module's parameters."""
    p = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    return [(name, build(module.num_heads, p, need_weights), optional)
            for name, serves, build, optional in GRAPHS if need_weights in serves]


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


def engine_error(error: RuntimeError) -> str:
    """ONNX Runtime's own words from a failed bench/ort_run.js: its status message when there
    is one, else the first error line."""
    lines = [line for line in str(error).splitlines() if line.startswith("bench/ort_run.js: Error:")]
    first = lines[0] if lines else str(error).splitlines()[0]
    return first.split("Status Message: ", 1)[-1].removeprefix("bench/ort_run.js: Error: ").strip()


# ---- the benchmark ---------------------------------------------------------------------

def seeded_module(E: int, H: int) -> torch.nn.MultiheadAttention:
    module = torch.nn.MultiheadAttention(E, H).eval()
    with torch.no_grad():  # PyTorch starts both biases at 0, where a misplaced bias would not show
        module.in_proj_bias.normal_(0.0, 0.1)
        module.out_proj.bias.normal_(0.0, 0.1)
    return module


def bench_shape(L: int, N: int, E: int, H: int, threads: int, quick: bool, ort_dir: str) -> list:
    """One row per need_weights: every graph checked, then timed; the fastest is ORT's figure."""
    module = seeded_module(E, H)
    x = torch.randn(L, N, E)                           # the module's own layout, (L, N, E)
    x_nle = np.ascontiguousarray(x.numpy().transpose(1, 0, 2))  # ONNX Runtime's, (N, L, E)
    rows = []
    for need_weights in (True, False):
        with torch.no_grad():
            out, weights = module(x, x, x, need_weights=need_weights)
        want = {"attn_output": out.numpy().transpose(1, 0, 2)}  # (L, N, E) -> (N, L, E)
        if need_weights:
            want["attn_weights"] = weights.numpy()              # (N, L, S) already
        shape = f"L={L} N={N} E={E} H={H} need_weights={str(need_weights).lower()}"
        times, left_out, errors, version, options = {}, {}, {}, None, None
        for name, model, optional in models_from_module(module, need_weights):
            label = f"{shape} {name}"
            try:
                got = run_model(model, x_nle, threads, ort_dir)
            except RuntimeError as error:
                if not optional:
                    raise
                left_out[name] = engine_error(error)
                print(f"bench/ort_mha.py: {label}: left out, ONNX Runtime will not run it: {left_out[name]}",
                      file=sys.stderr)
                continue
            errors[name] = check_outputs(label, got, want)
            timing = run_model(model, x_nle, threads, ort_dir, time_it=True, quick=quick)
            times[name], version, options = timing["median_ms"], timing["ort_version"], timing["session_options"]
        best = min(times, key=times.get)
        rows.append({"L": L, "N": N, "E": E, "H": H, "need_weights": need_weights, "threads": threads,
                     "ort_ms": times[best], "ort_best_graph": best, "op": best, "ort_graphs": times,
                     "ort_graphs_left_out": left_out, "ort_input_layout": "(N, L, E)", "ort_version": version,
                     "ort_session_options": options, "max_scaled_error": errors})
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
