#!/usr/bin/python3
"""make_figures: draws the course's diagrams as SVG, deterministically.

Pure Python, no libraries: each figure is a function that returns SVG text, and the same
program always writes the same bytes. The figures are checked in under docs/images/; CTest
runs `--check`, which draws them again into a temporary folder and fails when a checked-in
file differs from what this program makes.

    docs/figures/make_figures.py               write docs/images/*.svg
    docs/figures/make_figures.py --out DIR     write them into DIR instead
    docs/figures/make_figures.py --check       compare docs/images/ with a fresh drawing (exit 1 on a difference)

The figures: the packed layout of in_proj_weight (docs/02), the head split and merge
(docs/05), the merge of attn_mask and key_padding_mask (docs/09), and the tiles of the
online softmax (docs/16). Each is sized for a projector: at most 1000 pixels wide, no
text under 15 pixels. Every number drawn is computed here.

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


# Sizes for a projector: a figure is at most 1000 pixels wide, so that a page shows it at
# about its own size, and no text is smaller than 15 pixels (labels) or 17 (body).
TITLE, HEADING, BODY, LABEL = 21, 18, 17, 15


def packed_layout():
    """in_proj_weight (3E, E) as three row blocks, in_proj_bias beside it, and what each block computes."""
    E, cell = 4, 28
    svg = Svg(1000, 520, "in_proj_weight (3E, E) holds W_q, W_k, W_v stacked by rows")
    svg.text(20, 32, "in_proj_weight (3E, E) = [W_q; W_k; W_v], stacked by rows (E = 4)", size=TITLE, bold=True)
    x0, y0 = 100, 78
    fills, names = (Q_FILL, K_FILL, V_FILL), ("W_q", "W_k", "W_v")
    grid(svg, x0, y0, 3 * E, E, cell, lambda i, j: fills[i // E])
    bias_x = x0 + E * cell + 24
    grid(svg, bias_x, y0, 3 * E, 1, cell, lambda i, j: fills[i // E])
    for i in range(3 * E):
        svg.text(x0 - 8, y0 + i * cell + 20, f"row {i}", size=LABEL, anchor="end")
    for j in range(E):
        svg.text(x0 + j * cell + cell / 2, y0 - 8, str(j), size=LABEL, anchor="middle")
    svg.text(x0 + E * cell / 2, y0 + 3 * E * cell + 24, "E columns", size=LABEL, anchor="middle")
    svg.text(bias_x + cell / 2, y0 + 3 * E * cell + 24, "in_proj_bias", size=LABEL, anchor="middle")
    ranges = ("[0, E)", "[E, 2E)", "[2E, 3E)")
    formulas = ("q = query · W_qᵀ + b_q", "k = key · W_kᵀ + b_k", "v = value · W_vᵀ + b_v")
    shapes = ("(L, N, E)", "(S, N, E)", "(S, N, E)")
    tx = bias_x + cell + 16
    for b in range(3):
        top = y0 + b * E * cell
        svg.rect(x0, top, E * cell, E * cell, stroke=INK, width=2)
        svg.rect(bias_x, top, cell, E * cell, stroke=INK, width=2)
        mid = top + E * cell / 2
        bias = "b_" + names[b][-1]
        svg.text(tx, mid - 6, f"{names[b]} = rows {ranges[b]}", size=HEADING, bold=True)
        svg.text(tx, mid + 18, f"{bias} = in_proj_bias{ranges[b]}", size=BODY)
        svg.line(tx + 250, mid, tx + 310, mid, arrow=True, width=1.5)
        svg.text(tx + 322, mid - 6, formulas[b], size=HEADING)
        svg.text(tx + 322, mid + 18, shapes[b], size=BODY)
    svg.text(20, 472, "W_q, W_k, W_v = in_proj_weight.chunk(3): chunks of rows.", size=BODY, italic=True)
    svg.text(20, 496, "Row o of a block is the weight vector of output feature o.", size=BODY, italic=True)
    return svg.render()


def heads_split_merge():
    """q (L, N, E) cut into H column blocks per batch entry, the batch-heads b = n*H + h, and the merge."""
    L, N, H, D = 3, 2, 2, 4
    E, cell = H * D, 20
    svg = Svg(1000, 646, "split heads: (L, N, E) to (N*H, L, D); merge heads: back to (L, N, E)")
    svg.text(20, 32, "Heads are a reshape: E = H·D columns become H batch-heads", size=TITLE, bold=True)
    svg.text(20, 58, f"(here N = {N}, H = {H}, D = {D}, L = {L})", size=BODY)
    # 1) q (L, N, E): one (L, E) slab per batch entry, columns coloured by head
    svg.text(20, 96, "q (L, N, E): q[:, n, :] per batch entry n", size=HEADING, bold=True)
    top = 134
    for n in range(N):
        x = 30 + n * (E * cell + 40)
        grid(svg, x, top, L, E, cell, lambda i, j: HEAD_FILLS[j // D])
        svg.rect(x, top, E * cell, L * cell, width=2)
        svg.text(x + E * cell / 2, top + L * cell + 22, f"n = {n}", size=LABEL, anchor="middle")
        for h in range(H):
            svg.text(x + (h + 0.5) * D * cell, top - 8, f"head {h}", size=LABEL, anchor="middle")
    svg.line(420, top + 30, 490, top + 30, arrow=True, width=1.5)
    svg.text(425, top + 18, "split", size=BODY)
    # 2) batch-heads (N*H, L, D), b = n*H + h
    svg.text(510, 96, "qh (N·H, L, D): b = n·H + h", size=HEADING, bold=True)
    for n in range(N):
        for h in range(H):
            b = n * H + h
            x = 515 + b * (D * cell + 34)
            grid(svg, x, top, L, D, cell, lambda i, j, h=h: HEAD_FILLS[h])
            svg.rect(x, top, D * cell, L * cell, width=2)
            svg.text(x + D * cell / 2, top + L * cell + 22, f"b = {b}", size=LABEL, anchor="middle")
            svg.text(x + D * cell / 2, top + L * cell + 42, f"n {n}, h {h}", size=LABEL, anchor="middle")
    svg.text(20, 274, "q.view(L, N·H, D).transpose(0, 1): column block h of q[:, n, :] becomes qh[n·H + h];",
             size=BODY, italic=True)
    svg.text(20, 298, "nothing is multiplied.", size=BODY, italic=True)
    # 3) attention per batch-head
    svg.rect(60, 322, 880, 78, fill="#f4f4f4", stroke="#888888")
    svg.text(500, 350, "for every batch-head b, on its own:", size=BODY, anchor="middle")
    svg.text(500, 380, "weights_b = softmax(qh_b · kh_bᵀ / √D + mask_b)  (L, S);   out_b = weights_b · vh_b  (L, D)",
             size=BODY, anchor="middle")
    svg.line(500, 304, 500, 320, arrow=True, width=1.5)
    svg.line(500, 402, 500, 424, arrow=True, width=1.5)
    # 4) merge: back to (L, N, E), heads side by side, then out_proj
    svg.text(20, 448, "merge: out.transpose(0, 1).contiguous().view(L·N, E): the heads side by side again",
             size=HEADING, bold=True)
    top = 472
    for n in range(N):
        x = 30 + n * (E * cell + 40)
        grid(svg, x, top, L, E, cell, lambda i, j: HEAD_FILLS[j // D])
        svg.rect(x, top, E * cell, L * cell, width=2)
        svg.text(x + E * cell / 2, top + L * cell + 22, f"n = {n}", size=LABEL, anchor="middle")
    svg.line(420, top + 30, 490, top + 30, arrow=True, width=1.5)
    svg.text(510, top + 22, "attn_output = merged · W_oᵀ + b_o   (L, N, E)", size=HEADING, bold=True)
    svg.text(510, top + 48, "out_proj mixes the heads' columns", size=BODY)
    svg.text(20, 600, "Without out_proj the heads would stay in separate columns;", size=BODY, italic=True)
    svg.text(20, 624, "W_o (E, E) reads all E = H·D of them.", size=BODY, italic=True)
    return svg.render()


def mask_merge():
    """attn_mask (L, S) + key_padding_mask (N, S), broadcast to (N*H, L, S)."""
    L, S, N, H, cell = 4, 4, 2, 2, 26
    inf = -math.inf
    attn_mask = [[0.0 if j <= i else inf for j in range(S)] for i in range(L)]  # causal: (L, S)
    padding = [[0.0] * S, [0.0, 0.0, 0.0, inf]]                                 # (N, S): batch 1 pads key 3
    merged = [[[attn_mask[i][j] + padding[b // H][j] for j in range(S)] for i in range(L)] for b in range(N * H)]
    fill = lambda v: MASKED if v == inf else "#ffffff"  # noqa: E731
    svg = Svg(1000, 620, "attn_mask (L, S) plus key_padding_mask (N, S) gives one mask per batch-head (N*H, L, S)")
    svg.text(20, 32, "Two masks, one sum: attn_mask + key_padding_mask,", size=TITLE, bold=True)
    svg.text(20, 58, f"broadcast to (N·H, L, S)  (N = {N}, H = {H})", size=TITLE, bold=True)
    top = 130
    # attn_mask
    svg.text(20, 100, "attn_mask (L, S): causal", size=HEADING, bold=True)
    grid(svg, 40, top, L, S, cell, lambda i, j: fill(attn_mask[i][j]))
    svg.text(20, top + L * cell + 26, "viewed (1, L, S):", size=LABEL)
    svg.text(20, top + L * cell + 46, "shared by every b", size=LABEL)
    svg.text(230, top + 60, "+", size=32, anchor="middle")
    # key padding mask
    svg.text(290, 100, "key_padding_mask (N, S)", size=HEADING, bold=True)
    for n in range(N):
        grid(svg, 360, top + n * (cell + 10), 1, S, cell, lambda i, j, n=n: fill(padding[n][j]))
        svg.text(352, top + n * (cell + 10) + 19, f"n = {n}", size=LABEL, anchor="end")
    for k, line in enumerate(("viewed (N, 1, 1, S),", "expanded over H, reshaped", "(N·H, 1, S): every row of b",
                              "takes row n = b // H")):
        svg.text(290, top + 2 * (cell + 10) + 20 + 20 * k, line, size=LABEL)
    # merged, in a second row
    svg.line(520, top + 50, 580, top + 50, arrow=True, width=1.5)
    svg.text(527, top + 38, "sum", size=BODY)
    svg.text(600, 100, "merged mask (N·H, L, S)", size=HEADING, bold=True)
    for b in range(N * H):
        x = 600 + (b % 2) * (S * cell + 40)
        y = top + (b // 2) * (L * cell + 60)
        grid(svg, x, y, L, S, cell, lambda i, j, b=b: fill(merged[b][i][j]))
        svg.text(x + S * cell / 2, y + L * cell + 20, f"b = {b}: n {b // H}, h {b % H}", size=LABEL, anchor="middle")
    # legend and the rules
    legend = 440
    svg.rect(40, legend - 16, 20, 20, fill="#ffffff", stroke="#7a7a7a", width=0.8)
    svg.text(68, legend, "0: attend", size=BODY)
    svg.rect(190, legend - 16, 20, 20, fill=MASKED, stroke="#7a7a7a", width=0.8)
    svg.text(218, legend, "-inf: masked (bool True becomes -inf)", size=BODY)
    svg.text(20, 486, "A 3-D attn_mask (N·H, L, S) brings its own row b instead of the shared one;", size=BODY)
    svg.text(20, 510, "unbatched: attn_mask (L, S) or (H, L, S), key_padding_mask (S).", size=BODY)
    svg.text(20, 550, "PyTorch 2.x and this library add the two as floats. PyTorch 1.13.1 ORs two bool masks",
             size=BODY, italic=True)
    svg.text(20, 574, "(logical_or) or fills -inf into a float attn_mask where the bool key_padding_mask is True",
             size=BODY, italic=True)
    svg.text(20, 598, "(masked_fill): the same cells for 0/-inf masks.", size=BODY, italic=True)
    return svg.render()


def online_softmax_tiles():
    """Tutorial 16's row of 8 scores in tiles of 3, with the running m, l and correction; and the 2-D tiling."""
    s = [0.5, -1.0, 2.0, 0.0, 1.5, -0.5, 4.0, 3.0]  # tutorials/16_online_softmax.cpp, step 1
    tile, cell = 3, 88
    svg = Svg(1000, 650, "online softmax: the scores of a row in tiles, with a running maximum and sum")
    svg.text(20, 32, "Online softmax: one row of scores, 3 keys at a time (tutorial 16)", size=TITLE, bold=True)
    x0, y0 = 30, 86
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
            svg.rect(x0 + (t0 + j) * cell, y0, cell, 42, fill=tile_fills[k], stroke="#7a7a7a", width=0.8)
            svg.text(x0 + (t0 + j) * cell + cell / 2, y0 + 28, f"{s[t0 + j]:.1f}", size=HEADING, anchor="middle")
            svg.text(x0 + (t0 + j) * cell + cell / 2, y0 - 8, f"key {t0 + j}", size=LABEL, anchor="middle")
        svg.rect(x0 + t0 * cell, y0, n * cell, 42, stroke=INK, width=2)
        cx = x0 + t0 * cell + 6
        svg.text(cx, y0 + 70, f"tile max {tmax:.1f}", size=BODY)
        svg.text(cx, y0 + 94, f"m = {m:.1f}", size=BODY, bold=True)
        svg.text(cx, y0 + 118, "exp(m_old − m) = " + ("0 (first)" if k == 0 else f"{c:.4f}"), size=BODY)
        svg.text(cx, y0 + 142, f"l = {l:.4f}", size=BODY, bold=True)
    svg.text(x0 + 8 * cell + 14, y0 + 28, "scores s", size=BODY, italic=True)
    svg.text(20, 268, "Each tile rescales what was summed before by exp(m_old − m), then adds its own", size=BODY)
    svg.text(20, 292, "exp(s_j − m) and exp(s_j − m)·v_j. After the last tile, out = o / l: the softmax-weighted",
             size=BODY)
    svg.text(20, 316, "sum, without all S weights held at once.", size=BODY)
    # 2-D: the (L, S) scores of one batch-head in Tq x Tk tiles
    svg.text(20, 364, "One batch-head's (L, S) scores, never formed whole: a block of Tq query rows", size=HEADING,
             bold=True)
    svg.text(20, 390, "sweeps the keys in tiles of Tk", size=HEADING, bold=True)
    bx, by, tw, th, cols, blocks = 130, 440, 150, 90, 3, 2
    for r in range(blocks):
        for c in range(cols):
            fill = "#e3eefc" if (r, c) == (0, 1) else "#ffffff"
            svg.rect(bx + c * tw, by + r * th, tw, th, fill=fill, stroke="#555555", width=1)
            svg.text(bx + c * tw + tw / 2, by + r * th + th / 2 + 2, f"Tq × Tk", size=BODY, anchor="middle",
                     fill="#555555")
        svg.line(bx + 10, by + r * th + th - 14, bx + cols * tw - 10, by + r * th + th - 14, arrow=True,
                 stroke="#3060b0", width=2)
    svg.text(bx + cols * tw / 2, by - 8, "keys, S = 3 · Tk", size=BODY, anchor="middle")
    svg.text(bx - 10, by + th, "queries", size=BODY, anchor="end")
    svg.text(bx - 10, by + th + 22, "L = 2 · Tq", size=BODY, anchor="end")
    notes = ("Per query block, kept while it", "sweeps the keys: m and l, Tq numbers",
             "each; o, (Tq, D). In memory at once:", "one Tq × Tk tile of scores, not the",
             "N·H score matrices of (L, S).", "The library: Tq = 128, Tk = 256,", "128 KiB of float32 scores per thread.")
    for k, note in enumerate(notes):
        svg.text(bx + cols * tw + 24, by + 16 + 25 * k, note, size=BODY)
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
