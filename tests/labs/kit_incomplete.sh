#!/bin/sh
# tests/labs/kit_incomplete.sh: mha-grade with a lab kit that lacks its runner_npy line.
#
# The kit (<build>/labs/lab-kit.txt) is copied into a build folder of its own without the
# runner_npy line, which every submission's build links. The gradebook must stop before
# grading anyone and say which line is missing, rather than fail on an empty path.
#   tests/labs/kit_incomplete.sh MHA_GRADE KIT SUBMISSIONS
set -u
grader=$1 kit=$2 submissions=$3
out=$(mktemp -d)
mkdir -p "$out/build/labs"
grep -v '^runner_npy ' "$kit" > "$out/build/labs/lab-kit.txt"
"$grader" gradebook "$submissions" --no-sandbox --build-dir "$out/build" --out "$out/book" 2>&1
echo "exit status $?"
[ ! -e "$out/book" ] && echo "nothing graded"
rm -rf "$out"
