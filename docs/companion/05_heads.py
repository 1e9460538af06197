#!/usr/bin/python3
"""Companion to docs/05-heads.md: the heads, in PyTorch 1.13.1's exact order.

Takes PyTorch's own q, k, v (recorded inside F.multi_head_attention_forward) for the
golden case attn_mask_float_2d_f32, repeats the page's steps with torch operations --
view and transpose into (N*H, L, D), q / sqrt(D), baddbmm with the mask, softmax, bmm,
merge, out_proj, weights summed over heads / H -- and checks them against PyTorch's
result and the numbers the page prints. Then the rule b = n*H + h for a 3-D mask, and
the shapes of unbatched input, and where 1.13.1 merges the masks in its source.
Run: /usr/bin/python3 docs/companion/05_heads.py
"""

import inspect
import math

import torch
import torch.nn.functional as F

from common import (check, close, done, forward, in_projection_spy, load_case, make_module, max_abs_err,
                    only_with_pytorch_1_13, title)

title("05 heads")
info, t = load_case("attn_mask_float_2d_f32")
tol = info["tolerance"]
module = make_module(info, t)
E, H = info["module"]["embed_dim"], info["module"]["num_heads"]
D = E // H
with in_projection_spy() as seen:
    out, weights = forward(module, info, t)
q, k, v = seen[0]
L, N, _ = q.shape
S = k.shape[0]

print(f"-- 1) split heads: E = {E}, H = {H}, D = {D} --")
qh = q.contiguous().view(L, N * H, D).transpose(0, 1)  # (N*H, L, D)
kh = k.contiguous().view(S, N * H, D).transpose(0, 1)  # (N*H, S, D)
vh = v.contiguous().view(S, N * H, D).transpose(0, 1)  # (N*H, S, D)
print(f"  qh {tuple(qh.shape)}, kh {tuple(kh.shape)}, vh {tuple(vh.shape)}")
check("qh[1] (batch 0, head 1) is columns [D, 2D) of q[:, 0, :]", torch.equal(qh[1], q[:, 0, D:2 * D]))

print("-- 2) scale q, scores with the mask in one baddbmm, softmax --")
print(f"  1/sqrt(D) = {1 / math.sqrt(D):.4f}")
check("1/sqrt(D) = 0.5000, as the page prints", f"{1 / math.sqrt(D):.4f}" == "0.5000")
mask = t["attn_mask"].unsqueeze(0)  # (1, L, S): a 2-D mask is shared by every batch-head
q_scaled = qh / math.sqrt(D)  # 1.13.1: q_scaled = q / math.sqrt(E), with E = head_dim there
scores = torch.baddbmm(mask, q_scaled, kh.transpose(-2, -1))  # (N*H, L, D) x (N*H, D, S) -> (N*H, L, S)
w = torch.softmax(scores, dim=-1)
# The page prints mask[0] row 0 and weights[0] row 0:
check("mask[0] row 0: -0.3963 1.3564 0.1353 -inf -1.1583 0.9048",
      [f"{x:.4f}" for x in mask[0, 0].tolist()] == ["-0.3963", "1.3564", "0.1353", "-inf", "-1.1583", "0.9048"])
check("weights[0] row 0: 0.0644 0.4226 0.1447 0.0000 0.0247 0.3436",
      [f"{x:.4f}" for x in w[0, 0].tolist()] == ["0.0644", "0.4226", "0.1447", "0.0000", "0.0247", "0.3436"])
qk = torch.bmm(q_scaled, kh.transpose(-2, -1))
check("scores[0] row 0 before the mask: -0.1485 -0.0206 0.1289 ...",
      [f"{x:.4f}" for x in qk[0, 0, :3].tolist()] == ["-0.1485", "-0.0206", "0.1289"])

print("-- 3) weights v, merge the heads, out_proj --")
heads = torch.bmm(w, vh)  # (N*H, L, S) x (N*H, S, D) -> (N*H, L, D)
merged = heads.transpose(0, 1).contiguous().view(L * N, E)  # heads side by side again
attn_output = F.linear(merged, t["out_proj.weight"], t["out_proj.bias"]).view(L, N, E)
check("attn_output by hand equals PyTorch's", close(attn_output, out, **tol))
check("and the golden attn_output.npy", close(attn_output, t["attn_output"], **tol))
mean = w.view(N, H, L, S).sum(dim=1) / H  # 1.13.1's average; 2.x writes .mean(dim=1)
check("weights summed over heads / H equal PyTorch's (N, L, S)", close(mean, weights, **tol))

print("-- 4) a 3-D mask: batch-head b = n*H + h --")
info3, t3 = load_case("attn_mask_bool_3d_batchfirst_f32")
m3 = make_module(info3, t3)
_, per_head = forward(m3, info3, t3, average_attn_weights=False)  # (N, H, L, S)
N3, H3 = per_head.shape[:2]
mask3 = t3["attn_mask"]  # (N*H, L, S), True = masked
print(f"  attn_mask {tuple(mask3.shape)}, per-head weights {tuple(per_head.shape)}")
check("weights[n, h] are 0 exactly where mask[n*H + h] is True",
      all(torch.equal(per_head[n, h] == 0, mask3[n * H3 + h]) for n in range(N3) for h in range(H3)))
check("and mask[h*N + n] would be the wrong reading",
      not all(torch.equal(per_head[n, h] == 0, mask3[h * N3 + n]) for n in range(N3) for h in range(H3)))

print("-- 5) unbatched input: query (L, E), no N --")
for name, expect in [("per_head_weights_unbatched_f64", (4, 4, 3)),    # (H, L, S)
                     ("attn_mask_bool_3d_unbatched_f32", (4, 6)),      # mask (H, L, S), weights (L, S)
                     ("need_weights_false_unbatched_f64", None)]:      # element [1] is None
    i, tt = load_case(name)
    o, ww = forward(make_module(i, tt), i, tt)
    shape = None if ww is None else tuple(ww.shape)
    mask_shape = tuple(tt["attn_mask"].shape) if "attn_mask" in tt else None
    print(f"  {name}: query {tuple(tt['query'].shape)}, attn_mask {mask_shape}, "
          f"[0] {tuple(o.shape)}, [1] {shape}")
    check(f"{name}: [1] is {expect}", shape == expect)
    check(f"{name}: [0] is (L, E) and PyTorch's", o.dim() == 2 and close(o, tt["attn_output"], **i["tolerance"]))

print("-- the answer of exercise 1: the same parameters with H = 1 and H = 4 --")
expected = {1: ("0.437", -0.295660, 0.018991), 4: ("0.324", -0.236530, 0.049432)}  # the answer key, exercise 1
for heads in (1, 4):
    other = torch.nn.MultiheadAttention(E, heads).eval()
    other.load_state_dict(module.state_dict())  # num_heads is not in the state_dict: it loads
    o, w = forward(other, info, t)
    err = max(max_abs_err(o, t["attn_output"]), max_abs_err(w, t["attn_output_weights"]))
    print(f"  H = {heads}: attn_output[0, 0, 0] = {float(o[0, 0, 0]):.6f}, weights[0, 0, 0] = {float(w[0, 0, 0]):.6f}, "
          f"max_abs_err = {err:.3f}")
    err_text, out0, w0 = expected[heads]
    check(f"H = {heads}: max_abs_err {err_text} and the first values, as tutorial 05 prints them",
          f"{err:.3f}" == err_text and abs(float(o[0, 0, 0]) - out0) < 1e-6 and abs(float(w[0, 0, 0]) - w0) < 1e-6)

print("-- 6) where 1.13.1 merges the masks: after add_zero_attn, before the scaling --")
only_with_pytorch_1_13("section 6 (the order of lines in 1.13.1's F.multi_head_attention_forward)")
source = inspect.getsource(F.multi_head_attention_forward)
order = ["q = q.contiguous().view(tgt_len, bsz * num_heads, head_dim).transpose(0, 1)",  # step 1
         "if add_zero_attn:",
         "key_padding_mask = key_padding_mask.view(bsz, 1, 1, src_len)",                 # the merge
         "attn_mask = attn_mask.logical_or(key_padding_mask)",
         "new_attn_mask.masked_fill_(attn_mask, float(\"-inf\"))",                       # bool -> float
         "q_scaled = q / math.sqrt(E)"]                                                     # step 2
where = [source.find(line) for line in order]
check("each line is in F.multi_head_attention_forward", all(w >= 0 for w in where))
check("split heads < add_zero_attn < merge < bool -> float < scaling", where == sorted(where))
done()
