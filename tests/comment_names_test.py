#!/usr/bin/env python3
"""tests/comment_names_test.py — comments name only partitions and files that exist.

A comment that sends the reader to `:in_projection` or to modules/engine/engine.hpp must
send them somewhere real. This test reads every comment in the C++ and CMake sources
(modules/, tests/, tutorials/, tools/, bench/, fuzz/, docs/ programs) and fails on
  - a module partition, `:name` or `mha:name`, other than mha's four (platform, textbook,
    engine, api);
  - a path (modules/..., tests/..., docs/...) that is not a file or folder of the tree;
  - a C++ file name (name.hpp, name.cpp, name.cppm) that no file of the tree has;
and on a C++ file whose first line is not `// <its path> — <what it is>` (or `// <its path>
(internal) — ...`): every file of
modules/' folders and every module unit (modules/*.cppm), and every C++ file of tests/,
tutorials/, tools/, bench/, fuzz/ and labs/. (modules/third_party*.hpp, the headers of every
unit's global module fragment, are not module code.)

  comment_names_test.py SOURCE_DIR            the check
  comment_names_test.py SOURCE_DIR --plant    the same with a comment naming a partition
                                              that does not exist and a test file without
                                              its path on line 1: must report both (ctest checks)
"""
import re
import subprocess
import sys
from pathlib import Path

PARTITIONS = {"platform", "textbook", "engine", "api"}
TOP = ("modules", "tests", "tutorials", "tools", "bench", "fuzz", "docs", "scripts", "golden", "cmake", "labs")
PATH = re.compile(r"(?<![\w/.-])((?:" + "|".join(TOP) + r")/[\w./+-]*[\w/])")
FILE = re.compile(r"(?<![\w/.-])([\w-]+\.(?:hpp|cpp|cppm))\b")
PARTITION = re.compile(r"(?<![\w:])(?:mha)?:([a-z][a-z_]+)\b")


def comments(text):
    """(line number, text) of every // comment; string literals skipped."""
    for number, line in enumerate(text.splitlines(), 1):
        i, quote = 0, None
        while i < len(line):
            c = line[i]
            if quote:
                if c == "\\":
                    i += 1
                elif c == quote:
                    quote = None
            elif c in "\"'" and not (c == "'" and i > 0 and line[i - 1].isalnum()):
                quote = c
            elif line.startswith("//", i):
                yield number, line[i + 2:]
                break
            i += 1


def main():
    root = Path(sys.argv[1])
    plant = "--plant" in sys.argv[2:]
    tracked = subprocess.run(["git", "-C", str(root), "ls-files", "--cached", "--others", "--exclude-standard"], capture_output=True, text=True).stdout.split()
    if not tracked:  # not a git checkout: every file under the root
        tracked = [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "build" not in p.parts]
    basenames = {Path(f).name for f in tracked}
    programs = ("tests/", "tutorials/", "tools/", "bench/", "fuzz/", "labs/")
    sources = [f for f in tracked
               if f.startswith(("modules/",) + programs) and f.endswith((".hpp", ".cpp", ".cppm"))]
    problems = []
    for f in sources:
        text = (root / f).read_text(errors="replace")
        if plant and f == "modules/mha.cppm":
            text += "\n// the heads are split in :split_heads_partition\n"
        if plant and f == "tests/error_test.cpp":
            text = text.split("\n", 1)[-1]  # its first line, the path, gone
        headed = f.startswith(programs) or (f.startswith("modules/") and (f.count("/") == 2 or f.endswith(".cppm")))
        if headed and not re.match(rf"// {re.escape(f)}( \(internal\))? — ", text):
            problems.append(f"{f}:1: does not open with its path (// {f} — ...)")
        for number, comment in comments(text):
            for m in PARTITION.finditer(comment):
                if m.group(1) not in PARTITIONS:
                    problems.append(f"{f}:{number}: names the partition :{m.group(1)}, which mha does not have")
            for m in PATH.finditer(comment):
                path = m.group(1).rstrip(".")
                if not (root / path).exists():
                    problems.append(f"{f}:{number}: names {path}, which does not exist")
            for m in FILE.finditer(comment):
                if m.group(1) not in basenames:
                    problems.append(f"{f}:{number}: names {m.group(1)}, which no file of the tree is")
    for p in problems:
        print(p)
    print(f"{len(sources)} source files' comments: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
