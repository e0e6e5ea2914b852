/*
 * pool16c.c — pooling on NCHW16C (see pool16c.h).
 *
 * One kernel body over a 16-lane vector type: AVX-512 intrinsics, or a
 * portable struct of 16 floats elsewhere (the same operations per lane,
 * so the same bits).  Max takes plain max_ps(v, m) = v > m ? v : m, which
 * is ONNX Runtime's PMAX wherever the running max m is not NaN; m is NaN
 * only once a column's first row or the first column was NaN (a NaN v is
 * dropped by both), and then the sum of the columns is NaN too, so a
 * pixel whose column sum is not NaN is exact and one that is runs again
 * with PMAX (pool.c's max3_s2_block argues the same on NCHW rows).
 */
#include "ops/nn/pool16c.h"

#include <math.h>
#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>

typedef __m512 vf;
static inline vf v_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void v_store(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline vf v_set1(float f) { return _mm512_set1_ps(f); }
static inline vf v_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf v_max(vf v, vf m) { return _mm512_max_ps(v, m); }
static inline vf v_pmax(vf v, vf m) { /* v where v > m or m is NaN, else m */
    const vf t = _mm512_max_ps(v, m);
    return _mm512_mask_mov_ps(t, _mm512_cmp_ps_mask(t, t, _CMP_UNORD_Q), v);
}
static inline int v_nan(vf a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q) != 0; }

/* 16 sums in double (AveragePool's order and precision, as pool.c's) */
typedef struct vd {
    __m512d lo, hi;
} vd;
static inline vd vd_zero(void) { return (vd){_mm512_setzero_pd(), _mm512_setzero_pd()}; }
static inline vd vd_add(vd s, vf v) {
    const __m256 h = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
    s.lo = _mm512_add_pd(s.lo, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    s.hi = _mm512_add_pd(s.hi, _mm512_cvtps_pd(h));
    return s;
}
static inline void vd_store_div(float *y, vd s, double d) {
    const __m512d dv = _mm512_set1_pd(d);
    _mm256_storeu_ps(y, _mm512_cvtpd_ps(_mm512_div_pd(s.lo, dv)));
    _mm256_storeu_ps(y + 8, _mm512_cvtpd_ps(_mm512_div_pd(s.hi, dv)));
}
#else
typedef struct vf {
    float f[16];
} vf;
static inline vf v_load(const float *p) {
    vf v;
    memcpy(v.f, p, sizeof v.f);
    return v;
}
static inline void v_store(float *p, vf v) { memcpy(p, v.f, sizeof v.f); }
static inline vf v_set1(float f) {
    vf v;
    for (int i = 0; i < 16; i++) v.f[i] = f;
    return v;
}
static inline vf v_add(vf a, vf b) {
    for (int i = 0; i < 16; i++) a.f[i] += b.f[i];
    return a;
}
static inline vf v_max(vf v, vf m) {
    for (int i = 0; i < 16; i++) m.f[i] = v.f[i] > m.f[i] ? v.f[i] : m.f[i];
    return m;
}
static inline vf v_pmax(vf v, vf m) {
    for (int i = 0; i < 16; i++) m.f[i] = v.f[i] > m.f[i] || m.f[i] != m.f[i] ? v.f[i] : m.f[i];
    return m;
}
static inline int v_nan(vf a) {
    int n = 0;
    for (int i = 0; i < 16; i++) n |= a.f[i] != a.f[i];
    return n;
}
typedef struct vd {
    double d[16];
} vd;
static inline vd vd_zero(void) {
    vd s;
    for (int i = 0; i < 16; i++) s.d[i] = 0;
    return s;
}
static inline vd vd_add(vd s, vf v) {
    for (int i = 0; i < 16; i++) s.d[i] += v.f[i];
    return s;
}
static inline void vd_store_div(float *y, vd s, double d) {
    for (int i = 0; i < 16; i++) y[i] = (float)(s.d[i] / d);
}
#endif

/* The max of one window: columns [0, nkx) (cs floats apart) of rows
 * [0, nky) (rs floats apart) from r, each column over its rows first;
 * plain: max_ps (exact where *chk, the columns' sum, is not NaN), else
 * PMAX.  Inlined with constant nky / nkx for the 3x3 windows. */
static inline __attribute__((always_inline)) vf win_max(const float *r, int64_t rs, int64_t cs, int64_t nky,
                                                        int64_t nkx, int plain, vf *chk) {
    vf best = v_set1(0.0f), sum = v_set1(0.0f);
    for (int64_t kx = 0; kx < nkx; kx++) {
        const float *c = r + kx * cs;
        vf col = v_load(c);
        for (int64_t ky = 1; ky < nky; ky++) col = plain ? v_max(v_load(c + ky * rs), col) : v_pmax(v_load(c + ky * rs), col);
        sum = kx ? v_add(sum, col) : col;
        best = !kx ? col : plain ? v_max(col, best) : v_pmax(col, best);
    }
    *chk = sum;
    return best;
}

static vf max_any(const float *r, int64_t rs, int64_t cs, int64_t nky, int64_t nkx) {
    vf chk, m = win_max(r, rs, cs, nky, nkx, 1, &chk);
    return v_nan(chk) ? win_max(r, rs, cs, nky, nkx, 0, &chk) : m;
}

static vf max_3x3(const float *r, int64_t rs, int64_t cs) {
    vf chk, m = win_max(r, rs, cs, 3, 3, 1, &chk);
    return v_nan(chk) ? win_max(r, rs, cs, 3, 3, 0, &chk) : m;
}

int64_t kiln__pool16c_units(const kiln__pool16c *p) { return p->N * p->CB * p->OH; }

/* Max with Indices, output row oy of plane (image * CB + block), lane by
 * lane: taps in row-major order from the first, the one PMAX takes. */
static void max_indices(const kiln__pool16c *p, int64_t plane, int64_t oy, const int64_t *tab) {
    const int64_t W = p->W, OW = p->OW, C = p->CB * 16, n = plane / p->CB, c0 = plane % p->CB * 16;
    const int64_t *xlo = tab, *xhi = tab + OW, ys = oy * p->sy - p->pt;
    int64_t ylo, yhi, ypad;
    kiln__pool_taps(ys, p->kh, p->dy, p->H, p->pb, &ylo, &yhi, &ypad);
    const float *x = p->x + plane * p->H * W * 16;
    for (int64_t ox = 0; ox < OW; ox++)
        for (int l = 0; l < 16; l++) {
            const int64_t xs = ox * p->sx - p->pl;
            float best = -INFINITY;
            int64_t bi = -1;
            for (int64_t ky = ylo; ky < yhi; ky++)
                for (int64_t kx = xlo[ox]; kx < xhi[ox]; kx++) {
                    const int64_t i = (ys + ky * p->dy) * W + xs + kx * p->dx;
                    const float v = x[i * 16 + l];
                    if (bi < 0 || v > best || best != best) best = v, bi = i;
                }
            p->y[((plane * p->OH + oy) * OW + ox) * 16 + l] = best;
            const int64_t r = bi >= 0 && p->order ? bi % W * p->H + bi / W : bi;
            p->ind[((n * C + c0 + l) * p->OH + oy) * OW + ox] = bi < 0 ? -1 : (n * C + c0 + l) * p->H * W + r;
        }
}

void kiln__pool16c_run(const kiln__pool16c *p, int64_t u0, int64_t u1, int64_t *tab) {
    const int64_t W = p->W, OW = p->OW, rs = p->dy * W * 16, cs = p->dx * 16;
    int64_t *xlo = tab, *xhi = tab + OW, *xpad = tab + 2 * OW; /* per output column (divisions once) */
    for (int64_t ox = 0; ox < OW; ox++) kiln__pool_taps(ox * p->sx - p->pl, p->kw, p->dx, W, p->pr, &xlo[ox], &xhi[ox], &xpad[ox]);
    for (int64_t u = u0; u < u1; u++) {
        const int64_t plane = u / p->OH, oy = u % p->OH, ys = oy * p->sy - p->pt;
        if (p->ind && !p->avg) {
            max_indices(p, plane, oy, tab);
            continue;
        }
        int64_t ylo, yhi, ypad;
        kiln__pool_taps(ys, p->kh, p->dy, p->H, p->pb, &ylo, &yhi, &ypad);
        const float *x = p->x + plane * p->H * W * 16;
        float *y = p->y + (plane * p->OH + oy) * OW * 16;
        const int64_t nky = yhi - ylo;
        for (int64_t ox = 0; ox < OW; ox++) {
            const int64_t nkx = xhi[ox] - xlo[ox];
            /* the window's first valid tap */
            const float *r = x + ((ys + ylo * p->dy) * W + ox * p->sx - p->pl + xlo[ox] * p->dx) * 16;
            if (p->avg) {
                vd s = vd_zero();
                for (int64_t ky = 0; ky < nky; ky++)
                    for (int64_t kx = 0; kx < nkx; kx++) s = vd_add(s, v_load(r + ky * rs + kx * cs));
                const int64_t dv = p->count_pad ? ypad * xpad[ox] : nky * nkx;
                if (dv) vd_store_div(y + ox * 16, s, (double)dv);
                else v_store(y + ox * 16, v_set1(0.0f));
            } else if (nky <= 0 || nkx <= 0) {
                v_store(y + ox * 16, v_set1(-INFINITY));
            } else {
                v_store(y + ox * 16, nky == 3 && nkx == 3 ? max_3x3(r, rs, cs) : max_any(r, rs, cs, nky, nkx));
            }
        }
    }
}

void kiln__gpool16c_run(const float *x, int64_t S, int avg, int64_t b0, int64_t b1, float *y) {
    for (int64_t b = b0; b < b1; b++) {
        const float *p = x + b * S * 16;
        if (avg) {
            vd s = vd_zero();
            for (int64_t i = 0; i < S; i++) s = vd_add(s, v_load(p + i * 16));
            if (S) vd_store_div(y + b * 16, s, (double)S);
            else v_store(y + b * 16, v_set1(0.0f));
            continue;
        }
        if (!S) {
            v_store(y + b * 16, v_set1(-INFINITY));
            continue;
        }
        /* pool.c's order: m = x[0], then PMAX(x[i], m); plain max_ps is
         * the same unless x[0] holds a NaN (a NaN later is dropped) */
        vf m = v_load(p);
        const int plain = !v_nan(m);
        for (int64_t i = 1; i < S; i++) m = plain ? v_max(v_load(p + i * 16), m) : v_pmax(v_load(p + i * 16), m);
        v_store(y + b * 16, m);
    }
}
