/*
 * conv_fewc.c — dense convs of few input channels from phase-split rows
 * (see conv_fewc.h).
 *
 * For an output row, every input row a tap row reads (C x KH of them) is
 * copied once into sx phase rows: phase q holds input columns q - pl,
 * q - pl + sx, ..., zero where they fall into the padding, so output
 * column ox's tap kx is element ox + kx / sx of phase kx % sx: 16 output
 * columns per unaligned load.  Each load then feeds 8 output channels
 * (up to 3 loads side by side: 24 accumulators), the weights broadcast
 * from memory; or in NCHW16C (tile16) 16 or 32 channels of 14 pixels.
 */
#include "ops/nn/conv_fewc.h"

#include <string.h>

/* Phase row length: OW + KW / sx columns plus a vector of slack. */
static int64_t phase_len(const kiln__fewc *p) { return p->OW + (p->KW - 1) / p->sx + 1 + 16; }

/* Floats of the weights regrouped for row_block8: 16 output channels (zero
 * past M) per tap, blocks of 16 channels one after the other. */
/* (16: the "16" of kiln__prepack_layout()'s "fewc16x12"; engine files
 * store it for tactic 12 since "fewcw16": an older kiln, which reads W
 * raw, refuses them instead of reading the zero pages a packed-only W
 * leaves) */
static int64_t packed_w(const kiln__fewc *p) { return (p->M + 15) / 16 * 16 * p->C * p->KH * p->KW; }

int64_t kiln__fewc_packed_w(const kiln__fewc *p) { return packed_w(p); }

void kiln__fewc_pack_w(const kiln__fewc *p, float *wp) {
    const int64_t taps = p->C * p->KH * p->KW;
    for (int64_t m = 0; m < (p->M + 15) / 16 * 16; m++)
        for (int64_t t = 0; t < taps; t++)
            wp[(m / 16 * taps + t) * 16 + m % 16] = m < p->M ? p->w[m * taps + t] : 0.0f;
}

/* Output channels per block of the pointwise kernel: 12 x 32 outputs, 24
 * accumulators, each weight broadcast feeding two FMAs.  Engine files
 * store We packed in this layout (kiln::mbconv tactic 3's prepack): a
 * change of PW_MB must change kiln__prepack_layout()'s string
 * (device/cpu/sgemm.c), which makes older files repack at load. */
#define PW_MB 12
_Static_assert(PW_MB == 12, "PW_MB changed: change \"fewc16x12\" in kiln__prepack_layout() (device/cpu/sgemm.c)");

int64_t kiln__fewc_pointwise_packed(int64_t M, int64_t C) { return (M + PW_MB - 1) / PW_MB * PW_MB * C; }

void kiln__fewc_pointwise_pack(const float *w, int64_t M, int64_t C, float *dst) {
    for (int64_t m0 = 0; m0 < M; m0 += PW_MB) /* [m / PW_MB][c][m % PW_MB], zero past M */
        for (int64_t c = 0; c < C; c++)
            for (int64_t m = m0; m < m0 + PW_MB; m++) *dst++ = m < M ? w[m * C + c] : 0.0f;
}

#define CHUNK 8 /* output rows whose input rows are split at a time */
#define CMAX KILN__FEWC_CMAX
#define KMAX KILN__FEWC_KMAX

int64_t kiln__fewc_scratch(const kiln__fewc *p) {
    return packed_w(p) + (1 + p->C * ((CHUNK - 1) * p->sy + p->KH)) * p->sx * phase_len(p);
}

#if defined(__AVX512F__)
#include <immintrin.h>

static inline __mmask16 tail(int64_t r) { return r >= 16 ? (__mmask16)0xFFFF : r <= 0 ? 0 : (__mmask16)((1u << r) - 1u); }

/* Phase rows of input rows [iy0, iy1) of every channel into ph: row iy of
 * channel c, phase q at ph + ((c * (iy1 - iy0) + iy - iy0) * sx + q) * L;
 * the padding columns are zeros. */
static void split_rows(const kiln__fewc *p, int64_t iy0, int64_t iy1, float *ph) {
    const int64_t L = phase_len(p), s = p->sx, nr = iy1 - iy0;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    for (int64_t c = 0; c < p->C; c++)
        for (int64_t iy = iy0; iy < iy1; iy++) {
            const float *row = p->x + (c * p->H + iy) * p->W;
            for (int64_t q = 0; q < s; q++) {
                float *d = ph + ((c * nr + iy - iy0) * s + q) * L;
                /* columns j * s + q - pl inside [0, W): j in [j0, j1) */
                int64_t j0 = p->pl - q > 0 ? (p->pl - q + s - 1) / s : 0;
                int64_t j1 = p->W + p->pl - q > 0 ? (p->W + p->pl - q + s - 1) / s : 0;
                if (j1 > L) j1 = L;
                if (j0 > j1) j0 = j1;
                int64_t j = j0;
                for (int64_t k = 0; k < j0; k++) d[k] = 0.0f;
                if (s == 1) {
                    memcpy(d + j0, row + j0 + q - p->pl, (size_t)(j1 - j0) * sizeof(float));
                    j = j1;
                } else if (s == 2) { /* 16 even columns of 32 (the last odd one is not read) */
                    for (; j + 16 <= j1; j += 16) {
                        const float *r = row + 2 * j + q - p->pl;
                        _mm512_storeu_ps(d + j, _mm512_permutex2var_ps(_mm512_loadu_ps(r), even,
                                                                       _mm512_maskz_loadu_ps(0x7FFF, r + 16)));
                    }
                    if (j < j1) { /* the last j1 - j, masked (one at a time they were ~1/4 of PP-OCR's split) */
                        const float *r = row + 2 * j + q - p->pl;
                        const int64_t c = p->W - (2 * j + q - p->pl); /* columns left in the row */
                        _mm512_mask_storeu_ps(d + j, tail(j1 - j),
                                              _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(tail(c), r), even,
                                                                     _mm512_maskz_loadu_ps(tail(c - 16) & 0x7FFF, r + 16)));
                        j = j1;
                    }
                }
                for (; j < j1; j++) d[j] = row[j * s + q - p->pl];
                for (int64_t k = j1; k < L; k += 16) _mm512_mask_storeu_ps(d + k, tail(L - k), _mm512_setzero_ps());
            }
        }
}

/* Output channels [m0, m0 + mc) (mc <= 8) of one output row from the
 * phase rows of its taps (tp[t]: where tap t = (c, ky, kx) reads column 0;
 * one loop over the taps, not over c * KH rows and KW columns, whose outer
 * loop GCC ran with the 24 accumulators stored and reloaded: MobileNetV2's
 * stem -3%) and this block's packed weights wp (16 a tap, the first 8
 * read): 8 channels x NV vectors of 16 columns (NV <= 3: 24
 * accumulators; per tap NV loads and 8 broadcasts for 8 x NV FMAs), each
 * output from its bias then tap by tap.  Blocks of 16 channels run as two
 * of 8: one vector of columns and 16 channels a tap took 17 loads for 16
 * FMAs, and MobileNetV2's stem (3 -> 32 3x3/2, fused in kiln::mbconv) ran
 * 10-13% longer so (session 21).  A vector v is only loaded where column
 * ox + 16 v < OW, within the phase rows' slack. */
static inline __attribute__((always_inline)) void tile8(const kiln__fewc *p, const float *const *tp,
                                                        int64_t taps, const float *wp, int64_t m0, int mc,
                                                        const int nv, int64_t ox, float *y, int64_t ys) {
    __m512 acc[8][3];
    for (int m = 0; m < 8; m++)
        for (int v = 0; v < nv; v++) acc[m][v] = _mm512_set1_ps(m < mc ? p->bias[m0 + m] : 0.0f);
    const float *w = wp;
    for (int64_t t = 0; t < taps; t++, w += 16) {
        const float *r = tp[t] + ox;
        __m512 x[3];
        for (int v = 0; v < nv; v++) x[v] = _mm512_loadu_ps(r + 16 * v);
        for (int m = 0; m < 8; m++) {
            const __m512 a = _mm512_set1_ps(w[m]);
            for (int v = 0; v < nv; v++) acc[m][v] = _mm512_fmadd_ps(a, x[v], acc[m][v]);
        }
    }
    const __m512 lo = _mm512_set1_ps(p->lo), hi = _mm512_set1_ps(p->hi);
    for (int m = 0; m < 8; m++) { /* constant indices: the accumulators stay in registers */
        if (m >= mc) break;
        for (int v = 0; v < nv; v++) {
            const int64_t r = p->OW - ox - 16 * v;
            const __mmask16 k = r >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << r) - 1u);
            _mm512_mask_storeu_ps(y + m * ys + ox + 16 * v, k, _mm512_min_ps(_mm512_max_ps(acc[m][v], lo), hi));
        }
    }
}

static void row_block8(const kiln__fewc *p, const float *const *tp, int64_t taps, const float *wp, int64_t m0,
                       int mc, float *y, int64_t ys) {
    /* vectors of 16 columns in tiles of 3, then 2 where 4, 2 or 1 are left
     * (112 columns: 3 + 2 + 2, not 3 + 3 + 1, whose last tile loads as
     * often as it multiplies) */
    for (int64_t ox = 0, left = (p->OW + 15) / 16; left > 0;) {
        const int nv = left == 4 || left == 2 ? 2 : left == 1 ? 1 : 3;
        if (nv == 3)
            tile8(p, tp, taps, wp, m0, mc, 3, ox, y, ys);
        else if (nv == 2)
            tile8(p, tp, taps, wp, m0, mc, 2, ox, y, ys);
        else
            tile8(p, tp, taps, wp, m0, mc, 1, ox, y, ys);
        ox += 16 * nv, left -= nv;
    }
}

/* row_block8 for Y in NCHW16C (Conv tactic 17: a stem conv starting a 16c
 * region): NV x 16 channels from m0 of PX output pixels a tile, acc[v][i]
 * holding channels m0 + 16 v.. of pixel ox + i; per tap NV loads of the
 * packed blocks' 16 weights and a broadcast of each pixel's input from the
 * phase row, NV x PX FMAs (2 x 14: 16 loads for 28 FMAs), summed in
 * row_block8's order per output (the same bits); each pixel's 16 channels
 * then one store.  y: row oy of block m0 / 16, the next block ys floats on. */
#define PX 14
static inline __attribute__((always_inline)) void tile16(const kiln__fewc *p, const float *const *tp,
                                                         int64_t taps, const float *wp, int64_t m0, int nv,
                                                         int64_t ox, float *y, int64_t ys) {
    __m512 acc[2][PX];
    for (int v = 0; v < nv; v++)
        for (int i = 0; i < PX; i++) acc[v][i] = _mm512_loadu_ps(p->bias + m0 + 16 * v);
    const float *w = wp;
    for (int64_t t = 0; t < taps; t++, w += 16) {
        const __m512 w0 = _mm512_loadu_ps(w), w1 = nv == 2 ? _mm512_loadu_ps(w + taps * 16) : w0;
        const float *r = tp[t] + ox; /* (the phase rows' slack covers 16 columns) */
        __asm__("" : "+r"(r)); /* r[i]: r plus a constant (else 14 offsets ox + i live in spilled GPRs) */
        for (int i = 0; i < PX; i++) {
            const __m512 a = _mm512_set1_ps(r[i]);
            acc[0][i] = _mm512_fmadd_ps(a, w0, acc[0][i]);
            if (nv == 2) acc[1][i] = _mm512_fmadd_ps(a, w1, acc[1][i]);
        }
    }
    const __m512 lo = _mm512_set1_ps(p->lo), hi = _mm512_set1_ps(p->hi);
    for (int v = 0; v < nv; v++)
        for (int i = 0; i < PX; i++) { /* constant indices: the accumulators stay in registers */
            if (ox + i >= p->OW) break;
            _mm512_storeu_ps(y + v * ys + (ox + i) * 16, _mm512_min_ps(_mm512_max_ps(acc[v][i], lo), hi));
        }
}

static void row_block16(const kiln__fewc *p, const float *const *tp, int64_t taps, const float *wp, int64_t m0,
                        float *y, int64_t ys) {
    for (int64_t ox = 0; ox < p->OW; ox += PX)
        if (p->M - m0 >= 32)
            tile16(p, tp, taps, wp, m0, 2, ox, y, ys);
        else
            tile16(p, tp, taps, wp, m0, 1, ox, y, ys);
}

void kiln__fewc_rows(const kiln__fewc *p, int64_t oy0, int64_t oy1, float *y, int64_t ys, float *scratch) {
    const int64_t taps = p->C * p->KH * p->KW, L = phase_len(p);
    float *zero = scratch + packed_w(p), *ph = zero + p->sx * L; /* zero: a padding row */
    const float *wp = p->wp ? p->wp : scratch;
    if (!p->wp) kiln__fewc_pack_w(p, scratch);
    memset(zero, 0, (size_t)(p->sx * L) * sizeof(float));
    int64_t off[KMAX];
    for (int64_t kx = 0; kx < p->KW; kx++) off[kx] = kx % p->sx * L + kx / p->sx;
    for (int64_t b0 = oy0; b0 < oy1; b0 += CHUNK) { /* split the chunk's input rows once */
        int64_t b1 = b0 + CHUNK < oy1 ? b0 + CHUNK : oy1;
        int64_t iy0 = b0 * p->sy - p->pt, iy1 = (b1 - 1) * p->sy - p->pt + p->KH;
        iy0 = iy0 < 0 ? 0 : iy0 > p->H ? p->H : iy0;
        iy1 = iy1 > p->H ? p->H : iy1 < iy0 ? iy0 : iy1;
        split_rows(p, iy0, iy1, ph);
        /* the next chunk's input rows (each channel's a contiguous run),
         * a share per output row: split_rows otherwise waits on them, and
         * a network's first layer reads its input from L3 or memory
         * (MobileNetV2's stem in kiln::mbconv: 28 of its 141 us a run,
         * -22..-33 us so).  After the last chunk, the rows of the chunk
         * that follows oy1: kiln::mbconv's next band starts there. */
        int64_t nx0 = b1 * p->sy - p->pt, nx1 = (b1 + CHUNK - 1) * p->sy - p->pt + p->KH;
        nx0 = nx0 < iy1 ? iy1 : nx0; /* rows split already stay in cache */
        nx1 = nx1 > p->H ? p->H : nx1;
        const int64_t run = nx1 > nx0 ? (nx1 - nx0) * p->W : 0; /* floats of a channel's run */
        const int64_t lines = (run * 4 + 63) / 64;
        for (int64_t oy = b0; oy < b1; oy++) {
            const int64_t l0 = lines * (oy - b0) / (b1 - b0), l1 = lines * (oy - b0 + 1) / (b1 - b0);
            for (int64_t c = 0; c < p->C; c++)
                for (int64_t l = l0; l < l1; l++)
                    _mm_prefetch((const char *)(p->x + (c * p->H + nx0) * p->W) + 64 * l, _MM_HINT_T0);
            const float *tp[CMAX * KMAX * KMAX], **t = tp; /* tap (c, ky, kx)'s phase row, off[kx] on */
            for (int64_t c = 0; c < p->C; c++)
                for (int64_t ky = 0; ky < p->KH; ky++) {
                    int64_t iy = oy * p->sy - p->pt + ky;
                    const float *row = iy >= iy0 && iy < iy1 ? ph + (c * (iy1 - iy0) + iy - iy0) * p->sx * L : zero;
                    for (int64_t kx = 0; kx < p->KW; kx++) *t++ = row + off[kx];
                }
            float *yr = y + (oy - oy0) * p->OW * (p->nchw16c ? 16 : 1);
            for (int64_t m0 = 0; m0 < p->M; m0 += p->nchw16c && p->M - m0 >= 32 ? 32 : 16)
                if (p->nchw16c)
                    row_block16(p, tp, taps, wp + m0 * taps, m0, yr + m0 / 16 * ys, ys);
                else /* the block of 16 channels as two of 8 (the packed block's first and second 8) */
                    for (int64_t h = m0; h < m0 + 16 && h < p->M; h += 8)
                        row_block8(p, tp, taps, wp + m0 * taps + (h - m0), h, p->M - h < 8 ? (int)(p->M - h) : 8,
                                   yr + h * ys, ys);
        }
    }
}

/* Inputs per column chunk of the pointwise kernel (C of its rows stay in
 * L1 while every block of output channels reads them). */
#define PW_CHUNK 256

/* The 12 x 32 tile of block wb at column j: acc[0..12) the outputs
 * j .. j + 15, acc[12..24) j + 16 .. j + 31.  full: all 32 inside, plain
 * loads (a masked load takes a vector ALU slot beside the FMAs'). */
static inline __attribute__((always_inline)) void pw_tile(const int full, const float *x, int64_t xs, int64_t C,
                                                          const float *wb, __mmask16 k0, __mmask16 k1,
                                                          __m512 *a0, __m512 *a1) {
    const float *w = wb;
    for (int64_t c = 0; c < C; c++, w += PW_MB) {
        const float *xc = x + c * xs;
        const __m512 v0 = full ? _mm512_loadu_ps(xc) : _mm512_maskz_loadu_ps(k0, xc);
        const __m512 v1 = full ? _mm512_loadu_ps(xc + 16) : _mm512_maskz_loadu_ps(k1, xc + 16);
        for (int m = 0; m < PW_MB; m++) {
            const __m512 wm = _mm512_set1_ps(w[m]);
            a0[m] = _mm512_fmadd_ps(wm, v0, a0[m]);
            a1[m] = _mm512_fmadd_ps(wm, v1, a1[m]);
        }
    }
}

void kiln__fewc_pointwise(const kiln__fewc *p, const float *wpk, const float *x, int64_t xs, int64_t n, float *y,
                          int64_t ys) {
    const int64_t C = p->C;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int64_t j0 = 0; j0 < n; j0 += PW_CHUNK) {
        const int64_t j1 = j0 + PW_CHUNK < n ? j0 + PW_CHUNK : n;
        for (int64_t m0 = 0; m0 < p->M; m0 += PW_MB) {
            const int64_t mc = p->M - m0 < PW_MB ? p->M - m0 : PW_MB;
            const float *wb = wpk + m0 * C;
            for (int64_t j = j0; j < j1; j += 32) {
                const __mmask16 k0 = tail(j1 - j), k1 = tail(j1 - j - 16);
                __m512 a0[PW_MB], a1[PW_MB];
                for (int m = 0; m < PW_MB; m++) a0[m] = a1[m] = _mm512_set1_ps(m < mc ? p->bias[m0 + m] : 0.0f);
                if (j + 32 <= j1)
                    pw_tile(1, x + j, xs, C, wb, k0, k1, a0, a1);
                else
                    pw_tile(0, x + j, xs, C, wb, k0, k1, a0, a1);
                const __m512 lo = _mm512_set1_ps(p->lo), hi = _mm512_set1_ps(p->hi);
                if (p->split) { /* j is even: the even outputs of 32, then the odd ones */
                    const int64_t r = j1 - j;
                    const __mmask16 ke = tail((r + 1) / 2), ko = tail(r / 2);
                    for (int m = 0; m < PW_MB; m++) {
                        if (m >= mc) break;
                        __m512 v0 = _mm512_min_ps(_mm512_max_ps(a0[m], lo), hi);
                        __m512 v1 = _mm512_min_ps(_mm512_max_ps(a1[m], lo), hi);
                        float *o = y + (m0 + m) * ys + j / 2;
                        _mm512_mask_storeu_ps(o, ke, _mm512_permutex2var_ps(v0, even, v1));
                        _mm512_mask_storeu_ps(o + p->split, ko, _mm512_permutex2var_ps(v0, odd, v1));
                    }
                    continue;
                }
                for (int m = 0; m < PW_MB; m++) { /* constant indices: the accumulators stay in registers */
                    if (m >= mc) break;
                    float *o = y + (m0 + m) * ys + j;
                    _mm512_mask_storeu_ps(o, k0, _mm512_min_ps(_mm512_max_ps(a0[m], lo), hi));
                    _mm512_mask_storeu_ps(o + 16, k1, _mm512_min_ps(_mm512_max_ps(a1[m], lo), hi));
                }
            }
        }
    }
}

#else

void kiln__fewc_pointwise(const kiln__fewc *p, const float *wpk, const float *x, int64_t xs, int64_t n, float *y,
                          int64_t ys) {
    (void)p;
    (void)wpk;
    (void)x;
    (void)xs;
    (void)n;
    (void)y;
    (void)ys;
}

void kiln__fewc_rows(const kiln__fewc *p, int64_t oy0, int64_t oy1, float *y, int64_t ys, float *scratch) {
    (void)p;
    (void)oy0;
    (void)oy1;
    (void)y;
    (void)ys;
    (void)scratch;
}

#endif
