// device.cu — kernels of the device layer itself (not of an op family):
// filling a buffer with a repeated pattern (debug-mode poisoning of outputs
// in device memory, where a byte memset cannot write a NaN of 2, 4 or 8
// bytes), and the builder's timing spin (kiln_spin).
#include <stdint.h>

extern "C" __global__ void kiln_fill_pattern(uint8_t *dst, uint64_t n, uint64_t pattern, uint32_t elem) {
    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) dst[i] = (uint8_t)(pattern >> (8 * (i % elem)));
}

// Busy-waits ns nanoseconds (one thread).  The builder enqueues it before a
// timed sample so the GPU is still busy while the host enqueues the
// sample's calls: the events then measure the calls' GPU time, not the
// host's enqueue time (cuDNN's calls cost more on the host than on the GPU,
// and an engine's run is a CUDA graph, where the host cost is gone).
extern "C" __global__ void kiln_spin(uint64_t ns) {
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
