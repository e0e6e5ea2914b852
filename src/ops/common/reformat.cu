// reformat.cu — kiln::reformat on the GPU: dtype conversion of a LINEAR
// tensor between F32, F16 and BF16 (what an FP16/BF16 build needs between
// two GPU layers).  Copies between memory spaces need no kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace kiln_reformat {
__device__ inline float load(const float *p, uint64_t i) { return p[i]; }
__device__ inline float load(const __half *p, uint64_t i) { return __half2float(p[i]); }
__device__ inline float load(const __nv_bfloat16 *p, uint64_t i) { return __bfloat162float(p[i]); }
__device__ inline void store(float *p, uint64_t i, float v) { p[i] = v; }
__device__ inline void store(__half *p, uint64_t i, float v) { p[i] = __float2half_rn(v); }
__device__ inline void store(__nv_bfloat16 *p, uint64_t i, float v) { p[i] = __float2bfloat16_rn(v); }

template <typename S, typename D>
__device__ void cast(const void *x, void *y, uint64_t n) {
    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) store((D *)y, i, load((const S *)x, i));
}
} // namespace kiln_reformat

#define KILN_CAST(sn, S, dn, D)                                                                    \
    extern "C" __global__ void kiln_cast_##sn##_##dn(const void *x, void *y, uint64_t n) {         \
        kiln_reformat::cast<S, D>(x, y, n);                                                        \
    }
KILN_CAST(f32, float, f16, __half)
KILN_CAST(f32, float, bf16, __nv_bfloat16)
KILN_CAST(f16, __half, f32, float)
KILN_CAST(bf16, __nv_bfloat16, f32, float)
KILN_CAST(f16, __half, bf16, __nv_bfloat16)
KILN_CAST(bf16, __nv_bfloat16, f16, __half)
