#!/usr/bin/env python3
"""explorer/tests/build_site_test.py: the explorer's site carries PyTorch's numbers bit for bit.

Builds the site into a temporary folder with explorer/build_site.py, as the build does,
then reads its data files back without a browser and checks them against the golden
cases on disk: every case folder of golden/cases and golden/pytorch-2.6/cases is listed
once, under the generation that made it; a case with a forward carries each forward
tensor with the dtype, the shape and the very bytes of its .npy file (NaN and infinities
included); a rejection case carries none and says so; the page's files are all there;
--plant-fault is written into the page's settings; every address of a view that the
course and the READMEs quote (index.html#case=...&view=...) names a case and a view the
page has. It prints the site's size and build time, as build_site.py measured them.
"""

import base64
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))
import build_site  # noqa: E402  (explorer/build_site.py)

CASE_ROOTS = {"1.13": ROOT / "golden" / "cases", "2.6": ROOT / "golden" / "pytorch-2.6" / "cases"}


def data_of(path):
    """The JSON a data file passes to MHA_EXPLORER.register / setIndex."""
    m = re.fullmatch(r"MHA_EXPLORER\.(?:register|setIndex)\((.*)\);\s*", path.read_text(), flags=re.S)
    return json.loads(m.group(1)) if m else None


def main():
    problems = []
    with tempfile.TemporaryDirectory(prefix="explorer-site-") as tmp:
        site, report = Path(tmp) / "site", Path(tmp) / "report.json"
        subprocess.run([sys.executable, str(HERE.parent / "build_site.py"), "--out", str(site), "--report", str(report)],
                       check=True)
        # 1) the page's own files, each one index.html names
        html = (site / "index.html").read_text()
        for name in re.findall(r'(?:src|href)="([^"]+)"', html):
            if not (site / name).is_file():
                problems.append(f"index.html names {name}, which the site lacks")
        # 2) every case folder, once, under its generation
        index = data_of(site / "data" / "index.js")
        listed = sorted(c["key"] for c in index)
        on_disk = sorted(f"{g}/{p.name}" for g, root in CASE_ROOTS.items() for p in root.iterdir() if (p / "case.json").is_file())
        if listed != on_disk:
            problems.append(f"listed {len(listed)} cases, {len(on_disk)} on disk: "
                            f"{sorted(set(on_disk) ^ set(listed))[:5]} differ")
        # 3) each case's data: PyTorch's bytes
        tensors = 0
        for c in index:
            generation, name = c["key"].split("/", 1)
            folder = CASE_ROOTS[generation] / name
            case_json = json.loads((folder / "case.json").read_text())
            record = data_of(site / "data" / generation / f"{name}.js")
            if record is None or record["case"] != case_json:
                problems.append(f"{c['key']}: its data file does not hold its case.json")
                continue
            if c["drawn"] == bool(case_json.get("expect_error")):
                problems.append(f"{c['key']}: drawn is {c['drawn']}, expect_error is {case_json.get('expect_error')}")
            if case_json.get("expect_error") and record["tensors"]:
                problems.append(f"{c['key']}: a rejection case carries tensors")
            expected_names = set() if case_json.get("expect_error") else \
                {n for n in build_site.FORWARD_TENSORS if (folder / f"{n}.npy").exists()}
            if set(record["tensors"]) != expected_names:
                problems.append(f"{c['key']}: carries {sorted(record['tensors'])}, expected {sorted(expected_names)}")
            for tensor, encoded in record["tensors"].items():
                array = np.load(folder / f"{tensor}.npy", allow_pickle=False)
                raw = base64.b64decode(encoded["data"])
                if (encoded["shape"] != list(array.shape) or build_site.PAGE_DTYPES[array.dtype.str] != encoded["dtype"]
                        or raw != np.ascontiguousarray(array).tobytes()):
                    problems.append(f"{c['key']}: {tensor} is not the .npy's dtype, shape and bytes")
                tensors += 1
        # 4) the planted fault reaches the page's settings
        fault_site = Path(tmp) / "fault"
        build_site.build(fault_site, [CASE_ROOTS["1.13"]], fault="split-offset")
        if '"fault": "split-offset"' not in (fault_site / "settings.js").read_text():
            problems.append("--plant-fault is not in the page's settings")
        if '"fault": ""' not in (site / "settings.js").read_text():
            problems.append("the site without --plant-fault has a fault in its settings")
        # 5) every address of a view quoted in the course and the READMEs names a case and a view the page has
        views = set(re.findall(r"(\w+): \"", re.search(r"const VIEWS = \{([^}]*)\}", (HERE.parent / "web" / "app.js").read_text()).group(1)))
        keys = {c["key"] for c in index}
        quoted = 0
        for page in sorted(ROOT.glob("docs/**/*.md")) + [ROOT / "README.md", HERE.parent / "README.md"]:
            for case, view in re.findall(r"index\.html#case=([^&\s`]+)&view=(\w+)", page.read_text()):
                quoted += 1
                if case not in keys or view not in views:
                    problems.append(f"{page.relative_to(ROOT)}: the address #case={case}&view={view} names no such case or view")
        if not quoted:
            problems.append("no address of a view is quoted in the course")
        measured = json.loads(report.read_text())
        if measured["bytes"] != build_site.folder_bytes(site) or measured["cases"] != len(index):
            problems.append(f"the report {measured} is not the site's")

    for problem in problems:
        print(f"MISMATCH {problem}")
    print(f"{len(index)} cases, {tensors} tensors compared byte for byte; site {measured['bytes']} bytes, "
          f"built in {measured['seconds']} s")
    print("OK" if not problems else "MISMATCH")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
