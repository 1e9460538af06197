#!/usr/bin/python3
"""The answer key's checks: the "Check yourself" questions at the end of pages 00 to 19.

docs/teachers/solutions.md answers them; every answer that is a shape, a number or a
behaviour of PyTorch is checked here against torch.nn.MultiheadAttention 1.13.1 itself,
so the answer key cannot drift from what PyTorch does.

The graded questions, those a page marks "(answer: a number)" or "(answer: one letter)",
are checked three ways at the end (`graded`): the page still asks the question (a phrase
of it is found in its item), the key's "**Answer: X**" is what PyTorch or the arithmetic
here gives, and no marked question of any page is left without a check.
Run: /usr/bin/python3 docs/teachers/self_checks.py
"""

import math
import re
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "companion"))
from common import check, done, forward, in_projection_spy, load_case, make_module, title

title("self-checks: the answers of docs/teachers/solutions.md")
torch.manual_seed(0)

print("-- 00 what attention computes --")
m = torch.nn.MultiheadAttention(8, 1).eval()  # one head, D = E = 8
q_in, kv = torch.randn(5, 1, 8), torch.randn(7, 1, 8)
out, w = m(q_in, kv, kv)
check("L = 5 queries, S = 7 keys: weights (5, 7) per batch entry, rows summing to 1",
      tuple(w.shape) == (1, 5, 7) and torch.allclose(w.sum(-1), torch.ones(1, 5)))
check("E = 512, H = 8: D = 64", torch.nn.MultiheadAttention(512, 8).head_dim == 64)
with torch.no_grad():
    m.out_proj.weight.copy_(torch.eye(8))
    m.out_proj.bias.zero_()
    one_hot = torch.full((5, 7), float("-inf"))
    one_hot[:, 3] = 0.0  # every query may see key 3 only: weight 1
    out, w = m(q_in, kv, kv, attn_mask=one_hot)
    v3 = kv[3] @ m.in_proj_weight[16:].T + m.in_proj_bias[16:]
check("weight 1 on key 3: the output (before out_proj) is v_3", torch.allclose(out[:, 0], v3.expand(5, 8), atol=1e-6))

print("-- 02 the packed layout --")
big = torch.nn.MultiheadAttention(512, 8)
check("(512, 8): in_proj_weight (1536, 512), in_proj_bias (1536)",
      tuple(big.in_proj_weight.shape) == (1536, 512) and tuple(big.in_proj_bias.shape) == (1536,))
check("the same shapes for H = 1, 2, 4, 16: num_heads is not in them",
      all(tuple(torch.nn.MultiheadAttention(512, h).in_proj_weight.shape) == (1536, 512) for h in (1, 2, 4, 16)))
bound = math.sqrt(6 / (512 + 3 * 512))
check("xavier_uniform over (1536, 512): within sqrt(6 / 4E) = 0.0541",
      f"{bound:.4f}" == "0.0541" and float(big.in_proj_weight.abs().max()) <= bound)

print("-- 03 projections by hand --")
info, t = load_case("self_seqfirst_f32")
with in_projection_spy() as seen:
    forward(make_module(info, t), info, t)
check("query (5, 3, 8) -> q (5, 3, 8)", tuple(t["query"].shape) == (5, 3, 8) and tuple(seen[0][0].shape) == (5, 3, 8))
check("bias=False: in_proj_bias is None", torch.nn.MultiheadAttention(8, 2, bias=False).in_proj_bias is None)

print("-- 04 verifying the split --")
module = make_module(info, t)
_, w = forward(module, info, t)
check("element [1]: (N, L, S) = (3, 5, 5), rows summing to 1",
      tuple(w.shape) == (3, 5, 5) and torch.allclose(w.sum(-1), torch.ones(3, 5)))

print("-- 05 heads --")
q = seen[0][0]
qh = q.contiguous().view(5, 3 * 2, 4).transpose(0, 1)
check("q (5, 3, 8), H = 2: qh (6, 5, 4)", tuple(qh.shape) == (6, 5, 4))
N, H = 3, 4
b = torch.arange(N * H).view(N, H)  # b = n*H + h
check("N = 3, H = 4: head 1 of batch entry 2 is batch-head 9", int(b[2, 1]) == 9)
_, per_head = forward(module, info, t, average_attn_weights=False)
check("weights (N, L, S) by default, (N, H, L, S) per head",
      tuple(w.shape) == (3, 5, 5) and tuple(per_head.shape) == (3, 2, 5, 5))

print("-- 09 masks --")
causal = torch.triu(torch.ones(3, 3, dtype=torch.bool), diagonal=1)
check("the causal mask for L = 3: True above the diagonal",
      causal.tolist() == [[False, True, True], [False, False, True], [False, False, False]])
m = torch.nn.MultiheadAttention(8, 2).eval()
x = torch.randn(3, 1, 8)
_, w = m(x, x, x, attn_mask=causal)
check("True = masked: query 0 puts weight 1 on key 0", w[0, 0].tolist() == [1.0, 0.0, 0.0])
all_masked = torch.ones(3, 3, dtype=torch.bool)
out, _ = m(x, x, x, attn_mask=all_masked)
check("every key masked: NaN", bool(torch.isnan(out).all()))
zero = torch.nn.MultiheadAttention(8, 2, add_zero_attn=True).eval()
out, _ = zero(x, x, x, attn_mask=all_masked)
check("add_zero_attn: attn_output = out_proj.bias", torch.allclose(out[:, 0], zero.out_proj.bias.expand(3, 8)))
kv_bias = torch.nn.MultiheadAttention(8, 2, add_bias_kv=True).eval()
out, _ = kv_bias(x, x, x, attn_mask=all_masked)
expected = kv_bias.bias_v.reshape(8) @ kv_bias.out_proj.weight.T + kv_bias.out_proj.bias
check("add_bias_kv: attn_output = bias_v W_o^T + b_o", torch.allclose(out[:, 0], expected.expand(3, 8), atol=1e-6))

print("-- 10 kdim, vdim --")
sep = torch.nn.MultiheadAttention(8, 2, kdim=5, vdim=3)
check("kdim 5, vdim 3: q/k/v_proj_weight (8, 8), (8, 5), (8, 3); in_proj_weight None",
      [tuple(sep.q_proj_weight.shape), tuple(sep.k_proj_weight.shape), tuple(sep.v_proj_weight.shape)]
      == [(8, 8), (8, 5), (8, 3)] and sep.in_proj_weight is None)
check("kdim = vdim = 4 != E = 8: no in_proj_weight either", torch.nn.MultiheadAttention(8, 2, kdim=4, vdim=4).in_proj_weight is None)
check("in_proj_bias stays one (3E) parameter", tuple(sep.in_proj_bias.shape) == (24,))
key, value = torch.randn(6, 2, 5), torch.randn(6, 2, 3)
seen = []
original = F._in_projection
F._in_projection = lambda *a, **k: seen.append(original(*a, **k)) or seen[-1]
try:
    sep(torch.randn(4, 2, 8), key, value)
finally:
    F._in_projection = original
check("key (S, N, kdim) = (6, 2, 5) -> k (6, 2, 8): E features", tuple(seen[0][1].shape) == (6, 2, 8))

print("-- 11 attention maps --")
drop = torch.nn.MultiheadAttention(8, 2, dropout=0.5).train()
x = torch.randn(6, 1, 8)
sums = torch.cat([drop(x, x, x, average_attn_weights=False)[1].sum(-1).flatten() for _ in range(5)])
check("training, dropout 0.5: some rows of the returned weights sum to more than 1", bool((sums > 1).any()))

print("-- 01 a worked example --")
info, t = load_case("worked_example_f64")
module = make_module(info, t)
_, w = forward(module, info, t, average_attn_weights=False)
check("head 1, query 2: weights [1/3, 1/3, 1/3]", torch.allclose(w[0, 1, 2], torch.full((3,), 1 / 3, dtype=torch.float64)))
check("query 0, key 0: (0.1400 + 0.2483) / 2 = 0.1941", f"{float(w[0, :, 0, 0].mean()):.4f}" == "0.1941")

print("-- 17 the backward pass --")
m = torch.nn.MultiheadAttention(8, 2, dtype=torch.float64)
x = torch.randn(4, 1, 8, dtype=torch.float64, requires_grad=True)
mask = torch.zeros(4, 4, dtype=torch.float64, requires_grad=True)
m(x, x, x, attn_mask=mask)[0].sum().backward()
check("a float attn_mask that requires grad gets a gradient of 0 in every row sum",
      float(mask.grad.sum(-1).abs().max()) < 1e-12)

print("-- 18 train it --")
check("a uniform guess among 8 tokens: loss log 8 = 2.08", f"{math.log(8):.2f}" == "2.08")

print("-- 19 decoding --")
m = torch.nn.MultiheadAttention(32, 4, dtype=torch.float64).eval()  # N = 2, H = 4, E = 32: D = 8
x = torch.randn(10, 2, 32, dtype=torch.float64)  # 10 tokens
W, b = m.in_proj_weight.detach(), m.in_proj_bias.detach()
cache_k, cache_v = ((x @ W[i * 32:(i + 1) * 32].T + b[i * 32:(i + 1) * 32]).view(10, 8, 8).transpose(0, 1)
                    for i in (1, 2))  # split into heads: (N*H, t, D)
check("N = 2, H = 4, E = 32, 10 tokens: static_k (8, 10, 8)", tuple(cache_k.shape) == (8, 10, 8))


def mha_forward(query, key, value, **kwargs):
    return F.multi_head_attention_forward(query, key, value, 32, 4, W, b, None, None, False, 0.0,
                                          m.out_proj.weight.detach(), m.out_proj.bias.detach(),
                                          training=False, **kwargs)


full, _ = mha_forward(x, x, x, attn_mask=torch.ones(10, 10, dtype=torch.bool).triu(1))
new = x[9:]  # the newest token, (1, N, E)
step, _ = mha_forward(new, new, new, static_k=cache_k, static_v=cache_v)  # no attn_mask
check("one cached token, no mask: the causal forward's last row", torch.allclose(step, full[9:], atol=1e-12))
seen = []
packed = F._in_projection_packed
F._in_projection_packed = lambda *a, **k: seen.append(packed(*a, **k)) or seen[-1]
try:
    zeros = torch.zeros_like(new)
    other, _ = mha_forward(new, zeros, zeros, static_k=cache_k, static_v=cache_v)
finally:
    F._in_projection_packed = packed
check("static_k, static_v given: key, value projected, then unused", len(seen) == 1 and torch.equal(other, step))
try:
    F.multi_head_attention_forward(new, new, new, 32, 4, W, b, None, None, False, 0.0, None, None, training=False)
    message = None
except TypeError as error:
    message = str(error)
check("out_proj_weight=None: TypeError, nothing returned",
      message == "linear(): argument 'weight' (position 2) must be Tensor, not NoneType")

# ---- the graded questions: page, question, a phrase of it, and the answer computed ----
DOCS = Path(__file__).resolve().parents[1]
KEY = (DOCS / "teachers" / "solutions.md").read_text()
MARK = re.compile(r"\(answer: (a number|one letter)\)")


def items(text, heading):
    """The numbered items of the list under `heading`: {n: text}."""
    block = re.search(r"(?m)^" + re.escape(heading) + r"\s*\n(.*?)(?=^#|^---|\Z)", text, re.S).group(1)
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"(?ms)^(\d+)\. (.*?)(?=^\d+\. |\Z)", block)}


def page(number):
    return next(DOCS.glob(f"{number}-*.md"))


graded_done = set()


def graded(number, n, phrase, answer):
    """Question n of page `number` contains `phrase` and is marked; the key answers `answer`."""
    path = page(number)
    title = path.read_text().split("\n", 1)[0].removeprefix("# ")
    question = items(path.read_text(), "## Check yourself")[n]
    key = items(KEY, f"### Check yourself: {title}")[n]
    given = re.search(r"\*\*Answer: ([^*]+?)\.?\*\*", key).group(1)
    if isinstance(answer, str):
        right = given == answer
    else:
        right = math.isclose(float(given), answer, rel_tol=1e-9, abs_tol=1e-9)
    check(f"{number}, question {n}: key says {given}, computed {answer}",
          phrase in " ".join(question.split()) and MARK.search(question) is not None and right)
    graded_done.add((number, n))


print("-- graded questions --")
torch.manual_seed(0)
info, t = load_case("self_seqfirst_f32")
module = make_module(info, t)
_, w = forward(module, info, t)
with torch.no_grad():
    module.in_proj_weight[16:] *= -3  # W_v only
_, w_v = forward(module, info, t)
module = make_module(info, t)
with torch.no_grad():
    module.in_proj_weight[8:16] *= -3  # W_k only
_, w_k = forward(module, info, t)
letter = "c" if torch.equal(w, w_v) and not torch.equal(w, w_k) else "?"
graded("06", 1, "leaves every attention weight unchanged", letter)
big = torch.nn.MultiheadAttention(512, 8)
D = big.head_dim
A_h = big.in_proj_weight[:D].T @ big.in_proj_weight[512:512 + D] / math.sqrt(D)  # (E, D) x (D, E) -> (E, E)
graded("06", 2, "`nn.MultiheadAttention(512, 8)`, what is the largest rank", int(torch.linalg.matrix_rank(A_h.detach())))
q, k = torch.randn(200000, 64, dtype=torch.float64), torch.randn(200000, 64, dtype=torch.float64)
dots = (q * k).sum(-1)  # (200000): q . k with D = 64
check("sampled: the variance of q . k at D = 64 is within 2% of 64", abs(float(dots.var()) - 64) < 0.02 * 64)
graded("07", 1, "D = 64 independent entries", 64 * 1.0 * 1.0)  # D terms, each Var(q_i k_i) = E[q_i^2] E[k_i^2] = 1
graded("07", 2, "Which factor makes that variance 1",
       {1 / 64: "a", 1 / 8: "b", 1 / 64**2: "c"}[min((1 / 64, 1 / 8, 1 / 64**2), key=lambda f: abs(float((dots * f).var()) - 1))])
graded("08", 2, "`nn.MultiheadAttention(12, 2)`: what is the head dimension D", torch.nn.MultiheadAttention(12, 2).head_dim)
graded("08", 3, "from H = 1 to H = 4",
       torch.nn.MultiheadAttention(64, 4).in_proj_weight.numel() - torch.nn.MultiheadAttention(64, 1).in_proj_weight.numel())
layer = torch.nn.TransformerEncoderLayer(16, 2)
graded("12", 1, "`state_dict` of one `nn.TransformerEncoderLayer`", len(layer.state_dict()))
x = torch.randn(5, 1, 16)
layer.eval()
with torch.no_grad():
    y = layer(x)
    x2 = x.clone()
    x2[4] += 1  # change the last position only
    y2 = layer(x2)
    moved = not torch.allclose(y[:4], y2[:4])  # other positions changed: something mixes them
    lin = layer.linear2(torch.relu(layer.linear1(x2)))[:4]  # the feed-forward block alone
    ff_mixes = not torch.allclose(lin, layer.linear2(torch.relu(layer.linear1(x)))[:4])
    ln_mixes = not torch.allclose(layer.norm1(x2)[:4], layer.norm1(x)[:4])
graded("12", 2, "mixes information between positions", "a" if moved and not ff_mixes and not ln_mixes else "?")
E = 8
block = "abc"[13 // E]  # rows [0, E) W_q, [E, 2E) W_k, [2E, 3E) W_v
graded("13", 2, "row 13 of `in_proj_weight` belongs to which block", block)
m = torch.nn.MultiheadAttention(8, 1).eval()
x = torch.randn(3, 1, 8)
mask = torch.tensor([[False, True, True]] * 3)  # True at keys 1 and 2 of every query
_, w = m(x, x, x, attn_mask=mask)
graded("14", 2, "PyTorch's bool `attn_mask`: what does True mean", "b" if bool((w[0, :, 1:] == 0).all()) else "a")
# 1.13.1 has no SDPA path to run: the answer is the row of docs/15-versions.md's table (its
# companion checks 2.x's side under PyTorch 2.x).
row = next(r for r in page("15").read_text().split("\n")
           if r.startswith("| a fully masked row, `need_weights=False` |"))
graded("15", 2, "through PyTorch 2.5's SDPA path", "b" if "gives the row weight 0" in row.split(" | ")[2] else "?")
graded("16", 2, "how many MiB do the scores", 1 * 8 * 8192 * 8192 * 4 / 2**20)  # N*H*L*S float32 numbers
s = torch.tensor([0.5, 2.0, 1.0, 3.0], dtype=torch.float64)  # a row whose maximum rises in the second tile
m1, m2 = float(s[:2].max()), float(s.max())
l1 = float(torch.exp(s[:2] - m1).sum())
l_rescaled = l1 * math.exp(m1 - m2) + float(torch.exp(s[2:] - m2).sum())
graded("16", 3, "By which factor must l and the", "b" if math.isclose(l_rescaled, float(torch.exp(s - m2).sum())) else "?")

marked = {(path.name[:2], n) for path in DOCS.glob("[0-9][0-9]-*.md")
          for n, q in items(path.read_text(), "## Check yourself").items() if MARK.search(q)}
check(f"every marked question of pages 00 to 19 is graded here ({len(marked)})", marked == graded_done)
done()
