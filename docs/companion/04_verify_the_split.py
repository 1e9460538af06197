#!/usr/bin/python3
"""Companion to docs/04-verify-the-split.md: element [1] is the weights, not q, k, v.

Calls F.multi_head_attention_forward on the golden case self_seqfirst_f32, shows what
element [1] is (softmax weights averaged over heads, rows summing to 1), and checks a
split the two right ways: against PyTorch's own _in_projection_packed, and by the whole
forward, which a Q/K swap fails. The numbers checked are the ones the page prints, and
the popular call's out_proj_weight=None fails in 1.13.1, inside linear().
Last, the condition of docs/14-common-mistakes.md: the swap is invisible when the masks
leave each query one visible key (attn_mask_bool_2d_key_padding_mask_bool_f32), and
shows as soon as a row sees two keys.
Run: /usr/bin/python3 docs/companion/04_verify_the_split.py
"""

import torch
import torch.nn.functional as F

from common import check, close, done, inputs, load_case, max_abs_err, title

title("04 verifying the split")
info, t = load_case("self_seqfirst_f32")
tol = info["tolerance"]
E, H = info["module"]["embed_dim"], info["module"]["num_heads"]
query, key, value = inputs(info, t)  # one object: self-attention
W, b = t["in_proj_weight"], t["in_proj_bias"]


def mha(in_proj_weight, **kwargs):
    return F.multi_head_attention_forward(
        query, key, value, E, H, in_proj_weight, b, None, None, False, 0.0,
        t["out_proj.weight"], t["out_proj.bias"], training=False, **kwargs)


print("-- 1) what F.multi_head_attention_forward returns --")
out = mha(W)
print(f"  [0] attn_output {tuple(out[0].shape)}, [1] attn_output_weights {tuple(out[1].shape)}")
check("[0] is (L, N, E) = (5, 3, 8), [1] is (N, L, S) = (3, 5, 5)",
      tuple(out[0].shape) == (5, 3, 8) and tuple(out[1].shape) == (3, 5, 5))
check("every row of [1] sums to 1", close(out[1].sum(-1), torch.ones(3, 5), 1e-6, 1e-6))
# The page prints row 0 of [1][0] as 0.1098 0.2405 0.1942 0.1842 0.2713.
check("[1][0] row 0 as the page prints it",
      [f"{x:.4f}" for x in out[1][0, 0].tolist()] == ["0.1098", "0.2405", "0.1942", "0.1842", "0.2713"])
check("[1] is the golden attn_output_weights.npy", close(out[1], t["attn_output_weights"], **tol))
try:  # the popular call passes out_proj_weight=None
    F.multi_head_attention_forward(query, key, value, E, H, W, b, None, None, False, 0.0, None, None,
                                   training=False)
    refused = False
except TypeError as error:
    refused = str(error) == "linear(): argument 'weight' (position 2) must be Tensor, not NoneType"
check("out_proj_weight=None: TypeError in linear(), nothing returned", refused)

print("-- 2) the other shapes of element [1] --")
shapes = {
    "need_weights=False": mha(W, need_weights=False)[1],
    "average_attn_weights=False (N, H, L, S)": mha(W, average_attn_weights=False)[1],
}
unbatched = F.multi_head_attention_forward(
    query[:, 0], query[:, 0], query[:, 0], E, H, W, b, None, None, False, 0.0,
    t["out_proj.weight"], t["out_proj.bias"], training=False)
per_head_unbatched = F.multi_head_attention_forward(
    query[:, 0], query[:, 0], query[:, 0], E, H, W, b, None, None, False, 0.0,
    t["out_proj.weight"], t["out_proj.bias"], training=False, average_attn_weights=False)
for label, w in shapes.items():
    print(f"  {label}: {None if w is None else tuple(w.shape)}")
print(f"  unbatched query (L, E): [0] {tuple(unbatched[0].shape)}, [1] {tuple(unbatched[1].shape)}, "
      f"per head {tuple(per_head_unbatched[1].shape)}")
check("need_weights=False: [1] is None", shapes["need_weights=False"] is None)
check("average_attn_weights=False: (N, H, L, S) = (3, 2, 5, 5)",
      tuple(shapes["average_attn_weights=False (N, H, L, S)"].shape) == (3, 2, 5, 5))
check("unbatched: [0] (L, E), [1] (L, S), per head (H, L, S)",
      (tuple(unbatched[0].shape), tuple(unbatched[1].shape), tuple(per_head_unbatched[1].shape))
      == ((5, 8), (5, 5), (2, 5, 5)))

print("-- 3) right way a): PyTorch's own in-projection --")
q, k, v = F._in_projection_packed(query, key, value, W, b)
check("query W_q^T + b_q equals _in_projection_packed's q", close(query @ W[:E].T + b[:E], q, **tol))
check("_in_projection_packed's q, k, v are the golden q, k, v",
      close(q, t["q"], **tol) and close(k, t["k"], **tol) and close(v, t["v"], **tol))

print("-- 4) right way b): the whole forward; a Q/K swap fails it --")
check("attn_output equals the golden attn_output.npy", close(out[0], t["attn_output"], **tol))
swapped = torch.cat([W[E:2 * E], W[:E], W[2 * E:]])  # the weight blocks only, as tutorial 04
wrong = mha(swapped)
err = max_abs_err(wrong[0], t["attn_output"])
print(f"  Q, K blocks swapped: max_abs_err = {err:.2f}")
check("the swap differs by 1.71, as the page prints", f"{err:.2f}" == "1.71")

print("-- 5) when a swap does not show: one visible key per row --")
info2, t2 = load_case("attn_mask_bool_2d_key_padding_mask_bool_f32")
x2 = t2["query"]  # self-attention: one object


def mha2(in_proj_weight, key_padding_mask):
    return F.multi_head_attention_forward(
        x2, x2, x2, E, H, in_proj_weight, t2["in_proj_bias"], None, None, False, 0.0,
        t2["out_proj.weight"], t2["out_proj.bias"], training=False,
        attn_mask=t2["attn_mask"], key_padding_mask=key_padding_mask)


W2 = t2["in_proj_weight"]
swapped2 = torch.cat([W2[E:2 * E], W2[:E], W2[2 * E:]])
kpm = t2["key_padding_mask"]
visible = (~(t2["attn_mask"].unsqueeze(0) | kpm.unsqueeze(1))).sum(-1)  # (N, L): keys each row sees
check("the masks leave every query exactly one visible key", bool((visible == 1).all()))
right, wrong2 = mha2(W2, kpm), mha2(swapped2, kpm)
check("S = 5 > 1, yet the swap gives the same output and weights, bit for bit",
      torch.equal(right[0], wrong2[0]) and torch.equal(right[1], wrong2[1]))
kpm_open = torch.zeros_like(kpm)  # no key padded: rows see the keys attn_mask leaves them
check("(with the padding removed, every row sees two keys or more)",
      bool(((~t2["attn_mask"]).sum(-1) >= 2).all()))
err2 = max_abs_err(mha2(swapped2, kpm_open)[0], mha2(W2, kpm_open)[0])
print(f"  the same case without its key_padding_mask: the swap moves attn_output by {err2:.2f}")
check("... and then the swap shows (by more than 0.1)", err2 > 0.1)
done()
