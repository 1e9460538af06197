#!/usr/bin/python3
"""Companion to docs/16-online-softmax.md: the online softmax, checked against torch.softmax.

Takes tutorial 16's row -- 8 scores and a (8, 2) v, copied from
tutorials/16_online_softmax.cpp -- and computes softmax(s) . v once with torch.softmax and
once tile by tile (3 keys at a time) with a running maximum m, sum l and output o. The
running values and the results are the ones the page prints; forgetting the rescaling
exp(m - m') gives the wrong answer the page prints too; a row of -inf gives NaN.
Run: /usr/bin/python3 docs/companion/16_online_softmax.py
"""

import math

import torch

from common import check, close, done, title

title("16 online softmax")
s = torch.tensor([0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 4.0, 3.0], dtype=torch.float64)  # (S), tutorial 16
v = torch.tensor([[1, 0], [0, 1], [1, 1], [2, 0], [0, 2], [-1, 1], [1, -1], [3, 3]], dtype=torch.float64)  # (S, D)

whole = torch.softmax(s, dim=0) @ v  # (S) x (S, D) -> (D)
print(f"  torch.softmax(s) @ v = {[round(x, 4) for x in whole.tolist()]}")
check("1.3893 0.2549, as the page prints", [f"{x:.4f}" for x in whole.tolist()] == ["1.3893", "0.2549"])


def online(scores, tile, rescale=True):
    m, l, o, trace = -math.inf, 0.0, torch.zeros(v.shape[1], dtype=torch.float64), []
    for j0 in range(0, len(scores), tile):
        t = scores[j0:j0 + tile]
        new_m = max(m, float(t.max()))
        if new_m == -math.inf:
            continue  # every score so far is -inf: nothing to add yet
        c = math.exp(m - new_m) if rescale else 1.0  # 0 on the first tile
        p = torch.exp(t - new_m)
        l, o, m = c * l + float(p.sum()), c * o + p @ v[j0:j0 + tile], new_m
        trace.append((float(t.max()), m, c, l))
    return o / l if l > 0 else torch.full_like(o, math.nan), trace


tiled, trace = online(s, 3)
for (tile_max, m, c, l), j0 in zip(trace, range(0, 8, 3)):
    print(f"  keys [{j0}, {min(j0 + 3, 8)}): tile max {tile_max:.4f}  m {m:.4f}  correction {c:.4f}  l {l:.4f}")
check("l after each tile: 1.2729, 2.0969, 1.6517, as the page prints",
      [f"{l:.4f}" for *_, l in trace] == ["1.2729", "2.0969", "1.6517"])
check("correction exp(2 - 4) = 0.1353 at the last tile", f"{trace[-1][2]:.4f}" == "0.1353")
check("o / l equals torch.softmax(s) @ v", close(tiled, whole, 1e-12, 1e-15))
wrong, _ = online(s, 3, rescale=False)
print(f"  without rescaling: {[round(x, 4) for x in wrong.tolist()]}")
check("without rescaling: 1.0146 0.7067, off by 0.45, as the page prints",
      [f"{x:.4f}" for x in wrong.tolist()] == ["1.0146", "0.7067"]
      and f"{float((wrong - whole).abs().max()):.2f}" == "0.45")
nan_row, _ = online(torch.full_like(s, -math.inf), 3)
check("a row of -inf: NaN, as torch.softmax gives",
      bool(torch.isnan(nan_row).all()) and bool(torch.isnan(torch.softmax(torch.full_like(s, -math.inf), 0)).all()))

print("-- the page's exercises (worked out in the teachers' answer key) --")
for tile in range(1, 9):
    got, tr = online(s, tile)
    check(f"tiles of {tile}: o / l equals torch.softmax(s) @ v", close(got, whole, 1e-12, 1e-15))
    if tile == 1:
        corrections = [f"{c:.4f}" for _, _, c, _ in tr]
        print(f"  tiles of 1: corrections {corrections}")
        check("exercise 1: tiles of 1, corrections below 1 at keys 2 and 6: 0.2231, 0.1353",
              [c for c in corrections[1:] if c != "1.0000"] == ["0.2231", "0.1353"]
              and corrections[2] == "0.2231" and corrections[6] == "0.1353")
    if tile == 8:
        check("exercise 2: one tile of 8, one correction, 0 (the first tile): nothing rescaled",
              [c for _, _, c, _ in tr] == [0.0])
shifted, tr_shifted = online(s + 100.0, 3)
check("exercise 3: every score + 100: m + 100, the same l and o / l",
      [f"{m - 100:.4f}" for _, m, _, _ in tr_shifted] == [f"{m:.4f}" for _, m, _, _ in trace]
      and [f"{l:.4f}" for *_, l in tr_shifted] == [f"{l:.4f}" for *_, l in trace] and close(shifted, whole, 1e-12, 1e-12))
mib = lambda n: n * 4 / 2**20  # noqa: E731: float32 bytes, in MiB
check("exercise 4: (N*H, L, S) = (32, 4096, 4096) float32 scores: 2048 MiB; a (128, 256) tile: 128 KiB",
      mib(2 * 16 * 4096 * 4096) == 2048 and 128 * 256 * 4 == 128 * 1024)
done()
