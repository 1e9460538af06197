#!/usr/bin/env python3
"""tests/comment_names_test.py — comments and documents name only partitions and files that exist.

A comment that sends the reader to `:in_projection` or to modules/engine/engine.hpp must
send them somewhere real. This test reads every comment in the C++ and CMake sources
(modules/, tests/, tutorials/, tools/, bench/, fuzz/, docs/ programs) and fails on
  - a module partition, `:name` or `mha:name`, other than mha's three (platform, engine,
    api): the textbook is a module of its own, mha.textbook, and `mha:textbook` is no more;
  - a module, `mha.name`, that no unit of modules/ declares (`export module mha.name;`);
  - a path (modules/..., tests/..., docs/...) that is not a file or folder of the tree;
  - a C++ file name (name.hpp, name.cpp, name.cppm) that no file of the tree has;
and on a C++ file whose first line is not `// <its path> — <what it is>` (or `// <its path>
(internal) — ...`): every file of
modules/' folders and every module unit (modules/*.cppm), and every C++ file of tests/,
tutorials/, tools/, bench/, fuzz/ and labs/. (modules/third_party*.hpp, the headers of every
unit's global module fragment, are not module code.)

It reads every Markdown file of the tree but CHANGELOG.md (history, which names what was)
the same way for partitions and C++ file names: all of its text, prose and code, URLs left
out (prose has no `:name` that is not a partition: a run over the tree finds none).

modules/mha.cppm's file map (the layers, each with the files its unit includes) must
be whole: every header of modules/textbook/, platform/, engine/ and api/ is in it, under its
layer (headed mha.textbook, mha:platform, mha:engine, mha:api), in the order
modules/<layer>.cppm includes them; every file it names exists; every
header of a layer's folder is included by the layer. (The .cpp bodies are not in the map.)

What the engine exports is said in comments of modules/mha.cppm and modules/engine.cppm as
`exports one name, mha::...` (or `no name`, `two names, mha::... and mha::...`): the names
said must be the names that modules/engine/*.hpp and engine.cppm export (`export namespace`
blocks; any other `export` there fails, as this test cannot read it). While the engine
exports anything, no comment or document may say `nothing of the engine` or `none of it
exported`.

  comment_names_test.py SOURCE_DIR            the check
  comment_names_test.py SOURCE_DIR --plant    the same with faults planted: a comment naming a
                                              partition that does not exist (and the
                                              textbook as one), a module that does not
                                              exist, a test file
                                              without its path on line 1, a Markdown file
                                              naming a partition and a file that do not
                                              exist and saying nothing of the engine is
                                              exported, a file map entry renamed (one file
                                              missing, one that does not exist), and one
                                              more name exported by the engine: must report
                                              each (ctest checks)
"""
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layers_test import code_only  # noqa: E402  (the same reading of code, comments left out)
from public_names_test import exported_names  # noqa: E402  (the same reading of exports)

PARTITIONS = {"platform", "engine", "api"}
LAYERS = ("textbook", "platform", "engine", "api")  # the file map's order
# Each layer's name: the textbook is a module of its own, the others are partitions of mha.
LAYER_NAMES = {"textbook": "mha.textbook", "platform": "mha:platform", "engine": "mha:engine", "api": "mha:api"}
TOP = ("modules", "tests", "tutorials", "tools", "bench", "fuzz", "docs", "scripts", "golden", "cmake", "labs")
PATH = re.compile(r"(?<![\w/.-])((?:" + "|".join(TOP) + r")/[\w./+-]*[\w/])")
FILE = re.compile(r"(?<![\w/.-])([\w-]+\.(?:hpp|cpp|cppm))\b")
PARTITION = re.compile(r"(?<![\w:])(?:mha)?:([a-z][a-z_]+)\b")
# mha.name, not a file name (mha.cppm), part of a path (CMakeFiles/mha.dir) nor Python's
# attribute of an object named mha (mha.out_proj.weight, mha.forward(...))
MODULE = re.compile(r"(?<![\w./-])(mha\.[a-z][a-z_]*)\b(?![\w/(-]|\.\w)")
NOT_MODULES = {"mha.cppm", "mha.dir"}
URL = re.compile(r"\b[a-z][a-z+.-]*://\S+")
NUMBERS = {"no": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5}
CLAIM = re.compile(r"exports\s+(no|one|two|three|four|five|\d+)\s+names?\b([^;.]*)")
NOTHING_EXPORTED = re.compile(r"(?i)nothing\s+of\s+the\s+engine|none\s+of\s+it\s+exported"
                              r"|engine(?:'s\s+layer)?\s+exports\s+(?:nothing|no\s+name)")

# --plant: each file's text as read, with a fault planted
PLANTS = {
    "modules/mha.cppm": lambda t: t.replace("//     kv_cache.hpp ", "//     kv_store.hpp ", 1)
    + "\n// the heads are split in :split_heads_partition\n// the textbook, once mha:textbook, is in mha.texbook\n",
    "tests/error_test.cpp": lambda t: t.split("\n", 1)[-1],  # its first line, the path, gone
    "docs/building.md": lambda t: t + "\nThe heads are split in `mha:split_heads_layer`, whose file is "
    "split_heads_layer.cppm.\nNothing of the engine is exported.\n",
    "modules/engine/decode_step.hpp": lambda t: t + "\nexport namespace mha::testing {\nint planted_probe();\n}"
    "  // namespace mha::testing\n",
}


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


def names(where, number, text, root, basenames, module_names, paths=True):
    """The problems of one comment or Markdown line."""
    found = []
    for m in PARTITION.finditer(text):
        if m.group(1) not in PARTITIONS:
            found.append(f"{where}:{number}: names the partition :{m.group(1)}, which mha does not have")
    for m in MODULE.finditer(text):
        if m.group(1) not in module_names | NOT_MODULES:
            found.append(f"{where}:{number}: names the module {m.group(1)}, which no unit of modules/ declares")
    for m in PATH.finditer(text) if paths else ():
        path = m.group(1).rstrip(".")
        if not (root / path).exists():
            found.append(f"{where}:{number}: names {path}, which does not exist")
    for m in FILE.finditer(text):
        if m.group(1) not in basenames:
            found.append(f"{where}:{number}: names {m.group(1)}, which no file of the tree is")
    return found


def joined(lines):
    """Numbered lines as one text, and the line number at a position of it."""
    text = "\n".join(line for _, line in lines)
    starts = [0]
    for _, line in lines:
        starts.append(starts[-1] + len(line) + 1)

    def number(position):
        i = max(k for k in range(len(lines)) if starts[k] <= position)
        return lines[i][0]
    return text, number


def file_map(read, tracked):
    """modules/mha.cppm's file map against the layers' folders and includes."""
    problems, entries, layer = [], {}, None
    for number, line in enumerate(read("modules/mha.cppm").splitlines(), 1):
        if not line.startswith("//"):
            break  # the map is in the opening comment
        heading = re.match(r"//   (mha[:.]\w+)\s+\(", line)
        if heading:
            layer = next((k for k, v in LAYER_NAMES.items() if v == heading.group(1)), heading.group(1))
            entries.setdefault(layer, [])
            continue
        entry = re.match(r"//     (\S+\.(?:hpp|cpp))\s", line)
        if entry and layer:
            entries[layer].append((number, entry.group(1)))
    for layer in LAYERS:
        if layer not in entries:
            problems.append(f"modules/mha.cppm: the file map has no {LAYER_NAMES[layer]}")
            continue
        listed = [name for _, name in entries[layer]]
        folder = [Path(f).name for f in tracked if f.startswith(f"modules/{layer}/") and f.endswith(".hpp")
                  and f.count("/") == 2]
        included = re.findall(rf'^#include "{layer}/([^"]+)"', read(f"modules/{layer}.cppm"), re.M)
        for number, name in entries[layer]:
            if name not in folder:
                problems.append(f"modules/mha.cppm:{number}: the file map names {layer}/{name}, which does not exist")
        for name in sorted(set(folder) - set(listed)):
            problems.append(f"modules/mha.cppm: the file map of {LAYER_NAMES[layer]} omits {layer}/{name}")
        for name in sorted(set(folder) - set(included)):
            problems.append(f"modules/{layer}/{name}: modules/{layer}.cppm does not include it")
        in_map = [n for n in listed if n in included]
        in_order = [n for n in included if n in listed]
        if in_map != in_order:
            problems.append(f"modules/mha.cppm: the file map lists {LAYER_NAMES[layer]}'s files in another order than "
                            f"modules/{layer}.cppm includes them: {', '.join(in_order)}")
    return problems, sum(len(e) for e in entries.values())


def engine_exports(read, tracked):
    """The names the engine's files export, and what they export that this test cannot read."""
    exported, problems = set(), []
    files = ["modules/engine.cppm"] + [f for f in tracked if f.startswith("modules/engine/") and f.endswith(".hpp")]
    for f in files:
        text = read(f)
        exported |= exported_names(None, text)
        for number, line in enumerate(code_only(text).splitlines(), 1):
            for m in re.finditer(r"\bexport\b\s*(\w*)", line):
                if m.group(1) not in ("module", "namespace"):
                    problems.append(f"{f}:{number}: exports something this test cannot read: {line.strip()}")
    return exported, problems


def main():
    root = Path(sys.argv[1])
    plant = "--plant" in sys.argv[2:]
    tracked = subprocess.run(["git", "-C", str(root), "ls-files", "--cached", "--others", "--exclude-standard"], capture_output=True, text=True).stdout.split()
    if not tracked:  # not a git checkout: every file under the root
        tracked = [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "build" not in p.parts]
    tracked = [f for f in tracked if (root / f).is_file()]  # not a file deleted in the work tree
    basenames = {Path(f).name for f in tracked}
    module_names = {m for f in tracked if f.startswith("modules/") and f.endswith(".cppm")
                    for m in re.findall(r"^export\s+module\s+([\w.]+)\s*;", (root / f).read_text(), re.M)}

    def read(f):
        text = (root / f).read_text(errors="replace")
        return PLANTS[f](text) if plant and f in PLANTS else text

    programs = ("tests/", "tutorials/", "tools/", "bench/", "fuzz/", "labs/")
    sources = [f for f in tracked
               if f.startswith(("modules/",) + programs) and f.endswith((".hpp", ".cpp", ".cppm"))]
    markdown = [f for f in tracked if f.endswith(".md") and f != "CHANGELOG.md"]
    problems, said_nothing = [], []
    for f in sources:
        text = read(f)
        headed = f.startswith(programs) or (f.startswith("modules/") and (f.count("/") == 2 or f.endswith(".cppm")))
        if headed and not re.match(rf"// {re.escape(f)}( \(internal\))? — ", text):
            problems.append(f"{f}:1: does not open with its path (// {f} — ...)")
        lines = list(comments(text))
        for number, comment in lines:
            problems += names(f, number, comment, root, basenames, module_names)
        text, number = joined(lines)
        said_nothing += [(f, number(m.start())) for m in NOTHING_EXPORTED.finditer(text)]
    for f in markdown:
        text = read(f)
        for number, line in enumerate(text.splitlines(), 1):
            problems += names(f, number, URL.sub(" ", line), root, basenames, module_names, paths=False)
        said_nothing += [(f, text.count("\n", 0, m.start()) + 1) for m in NOTHING_EXPORTED.finditer(text)]

    found, entries = file_map(read, tracked)
    problems += found

    exported, found = engine_exports(read, tracked)
    problems += found
    for f in ("modules/mha.cppm", "modules/engine.cppm"):
        text, number = joined(list(comments(read(f))))
        claims = list(CLAIM.finditer(text))
        if not claims:
            problems.append(f"{f}: says nowhere what the engine exports (`exports one name, mha::...`)")
        for m in claims:
            said = re.findall(r"mha::[\w:]*\w", m.group(2))
            count = NUMBERS.get(m.group(1), None if not m.group(1).isdigit() else int(m.group(1)))
            if count != len(said) or set(said) != exported:
                problems.append(f"{f}:{number(m.start())}: says the engine exports {', '.join(said) or 'no name'}; "
                                f"it exports {', '.join(sorted(exported)) or 'no name'}")
    if exported:
        problems += [f"{f}:{number}: says nothing of the engine is exported; it exports {', '.join(sorted(exported))}"
                     for f, number in said_nothing]

    for p in problems:
        print(p)
    print(f"{len(sources)} source files' comments, {len(markdown)} Markdown files, a file map of {entries} files, "
          f"{len(exported)} name(s) exported by the engine: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
