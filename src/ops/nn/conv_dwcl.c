/*
 * conv_dwcl.c — depthwise 2-D conv over channels-last data (conv_dwcl.h).
 *
 * Each output pixel is computed in blocks of 64 channels (four vectors of
 * 16: four independent FMA chains), then 16, then one at a time: bias,
 * the taps that fall inside the input (padding skipped, not read), the
 * clamp, one store.  GCC vector types, not intrinsics: the same code is
 * AVX-512 on the machines kiln is tuned for and narrower vectors elsewhere.
 */
#include "ops/nn/conv_dwcl.h"

#include <string.h>

typedef float v16 __attribute__((vector_size(64)));
typedef int32_t vi16 __attribute__((vector_size(64)));
/* 16 floats at any address (vector types alias their element type).  A
 * macro and pointer arguments, not vector values: a function taking or
 * returning one changes the ABI in builds without AVX-512 (-Wpsabi). */
typedef float v16u __attribute__((vector_size(64), aligned(4)));
#define LD16(p) (*(const v16u *)(const void *)(p))

/* *v clamped to [lo, hi]; compares, not fminf: a NaN fails both and stays
 * (Clip keeps it). */
static inline void clamp16(v16 *v, float lo, float hi) {
    v16 l = {0}, h = {0};
    l += lo;
    h += hi;
    vi16 m = *v < l; /* lanes all ones where true */
    *v = (v16)(((vi16)l & m) | ((vi16)*v & ~m));
    m = *v > h;
    *v = (v16)(((vi16)h & m) | ((vi16)*v & ~m));
}

void kiln__dwcl_pack(const float *w, int64_t C, int64_t KH, int64_t KW, float *dst) {
    for (int64_t c = 0; c < C; c++)
        for (int64_t t = 0; t < KH * KW; t++) dst[t * C + c] = w[c * KH * KW + t];
}

/* The valid taps of output pixel (oy, ox): input offsets (floats from x)
 * and weight offsets (from w), n of them. */
static int taps(const kiln__dwcl *p, int64_t oy, int64_t ox, int64_t *xo, int64_t *wo) {
    int n = 0;
    for (int64_t ky = 0; ky < p->KH; ky++) {
        int64_t iy = oy * p->sy - p->pt + ky * p->dy;
        if (iy < 0 || iy >= p->H) continue;
        for (int64_t kx = 0; kx < p->KW; kx++) {
            int64_t ix = ox * p->sx - p->pl + kx * p->dx;
            if (ix < 0 || ix >= p->W) continue;
            xo[n] = (iy * p->W + ix) * p->ldx;
            wo[n++] = (ky * p->KW + kx) * p->C;
        }
    }
    return n;
}

static void rows_any(const kiln__dwcl *p, int64_t oy0, int64_t oy1, int64_t c_from);

/* Output pixels [ox, ox + N) of a row, 16 channels at c: N FMA chains
 * over the taps of the rows xr (NULL: outside the input), weights w.
 * Inlined with N and `checked` constant: interior pixels (every column tap
 * inside the input) run without a test per tap, which on 7- and 14-wide
 * rows cost more than the FMAs (index arithmetic and compares per load);
 * `checked` tests the taps of the first and the last pixel only.  SX and
 * LD nonzero: the column stride and ldx = ldy as constants (dilation 1),
 * so that every tap's address is the group's base plus a constant; with
 * them read at run time each load took an imul and 3-4 more scalar
 * instructions, which bounded MobileNetV2's 14x14 and 7x7 depthwise steps
 * at ~2 cycles an FMA (session 21). */
static inline __attribute__((always_inline)) void px_3x3(const kiln__dwcl *p, const float *const *xr,
                                                         const v16 *w, v16 b, int64_t ox, int64_t c, const int N,
                                                         const int checked, const int SX, const int LD, float *y) {
    const int64_t sx = SX ? SX : p->sx, dx = SX ? 1 : p->dx, ldx = LD ? LD : p->ldx, ldy = LD ? LD : p->ldy;
    const int64_t ix0 = ox * sx - p->pl; /* pixel q's tap kx reads column ix0 + q sx + kx dx */
    v16 a[8] = {b, b, b, b, b, b, b, b};
#pragma GCC unroll 3
    for (int ky = 0; ky < 3; ky++) {
        if (!xr[ky]) continue;
        const float *row = xr[ky] + c + ix0 * ldx;
#pragma GCC unroll 3
        for (int kx = 0; kx < 3; kx++)
#pragma GCC unroll 8
            for (int q = 0; q < N; q++) {
                const int64_t d = q * sx + kx * dx;
                if (!checked || (q > 0 && q < N - 1) || (ix0 + d >= 0 && ix0 + d < p->W))
                    a[q] += w[ky * 3 + kx] * LD16(row + d * ldx);
            }
    }
#pragma GCC unroll 8
    for (int q = 0; q < N; q++) {
        v16 v = a[q];
        clamp16(&v, p->lo, p->hi);
        memcpy(y + q * ldy, &v, sizeof v);
    }
}

/* 3x3 kernels (any stride, dilation and pads): 16 channels at a time,
 * their nine weights held in registers across a row of outputs.  Where at
 * most the first and the last column have taps outside the input (pads of
 * one: MobileNet's), the row in groups of up to eight pixels (eight FMA
 * chains: an FMA's latency times the two FMA pipes), the taps of a
 * group's first and last pixel tested; a 7-wide row is one group, where
 * fours and edge pixels one by one ran chains of one (session 21: the
 * depthwise step of mbconv's tactic 5 took ~6% of MobileNetV2 at 1
 * thread, ~4x its FMAs).  Else up to four pixels at a time (four chains;
 * one load per FMA): the edge columns one by one with tests, the columns
 * between in fours without.  Channels past the last full 16 are left to
 * the generic loop ([c_end, C)). */
static inline __attribute__((always_inline)) int64_t rows_3x3_t(const kiln__dwcl *p, int64_t oy0, int64_t oy1,
                                                               const int SX, const int LD) {
    const int64_t C16 = p->C / 16 * 16;
    /* interior columns [lo, hi): ox * sx - pl >= 0 and ox * sx - pl + 2 dx < W */
    int64_t lo = (p->pl + p->sx - 1) / p->sx, hi = p->W - 1 - 2 * p->dx + p->pl;
    hi = hi < 0 ? 0 : hi / p->sx + 1;
    lo = lo > p->OW ? p->OW : lo;
    hi = hi > p->OW ? p->OW : hi < lo ? lo : hi;
    /* rows in groups of gn <= 8 (balanced: 14 is 7 + 7) */
    const int groups = lo <= 1 && hi >= p->OW - 1 && p->OW > 1;
    const int64_t gn = (p->OW + (p->OW + 7) / 8 - 1) / ((p->OW + 7) / 8);
    for (int64_t oy = oy0; oy < oy1; oy++) {
        const int64_t iy0 = oy * p->sy - p->pt;
        const float *xr[3] = {NULL, NULL, NULL}; /* the tap rows inside the input, else NULL */
        for (int ky = 0; ky < 3; ky++) {
            int64_t iy = iy0 + ky * p->dy;
            if (iy >= 0 && iy < p->H) xr[ky] = p->x + iy * p->W * p->ldx;
        }
        float *yr = p->y + oy * p->OW * p->ldy;
        for (int64_t c = 0; c < C16; c += 16) {
            v16 w[9], b = {0};
            for (int t = 0; t < 9; t++) w[t] = LD16(p->w + t * p->C + c);
            if (p->bias) b = LD16(p->bias + c);
            if (groups) {
                for (int64_t ox = 0, n; ox < p->OW; ox += n) {
                    n = p->OW - ox < gn ? p->OW - ox : gn;
                    float *yo = yr + ox * p->ldy + c;
                    switch (n) {
                    case 8: px_3x3(p, xr, w, b, ox, c, 8, 1, SX, LD, yo); break;
                    case 7: px_3x3(p, xr, w, b, ox, c, 7, 1, SX, LD, yo); break;
                    case 6: px_3x3(p, xr, w, b, ox, c, 6, 1, SX, LD, yo); break;
                    case 5: px_3x3(p, xr, w, b, ox, c, 5, 1, SX, LD, yo); break;
                    case 4: px_3x3(p, xr, w, b, ox, c, 4, 1, SX, LD, yo); break;
                    case 3: px_3x3(p, xr, w, b, ox, c, 3, 1, SX, LD, yo); break;
                    case 2: px_3x3(p, xr, w, b, ox, c, 2, 1, SX, LD, yo); break;
                    default: px_3x3(p, xr, w, b, ox, c, 1, 1, SX, LD, yo); break;
                    }
                }
                continue;
            }
            int64_t ox = 0;
            for (; ox < lo; ox++) px_3x3(p, xr, w, b, ox, c, 1, 1, SX, LD, yr + ox * p->ldy + c);
            for (; ox + 4 <= hi; ox += 4) px_3x3(p, xr, w, b, ox, c, 4, 0, SX, LD, yr + ox * p->ldy + c);
            switch (hi - ox) {
            case 3: px_3x3(p, xr, w, b, ox, c, 3, 0, SX, LD, yr + ox * p->ldy + c); ox += 3; break;
            case 2: px_3x3(p, xr, w, b, ox, c, 2, 0, SX, LD, yr + ox * p->ldy + c); ox += 2; break;
            case 1: px_3x3(p, xr, w, b, ox, c, 1, 0, SX, LD, yr + ox * p->ldy + c); ox += 1; break;
            default: break;
            }
            for (; ox < p->OW; ox++) px_3x3(p, xr, w, b, ox, c, 1, 1, SX, LD, yr + ox * p->ldy + c);
        }
    }
    return C16;
}

/* rows_3x3_t with the column stride and the pixel pitch as constants
 * where they are MobileNet's (x strides 1 and 2, dilation 1, 16 channels
 * a pixel: mbconv tactic 5's blocks), else read at run time. */
static int64_t rows_3x3(const kiln__dwcl *p, int64_t oy0, int64_t oy1) {
    if (p->dx == 1 && p->ldx == 16 && p->ldy == 16 && p->sx == 1) return rows_3x3_t(p, oy0, oy1, 1, 16);
    if (p->dx == 1 && p->ldx == 16 && p->ldy == 16 && p->sx == 2) return rows_3x3_t(p, oy0, oy1, 2, 16);
    return rows_3x3_t(p, oy0, oy1, 0, 0);
}

void kiln__dwcl_rows(const kiln__dwcl *p, int64_t oy0, int64_t oy1) {
    const int64_t c_from = p->KH == 3 && p->KW == 3 ? rows_3x3(p, oy0, oy1) : 0;
    if (c_from < p->C) rows_any(p, oy0, oy1, c_from);
}

/* Channels [c_from, C) of output rows [oy0, oy1), any kernel. */
static void rows_any(const kiln__dwcl *p, int64_t oy0, int64_t oy1, int64_t c_from) {
    int64_t xo[KILN__DWCL_TAPS], wo[KILN__DWCL_TAPS];
    const int64_t C = p->C;
    for (int64_t oy = oy0; oy < oy1; oy++)
        for (int64_t ox = 0; ox < p->OW; ox++) {
            const int n = taps(p, oy, ox, xo, wo);
            float *y = p->y + (oy * p->OW + ox) * p->ldy;
            int64_t c = c_from;
            for (; c + 64 <= C; c += 64) {
                v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
                if (p->bias) {
                    a0 = LD16(p->bias + c);
                    a1 = LD16(p->bias + c + 16);
                    a2 = LD16(p->bias + c + 32);
                    a3 = LD16(p->bias + c + 48);
                }
                for (int t = 0; t < n; t++) {
                    const float *x = p->x + xo[t] + c, *w = p->w + wo[t] + c;
                    a0 += LD16(w) * LD16(x);
                    a1 += LD16(w + 16) * LD16(x + 16);
                    a2 += LD16(w + 32) * LD16(x + 32);
                    a3 += LD16(w + 48) * LD16(x + 48);
                }
                clamp16(&a0, p->lo, p->hi);
                clamp16(&a1, p->lo, p->hi);
                clamp16(&a2, p->lo, p->hi);
                clamp16(&a3, p->lo, p->hi);
                memcpy(y + c, &a0, sizeof a0);
                memcpy(y + c + 16, &a1, sizeof a1);
                memcpy(y + c + 32, &a2, sizeof a2);
                memcpy(y + c + 48, &a3, sizeof a3);
            }
            for (; c + 16 <= C; c += 16) {
                v16 a = {0};
                if (p->bias) a = LD16(p->bias + c);
                for (int t = 0; t < n; t++) a += LD16(p->w + wo[t] + c) * LD16(p->x + xo[t] + c);
                clamp16(&a, p->lo, p->hi);
                memcpy(y + c, &a, sizeof a);
            }
            for (; c < C; c++) {
                float a = p->bias ? p->bias[c] : 0.0f;
                for (int t = 0; t < n; t++) a += p->w[wo[t] + c] * p->x[xo[t] + c];
                a = a < p->lo ? p->lo : a;
                y[c] = a > p->hi ? p->hi : a;
            }
        }
}
