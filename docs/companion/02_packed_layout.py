#!/usr/bin/python3
"""Companion to docs/02-packed-layout.md: the packed layout, in real PyTorch.

Reproduces the page's numbers with torch.nn.MultiheadAttention itself: in_proj_weight
(3E, E) is W_q, W_k, W_v stacked by rows; xavier_uniform_ runs over the whole (3E, E)
matrix; and rows [0, E) applied to the query give the q that PyTorch computes inside
F.multi_head_attention_forward (recorded here by wrapping F._in_projection_packed).
Run: /usr/bin/python3 docs/companion/02_packed_layout.py
"""

import math

import torch
import torch.nn.functional as F

from common import check, close, done, forward, in_projection_spy, load_case, make_module, title

title("02 the packed layout")

# 1) the page's tiny module: E = 4, H = 2, value at (row, col) = 0.01 row + 0.001 col
E = 4
m = torch.nn.MultiheadAttention(E, 2)
print("-- 1) state_dict of nn.MultiheadAttention(4, 2) --")
for key, tensor in m.state_dict().items():
    print(f"  {key:<18} {tuple(tensor.shape)}")
check("state_dict keys and shapes as the page's table",
      {k: tuple(t.shape) for k, t in m.state_dict().items()} ==
      {"in_proj_weight": (3 * E, E), "in_proj_bias": (3 * E,),
       "out_proj.weight": (E, E), "out_proj.bias": (E,)})
rows = torch.arange(3 * E, dtype=torch.float32).unsqueeze(1)
cols = torch.arange(E, dtype=torch.float32).unsqueeze(0)
with torch.no_grad():
    m.in_proj_weight.copy_(0.01 * rows + 0.001 * cols)
W_q, W_k, W_v = m.in_proj_weight.detach().chunk(3)  # rows [0, E), [E, 2E), [2E, 3E)
print(f"  W_k(0, 0) = {W_k[0, 0].item():.3f} (row E = 4 of in_proj_weight)")
check("W_k(0, 0) = 0.040: K starts at row E", f"{W_k[0, 0].item():.3f}" == "0.040")
check("in_proj_weight(6, 3) = 0.063, the page's example", f"{m.in_proj_weight[6, 3].item():.3f}" == "0.063")
check("pack(split(W)) == W, bit for bit", torch.equal(torch.cat([W_q, W_k, W_v]), m.in_proj_weight.detach()))

# 2) xavier_uniform_ over (3E, E): bound sqrt(6 / (E + 3E)), not sqrt(6 / 2E)
print("-- 2) initialisation at E = 64 --")
E = 64
torch.manual_seed(0)
packed = torch.nn.MultiheadAttention(E, 4)
separate = torch.nn.MultiheadAttention(E, 4, kdim=32, vdim=32)  # kdim != E: q/k/v_proj_weight
bound_packed, bound_block = math.sqrt(6 / (4 * E)), math.sqrt(6 / (2 * E))
print(f"  sqrt(6 / 4E) = {bound_packed:.4f}, sqrt(6 / 2E) = {bound_block:.4f}")
print(f"  max |in_proj_weight| = {packed.in_proj_weight.abs().max().item():.4f}")
print(f"  max |q_proj_weight|  = {separate.q_proj_weight.abs().max().item():.4f}")
check("bounds as the page prints them: 0.1531 and 0.2165",
      (f"{bound_packed:.4f}", f"{bound_block:.4f}") == ("0.1531", "0.2165"))
check("packed init within sqrt(6 / 4E)", packed.in_proj_weight.abs().max().item() <= bound_packed)
check("separate init beyond sqrt(6 / 4E), within sqrt(6 / 2E)",
      bound_packed < separate.q_proj_weight.abs().max().item() <= bound_block)

# 3) a module PyTorch made (golden case self_seqfirst_f32): rows [0, E) are Q
print("-- 3) golden case self_seqfirst_f32 --")
info, t = load_case("self_seqfirst_f32")
module = make_module(info, t)
E = info["module"]["embed_dim"]
W = module.in_proj_weight.detach()
b = module.in_proj_bias.detach()
with in_projection_spy() as seen:
    out, weights = forward(module, info, t)
q, k, v = seen[0]
tol = info["tolerance"]
check("query W_q^T + b_q, rows [0, E), equals PyTorch's q",
      close(F.linear(t["query"], W[0:E], b[0:E]), q, **tol))
check("key W_k^T + b_k, rows [E, 2E), equals PyTorch's k",
      close(F.linear(t["key"], W[E:2 * E], b[E:2 * E]), k, **tol))
check("value W_v^T + b_v, rows [2E, 3E), equals PyTorch's v",
      close(F.linear(t["value"], W[2 * E:], b[2 * E:]), v, **tol))
check("and PyTorch's q is the golden q.npy", close(q, t["q"], **tol))
check("the forward output is the golden attn_output.npy", close(out, t["attn_output"], **tol))
done()
