#!/usr/bin/env python3
"""explorer/tests/browser_test.py: the attention explorer, opened in a real browser and read back.

Debian's Chromium, headless, driven by Selenium through chromedriver, loads the built site
from file:// (no server, no network) and reads what the page shows: the text of its
tables and of its hover readout, never the page's own variables. Every number read is
compared with PyTorch's own tensor of the golden case, read here with numpy, by
golden/FORMAT.md's rule (|got - expected| <= atol + rtol * |expected|, NaN equal to NaN),
with the case's tolerance. The parts, one CTest test each (explorer/CMakeLists.txt):

  numbers  for cases of different options (plain, batch_first, bool and float masks with
           key_padding_mask and a fully masked row, unbatched, kdim/vdim, per-head
           weights, bias_k and the zero key, dropout replayed, PyTorch 2.6's paths): the
           hover readouts of the weight, q, k, v, each head's weights, the averaged
           weights and attn_output equal PyTorch's;
  order    the order picker finds Q, K, V and only it;
  check    a dropped right answer passes, an answer with K and V swapped (computed here
           with numpy) departs where it first differs, corrupt .npy files show their
           error and draw nothing, and a diagnosis JSON (written here, and by mha-grade
           diagnose --json when --mha-grade is given) shows its mistakes and pages;
  sweep    every golden case with a forward: the page's attn_output, and its verdicts,
           equal PyTorch's.

--plant-fault builds a site whose split takes the K block one row low, and runs the parts
on it: they must fail (the CTest test with WILL_FAIL). Screenshots of each view and the
draw times go to --artifacts.
"""

import argparse
import io
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CASE_ROOTS = {"1.13": ROOT / "golden" / "cases", "2.6": ROOT / "golden" / "pytorch-2.6" / "cases"}
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1400,1200"]

# Cases of different options, each read back number by number (the "numbers" part).
NUMBER_CASES = [
    "1.13/worked_example_f64",                                # plain, float64: integers by hand
    "1.13/self_seqfirst_f32",                                 # plain self-attention, sequence-first
    "1.13/self_batchfirst_f32",                               # batch_first
    "1.13/cross_batchfirst_f32",                              # batch_first, cross-attention
    "1.13/attn_mask_bool_2d_key_padding_mask_bool_f32",       # bool attn_mask and key_padding_mask
    "1.13/attn_mask_float_2d_key_padding_mask_bool_f64",      # float attn_mask and bool key_padding_mask
    "1.13/attn_mask_bool_2d_fully_masked_row",                # a fully masked row: NaN
    "1.13/attn_mask_float_2d_fully_masked_row_f64",           # the same with a float mask
    "1.13/self_unbatched_f32",                                # unbatched
    "1.13/attn_mask_bool_3d_key_padding_mask_unbatched_f32",  # unbatched, a 3-D mask and padding
    "1.13/cross_kdim_vdim_seqfirst_f32",                      # kdim, vdim: separate projections
    "1.13/per_head_weights_f32",                              # average_attn_weights=False
    "1.13/per_head_weights_add_bias_kv_add_zero_attn_f32",    # bias_k, bias_v and the zero key
    "1.13/backward_dropout_training_per_head_f64",            # dropout, PyTorch's mask replayed
    "1.13/functional_packed_f32",                             # the functional form
    "1.13/fast_path_per_head_weights_key_padding_mask_f32",   # 1.13's native fast path
    "2.6/per_head_weights_f32",                               # PyTorch 2.6
    "2.6/sdpa_fully_masked_row_f32",                          # 2.6's SDPA: the row gets weight 0
    "2.6/mismatched_masks_bool_attn_mask_float_key_padding_mask_f32",  # 2.6 adds the two masks
    "2.6/add_bias_kv_add_zero_attn_kdim_vdim_unbatched_f64",  # 2.6, everything at once, unbatched
]

# Cases whose q, k, v tell the six orders apart (the "order" part).
ORDER_CASES = ["1.13/worked_example_f64", "1.13/self_seqfirst_f32", "1.13/per_head_weights_f32",
               "1.13/encdec_seqfirst_f32", "2.6/self_batchfirst_f32", "2.6/functional_use_separate_proj_weight_f32"]

CHECK_CASE = "1.13/self_seqfirst_f32"


class Failures:
    """Every check's outcome; a check that fails prints where, and the run fails at the end."""

    def __init__(self):
        self.failed, self.passed = [], 0

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed.append(what)
            print(f"MISMATCH {what}", flush=True)
        return ok


# ---- PyTorch's tensors and the comparison rule ----

def case_dir(key):
    generation, name = key.split("/", 1)
    return CASE_ROOTS[generation] / name


def case_json(key):
    return json.loads((case_dir(key) / "case.json").read_text())


def golden(key, name):
    path = case_dir(key) / f"{name}.npy"
    return np.load(path, allow_pickle=False) if path.exists() else None


def shown_value(text):
    """A number as the page prints it: shortest round-trip text, NaN, inf, -inf."""
    text = text.strip()
    special = {"NaN": math.nan, "inf": math.inf, "-inf": -math.inf}
    return special[text] if text in special else float(text)


def first_departure(got, expected, rtol, atol):
    """(None, max error) when got equals expected by golden/FORMAT.md's rule, else (index, max error)."""
    got = np.asarray(got, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    if got.shape != expected.shape:
        return ("shape", got.shape, expected.shape), math.inf
    both_nan = np.isnan(got) & np.isnan(expected)
    with np.errstate(invalid="ignore"):
        ok = both_nan | (got == expected) | (np.abs(got - expected) <= atol + rtol * np.abs(expected))
        error = np.where(np.isfinite(got - expected), np.abs(got - expected), 0)
    max_error = float(error.max()) if error.size else 0.0
    if ok.all():
        return None, max_error
    return tuple(int(i) for i in np.argwhere(~ok)[0]), max_error


def expect_equal(failures, what, got, expected, tolerance):
    index, max_error = first_departure(got, expected, tolerance["rtol"], tolerance["atol"])
    detail = "" if index is None else f": first departs at {index}, max error {max_error:.3g}"
    return failures.check(index is None, f"{what}{detail}")


# ---- the browser ----

class Page:
    """The site in headless Chromium, one case and view at a time."""

    def __init__(self, site, artifacts):
        options = webdriver.ChromeOptions()
        self.profile = tempfile.mkdtemp(prefix="explorer-chromium-")  # a new, empty profile
        for flag in CHROMIUM_FLAGS + [f"--user-data-dir={self.profile}"]:
            options.add_argument(flag)
        options.binary_location = "/usr/bin/chromium"
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the page's console
        self.driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        self.site = Path(site).resolve()
        self.artifacts = Path(artifacts)
        self.draw_ms = {}

    def open(self, key, view, n=0):
        """Loads the page afresh on one case and view; waits until it says it has drawn."""
        self.driver.get("about:blank")
        self.driver.get(f"{(self.site / 'index.html').as_uri()}#case={key}&view={view}&n={n}")
        self.opened = True
        return self.wait_drawn(key, view)

    def show(self, key, view, n=0):
        """A case and view in the page already open, by its address, as a link to a view
        does (the page is loaded the first time)."""
        if not getattr(self, "opened", False):
            return self.open(key, view, n)
        self.driver.execute_script("if (location.hash === arguments[0]) return;"  # already shown
                                   "document.getElementById('status').dataset.state = 'stale';"
                                   "location.hash = arguments[0];", f"#case={key}&view={view}&n={n}")
        return self.wait_drawn(key, view)

    def click(self, selector, key, view):
        """Clicks a control that redraws the view (an order's radio button), and waits."""
        self.driver.execute_script("document.getElementById('status').dataset.state = 'stale';")
        self.driver.find_element(By.CSS_SELECTOR, selector).click()
        return self.wait_drawn(key, view)

    def wait_drawn(self, key, view, seconds=20):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            state, case, shown, ms = self.driver.execute_script(
                "const s = document.getElementById('status');"
                "return s ? [s.dataset.state, s.dataset.case, s.dataset.view,"
                "            document.getElementById('draw-time').dataset.ms] : [];") or [None] * 4
            if state == "ready" and case == key and shown == view:
                self.draw_ms.setdefault(f"{key} {view}", float(ms) if ms else math.nan)
                return True
            time.sleep(0.02)
        return False

    def table(self, selector):
        """The text of a table's number cells, row by row (None when the page has no such table)."""
        rows = self.driver.execute_script(
            "const t = document.querySelector(arguments[0]); if (!t) return null;"
            "return Array.from(t.querySelectorAll('tr')).slice(1)"
            "  .map(tr => Array.from(tr.querySelectorAll('td')).map(td => td.textContent));", selector)
        return None if rows is None else np.array([[shown_value(x) for x in row] for row in rows], dtype=np.float64)

    def text(self, selector):
        found = self.driver.find_elements(By.CSS_SELECTOR, selector)
        return found[0].text if found else None

    def hover(self, selector, scroll=True):
        """Moves the pointer onto a cell and returns the readout's text."""
        cell = self.driver.find_element(By.CSS_SELECTOR, selector)
        if scroll:
            self.driver.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'center'});", cell)
        ActionChains(self.driver, duration=0).move_to_element(cell).perform()
        return self.driver.find_element(By.ID, "readout").text

    def console_errors(self):
        """What the page logged as errors since the last call (a script that threw, a file not found)."""
        return [entry["message"] for entry in self.driver.get_log("browser") if entry["level"] == "SEVERE"]

    def screenshot(self, name):
        self.artifacts.mkdir(parents=True, exist_ok=True)
        self.driver.save_screenshot(str(self.artifacts / name))

    def close(self):
        self.driver.quit()
        shutil.rmtree(self.profile, ignore_errors=True)


# ---- the numbers part ----

def to_seq_first(x, batched, batch_first):
    """A tensor as forward was given it -> (L, N, ...), as the page draws it."""
    if not batched:
        return x[:, None]
    return np.swapaxes(x, 0, 1) if batch_first else x


def layout_of(key):
    c = case_json(key)
    batched = golden(key, "query").ndim == 3
    batch_first = c.get("format") != 3 and c["module"]["batch_first"]
    return c, batched, batch_first


def check_hover_readouts(page, failures, key, c):
    """The weight's heat map: row, column, block and value of a few cells, read by hovering."""
    packed = golden(key, "in_proj_weight")
    tol = c["tolerance"]
    if packed is None:
        w = golden(key, "q_proj_weight")
        text = page.hover("table[data-tensor='q_proj_weight'] td[data-i='0'][data-j='0']")
        m = re.search(r"q_proj_weight row 0, column 0: W_q\[0, 0\], value (\S+)", text)
        failures.check(m is not None, f"{key}: the readout of q_proj_weight[0, 0] says {text!r}")
        if m:
            expect_equal(failures, f"{key}: q_proj_weight[0, 0] in the readout", shown_value(m.group(1)), w[0, 0], tol)
        return
    E = packed.shape[1]
    bias = golden(key, "in_proj_bias")
    cells = [(0, 0), (E - 1, E - 1), (E, 0), (E, E - 1), (2 * E - 1, 1), (2 * E, 0), (3 * E - 1, E - 1)]
    if bias is not None:
        cells += [(E, E), (2 * E, E)]
    for row, col in cells:
        text = page.hover(f"table[data-tensor='in_proj_weight'] td[data-i='{row}'][data-j='{col}']")
        block = "qkv"[row // E]
        if col < E:
            pattern = rf"in_proj_weight row {row}, column {col}: W_{block}\[{row % E}, {col}\] \(rows \[{row // E * E}, {row // E * E + E}\)\), value (\S+)"
            expected = packed[row, col]
        else:
            pattern = rf"in_proj_bias row {row}: b_{block}\[{row % E}\] \(rows \[{row // E * E}, {row // E * E + E}\)\), value (\S+)"
            expected = bias[row]
        m = re.fullmatch(pattern, text)
        if failures.check(m is not None, f"{key}: hovering in_proj_weight cell ({row}, {col}) reads {text!r}, "
                                         f"expected block W_{block} row {row % E}"):
            expect_equal(failures, f"{key}: the readout's value of cell ({row}, {col})", shown_value(m.group(1)), expected, tol)


def check_projections(page, failures, key, c, N):
    """q, k, v of every batch entry as the packed view shows them, against q.npy, k.npy, v.npy."""
    for n in range(N):
        page.show(key, "packed", n)
        for name in "qkv":
            expected = golden(key, name)
            if expected is None:
                continue
            shown = page.table(f"table[data-tensor='{name}'][data-n='{n}']")
            if failures.check(shown is not None, f"{key}: the packed view shows {name} of batch entry {n}"):
                expect_equal(failures, f"{key}: {name}[:, {n}, :] as shown", shown, expected[:, n, :], c["tolerance"])


def check_heads(page, failures, key, c, N, H, batched, batch_first):
    """Each head's weights, the averaged weights and attn_output of every batch entry."""
    tol = c["tolerance"]
    weights = golden(key, "attn_output_weights")
    output = to_seq_first(golden(key, "attn_output"), batched, batch_first)  # (L, N, E)
    forward = c["functional"] if c.get("format") == 3 else c["forward"]
    per_head = weights is not None and not forward["average_attn_weights"]
    if weights is not None and not batched:
        weights = weights[None]  # (1, ...)
    for n in range(N):
        page.show(key, "heads", n)
        heads = [page.table(f"table[data-tensor='weights-head'][data-n='{n}'][data-h='{h}']") for h in range(H)]
        if not failures.check(all(x is not None for x in heads), f"{key}: the heads view shows {H} heads' weights"):
            continue
        averaged = page.table(f"table[data-tensor='weights-avg'][data-n='{n}']")
        if per_head:
            for h in range(H):
                expect_equal(failures, f"{key}: weights of head {h}, batch entry {n}", heads[h], weights[n, h], tol)
        elif weights is not None:
            expect_equal(failures, f"{key}: averaged weights of batch entry {n}", averaged, weights[n], tol)
            # the heads shown average to PyTorch's averaged weights
            expect_equal(failures, f"{key}: mean of the heads shown, batch entry {n}", np.mean(heads, axis=0), weights[n], tol)
        expect_equal(failures, f"{key}: attn_output of batch entry {n}",
                     page.table(f"table[data-tensor='attn_output'][data-n='{n}']"), output[:, n, :], tol)


def part_numbers(page, failures, args):
    for key in NUMBER_CASES:
        c, batched, batch_first = layout_of(key)
        query = to_seq_first(golden(key, "query"), batched, batch_first)
        N = query.shape[1]
        H = (c["functional"] if c.get("format") == 3 else c["module"])["num_heads"]
        if not failures.check(page.show(key, "packed"), f"{key}: the page draws the packed view"):
            continue
        generation = page.text("#generation") or ""
        failures.check(("PyTorch 2.6" if key.startswith("2.6/") else "PyTorch 1.13.1") in generation,
                       f"{key}: the page names the PyTorch that made it ({generation!r})")
        check_hover_readouts(page, failures, key, c)
        check_projections(page, failures, key, c, N)
        check_heads(page, failures, key, c, N, H, batched, batch_first)
        print(f"checked {key}", flush=True)
        if args.first_failure and failures.failed:
            print("stopping at the first case that fails (--first-failure)")
            return


# ---- the order part ----

def part_order(page, failures, args):
    for key in ORDER_CASES:
        if not failures.check(page.show(key, "order"), f"{key}: the page draws the order view"):
            continue
        rows = page.driver.execute_script(
            "return Array.from(document.querySelectorAll(\"table[data-tensor='orders'] tr[data-order]\"))"
            "  .map(tr => [tr.dataset.order, Array.from(tr.querySelectorAll('td')).map(td => td.textContent)]);")
        matching = [order for order, cells in rows if cells and all(text == "matches" for text in cells)]
        failures.check(len(rows) == 6, f"{key}: six orders shown, got {len(rows)}")
        failures.check(matching == ["QKV"], f"{key}: the orders that match PyTorch are {matching}, expected only QKV")
        summary = page.text("#order-summary") or ""
        failures.check(summary.startswith("Only Q, K, V gives PyTorch's numbers"), f"{key}: the summary says {summary!r}")
        # picked by its radio button, each order's attn_output: Q, K, V's is PyTorch's, the others' are not
        c, batched, batch_first = layout_of(key)
        expected = to_seq_first(golden(key, "attn_output"), batched, batch_first)[:, 0, :]  # batch entry 0
        for order in ("QVK", "KQV", "QKV"):
            page.click(f"input[name='order'][value='{order}']", key, "order")
            shown = page.table("table[data-tensor='order-output']")
            index, _ = first_departure(shown, expected, c["tolerance"]["rtol"], c["tolerance"]["atol"])
            failures.check((index is None) == (order == "QKV"),
                           f"{key}: attn_output picked with the order {order} {'departs' if index else 'equals PyTorch'}")
        print(f"checked the orders of {key}", flush=True)


# ---- the check part ----

def numpy_forward(key, swap_kv=False):
    """nn.MultiheadAttention's forward for a packed, unmasked, sequence-first case, with
    numpy in float64 then cast; swap_kv exchanges the W_k and W_v blocks (and biases)."""
    w, b = golden(key, "in_proj_weight").astype(np.float64), golden(key, "in_proj_bias").astype(np.float64)
    E = w.shape[1]
    H = case_json(key)["module"]["num_heads"]
    D = E // H
    blocks = [slice(0, E), slice(E, 2 * E), slice(2 * E, 3 * E)]
    if swap_kv:
        blocks = [blocks[0], blocks[2], blocks[1]]
    x = {name: golden(key, name).astype(np.float64) for name in ("query", "key", "value")}  # (L, N, E)
    q, k, v = (x[name] @ w[s].T + b[s] for name, s in zip(("query", "key", "value"), blocks))
    L, N, _ = q.shape
    S = k.shape[0]
    heads = lambda t, T: t.reshape(T, N * H, D).transpose(1, 0, 2)  # (T, N, E) -> (N*H, T, D)
    scores = heads(q, L) / math.sqrt(D) @ heads(k, S).transpose(0, 2, 1)  # (N*H, L, D) x (N*H, D, S) -> (N*H, L, S)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    merged = (weights @ heads(v, S)).transpose(1, 0, 2).reshape(L, N, E)  # (L, N, E)
    out = merged @ golden(key, "out_proj.weight").astype(np.float64).T + golden(key, "out_proj.bias")
    dtype = golden(key, "attn_output").dtype
    return out.astype(dtype), weights.reshape(N, H, L, S).mean(axis=1).astype(dtype)


def npy_bytes(array, version=None):
    buffer = io.BytesIO()
    if version is None:
        np.save(buffer, array, allow_pickle=False)
    else:
        np.lib.format.write_array(buffer, array, version=version, allow_pickle=False)
    return buffer.getvalue()


def npy_with_header(array, header):
    """A version 1.0 .npy with a header of our own words, padded as numpy pads it."""
    header = header.encode("latin1")
    header += b" " * (-(10 + len(header) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + array.tobytes()


def corrupt_files(key):
    """(file name, bytes, the words the page's message must hold): files a student may drop."""
    out = golden(key, "attn_output")
    good = npy_bytes(out)
    absurd = bytearray(npy_bytes(out, version=(2, 0)))
    absurd[8:12] = (0xFFFFFFF0).to_bytes(4, "little")  # a header that claims 4 GB
    return [
        ("truncated", good[:-10], "truncated"),
        ("not_npy", b"PK\x03\x04 not a numpy file at all", "not a .npy file"),
        ("fortran", npy_bytes(np.asfortranarray(out)), "fortran_order"),
        ("int32", npy_bytes(out.astype(np.int32)), "dtype '<i4'"),
        ("float64", npy_bytes(out.astype(np.float64)), "but the case is float32"),
        ("shape", npy_bytes(np.ascontiguousarray(out.transpose(1, 0, 2))), "shape"),
        ("absurd_header", bytes(absurd), "the header claims"),
        ("version_9", good[:6] + b"\x09\x00" + good[8:], "unknown .npy format version"),
        ("no_shape", npy_with_header(out, "{'descr': '<f4', 'fortran_order': False}"), "the header has the keys"),
    ]


def drop(page, paths):
    """Gives files to the page's file input, as a drop does, and waits for the results."""
    page.driver.execute_script("document.getElementById('check-results').dataset.state = '';")
    page.driver.find_element(By.ID, "answer-files").send_keys("\n".join(str(p) for p in paths))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if page.driver.find_element(By.ID, "check-results").get_attribute("data-state") == "done":
            break
        time.sleep(0.05)
    return page.driver.execute_script(
        "return Array.from(document.querySelectorAll('#check-results section.check-file')).map(s => ({"
        "  file: s.dataset.file, state: s.dataset.state, text: s.innerText,"
        "  departure: (s.querySelector('.departure[data-index]') || {dataset: {}}).dataset.index || null,"
        "  maps: s.querySelectorAll(\"table[data-tensor='difference']\").length,"
        "  named: Array.from(s.querySelectorAll('li.named')).map(li => [li.dataset.id, (li.querySelector('a') || {}).href || null])}));")


def check_diagnosis_shown(failures, what, shown, diagnosis):
    entry = shown[0] if shown else {}
    failures.check(entry.get("state") == ("pass" if diagnosis["verdict"] == "pass" else "fail"),
                   f"{what}: the page shows the verdict {diagnosis['verdict']} ({entry.get('text')!r})")
    ids = [n for n, _ in entry.get("named", [])]
    failures.check(ids == [m["id"] for m in diagnosis["named"]], f"{what}: mistakes shown {ids}, the diagnosis names "
                                                                 f"{[m['id'] for m in diagnosis['named']]}")
    for (mistake_id, href), m in zip(entry.get("named", []), diagnosis["named"]):
        if not re.fullmatch(r"docs/[A-Za-z0-9_.-]+\.md(#[A-Za-z0-9_-]+)?", m.get("page", "")):
            continue  # not a course page: shown as text, not linked
        target = Path(re.sub(r"^file://", "", (href or "").split("#")[0]))
        failures.check(href is not None and target.is_file() and target.resolve() == (ROOT / m["page"].split("#")[0]).resolve(),
                       f"{what}: {mistake_id} links {href}, expected the course page {m['page']}")


def part_check(page, failures, args):
    key, c = CHECK_CASE, case_json(CHECK_CASE)
    tol = c["tolerance"]
    work = Path(tempfile.mkdtemp(prefix="explorer-answers-"))
    try:
        failures.check(page.open(key, "check"), f"{key}: the page draws the check view")
        # 1) PyTorch's own tensors as the answer: every file passes
        right = work / "right"
        right.mkdir()
        for name in ("attn_output", "attn_output_weights", "q", "k", "v"):
            shutil.copyfile(case_dir(key) / f"{name}.npy", right / f"{name}.npy")
        shown = drop(page, sorted(right.iterdir()))
        failures.check(len(shown) == 5 and all(s["state"] == "pass" for s in shown),
                       f"{key}: PyTorch's own answer passes: {[(s['file'], s['state']) for s in shown]}")
        page.screenshot("explorer-check-right.png")

        # 2) K and V swapped: numpy's forward is PyTorch's, then departs where numpy says
        out, weights = numpy_forward(key)
        expect_equal(failures, f"{key}: this test's numpy forward, with PyTorch's output", out, golden(key, "attn_output"), tol)
        expect_equal(failures, f"{key}: this test's numpy forward, with PyTorch's weights", weights, golden(key, "attn_output_weights"), tol)
        swapped = work / "swapped"
        swapped.mkdir()
        out, weights = numpy_forward(key, swap_kv=True)
        np.save(swapped / "attn_output.npy", out)
        np.save(swapped / "attn_output_weights.npy", weights)
        shown = drop(page, sorted(swapped.iterdir()))
        for entry, (name, array) in zip(shown, (("attn_output", out), ("attn_output_weights", weights))):
            index, _ = first_departure(array, golden(key, name), tol["rtol"], tol["atol"])
            failures.check(index is not None, f"{key}: the swapped {name} departs from PyTorch's (numpy)")
            failures.check(entry["state"] == "fail" and entry["maps"] == 1,
                           f"{key}: the swapped {name} is shown failing with a difference map ({entry['state']})")
            failures.check(index is not None and entry["departure"] == ",".join(map(str, index)),
                           f"{key}: the swapped {name} first departs at {entry['departure']} on the page, at {index} by numpy")
        page.screenshot("explorer-check-swapped.png")

        # 3) corrupt files: a message each, and nothing drawn
        corrupt = work / "corrupt"
        corrupt.mkdir()
        for label, data, _ in corrupt_files(key):
            (corrupt / label).mkdir()
            (corrupt / label / "attn_output.npy").write_bytes(data)
        for label, _, words in corrupt_files(key):
            shown = drop(page, [corrupt / label / "attn_output.npy"])
            entry = shown[0] if shown else {}
            failures.check(entry.get("state") == "error" and words in entry.get("text", "") and entry.get("maps") == 0,
                           f"{key}: the {label} .npy shows an error with {words!r} and no map: {entry.get('text')!r}")
        page.screenshot("explorer-check-corrupt.png")
        # ... and a header whose keys come in another order is read as numpy reads it
        reordered = work / "reordered"
        reordered.mkdir()
        shape = ", ".join(map(str, golden(key, "attn_output").shape))
        (reordered / "attn_output.npy").write_bytes(npy_with_header(
            golden(key, "attn_output"), f"{{'shape': ({shape}), 'fortran_order': False, 'descr': '<f4', }}"))
        shown = drop(page, [reordered / "attn_output.npy"])
        failures.check(bool(shown) and shown[0]["state"] == "pass",
                       f"{key}: a header with its keys in another order is read: {shown[0]['text'] if shown else None!r}")

        # 4) a diagnosis, in mha-grade diagnose --json's schema
        diagnosis = {"case": key.split("/", 1)[1], "verdict": "fail", "error": "",
                     "named": [{"id": "kv_swapped", "step": "in-projection",
                                "explanation": "rows [E, 2E) taken as W_v and [2E, 3E) as W_k",
                                "page": "docs/02-packed-layout.md"},
                               {"id": "no_such_page", "step": "", "explanation": "", "page": "javascript:alert(1)"}],
                     "departure": "attn_output[0, 0, 0]"}
        (work / "diagnosis.json").write_text(json.dumps(diagnosis))
        shown = drop(page, [work / "diagnosis.json"])
        check_diagnosis_shown(failures, f"{key}: the test's diagnosis", shown, diagnosis)
        links = shown[0]["named"] if shown else []
        failures.check(len(links) == 2 and links[1][1] is None, f"{key}: a page that is not a course page is not a link: {links}")
        page.screenshot("explorer-check-diagnosis.png")
        (work / "bad.json").write_text('{"case": "x", "verdict": "maybe", "named": []}')
        shown = drop(page, [work / "bad.json"])
        failures.check(bool(shown) and shown[0]["state"] == "error" and "verdict" in shown[0]["text"],
                       f"{key}: a JSON that is not a diagnosis is refused: {shown}")

        # 5) mha-grade's own diagnosis of the swapped answer, when it is built
        if args.mha_grade and Path(args.mha_grade).is_file():
            run = subprocess.run([args.mha_grade, "diagnose", str(case_dir(key)), str(swapped), "--json"],
                                 capture_output=True, text=True, timeout=120)
            try:
                graded = json.loads(run.stdout)
            except json.JSONDecodeError:
                graded = None
            if graded is None:
                print(f"note: {args.mha_grade} diagnose --json printed no JSON (exit {run.returncode}): "
                      f"{(run.stderr or run.stdout).strip()[:300]!r}; its diagnosis is not shown", flush=True)
            else:
                (work / "mha-grade.json").write_text(run.stdout)
                failures.check(graded.get("verdict") == "fail", f"{key}: mha-grade's verdict on the swapped answer is fail")
                failures.check("kv_swapped" in [m.get("id") for m in graded.get("named", [])],
                               f"{key}: mha-grade names kv_swapped for the answer this test swapped: {graded.get('named')}")
                shown = drop(page, [work / "mha-grade.json"])
                check_diagnosis_shown(failures, f"{key}: mha-grade's diagnosis", shown, graded)
                page.screenshot("explorer-check-mha-grade.png")
        print(f"checked dropped answers on {key}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---- the sweep part ----

def part_sweep(page, failures, args):
    index = json.loads(re.sub(r"^MHA_EXPLORER\.setIndex\((.*)\);\s*$", r"\1",
                              (Path(args.site) / "data" / "index.js").read_text(), flags=re.S))
    listed = {c["key"] for c in index}
    on_disk = {f"{g}/{p.name}" for g, root in CASE_ROOTS.items() for p in root.iterdir() if (p / "case.json").is_file()}
    failures.check(listed == on_disk, f"every golden case is listed: missing {sorted(on_disk - listed)[:5]}")
    page.open(index[0]["key"], "heads")
    drawn = 0
    for c in index:
        key = c["key"]
        if not c["drawn"]:
            failures.check(bool(case_json(key).get("expect_error")), f"{key}: left undrawn, and a rejection case")
            continue
        if not failures.check(page.show(key, "heads"), f"{key}: the page draws the heads view"):
            continue
        drawn += 1
        cj, batched, batch_first = layout_of(key)
        output = to_seq_first(golden(key, "attn_output"), batched, batch_first)
        expect_equal(failures, f"{key}: attn_output of batch entry 0", page.table("table[data-tensor='attn_output'][data-n='0']"),
                     output[:, 0, :], cj["tolerance"])
        verdicts = page.driver.execute_script(
            "return Array.from(document.querySelectorAll('#view .verdict')).map(v => v.className + ': ' + v.textContent);")
        failures.check(all("fail" not in v for v in verdicts), f"{key}: the page's verdicts {verdicts}")
    print(f"swept {drawn} cases with a forward, {len(index) - drawn} rejection cases listed", flush=True)


# ---- main ----

# With --plant-fault, a run that could not start, or broke, exits with this, which CTest
# reports as skipped (SKIP_RETURN_CODE), not as the failure that the planted fault must cause.
NOT_RUN = 77

PARTS = {"numbers": part_numbers, "order": part_order, "check": part_check, "sweep": part_sweep}


def screenshots(page):
    """One of each view, for the artifacts; the packed view's, a W_k cell hovered, is the
    README's (docs/images/explorer-packed.png)."""
    for view, key, n in (("packed", "1.13/per_head_weights_f32", 0), ("order", "1.13/self_seqfirst_f32", 0),
                         ("heads", "1.13/attn_mask_bool_2d_fully_masked_row", 1), ("check", CHECK_CASE, 0)):
        if page.open(key, view, n):
            if view == "packed":
                page.hover("table[data-tensor='in_proj_weight'] td[data-i='9'][data-j='3']", scroll=False)
            page.screenshot(f"explorer-{view}.png")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--site", required=True, help="the built site (explorer/build_site.py --out)")
    parser.add_argument("--artifacts", required=True, help="where screenshots and draw times go")
    parser.add_argument("--part", choices=sorted(PARTS), action="append", required=True)
    parser.add_argument("--mha-grade", help="mha-grade, to diagnose the swapped answer (optional)")
    parser.add_argument("--plant-fault", action="store_true", help="build and test a site with a wrong split")
    parser.add_argument("--first-failure", action="store_true", help="stop the numbers part at the first case that fails")
    args = parser.parse_args(argv)

    artifacts = Path(args.artifacts)
    artifacts.mkdir(parents=True, exist_ok=True)
    failures = Failures()
    try:
        if args.plant_fault:
            args.site = str(artifacts / "site-with-fault")
            subprocess.run([sys.executable, str(ROOT / "explorer" / "build_site.py"), "--out", args.site,
                            "--plant-fault", "split-offset"], check=True)
        if not (Path(args.site) / "index.html").is_file():
            raise RuntimeError(f"no site in {args.site}: build the target explorer-site")
        page = Page(args.site, artifacts)
    except Exception as error:  # no browser, no site: the test could not run, which is not a mismatch
        print(f"ERROR the browser test cannot run: {error} (Chromium and chromedriver: scripts/setup)")
        return NOT_RUN if args.plant_fault else 2
    try:
        for part in args.part:
            PARTS[part](page, failures, args)
            errors = page.console_errors()
            failures.check(not errors, f"the page logged no error during the {part} part: {errors[:3]}")
        if "numbers" in args.part and not args.plant_fault:
            screenshots(page)
    except Exception as error:  # the test itself broke: neither a pass nor the planted fault's failure
        traceback.print_exc()
        print(f"ERROR the browser test stopped: {error}")
        return NOT_RUN if args.plant_fault else 2
    finally:
        page.close()

    times = sorted(ms for ms in page.draw_ms.values() if not math.isnan(ms))
    if times:
        report = {"views_drawn": len(times), "median_ms": round(times[len(times) // 2], 1), "max_ms": round(times[-1], 1)}
        name = "-".join(args.part) + ("-with-fault" if args.plant_fault else "")
        (artifacts / f"draw-times-{name}.json").write_text(json.dumps(report, indent=2) + "\n")
        print(f"draw time of a case's view in headless Chromium: median {report['median_ms']} ms, "
              f"max {report['max_ms']} ms over {report['views_drawn']} views")
    print(f"{failures.passed} checks passed, {len(failures.failed)} failed")
    print("OK" if not failures.failed else "MISMATCH")
    return 0 if not failures.failed else 1


if __name__ == "__main__":
    sys.exit(main())
