#!/usr/bin/python3
"""Companion to docs/11-attention-maps.md: the maps per head, their mean, and grey cells.

Runs the golden case is_causal_batchfirst_key_padding_mask_f64 with
average_attn_weights=False, checks the page's mean map of batch entry 1 and where it is 0
(the causal triangle and the padded key); then the case of exercise 2,
attn_mask_float_3d_f64, whose 3-D float mask puts -inf cells in every batch-head's map
but never in all four heads of one batch entry at the same cell, so that the mean map
has no masked cell.
Run: /usr/bin/python3 docs/companion/11_attention_maps.py
"""

import torch

from common import check, close, done, forward, load_case, make_module, title

title("11 attention maps")

print("-- 1) is_causal_batchfirst_key_padding_mask_f64, batch entry 1 --")
info, t = load_case("is_causal_batchfirst_key_padding_mask_f64")
module, tol = make_module(info, t), info["tolerance"]
_, per_head = forward(module, info, t, average_attn_weights=False)  # (N, H, L, S)
_, mean = forward(module, info, t)                                  # (N, L, S)
N, H, L, S = per_head.shape
print(f"  per head (N, H, L, S) = {tuple(per_head.shape)}, mean (N, L, S) = {tuple(mean.shape)}")
check("the mean is the per-head weights summed over heads / H", close(per_head.sum(1) / H, mean, **tol))
check("and PyTorch's (golden)", close(mean, t["attn_output_weights"], **tol))
check("mean map, batch 1, row 1: 0.4535 0.5465 0 0 0 0, as the page prints",
      [f"{x:.4f}" for x in mean[1, 1].tolist()] == ["0.4535", "0.5465", "0.0000", "0.0000", "0.0000", "0.0000"])
check("query 0 sees only key 0: weight 1 in every head",
      bool((per_head[:, :, 0, 0] == 1).all()))
upper = torch.ones(L, S, dtype=torch.bool).triu(1)
check("the causal triangle is 0 in every map", bool((per_head[:, :, upper] == 0).all()))
check("the padded key 5 of batch 1 is 0 in every row and head", bool((per_head[1, :, :, 5] == 0).all()))

print("-- 2) attn_mask_float_3d_f64: a float (N*H, L, S) mask with -inf cells --")
info, t = load_case("attn_mask_float_3d_f64")
module, tol = make_module(info, t), info["tolerance"]
_, per_head = forward(module, info, t, average_attn_weights=False)  # (N, H, L, S)
_, mean = forward(module, info, t)
N, H, L, S = per_head.shape
masked = torch.isinf(t["attn_mask"]).view(N, H, L, S)  # batch-head b = n*H + h
for n in range(N):
    print(f"  batch {n}: -inf cells per head {[int(masked[n, h].sum()) for h in range(H)]}, "
          f"in every head {int(masked[n].all(0).sum())}")
check("every one of the N*H = 8 batch-heads has -inf cells", bool(masked.flatten(2).any(-1).all()))
check("a head's weight is 0 exactly at its -inf cells", torch.equal(per_head == 0, masked))
check("no cell is -inf in all heads of a batch entry", not bool(masked.all(1).any()))
check("so no weight of the mean map is 0", bool((mean > 0).all()))
# Batch 1 (the tutorial's default): query 2 may not see key 3 in heads 1, 2 and 3.
check("batch 1, query 2, key 3: masked in heads 1, 2, 3 only", masked[1, :, 2, 3].tolist() == [False, True, True, True])
print(f"  head 0 there: {per_head[1, 0, 2, 3].item():.4f}; mean there: {mean[1, 2, 3].item():.4f}")
check("there the mean is head 0's weight / 4", close(mean[1, 2, 3], per_head[1, 0, 2, 3] / 4, 1e-12, 1e-15))
check("the mean is PyTorch's (golden)", close(mean, t["attn_output_weights"], **tol))
done()
