#!/usr/bin/python3
"""Companion to docs/03-projections-by-hand.md: q = x W_q^T + b_q, and the two mistakes.

With the golden case cross_seqfirst_f32 (query, key and value are three tensors), this
records PyTorch's own q, k, v inside F.multi_head_attention_forward, computes them by hand
from the three row blocks, and measures the two mistakes of the page: the K -> Q -> V
order and x W without the transpose. The largest errors are the ones the page prints.
Run: /usr/bin/python3 docs/companion/03_projections_by_hand.py
"""

import torch
import torch.nn.functional as F

from common import check, close, done, forward, in_projection_spy, load_case, make_module, max_abs_err, title

title("03 projections by hand")
info, t = load_case("cross_seqfirst_f32")
module = make_module(info, t)
tol = info["tolerance"]
E = info["module"]["embed_dim"]
W, b = module.in_proj_weight.detach(), module.in_proj_bias.detach()
W_q, W_k, W_v = W.chunk(3)
b_q, b_k, b_v = b.chunk(3)

# Which branch of _in_projection_packed runs: count the F.linear calls it makes.
calls = []
linear = F.linear


def counting_linear(x, w, bias=None):
    calls.append(tuple(w.shape))
    return linear(x, w, bias)


F.linear = counting_linear
try:
    with in_projection_spy() as seen:
        forward(module, info, t)
finally:
    F.linear = linear
q, k, v = seen[0]
print(f"  F.linear weight shapes inside the forward: {calls}")
check("three inputs: three linears with (E, E) blocks, then out_proj", calls == [(E, E)] * 4)

print("-- the right way: x W^T + b, blocks Q, K, V --")
check("q = query W_q^T + b_q equals PyTorch's q", close(t["query"] @ W_q.T + b_q, q, **tol))
check("k = key W_k^T + b_k equals PyTorch's k", close(t["key"] @ W_k.T + b_k, k, **tol))
check("v = value W_v^T + b_v equals PyTorch's v", close(t["value"] @ W_v.T + b_v, v, **tol))
print(f"  q[0, 0, :6] = {[round(x, 4) for x in q[0, 0, :6].tolist()]}")
# The page prints q[:, 0, :] row 0 as -2.3148 -0.4190 -0.5362 2.3963 -0.3569 -0.0742.
check("q[0, 0, :6] as the page prints it",
      [f"{x:.4f}" for x in q[0, 0, :6].tolist()] == ["-2.3148", "-0.4190", "-0.5362", "2.3963", "-0.3569", "-0.0742"])

print("-- mistake 1: the order K -> Q -> V --")
err_q = max_abs_err(t["query"] @ W_k.T + b_k, q)
err_k = max_abs_err(t["key"] @ W_q.T + b_q, k)
print(f"  q from rows [E, 2E): max_abs_err = {err_q:.2f}; k from rows [0, E): {err_k:.2f}")
check("max_abs_err 5.16 and 2.67, as on the page", (f"{err_q:.2f}", f"{err_k:.2f}") == ("5.16", "2.67"))

print("-- mistake 2: x W without the transpose --")
err = max_abs_err(t["query"] @ W_q + b_q, q)
print(f"  query W_q + b_q: max_abs_err = {err:.2f}")
check("max_abs_err 3.50, as on the page", f"{err:.2f}" == "3.50")
check("and it runs: W_q is square, so the shape is right", (t["query"] @ W_q).shape == q.shape)
done()
