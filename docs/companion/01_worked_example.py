#!/usr/bin/python3
"""Companion to docs/01-worked-example.md: the whole forward on small integers.

With the golden case worked_example_f64 (E = 4, H = 2, L = S = 3, the integers of
golden/generator/case_tensors.py), this runs PyTorch's own forward, records its q, k, v,
and checks every number the page works out by hand: the projections of x_0, the integer
scores, the weights and outputs of query 0 in both heads, out_proj, and the averaged
weights. Then the answers of the page's exercises: query 1 through
head 0, W_q and W_k exchanged (and when that changes nothing: a symmetric W_k that stays
inside each head), and b_v = 0. Chapter 00 quotes the scores and weights of query 0 too.
Run: /usr/bin/python3 docs/companion/01_worked_example.py
"""

import math

import torch

from common import check, done, forward, in_projection_spy, load_case, make_module, max_abs_err, rounded, title

title("01 a worked example")
info, t = load_case("worked_example_f64")
E, H, D = 4, 2, 2
module = make_module(info, t)
with in_projection_spy() as seen:
    out, weights = forward(module, info, t)  # (L, 1, E), (1, L, S)
q, k, v = (z[:, 0].detach() for z in seen[0])  # (L, E) each: the one batch entry
out, weights = out[:, 0].detach(), weights[0].detach()

print("-- 1) the in-projection --")
check("q = x (W_q is the identity, b_q = 0)", torch.equal(q, t["query"][:, 0]))
check("k_0, k_1, k_2 = [0, 1, 0, 1], [2, 0, 1, 0], [1, 0, 0, 1]",
      k.tolist() == [[0, 1, 0, 1], [2, 0, 1, 0], [1, 0, 0, 1]])
check("v_0, v_1, v_2 = [1, 1, 1, 2], [2, 2, 1, 2], [2, 1, 0, 2]",
      v.tolist() == [[1, 1, 1, 2], [2, 2, 1, 2], [2, 1, 0, 2]])


def head(x, h):
    return x[:, h * D:(h + 1) * D]  # (L, D): columns [hD, (h+1)D)


print("-- 2) to 5) query 0, head 0 --")
integers = head(q, 0) @ head(k, 0).T  # (L, D) x (D, S) -> (L, S)
check("integer scores of query 0: [0, 2, 1]", integers[0].tolist() == [0, 2, 1])
scale = math.sqrt(1.0 / D)
check("sqrt(1/2) = 0.7071", f"{scale:.4f}" == "0.7071")
check("scaled: [0, 1.4142, 0.7071]", rounded(integers[0] * scale) == [0.0, 1.4142, 0.7071])
check("e^1.4142 = 4.1133, e^0.7071 = 2.0281, their sum with e^0 7.1414",
      [f"{math.exp(1.4142135623730951):.4f}", f"{math.exp(scale):.4f}",
       f"{1 + math.exp(2 * scale) + math.exp(scale):.4f}"] == ["4.1133", "2.0281", "7.1414"])
p0 = torch.softmax(integers * scale, dim=-1)  # (L, S)
check("weights of query 0: [0.1400, 0.5760, 0.2840]", rounded(p0[0]) == [0.14, 0.576, 0.284])
o0 = p0 @ head(v, 0)  # (L, S) x (S, D) -> (L, D)
check("head 0's output for query 0: [1.860, 1.576]", rounded(o0[0], 3) == [1.86, 1.576])

print("-- 6) head 1 --")
integers1 = head(q, 1) @ head(k, 1).T
p1 = torch.softmax(integers1 * scale, dim=-1)
o1 = p1 @ head(v, 1)
check("integer scores [0, 1, 0], weights [0.2483, 0.5035, 0.2483]",
      integers1[0].tolist() == [0, 1, 0] and rounded(p1[0]) == [0.2483, 0.5035, 0.2483])
check("head 1's output for query 0: [0.7517, 2]", rounded(o1[0]) == [0.7517, 2.0])

print("-- 7), 8) out_proj and the averaged weights: PyTorch's --")
check("attn_output_0 = [1.8600, 1.5760, 0.7517, 1.7517]", rounded(out[0]) == [1.86, 1.576, 0.7517, 1.7517])
check("averaged weights of query 0: [0.1941, 0.5397, 0.2661]", rounded(weights[0]) == [0.1941, 0.5397, 0.2661])
check("the hand-made heads give PyTorch's output (within 1e-15)",
      max_abs_err(torch.cat([o0, o1], 1) @ t["out_proj.weight"].T + t["out_proj.bias"], out) < 1e-15)

print("-- exercise 1: query 1 through head 0 --")
check("integer scores [2, 0, 0], weights [0.6728, 0.1636, 0.1636], output [1.3272, 1.1636]",
      integers[1].tolist() == [2, 0, 0] and rounded(p0[1]) == [0.6728, 0.1636, 0.1636]
      and rounded(o0[1]) == [1.3272, 1.1636])


def run(W_k=None, exchange=False, b_v=None):
    """PyTorch's (attn_output, weights) with another W_k, W_q and W_k exchanged, or another b_v."""
    m = make_module(info, t)
    with torch.no_grad():
        if W_k is not None:
            m.in_proj_weight[E:2 * E] = W_k
        if exchange:
            W = m.in_proj_weight.clone()
            m.in_proj_weight[:E], m.in_proj_weight[E:2 * E] = W[E:2 * E], W[:E]
        if b_v is not None:
            m.in_proj_bias[2 * E:] = b_v
    o, w = forward(m, info, t)
    return o[:, 0].detach(), w[0].detach()


print("-- exercise 2: W_q and W_k exchanged --")
o_x, w_x = run(exchange=True)
check("query 0's weights do not change (within 1e-15)", max_abs_err(w_x[0], weights[0]) < 1e-15)
check("the last row becomes [0.3247, 0.3506, 0.3247]", rounded(w_x[2]) == [0.3247, 0.3506, 0.3247])
print(f"  attn_output moves by up to {max_abs_err(o_x, out):.4f}")
check("attn_output moves by up to 0.3057", f"{max_abs_err(o_x, out):.4f}" == "0.3057")
eye = torch.eye(E, dtype=torch.float64)
for features, inside in (((0, 1), True), ((1, 2), False)):
    order = list(range(E))
    order[features[0]], order[features[1]] = features[1], features[0]
    W_k = eye[order]  # a swap of two features: a symmetric permutation matrix
    before, w_before = run(W_k=W_k)
    after, w_after = run(W_k=W_k, exchange=True)
    err = max_abs_err(after, before)
    print(f"  W_k = swap of features {features}: symmetric, {'inside head 0' if inside else 'across heads 0 and 1'};"
          f" exchanging W_q and W_k moves attn_output by {err:.4f}")
    check("  ... W_k symmetric", torch.equal(W_k, W_k.T))
    if inside:
        check("  ... changes nothing, bit for bit", torch.equal(after, before) and torch.equal(w_after, w_before))
    else:
        check("  ... changes attn_output by 0.3395", f"{err:.4f}" == "0.3395")

print("-- exercise 3: b_v = 0 --")
o_b, w_b = run(b_v=torch.zeros(E, dtype=torch.float64))
check("attn_output changes by [0, 0, 0, -1] in every row",
      max_abs_err(o_b - out, torch.tensor([0.0, 0.0, 0.0, -1.0], dtype=torch.float64).expand(3, E)) < 1e-15)
check("the weights are equal bit for bit", torch.equal(w_b, weights))
done()
