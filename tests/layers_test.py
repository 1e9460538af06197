#!/usr/bin/env python3
"""tests/layers_test.py — the textbook names nothing of the engine, the platform or the API.

modules/textbook.cppm imports only mha.core, and the compiler keeps its interface to that.
But the textbook's bodies (modules/textbook/*.cpp) are `module mha;` units, which see the
whole module: only this test keeps them, and the interface files, to the textbook's layer.
It collects every name that modules/engine/, modules/platform/ and modules/api/ declare at
namespace scope, and fails when a textbook file (comments and strings left out) uses one
that the textbook does not declare itself, or when textbook.cppm imports more than mha.core.

  layers_test.py SOURCE_DIR            the check
  layers_test.py SOURCE_DIR --plant    the same, with an engine name planted in a textbook
                                       file: must report it (ctest checks the report)
"""
import re
import sys
from pathlib import Path

KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "operator", "static_cast", "requires", "decltype"}


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


def declarations(path):
    """(namespace, name) of what a file declares at namespace scope: lines at column 0 (the
    tree is clang-formatted), under the namespace opened last at column 0."""
    found, namespace = set(), "mha"
    for line in code_only(path.read_text()).splitlines():
        opened = re.match(r"(?:export\s+)?namespace\s+([\w:]+)\s*\{", line)
        if opened:
            namespace = opened.group(1)
            continue
        if not line or line[0] in " }#" or line.startswith(("module", "import")):
            continue
        if line.startswith("template"):
            line = re.sub(r"^template\s*<.*?>\s*", "", line)
            if not line:
                continue
        m = re.match(r"(?:export\s+)?(?:struct|class|enum class|enum|using|concept)\s+(\w+)", line)
        if not m:
            m = re.search(r"(\w+)\s*\(", line)
            if not m or m.group(1) in KEYWORDS:
                continue
        found.add((namespace, m.group(1)))
    return found


def uses(line):
    """The names a line of code refers to as a function, template, type or qualified name:
    (qualifier, name), the qualifier "" when there is none. Members (after . or ->) and
    variables are not names of another layer."""
    for m in re.finditer(r"(?:(\w+)::)?\b([A-Za-z_]\w*)\b", line):
        before = line[: m.start()].rstrip()
        if before.endswith((".", "->")) or (not m.group(1) and before.endswith("::")):
            continue
        qualifier, name = m.group(1) or "", m.group(2)
        after = line[m.end():].lstrip()
        if qualifier or after.startswith(("(", "<")) or name[0].isupper():
            yield qualifier, name


def main():
    root = Path(sys.argv[1])
    plant = "--plant" in sys.argv[2:]
    modules = root / "modules"
    textbook_files = sorted((modules / "textbook").glob("*.hpp")) + sorted((modules / "textbook").glob("*.cpp"))
    own = set().union(*(declarations(f) for f in textbook_files))
    own_names = {name for _, name in own}
    own_detail = {name for namespace, name in own if namespace.endswith("detail")}
    foreign = {}
    for layer in ("engine", "platform", "api"):
        for f in sorted((modules / layer).glob("*.[hc]pp")):
            for _, name in declarations(f):
                foreign.setdefault(name, f"modules/{layer}/{f.name}")
    problems = []
    imports = re.findall(r"^\s*(?:export\s+)?import\s+([^;]+);", (modules / "textbook.cppm").read_text(), re.M)
    if imports != ["mha.core"]:
        problems.append(f"modules/textbook.cppm imports {imports}, expected only mha.core")
    for f in textbook_files:
        text = f.read_text()
        if plant and f.name == "attention.cpp":
            # What the test must catch: a textbook step calling the platform's BLAS entry point.
            text += "\nvoid planted(const float* a, float* c) { detail::gemm<float>(false, false, 1, 1, 1, 1.f, a, 1, a, 1, 0.f, c, 1); }\n"
        for number, line in enumerate(code_only(text).splitlines(), 1):
            for qualifier, name in uses(line):
                if name not in foreign:
                    continue
                mine = name in own_detail if qualifier == "detail" else name in own_names
                if qualifier in ("", "detail", "mha", "textbook") and not mine:
                    problems.append(f"modules/textbook/{f.name}:{number}: names {name} of {foreign[name]}")
    for p in problems:
        print(p)
    print(f"{len(textbook_files)} textbook files against {len(foreign)} names of the engine, platform and API: "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
