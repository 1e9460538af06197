#!/usr/bin/python3
"""Companion to docs/15-versions.md: what PyTorch 1.13.1, the goldens' version, does.

Checks, in the installed torch (Debian's python3-torch 1.13.1), the facts that
docs/15-versions.md states about it:

1. the API: no is_causal argument, no F._canonical_mask, no public
   F.scaled_dot_product_attention;
2. the source lines of F.multi_head_attention_forward: the scaling (a true float32
   division, measured on 100 000 values), the average over heads, the merge of the two masks;
   its 24 arguments, static_k and static_v replacing k and v after the in-projection, and
   out_proj_weight passed to linear() unchecked;
3. need_weights=False computes the same softmax and returns None for the weights;
4. the fused fast path, torch._native_multi_head_attention: which calls take it (a spy
   counts its calls), and that it computes what the slow path computes;
5. two things only 1.13.1 does with float key_padding_masks.

Run: /usr/bin/python3 docs/companion/15_versions.py
"""

import inspect
import math
import warnings

import numpy as np
import torch
import torch.nn.functional as F

from common import check, close, done, only_with_pytorch_1_13, title

title("15 versions: what 1.13.1 does")
only_with_pytorch_1_13("every check of this page (1.13.1's API, source lines and fast path)")
print("-- 1) the API --")
check("torch.__version__ is 1.13 (Debian's 1.13.1 reports 1.13.0a0)", torch.__version__.startswith("1.13"))
check("nn.MultiheadAttention.forward has no is_causal argument",
      "is_causal" not in inspect.signature(torch.nn.MultiheadAttention.forward).parameters)
check("F.multi_head_attention_forward has no is_causal argument",
      "is_causal" not in inspect.signature(F.multi_head_attention_forward).parameters)
check("there is no F._canonical_mask", not hasattr(F, "_canonical_mask"))
check("there is no public F.scaled_dot_product_attention", not hasattr(F, "scaled_dot_product_attention"))

print("-- 2) lines of F.multi_head_attention_forward --")
source = inspect.getsource(F.multi_head_attention_forward)
for line in ("B, Nt, E = q.shape",
             "q_scaled = q / math.sqrt(E)",
             "attn_output_weights = torch.baddbmm(attn_mask, q_scaled, k.transpose(-2, -1))",
             "attn_output_weights = attn_output_weights.sum(dim=1) / num_heads",
             "attn_mask = attn_mask.logical_or(key_padding_mask)",
             'attn_mask = attn_mask.masked_fill(key_padding_mask, float("-inf"))',
             'new_attn_mask.masked_fill_(attn_mask, float("-inf"))'):
    check(f"has: {line}", line in source)
check("has no SDPA branch: no scaled_dot_product_attention call", "scaled_dot_product_attention" not in source)
arguments = list(inspect.signature(F.multi_head_attention_forward).parameters)
check("24 arguments, the last static_k, static_v, average_attn_weights",
      len(arguments) == 24 and arguments[-3:] == ["static_k", "static_v", "average_attn_weights"])
check("the in-projection comes first; static_k replaces k after it (a TODO)",
      source.index("_in_projection_packed(query, key, value") < source.index("k = static_k")
      and source.count("TODO finish disentangling control flow") == 2)
check("out_proj_weight goes to linear() unchecked",
      "linear(attn_output, out_proj_weight, out_proj_bias)" in source and "out_proj_weight is None" not in source
      and "out_proj_weight is not None" not in source)

# q / sqrt(D) (1.13.1) and q * sqrt(1/D) (2.x) are the same math; in float32 they can differ
# in the last bit. 1.13.1 divides: a true float32 division by the float32 of sqrt(D).
q = torch.from_numpy(np.random.default_rng(3).standard_normal(100000).astype(np.float32))


def units_in_last_place(got, want):
    """The largest |got - want|, in units of the spacing of float32 numbers at |want|."""
    return float(((got - want).abs() / torch.from_numpy(np.spacing(want.abs().numpy()))).max())


expected = {4: (0, 0, 0), 6: (0, 241, 85068)}  # the page's table: division, reciprocal, 2.x
for D in (4, 6):
    divisor = np.float32(math.sqrt(D))
    ours = q / math.sqrt(D)                                           # 1.13.1's line
    division = torch.from_numpy(q.numpy() / divisor)                  # NumPy's float32 division
    reciprocal = q * torch.tensor(np.float32(1.0) / divisor)          # times the float32 reciprocal
    two_x = q * math.sqrt(1.0 / float(D))                             # 2.x's line
    counts = tuple(int((ours != other).sum()) for other in (division, reciprocal, two_x))
    print(f"  D = {D}: of {q.numel()} values, q / sqrt(D) differs from NumPy's float32 division in "
          f"{counts[0]}, from times the reciprocal in {counts[1]}, from q * sqrt(1/D) in {counts[2]}")
    check(f"D = {D}: the counts of the page's table, {expected[D]}", counts == expected[D])
    if D == 6:
        check("D = 6: sqrt(6) as float32 is 2.4494898", repr(divisor) == "2.4494898")
        reciprocal_32 = np.float32(1.0) / divisor
        multiplier_2x = np.float32(math.sqrt(1.0 / 6.0))
        check("D = 6: the reciprocal is 0.40824828, 2.x's multiplier 0.4082483",
              repr(reciprocal_32) == "0.40824828" and repr(multiplier_2x) == "0.4082483")
        check("  ... one unit in the last place apart", np.nextafter(reciprocal_32, np.float32(1)) == multiplier_2x)
        check("D = 6: the reciprocal's differences are 1 unit in the last place",
              units_in_last_place(reciprocal, ours) == 1.0)
        check("D = 6: 2.x's differences are at most 2 units", units_in_last_place(two_x, ours) <= 2.0)

E, H, L, N = 8, 2, 5, 3
torch.manual_seed(0)
x = torch.randn(N, L, E)


print("-- 3) need_weights=False: the same softmax, weights dropped --")
m = torch.nn.MultiheadAttention(E, H).eval()
xs = x.transpose(0, 1)  # (L, N, E): sequence first
softmax, calls = F.softmax, []
F.softmax = lambda *a, **k: calls.append(1) or softmax(*a, **k)
try:
    out_w, w = m(xs, xs, xs)
    out_nw, nw = m(xs, xs, xs, need_weights=False)
finally:
    F.softmax = softmax
check("one softmax call with need_weights=True, one with False", len(calls) == 2)
check("need_weights=False returns None, and the same output bit for bit", nw is None and torch.equal(out_w, out_nw))

print("-- 4) the fast path: torch._native_multi_head_attention --")
native, fast_calls = torch._native_multi_head_attention, []


def spy(*args, **kwargs):
    fast_calls.append(1)
    return native(*args, **kwargs)


def takes_fast_path(module_kwargs=None, call=None, no_grad=True, training=False, inputs=None):
    """Does this forward call torch._native_multi_head_attention?"""
    torch.manual_seed(0)
    options = dict(embed_dim=E, num_heads=H, batch_first=True)
    options.update(module_kwargs or {})
    module = torch.nn.MultiheadAttention(**options)
    module.train(training)
    q = k = v = x
    if inputs == "cross":
        k = v = x.clone()
    if inputs == "unbatched":
        q = k = v = x[0]
    before = len(fast_calls)
    with torch.set_grad_enabled(not no_grad):
        module(q, k, v, **(call or {}))
    return len(fast_calls) > before


torch._native_multi_head_attention = spy
try:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = [
            ("eval, no_grad, batch_first self-attention, H even", {}, True),
            ("  ... with need_weights=True (returns the weights)", dict(call=dict(need_weights=True)), True),
            ("  ... with a bool key_padding_mask", dict(call=dict(key_padding_mask=torch.zeros(N, L, dtype=torch.bool))), True),
            ("  ... with grad enabled, parameters requiring grad", dict(no_grad=False), False),
            ("  ... in training mode", dict(training=True), False),
            ("  ... with batch_first=False", dict(module_kwargs=dict(batch_first=False)), False),
            ("  ... with an attn_mask", dict(call=dict(attn_mask=torch.zeros(L, L, dtype=torch.bool))), False),
            ("  ... with key and value another tensor than query", dict(inputs="cross"), False),
            ("  ... with unbatched (L, E) input", dict(inputs="unbatched"), False),
            ("  ... with num_heads odd (H = 1)", dict(module_kwargs=dict(num_heads=1)), False),
            ("  ... with dropout=0.1, even in eval mode", dict(module_kwargs=dict(dropout=0.1)), False),
            ("  ... with add_bias_kv", dict(module_kwargs=dict(add_bias_kv=True)), False),
            ("  ... with add_zero_attn", dict(module_kwargs=dict(add_zero_attn=True)), False),
        ]
        for label, kwargs, fast in cases:
            check(f"{label}: {'fast' if fast else 'slow'} path", takes_fast_path(**kwargs) == fast)

        print("-- the fast path computes the slow path's numbers --")
        torch.manual_seed(0)
        m = torch.nn.MultiheadAttention(E, H, batch_first=True).eval()
        kpm = torch.zeros(N, L, dtype=torch.bool)
        kpm[1, 3:] = True
        before = len(fast_calls)
        with torch.no_grad():
            fast_out, fast_w = m(x, x, x, key_padding_mask=kpm)
        slow_out, slow_w = m(x, x, x, key_padding_mask=kpm)  # grad enabled: slow path
        check("(the first call took the fast path, the second did not)", len(fast_calls) == before + 1)
        err_out, err_w = float((fast_out - slow_out).abs().max()), float((fast_w - slow_w).abs().max())
        print(f"  max |fast - slow|: attn_output {err_out:.1e}, weights {err_w:.1e} (depend on the CPU's kernels)")
        check("both below 1e-6, as the page says", err_out < 1e-6 and err_w < 1e-6)
        check("attn_output within float32's rtol 1.3e-6, atol 1e-5", close(fast_out, slow_out, 1.3e-6, 1e-5))
        check("attn_output_weights too", close(fast_w, slow_w, 1.3e-6, 1e-5))
        kpm[2, :] = True  # batch entry 2: every key padded
        with torch.no_grad():
            fast_out, _ = m(x, x, x, key_padding_mask=kpm)
        check("a fully padded batch entry: NaN on the fast path too (1.13.1, CPU)",
              bool(torch.isnan(fast_out[2]).all()) and bool(torch.isfinite(fast_out[:2]).all()))

        print("-- 5) float key_padding_masks in 1.13.1 --")
        kpm_float = torch.zeros(N, L)
        kpm_float[:, 1] = -1.0  # a penalty, not -inf
        with torch.no_grad():
            _, w_fast = m(x, x, x, key_padding_mask=kpm_float)
        _, w_slow = m(x, x, x, key_padding_mask=kpm_float)
        print(f"  weight on key 1: fast path {float(w_fast[0, 0, 1]):.4f}, slow path {float(w_slow[0, 0, 1]):.4f}")
        check("the weight on key 1 of query 0: 0 and 0.0477, as the page says",
              f"{float(w_fast[0, 0, 1]):.4f}" == "0.0000" and f"{float(w_slow[0, 0, 1]):.4f}" == "0.0477")
        check("fast path: a float key_padding_mask is made bool, so -1.0 masks the key", bool((w_fast[:, :, 1] == 0).all()))
        check("slow path: it is added to the scores, so the key keeps a weight", bool((w_slow[:, :, 1] > 0).all()))
        _, w_both = m(x, x, x, key_padding_mask=kpm_float, attn_mask=torch.zeros(L, L))
        _, w_none = m(x, x, x)
        check("slow path, float attn_mask with float key_padding_mask: the padding is ignored",
              close(w_both, w_none, 1e-6, 1e-7) and not close(w_both, w_slow, 1e-6, 1e-7))
finally:
    torch._native_multi_head_attention = native
done()
