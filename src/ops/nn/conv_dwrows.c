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
#define CK_MAX 8 /* column chunks a band's tap masks are computed for at once */

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

/* Where column chunk ox0's taps read (every channel of a conv alike). */
static inline __attribute__((always_inline)) void chunk_at(const kiln__dwrows *p, const int64_t KW, const int s2,
                                                           int64_t ox0, chunk *ck) {
    int64_t nv = p->OW - ox0 < 16 ? p->OW - ox0 : 16;
    ck->store = (__mmask16)((1u << nv) - 1u);
    for (int64_t kx = 0; kx < KW; kx++) {
        int64_t b = ox0 * p->sx + kx * p->dx - p->pl;
        if (p->phase) { /* column 2 ox + off: phase off & 1, index ox + floor(off / 2) */
            int64_t off = kx * p->dx - p->pl;
            b = ox0 + (off - (off & 1)) / 2;
            ck->base[kx] = b + (off & 1) * p->phase;
            ck->lo[kx] = lane_mask(b, p->W >> 1);
            ck->hi[kx] = 0;
            continue;
        }
        ck->base[kx] = b;
        ck->lo[kx] = lane_mask(b, p->W);
        ck->hi[kx] = s2 ? lane_mask(b + 16, p->W) : 0;
    }
}

/* Output rows [oy0, oy1) of output channel m of image n.  cks: the chunks
 * of every ox0 (the band computed them once for all its channels), or NULL
 * (each computed here, per channel). */
static inline __attribute__((always_inline)) void plane_rows(const int64_t KH, const int64_t KW, const int64_t SY,
                                                             const int64_t DY, const int s2, const int hoist,
                                                             const kiln__dwrows *p, const chunk *cks, int64_t n,
                                                             int64_t m, int64_t oy0, int64_t oy1) {
    const int64_t xs = p->xs ? p->xs : p->H * p->W, ys = p->ys ? p->ys : p->OH * p->OW;
    const float *xc = p->x + (n * p->C + m / p->mult) * xs;
    const float *wm = p->w + m * KH * KW;
    float *yc = p->y + (n * p->C * p->mult + m) * ys;
    const float bias = p->bias ? p->bias[m] : 0.0f;
    __m512 w9[9];
    if (hoist)
        for (int k = 0; k < 9; k++) w9[k] = _mm512_set1_ps(wm[k]);
    const __m512 *wv = hoist ? w9 : NULL;
    chunk own;
    for (int64_t ox0 = 0; ox0 < p->OW; ox0 += 16) {
        const chunk *ck = cks ? &cks[ox0 / 16] : &own;
        if (!cks) chunk_at(p, KW, s2, ox0, &own);
        int64_t oy = oy0;
        for (; oy + RB <= oy1; oy += RB) rows(RB, KH, KW, SY, DY, p, s2, xc, wv, wm, bias, ck, yc, oy, ox0);
        switch (oy1 - oy) {
        case 7: rows(7, KH, KW, SY, DY, p, s2, xc, wv, wm, bias, ck, yc, oy, ox0); break;
        case 6: rows(6, KH, KW, SY, DY, p, s2, xc, wv, wm, bias, ck, yc, oy, ox0); break;
        case 5: rows(5, KH, KW, SY, DY, p, s2, xc, wv, wm, bias, ck, yc, oy, ox0); break;
        case 4: rows(4, KH, KW, SY, DY, p, s2, xc, wv, wm, bias, ck, yc, oy, ox0); break;
        case 3: rows(3, KH, KW, SY, DY, p, s2, xc, wv, wm, bias, ck, yc, oy, ox0); break;
        case 2: rows(2, KH, KW, SY, DY, p, s2, xc, wv, wm, bias, ck, yc, oy, ox0); break;
        case 1: rows(1, KH, KW, SY, DY, p, s2, xc, wv, wm, bias, ck, yc, oy, ox0); break;
        default: break;
        }
    }
}

/* ---------------------------------------------- 3x3, pads 1: rolling rows
 *
 * MobileNet's depthwise convs (3x3, left pad 1, OW = W at stride 1 or
 * W / 2 from the phase-split rows at stride 2) walk each column chunk
 * down the band once.  Input row iy is loaded (three taps) once and feeds
 * every output row it is a tap row of, whose accumulators roll through
 * three (stride 1) or two (stride 2) registers; an output row is clamped
 * and stored as soon as its last tap row is in.  The 9 weights stay in
 * registers for the whole plane and the masks in mask registers for the
 * whole chunk.  No row tests in the loop: a row outside the band's
 * [0, H) (the pads) is read from a row of zeros, and the accumulators of
 * rows outside [oy0, oy1) that the first and last steps touch are never
 * stored.  Two column chunks go side by side (two independent sets of
 * chains).  The same sums in the same order as rows() (bias, then ky,
 * then kx; a pad row adds zeros where rows() skips it, as the pad
 * columns' masked lanes do in both).  Planes up to 16 wide (one chunk)
 * go two channels a pass instead: one chunk's chains alone are too short
 * to keep the FMAs busy. */

#define RC 2      /* column chunks walked together */
#define ZROW 1088 /* floats of the zero row: planes up to ZROW - 64 wide */

static const float zero_row[ZROW] __attribute__((aligned(64)));

/* Chunk j of a pass reads plane x[q] with weights w[q], q = ch ? j : 0:
 * ch 0, nc chunks of one plane side by side; ch 1, the one chunk of nc
 * planes (planes up to 16 wide, whose one chunk alone is a short chain). */
typedef struct roll {
    const float *x[RC]; /* the channels' input planes */
    float *y[RC];       /* their output planes (row oy_base first) */
    int64_t pitch, H, pt, OW, oy0, oy1, oy_base, odd;
    int clamp;
    __m512 w[RC][9], bias[RC], lo, hi;
} roll;

/* Where input row iy of plane q starts (its even columns, phase); the
 * zero row where iy is a pad row. */
static inline __attribute__((always_inline)) const float *roll_row(const roll *c, int q, int64_t iy) {
    const float *r = c->x[q] + iy * c->pitch;
    return (uint64_t)iy < (uint64_t)c->H ? r : zero_row + 32;
}

/* Tap kx of a chunk: a masked load where bit kx of mk is set (lanes in
 * the pads or past the row), else a plain one (a masked load costs a
 * vector ALU slot beside the FMAs': the interior chunks are ~15% faster
 * without). */
static inline __attribute__((always_inline)) __m512 roll_tap(const float *p, __mmask16 m, const int mk, int kx) {
    __m512 v = mk >> kx & 1 ? _mm512_maskz_loadu_ps(m, p) : _mm512_loadu_ps(p);
    __asm__("" : "+v"(v)); /* one load: GCC folded it into each FMA that reads it (the right tap: 3) */
    return v;
}

/* The three taps of chunks ox[0..nc) of input row iy (chunk j's masks:
 * bits 3 j .. 3 j + 2 of mk). */
static inline __attribute__((always_inline)) void roll_load(const roll *c, const int nc, const int s2, const int ch,
                                                            const int mk, const float *const *r, const int64_t *ox,
                                                            const __mmask16 (*m)[3], __m512 (*v)[3]) {
    for (int j = 0; j < nc; j++) { /* lane 0 of the left tap at column -1 is masked off */
        /* (the zero row has no odd half; unchecked steps never pass it, but
         * leaving the test out of them cost them up to 20%: GCC's choice) */
        const float *re = r[ch ? j : 0], *ro = s2 && re != zero_row + 32 ? re + c->odd : re;
        v[j][0] = roll_tap((const float *)((uintptr_t)(ro + ox[j]) - 4), m[j][0], mk >> 3 * j, 0);
        v[j][1] = roll_tap(re + ox[j], m[j][1], mk >> 3 * j, 1);
        v[j][2] = roll_tap((s2 ? ro : re + 1) + ox[j], m[j][2], mk >> 3 * j, 2);
    }
}

/* acc[j] (or bias, first) += tap row ky of v[j] (weights 3 ky .. 3 ky + 2). */
static inline __attribute__((always_inline)) void roll_fma(const roll *c, const int nc, const int ch, int ky,
                                                           int first, __m512 (*v)[3], __m512 *acc) {
    for (int j = 0; j < nc; j++) {
        __m512 a = first ? c->bias[ch ? j : 0] : acc[j];
        for (int kx = 0; kx < 3; kx++) a = _mm512_fmadd_ps(c->w[ch ? j : 0][3 * ky + kx], v[j][kx], a);
        acc[j] = a;
    }
}

static inline __attribute__((always_inline)) void roll_store(const roll *c, const int nc, const int ch, int64_t oy,
                                                             const int64_t *ox, const __mmask16 (*m)[3],
                                                             __m512 *acc) {
    for (int j = 0; j < nc; j++) {
        __m512 a = acc[j];
        if (c->clamp) a = _mm512_min_ps(c->hi, _mm512_max_ps(c->lo, a)); /* NaN stays NaN, as in rows() */
        _mm512_mask_storeu_ps(c->y[ch ? j : 0] + (oy - c->oy_base) * c->OW + ox[j], m[j][1], a);
    }
}

/* One step s.  Stride 1: input row s - pt is tap row 0 of output row s
 * (nw), 1 of s - 1 (md) and 2 of s - 2 (od, stored after it).  Stride 2:
 * input row 2 s - pt is tap row 2 of output row s - 1 (od, stored) and 0
 * of s (nw), the next input row tap row 1 of s.  The first steps of a
 * chunk leave out od (first) and md (first > 1).  Checked steps find
 * their rows by roll_row (a pad row: the zero row); the others, which
 * read rows inside the plane only, at rp[q], which they advance (one
 * pointer a plane: with the row computed and tested per step GCC kept a
 * pointer per unrolled row in memory, ~6 scalar instructions a row). */
static inline __attribute__((always_inline)) void roll_step(const roll *c, const int nc, const int s2, const int ch,
                                                            const int mk, const int first, const int checked,
                                                            int64_t s, const float **rp, const int64_t *ox,
                                                            const __mmask16 (*m)[3], __m512 *nw, __m512 *md,
                                                            __m512 *od) {
    const int nq = ch ? nc : 1;
    const int64_t iy = s2 ? 2 * s - c->pt : s - c->pt;
    const float *r[RC];
    __m512 v[RC][3];
    for (int q = 0; q < nq; q++) r[q] = checked ? roll_row(c, q, iy) : rp[q];
    roll_load(c, nc, s2, ch, mk, r, ox, m, v);
    if (!first) roll_fma(c, nc, ch, 2, 0, v, od);
    if (!s2 && first != 1) roll_fma(c, nc, ch, 1, 0, v, md);
    roll_fma(c, nc, ch, 0, 1, v, nw);
    if (!first) roll_store(c, nc, ch, s - (s2 ? 1 : 2), ox, m, od);
    if (s2) {
        for (int q = 0; q < nq; q++) r[q] = checked ? roll_row(c, q, iy + 1) : rp[q] + c->pitch;
        roll_load(c, nc, 1, ch, mk, r, ox, m, v);
        roll_fma(c, nc, ch, 1, 0, v, nw);
    }
    if (!checked)
        for (int q = 0; q < nq; q++) {
            rp[q] += (s2 ? 2 : 1) * c->pitch;
            __asm__("" : "+r"(rp[q])); /* one register, not one per unrolled step */
        }
}

/* Column chunks ox0, ox0 + 16, ... (nc of them) down rows [oy0, oy1),
 * the taps of mk's bits masked (roll_load). */
static inline __attribute__((always_inline)) void roll_chunks(const roll *c, const int nc, const int s2, const int ch,
                                                              const int mk, int64_t ox0, int64_t W) {
    int64_t ox[RC];
    __mmask16 m[RC][3];
    for (int j = 0; j < nc; j++) {
        ox[j] = ox0 + (ch ? 0 : 16 * j);
        int64_t n = c->OW - ox[j] < 16 ? c->OW - ox[j] : 16;
        m[j][1] = (__mmask16)((1u << n) - 1u);
        m[j][0] = ox[j] == 0 ? m[j][1] & (__mmask16)~1u : m[j][1]; /* column -1: the left pad */
        /* stride 1: column ox + 16 may be W, the right pad; phase: odd column ox is inside */
        m[j][2] = s2 ? m[j][1] : m[j][1] & lane_mask(ox[j] + 1, W);
    }
    __m512 a0[RC], a1[RC], a2[RC];
    int64_t s = c->oy0, n = c->oy1 - c->oy0; /* steps after the first ones: one per output row */
    /* the steps from a row >= 0 (past the first ones: the top pad is one
     * row in MobileNet) to `in` read rows inside the plane only */
    const int64_t in = s2 ? (c->H + c->pt) / 2 : c->H + c->pt;
    const int nq = ch ? nc : 1;
    const float *rp[RC]; /* (all RC set: with one left unset GCC kept the array in memory, +10-20%) */
    if (s2) {
        roll_step(c, nc, 1, ch, mk, 1, 1, s++, rp, ox, m, a0, NULL, NULL);
        const int64_t r0 = 2 * s - c->pt; /* (< 0: all steps checked) */
        for (int q = 0; q < RC; q++) rp[q] = c->x[q < nq ? q : 0] + (r0 > 0 ? r0 : 0) * c->pitch;
        for (; n >= 2 && r0 >= 0 && s + 2 <= in; n -= 2, s += 2) {
            roll_step(c, nc, 1, ch, mk, 0, 0, s, rp, ox, m, a1, NULL, a0);
            roll_step(c, nc, 1, ch, mk, 0, 0, s + 1, rp, ox, m, a0, NULL, a1);
        }
        for (; n >= 2; n -= 2, s += 2) {
            roll_step(c, nc, 1, ch, mk, 0, 1, s, rp, ox, m, a1, NULL, a0);
            roll_step(c, nc, 1, ch, mk, 0, 1, s + 1, rp, ox, m, a0, NULL, a1);
        }
        if (n) roll_step(c, nc, 1, ch, mk, 0, 1, s, rp, ox, m, a1, NULL, a0);
        return;
    }
    roll_step(c, nc, 0, ch, mk, 1, 1, s++, rp, ox, m, a0, NULL, NULL);
    roll_step(c, nc, 0, ch, mk, 2, 1, s++, rp, ox, m, a1, a0, NULL);
    const int64_t r0 = s - c->pt;
    for (int q = 0; q < RC; q++) rp[q] = c->x[q < nq ? q : 0] + (r0 > 0 ? r0 : 0) * c->pitch;
    for (; n >= 3 && r0 >= 0 && s + 3 <= in; n -= 3, s += 3) {
        roll_step(c, nc, 0, ch, mk, 0, 0, s, rp, ox, m, a2, a1, a0);
        roll_step(c, nc, 0, ch, mk, 0, 0, s + 1, rp, ox, m, a0, a2, a1);
        roll_step(c, nc, 0, ch, mk, 0, 0, s + 2, rp, ox, m, a1, a0, a2);
    }
    for (; n >= 3; n -= 3, s += 3) {
        roll_step(c, nc, 0, ch, mk, 0, 1, s, rp, ox, m, a2, a1, a0);
        roll_step(c, nc, 0, ch, mk, 0, 1, s + 1, rp, ox, m, a0, a2, a1);
        roll_step(c, nc, 0, ch, mk, 0, 1, s + 2, rp, ox, m, a1, a0, a2);
    }
    if (n) roll_step(c, nc, 0, ch, mk, 0, 1, s, rp, ox, m, a2, a1, a0);
    if (n > 1) roll_step(c, nc, 0, ch, mk, 0, 1, s + 1, rp, ox, m, a0, a2, a1);
}

/* roll_chunks with the taps that need a mask masked: the left tap of
 * column 0, the right tap that reads column W (stride 1), every tap of a
 * chunk that ends past OW (it may read past the tensor).  The cases listed
 * are the edges of MobileNet's planes; any other runs all masked. */
static inline __attribute__((always_inline)) void roll_cols(const roll *c, const int nc, const int s2, const int ch,
                                                            int64_t ox0, int64_t W) {
    int mk = 0;
    for (int j = 0; j < nc; j++) {
        int64_t ox = ox0 + (ch ? 0 : 16 * j);
        if (ox == 0) mk |= 1 << 3 * j;
        if (ox + 16 > c->OW)
            mk |= 7 << 3 * j;
        else if (!s2 && ox + 17 > W)
            mk |= 4 << 3 * j;
    }
    switch (mk) {
    case 0: roll_chunks(c, nc, s2, ch, 0, ox0, W); break;
    case 1: roll_chunks(c, nc, s2, ch, 1, ox0, W); break;
    case 4: roll_chunks(c, nc, s2, ch, 4, ox0, W); break;
    case 040: roll_chunks(c, nc, s2, ch, 040, ox0, W); break;
    case 041: roll_chunks(c, nc, s2, ch, 041, ox0, W); break;
    case 070: roll_chunks(c, nc, s2, ch, 070, ox0, W); break;
    case 071: roll_chunks(c, nc, s2, ch, 071, ox0, W); break;
    default: roll_chunks(c, nc, s2, ch, 077, ox0, W); break;
    }
}

/* Output rows [oy0, oy1) of output channels [m0, m1) of image n (3x3,
 * dilation 1, left pad 1, OW = W at stride 1 or p->phase with OW = W / 2). */
static inline __attribute__((always_inline)) void plane_roll(const int s2, const kiln__dwrows *p, int64_t n,
                                                             int64_t m0, int64_t m1, int64_t oy0, int64_t oy1) {
    const int64_t xs = p->xs ? p->xs : p->H * p->W, ys = p->ys ? p->ys : p->OH * p->OW;
    roll c = {.pitch = s2 ? p->W >> 1 : p->W, .H = p->H, .pt = p->pt, .OW = p->OW, .oy0 = oy0, .oy1 = oy1,
              .oy_base = p->oy_base, .odd = p->phase, .clamp = p->clamp};
    c.lo = _mm512_set1_ps(p->lo);
    c.hi = _mm512_set1_ps(p->hi);
    const int pairs = p->OW <= 16; /* one chunk a plane: RC planes a pass */
    for (int64_t m = m0; m < m1;) {
        const int nc = pairs && m1 - m >= RC ? RC : 1;
        for (int q = 0; q < nc; q++, m++) {
            const float *wm = p->w + m * 9;
            c.x[q] = p->x + (n * p->C + m / p->mult) * xs;
            c.y[q] = p->y + (n * p->C * p->mult + m) * ys;
            for (int k = 0; k < 9; k++) c.w[q][k] = _mm512_set1_ps(wm[k]);
            c.bias[q] = _mm512_set1_ps(p->bias ? p->bias[m] : 0.0f);
        }
        if (nc == RC) {
            roll_cols(&c, RC, s2, 1, 0, p->W);
            continue;
        }
        int64_t ox0 = 0;
        for (; ox0 + 16 * (RC - 1) < p->OW; ox0 += 16 * RC) roll_cols(&c, RC, s2, 0, ox0, p->W);
        for (; ox0 < p->OW; ox0 += 16) roll_cols(&c, 1, s2, 0, ox0, p->W);
    }
}

static void plane_roll_s1(const kiln__dwrows *p, int64_t n, int64_t m0, int64_t m1, int64_t oy0, int64_t oy1) {
    plane_roll(0, p, n, m0, m1, oy0, oy1);
}

static void plane_roll_phase(const kiln__dwrows *p, int64_t n, int64_t m0, int64_t m1, int64_t oy0, int64_t oy1) {
    plane_roll(1, p, n, m0, m1, oy0, oy1);
}

static void plane_3x3_s1(const kiln__dwrows *p, const chunk *cks, int64_t n, int64_t m, int64_t oy0, int64_t oy1) {
    plane_rows(3, 3, 1, 1, 0, 1, p, cks, n, m, oy0, oy1);
}

static void plane_3x3_s2(const kiln__dwrows *p, const chunk *cks, int64_t n, int64_t m, int64_t oy0, int64_t oy1) {
    plane_rows(3, 3, 2, 1, 1, 1, p, cks, n, m, oy0, oy1);
}

static void plane_3x3_phase(const kiln__dwrows *p, const chunk *cks, int64_t n, int64_t m, int64_t oy0, int64_t oy1) {
    plane_rows(3, 3, 2, 1, 0, 1, p, cks, n, m, oy0, oy1);
}

/* Other kernels of dilation 1 with sizes as constants: 3x3 of another row
 * stride than its column stride (PP-OCR's (2, 1)) and 5x5 at row strides
 * 1 and 2.  With the sizes known only at run time, rows() tests every tap
 * of every output row with a division by DY: PP-OCR's 5x5 depthwise convs
 * over 2-3 rows of 96 ran at 1/4 of tactic 5's speed, its 3x3/(2, 1) block
 * 4x slower than the stride-1 one of twice the outputs. */
#define PLANE_K(K, SY, S2)                                                                                             \
    static void plane_##K##_##SY##_##S2(const kiln__dwrows *p, const chunk *cks, int64_t n, int64_t m, int64_t oy0, \
                                         int64_t oy1) {     \
        plane_rows(K, K, SY, 1, S2, K == 3, p, cks, n, m, oy0, oy1);                                                        \
    }
PLANE_K(3, 1, 1)
PLANE_K(3, 2, 0)
PLANE_K(5, 1, 0)
PLANE_K(5, 1, 1)
PLANE_K(5, 2, 0)
PLANE_K(5, 2, 1)
#undef PLANE_K

typedef void (*plane_fn)(const kiln__dwrows *, const chunk *, int64_t, int64_t, int64_t, int64_t);

static void plane_dil1(const kiln__dwrows *p, const chunk *cks, int64_t n, int64_t m, int64_t oy0, int64_t oy1) {
    plane_rows(p->KH, p->KW, p->sy, 1, p->sx == 2 && !p->phase, 0, p, cks, n, m, oy0, oy1);
}

static void plane_any(const kiln__dwrows *p, const chunk *cks, int64_t n, int64_t m, int64_t oy0, int64_t oy1) {
    plane_rows(p->KH, p->KW, p->sy, p->dy, p->sx == 2 && !p->phase, 0, p, cks, n, m, oy0, oy1);
}

/* The plane function of a conv that is not 3x3 of equal strides. */
static plane_fn plane_other(const kiln__dwrows *p) {
    const int s2 = p->sx == 2 && !p->phase, sq = p->KH == p->KW && p->dx == 1;
    if (p->dy != 1) return plane_any;
    if (sq && p->KH == 3 && p->sy == 1 && s2) return plane_3_1_1; /* (1, 2) */
    if (sq && p->KH == 3 && p->sy == 2 && !s2) return plane_3_2_0; /* (2, 1) */
    if (sq && p->KH == 5 && p->sy == 1) return s2 ? plane_5_1_1 : plane_5_1_0;
    if (sq && p->KH == 5 && p->sy == 2) return s2 ? plane_5_2_1 : plane_5_2_0;
    return plane_dil1;
}

void kiln__dwrows_band(const kiln__dwrows *p, int64_t n, int64_t m0, int64_t m1, int64_t oy0, int64_t oy1) {
    const int is3x3 = p->KH == 3 && p->KW == 3 && p->dy == 1 && p->dx == 1 && p->sy == p->sx;
    const int roll1 = is3x3 && p->pl == 1 && !p->phase && p->sx == 1 && p->OW == p->W && p->W <= ZROW - 64,
              roll2 = is3x3 && p->pl == 1 && p->phase && p->OW == p->W / 2 && p->W / 2 <= ZROW - 64;
    if (roll1) {
        plane_roll_s1(p, n, m0, m1, oy0, oy1);
        return;
    }
    if (roll2) {
        plane_roll_phase(p, n, m0, m1, oy0, oy1);
        return;
    }
    const plane_fn other = is3x3 ? NULL : plane_other(p);
    /* Planes up to CK_MAX chunks wide: their tap masks once for all the
     * band's channels (PP-OCR's 5x5 over 2-3 rows of 96: computing them per
     * channel took about as long as the FMAs) */
    chunk cks[CK_MAX];
    const int64_t nck = (p->OW + 15) / 16;
    const chunk *ck = nck <= CK_MAX && m1 - m0 > 1 ? cks : NULL;
    for (int64_t j = 0; ck && j < nck; j++) chunk_at(p, p->KW, p->sx == 2 && !p->phase, 16 * j, &cks[j]);
    for (int64_t m = m0; m < m1; m++) {
        if (is3x3 && p->phase)
            plane_3x3_phase(p, ck, n, m, oy0, oy1);
        else if (is3x3 && p->sx == 1)
            plane_3x3_s1(p, ck, n, m, oy0, oy1);
        else if (is3x3)
            plane_3x3_s2(p, ck, n, m, oy0, oy1);
        else
            other(p, ck, n, m, oy0, oy1);
    }
}

/* Work units [b, e): (image, block of rb rows, block of cb channels), the
 * channels inner: a thread's contiguous share of the units is a band of
 * rows of every plane where a plane has several blocks of rows, the split
 * of the 1x1 convs' GEMMs and of the ops between them
 * (kiln__ops_par_planes).  The fused epilogue runs on each unit's outputs
 * while they are in cache (dense NCHW y only: xs, ys, oy_base 0). */
static void units(void *ud, int64_t b, int64_t e) {
    const kiln__dwrows *p = ud;
    const int64_t M = p->C * p->mult, plane = p->OH * p->OW;
    for (int64_t u = b; u < e; u++) {
        int64_t mb = u % p->ncb, q = u / p->ncb, rbk = q % p->nrb, n = q / p->nrb;
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
