#!/usr/bin/python3
"""Companion to docs/06-why-qkv.md: what the query, key and value projections each do.

With real torch.nn.MultiheadAttention 1.13.1 modules:

1. the weights depend on W_q and W_k only; W_v changes the output and not one weight;
2. per head, the score is a bilinear form x_i A_h x_j^T with A_h = W_q,h^T W_k,h / sqrt(D),
   an (E, E) matrix of rank D (golden case no_bias_self_f32, which has no biases);
3. with one projection for queries and keys (W_q = W_k) the scores are symmetric, and
   most tokens attend to themselves most; with two, they need not.

It prints the table that docs/06-why-qkv.md shows and checks that the page shows it
(--update rewrites it there).
Run: /usr/bin/python3 docs/companion/06_why_qkv.py [--update]
"""

import math
import sys

import numpy as np
import torch

from common import check, close, done, forward, load_case, make_module, title
from page_table import sync

title("06 why queries, keys and values")

print("-- 1) the weights come from q and k; v only carries what is mixed --")
info, t = load_case("self_seqfirst_f32")
module, tol = make_module(info, t), info["tolerance"]
E = info["module"]["embed_dim"]
out, w = forward(module, info, t, average_attn_weights=False)
with torch.no_grad():
    module.in_proj_weight[2 * E:] *= -3.0  # a different W_v
out_v, w_v = forward(module, info, t, average_attn_weights=False)
with torch.no_grad():
    module.in_proj_weight[2 * E:] /= -3.0
    module.in_proj_weight[E:2 * E] *= -3.0  # a different W_k
out_k, w_k = forward(module, info, t, average_attn_weights=False)
check("another W_v: the weights are equal, bit for bit", torch.equal(w_v, w))
check("another W_v: the output differs", not close(out_v, out, **tol))
check("another W_k: the weights differ", not close(w_k, w, **tol))

print("-- 2) per head, the score is x_i A_h x_j^T, A_h = W_q,h^T W_k,h / sqrt(D), rank D --")
info, t = load_case("no_bias_self_f32")
module, tol = make_module(info, t), info["tolerance"]
E, H = info["module"]["embed_dim"], info["module"]["num_heads"]
D = E // H
_, w = forward(module, info, t, average_attn_weights=False)  # (N, H, L, S)
W = module.in_proj_weight.detach()
x = t["query"].transpose(0, 1)  # (N, L, E)
for h in range(H):
    W_qh, W_kh = W[h * D:(h + 1) * D], W[E + h * D:E + (h + 1) * D]  # (D, E) each: head h's rows
    A = W_qh.double().T @ W_kh.double() / math.sqrt(D)             # (E, D) x (D, E) -> (E, E)
    by_hand = torch.softmax(x.double() @ A @ x.double().transpose(1, 2), dim=-1)  # (N, L, S)
    rank = int(torch.linalg.matrix_rank(A))
    print(f"  head {h}: A_h (E, E) = {tuple(A.shape)}, rank {rank}, "
          f"|A - A^T| / |A| = {float((A - A.T).norm() / A.norm()):.2f}")
    check(f"head {h}: softmax(x A_h x^T) equals PyTorch's weights", close(by_hand, w[:, h], **tol))
    check(f"head {h}: A_h has rank D = {D} < E = {E}, and is not symmetric",
          rank == D and not torch.allclose(A, A.T))

print("-- 3) one projection for queries and keys, or two --")
E, H, L, SEED = 64, 4, 32, 7
torch.manual_seed(SEED)
untied = torch.nn.MultiheadAttention(E, H, dtype=torch.float64).eval()
tied = torch.nn.MultiheadAttention(E, H, dtype=torch.float64).eval()
with torch.no_grad():
    tied.load_state_dict(untied.state_dict())
    tied.in_proj_weight[E:2 * E] = tied.in_proj_weight[0:E]  # W_k = W_q
x = torch.from_numpy(np.random.default_rng(SEED).standard_normal((L, 1, E)))  # (L, N = 1, E)
rows = []
for name, m in (("two projections, W_q != W_k", untied), ("one projection, W_q = W_k", tied)):
    _, w = m(x, x, x, average_attn_weights=False)  # (1, H, L, L)
    w = w[0].detach()
    self_most = (w.argmax(-1) == torch.arange(L)).double().mean().item()
    diagonal = w.diagonal(dim1=-2, dim2=-1).mean().item()
    rows.append((name, self_most, diagonal))
    print(f"  {name}: rows attending most to themselves {self_most:.3f}, mean weight on the diagonal {diagonal:.3f}")

# The scores themselves, per head, from PyTorch's q and k: symmetric only when tied.
def scores(m):
    W, b = m.in_proj_weight.detach(), m.in_proj_bias.detach()
    q = (x[:, 0] @ W[:E].T + b[:E]).view(L, H, E // H).transpose(0, 1)           # (H, L, D)
    k = (x[:, 0] @ W[E:2 * E].T + b[E:2 * E]).view(L, H, E // H).transpose(0, 1)  # (H, L, D)
    return q @ k.transpose(1, 2) / math.sqrt(E // H)                               # (H, L, L)


s_tied, s_untied = scores(tied), scores(untied)
check("tied: every head's (L, L) scores are symmetric", torch.allclose(s_tied, s_tied.transpose(1, 2), rtol=1e-12, atol=1e-12))
check("untied: they are not", not torch.allclose(s_untied, s_untied.transpose(1, 2), rtol=1e-3, atol=1e-3))
check("tied: most rows attend most to themselves (> 0.5)", rows[1][1] > 0.5)
check("untied: few rows do (< 0.2)", rows[0][1] < 0.2)

table = ("| in_proj_weight | rows whose largest weight is on themselves | mean weight on the diagonal |\n"
         "| --- | ---: | ---: |\n")
table += "".join(f"| {name} | {self_most:.3f} | {diagonal:.3f} |\n" for name, self_most, diagonal in rows)
print(table, end="")
print(f"  (E = {E}, H = {H}, L = {L} tokens, {H * L} rows; uniform weights would put 1/L = {1 / L:.3f} on the diagonal)")
sync("06-why-qkv.md", "06_why_qkv.py", table, "--update" in sys.argv[1:])
done()
