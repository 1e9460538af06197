#!/usr/bin/python3
"""make_figures: draws the course's diagrams as SVG, deterministically.

Pure Python, no libraries: each figure is a function that returns SVG text, and the same
program always writes the same bytes. The figures are checked in under docs/images/; CTest
runs `--check`, which draws them again into a temporary folder and fails when a checked-in
file differs from what this program makes.

    docs/figures/make_figures.py               write docs/images/*.svg
    docs/figures/make_figures.py --out DIR     write them into DIR instead
    docs/figures/make_figures.py --check       compare docs/images/ with a fresh drawing (exit 1 on a difference)

The figures: the packed layout of in_proj_weight (docs/01), the head split and merge
(docs/04), the merge of attn_mask and key_padding_mask (docs/05), and the tiles of the
online softmax (docs/online-softmax.md). Every number drawn is computed here.

Legend: L = target length, S = source length, N = batch, E = embed_dim, H = num_heads,
D = E / H.
"""

import argparse
import filecmp
import math
import sys
import tempfile
from pathlib import Path

IMAGES = Path(__file__).resolve().parents[1] / "images"
FONT = "DejaVu Sans, Arial, Helvetica, sans-serif"
Q_FILL, K_FILL, V_FILL = "#cfe0fc", "#fde2bd", "#cdeed6"
HEAD_FILLS = ("#cfe0fc", "#f7d0e0", "#d9d2f5", "#fbe6a8")
MASKED = "#bdbdbd"
INK = "#1b1b1b"


def num(x):
    """A coordinate as short, stable text: integers without a decimal point."""
    r = round(x, 2)
    return str(int(r)) if r == int(r) else f"{r:.2f}".rstrip("0")


def esc(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class Svg:
    def __init__(self, width, height, title):
        self.width, self.height, self.parts = width, height, []
        self.parts.append(f"<title>{esc(title)}</title>")
        self.rect(0, 0, width, height, fill="#ffffff", stroke="none")

    def rect(self, x, y, w, h, fill="none", stroke=INK, width=1.0):
        self.parts.append(f'<rect x="{num(x)}" y="{num(y)}" width="{num(w)}" height="{num(h)}" '
                          f'fill="{fill}" stroke="{stroke}" stroke-width="{num(width)}"/>')

    def line(self, x1, y1, x2, y2, stroke=INK, width=1.0, arrow=False, dash=None):
        extra = ' marker-end="url(#arrow)"' if arrow else ""
        extra += f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(f'<line x1="{num(x1)}" y1="{num(y1)}" x2="{num(x2)}" y2="{num(y2)}" '
                          f'stroke="{stroke}" stroke-width="{num(width)}"{extra}/>')

    def text(self, x, y, s, size=13, anchor="start", bold=False, fill=INK, italic=False):
        style = ' font-weight="bold"' if bold else ""
        style += ' font-style="italic"' if italic else ""
        self.parts.append(f'<text x="{num(x)}" y="{num(y)}" font-size="{num(size)}" text-anchor="{anchor}" '
                          f'fill="{fill}"{style}>{esc(s)}</text>')

    def render(self):
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{self.height}" '
                f'viewBox="0 0 {self.width} {self.height}" font-family="{FONT}">\n'
                '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
                f'markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="{INK}"/>'
                '</marker></defs>\n')
        return head + "\n".join(self.parts) + "\n</svg>\n"


def grid(svg, x, y, rows, cols, cell, fill_of, stroke="#7a7a7a"):
    """rows x cols cells from (x, y); fill_of(i, j) gives each cell's colour."""
    for i in range(rows):
        for j in range(cols):
            svg.rect(x + j * cell, y + i * cell, cell, cell, fill=fill_of(i, j), stroke=stroke, width=0.6)


def packed_layout():
    """in_proj_weight (3E, E) as three row blocks, in_proj_bias beside it, and what each block computes."""
    E, cell = 4, 22
    svg = Svg(760, 400, "in_proj_weight (3E, E) holds W_q, W_k, W_v stacked by rows")
    svg.text(20, 28, "in_proj_weight (3E, E) = [W_q; W_k; W_v], stacked by rows (here E = 4)", size=16, bold=True)
    x0, y0 = 110, 60
    fills, names = (Q_FILL, K_FILL, V_FILL), ("W_q", "W_k", "W_v")
    grid(svg, x0, y0, 3 * E, E, cell, lambda i, j: fills[i // E])
    grid(svg, x0 + E * cell + 30, y0, 3 * E, 1, cell, lambda i, j: fills[i // E])
    for i in range(3 * E):
        svg.text(x0 - 8, y0 + i * cell + 15, f"row {i}", size=11, anchor="end")
    for j in range(E):
        svg.text(x0 + j * cell + cell / 2, y0 - 6, str(j), size=11, anchor="middle")
    svg.text(x0 + E * cell / 2, y0 + 3 * E * cell + 20, "E columns", size=12, anchor="middle")
    svg.text(x0 + E * cell + 30 + cell / 2, y0 + 3 * E * cell + 20, "in_proj_bias", size=12, anchor="middle")
    ranges = ("[0, E)", "[E, 2E)", "[2E, 3E)")
    formulas = ("q = query · W_qᵀ + b_q     (L, N, E)", "k = key · W_kᵀ + b_k         (S, N, E)",
                "v = value · W_vᵀ + b_v     (S, N, E)")
    for b in range(3):
        top = y0 + b * E * cell
        svg.rect(x0, top, E * cell, E * cell, stroke=INK, width=2)
        svg.rect(x0 + E * cell + 30, top, cell, E * cell, stroke=INK, width=2)
        mid = top + E * cell / 2
        bias = "b_" + names[b][-1]
        svg.text(x0 + E * cell + 30 + cell + 10, mid - 4, f"{names[b]} = rows {ranges[b]}", size=13, bold=True)
        svg.text(x0 + E * cell + 30 + cell + 10, mid + 13, f"{bias} = in_proj_bias{ranges[b]}", size=12)
        svg.line(x0 + E * cell + 240, mid, x0 + E * cell + 290, mid, arrow=True)
        svg.text(x0 + E * cell + 298, mid + 5, formulas[b], size=13)
    svg.text(20, 385, "W_q, W_k, W_v = in_proj_weight.chunk(3): chunks of rows. "
                      "Row o of a block is the weight vector of output feature o.", size=12, italic=True)
    return svg.render()


def heads_split_merge():
    """q (L, N, E) cut into H column blocks per batch entry, the batch-heads b = n*H + h, and the merge."""
    L, N, H, D = 3, 2, 2, 4
    E, cell = H * D, 14
    svg = Svg(870, 470, "split heads: (L, N, E) to (N*H, L, D); merge heads: back to (L, N, E)")
    svg.text(20, 28, f"Heads are a reshape: E = H·D columns become H batch-heads (here N = {N}, H = {H}, D = {D}, L = {L})",
             size=15, bold=True)
    # 1) q (L, N, E): one (L, E) slab per batch entry, columns coloured by head
    svg.text(20, 62, "q (L, N, E): q[:, n, :] for each batch entry n", size=13, bold=True)
    for n in range(N):
        x = 40 + n * (E * cell + 60)
        grid(svg, x, 80, L, E, cell, lambda i, j: HEAD_FILLS[j // D])
        svg.rect(x, 80, E * cell, L * cell, width=1.8)
        svg.text(x + E * cell / 2, 80 + L * cell + 16, f"n = {n}", size=12, anchor="middle")
        for h in range(H):
            svg.text(x + (h + 0.5) * D * cell, 74, f"head {h}", size=10, anchor="middle")
    svg.line(400, 105, 470, 105, arrow=True)
    svg.text(405, 95, "split", size=12)
    # 2) batch-heads (N*H, L, D), b = n*H + h
    svg.text(480, 62, "qh (N·H, L, D): batch-head b = n·H + h", size=13, bold=True)
    for n in range(N):
        for h in range(H):
            b = n * H + h
            x = 490 + b * (D * cell + 16)
            grid(svg, x, 80, L, D, cell, lambda i, j, h=h: HEAD_FILLS[h])
            svg.rect(x, 80, D * cell, L * cell, width=1.8)
            svg.text(x + D * cell / 2, 80 + L * cell + 16, f"b = {b}", size=12, anchor="middle")
            svg.text(x + D * cell / 2, 80 + L * cell + 30, f"n {n}, h {h}", size=10, anchor="middle")
    svg.text(20, 190, "q.view(L, N·H, D).transpose(0, 1): column block h of q[:, n, :] becomes qh[n·H + h]; "
                      "nothing is multiplied.", size=12, italic=True)
    # 3) attention per batch-head
    svg.rect(150, 215, 520, 56, fill="#f4f4f4", stroke="#888888")
    svg.text(410, 238, "for every batch-head b, on its own:", size=13, anchor="middle")
    svg.text(410, 258, "weights_b = softmax(qh_b · kh_bᵀ / √D + mask_b)  (L, S);   out_b = weights_b · vh_b  (L, D)",
             size=12, anchor="middle")
    svg.line(410, 200, 410, 213, arrow=True)
    svg.line(410, 273, 410, 296, arrow=True)
    # 4) merge: back to (L, N, E), heads side by side, then out_proj
    svg.text(20, 318, "merge: out.transpose(0, 1).contiguous().view(L·N, E): the heads side by side again", size=13,
             bold=True)
    for n in range(N):
        x = 40 + n * (E * cell + 60)
        grid(svg, x, 336, L, E, cell, lambda i, j: HEAD_FILLS[j // D])
        svg.rect(x, 336, E * cell, L * cell, width=1.8)
        svg.text(x + E * cell / 2, 336 + L * cell + 16, f"n = {n}", size=12, anchor="middle")
    svg.line(400, 360, 470, 360, arrow=True)
    svg.text(480, 352, "attn_output = merged · W_oᵀ + b_o   (L, N, E)", size=13, bold=True)
    svg.text(480, 372, "out_proj mixes the heads' columns", size=12)
    svg.text(20, 440, "Without out_proj the heads would stay in separate columns; "
                      "W_o (E, E) reads all E = H·D of them.", size=12, italic=True)
    return svg.render()


def mask_merge():
    """attn_mask (L, S) + key_padding_mask (N, S), broadcast to (N*H, L, S)."""
    L, S, N, H, cell = 4, 4, 2, 2, 20
    inf = -math.inf
    attn_mask = [[0.0 if j <= i else inf for j in range(S)] for i in range(L)]  # causal: (L, S)
    padding = [[0.0] * S, [0.0, 0.0, 0.0, inf]]                                 # (N, S): batch 1 pads key 3
    merged = [[[attn_mask[i][j] + padding[b // H][j] for j in range(S)] for i in range(L)] for b in range(N * H)]
    fill = lambda v: MASKED if v == inf else "#ffffff"  # noqa: E731
    svg = Svg(980, 360, "attn_mask (L, S) plus key_padding_mask (N, S) gives one mask per batch-head (N*H, L, S)")
    svg.text(20, 28, f"Two masks, one sum: attn_mask + key_padding_mask, broadcast to (N·H, L, S)  (N = {N}, H = {H})",
             size=15, bold=True)
    # attn_mask
    svg.text(20, 62, "attn_mask (L, S): causal", size=13, bold=True)
    grid(svg, 40, 78, L, S, cell, lambda i, j: fill(attn_mask[i][j]))
    svg.text(20, 78 + L * cell + 18, "viewed (1, L, S):", size=11)
    svg.text(20, 78 + L * cell + 32, "shared by every b", size=11)
    svg.text(215, 120, "+", size=22, anchor="middle")
    # key padding mask
    svg.text(250, 62, "key_padding_mask (N, S)", size=13, bold=True)
    for n in range(N):
        grid(svg, 300, 78 + n * (cell + 8), 1, S, cell, lambda i, j, n=n: fill(padding[n][j]))
        svg.text(294, 78 + n * (cell + 8) + 14, f"n = {n}", size=11, anchor="end")
    svg.text(250, 78 + 2 * (cell + 8) + 14, "viewed (N, 1, 1, S), expanded over H,", size=11)
    svg.text(250, 78 + 2 * (cell + 8) + 28, "reshaped (N·H, 1, S): every row", size=11)
    svg.text(250, 78 + 2 * (cell + 8) + 42, "of b takes row n = b // H", size=11)
    svg.line(480, 110, 540, 110, arrow=True)
    svg.text(488, 100, "sum", size=12)
    # merged
    svg.text(560, 62, "merged mask (N·H, L, S)", size=13, bold=True)
    for b in range(N * H):
        x = 570 + b * (S * cell + 14)
        grid(svg, x, 78, L, S, cell, lambda i, j, b=b: fill(merged[b][i][j]))
        svg.text(x + S * cell / 2, 78 + L * cell + 16, f"b = {b}", size=12, anchor="middle")
        svg.text(x + S * cell / 2, 78 + L * cell + 30, f"n {b // H}, h {b % H}", size=10, anchor="middle")
    # legend and the rules
    svg.rect(40, 200, 16, 16, fill="#ffffff", stroke="#7a7a7a", width=0.6)
    svg.text(62, 213, "0: attend", size=12)
    svg.rect(150, 200, 16, 16, fill=MASKED, stroke="#7a7a7a", width=0.6)
    svg.text(172, 213, "-inf: masked (bool True becomes -inf)", size=12)
    svg.text(40, 250, "A 3-D attn_mask (N·H, L, S) brings its own row b instead of the shared one; "
                      "unbatched: attn_mask (L, S) or (H, L, S),", size=12)
    svg.text(40, 268, "key_padding_mask (S).", size=12)
    svg.text(40, 298, "PyTorch 2.x and this library add the two as floats. PyTorch 1.13.1 ORs two bool masks "
                      "(logical_or) or fills -inf into a float", size=12, italic=True)
    svg.text(40, 316, "attn_mask where the bool key_padding_mask is True (masked_fill): the same cells for 0/-inf "
                      "masks.", size=12, italic=True)
    return svg.render()


def online_softmax_tiles():
    """Tutorial 08's row of 8 scores in tiles of 3, with the running m, l and correction; and the 2-D tiling."""
    s = [0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 4.0, 3.0]  # tutorials/08_online_softmax.cpp, step 1
    tile, cell = 3, 56
    svg = Svg(900, 470, "online softmax: the scores of a row in tiles, with a running maximum and sum")
    svg.text(20, 28, "Online softmax: one row of scores, 3 keys at a time (tutorial 08)", size=16, bold=True)
    x0, y0 = 60, 60
    m, l, rows = -math.inf, 0.0, []
    for t0 in range(0, len(s), tile):
        part = s[t0:t0 + tile]
        new_m = max(m, max(part))
        correction = math.exp(m - new_m)
        l = correction * l + sum(math.exp(x - new_m) for x in part)
        rows.append((t0, len(part), max(part), new_m, correction, l))
        m = new_m
    tile_fills = ("#e3eefc", "#fdf0dc", "#e3f6e8")
    for k, (t0, n, tmax, m, c, l) in enumerate(rows):
        for j in range(n):
            svg.rect(x0 + (t0 + j) * cell, y0, cell, 34, fill=tile_fills[k], stroke="#7a7a7a", width=0.8)
            svg.text(x0 + (t0 + j) * cell + cell / 2, y0 + 22, f"{s[t0 + j]:.1f}", size=13, anchor="middle")
            svg.text(x0 + (t0 + j) * cell + cell / 2, y0 - 6, f"key {t0 + j}", size=10, anchor="middle")
        svg.rect(x0 + t0 * cell, y0, n * cell, 34, stroke=INK, width=2)
        cx = x0 + t0 * cell + 4
        svg.text(cx, y0 + 56, f"tile max {tmax:.1f}", size=12)
        svg.text(cx, y0 + 74, f"m = {m:.1f}", size=12, bold=True)
        svg.text(cx, y0 + 92, "exp(m_old − m) = " + ("0 (first)" if k == 0 else f"{c:.4f}"), size=12)
        svg.text(cx, y0 + 110, f"l = {l:.4f}", size=12, bold=True)
    svg.text(x0 + 8 * cell + 16, y0 + 22, "scores s", size=12, italic=True)
    svg.text(20, 196, "Each tile rescales what was summed before by exp(m_old − m), then adds its own exp(s_j − m) "
                      "and exp(s_j − m)·v_j.", size=12)
    svg.text(20, 214, "After the last tile, out = o / l: the softmax-weighted sum, without all S weights held at once.",
             size=12)
    # 2-D: the (L, S) scores of one batch-head in Tq x Tk tiles
    svg.text(20, 252, "One batch-head's (L, S) scores, never formed whole: a block of Tq query rows sweeps the keys "
                      "in tiles of Tk", size=13, bold=True)
    bx, by, tw, th, cols, blocks = 110, 270, 140, 70, 3, 2
    for r in range(blocks):
        for c in range(cols):
            fill = "#e3eefc" if (r, c) == (0, 1) else "#ffffff"
            svg.rect(bx + c * tw, by + r * th, tw, th, fill=fill, stroke="#555555", width=1)
            svg.text(bx + c * tw + tw / 2, by + r * th + th / 2 + 5, f"Tq × Tk", size=12, anchor="middle",
                     fill="#555555")
        svg.line(bx + 10, by + r * th + th - 10, bx + cols * tw - 10, by + r * th + th - 10, arrow=True,
                 stroke="#3060b0", width=1.5)
    svg.text(bx + cols * tw / 2, by - 4, "keys, S = 3 · Tk", size=12, anchor="middle")
    svg.text(bx - 8, by + th, "queries", size=12, anchor="end")
    svg.text(bx - 8, by + th + 16, "L = 2 · Tq", size=12, anchor="end")
    notes = ("Per query block, kept while it sweeps the keys:", "m and l: Tq numbers each; o: (Tq, D).",
             "In memory at once: one Tq × Tk tile of scores,", "not the N·H score matrices of (L, S).",
             "The library: Tq = 128, Tk = 256,", "128 KiB of float32 scores per thread.")
    for k, note in enumerate(notes):
        svg.text(bx + cols * tw + 24, by + 14 + 20 * k, note, size=12)
    return svg.render()


FIGURES = {
    "packed-layout.svg": packed_layout,
    "heads-split-merge.svg": heads_split_merge,
    "mask-merge.svg": mask_merge,
    "online-softmax-tiles.svg": online_softmax_tiles,
}


def write(folder):
    folder.mkdir(parents=True, exist_ok=True)
    for name, draw in FIGURES.items():
        (folder / name).write_text(draw(), encoding="utf-8")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--out", type=Path, default=IMAGES, metavar="DIR", help="where to write (default: docs/images)")
    action.add_argument("--check", action="store_true", help="compare docs/images/ with a fresh drawing; exit 1 if they differ")
    args = parser.parse_args()
    if not args.check:
        write(args.out)
        print(f"wrote {len(FIGURES)} figures to {args.out}")
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        write(Path(scratch))
        bad = [name for name in FIGURES
               if not (IMAGES / name).exists() or not filecmp.cmp(Path(scratch) / name, IMAGES / name, shallow=False)]
    for name in bad:
        print(f"make_figures: docs/images/{name} differs from what docs/figures/make_figures.py draws "
              "(run it without --check to redraw)")
    if not bad:
        print(f"make_figures: the {len(FIGURES)} figures in docs/images/ are what the program draws")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
