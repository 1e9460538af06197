"""The peer of mha-bench's decoding step in ONNX Runtime: one step of a KV-cache decoder as every ONNX graph that computes it, checked, timed.

    /usr/bin/python3 bench/ort_decode.py --threads N [--quick] [--cached T ...] [--batch B ...]
                                         [--steps T,B ...] [--embed-dim E] [--heads H] [--ort-dir DIR]
                                         [--check-only]

One decoding step of a real torch.nn.MultiheadAttention(E, H) (float32, eval mode, seeded,
both biases drawn at random so that a misplaced bias shows), default E = 1024, H = 16, for
each number of cached positions T (default 128, 1024, 8192) and batch B (default 1), or
each pair of --steps T,B alone: the
new token x (B, 1, E) is projected to q, k and v; k and v join the T cached keys and values
(past_key, past_value, each (B, H, T, D), D = E / H); q attends to all T + 1; out_proj.
ONNX Runtime's figure for a T and B is its fastest graph's time: the same work as
mha-bench's `mha_decode_step/cached=T/E=1024/H=16` (mha::KVCache::step).

The graphs (q = x W_q^T + b_q and so on; each graph takes x, past_key and past_value as
inputs and gives attn_output (B, 1, E) and the grown cache, present_key and present_value
(B, H, T + 1, D), as outputs, as a decoder's graph does for its next step):

  com.microsoft.MultiHeadAttention          q, k, v each as MatMul + Add, then the contrib
      op with past_key and past_value (its inputs 6 and 7), then out_proj.
  Attention-23                              the standard ONNX Attention (opset 23) on 3-D
      q, k, v (q_num_heads = kv_num_heads = H) with past_key and past_value (its inputs 4
      and 5), then out_proj.
  Attention-23, packed projection           the same with one MatMul (E, 3E) + Add and a Split.
  com.microsoft.GroupQueryAttention         kv_num_heads = num_heads = H; its past is BNSH,
      (B, H, T, D), as here; it also takes seqlens_k (B) = T (the number of positions before
      the new one, int32) and total_sequence_length = T + 1 (a scalar, int32).
  com.microsoft.GroupQueryAttention, packed QKV   one MatMul + Add giving [q | k | v]
      (B, 1, 3E) as the op's packed query, key and value left empty.
  com.microsoft.Attention                   the contrib op with the packed projection inside
      it (weights in_proj_weight^T, bias in_proj_bias) and one past input (2, B, H, T, D),
      the keys then the values; one present output (2, B, H, T + 1, D).

Not timed: GroupQueryAttention's shared-buffer form, past and present one buffer of room
for more positions, grown in place. onnxruntime-node gives an output in a tensor of its own
making or in a pre-allocated one (session.run's fetches), and only a pre-allocated present
bound to the past's tensor would share the buffer; but a pre-allocated output costs the
binding more on every call than the copy of the past it saves (at T = 128, E = 1024 the
GroupQueryAttention graph ran more than twice as long with present_* pre-allocated, bound to
the past's tensors or not), so the time would be the binding's, not the engine's.

The contrib graphs are optional: an op that ONNX Runtime's CPU engine will not load or run
in this form is left out with its reason (stderr and the row's ort_graphs_left_out), and
not timed. The opset-23 graphs must run.

Each graph runs first on a random input (bench/ort_run.js --save) and its attn_output must
match PyTorch's: the module's forward of the new token as query over the T + 1 positions
as key and value (the last position of a causal forward sees every position, so no mask),
the past keys and values being the module's own k and v projections of the T earlier
positions. The largest difference at most 1e-5 times max(1, largest |value| of PyTorch's),
as bench/ort_mha.py checks; a graph that fails stops the script. Only then is it timed, by
bench/ort_run.js as bench/ort_mha.py times the forward (intraOpNumThreads = N,
interOpNumThreads = 1, ORT_ENABLE_ALL, the thread pool spinning, ORT's default; the median
over samples), fetching attn_output alone (--fetch): present_key and present_value are
computed into ONNX Runtime's own memory on every run, as a decoder's step needs, but not
copied out to JavaScript, which onnxruntime-node would otherwise do on every call. The same
inputs every run: the cache does not grow during the timing (mha-bench cuts its cache back
to T after every step likewise).

--check-only runs every graph's check and times none (a CTest test does, at a small E);
it prints one line per graph and T and B, and fails as the timing run would.

Prints one JSON list on stdout, one row per T and B: ort_ms is the fastest graph's median
time, ort_best_graph its name, ort_graphs every timed graph's median, ort_graphs_left_out
{graph: why}, max_scaled_error {graph: error}, ort_version and ort_session_options. ONNX
Runtime comes from build/onnxruntime-node as for bench/ort_mha.py (installed there on the
first run); when it cannot be installed or loaded the script says why and exits with status
3, which bench/compare reads as "no ONNX Runtime column".
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ort_mha  # noqa: E402  (its installer, runner, graph helpers and check)
from ort_mha import initializer, in_projections, int64_initializer, make_model, out_projection  # noqa: E402

DECODE_CACHED = [128, 1024, 8192]
TOLERANCE = ort_mha.TOLERANCE


# ---- the graphs ------------------------------------------------------------------------
# B = batch, T = cached positions (symbolic), E = embed_dim, H = heads, D = E / H. Every
# graph takes x (B, 1, E) and gives attn_output (B, 1, E) and the grown cache.

def decoder_io(E: int, H: int, past: str = "split") -> tuple:
    """(inputs, outputs): x and the past, attn_output and the present. past="split":
    past_key and past_value (B, H, T, D) in, present_key and present_value out; "stacked":
    one past (2, B, H, T, D) in, one present out (com.microsoft.Attention's form)."""
    D = E // H
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 1, E])
    y = helper.make_tensor_value_info("attn_output", TensorProto.FLOAT, ["B", 1, E])
    if past == "stacked":
        return ([x, helper.make_tensor_value_info("past", TensorProto.FLOAT, [2, "B", H, "T", D])],
                [y, helper.make_tensor_value_info("present", TensorProto.FLOAT, [2, "B", H, "T1", D])])
    inputs = [x] + [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["B", H, "T", D]) for n in ("past_key", "past_value")]
    outputs = [y] + [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["B", H, "T1", D])
                     for n in ("present_key", "present_value")]
    return inputs, outputs


def step_model(name: str, H: int, p: dict, attention_nodes: list, opsets: dict, packed: bool = False,
               extra_inputs: list = (), extra_inits: list = ()) -> onnx.ModelProto:
    """x -> q, k, v projections (packed: one MatMul and a Split, or the packed qkv kept
    whole when no node reads q) -> attention_nodes (giving "heads" (B, 1, E)) -> out_proj."""
    E = p["in_proj_weight"].shape[1]
    inputs, outputs = decoder_io(E, H)
    nodes, inits = in_projections(p, packed=packed)
    if packed and not any("q" in n.input for n in attention_nodes):
        nodes = nodes[:-1]  # the op reads the packed "qkv" (B, 1, 3E): no Split
        inits = inits[:-1]
    proj_nodes, proj_init = out_projection("heads", p["out_proj.weight"].T, p["out_proj.bias"])
    return make_model(nodes + attention_nodes + proj_nodes, name, inputs + list(extra_inputs), outputs,
                      inits + proj_init + list(extra_inits), opsets)


def multihead_attention_step(H: int, p: dict) -> onnx.ModelProto:
    """com.microsoft.MultiHeadAttention: query, key, value, bias, key_padding_mask,
    attention_bias, past_key, past_value -> output, present_key, present_value."""
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", "", "", "", "past_key", "past_value"],
                            ["heads", "present_key", "present_value"], domain="com.microsoft", num_heads=H)
    return step_model("mha_decode_com_microsoft_multihead_attention", H, p, [node], {"": 17, "com.microsoft": 1})


def onnx_attention_step(H: int, p: dict, packed: bool = False) -> onnx.ModelProto:
    """Attention (opset 23): Q, K, V (3-D, the op splits the heads), attn_mask, past_key,
    past_value -> Y, present_key, present_value. No mask: the new token sees every position."""
    node = helper.make_node("Attention", ["q", "k", "v", "", "past_key", "past_value"],
                            ["heads", "present_key", "present_value"], q_num_heads=H, kv_num_heads=H)
    return step_model("mha_decode_onnx_attention_23", H, p, [node], {"": 23}, packed=packed)


def group_query_attention_step(H: int, p: dict, packed: bool = False) -> onnx.ModelProto:
    """com.microsoft.GroupQueryAttention with kv_num_heads = num_heads: query, key, value (or
    the packed [q | k | v] as query), past_key, past_value, seqlens_k, total_sequence_length
    -> output, present_key, present_value."""
    qkv = ["qkv", "", ""] if packed else ["q", "k", "v"]
    node = helper.make_node("GroupQueryAttention", qkv + ["past_key", "past_value", "seqlens_k", "total_sequence_length"],
                            ["heads", "present_key", "present_value"], domain="com.microsoft", num_heads=H,
                            kv_num_heads=H)
    lengths = [helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["B"]),
               helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, [])]
    return step_model("mha_decode_com_microsoft_group_query_attention", H, p, [node], {"": 17, "com.microsoft": 1},
                      packed=packed, extra_inputs=lengths)


def microsoft_attention_step(H: int, p: dict) -> onnx.ModelProto:
    """com.microsoft.Attention: input, weights (E, 3E), bias (3E), mask_index, past
    (2, B, H, T, D) -> output, present (2, B, H, T + 1, D)."""
    E = p["in_proj_weight"].shape[1]
    inputs, outputs = decoder_io(E, H, past="stacked")
    node = helper.make_node("Attention", ["x", "attention.weight", "attention.bias", "", "past"], ["heads", "present"],
                            domain="com.microsoft", num_heads=H)
    proj_nodes, proj_init = out_projection("heads", p["out_proj.weight"].T, p["out_proj.bias"])
    inits = [initializer("attention.weight", p["in_proj_weight"].T), initializer("attention.bias", p["in_proj_bias"])]
    return make_model([node] + proj_nodes, "mha_decode_com_microsoft_attention", inputs, outputs, inits + proj_init,
                      {"": 17, "com.microsoft": 1})


# (name, builder(H, p), the feeds it takes, optional)
GRAPHS = [
    ("com.microsoft.MultiHeadAttention", multihead_attention_step, ("x", "past_key", "past_value"), True),
    ("Attention-23", onnx_attention_step, ("x", "past_key", "past_value"), False),
    ("Attention-23, packed projection", lambda H, p: onnx_attention_step(H, p, packed=True),
     ("x", "past_key", "past_value"), False),
    ("com.microsoft.GroupQueryAttention", group_query_attention_step,
     ("x", "past_key", "past_value", "seqlens_k", "total_sequence_length"), True),
    ("com.microsoft.GroupQueryAttention, packed QKV", lambda H, p: group_query_attention_step(H, p, packed=True),
     ("x", "past_key", "past_value", "seqlens_k", "total_sequence_length"), True),
    ("com.microsoft.Attention", microsoft_attention_step, ("x", "past"), True),
]


# ---- PyTorch's step and the inputs ------------------------------------------------------

def reference_step(module: torch.nn.MultiheadAttention, T: int, B: int) -> tuple:
    """(feeds {name: array}, attn_output (B, 1, E)): the inputs of every graph for one step
    after T positions, and PyTorch's output for the new token."""
    E, H = module.embed_dim, module.num_heads
    D = E // H
    sequence = torch.randn(T + 1, B, E)  # (T + 1, B, E): the T cached positions, then the new token
    with torch.no_grad():
        out, _ = module(sequence[T:], sequence, sequence, need_weights=False)  # (1, B, E)
        W, b = module.in_proj_weight, module.in_proj_bias                     # (3E, E), (3E)
        past = []
        for i in (1, 2):  # k, then v, of the T earlier positions, as the module projects them
            projected = sequence[:T] @ W[i * E:(i + 1) * E].T + b[i * E:(i + 1) * E]  # (T, B, E)
            past.append(projected.reshape(T, B, H, D).permute(1, 2, 0, 3).contiguous().numpy())  # (B, H, T, D)
    feeds = {"x": np.ascontiguousarray(sequence[T:].numpy().transpose(1, 0, 2)),  # (B, 1, E)
             "past_key": past[0], "past_value": past[1],
             "past": np.stack(past),                                            # (2, B, H, T, D)
             "seqlens_k": np.full(B, T, dtype=np.int32),                        # positions before the new one
             "total_sequence_length": np.array(T + 1, dtype=np.int32)}
    return feeds, out.numpy().transpose(1, 0, 2)


def run_step(model: onnx.ModelProto, feeds: dict, names: tuple, tmp: str, threads: int, ort_dir: str,
             time_it: bool = False, quick: bool = False):
    """attn_output of `model` on the feeds `names` (ONNX Runtime), or with time_it the timing
    answer of bench/ort_run.js; attn_output alone is fetched either way."""
    model_path = os.path.join(tmp, "model.onnx")
    onnx.save(model, model_path)
    args = [model_path, "--threads", str(threads), "--fetch", "attn_output"]
    for name in names:
        array = feeds[name]
        path = os.path.join(tmp, name + ".bin")
        if not os.path.exists(path):
            array.tofile(path)
        kind = "int32" if array.dtype == np.int32 else "float32"
        args += ["--feed", f"{name}={kind}:{','.join(map(str, array.shape))}:{path}"]
    if time_it:
        samples, min_sample_ms = (3, 5) if quick else (7, 20)
        return ort_mha.node(args + ["--samples", str(samples), "--min-sample-ms", str(min_sample_ms)], ort_dir)
    out_dir = os.path.join(tmp, "out")
    os.makedirs(out_dir, exist_ok=True)
    answer = ort_mha.node(args + ["--save", out_dir], ort_dir)
    dims = answer["outputs"]["attn_output"]
    return np.fromfile(os.path.join(out_dir, "attn_output.f32"), dtype=np.float32).reshape(dims)


def bench_step(T: int, B: int, E: int, H: int, threads: int, quick: bool, ort_dir: str, check_only: bool = False):
    """One row: every graph checked against PyTorch, then timed; the fastest is ORT's figure.
    With check_only, the checks alone: {graph: scaled error}."""
    module = ort_mha.seeded_module(E, H)
    p = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    feeds, want = reference_step(module, T, B)
    shape = f"cached={T} B={B} E={E} H={H}"
    times, left_out, errors, version, options = {}, {}, {}, None, None
    with tempfile.TemporaryDirectory(prefix="ort_decode_") as tmp:
        for name, build, names, optional in GRAPHS:
            label = f"{shape} {name}"
            model = build(H, p)
            try:
                got = run_step(model, feeds, names, tmp, threads, ort_dir)
            except RuntimeError as error:
                if not optional:
                    raise
                left_out[name] = ort_mha.engine_error(error)
                print(f"bench/ort_decode.py: {label}: left out, ONNX Runtime will not run it: {left_out[name]}",
                      file=sys.stderr)
                continue
            errors[name] = ort_mha.check_outputs(label, {"attn_output": got}, {"attn_output": want})["attn_output"]
            if check_only:
                print(f"{label}: attn_output within {TOLERANCE} of PyTorch's (scaled error {errors[name]:.3g})")
                continue
            timing = run_step(model, feeds, names, tmp, threads, ort_dir, time_it=True, quick=quick)
            times[name], version, options = timing["median_ms"], timing["ort_version"], timing["session_options"]
    if check_only:
        return errors
    best = min(times, key=times.get)
    return {"cached": T, "N": B, "E": E, "H": H, "threads": threads, "ort_ms": times[best], "ort_best_graph": best,
            "ort_graphs": times, "ort_graphs_left_out": left_out, "max_scaled_error": errors,
            "fetched": ["attn_output"], "ort_version": version, "ort_session_options": options}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--cached", type=int, nargs="*", default=DECODE_CACHED, help="cached positions T")
    parser.add_argument("--batch", type=int, nargs="*", default=[1], help="sequences decoding together, B")
    parser.add_argument("--steps", nargs="*", metavar="T,B", help="these (T, B) alone, instead of --cached x --batch")
    parser.add_argument("--embed-dim", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--ort-dir", default=ort_mha.ORT_DIR)
    parser.add_argument("--check-only", action="store_true", help="check every graph against PyTorch, time none")
    args = parser.parse_args()

    steps = ([tuple(int(v) for v in step.split(",")) for step in args.steps] if args.steps
             else [(T, B) for B in args.batch for T in args.cached])
    torch.manual_seed(0)
    try:
        ort_mha.ensure_onnxruntime(args.ort_dir, install=not args.check_only)
        rows = [bench_step(T, B, args.embed_dim, args.heads, args.threads, args.quick, args.ort_dir, args.check_only)
                for T, B in steps]
    except ort_mha.Unavailable as why:
        print(f"bench/ort_decode.py: ONNX Runtime unavailable: {why}", file=sys.stderr)
        sys.exit(ort_mha.UNAVAILABLE)
    if not args.check_only:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
