/*
 * conv_dwrows.c — depthwise 2-D convs from the input rows with masked
 * vector loads (Conv tactic 7; see conv_dwrows.h).
 */
#include "ops/nn/conv_dwrows.h"

#include "ops/common/ops_util.h"

#if defined(__AVX512F__)
#include <immintrin.h>

#define KW_MAX 32
#define RB 8 /* output rows computed together (independent FMA chains) */

/* Lanes i of a 16-float load at column b with 0 <= b + i < W. */
static inline __mmask16 lane_mask(int64_t b, int64_t W) {
    int64_t lo = b < 0 ? -b : 0, hi = W - b;
    if (hi > 16) hi = 16;
    if (hi <= lo) return 0;
    return (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

/* Where the taps of one 16-output column chunk read: tap column kx loads
 * at row + base[kx] (and row + base[kx] + 16 for stride 2) under masks
 * lo[kx] (hi[kx]); masked lanes are padding and read as zero. */
typedef struct chunk {
    int64_t base[KW_MAX];
    __mmask16 lo[KW_MAX], hi[KW_MAX];
    __mmask16 store;
} chunk;

static inline __attribute__((always_inline)) __m512 tap(const float *row, const chunk *ck, int64_t kx,
                                                        int s2) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    /* row + base may point before the row: those lanes are masked off */
    const float *p = (const float *)((uintptr_t)row + (uintptr_t)(ck->base[kx] * (int64_t)sizeof(float)));
    __m512 a = _mm512_maskz_loadu_ps(ck->lo[kx], p);
    if (!s2) return a;
    return _mm512_permutex2var_ps(a, even, _mm512_maskz_loadu_ps(ck->hi[kx], p + 16));
}

/* Output rows [oy, oy + R) (R <= RB) of one column chunk of channel plane
 * yc from input plane xc.  Input row t of the block (t = r * SY + ky * DY)
 * is loaded once for every output row r it is tap row ky of.  Weight k of
 * the KH x KW kernel: wv[k] (broadcast already) or wm[k].  Called with
 * constant R, KH, KW, SY, DY (MobileNet's 3x3 at strides 1 and 2: the
 * loops unroll and the row tests fold away) or with the conv's own. */
static inline __attribute__((always_inline)) void rows(const int R, const int64_t KH, const int64_t KW,
                                                       const int64_t SY, const int64_t DY,
                                                       const kiln__dwrows *p, const int s2, const float *xc,
                                                       const __m512 *wv, const float *wm, float bias,
                                                       const chunk *ck, float *yc, int64_t oy, int64_t ox0) {
    __m512 acc[RB];
    for (int r = 0; r < R; r++) acc[r] = _mm512_set1_ps(bias);
    const int64_t T = (R - 1) * SY + (KH - 1) * DY + 1, pitch = p->phase ? p->W >> 1 : p->W;
    /* unrolled in full where the sizes are constants: the tests fold */
#pragma GCC unroll 24
    for (int64_t t = 0; t < T; t++) {
        int64_t iy = oy * SY + t - p->pt;
        if (iy < 0 || iy >= p->H) continue;
        const float *row = xc + iy * pitch;
#pragma GCC unroll 4
        for (int64_t kx = 0; kx < KW; kx++) {
            __m512 v = tap(row, ck, kx, s2);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                int64_t d = t - r * SY;
                if (d < 0 || d % DY || d / DY >= KH) continue;
                int64_t k = d / DY * KW + kx;
                acc[r] = _mm512_fmadd_ps(wv ? wv[k] : _mm512_set1_ps(wm[k]), v, acc[r]);
            }
        }
    }
    if (p->clamp) /* max/min return their second operand for a NaN: it stays NaN, as Clip keeps it */
        for (int r = 0; r < R; r++)
            acc[r] = _mm512_min_ps(_mm512_set1_ps(p->hi), _mm512_max_ps(_mm512_set1_ps(p->lo), acc[r]));
    for (int r = 0; r < R; r++)
        _mm512_mask_storeu_ps(yc + (oy + r - p->oy_base) * p->OW + ox0, ck->store, acc[r]);
}

/* Output rows [oy0, oy1) of output channel m of image n. */
static inline __attribute__((always_inline)) void plane_rows(const int64_t KH, const int64_t KW, const int64_t SY,
                                                             const int64_t DY, const int s2, const int hoist,
                                                             const kiln__dwrows *p, int64_t n, int64_t m,
                                                             int64_t oy0, int64_t oy1) {
    const int64_t xs = p->xs ? p->xs : p->H * p->W, ys = p->ys ? p->ys : p->OH * p->OW;
    const float *xc = p->x + (n * p->C + m / p->mult) * xs;
    const float *wm = p->w + m * KH * KW;
    float *yc = p->y + (n * p->C * p->mult + m) * ys;
    const float bias = p->bias ? p->bias[m] : 0.0f;
    __m512 w9[9];
    if (hoist)
        for (int k = 0; k < 9; k++) w9[k] = _mm512_set1_ps(wm[k]);
    const __m512 *wv = hoist ? w9 : NULL;
    chunk ck;
    for (int64_t ox0 = 0; ox0 < p->OW; ox0 += 16) {
        int64_t nv = p->OW - ox0 < 16 ? p->OW - ox0 : 16;
        ck.store = (__mmask16)((1u << nv) - 1u);
        for (int64_t kx = 0; kx < KW; kx++) {
            int64_t b = ox0 * p->sx + kx * p->dx - p->pl;
            if (p->phase) { /* column 2 ox + off: phase off & 1, index ox + floor(off / 2) */
                int64_t off = kx * p->dx - p->pl;
                b = ox0 + (off - (off & 1)) / 2;
                ck.base[kx] = b + (off & 1) * p->phase;
                ck.lo[kx] = lane_mask(b, p->W >> 1);
                ck.hi[kx] = 0;
                continue;
            }
            ck.base[kx] = b;
            ck.lo[kx] = lane_mask(b, p->W);
            ck.hi[kx] = s2 ? lane_mask(b + 16, p->W) : 0;
        }
        int64_t oy = oy0;
        for (; oy + RB <= oy1; oy += RB) rows(RB, KH, KW, SY, DY, p, s2, xc, wv, wm, bias, &ck, yc, oy, ox0);
        switch (oy1 - oy) {
        case 7: rows(7, KH, KW, SY, DY, p, s2, xc, wv, wm, bias, &ck, yc, oy, ox0); break;
        case 6: rows(6, KH, KW, SY, DY, p, s2, xc, wv, wm, bias, &ck, yc, oy, ox0); break;
        case 5: rows(5, KH, KW, SY, DY, p, s2, xc, wv, wm, bias, &ck, yc, oy, ox0); break;
        case 4: rows(4, KH, KW, SY, DY, p, s2, xc, wv, wm, bias, &ck, yc, oy, ox0); break;
        case 3: rows(3, KH, KW, SY, DY, p, s2, xc, wv, wm, bias, &ck, yc, oy, ox0); break;
        case 2: rows(2, KH, KW, SY, DY, p, s2, xc, wv, wm, bias, &ck, yc, oy, ox0); break;
        case 1: rows(1, KH, KW, SY, DY, p, s2, xc, wv, wm, bias, &ck, yc, oy, ox0); break;
        default: break;
        }
    }
}

static void plane_3x3_s1(const kiln__dwrows *p, int64_t n, int64_t m, int64_t oy0, int64_t oy1) {
    plane_rows(3, 3, 1, 1, 0, 1, p, n, m, oy0, oy1);
}

static void plane_3x3_s2(const kiln__dwrows *p, int64_t n, int64_t m, int64_t oy0, int64_t oy1) {
    plane_rows(3, 3, 2, 1, 1, 1, p, n, m, oy0, oy1);
}

static void plane_3x3_phase(const kiln__dwrows *p, int64_t n, int64_t m, int64_t oy0, int64_t oy1) {
    plane_rows(3, 3, 2, 1, 0, 1, p, n, m, oy0, oy1);
}

static void plane_any(const kiln__dwrows *p, int64_t n, int64_t m, int64_t oy0, int64_t oy1) {
    plane_rows(p->KH, p->KW, p->sy, p->dy, p->sx == 2 && !p->phase, 0, p, n, m, oy0, oy1);
}

void kiln__dwrows_band(const kiln__dwrows *p, int64_t n, int64_t m0, int64_t m1, int64_t oy0, int64_t oy1) {
    const int is3x3 = p->KH == 3 && p->KW == 3 && p->dy == 1 && p->dx == 1 && p->sy == p->sx;
    for (int64_t m = m0; m < m1; m++) {
        if (is3x3 && p->phase)
            plane_3x3_phase(p, n, m, oy0, oy1);
        else if (is3x3 && p->sx == 1)
            plane_3x3_s1(p, n, m, oy0, oy1);
        else if (is3x3)
            plane_3x3_s2(p, n, m, oy0, oy1);
        else
            plane_any(p, n, m, oy0, oy1);
    }
}

/* Work units [b, e): (image, block of cb channels, block of rb rows); the
 * fused epilogue runs on each unit's outputs while they are in cache
 * (dense NCHW y only: xs, ys, oy_base 0). */
static void units(void *ud, int64_t b, int64_t e) {
    const kiln__dwrows *p = ud;
    const int64_t M = p->C * p->mult, plane = p->OH * p->OW;
    for (int64_t u = b; u < e; u++) {
        int64_t rbk = u % p->nrb, q = u / p->nrb, mb = q % p->ncb, n = q / p->ncb;
        int64_t oy0 = rbk * p->rb, oy1 = oy0 + p->rb < p->OH ? oy0 + p->rb : p->OH;
        int64_t m0 = mb * p->cb, m1 = m0 + p->cb < M ? m0 + p->cb : M;
        kiln__dwrows_band(p, n, m0, m1, oy0, oy1);
        if (!p->call) continue;
        float *yn = p->y + n * M * plane;
        if (oy1 - oy0 == p->OH) /* whole planes: one call */
            kiln__ops_epilogue_span(p->call, yn, plane, m0 * plane, m1 * plane, 0);
        else
            for (int64_t m = m0; m < m1; m++)
                kiln__ops_epilogue_span(p->call, yn, plane, m * plane + oy0 * p->OW, m * plane + oy1 * p->OW,
                                         0);
    }
}

int kiln__dwrows_fits(int64_t sx, int64_t KW) { return (sx == 1 || sx == 2) && KW >= 1 && KW <= KW_MAX; }

void kiln__dwrows_run(const kiln__dwrows *p) {
    kiln_exec_parallel_for(p->exec, p->N * p->ncb * p->nrb, 1, units, (void *)p);
}

#else /* no AVX-512: the tactic never applies (Conv runs tactic 5) */

int kiln__dwrows_fits(int64_t sx, int64_t KW) {
    (void)sx;
    (void)KW;
    return 0;
}

void kiln__dwrows_run(const kiln__dwrows *p) { (void)p; }

void kiln__dwrows_band(const kiln__dwrows *p, int64_t n, int64_t m0, int64_t m1, int64_t oy0, int64_t oy1) {
    (void)p;
    (void)n;
    (void)m0;
    (void)m1;
    (void)oy0;
    (void)oy1;
}

#endif
