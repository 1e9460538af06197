#!/usr/bin/python3
"""Companion to docs/13-weights.md: a trained layer's weights, split, run, and other layouts.

With the shipped golden/weights/transformer_encoder/model.safetensors (the state_dict of a
real nn.TransformerEncoder, 2 layers, d_model 8, nhead 2), this reads the file by hand,
finds its attention layers by PyTorch's key names, splits layer 0's in_proj_weight into
the page's row blocks, and runs the layer to PyTorch's stored output; it shows that
num_heads is not in the weights. Then, for each folder of golden/layouts/, it applies the
page's formula to the other model's tensors and checks that it gives PyTorch's
[Q; K; V] parameters exactly, and PyTorch's output; and it shows the wrong readings the
page warns about.
Run: /usr/bin/python3 docs/companion/13_weights.py
"""

import json

import numpy as np
import torch

from common import ROOT, check, close, done, max_abs_err, read_safetensors, title

title("13 weights from a trained model")
FOLDER = ROOT / "golden" / "weights" / "transformer_encoder"
model = json.loads((FOLDER / "model.json").read_text())
sd = read_safetensors(FOLDER / "model.safetensors")
E, H = model["d_model"], model["nhead"]
tol = model["tolerance"]

print("-- 1) list the attention layers: by PyTorch's key names --")
prefixes = sorted(k[:-len("out_proj.weight")] for k in sd
                  if k.endswith("out_proj.weight") and k[:-len("out_proj.weight")] + "in_proj_weight" in sd)
print(f"  {len(sd)} tensors, attention layers {prefixes}")
check("24 tensors, 2 attention layers: layers.0.self_attn., layers.1.self_attn.",
      len(sd) == 24 and prefixes == ["layers.0.self_attn.", "layers.1.self_attn."])
check("in_proj_weight (24, 8) = (3E, E)", tuple(sd["layers.0.self_attn.in_proj_weight"].shape) == (24, 8))

print("-- 2) split layer 0: rows [0, 8), [8, 16), [16, 24) --")
layer = {k[len("layers.0.self_attn."):]: v for k, v in sd.items() if k.startswith("layers.0.self_attn.")}
W, b = layer["in_proj_weight"], layer["in_proj_bias"]
W_q, W_k, W_v = W[0:8], W[8:16], W[16:24]
src = torch.from_numpy(np.load(FOLDER / "src.npy"))  # (L, N, E)


def mha(parameters, num_heads):
    m = torch.nn.MultiheadAttention(E, num_heads)
    m.load_state_dict(parameters, strict=True)  # names and shapes as PyTorch's
    return m.eval()


module = mha(layer, H)
seen = []
packed = torch.nn.functional._in_projection_packed
torch.nn.functional._in_projection_packed = lambda *a, **k: seen.append(packed(*a, **k)) or seen[-1]
try:
    out, _ = module(src, src, src)
finally:
    torch.nn.functional._in_projection_packed = packed
q, k, v = seen[0]
check("src W_q^T + b_q, src W_k^T + b_k, src W_v^T + b_v are PyTorch's q, k, v",
      close(src @ W_q.T + b[0:8], q, **tol) and close(src @ W_k.T + b[8:16], k, **tol)
      and close(src @ W_v.T + b[16:24], v, **tol))

print("-- 3) run it: layer 0 gives PyTorch's stored output, layer 1 does not --")
stored = torch.from_numpy(np.load(FOLDER / "layers.0.self_attn.attn_output.npy"))
check("layers.0.self_attn(src) is the stored attn_output", close(out, stored, **tol))
layer1 = {k[len("layers.1.self_attn."):]: v for k, v in sd.items() if k.startswith("layers.1.self_attn.")}
out1, _ = mha(layer1, H)(src, src, src)
err1 = max_abs_err(out1, stored)
print(f"  layers.1.self_attn(src) vs layer 0's: max_abs_err = {err1:.2f}")
check("layer 1 differs by 0.82, as tutorial 13 prints", f"{err1:.2f}" == "0.82")

print("-- num_heads is not in the weights --")
outputs = {}
for heads in (1, 2, 4, 8):
    outputs[heads], _ = mha(layer, heads)(src, src, src)  # loads strictly for every H dividing E
check("the same state_dict loads with H = 1, 2, 4, 8", len(outputs) == 4)
check("only H = 2 (the model's nhead) gives the stored output",
      [close(outputs[h], stored, **tol) for h in (1, 2, 4, 8)] == [False, True, False, False])

print("-- 4) other models' layouts: the page's formulas give PyTorch's [Q; K; V] --")


def load_layout(name):
    folder = ROOT / "golden" / "layouts" / name
    info = json.loads((folder / "layout.json").read_text())
    tensors = {p.name[:-len(".npy")]: torch.from_numpy(np.load(p)) for p in folder.glob("*.npy")}
    theirs = {k[len(info["prefix"]):]: v for k, v in tensors.items() if k.startswith(info["prefix"])}
    ours = {k[len("self_attn."):]: v for k, v in tensors.items() if k.startswith("self_attn.")}
    return info, theirs, ours, tensors["query"], tensors["attn_output"]


def qkv_v2(t, H):  # GPT-NeoX / Megatron v2: rows [head][q,k,v][D]
    D = t.shape[0] // 3 // H
    return t.reshape(H, 3, D, -1).transpose(0, 1).reshape(t.shape)


def qkv_v1(t, H):  # Megatron v1: rows [head][D][q,k,v]
    D = t.shape[0] // 3 // H
    return t.reshape(H, D, 3, -1).permute(2, 0, 1, 3).reshape(t.shape)


def llama_kv(t, H, Hkv):  # (Hkv*D, E) -> (E, E): each key/value head repeated H / Hkv times
    D = t.shape[0] // Hkv
    return t.view(Hkv, D, -1).repeat_interleave(H // Hkv, 0).reshape(H * D, -1)


def to_pytorch(name, x, info):
    if name == "gpt2":
        return {"in_proj_weight": x["c_attn.weight"].T, "in_proj_bias": x["c_attn.bias"],
                "out_proj.weight": x["c_proj.weight"].T, "out_proj.bias": x["c_proj.bias"]}
    if name == "bert":
        return {"in_proj_weight": torch.cat([x[f"self.{p}.weight"] for p in ("query", "key", "value")]),
                "in_proj_bias": torch.cat([x[f"self.{p}.bias"] for p in ("query", "key", "value")]),
                "out_proj.weight": x["output.dense.weight"], "out_proj.bias": x["output.dense.bias"]}
    if name in ("gpt_neox", "megatron_v2", "megatron_v1"):
        order = qkv_v1 if name == "megatron_v1" else qkv_v2
        return {"in_proj_weight": order(x["query_key_value.weight"], info["num_heads"]),
                "in_proj_bias": order(x["query_key_value.bias"], info["num_heads"]),
                "out_proj.weight": x["dense.weight"], "out_proj.bias": x["dense.bias"]}
    if name == "llama":
        Hq, Hkv = info["num_heads"], info["num_key_value_heads"]
        return {"in_proj_weight": torch.cat([x["q_proj.weight"], llama_kv(x["k_proj.weight"], Hq, Hkv),
                                             llama_kv(x["v_proj.weight"], Hq, Hkv)]),
                "out_proj.weight": x["o_proj.weight"]}
    if name == "onnx_attention":
        return {"in_proj_weight": x["weight"].T, "in_proj_bias": x["bias"],
                "out_proj.weight": x["out_proj.weight"], "out_proj.bias": x["out_proj.bias"]}
    raise KeyError(name)


names = sorted(p.name for p in (ROOT / "golden" / "layouts").iterdir() if p.is_dir())
check("seven layouts: bert, gpt2, gpt_neox, llama, megatron_v1, megatron_v2, onnx_attention",
      names == ["bert", "gpt2", "gpt_neox", "llama", "megatron_v1", "megatron_v2", "onnx_attention"])
for name in names:
    info, theirs, ours, x, want = load_layout(name)
    converted = to_pytorch(name, theirs, info)
    exact = converted.keys() == ours.keys() and all(torch.equal(converted[k], ours[k]) for k in ours)
    m = torch.nn.MultiheadAttention(info["embed_dim"], info["num_heads"], bias=info["bias"])
    m.load_state_dict(converted, strict=True)
    got, _ = m.eval()(x, x, x)
    check(f"{name}: PyTorch's parameters bit for bit, and its output", exact and close(got, want, **info["tolerance"]))

print("-- the wrong readings --")
info, theirs, ours, x, want = load_layout("megatron_v1")
check("Megatron v1 read with the v2 order: not PyTorch's in_proj_weight",
      not torch.equal(qkv_v2(theirs["query_key_value.weight"], info["num_heads"]), ours["in_proj_weight"]))
info, theirs, ours, x, want = load_layout("gpt2")
check("GPT-2's c_attn.weight untransposed has the shape (E, 3E), not (3E, E)",
      tuple(theirs["c_attn.weight"].shape) == (12, 36))
info, theirs, ours, x, want = load_layout("onnx_attention")
wrong = to_pytorch("onnx_attention", theirs, info)
wrong["out_proj.weight"] = wrong["out_proj.weight"].T  # a graph's MatMul initializer taken as it is
m = torch.nn.MultiheadAttention(info["embed_dim"], info["num_heads"])
m.load_state_dict(wrong, strict=True)
err = max_abs_err(m.eval()(x, x, x)[0], want)
print(f"  ONNX: out_proj.weight not transposed back: max_abs_err = {err:.2f}")
check("ONNX: the square out_proj untransposed loads, and is 2.11 off at E = 12", f"{err:.2f}" == "2.11")

print("-- rotary's row permutation changes no score without rotary --")
info, theirs, ours, x, want = load_layout("llama")
Hq, E_l = info["num_heads"], info["embed_dim"]
D_l = E_l // Hq


def meta_to_hf(w, heads):  # HF's convert_llama_weights_to_hf.py permute
    return w.view(heads, D_l // 2, 2, -1).transpose(1, 2).reshape(w.shape)


xq = x[:, 0] @ theirs["q_proj.weight"].T                                            # (L, E)
xk = x[:, 0] @ llama_kv(theirs["k_proj.weight"], Hq, info["num_key_value_heads"]).T
pq = x[:, 0] @ meta_to_hf(theirs["q_proj.weight"], Hq).T
pk = x[:, 0] @ llama_kv(meta_to_hf(theirs["k_proj.weight"], info["num_key_value_heads"]), Hq,
                        info["num_key_value_heads"]).T
scores = lambda a, c: torch.einsum("ihd,jhd->hij", a.view(-1, Hq, D_l), c.view(-1, Hq, D_l))  # noqa: E731
check("the same permutation of q's and k's head dimensions: every q.k the same (within 1e-5)",
      close(scores(pq, pk), scores(xq, xk), 1e-5, 1e-5) and not torch.equal(pq, xq))

print("-- the page's exercises (worked out in the teachers' answer key) --")
c_attn = torch.arange(512 * 1536, dtype=torch.float32).reshape(512, 1536)  # GPT-2's (E, 3E), E = 512
check("exercise 1: columns [512, 1024) of c_attn.weight are rows [512, 1024) of in_proj_weight (W_k)",
      torch.equal(c_attn.T[512:1024], c_attn[:, 512:1024].T))
for name, row in (("gpt_neox", 5), ("megatron_v1", 4)):
    info, theirs, ours, x, want = load_layout(name)
    check(f"exercise 2: {name}: PyTorch's row 13 is row {row} of query_key_value.weight",
          torch.equal(ours["in_proj_weight"][13], theirs["query_key_value.weight"][row]))
info, theirs, ours, x, want = load_layout("llama")
check("exercise 3: llama: query head 3 reads key head 1, rows [4, 8) of k_proj.weight",
      torch.equal(ours["in_proj_weight"][16 + 12:16 + 16], theirs["k_proj.weight"][4:8]))
done()
