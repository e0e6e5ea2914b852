#!/usr/bin/env bash
# python_test.sh — the Python package's tests (scripts/test.sh runs it):
# a virtualenv in build/venv, `pip install .` (the kiln._kiln extension,
# built by scikit-build-core over the CMake build), then pytest on
# tests/python.  Installs python3-venv / python3-dev with apt-get when
# missing.  pytest collecting no test (exit 5) is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}

apt_install() {
    local SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "$@"
}
if ! "$py" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    apt_install python3-venv
fi
if ! "$py" -c 'import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
    apt_install python3-dev
fi

venv=build/venv
if [ ! -x "$venv/bin/python" ]; then
    "$py" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
"$venv/bin/python" -m pip install -q numpy pytest "scikit-build-core>=0.8" ninja
# No build isolation: the venv already holds the build backend (and a
# re-run reuses build/python-*/ incrementally).
# $KILN_PREBUILT_FATBIN (scripts/test.sh sets it to the Release build's):
# the extension's build embeds those CUDA kernels instead of running nvcc.
cfg=()
if [ -n "${KILN_PREBUILT_FATBIN:-}" ]; then cfg=(-C "cmake.define.KILN_CUDA_FATBIN=$KILN_PREBUILT_FATBIN"); fi
"$venv/bin/python" -m pip install -q --no-build-isolation "${cfg[@]}" .
set +e
KILN_CLI=${KILN_CLI:-$PWD/build/kiln} "$venv/bin/python" -m pytest -q tests/python
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "python_test: pytest collected no tests" >&2
    exit 1
fi
exit "$rc"
