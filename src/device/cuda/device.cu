// device.cu — kernels of the device layer itself (not of an op family):
// filling a buffer with a repeated pattern (debug-mode poisoning of outputs
// in device memory, where a byte memset cannot write a NaN of 2, 4 or 8
// bytes).
#include <stdint.h>

extern "C" __global__ void kiln_fill_pattern(uint8_t *dst, uint64_t n, uint64_t pattern, uint32_t elem) {
    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) dst[i] = (uint8_t)(pattern >> (8 * (i % elem)));
}
