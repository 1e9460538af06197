#!/usr/bin/python3
"""Companion to docs/17-backward-by-hand.md: every gradient of the layer, formula by formula.

With the golden case backward_cross_unbatched_f64 (cross attention, unbatched, float64,
loss = sum(attn_output * G)), this computes the forward with torch operations, then
undoes it with the page's formulas, written out (no autograd), and compares each result
with PyTorch's autograd: the golden gradients, and autograd's gradient of the scores Z
(the program prints it as dS). It also checks the page's side claims: the rows of dZ sum
to 0, the scale sits once in dQ, the blocks of grad in_proj_weight are in Q, K, V order,
one input used three times gets the sum of three gradients, and the answers to the
page's exercises 2 and 3.
Run: /usr/bin/python3 docs/companion/17_backward_by_hand.py
"""

import math

import torch
import torch.nn.functional as F

from common import check, close, done, load_case, make_module, max_abs_err, title

title("17 the backward pass by hand")
info, t = load_case("backward_cross_unbatched_f64")
E, H = info["module"]["embed_dim"], info["module"]["num_heads"]
D = E // H
s = 1.0 / math.sqrt(D)
W, b = t["in_proj_weight"], t["in_proj_bias"]
W_q, W_k, W_v = W.chunk(3)
b_q, b_k, b_v = b.chunk(3)
W_o, b_o = t["out_proj.weight"], t["out_proj.bias"]
query, key, value, G = t["query"], t["key"], t["value"], t["grad_attn_output"]  # (L, E), (S, E), (S, E), (L, E)
tol = dict(rtol=1e-12, atol=1e-12)  # float64; the sums run in another order than autograd's

print("-- 0) PyTorch's own gradients: autograd of loss = sum(attn_output * G) --")
module = make_module(info, t)
q_in, k_in, v_in = (x.clone().requires_grad_() for x in (query, key, value))
out, _ = module(q_in, k_in, v_in, need_weights=False)
(out * G).sum().backward()
check("autograd now gives the golden grad.query, grad.key, grad.in_proj_weight",
      close(q_in.grad, t["grad.query"], **tol) and close(k_in.grad, t["grad.key"], **tol)
      and close(module.in_proj_weight.grad, t["grad.in_proj_weight"], **tol))


def split(x):  # (rows, E) -> (H, rows, D): head h is columns [hD, (h+1)D)
    return x.view(x.shape[0], H, D).transpose(0, 1)


def merge(x):  # (H, rows, D) -> (rows, E)
    return x.transpose(0, 1).reshape(x.shape[1], E)


print("-- 1) the forward, one tensor per step --")
Q, K, V = query @ W_q.T + b_q, key @ W_k.T + b_k, value @ W_v.T + b_v  # (L, E), (S, E), (S, E)
Qh, Kh, Vh = split(Q), split(K), split(V)                              # (H, L, D), (H, S, D), (H, S, D)
Z = (Qh * s) @ Kh.transpose(1, 2)  # (H, L, D) x (H, D, S) -> (H, L, S): the scores, no mask here
P = torch.softmax(Z, dim=-1)
O = P @ Vh                         # (H, L, S) x (H, S, D) -> (H, L, D)
X = merge(O)                       # (L, E)
Y = X @ W_o.T + b_o
check("Y is PyTorch's attn_output", close(Y, t["attn_output"], **tol))

print("-- 2) to 7) back, with the page's formulas --")
dY = G                                 # dL/d(attn_output) is exactly G
dX, dW_o, db_o = dY @ W_o, dY.T @ X, dY.sum(0)
check("out_proj: dW_o = dY^T X, db_o = sum of dY", close(dW_o, t["grad.out_proj.weight"], **tol)
      and close(db_o, t["grad.out_proj.bias"], **tol))
dO = split(dX)                         # the backward of merge_heads is split_heads
dP, dV = dO @ Vh.transpose(1, 2), P.transpose(1, 2) @ dO
dZ = P * (dP - (dP * P).sum(-1, keepdim=True))  # softmax_backward
Z_auto = Z.clone().requires_grad_()
(((torch.softmax(Z_auto, -1) @ Vh).transpose(0, 1).reshape(-1, E) @ W_o.T + b_o) * G).sum().backward()
check("dZ = P * (dP - rowsum(dP * P)) is autograd's gradient of Z", close(dZ, Z_auto.grad, **tol))
print(f"  largest |row sum of dZ|: {float(dZ.sum(-1).abs().max()):.1e}")
check("every row of dZ sums to 0 (within 1e-15)", float(dZ.sum(-1).abs().max()) < 1e-15)
dQh, dKh = dZ @ Kh * s, dZ.transpose(1, 2) @ (Qh * s)  # scores_backward
dQ, dK, dV = merge(dQh), merge(dKh), merge(dV)
grad_W = torch.cat([dQ.T @ query, dK.T @ key, dV.T @ value])  # [dW_q; dW_k; dW_v]
grad_b = torch.cat([dQ.sum(0), dK.sum(0), dV.sum(0)])
check("grad in_proj_weight = [dW_q; dW_k; dW_v], rows [0, E), [E, 2E), [2E, 3E)",
      close(grad_W, t["grad.in_proj_weight"], **tol))
check("grad in_proj_bias = [db_q; db_k; db_v]", close(grad_b, t["grad.in_proj_bias"], **tol))
check("grad query = dQ W_q, grad key = dK W_k, grad value = dV W_v",
      close(dQ @ W_q, t["grad.query"], **tol) and close(dK @ W_k, t["grad.key"], **tol)
      and close(dV @ W_v, t["grad.value"], **tol))

print("-- 8) two mistakes --")
unscaled = merge(dZ @ Kh) @ W_q  # dQ without s, taken back to the query input
err = max_abs_err(unscaled, t["grad.query"])
print(f"  grad query from dQ without the 1/sqrt(D): max_abs_err = {err:.2f}")
check("dQ without the scale is off by 0.31, as the page says", f"{err:.2f}" == "0.31")
swapped = torch.cat([dK.T @ key, dQ.T @ query, dV.T @ value])
check("grad in_proj_weight as [dW_k; dW_q; dW_v] is not PyTorch's",
      max_abs_err(swapped, t["grad.in_proj_weight"]) > 0.1)

print("-- self-attention: one input, three uses, one gradient --")
x = query.clone().requires_grad_()
module.zero_grad()
out_self, _ = module(x, x, x, need_weights=False)
(out_self * G).sum().backward()
Qs, Ks, Vs = query @ W_q.T + b_q, query @ W_k.T + b_k, query @ W_v.T + b_v
Ps = torch.softmax((split(Qs) * s) @ split(Ks).transpose(1, 2), -1)
dOs = split(G @ W_o)
dPs = dOs @ split(Vs).transpose(1, 2)
dZs = Ps * (dPs - (dPs * Ps).sum(-1, keepdim=True))
dQs, dKs, dVs = merge(dZs @ split(Ks) * s), merge(dZs.transpose(1, 2) @ (split(Qs) * s)), merge(Ps.transpose(1, 2) @ dOs)
check("x.grad = dQ W_q + dK W_k + dV W_v = [dQ | dK | dV] W",
      close(x.grad, dQs @ W_q + dKs @ W_k + dVs @ W_v, **tol)
      and close(x.grad, torch.cat([dQs, dKs, dVs], 1) @ W, **tol))

print("-- exercise 2: a constant added to a row of Z --")
Z2 = Z.clone()
Z2[0, 1] += 3.0
check("P does not change (within 1e-15)", max_abs_err(torch.softmax(Z2, -1), P) < 1e-15)

print("-- exercise 3: dropout p = 0.5, the weights it keeps --")
torch.manual_seed(0)
dropped = F.dropout(P, p=0.5, training=True)
kept = dropped != 0
check("every kept weight is exactly twice the eval-mode weight", torch.equal(dropped[kept], 2 * P[kept]))
done()
