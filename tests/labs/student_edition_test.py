#!/usr/bin/env python3
"""tests/labs/student_edition_test.py — the student edition builds as a student builds it, and holds no answer.

scripts/student-edition makes the students' copy of the project. This makes one from the
project's HEAD and looks for the answers in it:
  - history:   its repository has one commit (git log --all);
  - left out:  no file of it is under tests/labs/ or docs/teachers/ (the reference
               solutions, the test classes, the syllabus and the answer key);
  - solutions: no object of its store (its commit's files, and anything else stored) holds
               a line of code of tests/labs/solutions.cpp that no other file of the
               project has;
  - links:     no Markdown file of it links into tests/labs/ or a teachers/ folder;
  - mentions:  no Markdown file of it names tests/labs/, docs/teachers/, solutions.cpp or
               the answer key's files, and no passage marked "teachers only" is left.
Then it builds the edition with the README's commands, `cmake --preset default` and
`cmake --build build/default --target labs mha-grade` (the library, every lab and the
grader: what a student builds), runs the edition's own tests of the labs' starters, and
grades each starter with build/default/labs/labNN, which must end "verdict: NOT
IMPLEMENTED YET".

  student_edition_test.py SOURCE_DIR OUT              the edition (OUT/edition), its answers
                                                      looked for, then built and graded
  student_edition_test.py SOURCE_DIR OUT --no-build   its answers looked for, no more (seconds)
  student_edition_test.py SOURCE_DIR OUT --plant      the same with the answers planted in it
                                                      afterwards (a second commit with the
                                                      solutions, docs/teachers/ and a link to
                                                      it): must report all five kinds (ctest
                                                      checks)
"""

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

SOLUTIONS = "tests/labs/solutions.cpp"
LEFT_OUT = ("tests/labs/", "docs/teachers/")
LINK = re.compile(r"\]\(([^)\s]+)")
MENTION = re.compile(r"docs/teachers|tests/labs|solutions\.(?:cpp|md)|self_checks\.py|teachers only -->")
STARTER_TESTS = "starter grades as not implemented yet"


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=True).stdout


def solution_lines(source):
    """The lines of code of the reference solutions that no other file of the project has:
    each of at least 30 characters, stripped, not a comment or a preprocessor line."""
    lines = {line.strip() for line in (source / SOLUTIONS).read_text().splitlines()}
    lines = {line for line in lines if len(line) >= 30 and not line.startswith(("//", "#"))}
    for name in git(source, "ls-files").decode().splitlines():
        path = source / name
        if name.startswith("tests/labs/") or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" not in data:  # text
            lines -= {line.strip() for line in data.decode(errors="replace").splitlines()}
    return lines


def stored_blobs(repo):
    """Every blob of the repository's object store, loose or packed, as bytes."""
    listing = git(repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)")
    names = [line.split()[0] for line in listing.decode().splitlines() if line.endswith(" blob")]
    data = subprocess.run(["git", "-C", str(repo), "cat-file", "--batch"], input="\n".join(names).encode() + b"\n",
                          capture_output=True, check=True).stdout
    i = 0
    while i < len(data):  # "<name> blob <size>\n<content>\n", one after another
        header_end = data.index(b"\n", i)
        size = int(data[i:header_end].split()[2])
        yield data[header_end + 1:header_end + 1 + size]
        i = header_end + 1 + size + 1


def answers_found(edition, source):
    """{kind: [what was found]} for each of the five kinds of the docstring."""
    found = {"history": [], "left out": [], "solutions": [], "links": [], "mentions": []}
    commits = git(edition, "log", "--all", "--format=%h %s").decode().splitlines()
    if len(commits) != 1:
        found["history"] = [f"{len(commits)} commits: {commits}"]
    files = git(edition, "ls-tree", "-r", "--name-only", "HEAD").decode().splitlines()
    found["left out"] = [f for f in files if f.startswith(LEFT_OUT)]
    wanted = solution_lines(source)
    if len(wanted) < 50:
        found["solutions"] = [f"only {len(wanted)} lines of {SOLUTIONS} to look for: this check would see nothing"]
    stored = set()
    for blob in stored_blobs(edition):
        stored |= {line.strip() for line in blob.decode(errors="replace").splitlines()}
    found["solutions"] += sorted(stored & wanted)
    for name in (f for f in files if f.endswith(".md")):
        for number, line in enumerate(git(edition, "show", f"HEAD:{name}").decode().splitlines(), 1):
            for target in LINK.findall(line):
                parts = target.partition("#")[0].split("/")
                if "teachers" in parts or "tests/labs" in target:
                    found["links"].append(f"{name}:{number}: {target}")
            for m in MENTION.finditer(line):
                found["mentions"].append(f"{name}:{number}: {m.group(0)}")
    print(f"looked for {len(wanted)} lines of code that only {SOLUTIONS} has, in every object of the edition")
    return found


def plant(edition, source):
    """The answers, put back as a careless copy would: the solutions as a lab's file, the
    teachers' folder, a link to the key in the README, all in a second commit."""
    shutil.copy(source / SOLUTIONS, edition / "labs" / "01-split-pack" / "solutions.cpp")
    (edition / "docs" / "teachers").mkdir()
    (edition / "docs" / "teachers" / "README.md").write_text("# For teachers\n")
    with open(edition / "README.md", "a") as readme:
        readme.write("\nThe [answer key](docs/teachers/solutions.md).\n")
    git(edition, "add", "-A")
    git(edition, "-c", "user.name=planted", "-c", "user.email=planted@mha.invalid", "commit", "-q", "-m", "planted")


def run(step, command, cwd, failure_shown=True):
    """Runs one step, prints its time; its output on a failure."""
    start = time.monotonic()
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    print(f"{step}: {' '.join(command)}: {time.monotonic() - start:.0f} s, exit status {result.returncode}",
          flush=True)
    if result.returncode != 0 and failure_shown:
        print((result.stdout + result.stderr)[-4000:])
    return result


def labs_of(edition):
    """The lab numbers of the edition's labs/CMakeLists.txt (MHA_LABS: "NN|folder|file")."""
    return re.findall(r'"(\d\d)\|[^|"]+\|[^"]+"', (edition / "labs" / "CMakeLists.txt").read_text())


def build_and_grade(edition):
    """The README's commands in the edition, its tests of the starters, and each starter
    graded: [problems]."""
    if run("configure", ["cmake", "--preset", "default"], edition).returncode != 0:
        return ["cmake --preset default failed"]
    if run("build", ["cmake", "--build", "build/default", "--target", "labs", "mha-grade"], edition).returncode != 0:
        return ["cmake --build build/default --target labs mha-grade failed"]
    problems = []
    labs = labs_of(edition)
    tests = run("the starters' tests", ["ctest", "--test-dir", "build/default", "-R", STARTER_TESTS,
                                         "--no-tests=error"], edition)
    passed = re.search(r"100% tests passed, 0 tests failed out of (\d+)", tests.stdout)
    if tests.returncode != 0 or not passed or int(passed.group(1)) != len(labs):
        problems.append(f"the edition's tests \"{STARTER_TESTS}\" did not all pass, one per lab ({len(labs)})")
    for number in labs:  # a starter's grade exits 1, as a failing one does: the verdict decides
        graded = run(f"lab {number}", [f"build/default/labs/lab{number}"], edition, failure_shown=False)
        verdict = re.findall(r"(?m)^verdict: .*$", graded.stdout)
        print(f"  {verdict[-1] if verdict else 'no verdict'}")
        if not verdict or verdict[-1].split(" (")[0] != "verdict: NOT IMPLEMENTED YET":  # "... (0.4 s)"
            problems.append(f"build/default/labs/lab{number}: not \"verdict: NOT IMPLEMENTED YET\"")
    catalogue = run("mha-grade", ["build/default/labs/mha-grade", "catalogue"], edition)
    if catalogue.returncode != 0 or "qk_swapped" not in catalogue.stdout:
        problems.append("build/default/labs/mha-grade catalogue did not print the catalogue")
    return problems


def main():
    source, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    planted, build = "--plant" in sys.argv[3:], not {"--plant", "--no-build"} & set(sys.argv[3:])
    edition = out / "edition"
    shutil.rmtree(edition, ignore_errors=True)
    if run("the edition", [str(source / "scripts" / "student-edition"), str(edition)], source).returncode != 0:
        return 1
    if planted:
        plant(edition, source)

    # 1) no answer in it
    found = answers_found(edition, source)
    for kind, what in found.items():
        print(f"  {kind + ':':<11} {'OK' if not what else f'{len(what)} found, the first: {what[0]}'}")
    kinds = [kind for kind, what in found.items() if what]
    if kinds:
        print(f"answers found: {', '.join(kinds)}")
        return 1
    if planted:
        print("nothing found where the answers were planted")
        return 1
    if not build:
        print("OK: the student edition holds no answer")
        return 0

    # 2) it builds as a student builds it, and every starter is "not implemented yet"
    problems = build_and_grade(edition)
    for problem in problems:
        print(f"FAIL: {problem}")
    if problems:
        return 1
    print("OK: the student edition builds, each starter grades not implemented yet, and it holds no answer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
