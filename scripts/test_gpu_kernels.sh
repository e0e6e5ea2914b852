#!/bin/sh
# test_gpu_kernels.sh — check kiln's built-in CUDA kernels on this machine's GPU.
#
# usage: scripts/test_gpu_kernels.sh [KERNEL_IMAGE]
#
# KERNEL_IMAGE: a cubin/fatbin holding every src/ops/*/*.cu kernel (e.g. built
# on a machine without a GPU with `scripts/test_gpu_kernels.sh --build FILE`).
# Without it the kernels are compiled here with nvcc for the local GPU.  Then
# tests/gpu_kernels.py launches each kernel through the driver API (as
# libkiln does) and compares it with PyTorch on fresh random inputs; needs
# python3 with torch and cuda-python (cuda.bindings).  Exit status 0 when
# every check passed.
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
img=${1:-}
if [ -z "$img" ]; then
    img=$(mktemp --suffix=.cubin)
    build_image "$img" native
fi
exec python3 "$root/tests/gpu_kernels.py" "$img" "$root/src/device/cuda/cuda_kernel_args.h"
