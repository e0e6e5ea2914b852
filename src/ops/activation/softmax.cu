/*
 * softmax.cu — Softmax, LogSoftmax and Hardmax over one
 * axis of a tensor seen as [outer, len, inner] (softmax.c; opset < 13 is the
 * same with inner = 1 after the 2-D coercion).
 *
 * softmax_rows_<T>: inner == 1, one block per row (max, sum of exp, write:
 * three passes, the later ones from L1/L2).  softmax_cols_<T>: inner > 1,
 * one thread per (outer, inner) column walking the axis, so neighbouring
 * threads read neighbouring addresses.  log = 1: LogSoftmax.  Math in float.
 */
#include "ops/common/cuda_common.cuh"

template <typename T>
__device__ __forceinline__ void kc_softmax_rows(int64_t len, const T *x, T *y, int log) {
    const T *xr = x + (int64_t)blockIdx.x * len;
    T *yr = y + (int64_t)blockIdx.x * len;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) m = kc_max::op(m, kc_ldf(xr[i]));
    m = kc_block_reduce<kc_max>(m);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) s += expf(kc_ldf(xr[i]) - m);
    s = kc_block_reduce<kc_sum>(s);
    const float ls = logf(s), inv = 1.0f / s;
    for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
        float d = kc_ldf(xr[i]) - m;
        yr[i] = kc_stf<T>(log ? d - ls : expf(d) * inv);
    }
}

template <typename T>
__device__ __forceinline__ void kc_softmax_cols(int64_t outer, int64_t len, int64_t inner, const T *x, T *y,
                                                int log) {
    KC_FOR(j, outer * inner, int64_t) {
        int64_t o = j / inner, i = j - o * inner;
        const T *xc = x + o * len * inner + i;
        T *yc = y + o * len * inner + i;
        float m = -INFINITY, s = 0.0f;
        for (int64_t k = 0; k < len; k++) m = kc_max::op(m, kc_ldf(xc[k * inner]));
        for (int64_t k = 0; k < len; k++) s += expf(kc_ldf(xc[k * inner]) - m);
        const float ls = logf(s), inv = 1.0f / s;
        for (int64_t k = 0; k < len; k++) {
            float d = kc_ldf(xc[k * inner]) - m;
            yc[k * inner] = kc_stf<T>(log ? d - ls : expf(d) * inv);
        }
    }
}

/* Hardmax: one-hot of the first NaN, else of the first maximum, of each
 * column (np.argmax, the ONNX reference; all -inf: index 0), as softmax.c. */
template <typename T>
__device__ __forceinline__ void kc_hardmax(int64_t outer, int64_t len, int64_t inner, const T *x, T *y) {
    KC_FOR(j, outer * inner, int64_t) {
        int64_t o = j / inner, i = j - o * inner;
        const T *xc = x + o * len * inner + i;
        T *yc = y + o * len * inner + i;
        float m = -INFINITY;
        int64_t am = 0;
        for (int64_t k = 0; k < len; k++) {
            float v = kc_ldf(xc[k * inner]);
            if (v > m) {
                m = v, am = k;
            } else if (v != v) {
                am = k;
                break;
            }
        }
        for (int64_t k = 0; k < len; k++) yc[k * inner] = kc_stf<T>(k == am ? 1.0f : 0.0f);
    }
}

#define KC_SOFTMAX(S, T)                                                                      \
    extern "C" __global__ void softmax_rows_##S(int64_t len, const T *x, T *y, int log) {     \
        kc_softmax_rows<T>(len, x, y, log);                                                    \
    }                                                                                          \
    extern "C" __global__ void softmax_cols_##S(int64_t outer, int64_t len, int64_t inner, const T *x, T *y, \
                                                int log) {                                     \
        kc_softmax_cols<T>(outer, len, inner, x, y, log);                                      \
    }                                                                                          \
    extern "C" __global__ void hardmax_##S(int64_t outer, int64_t len, int64_t inner, const T *x, T *y) { \
        kc_hardmax<T>(outer, len, inner, x, y);                                                \
    }
KC_FLOATS(KC_SOFTMAX)
