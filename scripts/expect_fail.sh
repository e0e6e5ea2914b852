#!/usr/bin/env bash
# expect_fail.sh REGEX COMMAND [ARGS...]
# Succeeds when COMMAND exits non-zero AND its output (stdout+stderr)
# matches the extended regular expression REGEX.  Used by ctest entries that
# check error messages.
set -u
re=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$rc" -eq 0 ]; then
    echo "expect_fail: '$*' exited 0, expected a failure" >&2
    exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$re"; then
    echo "expect_fail: output does not match /$re/" >&2
    exit 1
fi
echo "expect_fail: failed as expected (exit $rc), message matches /$re/"
