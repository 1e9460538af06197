#!/usr/bin/python3
"""Companion to docs/10-kdim-vdim.md: kdim and vdim force separate projection weights.

Builds nn.MultiheadAttention(8, 2, kdim=5, vdim=3) as the golden case
cross_kdim_vdim_seqfirst_f32 does, lists its state_dict (no in_proj_weight), records the
q, k, v that F._in_projection computes inside the forward, and checks that a packed
module made separate (rows [0, E), [E, 2E), [2E, 3E)) computes the same numbers.
Run: /usr/bin/python3 docs/companion/10_kdim_vdim.py
"""

import torch
import torch.nn.functional as F

from common import check, close, done, forward, in_projection_spy, load_case, make_module, title

title("10 kdim, vdim and separate projections")

print("-- 1) kdim = 5, vdim = 3, E = 8 --")
info, t = load_case("cross_kdim_vdim_seqfirst_f32")
module, tol = make_module(info, t), info["tolerance"]
shapes = {k: tuple(v.shape) for k, v in module.state_dict().items()}
for key, shape in shapes.items():
    print(f"  {key:<16} {shape}")
check("state_dict as the page lists it",
      shapes == {"q_proj_weight": (8, 8), "k_proj_weight": (8, 5), "v_proj_weight": (8, 3),
                 "in_proj_bias": (24,), "out_proj.weight": (8, 8), "out_proj.bias": (8,)})
check("_qkv_same_embed_dim is False and in_proj_weight is None",
      module._qkv_same_embed_dim is False and module.in_proj_weight is None)
with in_projection_spy() as seen:
    out, _ = forward(module, info, t)
q, k, v = seen[0]
b_q, b_k, b_v = module.in_proj_bias.detach().chunk(3)
check("k = key k_proj_weight^T + b_k: (S, N, kdim) -> (S, N, E)",
      tuple(k.shape) == (6, 2, 8) and close(t["key"] @ module.k_proj_weight.detach().T + b_k, k, **tol))
check("v = value v_proj_weight^T + b_v: (S, N, vdim) -> (S, N, E)",
      tuple(v.shape) == (6, 2, 8) and close(t["value"] @ module.v_proj_weight.detach().T + b_v, v, **tol))
check("PyTorch's k is the golden k.npy; the output is attn_output.npy",
      close(k, t["k"], **tol) and close(out, t["attn_output"], **tol))

print("-- 2) a packed module, made separate --")
info2, t2 = load_case("cross_seqfirst_f32")
packed, tol2 = make_module(info2, t2), info2["tolerance"]
E, H = info2["module"]["embed_dim"], info2["module"]["num_heads"]
W = packed.in_proj_weight.detach()
out_packed, _ = forward(packed, info2, t2)
# What a module in the separate form runs: use_separate_proj_weight=True, three blocks.
out_separate, _ = F.multi_head_attention_forward(
    t2["query"], t2["key"], t2["value"], E, H, None, packed.in_proj_bias.detach(), None, None, False, 0.0,
    packed.out_proj.weight.detach(), packed.out_proj.bias.detach(), training=False,
    use_separate_proj_weight=True, q_proj_weight=W[0:E], k_proj_weight=W[E:2 * E], v_proj_weight=W[2 * E:])
check("rows [0, E), [E, 2E), [2E, 3E) as q/k/v_proj_weight: the same output", close(out_separate, out_packed, **tol2))
check("and both are PyTorch's (golden)", close(out_packed, t2["attn_output"], **tol2))

print("-- 3) the keys are part of the format --")
try:
    torch.nn.MultiheadAttention(8, 2).load_state_dict(module.state_dict())
    refused = False
except RuntimeError as e:
    refused = "in_proj_weight" in str(e) and "q_proj_weight" in str(e)
    print("  " + "\n  ".join(line.strip() for line in str(e).splitlines()[1:]))
check("a packed module refuses the separate form's state_dict", refused)
done()
