/*
 * quant.cu — linear (de)quantization (quant.c's semantics):
 *
 *   quantize_<F>_<Q>(n, inner, nax, x, s, z, y, lo, hi):
 *     y = saturate(round_half_even(x / s[k]) + z[k]) into [lo, hi], NaN -> 0;
 *     the division in F's compute precision (float for FP32/FP16/BF16,
 *     double for FP64: the ONNX reference divides in the input's type);
 *   dequantize_<Q>_<F>(n, inner, nax, x, s, z, y): y = (x - z[k]) * s[k]
 *     in double, stored as F;
 *   k = (i / inner) % nax (per axis; nax = 1: per tensor); z may be NULL.
 *   F: f32 f16 bf16 f64; Q: u8 i8 u16 i16 i32.
 *
 *   dql_minmax(n, x, scale, zp): DynamicQuantizeLinear's statistics, one
 *     block: min(0, min x), max(0, max x) -> scale = (max - min) / 255,
 *     zp = saturate(round(-min / scale)) (u8), written to device memory;
 *   dql_apply(n, x, scale, zp, y): y = saturate(round(x / scale) + zp),
 *     reading scale and zp where dql_minmax left them (same stream).
 */
#include "ops/common/cuda_common.cuh"

__device__ __forceinline__ double kc_qsat(double v, double lo, double hi) {
    if (v != v) return 0; /* NaN has no integer value: 0, as the CPU op */
    v = rint(v);
    return v < lo ? lo : v > hi ? hi : v;
}

template <typename F, typename Q>
__device__ __forceinline__ void kc_quantize(int64_t n, int64_t inner, int64_t nax, const F *x, const F *s,
                                            const Q *z, Q *y, double lo, double hi) {
    typedef typename kc_t<F>::C C;
    KC_FOR(i, n, int64_t) {
        int64_t k = nax > 1 ? (i / inner) % nax : 0;
        C q = kc_t<F>::ld(x[i]) / kc_t<F>::ld(s[k]);
        y[i] = (Q)kc_qsat(rint((double)q) + (z ? (double)z[k] : 0.0), lo, hi);
    }
}

template <typename F, typename Q>
__device__ __forceinline__ void kc_dequantize(int64_t n, int64_t inner, int64_t nax, const Q *x, const F *s,
                                              const Q *z, F *y) {
    typedef typename kc_t<F>::C C;
    KC_FOR(i, n, int64_t) {
        int64_t k = nax > 1 ? (i / inner) % nax : 0;
        double v = ((double)x[i] - (z ? (double)z[k] : 0.0)) * (double)kc_t<F>::ld(s[k]);
        y[i] = kc_t<F>::st((C)v);
    }
}

#define KC_QDQ(FS, FT, QS, QT)                                                                                \
    extern "C" __global__ void quantize_##FS##_##QS(int64_t n, int64_t inner, int64_t nax, const FT *x,       \
                                                    const FT *s, const QT *z, QT *y, double lo, double hi) {  \
        kc_quantize<FT, QT>(n, inner, nax, x, s, z, y, lo, hi);                                               \
    }                                                                                                         \
    extern "C" __global__ void dequantize_##QS##_##FS(int64_t n, int64_t inner, int64_t nax, const QT *x,     \
                                                      const FT *s, const QT *z, FT *y) {                      \
        kc_dequantize<FT, QT>(n, inner, nax, x, s, z, y);                                                     \
    }
#define KC_QDQ_F(FS, FT)                                                                                      \
    KC_QDQ(FS, FT, u8, uint8_t) KC_QDQ(FS, FT, i8, int8_t) KC_QDQ(FS, FT, u16, uint16_t)                      \
    KC_QDQ(FS, FT, i16, int16_t) KC_QDQ(FS, FT, i32, int32_t)
KC_FLOATS64(KC_QDQ_F)

/* One block of blockDim (<= 1024) threads. */
extern "C" __global__ void dql_minmax(int64_t n, const float *x, float *scale, uint8_t *zp) {
    __shared__ double smn[1024], smx[1024];
    double mn = 0, mx = 0; /* the range always holds 0 */
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        double v = x[i];
        if (v < mn) mn = v; /* NaN compares false: ignored, as the CPU op */
        if (v > mx) mx = v;
    }
    smn[threadIdx.x] = mn;
    smx[threadIdx.x] = mx;
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (unsigned t = 1; t < blockDim.x; t++) {
        if (smn[t] < mn) mn = smn[t];
        if (smx[t] > mx) mx = smx[t];
    }
    float sc = (float)((mx - mn) / 255.0);
    *scale = sc;
    /* float arithmetic, as the ONNX reference */
    *zp = (uint8_t)(sc != 0 ? kc_qsat((double)((float)-mn / sc), 0, 255) : 0);
}

extern "C" __global__ void dql_apply(int64_t n, const float *x, const float *scale, const uint8_t *zp, uint8_t *y) {
    float sc = *scale;
    double z = *zp;
    KC_FOR(i, n, int64_t) y[i] = (uint8_t)(sc != 0 ? kc_qsat(rint((double)(x[i] / sc)) + z, 0, 255) : z);
}
