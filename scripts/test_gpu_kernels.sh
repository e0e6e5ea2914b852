#!/bin/sh
# test_gpu_kernels.sh — check kiln's built-in CUDA kernels on this machine's GPU.
#
# usage: scripts/test_gpu_kernels.sh [BUILD_DIR]
#        scripts/test_gpu_kernels.sh --build IMAGE [ARCH]   (only compile the kernels)
#
# 1. tests/gpu_kernels.py: every kernel of src/ops/*/*.cu launched through the
#    driver API (as libkiln does) against PyTorch on fresh random inputs; the
#    kernel image is BUILD_DIR/gen/kiln_kernels.fatbin, or compiled here with
#    nvcc for the local GPU when no build dir is given.  Needs python3 with
#    torch and cuda-python (cuda.bindings).
# 2. BUILD_DIR/test_cuda_ops (when built): every op's cuda_impl (launcher +
#    kernel) against the op's CPU impl, every CUDA tactic.
# Exit status 0 when everything passed.  scripts/test_gpu.sh calls this.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build_image() { # out arch
    tu=$(mktemp --suffix=.cu)
    for f in "$root"/src/ops/*/*.cu; do echo "#include \"$f\""; done > "$tu"
    "${NVCC:-nvcc}" -O3 -arch="$2" -cubin -I "$root/src" -o "$1" "$tu"
    rm -f "$tu"
}
if [ "${1:-}" = "--build" ]; then
    build_image "$2" "${3:-sm_90}"
    exit 0
fi
bdir=${1:-}
img=
if [ -n "$bdir" ] && [ -f "$bdir/gen/kiln_kernels.fatbin" ]; then
    img=$bdir/gen/kiln_kernels.fatbin
else
    img=$(mktemp --suffix=.cubin)
    build_image "$img" native
fi
status=0
python3 "$root/tests/gpu_kernels.py" "$img" "$root/src/device/cuda/cuda_kernel_args.h" || status=1
if [ -n "$bdir" ] && [ -x "$bdir/test_cuda_ops" ]; then
    "$bdir/test_cuda_ops" || status=1
fi
exit $status
