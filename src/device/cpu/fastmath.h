/*
 * fastmath.h — float32 exp without libm calls, branch-free so the loops
 * that use it vectorize (shared by activation.c, softmax.c and the CPU
 * attention); on AVX-512 targets the same exp written with intrinsics
 * (GCC's vectorization of fexp_f32 reaches ~0.4 ns/element, these ~0.05)
 * and the softmax of a contiguous row built on it; tanh as a rational
 * function, and array forms of sigmoid and tanh (activation.c, rnn.c);
 * 16-lane erf and log1p on [0, 1] (activation.c's F32 kernels).
 */
#ifndef KILN_OPS_FASTMATH_H
#define KILN_OPS_FASTMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* exp: Cody-Waite range reduction by ln 2 and the Cephes polynomial,
 * within 2 ulp on [-87, 88] (libm's expf is a scalar call). */
static inline float fexp_f32(float x0) {
    float x = x0 < -87.4f ? -87.4f : x0 > 88.75f ? 88.75f : x0;
    /* round to nearest with the 1.5 * 2^23 trick (floorf does not vectorize
     * under -ftrapping-math) */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    n = n == n ? n : 0; /* NaN: keep the conversion below defined */
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    float y = p * r * r + r + 1.0f;
    /* 2^n as two factors so n in [-126, 128] stays representable */
    int32_t ni = (int32_t)n, n1 = ni >> 1, n2 = ni - n1;
    int32_t e1 = (n1 + 127) << 23, e2 = (n2 + 127) << 23;
    float s1, s2;
    memcpy(&s1, &e1, sizeof s1);
    memcpy(&s2, &e2, sizeof s2);
    y = y * s1 * s2;
    return x0 > 88.7228f ? INFINITY : x0 < -87.33f ? 0.0f : y;
}

/* tanh without libm calls (libm's tanhf is a scalar call, ~12 ns/element):
 * a rational approximation, error < 4e-7, +-1 from |x| >= 7.9053 on. */
static inline float ftanh_f32(float x) {
    /* rational minimax approximation on [-7.9, 7.9] (the coefficients Eigen
     * uses for float), saturated outside; no exp, one division */
    const float c = 7.90531110763549805f;
    float xc = x > c ? c : x < -c ? -c : x;
    float x2 = xc * xc;
    float p = -2.76076847742355e-16f;
    p = p * x2 + 2.00018790482477e-13f;
    p = p * x2 - 8.60467152213735e-11f;
    p = p * x2 + 5.12229709037114e-08f;
    p = p * x2 + 1.48572235717979e-05f;
    p = p * x2 + 6.37261928875436e-04f;
    p = p * x2 + 4.89352455891786e-03f;
    p = p * xc;
    float q = 1.19825839466702e-06f;
    q = q * x2 + 1.18534705686654e-04f;
    q = q * x2 + 2.26843463243900e-03f;
    q = q * x2 + 4.89352518554385e-03f;
    float r = p / q;
    /* saturated: the rational function is 0.99999976 at the clamp where it
     * is fused (tanh in float is 1 from 9.01 on; GELU's tanh form of -80
     * was -1e-5 instead of 0) */
    r = fabsf(x) >= c ? copysignf(1.0f, x) : r;
    return fabsf(x) < 0.0004f ? x : r;
}
#if defined(__AVX512F__)
#include <immintrin.h>
/* fexp_f32 on 16 lanes: the same reduction and polynomial, 2^n by scalef;
 * NaN stays NaN, above 88.7228 inf, below -87.33 0. */
static inline __m512 fexp_f32x16(__m512 x0) {
    __m512 x = _mm512_min_ps(_mm512_set1_ps(88.75f), _mm512_max_ps(_mm512_set1_ps(-87.4f), x0)); /* NaN kept */
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500E-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073E-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894E-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459E-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201E-1f));
    __m512 y = _mm512_scalef_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f))), n);
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x0, _mm512_set1_ps(88.7228f), _CMP_GT_OQ), _mm512_set1_ps(INFINITY));
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x0, _mm512_set1_ps(-87.33f), _CMP_LT_OQ), _mm512_setzero_ps());
}

/* log(1 + t) on 16 lanes for t in [0, 1] (Softplus): u = 1 + t, log u by
 * flog_f32's Cephes polynomial on u or u / 2 (within [sqrt(1/2),
 * sqrt(2)]), then times t / (u - 1) -- u - 1 is exact -- which gives back
 * what rounding 1 + t lost (log1p(t) ~ t for tiny t); NaN stays NaN. */
static inline __m512 flog1p01_f32x16(__m512 t) {
    const __m512 one = _mm512_set1_ps(1.0f), u = _mm512_add_ps(one, t);
    const __mmask16 big = _mm512_cmp_ps_mask(u, _mm512_set1_ps(1.41421356237309505f), _CMP_GT_OQ);
    const __m512 e = _mm512_maskz_mov_ps(big, one);
    const __m512 z = _mm512_sub_ps(_mm512_mask_mul_ps(u, big, u, _mm512_set1_ps(0.5f)), one), z2 = _mm512_mul_ps(z, z);
    static const float c[9] = {7.0376836292E-2f, -1.1514610310E-1f, 1.1676998740E-1f, -1.2420140846E-1f,
                               1.4249322787E-1f, -1.6668057665E-1f, 2.0000714765E-1f, -2.4999993993E-1f,
                               3.3333331174E-1f};
    __m512 p = _mm512_set1_ps(c[0]);
    for (int k = 1; k < 9; k++) p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(c[k]));
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(z, z2), p);
    y = _mm512_fmadd_ps(e, _mm512_set1_ps(-2.12194440e-4f), y);
    y = _mm512_fnmadd_ps(_mm512_set1_ps(0.5f), z2, y);
    const __m512 lg = _mm512_fmadd_ps(e, _mm512_set1_ps(0.693359375f), _mm512_add_ps(z, y)); /* log u */
    const __m512 r = _mm512_mul_ps(lg, _mm512_div_ps(t, _mm512_sub_ps(u, one)));
    return _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(u, one, _CMP_EQ_OQ), t);
}

/* erf on 16 lanes: the odd/even rational minimax form Eigen uses for float,
 * p(x)/q(x) on x clamped to [-4, 4] (abs error < 5e-7, like ferf_f32's
 * series and Abramowitz-Stegun form), the division by rcp14 and one
 * Newton step; +-1 exactly at and beyond +-4 (so GELU(-inf) is NaN as the
 * formula gives), NaN stays NaN. */
static inline __m512 ferf_f32x16(__m512 x) {
    static const float num[7] = {-2.72614225801306e-10f, 2.77068142495902e-08f, -2.10102402082508e-06f,
                                 -5.69250639462346e-05f, -7.34990630326855e-04f, -2.95459980854025e-03f,
                                 -1.60960333262415e-02f},
                       den[5] = {-1.45660718464996e-05f, -2.13374055278905e-04f, -1.68282697438203e-03f,
                                 -7.37332916720468e-03f, -1.42647390514189e-02f};
    __m512 u = _mm512_min_ps(_mm512_set1_ps(4.0f), _mm512_max_ps(_mm512_set1_ps(-4.0f), x)); /* NaN kept */
    __m512 z = _mm512_mul_ps(u, u), pn = _mm512_set1_ps(num[0]), qd = _mm512_set1_ps(den[0]);
    for (int k = 1; k < 7; k++) pn = _mm512_fmadd_ps(pn, z, _mm512_set1_ps(num[k]));
    for (int k = 1; k < 5; k++) qd = _mm512_fmadd_ps(qd, z, _mm512_set1_ps(den[k]));
    __m512 t = _mm512_rcp14_ps(qd);
    t = _mm512_mul_ps(t, _mm512_fnmadd_ps(qd, t, _mm512_set1_ps(2.0f))); /* 1/q: t (2 - q t) */
    __m512 e = _mm512_mul_ps(_mm512_mul_ps(pn, u), t);
    return _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(_mm512_abs_ps(u), _mm512_set1_ps(4.0f), _CMP_EQ_OQ),
                              _mm512_mul_ps(u, _mm512_set1_ps(0.25f)));
}
#endif

/* x[i] = 1 / (1 + exp(-x[i])) over an array, in place (the RNN gates). */
static inline void fsigmoid_f32_n(float *x, int64_t n) {
    int64_t k = 0;
#if defined(__AVX512F__)
    const __m512 one = _mm512_set1_ps(1.0f);
    for (; k + 16 <= n; k += 16) {
        __m512 e = fexp_f32x16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_loadu_ps(x + k)));
        _mm512_storeu_ps(x + k, _mm512_div_ps(one, _mm512_add_ps(one, e)));
    }
#endif
    for (; k < n; k++) x[k] = 1.0f / (1.0f + fexp_f32(-x[k]));
}

/* x[i] = tanh(x[i]) over an array, in place (vectorizes: no libm call). */
static inline void ftanh_f32_n(float *x, int64_t n) {
    for (int64_t k = 0; k < n; k++) x[k] = ftanh_f32(x[k]);
}

/* Softmax of the contiguous row x[0..n) into y (may be x): max, exp with
 * the sum, scale; a NaN makes the row NaN.  A row of -inf (every entry
 * masked out) becomes zeros with masked_zero (the fused attention's
 * choice), else NaN (ONNX Softmax). */
static inline void fsoftmax_row_f32(const float *x, float *y, int64_t n, int masked_zero) {
    float mx = -INFINITY, sum = 0;
    int64_t k = 0;
#if defined(__AVX512F__)
    __m512 vm = _mm512_set1_ps(-INFINITY);
    for (; k + 16 <= n; k += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + k));
    mx = _mm512_reduce_max_ps(vm);
#endif
    for (; k < n; k++) mx = x[k] > mx ? x[k] : mx; /* a NaN goes on through exp into the sum */
    if (mx == -INFINITY && masked_zero) {
        memset(y, 0, (size_t)n * sizeof *y);
        return;
    }
    k = 0;
#if defined(__AVX512F__)
    __m512 vs = _mm512_setzero_ps(), vmx = _mm512_set1_ps(mx);
    for (; k + 16 <= n; k += 16) {
        __m512 e = fexp_f32x16(_mm512_sub_ps(_mm512_loadu_ps(x + k), vmx));
        _mm512_storeu_ps(y + k, e);
        vs = _mm512_add_ps(vs, e);
    }
    sum = _mm512_reduce_add_ps(vs);
#endif
    for (; k < n; k++) sum += y[k] = fexp_f32(x[k] - mx);
    const float inv = 1.0f / sum;
    for (k = 0; k < n; k++) y[k] *= inv;
}
#endif

