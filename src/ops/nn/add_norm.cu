/*
 * add_norm.cu — kiln::add_layernorm (add_norm.c):
 *
 *   add_layernorm_<T>(p, a, b, scale, bias, y): one block per row; each
 *   thread keeps its KA_PER elements of x = a + b in registers (rows up to
 *   KA_PER * blockDim), so a and b are read once and y written once; mean
 *   and variance (of x - mean: no cancellation) by two block reductions,
 *   all in float.  Rows of a multiple of 8 elements with per-element
 *   Scale/Bias and aligned pointers take 8 consecutive elements per thread
 *   with 16-byte loads (kc_add_layernorm8); others are strided.
 */
#include "ops/common/cuda_common.cuh"

#define KA_PER 8

/* 8 consecutive elements at p (16-byte aligned) as floats: one or two
 * 16-byte loads. */
template <typename T> __device__ __forceinline__ void kc_ld8(const T *p, float *x) {
    uint4 r[sizeof(T) / 2];
#pragma unroll
    for (int q = 0; q < (int)(sizeof(T) / 2); q++) r[q] = reinterpret_cast<const uint4 *>(p)[q];
    const T *v = reinterpret_cast<const T *>(r);
#pragma unroll
    for (int j = 0; j < 8; j++) x[j] = kc_ldf(v[j]);
}

template <typename T> __device__ __forceinline__ void kc_st8(T *p, const float *x) {
    uint4 r[sizeof(T) / 2];
    T *v = reinterpret_cast<T *>(r);
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = kc_stf<T>(x[j]);
#pragma unroll
    for (int q = 0; q < (int)(sizeof(T) / 2); q++) reinterpret_cast<uint4 *>(p)[q] = r[q];
}

/* The common case (BERT: rows of 768, one Scale and Bias value per
 * element, aligned rows): thread t owns elements [8t, 8t + 8) and reads
 * them, its Scale and its Bias with 16-byte loads, all issued before the
 * first reduction (at batch 1 the kernel is latency-bound: one round trip
 * to memory instead of two). */
template <typename T>
__device__ __forceinline__ void kc_add_layernorm8(const kiln_cu_addnorm &p, const T *a, const T *b, const T *scale,
                                                  const T *bias, T *y) {
    const int64_t off = (int64_t)blockIdx.x * p.inner;
    const int n = (int)p.inner, i = 8 * (int)threadIdx.x;
    const bool mine = i < n;
    float x[8] = {}, xb[8] = {}, g[8] = {}, c[8] = {}, s = 0.0f;
    if (mine) {
        kc_ld8(a + off + i, x);
        kc_ld8(b + off + i, xb);
        kc_ld8(scale + i, g);
        if (bias) kc_ld8(bias + i, c);
    }
#pragma unroll
    for (int k = 0; k < 8; k++) {
        x[k] += xb[k];
        s += x[k];
    }
    const float m = kc_block_reduce<kc_sum>(s) / (float)n;
    float q = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) {
        float d = mine ? x[k] - m : 0.0f; /* (x is 0 past the row: its d must be too) */
        q += d * d;
    }
    const float r = rsqrtf(kc_block_reduce<kc_sum>(q) / (float)n + p.eps);
    if (!mine) return;
#pragma unroll
    for (int k = 0; k < 8; k++) x[k] = (x[k] - m) * r * g[k] + c[k];
    kc_st8(y + off + i, x);
}

template <typename T>
__device__ __forceinline__ void kc_add_layernorm(const kiln_cu_addnorm &p, const T *a, const T *b, const T *scale,
                                                 const T *bias, T *y) {
    const uintptr_t al = (uintptr_t)a | (uintptr_t)b | (uintptr_t)scale | (uintptr_t)bias | (uintptr_t)y;
    if (p.inner % 8 == 0 && p.se == p.inner && (!bias || p.be == p.inner) && (al & 15) == 0 &&
        8 * (int64_t)blockDim.x >= p.inner) {
        kc_add_layernorm8<T>(p, a, b, scale, bias, y);
        return;
    }
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
