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

// LINEAR <-> NHWC of a 4-D tensor [N, C, H, W] (hw = H * W), with or
// without a type change: one thread per output element, so the writes are
// coalesced; the reads walk C planes (to NHWC) or C-strided rows (to
// LINEAR).  Only the network's edges and layers without an NHWC kernel
// need one, so a plain gather is enough.
namespace kiln_reformat {
template <typename S, typename D>
__device__ void relayout(const void *x, void *y, uint64_t c, uint64_t hw, uint64_t total, int to_nhwc) {
    uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (; i < total; i += stride) {
        uint64_t src;
        if (to_nhwc) { // i = (n * hw + p) * c + ch
            uint64_t ch = i % c, np = i / c, p = np % hw, n = np / hw;
            src = (n * c + ch) * hw + p;
        } else { // i = (n * c + ch) * hw + p
            uint64_t p = i % hw, nc = i / hw, ch = nc % c, n = nc / c;
            src = (n * hw + p) * c + ch;
        }
        store((D *)y, i, load((const S *)x, src));
    }
}
} // namespace kiln_reformat

#define KILN_RELAYOUT(sn, S, dn, D)                                                                 \
    extern "C" __global__ void kiln_relayout_##sn##_##dn(const void *x, void *y, uint64_t c, uint64_t hw, \
                                                         uint64_t total, int to_nhwc) {              \
        kiln_reformat::relayout<S, D>(x, y, c, hw, total, to_nhwc);                                 \
    }
#define KILN_RELAYOUT_FROM(sn, S)                                                                   \
    KILN_RELAYOUT(sn, S, f32, float)                                                                \
    KILN_RELAYOUT(sn, S, f16, __half)                                                               \
    KILN_RELAYOUT(sn, S, bf16, __nv_bfloat16)
KILN_RELAYOUT_FROM(f32, float)
KILN_RELAYOUT_FROM(f16, __half)
KILN_RELAYOUT_FROM(bf16, __nv_bfloat16)
