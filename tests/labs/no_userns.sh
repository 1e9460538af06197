#!/bin/sh
# tests/labs/no_userns.sh: mha-grade on a machine where the sandbox cannot start.
#
# bwrap --disable-userns runs mha-grade where no user namespace can be made, as on a machine
# with user.max_user_namespaces = 0; as root it runs as nobody first, as a teacher without
# root would (root inside its own namespace could not leave for a job's user either). The
# gradebook must stop before grading anyone, say what is missing and name --no-sandbox.
#   tests/labs/no_userns.sh MHA_GRADE SUBMISSIONS
set -u
grader=$1 submissions=$2
out=$(mktemp -d)
chmod 0777 "$out"
if [ "$(id -u)" = 0 ]; then
  set -- setpriv --reuid=65534 --regid=65534 --clear-groups --
else
  set --
fi
"$@" bwrap --dev-bind / / --unshare-user --disable-userns -- "$grader" gradebook "$submissions" --out "$out/book"
status=$?
echo "exit status $status"
[ ! -e "$out/book" ] && echo "nothing graded"
rm -rf "$out"
