/*
 * conv_direct16c.c — direct convs in NCHW16C (conv_direct16c.h says why).
 *
 * A unit is a run of up to PT output pixels of one output row x one block
 * of 32 output channels (16 for M's last block when M % 32 == 16): 2 x PT
 * accumulators; per input channel block, kernel row, kernel column and
 * input channel, two weight vectors and one broadcast per pixel from X's
 * 16-channel line, 2 x PT FMAs (conv_pw16c.c's inner loop, per tap).  The
 * sum over C and the taps runs whole in registers (no split: the bits do
 * not depend on the threads), then bias, residual and Relu are applied
 * before the one store of each pixel.
 *
 * Padding: kernel rows outside X are skipped per unit (its pixels share
 * the row).  Columns: the pixels whose taps leave X at a row's edges (the
 * first ceil(pl / sw) and the last few) are units of one pixel with the
 * kernel columns cut to those inside; the others form balanced runs that
 * read every tap with no check (the fast path).  A one-pixel unit is
 * latency-bound (2 accumulators), so edges cost ~4x per pixel: 1 pixel of
 * ResNet's 28-, 14- and 7-wide stride-2 rows.
 */
#include "ops/nn/conv_direct16c.h"
#include "ops/nn/conv_pw16c.h"

#include "kiln_int.h"
#include "ops/common/ops_util.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* Pixels per run: 2 x 12 accumulators + 2 weight vectors + a broadcast fit
 * AVX-512's 32 registers (tactic 13's tile). */
#define PT 12
#define OB 32 /* output channels per block */
#ifndef PF_W
#define PF_W 2048
#endif

int64_t kiln__d16c_packed(int64_t M, int64_t C, int64_t taps) { return M * C * taps; }

void kiln__d16c_pack(const float *w, int64_t M, int64_t C, int64_t taps, float *dst) {
    for (int64_t m0 = 0; m0 < M; m0 += OB) {
        const int64_t wb = M - m0 < OB ? M - m0 : OB;
        float *d = dst + m0 * C * taps;
        for (int64_t c = 0; c < C; c++)
            for (int64_t t = 0; t < taps; t++)
                for (int64_t j = 0; j < wb; j++)
                    d[((c / 16 * taps + t) * 16 + c % 16) * wb + j] = w[((m0 + j) * C + c) * taps + t];
    }
}

/* ceil(a / b), b > 0, any sign of a. */
static int64_t cdiv(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -(-a / b); }

/* A row's columns: L left-edge pixels, nt runs over the interior, R
 * right-edge pixels (an edge pixel has a tap outside X). */
typedef struct rowsplit {
    int64_t L, R, nt, nseg;
} rowsplit;

static rowsplit row_split(const kiln__d16c *p) {
    rowsplit r;
    r.L = cdiv(p->pl, p->sw);
    if (r.L > p->OW) r.L = p->OW;
    int64_t xr = cdiv(p->W + p->pl - p->KW + 1, p->sw); /* the first pixel whose last tap is past X */
    if (xr < r.L) xr = r.L;
    if (xr > p->OW) xr = p->OW;
    r.R = p->OW - xr;
    r.nt = (xr - r.L + PT - 1) / PT;
    r.nseg = r.L + r.nt + r.R;
    return r;
}

static int64_t oblocks(const kiln__d16c *p) { return (p->M + OB - 1) / OB; }

int64_t kiln__d16c_units(const kiln__d16c *p) { return p->OH * row_split(p).nseg * oblocks(p); }

void kiln__d16c_unit(const kiln__d16c *p, int64_t u, int64_t *oy, int64_t *ox0, int64_t *ox1, int64_t *m0,
                     int64_t *m1) {
    const rowsplit r = row_split(p);
    const int64_t nb = oblocks(p), nr = p->OH * r.nseg;
    const int64_t q = p->wmajor ? u % nr : u / nb, b = p->wmajor ? u / nr : u % nb, s = q % r.nseg;
    *oy = q / r.nseg;
    if (s < r.L) {
        *ox0 = s, *ox1 = s + 1;
    } else if (s < r.L + r.nt) { /* balanced: 27 pixels are 9 + 9 + 9, not 12 + 12 + 3 */
        const int64_t t = s - r.L, wi = p->OW - r.L - r.R;
        *ox0 = r.L + t * wi / r.nt;
        *ox1 = r.L + (t + 1) * wi / r.nt;
    } else {
        *ox0 = p->OW - r.R + (s - r.L - r.nt);
        *ox1 = *ox0 + 1;
    }
    *m0 = b * OB;
    *m1 = *m0 + OB < p->M ? *m0 + OB : p->M;
}

/* The taps of a unit: kernel rows [k[0], k[1]) and columns [k[2], k[3])
 * inside X for all of its pixels (ox0..ox0+np-1 of row oy). */
static void unit_taps(const kiln__d16c *p, int64_t oy, int64_t ox0, int np, int64_t k[4]) {
    const int64_t iy = oy * p->sh - p->pt, ix0 = ox0 * p->sw - p->pl, ixl = ix0 + (np - 1) * p->sw;
    k[0] = iy < 0 ? -iy : 0;
    k[1] = p->H - iy < p->KH ? p->H - iy : p->KH;
    k[2] = ix0 < 0 ? -ix0 : 0;
    k[3] = p->W - ixl < p->KW ? p->W - ixl : p->KW;
}

#if defined(__AVX512F__)
/* Column j of the accumulators (channels m0..m0+15 of np pixels from
 * (oy, ox0)): residual, Relu, store (j a constant: no accumulator goes to
 * memory). */
static inline __attribute__((always_inline)) void store(const kiln__d16c *p, int64_t oy, int64_t ox0, int np,
                                                        int64_t m0, __m512 acc[][2], int j) {
    const int64_t off = ((m0 / 16 * p->OH + oy) * p->OW + ox0) * 16;
    float *y = p->y + off;
    const float *r = p->res ? p->res + off : NULL;
#pragma GCC unroll 12
    for (int i = 0; i < np; i++) {
        __m512 v = acc[i][j];
        if (r) v = _mm512_add_ps(v, _mm512_loadu_ps(r + i * 16));
        if (p->relu) v = _mm512_max_ps(_mm512_setzero_ps(), v); /* NaN stays (maxps: 2nd operand) */
        _mm512_storeu_ps(y + i * 16, v);
    }
}

/* np pixels from (oy, ox0) x nv vectors of 16 output channels from m0; SW
 * the column stride when it is a constant (1, 2), else 0 (p->sw).  np, nv
 * and SW are constants where it is inlined: the accumulators stay in
 * registers and the broadcasts' offsets are immediates. */
static inline __attribute__((always_inline)) void tile(const kiln__d16c *p, int64_t oy, int64_t ox0, int np,
                                                       int64_t m0, int nv, int SW) {
    const int64_t ps = 16 * (SW ? SW : p->sw), taps = p->KH * p->KW, ws = 16 * nv, CB = p->C / 16;
    const int64_t plane = p->H * p->W * 16, ix0 = ox0 * (SW ? SW : p->sw) - p->pl, iy0 = oy * p->sh - p->pt;
    int64_t k[4];
    unit_taps(p, oy, ox0, np, k);
    const float *wb = p->wp + m0 * p->C * taps;
    __m512 acc[PT][2];
    __m512 b0 = p->bias ? _mm512_loadu_ps(p->bias + m0) : _mm512_setzero_ps();
    __m512 b1 = nv == 2 && p->bias ? _mm512_loadu_ps(p->bias + m0 + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
    for (int i = 0; i < np; i++) acc[i][0] = b0, acc[i][1] = b1;
    for (int64_t cb = 0; cb < CB; cb++)
        for (int64_t ky = k[0]; ky < k[1]; ky++)
            for (int64_t kx = k[2]; kx < k[3]; kx++) {
                const float *xk = p->x + cb * plane + ((iy0 + ky) * p->W + ix0 + kx) * 16;
                const float *wc = wb + ((cb * taps + ky * p->KW + kx) * 16) * ws;
                for (int ci = 0; ci < 16; ci++) { /* W streams: to L1 2 KB ahead, to L2 16 KB ahead */
                    _mm_prefetch((const char *)(wc + ci * ws) + PF_W, _MM_HINT_T0);
                    if (nv == 2) _mm_prefetch((const char *)(wc + ci * ws) + PF_W + 64, _MM_HINT_T0);
                    _mm_prefetch((const char *)(wc + ci * ws) + 8 * PF_W, _MM_HINT_T1);
                    if (nv == 2) _mm_prefetch((const char *)(wc + ci * ws) + 8 * PF_W + 64, _MM_HINT_T1);
                    const __m512 w0 = _mm512_loadu_ps(wc + ci * ws);
                    const __m512 w1 = nv == 2 ? _mm512_loadu_ps(wc + ci * ws + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
                    for (int i = 0; i < np; i++) {
                        const __m512 a = _mm512_set1_ps(xk[i * ps + ci]);
                        acc[i][0] = _mm512_fmadd_ps(a, w0, acc[i][0]);
                        if (nv == 2) acc[i][1] = _mm512_fmadd_ps(a, w1, acc[i][1]);
                    }
                }
            }
    store(p, oy, ox0, np, m0, acc, 0);
    if (nv == 2) store(p, oy, ox0, np, m0 + 16, acc, 1);
}

#define TILE_SW(n, sw)                                                                                                 \
    if (nv == 2)                                                                                                       \
        tile(p, oy, ox0, n, m0, 2, sw);                                                                                \
    else                                                                                                               \
        tile(p, oy, ox0, n, m0, 1, sw);
#define TILE_CASE(n)                                                                                                   \
    case n:                                                                                                            \
        if (p->sw == 1) {                                                                                              \
            TILE_SW(n, 1)                                                                                              \
        } else if (p->sw == 2) {                                                                                       \
            TILE_SW(n, 2)                                                                                              \
        } else {                                                                                                       \
            TILE_SW(n, 0)                                                                                              \
        }                                                                                                              \
        break;

static void unit(const kiln__d16c *p, int64_t oy, int64_t ox0, int np, int64_t m0, int nv) {
    switch (np) {
        TILE_CASE(12) TILE_CASE(11) TILE_CASE(10) TILE_CASE(9) TILE_CASE(8) TILE_CASE(7)
        TILE_CASE(6) TILE_CASE(5) TILE_CASE(4) TILE_CASE(3) TILE_CASE(2) TILE_CASE(1)
    default: break;
    }
}
#else
/* Portable: the same sums in the same order per output (input channel
 * blocks, kernel rows, columns, channels, from the bias), one output
 * channel at a time. */
static void unit(const kiln__d16c *p, int64_t oy, int64_t ox0, int np, int64_t m0, int nv) {
    const int64_t taps = p->KH * p->KW, ws = 16 * nv, plane = p->H * p->W * 16;
    const float *wb = p->wp + m0 * p->C * taps;
    int64_t k[4];
    unit_taps(p, oy, ox0, np, k);
    for (int i = 0; i < np; i++)
        for (int j = 0; j < ws; j++) {
            const int64_t ix0 = (ox0 + i) * p->sw - p->pl, iy0 = oy * p->sh - p->pt;
            float s = p->bias ? p->bias[m0 + j] : 0.0f;
            for (int64_t cb = 0; cb < p->C / 16; cb++)
                for (int64_t ky = k[0]; ky < k[1]; ky++)
                    for (int64_t kx = k[2]; kx < k[3]; kx++)
                        for (int ci = 0; ci < 16; ci++)
                            s += p->x[cb * plane + ((iy0 + ky) * p->W + ix0 + kx) * 16 + ci] *
                                 wb[((cb * taps + ky * p->KW + kx) * 16 + ci) * ws + j];
            const int64_t off = (((m0 + j) / 16 * p->OH + oy) * p->OW + ox0 + i) * 16 + j % 16;
            if (p->res) s += p->res[off];
            if (p->relu && s < 0.0f) s = 0.0f;
            p->y[off] = s;
        }
}
#endif

void kiln__d16c_run(const kiln__d16c *p, int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; u++) {
        int64_t oy, ox0, ox1, m0, m1;
        kiln__d16c_unit(p, u, &oy, &ox0, &ox1, &m0, &m1);
        unit(p, oy, ox0, (int)(ox1 - ox0), m0, (int)((m1 - m0) / 16));
    }
}

/* Unit order: pixel runs outer keeps W in L2 and re-reads it per run;
 * output blocks outer re-reads X once per 32 channels instead.  W is
 * re-read from L2 while it fits half of it, else the order that moves
 * fewer bytes.  With several threads (each takes a contiguous run of
 * units) output blocks go outer where W outweighs X (M x taps > P), so
 * that each thread reads its share of W, not all of it (as session 13's
 * SGEMM row split).  Tactic 13's rule, measured on ResNet-50's 1x1 convs
 * (bench/README.md, session 14): 1024->512 at 14x14, 1 thread, runs outer
 * +29% / +17% against NCHW, output blocks outer -10% / -9%; the layer3
 * 1x1 convs in the network at 2 threads, -0.32..-0.61 ms over the 12 of
 * them in 6 paired runs with output blocks outer where M > P. */
int kiln__d16c_wmajor(int64_t C, int64_t M, int64_t taps, int64_t P, int threads) {
    const int64_t wbytes = M * C * taps * 4, xbytes = P * C * 4;
    if (threads > 1 && M * taps > P) return 1;
    return wbytes > (1 << 20) && (M + 31) / 32 * xbytes < (P + PT - 1) / PT * wbytes;
}

/* ------------------------------------------------------------ Conv tactic 16 */

typedef struct d16c_job {
    const kiln_call *c;
    kiln__d16c p;          /* image 0's pointers */
    int64_t units, xs, ys; /* units and floats per image */
    int fused;             /* the chain (if any) is in the kernel's store */
} d16c_job;

/* Work units [b, e) over the images. */
static void d16c_range(void *ud, int64_t b, int64_t e) {
    const d16c_job *f = ud;
    while (b < e) {
        const int64_t n = b / f->units, u0 = b % f->units, u1 = e - n * f->units < f->units ? e - n * f->units : f->units;
        kiln__d16c p = f->p;
        p.x += n * f->xs;
        p.y += n * f->ys;
        if (p.res) p.res += n * f->ys;
        kiln__d16c_run(&p, u0, u1);
        for (int64_t u = u0; u < u1 && !f->fused; u++) { /* a chain of 16 channels per pixel */
            int64_t oy, ox0, ox1, m0, m1;
            kiln__d16c_unit(&p, u, &oy, &ox0, &ox1, &m0, &m1);
            for (int64_t m = m0; m < m1; m += 16)
                for (int64_t q = oy * p.OW + ox0; q < oy * p.OW + ox1; q++)
                    kiln_call_epilogue(f->c, 0, p.y + (m * p.OH * p.OW + q * 16), 16, m, 1);
        }
        b = (n + 1) * f->units < e ? (n + 1) * f->units : e;
    }
}

int kiln__d16c_conv(const kiln_call *c, int64_t N, const kiln__d16c *geom) {
    const kiln_tensor *x = &c->in[0], *y = &c->out[0];
    if (x->dtype != KILN_DTYPE_F32 || y->dtype != KILN_DTYPE_F32 || x->format != KILN_FORMAT_NCHW16C ||
        y->format != KILN_FORMAT_NCHW16C || !c->prepacked || !c->prepacked[1] ||
        (c->nin > 2 && c->in[2].data && !kiln__ops_dense(&c->in[2])))
        return kiln_set_error(KILN_EUNSUPPORTED, "Conv tactic 16: needs F32 NCHW16C X and Y, W packed at build");
    if (N * geom->M * geom->OH * geom->OW == 0) return 0;
    d16c_job f = {.c = c, .p = *geom, .xs = geom->C * geom->H * geom->W, .ys = geom->M * geom->OH * geom->OW};
    f.p.x = x->data, f.p.wp = c->prepacked[1], f.p.y = y->data, f.p.res = NULL, f.p.relu = 0;
    f.p.bias = c->nin > 2 && c->in[2].data ? c->in[2].data : NULL;
    f.p.wmajor = kiln__d16c_wmajor(geom->C, geom->M, geom->KH * geom->KW, geom->OH * geom->OW,
                                   c->exec ? kiln_exec_threads(c->exec) : 1);
    f.fused = kiln__16c_fused_chain(c, &f.p.res, &f.p.relu);
    f.units = kiln__d16c_units(&f.p);
    kiln_exec_parallel_for(c->exec, N * f.units, 1, d16c_range, &f);
    return 0;
}
