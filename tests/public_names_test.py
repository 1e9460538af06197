#!/usr/bin/env python3
"""tests/public_names_test.py — `import mha;` exports the names that docs/public-names.md lists.

README.md names those of namespace mha itself, what a user calls; the test checks that too.

The names that `import mha;` gives are those declared inside the `export namespace` blocks
of the module units that modules/mha.cppm re-exports: mha.error (modules/error.cppm), the
textbook, a module of its own (mha.textbook, the files of modules/textbook/), and the files
that mha's three partitions include (modules/platform/, modules/engine/, modules/api/).
mha.core, with the helper check(), is imported by the layers and not re-exported; the test
fails when mha.cppm re-exports anything else. What mha.textbook exports for the engine and
the API (a few helpers of mha::detail) is given by `import mha;` too, so it is listed. The tree is
clang-formatted, so a declaration inside a block starts at column 0. This test collects
them, qualified by their namespace, and compares them with the list in docs/public-names.md (every list item that
starts with a `mha::...` name): a name exported but not listed fails, and so does a name
listed but no longer exported.

  public_names_test.py SOURCE_DIR            the check
  public_names_test.py SOURCE_DIR --plant    the same with one undocumented exported name
                                             planted: must report it (ctest checks the report)
"""
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layers_test import code_only  # noqa: E402  (the same reading of code, comments left out)

KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "operator", "static_cast", "requires", "decltype"}


def exported_names(path, text=None):
    names, namespace = set(), None  # namespace: the export block we are in, or None
    for line in code_only(text if text is not None else path.read_text()).splitlines():
        opened = re.match(r"(export\s+)?namespace\s+([\w:]+)", line)
        if opened:
            namespace = opened.group(2) if opened.group(1) else None
            continue
        if line.startswith("}  // namespace") or line.startswith("}"):
            if line.startswith("}  // namespace"):
                namespace = None
            continue
        if namespace is None or not line or line[0] in " #" or line.startswith("extern template"):
            continue
        if line.startswith("template"):
            line = re.sub(r"^template\s*<.*?>\s*", "", line)
            if not line:
                continue
        m = re.match(r"(?:struct|class|enum class|enum|using|concept)\s+(\w+)", line)
        if not m:
            m = re.search(r"(\w+)\s*\(", line)
            if not m or m.group(1) in KEYWORDS:
                continue
        names.add(f"{namespace}::{m.group(1)}")
    return names


def main():
    root = Path(sys.argv[1])
    plant = "--plant" in sys.argv[2:]
    modules = root / "modules"
    layers = ("platform", "textbook", "engine", "api")
    files = [modules / "error.cppm"] + [f for layer in layers for f in sorted((modules / layer).glob("*.hpp"))]
    problems = []
    # What mha.cppm re-exports: these files' names and no other module's (not mha.core's check).
    # The textbook is the module mha.textbook; the other layers are partitions of mha.
    reexported = re.findall(r"^export\s+import\s+([^;]+);", code_only((modules / "mha.cppm").read_text()), re.M)
    expected = ["mha.error"] + ["mha.textbook" if layer == "textbook" else f":{layer}" for layer in layers]
    if sorted(reexported) != sorted(expected):
        problems.append(f"modules/mha.cppm re-exports {reexported}, expected {expected}")
    exported = set()
    for f in files:
        exported |= exported_names(f)
    if plant:  # a helper exported by mistake
        exported |= exported_names(None, "export namespace mha {\nint planted_helper(int x) { return x; }\n}  // namespace mha\n")
    listed = set(re.findall(r"^\s*[-*] `(mha::[\w:]+)`", (root / "docs" / "public-names.md").read_text(), re.M))
    problems += [f"exported but not in docs/public-names.md: {n}" for n in sorted(exported - listed)]
    problems += [f"in docs/public-names.md but not exported: {n}" for n in sorted(listed - exported)]
    # The README names the user's part, namespace mha itself, in its section on `import mha;`.
    readme = (root / "README.md").read_text()
    section = readme.split("## What `import mha;` gives", 1)[-1].split("\n## ", 1)[0]
    users = section.split("In namespace `mha`, what a user calls:", 1)[-1].split(".\n", 1)[0]
    in_readme = {f"mha::{n}" for n in re.findall(r"`(\w+)`", users)}
    top = {n for n in exported if n.count("::") == 1}
    problems += [f"exported in namespace mha but not in README.md: {n}" for n in sorted(top - in_readme)]
    problems += [f"in README.md but not exported in namespace mha: {n}" for n in sorted(in_readme - top)]
    for p in problems:
        print(p)
    print(f"{len(exported)} names exported by `import mha;`, {len(listed)} listed: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
