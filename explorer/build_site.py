#!/usr/bin/env python3
"""explorer/build_site.py: the attention explorer, a static site made from the golden cases.

Reads golden case folders (golden/FORMAT.md: case.json and .npy files written by real
PyTorch) and writes a folder that a browser opens from file:// with no server and no
network: index.html, the page's scripts and style (copied from explorer/web/), and the
data as JavaScript files (data/index.js, the list of cases; data/<generation>/<case>.js,
one case's tensors), since a page opened from file:// may not fetch() files beside it.

What it mirrors: nothing of PyTorch's. It only carries PyTorch's own numbers to the page,
bit for bit: each tensor is the base64 of its little-endian bytes, in its own dtype, so
that what the page shows is exactly what PyTorch wrote. The page (web/forward.js)
recomputes the forward from them and compares.

    /usr/bin/python3 explorer/build_site.py --out build/default/explorer/site
    /usr/bin/python3 explorer/build_site.py --out DIR --cases golden/cases golden/pytorch-2.6/cases

--plant-fault split-offset builds a page whose split of in_proj_weight takes the K block
one row too low: the browser tests must fail on it (explorer/CMakeLists.txt).
"""

import argparse
import base64
import json
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WEB = HERE / "web"
DEFAULT_CASES = [ROOT / "golden" / "cases", ROOT / "golden" / "pytorch-2.6" / "cases"]
FAULTS = ("split-offset",)

# The tensors of a forward; a case's other files (gradients, a training run) are not drawn.
FORWARD_TENSORS = (
    "in_proj_weight", "in_proj_bias", "q_proj_weight", "k_proj_weight", "v_proj_weight",
    "out_proj.weight", "out_proj.bias", "out_proj_weight", "out_proj_bias", "bias_k", "bias_v",
    "query", "key", "value", "key_padding_mask", "attn_mask", "static_k", "static_v",
    "dropout_mask", "attn_output", "attn_output_weights", "q", "k", "v",
)

# numpy's dtype -> the page's name for it (web/tensor.js decodes these).
PAGE_DTYPES = {"<f4": "f4", "<f8": "f8", "|b1": "b1", "|u1": "u1", "<i4": "i4", "<i8": "i8"}


def generation_of(case_json):
    """The PyTorch generation that made the case: its "pytorch" field, absent = 1.13."""
    return str(case_json.get("pytorch", "1.13"))


def encode_tensor(path):
    """One .npy as {dtype, shape, data}: data is base64 of its little-endian C-order bytes."""
    array = np.load(path, allow_pickle=False)
    dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
    name = dtype.str
    if name not in PAGE_DTYPES:
        raise ValueError(f"{path}: dtype {name} is not one the page reads")
    raw = np.ascontiguousarray(array, dtype=dtype).tobytes(order="C")
    return {"dtype": PAGE_DTYPES[name], "shape": list(array.shape), "data": base64.b64encode(raw).decode("ascii")}


def has_forward(case_json):
    """A rejection case holds no forward to draw: PyTorch refused the call."""
    return not case_json.get("expect_error", False)


def summary(case_json, name, generation, source):
    """What the case picker lists: enough to choose, without the tensors."""
    return {
        "name": name,
        "generation": generation,
        "key": f"{generation}/{name}",
        "source": source,
        "format": case_json.get("format", 1),
        "dtype": case_json.get("dtype"),
        "description": case_json.get("description", ""),
        "drawn": has_forward(case_json),
    }


def case_record(case_dir, case_json, name, generation, source):
    """Everything the page needs of one case: case.json as PyTorch's generator wrote it,
    and the forward's tensors (none for a rejection case, whose tensors need not be valid)."""
    record = dict(summary(case_json, name, generation, source))
    record["case"] = case_json
    record["tensors"] = {}
    if has_forward(case_json):
        for tensor in FORWARD_TENSORS:
            path = case_dir / f"{tensor}.npy"
            if path.exists():
                record["tensors"][tensor] = encode_tensor(path)
    else:
        record["files"] = sorted(p.name for p in case_dir.glob("*.npy"))
    return record


def script_of(variable_call, payload):
    """A data file the page loads with a <script> tag (fetch() is refused under file://)."""
    return f"{variable_call}({json.dumps(payload, separators=(',', ':'))});\n"


def read_cases(case_roots):
    """Every case folder under the roots, in name order, with its generation."""
    cases = []
    for root in case_roots:
        root = Path(root).resolve()
        for case_dir in sorted(p for p in root.iterdir() if (p / "case.json").is_file()):
            case_json = json.loads((case_dir / "case.json").read_text())
            try:
                source = str(case_dir.relative_to(ROOT))
            except ValueError:
                source = str(case_dir)
            cases.append((case_dir, case_json, case_dir.name, generation_of(case_json), source))
    return cases


def copy_page(out, fault, docs_base):
    """The page's own files, and its settings: the planted fault, where the course is."""
    for item in sorted(WEB.iterdir()):
        if item.is_file():
            shutil.copyfile(item, out / item.name)
    settings = {"fault": fault or "", "docsBase": docs_base}
    (out / "settings.js").write_text(f"window.MHA_EXPLORER_SETTINGS = {json.dumps(settings)};\n")


def folder_bytes(folder):
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())


def build(out, case_roots, fault=None, docs_base=None):
    """Writes the site into `out` (emptied first); returns (number of cases, drawn, bytes)."""
    out = Path(out).resolve()
    if out.exists():
        shutil.rmtree(out)
    (out / "data").mkdir(parents=True)
    if docs_base is None:
        docs_base = os.path.relpath(ROOT / "docs", out).replace(os.sep, "/") + "/"
    copy_page(out, fault, docs_base)

    index = []
    for case_dir, case_json, name, generation, source in read_cases(case_roots):
        record = case_record(case_dir, case_json, name, generation, source)
        folder = out / "data" / generation
        folder.mkdir(exist_ok=True)
        (folder / f"{name}.js").write_text(script_of("MHA_EXPLORER.register", record))
        index.append(summary(case_json, name, generation, source))
    (out / "data" / "index.js").write_text(script_of("MHA_EXPLORER.setIndex", index))
    return len(index), sum(1 for c in index if c["drawn"]), folder_bytes(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="the site's folder (emptied, then written)")
    parser.add_argument("--cases", nargs="+", default=[str(p) for p in DEFAULT_CASES],
                        help="folders of golden cases (default: golden/cases golden/pytorch-2.6/cases)")
    parser.add_argument("--plant-fault", choices=FAULTS, help="a wrong split, that the browser tests must catch")
    parser.add_argument("--docs-base", help="where the course's pages are, from the site (default: this tree's docs/)")
    parser.add_argument("--report", help="also write the size and build time to this JSON file")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    cases, drawn, size = build(args.out, args.cases, args.plant_fault, args.docs_base)
    seconds = time.perf_counter() - start
    print(f"explorer: {cases} cases ({drawn} with a forward to draw) into {args.out}: "
          f"{size / 1e6:.2f} MB in {seconds:.2f} s" + (f", fault planted: {args.plant_fault}" if args.plant_fault else ""))
    if args.report:
        Path(args.report).write_text(json.dumps({"cases": cases, "drawn": drawn, "bytes": size,
                                                 "seconds": round(seconds, 3)}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
