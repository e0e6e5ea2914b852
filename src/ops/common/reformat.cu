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
// The six conversions between the float types (source, then destination).
#define KILN_FLOAT_PAIRS(M)                                                                        \
    M(f32, float, f16, __half)                                                                     \
    M(f32, float, bf16, __nv_bfloat16)                                                             \
    M(f16, __half, f32, float)                                                                     \
    M(bf16, __nv_bfloat16, f32, float)                                                             \
    M(f16, __half, bf16, __nv_bfloat16)                                                            \
    M(bf16, __nv_bfloat16, f16, __half)
KILN_FLOAT_PAIRS(KILN_CAST)

// LINEAR <-> NHWC of a 4-D tensor [N, C, H, W] (hw = H * W): one thread
// per output element, so the writes are coalesced; the reads walk C planes
// (to NHWC) or C-strided rows (to LINEAR).  Only the network's edges and
// layers without an NHWC kernel need one, so a plain gather is enough.
// kiln_relayout_<S>_<D> converts between float types on the way;
// kiln_relayout_b<bits> moves the bits of one type as they are (any type:
// integers too, e.g. MaxPool's NHWC Indices; no float round trip).
namespace kiln_reformat {
__device__ inline uint64_t relayout_src(uint64_t i, uint64_t c, uint64_t hw, int to_nhwc) {
    if (to_nhwc) { // i = (n * hw + p) * c + ch
        uint64_t ch = i % c, np = i / c, p = np % hw, n = np / hw;
        return (n * c + ch) * hw + p;
    }
    uint64_t p = i % hw, nc = i / hw, ch = nc % c, n = nc / c; // i = (n * c + ch) * hw + p
    return (n * hw + p) * c + ch;
}

template <typename S, typename D>
__device__ void relayout(const void *x, void *y, uint64_t c, uint64_t hw, uint64_t total, int to_nhwc) {
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride)
        store((D *)y, i, load((const S *)x, relayout_src(i, c, hw, to_nhwc)));
}

template <typename T>
__device__ void relayout_bits(const void *x, void *y, uint64_t c, uint64_t hw, uint64_t total, int to_nhwc) {
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride)
        ((T *)y)[i] = ((const T *)x)[relayout_src(i, c, hw, to_nhwc)];
}
} // namespace kiln_reformat

#define KILN_RELAYOUT_ARGS const void *x, void *y, uint64_t c, uint64_t hw, uint64_t total, int to_nhwc
#define KILN_RELAYOUT(sn, S, dn, D)                                                                 \
    extern "C" __global__ void kiln_relayout_##sn##_##dn(KILN_RELAYOUT_ARGS) {                      \
        kiln_reformat::relayout<S, D>(x, y, c, hw, total, to_nhwc);                                 \
    }
KILN_FLOAT_PAIRS(KILN_RELAYOUT)
#define KILN_RELAYOUT_BITS(bits)                                                                    \
    extern "C" __global__ void kiln_relayout_b##bits(KILN_RELAYOUT_ARGS) {                          \
        kiln_reformat::relayout_bits<uint##bits##_t>(x, y, c, hw, total, to_nhwc);                  \
    }
KILN_RELAYOUT_BITS(8)
KILN_RELAYOUT_BITS(16)
KILN_RELAYOUT_BITS(32)
KILN_RELAYOUT_BITS(64)
