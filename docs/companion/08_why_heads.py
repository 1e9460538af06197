#!/usr/bin/python3
"""Companion to docs/08-why-heads.md: two heads can look at two places at once; one cannot.

Builds, by hand, the weights of a torch.nn.MultiheadAttention(12, 2) over 6 tokens whose
features are [one-hot position (6) | content (6)]:

- head 0 looks at the previous token: its query is the one-hot of position i - 1, its
  key the one-hot of position j (W_q shifts the position code by one);
- head 1 looks at the first token: its query is the one-hot of position 0 (a bias), its
  key again the one-hot of position j;
- both heads' values are the token's content; out_proj is the identity.

Both queries are scaled so that a matching key scores 8 after PyTorch's 1/sqrt(D). The
same construction in nn.MultiheadAttention(12, 1) -- one head of D = 12 that sees both
query codes at once, its query rescaled for D = 12 -- can only share one softmax between
the two positions. Every weight
and output here is PyTorch's own (average_attn_weights=False). The page's table is
printed and checked against docs/08-why-heads.md (--update rewrites it there).
Run: /usr/bin/python3 docs/companion/08_why_heads.py [--update]
"""

import math
import sys

import numpy as np
import torch

from common import check, done, title
from page_table import sync

title("08 why several heads")
L, P = 6, 6           # tokens; width of the position code
E = 2 * P             # features: [position one-hot (P) | content (P)]
SCORE = 8.0           # the score of a matching key after PyTorch's scaling

content = torch.from_numpy(np.random.default_rng(5).standard_normal((L, P)))  # (L, P)
x = torch.cat([torch.eye(L, P, dtype=torch.float64), content], dim=1).unsqueeze(1)  # (L, N = 1, E)


def layer(H):
    """nn.MultiheadAttention(E, H) with the hand-made weights; H = 2 or 1, same numbers
    except the query scale, which makes a match score SCORE after / sqrt(E / H)."""
    m = torch.nn.MultiheadAttention(E, H, dtype=torch.float64).eval()
    alpha = SCORE * math.sqrt(E // H)
    W = torch.zeros(3 * E, E, dtype=torch.float64)
    b = torch.zeros(3 * E, dtype=torch.float64)
    for d in range(P - 1):
        W[d, d + 1] = alpha         # q columns [0, P): position i -> one-hot of i - 1
    b[P + 0] = alpha                # q columns [P, 2P): one-hot of position 0, for every i
    for d in range(P):
        W[E + d, d] = 1.0           # k columns [0, P): one-hot of position j
        W[E + P + d, d] = 1.0       # k columns [P, 2P): the same
        W[2 * E + d, P + d] = 1.0   # v columns [0, P): content of j
        W[2 * E + P + d, P + d] = 1.0  # v columns [P, 2P): the same
    with torch.no_grad():
        m.in_proj_weight.copy_(W)
        m.in_proj_bias.copy_(b)
        m.out_proj.weight.copy_(torch.eye(E, dtype=torch.float64))
        m.out_proj.bias.zero_()
    out, w = m(x, x, x, average_attn_weights=False)  # (L, 1, E), (1, H, L, S)
    return m, out[:, 0].detach(), w[0].detach()


two, out2, w2 = layer(2)
one, out1, w1 = layer(1)
check("the same parameters, the same shapes, for H = 2 and H = 1",
      {k: v.shape for k, v in two.state_dict().items()} == {k: v.shape for k, v in one.state_dict().items()})

print("-- two heads --")
rows = range(2, L)  # queries with a previous token that is not token 0
check("head 0: every query i >= 1 puts > 0.99 on key i - 1", all(w2[0, i, i - 1] > 0.99 for i in range(1, L)))
check("head 1: every query puts > 0.99 on key 0", all(w2[1, i, 0] > 0.99 for i in range(L)))
check("output columns [0, P) hold the previous token's content (within 0.02)",
      all(torch.allclose(out2[i, :P], content[i - 1], atol=0.02) for i in rows))
check("output columns [P, 2P) hold the first token's content (within 0.02)",
      all(torch.allclose(out2[i, P:], content[0], atol=0.02) for i in rows))

print("-- one head of D = 12: the same weights but for the query's scale --")
check("in_proj_weight differs only in the query rows, by sqrt(12) / sqrt(6)",
      torch.equal(two.in_proj_weight[E:], one.in_proj_weight[E:])
      and torch.allclose(two.in_proj_weight[:E] * math.sqrt(2), one.in_proj_weight[:E], rtol=1e-15, atol=0))
check("the key holds the position code in both halves", torch.equal(one.in_proj_weight[E:E + P], one.in_proj_weight[E + P:2 * E]))
check("query i >= 2 shares its weight: between 0.49 and 0.5 on key i - 1 and on key 0",
      all(0.49 < w1[0, i, i - 1] <= 0.5 and 0.49 < w1[0, i, 0] <= 0.5 for i in rows))
blend = [(content[i - 1] + content[0]) / 2 for i in range(L)]
check("its output is the blend (c_{i-1} + c_0) / 2 in both halves (within 0.02)",
      all(torch.allclose(out1[i, :P], blend[i], atol=0.02) and torch.allclose(out1[i, P:], blend[i], atol=0.02)
          for i in rows))
err_prev = max(float((out1[i, :P] - content[i - 1]).abs().max()) for i in rows)
print(f"  one head: largest error of columns [0, P) against the previous token's content: {err_prev:.2f}")
check("so neither content can be read back from it: 1.46, as the page says", f"{err_prev:.2f}" == "1.46")

i = 3
mean = w2.mean(0)  # what average_attn_weights=True returns
print(f"  two heads, averaged, query {i}: {[round(x, 3) for x in mean[i].tolist()]}")
check("averaged over the two heads, query 3 looks like the one head (within 0.01)",
      torch.allclose(mean[i], w1[0, i], atol=0.01) and f"{mean[i, 0]:.3f}" == f"{mean[i, 2]:.3f}" == "0.499")
check("while the outputs differ (by more than 0.5)", float((out2[i] - out1[i]).abs().max()) > 0.5)

cells = lambda v: " | ".join(f"{x:.3f}" for x in v.tolist())  # noqa: E731
table = (f"| weights of query {i} | " + " | ".join(f"key {j}" for j in range(L)) + " |\n"
         "| --- |" + " ---: |" * L + "\n"
         f"| 2 heads, D = 6: head 0 (previous token) | {cells(w2[0, i])} |\n"
         f"| 2 heads, D = 6: head 1 (first token) | {cells(w2[1, i])} |\n"
         f"| 1 head, D = 12 | {cells(w1[0, i])} |\n")
print(table, end="")
sync("08-why-heads.md", "08_why_heads.py", table, "--update" in sys.argv[1:])
done()
