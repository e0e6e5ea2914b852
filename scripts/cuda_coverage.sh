#!/usr/bin/env bash
# cuda_coverage.sh — rank the ops that keep ONNX node cases off the GPU,
# on a machine without one (see scripts/cuda_coverage.c: each case is built
# for CUDA on a stand-in device, placement as on a GPU, nothing runs).
#
#   scripts/cuda_coverage.sh [BUILD_DIR] [NODE_DIR]
#
# BUILD_DIR (default build) must hold libkiln.a; NODE_DIR defaults to
# $KILN_ONNX_TESTDATA/node (/usr/share/libonnx-testdata/data/node); any
# folder of ONNX test folders works (../shared/models: model placement).
# Cases are built as `kiln test-onnx` builds them (test data set 0's shapes).
# Prints one line per case, then the ranking and the counts.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
node=${2:-${KILN_ONNX_TESTDATA:-/usr/share/libonnx-testdata/data}/node}
exe="$build/cuda_coverage"
libs="-lprotobuf-c -lpthread -ldl -lm"
pkg-config --exists libsodium 2>/dev/null && libs="$libs $(pkg-config --libs libsodium)"
cc -std=gnu11 -O1 -Wall -Wextra -Werror -I"$here/../include" -I"$here/../src" -o "$exe" "$here/cuda_coverage.c" \
    -Wl,--whole-archive "$build/libkiln.a" -Wl,--no-whole-archive $libs
"$exe" "$here/../tests/onnx_skip.txt" "$node"
