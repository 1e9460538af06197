#!/usr/bin/python3
"""Companion to docs/07-why-scaling.md: why the scores are divided by sqrt(D).

Draws queries and keys with independent unit-variance entries (each query its own S
keys: a batch of N = 2000 entries with L = 1 query and S = 16 keys), runs them through
F.multi_head_attention_forward with one head and identity projections (so that PyTorch's
own q and k are the drawn ones), and measures, for D = 4, 16, 64, 256:

- the variance of q.k (it grows like D) and of q.k / sqrt(D) (it stays near 1);
- how saturated the softmax rows are, with PyTorch's scale and without it (the query
  multiplied by sqrt(D) first, which cancels PyTorch's division): the mean largest
  weight, the mean entropy (ln S for uniform weights, 0 for one-hot), and the mean of
  1 - sum_j p_j^2, the trace of the softmax Jacobian, which goes to 0 as a row saturates
  and takes the gradient with it.

It prints the table that docs/07-why-scaling.md shows and checks that the page shows exactly
that table (--update rewrites it there).
Run: /usr/bin/python3 docs/companion/07_why_scaling.py [--update]
"""

import math
import sys

import numpy as np
import torch
import torch.nn.functional as F

from common import check, done, title
from page_table import sync

title("07 why 1/sqrt(D)")
ROWS, S, SEED = 2000, 16, 2024  # queries per D (each its own keys), keys per query


def weights(query, key, D):
    """softmax(q k^T / sqrt(D)) as F.multi_head_attention_forward 1.13.1 computes it: one
    head, in_proj_weight = [I; I; I] and no biases, so q = query and k = key exactly.
    query (N, D), key (N, S, D) -> weights (N, S)."""
    eye = torch.eye(D, dtype=torch.float64)
    keys = key.transpose(0, 1)  # (S, N, D), sequence first
    _, w = F.multi_head_attention_forward(
        query.unsqueeze(0), keys, keys, D, 1, torch.cat([eye, eye, eye]), None,
        None, None, False, 0.0, eye, None, training=False)  # w: (N, L = 1, S)
    return w[:, 0]


def stats(w):
    entropy = -(w * torch.log(w.clamp_min(1e-300))).sum(-1)
    return (w.max(-1).values.mean().item(), entropy.mean().item(), (1 - (w * w).sum(-1)).mean().item())


rng = np.random.default_rng(SEED)
rows = []
for D in (4, 16, 64, 256):
    query = torch.from_numpy(rng.standard_normal((ROWS, D)))   # (N, D), unit variance
    key = torch.from_numpy(rng.standard_normal((ROWS, S, D)))  # (N, S, D)
    dots = torch.einsum("nd,nsd->ns", query, key)              # (N, S): q.k
    scaled = weights(query, key, D)
    unscaled = weights(query * math.sqrt(D), key, D)          # PyTorch's division cancelled
    check(f"D = {D}: PyTorch's weights are softmax(q.k / sqrt(D))",
          torch.allclose(scaled, torch.softmax(dots / math.sqrt(D), -1), rtol=1e-12, atol=1e-15))
    check(f"D = {D}: with the query times sqrt(D), softmax(q.k)",
          torch.allclose(unscaled, torch.softmax(dots, -1), rtol=1e-9, atol=1e-12))
    rows.append((D, dots.var().item(), (dots / math.sqrt(D)).var().item(), stats(unscaled), stats(scaled)))

print(f"-- {ROWS} queries, each with {S} keys, per D; uniform weights: max 1/S = {1 / S:.4f}, entropy ln S = {math.log(S):.3f} --")
table = ("| D | var(q·k) | var(q·k / √D) | largest weight, unscaled | largest weight, scaled "
         "| entropy, unscaled | entropy, scaled | 1 − Σp², unscaled | 1 − Σp², scaled |\n"
         "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
for D, var, var_scaled, (mu, hu, gu), (ms, hs, gs) in rows:
    table += (f"| {D} | {var:.1f} | {var_scaled:.2f} | {mu:.3f} | {ms:.3f} | {hu:.3f} | {hs:.3f} "
              f"| {gu:.3f} | {gs:.3f} |\n")
print(table, end="")

for D, var, var_scaled, _, _ in rows:
    check(f"D = {D}: var(q.k) within 20% of D, var(q.k / sqrt(D)) within 20% of 1",
          abs(var / D - 1) < 0.2 and abs(var_scaled - 1) < 0.2)
unscaled_max = [r[3][0] for r in rows]
scaled_max = [r[4][0] for r in rows]
check("unscaled: the largest weight grows with D", unscaled_max == sorted(unscaled_max))
check("unscaled at D = 256: rows nearly one-hot (mean largest weight > 0.9)", unscaled_max[-1] > 0.9)
check("unscaled at D = 256: the Jacobian's trace below 0.15", rows[-1][3][2] < 0.15)
check("scaled: the largest weight stays within 0.05 of its value at D = 4",
      max(abs(m - scaled_max[0]) for m in scaled_max) < 0.05)
sync("07-why-scaling.md", "07_why_scaling.py", table, "--update" in sys.argv[1:])
done()
