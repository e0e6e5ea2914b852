/*
 * norm.cu — BatchNormalization (inference) and the plane normalizations
 * (Layer-, Instance-, GroupNormalization) of norm.c.
 *
 * batchnorm_<T>(n, C, S, x, scale, bias, mean, var, eps, y, act, a, b):
 * [N, C, S] contiguous, per-channel parameters, then the fused activation.
 * norm_<T>(kiln_cu_norm, x, scale, bias, y, mean_out, rstd_out): one block
 * per plane; mean and variance in float, two passes over the plane (the
 * second pass hits L2), statistics optionally written as float.
 */
#include "ops/common/cuda_common.cuh"

template <typename T>
__device__ __forceinline__ void kc_batchnorm(int64_t n, int64_t C, int64_t S, const T *x, const T *scale,
                                             const T *bias, const T *mean, const T *var, float eps, T *y,
                                             int act, float a, float b) {
    KC_FOR(i, n, int64_t) {
        int64_t c = (i / S) % C;
        float g = kc_ldf(scale[c]) * rsqrtf(kc_ldf(var[c]) + eps);
        float v = (kc_ldf(x[i]) - kc_ldf(mean[c])) * g + kc_ldf(bias[c]);
        y[i] = kc_stf<T>(kc_act(act, v, a, b));
    }
}

template <typename T>
__device__ __forceinline__ void kc_norm(const kiln_cu_norm &p, const T *x, const T *scale, const T *bias, T *y,
                                        float *mean_out, float *rstd_out) {
    const int64_t pl = blockIdx.x, n = p.inner;
    const T *xp = x + pl * n;
    T *yp = y + pl * n;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += kc_ldf(xp[i]);
    const float m = kc_block_reduce<kc_sum>(s) / (float)n;
    float q = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        float d = kc_ldf(xp[i]) - m;
        q += d * d;
    }
    const float r = rsqrtf(kc_block_reduce<kc_sum>(q) / (float)n + p.eps);
    if (threadIdx.x == 0) {
        if (mean_out) mean_out[pl] = m;
        if (rstd_out) rstd_out[pl] = r;
    }
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        int64_t ks, kb;
        if (p.affine == 0) {
            ks = i % p.se;
            kb = i % p.be;
        } else if (p.affine == 1) {
            ks = kb = (pl / p.div) % p.mod;
        } else {
            ks = kb = (pl % p.groups) * p.cpg + i / p.sub;
        }
        float v = (kc_ldf(xp[i]) - m) * r * kc_ldf(scale[ks]);
        if (bias) v += kc_ldf(bias[kb]);
        yp[i] = kc_stf<T>(kc_act(p.act, v, p.act_a, p.act_b));
    }
}

#define KC_BN(S, T)                                                                           \
    extern "C" __global__ void batchnorm_##S(int64_t n, int64_t C, int64_t Sp, const T *x, const T *scale, \
                                             const T *bias, const T *mean, const T *var, float eps, T *y, \
                                             int act, float a, float b) {                     \
        kc_batchnorm<T>(n, C, Sp, x, scale, bias, mean, var, eps, y, act, a, b);               \
    }
#define KC_NORM(S, T)                                                                         \
    extern "C" __global__ void norm_##S(kiln_cu_norm p, const T *x, const T *scale, const T *bias, T *y, \
                                        float *mean_out, float *rstd_out) {                   \
        kc_norm<T>(p, x, scale, bias, y, mean_out, rstd_out);                                  \
    }
KC_FLOATS(KC_BN)
KC_FLOATS(KC_NORM)
