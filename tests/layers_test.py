#!/usr/bin/env python3
"""tests/layers_test.py — the textbook's units import mha.core alone and include only its own files.

The textbook is a module of its own, mha.textbook (modules/textbook.cppm), and its bodies
(modules/textbook/*.cpp) are `module mha.textbook;` units: they see the textbook and what it
imports, mha.core, and no name of the engine, the platform or the API. The compiler keeps
that, not this test: the ctest "layers: the compiler refuses a textbook unit that names the
platform, the engine or the API" builds a planted unit that names one of each,
tests/layers/textbook_reaches_out.cpp, and passes only on the compiler's error for each.

What the compiler does not refuse is a door opened on purpose. A textbook body may import
more: `import mha;` in a `module mha.textbook;` unit compiles, and gives it all that mha
exports, the module and the functional form among it (the engine's internals stay out of
reach, as they are not exported). A textbook file may #include another layer's files into
the textbook's purview. This test keeps those doors shut: it reads the import and #include
lines (comments left out) of
  modules/textbook.cppm     imports mha.core alone; includes third_party_xtensor.hpp and textbook/*.hpp;
  modules/textbook/*.cpp    `module mha.textbook;`, imports mha.core alone (as the interface
                            does: clang 16 needs it said); includes third_party_xtensor.hpp alone;
  modules/textbook/*.hpp    no module line, no import, no #include (textbook.cppm includes
                            them, in its purview, each after those it uses).

  layers_test.py SOURCE_DIR            the check
  layers_test.py SOURCE_DIR --plant    the same, with `import mha;` planted in a textbook
                                       body: must report it (ctest checks the report)
"""
import re
import sys
from pathlib import Path

GMF_HEADER = "third_party_xtensor.hpp"  # the textbook units' global module fragment: tensors, no JSON


def code_only(text):
    """The text without comments and string or character literals, line structure kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            out.append("\n" * text.count("\n", i, j))
            i = n if j < 0 else j + 2
        elif text[i] in "\"'":
            quote, j = text[i], i + 1
            while j < n and text[j] != quote:
                j += 2 if text[j] == "\\" else 1
            out.append(quote + quote)
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def check_modules(root, problems_of, premises, plants, plant, left_out=()):
    """A check of each file of modules/, as the tree tests run one: `premises` (the check's own
    problems), then problems_of(where, text) of each file but those starting with `left_out`,
    a file of `plants` read with its fault planted under --plant. Prints the problems and a
    count; returns the exit status."""
    files = sorted(f for f in (root / "modules").rglob("*") if f.suffix in (".hpp", ".cpp", ".cppm"))
    files = [f for f in files if not f.relative_to(root).as_posix().startswith(tuple(left_out))]
    problems = list(premises)
    for f in files:
        where = f.relative_to(root).as_posix()
        text = plants[where](f.read_text()) if plant and where in plants else f.read_text()
        problems += problems_of(where, text)
    print("\n".join(problems + [f"{len(files)} files of modules/: {len(problems)} problem(s)"]))
    return 1 if problems else 0


def doors(text):
    """(line number, kind, what) of each module, import and #include line of a unit. The
    #include's file is read from the text itself (code_only empties string literals)."""
    raw = text.splitlines()
    for number, line in enumerate(code_only(text).splitlines(), 1):
        module = re.match(r"\s*(?:export\s+)?module\s+([\w.:]+)\s*;", line)
        imported = re.match(r"\s*(?:export\s+)?import\s+([^;]+);", line)
        included = re.match(r'\s*#\s*include\s*[<"]([^>"]+)[>"]', raw[number - 1])
        if module:
            yield number, "module", module.group(1)
        elif imported:
            yield number, "import", imported.group(1).strip()
        elif included and line.lstrip().startswith("#"):
            yield number, "include", included.group(1)


def main():
    root = Path(sys.argv[1])
    plant = "--plant" in sys.argv[2:]
    modules = root / "modules"
    units = [modules / "textbook.cppm"] + sorted((modules / "textbook").glob("*.cpp"))
    headers = sorted((modules / "textbook").glob("*.hpp"))
    own = {f"textbook/{h.name}" for h in headers}
    problems = []
    for f in units + headers:
        where = f.relative_to(root).as_posix()
        text = f.read_text()
        if plant and f.name == "attention.cpp":
            # What the test must catch: a textbook body that imports the whole library.
            text = text.replace("module mha.textbook;\n", "module mha.textbook;\n\nimport mha;\n", 1)
        found = list(doors(text))
        modules_declared = [what for _, kind, what in found if kind == "module"]
        if f.suffix == ".cppm":
            expected_module, allowed_imports, allowed_includes = "mha.textbook", {"mha.core"}, own | {GMF_HEADER}
        elif f.suffix == ".cpp":
            # mha.core once more, as the interface does: clang 16 needs it said in each body
            expected_module, allowed_imports, allowed_includes = "mha.textbook", {"mha.core"}, {GMF_HEADER}
        else:
            expected_module, allowed_imports, allowed_includes = None, set(), set()
        if expected_module and modules_declared != [expected_module]:
            problems.append(f"{where}: declares module {modules_declared}, expected {expected_module}")
        if not expected_module and modules_declared:
            problems.append(f"{where}: has a module line ({modules_declared[0]}); "
                            "textbook.cppm includes it in its purview")
        imports = [what for _, kind, what in found if kind == "import"]
        for number, kind, what in found:
            if kind == "import" and what not in allowed_imports:
                problems.append(f"{where}:{number}: imports {what}; the textbook imports mha.core alone "
                                f"(in modules/textbook.cppm)")
            if kind == "include" and what not in allowed_includes:
                problems.append(f"{where}:{number}: includes {what}, not a file of the textbook")
        if f.suffix == ".cppm" and imports != ["mha.core"]:
            problems.append(f"{where}: imports {imports}, expected only mha.core")
    for p in problems:
        print(p)
    print(f"{len(units)} textbook units and {len(headers)} files they include, their imports and "
          f"includes: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
