"""A table that a companion snippet measures and a page shows, kept equal.

The page holds the table between two markers:

    <!-- companion: 07_why_scaling.py -->
    | ... the table ... |
    <!-- end companion -->

`sync(page, name, table, update)` checks that the page shows exactly `table` (and raises
AssertionError when it does not), or rewrites the block with --update.
"""

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1]


def sync(page, name, table, update):
    path = DOCS / page
    text = path.read_text()
    block = re.compile(r"(<!-- companion: " + re.escape(name) + r" -->\n)(.*?)(<!-- end companion -->)", re.S)
    match = block.search(text)
    assert match, f"docs/{page} has no <!-- companion: {name} --> block"
    if update:
        path.write_text(text[:match.start(2)] + table + text[match.end(2):])
        print(f"  wrote the table into docs/{page}")
        return
    shown = match.group(2)
    ok = shown == table
    print(f"  {'the table on docs/' + page + ' is the one measured':<62} {'OK' if ok else 'FAILED'}")
    assert ok, f"docs/{page}: the table differs from the measured one; run with --update\n{table}"
