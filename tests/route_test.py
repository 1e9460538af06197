#!/usr/bin/env python3
"""tests/route_test.py — the default route that MultiheadAttention::forward()'s comment writes down is the code's.

The comment above MultiheadAttention::forward() in modules/api/multihead_attention.hpp
numbers the calls from forward() to the averaged weights, one line each:
    //   route 2  attention_steps          api/attention_paths.cpp      ...
(the number, the function, its file under modules/). This test fails when
  - a function is not defined in the file named (a definition: a body, not a declaration);
  - the body of a route's function does not call the next one;
  - the numbers do not run 0, 1, 2, ...;
  - the comment's "N calls in M files" is not what the lines count, or the route is longer
    than five calls in four files.

  route_test.py SOURCE_DIR            the check
  route_test.py SOURCE_DIR --plant    the same with the route's fourth call said to be in
                                      engine/fast_attention.hpp: must report it (ctest checks)
"""
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from layers_test import code_only  # noqa: E402  (the same reading of code, comments left out)

ROUTE = re.compile(r"^\s*//\s+route (\d+)\s+(\w+)\s+((?:api|engine|textbook|platform)/[\w/]+\.(?:hpp|cpp))\b", re.M)
COUNT = re.compile(r"(\w+) calls in (\w+) files")
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}
MOST_CALLS, MOST_FILES = 5, 4


def closing(code, i, opening, close):
    """The index just after the bracket that closes the one at code[i]."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == opening:
            depth += 1
        elif code[j] == close:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(code)


def body(code, name):
    """The body of the first definition of `name` in code: `type name(...) ... { body }`."""
    for m in re.finditer(r"^[ \t]*(?:[\w:<>,*&]+\s+)+" + name + r"\s*\(", code, re.M):
        after = closing(code, m.end() - 1, "(", ")")
        brace, semicolon = code.find("{", after), code.find(";", after)
        if brace >= 0 and (semicolon < 0 or brace < semicolon):
            return code[brace : closing(code, brace, "{", "}")]
    return None


def check(root, route_text):
    errors = []
    route = [(int(n), name, path) for n, name, path in ROUTE.findall(route_text)]
    if not route:
        return ["modules/api/multihead_attention.hpp: no `// route N  function  file` lines above forward()"]
    if [n for n, _, _ in route] != list(range(len(route))):
        errors.append(f"the route's numbers are {[n for n, _, _ in route]}, expected 0 to {len(route) - 1}")
    calls, files = len(route) - 1, len({path for _, _, path in route})
    said = COUNT.search(route_text)
    if not said or NUMBERS.get(said.group(1)) != calls or NUMBERS.get(said.group(2)) != files:
        errors.append(f"the comment should say {calls} calls in {files} files, it says {said and said.group(0)!r}")
    if calls > MOST_CALLS or files > MOST_FILES:
        errors.append(f"the route is {calls} calls in {files} files, more than {MOST_CALLS} in {MOST_FILES}")
    bodies = []
    for n, name, path in route:
        file = root / "modules" / path
        code = code_only(file.read_text()) if file.is_file() else ""
        found = body(code, name)
        if found is None:
            errors.append(f"route {n}: {name} is not defined in modules/{path}")
        bodies.append(found)
    for (n, name, _), (_, next_name, _), found in zip(route, route[1:], bodies):
        if found is not None and not re.search(r"(?<!\w)" + next_name + r"\s*\(", found):
            errors.append(f"route {n}: {name} does not call {next_name}")
    return errors


def main():
    root = Path(sys.argv[1])
    plant = "--plant" in sys.argv[2:]
    text = (root / "modules" / "api" / "multihead_attention.hpp").read_text()
    start = text.find("// The default route")
    route_text = text[start : text.find("Output<T> forward(", start)] if start >= 0 else ""
    if plant:
        route_text = re.sub(r"(route 4\s+attend\s+)engine/engine\.hpp", r"\1engine/fast_attention.hpp", route_text)
    errors = check(root, route_text)
    for e in errors:
        print(e)
    if not errors:
        print(f"the route: {len(ROUTE.findall(route_text))} functions, each defined where it says, each calling the next")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
