"""tests/labs/numpy_answers.py: answers written outside the C++ code, graded by mha-grade.

A student who does lab 05 in NumPy writes attn_output.npy (and attn_output_weights.npy) for
a golden case and runs `mha-grade diagnose CASE ANSWER_DIR`. This script is that student: it
implements nn.MultiheadAttention's forward in NumPy, right and then with each forward mistake
of the catalogue (docs/labs.md), writes the answers, and checks that mha-grade passes the
right one (exit 0) and names each mistake by its id and no other (exit 1), each partial
swap ("kv_swapped:1", the weight's blocks alone) and pairs of them too; a mistake outside
the catalogue is named nothing, its departure naming the forward and the page to reread. It
also checks the messages for a missing file, a wrong shape, a wrong dtype and a corrupt file
(exit 2).

  python3 tests/labs/numpy_answers.py build/default/labs/mha-grade
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent.parent
CASES = ROOT / "golden" / "cases"

# The case each mistake is shown on: one where it changes the answer and no other mistake
# of the catalogue gives the same one.
SHOWN_ON = {
    "qk_swapped": "cross_seqfirst_f32",
    "kv_swapped": "cross_seqfirst_f32",
    "qv_swapped": "cross_seqfirst_f32",
    "order_kvq": "cross_seqfirst_f32",
    "order_vqk": "cross_seqfirst_f32",
    "weight_not_transposed": "cross_seqfirst_f32",
    "bias_missing": "cross_seqfirst_f32",
    "no_scaling": "cross_seqfirst_f32",
    "scaled_by_d_not_sqrt": "cross_seqfirst_f32",
    "scaled_by_e_not_d": "cross_seqfirst_f32",
    "heads_split_wrong": "cross_seqfirst_f32",
    "softmax_wrong_axis": "cross_seqfirst_f32",
    "mask_inverted": "attn_mask_bool_3d_batchfirst_f32",
    "mask_ignored": "attn_mask_bool_3d_batchfirst_f32",
    "key_padding_mask_wrong_rows": "key_padding_mask_bool_f32",
    "weights_not_averaged": "cross_seqfirst_f32",
    "out_proj_missing": "cross_seqfirst_f32",
    # the partial swaps: a layout mistake in the weight's blocks alone (:1) or the bias's (:2)
    **{f"{layout}:{way}": "cross_seqfirst_f32"
       for layout in ("qk_swapped", "kv_swapped", "qv_swapped", "order_kvq", "order_vqk") for way in (1, 2)},
    "heads_numbered_head_major": "cross_seqfirst_f32",
    "merge_without_transpose": "cross_seqfirst_f32",
    "mask_after_softmax": "attn_mask_float_2d_f32",
}

# Two mistakes made together, as a student in another language makes them; each pair is
# named as both of its ids (sorted), on the case where both show.
PAIRS_ON = {
    "kv_swapped,no_scaling": "cross_seqfirst_f32",
    "no_scaling,qk_swapped": "cross_seqfirst_f32",
    "bias_missing,no_scaling": "cross_seqfirst_f32",
    "mask_inverted,no_scaling": "attn_mask_bool_3d_batchfirst_f32",
    "kv_swapped,out_proj_missing": "cross_seqfirst_f32",
    "bias_missing,kv_swapped": "cross_seqfirst_f32",
    "no_scaling,weights_not_averaged": "cross_seqfirst_f32",
    "heads_numbered_head_major,no_scaling": "cross_seqfirst_f32",
    "kv_swapped:1,merge_without_transpose": "cross_seqfirst_f32",
    "mask_after_softmax,qk_swapped:2": "attn_mask_float_2d_f32",
}

# A mistake outside the catalogue: each batch entry's heads merged last to first. Nothing is
# named; the departure names the function and the page about its step.
OUTSIDE = ("merge_heads_reversed", "cross_seqfirst_f32", "docs/05-heads.md")


def ids(mistakes):
    """The ids a set of mistakes is named by: "kv_swapped:1,no_scaling" -> "kv_swapped no_scaling"."""
    return " ".join(sorted(m.split(":")[0] for m in mistakes.split(",")))


def load(case):
    d = CASES / case
    info = json.loads((d / "case.json").read_text())
    t = {p.stem: np.load(p) for p in d.glob("*.npy")}
    return info, t


def softmax(x, axis):
    with np.errstate(invalid="ignore"):
        e = np.exp(x - np.max(x, axis=axis, keepdims=True))
        return e / np.sum(e, axis=axis, keepdims=True)


def additive(mask, inverted, ignored, dtype):
    if mask is None or ignored:
        return None
    if mask.dtype == np.bool_:
        masked = ~mask if inverted else mask
        return np.where(masked, -np.inf, 0).astype(dtype)
    return mask


def forward(info, t, mistake=None):
    """nn.MultiheadAttention's forward, with `mistake` made (a catalogue id, or several joined
    by commas: "kv_swapped,no_scaling"; "kv_swapped:1" the swap in the weight alone, ":2" in
    the bias alone), or none."""
    made = dict(x.split(":") if ":" in x else (x, "0") for x in mistake.split(",")) if mistake else {}
    m, f = info["module"], info["forward"]
    E, H = m["embed_dim"], m["num_heads"]
    D = E // H
    dtype = t["query"].dtype
    batched = t["query"].ndim == 3
    bf = m["batch_first"] and batched

    def seq_first(x):
        x = x if batched else x[:, None, :]
        return x.transpose(1, 0, 2) if bf else x

    query, key, value = seq_first(t["query"]), seq_first(t["key"]), seq_first(t["value"])
    L, N, S = query.shape[0], query.shape[1], key.shape[0]
    order = {"qk_swapped": (1, 0, 2), "kv_swapped": (0, 2, 1), "qv_swapped": (2, 1, 0),
             "order_kvq": (2, 0, 1), "order_vqk": (1, 2, 0)}
    w_order = next((order[x] for x, way in made.items() if x in order and way in ("0", "1")), (0, 1, 2))
    b_order = next((order[x] for x, way in made.items() if x in order and way in ("0", "2")), (0, 1, 2))
    w, b = t["in_proj_weight"], t.get("in_proj_bias")
    if "bias_missing" in made:
        b = None
    ws = [w[i * E:(i + 1) * E] for i in w_order]
    bs = [None if b is None else b[i * E:(i + 1) * E] for i in b_order]

    def linear(x, w, b, transposed=True):
        y = x @ (w.T if transposed else w)
        return y if b is None else y + b

    nt = "weight_not_transposed" not in made
    q, k, v = (linear(x, ws[i], bs[i], nt) for i, x in enumerate((query, key, value)))

    def heads(x):  # (L, N, E) -> (N*H, L, D)
        n = x.shape[0]
        if "heads_split_wrong" in made:
            return x.reshape(n, N, D, H).transpose(1, 3, 0, 2).reshape(N * H, n, D)
        if "heads_numbered_head_major" in made:  # batch-head h*N + n
            return x.reshape(n, N, H, D).transpose(2, 1, 0, 3).reshape(H * N, n, D)
        return x.reshape(n, N * H, D).transpose(1, 0, 2)

    qh, kh, vh = heads(q), heads(k), heads(v)
    attn = additive(t.get("attn_mask"), "mask_inverted" in made, "mask_ignored" in made, dtype)
    if attn is not None and attn.ndim == 2:
        attn = attn[None]
    kpm = additive(t.get("key_padding_mask"), "mask_inverted" in made, False, dtype)
    mask = attn
    if kpm is not None:
        kpm = kpm.reshape(N, S)
        rows = np.tile(kpm, (H, 1)) if "key_padding_mask_wrong_rows" in made else np.repeat(kpm, H, axis=0)
        mask = (0 if attn is None else attn) + rows[:, None, :]
    scales = {"no_scaling": 1.0, "scaled_by_d_not_sqrt": 1.0 / D, "scaled_by_e_not_d": np.sqrt(1.0 / E)}
    scale = next((scales[x] for x in made if x in scales), np.sqrt(1.0 / D))
    scores = (qh * dtype.type(scale)) @ kh.transpose(0, 2, 1)
    if mask is not None and "mask_after_softmax" not in made:
        scores = scores + mask
    p = softmax(scores, axis=1 if "softmax_wrong_axis" in made else 2)
    if mask is not None and "mask_after_softmax" in made:
        p = p + mask
    out = p @ vh  # (N*H, L, D)
    if "merge_heads_reversed" in made:  # outside the catalogue
        out = out.reshape(N, H, L, D)[:, ::-1].reshape(N * H, L, D)
    if "merge_without_transpose" in made:
        merged = out.reshape(L, N, E)
    elif "heads_split_wrong" in made:
        merged = out.reshape(N, H, L, D).transpose(2, 0, 3, 1).reshape(L, N, E)
    elif "heads_numbered_head_major" in made:
        merged = out.reshape(H, N, L, D).transpose(2, 1, 0, 3).reshape(L, N, E)
    else:
        merged = out.transpose(1, 0, 2).reshape(L, N, E)
    wo, bo = t["out_proj.weight"], t.get("out_proj.bias")
    y = merged if "out_proj_missing" in made else linear(merged, wo, bo)
    y = y.transpose(1, 0, 2) if bf else y
    y = y if batched else y[:, 0, :]
    weights = None
    if f["need_weights"]:
        weights = p.reshape(N, H, L, S)
        if f["average_attn_weights"]:
            weights = weights.sum(axis=1) if "weights_not_averaged" in made else weights.mean(axis=1)
        weights = weights if batched else weights[0]
    return y.astype(dtype), None if weights is None else weights.astype(dtype)


def diagnose(grader, case, y, weights, folder, files=None):
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "attn_output.npy", y)
    if weights is not None:
        np.save(folder / "attn_output_weights.npy", weights)
    r = subprocess.run([grader, "diagnose", str(CASES / case), str(folder)], capture_output=True, text=True)
    named = next((line[7:] for line in r.stdout.splitlines() if line.startswith("named: ")), None)
    return r.returncode, named, r.stdout + r.stderr


def main():
    grader = sys.argv[1]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for case in sorted(set(SHOWN_ON.values())):
            info, t = load(case)
            status, named, out = diagnose(grader, case, *forward(info, t), tmp / case / "right")
            ok = status == 0 and named == "-"
            print(f"right answer on {case}: exit {status}, named {named}: {'OK' if ok else 'FAIL'}")
            failed |= not ok
        for mistake, case in SHOWN_ON.items():
            info, t = load(case)
            status, named, out = diagnose(grader, case, *forward(info, t, mistake), tmp / case / mistake)
            ok = status == 1 and named == ids(mistake)
            print(f"{mistake} on {case}: exit {status}, named {named}: {'OK' if ok else 'FAIL'}")
            if not ok:
                print(out)
            failed |= not ok
        for pair, case in PAIRS_ON.items():
            info, t = load(case)
            status, named, out = diagnose(grader, case, *forward(info, t, pair), tmp / case / pair)
            ok = status == 1 and named == ids(pair)
            print(f"{pair} on {case}: exit {status}, named {named}: {'OK' if ok else 'FAIL'}")
            if not ok:
                print(out)
            failed |= not ok
        # Outside the catalogue: nothing named, the function and the page in the departure.
        mistake, case, page = OUTSIDE
        info, t = load(case)
        folder = tmp / case / mistake
        diagnose(grader, case, *forward(info, t, mistake), folder)
        r = subprocess.run([grader, "diagnose", str(CASES / case), str(folder), "--json"], capture_output=True, text=True)
        d = json.loads(r.stdout)
        ok = (r.returncode == 1 and d["named"] == [] and d["departure"].startswith("forward")
              and d["departure"].endswith(f"reread {page}"))
        print(f"{mistake} (outside the catalogue) on {case}: exit {r.returncode}, departure {d['departure']}: "
              f"{'OK' if ok else 'FAIL'}")
        failed |= not ok
        # Files that cannot be graded: each a clear message naming the file, exit status 2.
        case = "cross_seqfirst_f32"
        info, t = load(case)
        y, w = forward(info, t)
        bad = {
            "missing": (None, w, "attn_output.npy: missing"),
            "shape": (y[:-1], w, f"expected shape ({', '.join(map(str, y.shape))})"),
            "dtype": (y.astype(np.float64), w, "expected dtype float32"),
        }
        for what, (yy, ww, expected) in bad.items():
            folder = tmp / "bad" / what
            folder.mkdir(parents=True)
            if yy is not None:
                np.save(folder / "attn_output.npy", yy)
            np.save(folder / "attn_output_weights.npy", ww)
            r = subprocess.run([grader, "diagnose", str(CASES / case), str(folder)], capture_output=True, text=True)
            ok = r.returncode == 2 and expected in r.stdout
            print(f"{what} file: exit {r.returncode}: {'OK' if ok else 'FAIL'} ({r.stdout.strip()})")
            failed |= not ok
        folder = tmp / "bad" / "corrupt"
        folder.mkdir(parents=True)
        (folder / "attn_output.npy").write_bytes(b"\x93NUMPY\x01\x00garbage")
        np.save(folder / "attn_output_weights.npy", w)
        r = subprocess.run([grader, "diagnose", str(CASES / case), str(folder)], capture_output=True, text=True)
        ok = r.returncode == 2 and "attn_output.npy" in r.stdout
        print(f"corrupt file: exit {r.returncode}: {'OK' if ok else 'FAIL'} ({r.stdout.strip()})")
        failed |= not ok
        # Crafted files: a header that claims terabytes, a file far larger than the answer, a
        # link to a file elsewhere; each refused before its data is read, exit status 2.
        crafted = tmp / "bad" / "crafted"
        for what, make, expected in (
            ("terabytes", lambda f: f.write_bytes(b"\x93NUMPY\x01\x00" + b"v\x00" + (
                "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000, 1000), }".ljust(117) + "\n"
            ).encode() + b"\x00" * 64), "data bytes for shape (1000000, 1000000, 1000)"),
            ("huge", lambda f: f.write_bytes(b"\x00" * (8 << 20)), "expected at most"),
            ("link", lambda f: f.symlink_to(CASES / case / "attn_output.npy"), "not a plain file"),
        ):
            folder = crafted / what
            folder.mkdir(parents=True)
            make(folder / "attn_output.npy")
            np.save(folder / "attn_output_weights.npy", w)
            r = subprocess.run([grader, "diagnose", str(CASES / case), str(folder)], capture_output=True, text=True)
            ok = r.returncode == 2 and expected in r.stdout
            print(f"{what} file: exit {r.returncode}: {'OK' if ok else 'FAIL'} ({r.stdout.strip()[:200]})")
            failed |= not ok
        # --json: one object, with each mistake's id and the page to reread.
        folder = tmp / "json"
        y, w = forward(info, t, "kv_swapped")
        folder.mkdir()
        np.save(folder / "attn_output.npy", y)
        np.save(folder / "attn_output_weights.npy", w)
        r = subprocess.run([grader, "diagnose", str(CASES / case), str(folder), "--json"], capture_output=True, text=True)
        d = json.loads(r.stdout)
        ok = (r.returncode == 1 and d["verdict"] == "fail" and [m["id"] for m in d["named"]] == ["kv_swapped"]
              and d["named"][0]["page"].startswith("docs/"))
        print(f"--json: exit {r.returncode}, {d['named']}: {'OK' if ok else 'FAIL'}")
        failed |= not ok
    print("OK" if not failed else "FAILED")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
