"""scripts/doc_blocks.py: the tables a program writes into a page of docs/, and their check.

A table sits in its page between <!-- NAME --> and <!-- end NAME -->, rendered from a JSON
file of measurements. write() puts each rendering into its block; check() fails when a
block differs from its rendering, so a number in the page is always one a program printed.
Used by bench/ort_table, bench/decode_table and scripts/build_figures.
"""

import json
import re
import sys


def _block(text, name, page, tool):
    m = re.search(rf"(<!-- {name} -->\n)(.*?)(<!-- end {name} -->)", text, re.S)
    if not m:
        sys.exit(f"{tool}: {page.name} has no <!-- {name} --> block")
    return m


def write(page, results, renders, tool):
    """Renders each table of `renders` ({name: function(results) -> text}) into `page`."""
    text = page.read_text()
    for name, render in renders.items():
        m, expected = _block(text, name, page, tool), render(results)
        text = text[:m.start(2)] + expected + text[m.end(2):]
        print(expected)
    page.write_text(text)
    return 0


def check(page, results_file, renders, tool):
    """0 when every table of `renders` in `page` is the rendering of `results_file`, else 1."""
    text, results, failed = page.read_text(), json.loads(results_file.read_text()), False
    for name, render in renders.items():
        m, expected = _block(text, name, page, tool), render(results)
        if m.group(2) != expected:
            print(f"docs/{page.name}'s {name} differs from docs/{results_file.name}; expected:\n" + expected)
            failed = True
        else:
            print(f"{name}: OK")
    return 1 if failed else 0
