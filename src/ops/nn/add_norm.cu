/*
 * add_norm.cu — kiln::add_layernorm (add_norm.c):
 *
 *   add_layernorm_<T>(p, a, b, scale, bias, y): one block per row; each
 *   thread keeps its KA_PER elements of x = a + b in registers (rows up to
 *   KA_PER * blockDim), so a and b are read once and y written once; mean
 *   and variance (of x - mean: no cancellation) by two block reductions,
 *   all in float.
 */
#include "ops/common/cuda_common.cuh"

#define KA_PER 8

template <typename T>
__device__ __forceinline__ void kc_add_layernorm(const kiln_cu_addnorm &p, const T *a, const T *b, const T *scale,
                                                 const T *bias, T *y) {
    const int64_t off = (int64_t)blockIdx.x * p.inner;
    const int n = (int)p.inner, t = threadIdx.x, nt = blockDim.x;
    float x[KA_PER], s = 0.0f;
#pragma unroll
    for (int k = 0; k < KA_PER; k++) {
        int i = t + k * nt;
        x[k] = i < n ? kc_ldf(a[off + i]) + kc_ldf(b[off + i]) : 0.0f;
        s += x[k];
    }
    const float m = kc_block_reduce<kc_sum>(s) / (float)n;
    float q = 0.0f;
#pragma unroll
    for (int k = 0; k < KA_PER; k++) {
        int i = t + k * nt;
        float d = i < n ? x[k] - m : 0.0f;
        q += d * d;
    }
    const float r = rsqrtf(kc_block_reduce<kc_sum>(q) / (float)n + p.eps);
#pragma unroll
    for (int k = 0; k < KA_PER; k++) {
        int i = t + k * nt;
        if (i >= n) break;
        float v = (x[k] - m) * r * kc_ldf(scale[i % p.se]);
        if (bias) v += kc_ldf(bias[i % p.be]);
        y[off + i] = kc_stf<T>(v);
    }
}

#define KC_ADDNORM(S, T)                                                                      \
    extern "C" __global__ void __launch_bounds__(1024) add_layernorm_##S(kiln_cu_addnorm p, const T *a, const T *b, \
                                                                         const T *scale, const T *bias, T *y) { \
        kc_add_layernorm<T>(p, a, b, scale, bias, y);                                          \
    }
KC_FLOATS(KC_ADDNORM)
