#!/usr/bin/python3
"""Companion to docs/09-masks.md: causal and padding masks, bool or float, and NaN.

Every number here comes from torch.nn.MultiheadAttention 1.13.1 running the golden cases
the page uses: the causal mask, a bool mask and its float form, the SDPA reading of the
same bool mask (True = attend), key padding, a fully masked row (NaN), add_zero_attn
(out_proj.bias) and add_bias_kv (bias_v through out_proj). It also checks that 1.13.1's merge of two bool masks (logical_or) gives
what the additive merge of 2.x (and of this library) gives, and the unbatched shapes.
Under PyTorch 2.x, the fully masked row with need_weights=False is checked as 2.x computes
it (docs/15-versions.md): out_proj.bias, not NaN.
Run: /usr/bin/python3 docs/companion/09_masks.py
"""

import torch

from common import check, close, done, forward, is_pytorch_1_13, load_case, make_module, max_abs_err, title

title("09 masks")

print("-- 1) the causal mask --")
causal_float = torch.nn.Transformer.generate_square_subsequent_mask(4)
print(causal_float)
check("generate_square_subsequent_mask: -inf above the diagonal, 0 elsewhere",
      torch.equal(torch.isinf(causal_float), torch.ones(4, 4, dtype=torch.bool).triu(1))
      and bool((causal_float[~torch.isinf(causal_float)] == 0).all()))
info, t = load_case("is_causal_self_f32")
L = t["query"].shape[0]
check("is_causal_self_f32's attn_mask is the bool causal mask (True above the diagonal)",
      torch.equal(t["attn_mask"], torch.ones(L, L, dtype=torch.bool).triu(1)))
out, w = forward(make_module(info, t), info, t)
check("its output is PyTorch's (golden)", close(out, t["attn_output"], **info["tolerance"]))

print("-- 2) bool or float: True -> -inf, False -> 0 --")
info, t = load_case("attn_mask_bool_2d_f32")
module, tol = make_module(info, t), info["tolerance"]
bool_mask = t["attn_mask"]
float_mask = torch.zeros(bool_mask.shape).masked_fill(bool_mask, float("-inf"))
out_bool, _ = forward(module, info, t)
out_float, _ = forward(module, info, t, attn_mask=float_mask)
out_sdpa, _ = forward(module, info, t, attn_mask=~bool_mask)  # True = attend, read as True = masked
check("bool mask: attn_output is PyTorch's (golden)", close(out_bool, t["attn_output"], **tol))
check("the same mask as float gives the same output", close(out_float, out_bool, **tol))
err = max_abs_err(out_sdpa, out_bool)
print(f"  SDPA's meaning (True = attend): max_abs_err = {err:.2f}")
check("the inverted reading differs by 1.53, as the page prints", f"{err:.2f}" == "1.53")

print("-- 3) key padding --")
info, t = load_case("key_padding_mask_bool_f32")
out, w = forward(make_module(info, t), info, t)
kpm = t["key_padding_mask"]  # (N, S), True = padding
check("a padded key gets weight 0 in every row of its batch entry",
      bool((w.permute(1, 0, 2)[:, kpm] == 0).all()))
check("batch 2 row 0: 0.3141 0.1951 0.2470 0.2439 0.0000 0.0000, as the page prints",
      [f"{x:.4f}" for x in w[2, 0].tolist()] == ["0.3141", "0.1951", "0.2470", "0.2439", "0.0000", "0.0000"])

print("-- 4) the merge of attn_mask and key_padding_mask --")
info, t = load_case("attn_mask_bool_2d_key_padding_mask_bool_f32")
module, tol = make_module(info, t), info["tolerance"]
out, w = forward(module, info, t, average_attn_weights=False)
H = info["module"]["num_heads"]
attn_mask, kpm = t["attn_mask"], t["key_padding_mask"]  # (L, S), (N, S)
N, S = kpm.shape
as_float = lambda m: torch.zeros(m.shape).masked_fill(m, float("-inf"))  # noqa: E731
# 2.x and this library: attn_mask (1, L, S) + key_padding_mask viewed (N*H, 1, S), added
additive = as_float(attn_mask).unsqueeze(0) + as_float(kpm).view(N, 1, 1, S).expand(-1, H, -1, -1).reshape(N * H, 1, S)
out_add, w_add = forward(module, info, t, attn_mask=additive, key_padding_mask=None, average_attn_weights=False)
check("1.13.1 (logical_or) and the additive merge give the same weights", close(w_add, w, **tol))
check("and the same output", close(out_add, out, **tol))

print("-- 5) a fully masked row: NaN --")
info, t = load_case("attn_mask_bool_2d_fully_masked_row")
module = make_module(info, t)
out, w = forward(module, info, t)
out_nw, w_nw = forward(module, info, t, need_weights=False)
print(f"  weights[0, 2] = {w[0, 2].tolist()}")
check("row 2 (all keys masked): weights NaN", bool(torch.isnan(w[:, 2]).all()))
check("and its output row is NaN in every batch entry", bool(torch.isnan(out[2]).all()))
check("the other rows are finite", bool(torch.isfinite(out[[0, 1, 3, 4]]).all()))
if is_pytorch_1_13():
    check("1.13.1 with need_weights=False: NaN too (no SDPA branch)", torch.equal(torch.isnan(out_nw), torch.isnan(out)))
else:  # docs/15-versions.md: since 2.5, SDPA gives the row weight 0, so its output is out_proj.bias
    check(f"{torch.__version__} with need_weights=False: row 2 is out_proj.bias (SDPA, 2.5+)",
          torch.equal(out_nw[2], module.out_proj.bias.expand_as(out_nw[2])))
    check("and the other rows are the rows with weights", close(out_nw[[0, 1, 3, 4]], out[[0, 1, 3, 4]], **info["tolerance"]))
check("row 4 (only key 3 unmasked) puts weight 1 on key 3", w[0, 4].tolist() == [0.0, 0.0, 0.0, 1.0, 0.0])

print("-- 6) add_zero_attn: the row attends to the zero key --")
info, t = load_case("attn_mask_bool_2d_fully_masked_row_add_zero_attn")
module = make_module(info, t)
out, w = forward(module, info, t)
print(f"  weights[0, 2] = {w[0, 2].tolist()}")
check("row 2 puts weight 1 on the extra key (index S)", w[0, 2].tolist() == [0.0] * 5 + [1.0])
check("attn_output[2, n, :] == out_proj.bias for every n",
      all(close(out[2, n], t["out_proj.bias"], **info["tolerance"]) for n in range(out.shape[1])))

print("-- 6b) add_bias_kv: the row attends to bias_k, its output is bias_v's --")
info, t = load_case("add_bias_kv_rescues_fully_padded_batch_f32")
out, w = forward(make_module(info, t), info, t)  # batch entry 1: every key padded
check("batch entry 1: every query puts weight 1 on the appended key (index S)",
      all(w[1, i].tolist() == [0.0] * 4 + [1.0] for i in range(w.shape[1])))
from_bias_v = t["bias_v"].reshape(-1) @ t["out_proj.weight"].T + t["out_proj.bias"]  # (E)
check("attn_output[:, 1, :] == bias_v W_o^T + b_o, not out_proj.bias",
      all(close(out[i, 1], from_bias_v, **info["tolerance"]) for i in range(out.shape[0]))
      and not close(out[0, 1], t["out_proj.bias"], **info["tolerance"]))

print("-- 7) unbatched masks: key_padding_mask (S), attn_mask (H, L, S) --")
info, t = load_case("attn_mask_bool_3d_key_padding_mask_unbatched_f32")
out, w = forward(make_module(info, t), info, t)
print(f"  query {tuple(t['query'].shape)}, key_padding_mask {tuple(t['key_padding_mask'].shape)}, "
      f"attn_mask {tuple(t['attn_mask'].shape)} -> [0] {tuple(out.shape)}, [1] {tuple(w.shape)}")
check("key_padding_mask (S), attn_mask (H, L, S); weights (L, S)",
      t["key_padding_mask"].dim() == 1 and t["attn_mask"].dim() == 3 and w.dim() == 2)
check("padded keys get weight 0 in every row", bool((w[:, t["key_padding_mask"]] == 0).all()))
check("output is PyTorch's (golden)", close(out, t["attn_output"], **info["tolerance"]))
done()
