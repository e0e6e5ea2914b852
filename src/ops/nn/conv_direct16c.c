/*
 * conv_direct16c.c — direct convs in NCHW16C (conv_direct16c.h says why).
 *
 * A unit is a tile of up to PT output pixels x one block of 32 output
 * channels (16 for M's last block when M % 32 == 16): 2 x PT accumulators;
 * per input channel block, kernel row, kernel column and input channel,
 * two weight vectors and one broadcast per pixel from X's 16-channel line,
 * 2 x PT FMAs (conv_pw16c.c's inner loop, per tap).  The sum over C and
 * the taps runs whole in registers (no split: the bits do not depend on
 * the threads), then bias, residual and Relu are applied before the one
 * store of each pixel.
 *
 * Padding: the outputs split into rectangles whose pixels all see the same
 * taps inside X (the inner block, and each edge row / column on its own);
 * a tile lies in one rectangle and runs only those taps, with no check in
 * its loops.  Tiles: runs of up to 12 pixels along a row; where a
 * rectangle is at most 6 wide (ResNet's 7x7 outputs less the padded
 * column) pairs of rows; an edge column (and every column at a stride
 * other than 1 or 2) runs of up to 12 rows.  So a 7x7 output of a padded
 * 3x3/2 conv is 3 tiles of 2 x 6, a row of 6, a column of 6 and a corner,
 * not 7 one-pixel units (latency-bound: 2 accumulators) and 7 of 6.
 */
#include "ops/nn/conv_direct16c.h"
#include "ops/nn/conv_pw16c.h"

#include "kiln_int.h"
#include "ops/common/ops_util.h"

#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define PT KILN__16C_PT /* pixels per run: tactic 13's tile (conv_pw16c.h) */
#define OB KILN__16C_OB /* output channels per block */
#define PF_W KILN__16C_PF_W

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

/* The outputs [*lo, *hi) of one axis (O outputs, stride s, begin pad pad,
 * kernel K, input I) whose taps are all inside X; those before and after
 * each have their own cut of the kernel. */
static void inner(int64_t O, int64_t s, int64_t pad, int64_t K, int64_t I, int64_t *lo, int64_t *hi) {
    *lo = cdiv(pad, s) < O ? cdiv(pad, s) : O;
    *hi = cdiv(I + pad - K + 1, s); /* the first output whose last tap is past X */
    if (*hi < *lo) *hi = *lo;
    if (*hi > O) *hi = O;
}

/* An axis in groups of outputs with one kernel cut each: the edge outputs
 * one by one, the inner run as one group.  Group g's first output and
 * size; the number of groups. */
static int64_t groups(int64_t O, int64_t lo, int64_t hi, int64_t g, int64_t *o0, int64_t *n) {
    const int64_t ng = lo + (hi > lo) + (O - hi);
    if (g < lo) *o0 = g, *n = 1;
    else if (hi > lo && g == lo) *o0 = lo, *n = hi - lo;
    else *o0 = hi + (g - lo - (hi > lo)), *n = 1;
    return ng;
}

/* A rectangle of outputs with one kernel cut (h rows x w columns) in
 * tiles: a column (w 1, or a column stride the tiles do not hold as a
 * constant) in runs of up to PT rows; up to 6 columns in pairs of rows;
 * wider in runs of up to PT columns per row (balanced: 27 columns are
 * 9 + 9 + 9, not 12 + 12 + 3). */
static int colmode(const kiln__d16c *p, int64_t w) { return w == 1 || (p->sw != 1 && p->sw != 2); }
#define PAIRW (PT / 2) /* (measured: runs of 6 instead of pairs, 7x7 outputs +7% on R18 layer4.0 conv1) */
static int64_t rect_tiles(const kiln__d16c *p, int64_t h, int64_t w) {
    if (colmode(p, w)) return w * ((h + PT - 1) / PT);
    if (w <= PAIRW) return (h + 1) / 2;
    return h * ((w + PT - 1) / PT);
}
static void rect_tile(const kiln__d16c *p, int64_t h, int64_t w, int64_t t, kiln__d16c_tile *q) {
    if (colmode(p, w)) {
        const int64_t nc = (h + PT - 1) / PT, k = t % nc;
        q->oy = k * h / nc, q->rows = (k + 1) * h / nc - q->oy, q->ox = t / nc, q->cols = 1;
    } else if (w <= PAIRW) {
        q->oy = 2 * t, q->rows = h - 2 * t < 2 ? h - 2 * t : 2, q->ox = 0, q->cols = w;
    } else {
        const int64_t nr = (w + PT - 1) / PT, k = t % nr;
        q->oy = t / nr, q->rows = 1, q->ox = k * w / nr, q->cols = (k + 1) * w / nr - q->ox;
    }
}

/* Tile t of an image (rectangles row group by row group). */
static void tile_at(const kiln__d16c *p, int64_t t, kiln__d16c_tile *q) {
    int64_t ylo, yhi, xlo, xhi, oy, h, ox, w;
    inner(p->OH, p->sh, p->pt, p->KH, p->H, &ylo, &yhi);
    inner(p->OW, p->sw, p->pl, p->KW, p->W, &xlo, &xhi);
    const int64_t ngy = groups(p->OH, ylo, yhi, 0, &oy, &h), ngx = groups(p->OW, xlo, xhi, 0, &ox, &w);
    for (int64_t gy = 0; gy < ngy; gy++) {
        groups(p->OH, ylo, yhi, gy, &oy, &h);
        for (int64_t gx = 0; gx < ngx; gx++) {
            groups(p->OW, xlo, xhi, gx, &ox, &w);
            const int64_t n = rect_tiles(p, h, w);
            if (t < n) {
                rect_tile(p, h, w, t, q);
                q->oy += oy, q->ox += ox;
                return;
            }
            t -= n;
        }
    }
    q->rows = q->cols = 0; /* (past the last) */
}

static int64_t image_tiles(const kiln__d16c *p) {
    int64_t ylo, yhi, xlo, xhi, oy, h, ox, w, n = 0;
    inner(p->OH, p->sh, p->pt, p->KH, p->H, &ylo, &yhi);
    inner(p->OW, p->sw, p->pl, p->KW, p->W, &xlo, &xhi);
    const int64_t ngy = groups(p->OH, ylo, yhi, 0, &oy, &h), ngx = groups(p->OW, xlo, xhi, 0, &ox, &w);
    for (int64_t gy = 0; gy < ngy; gy++)
        for (int64_t gx = 0; gx < ngx; gx++) {
            groups(p->OH, ylo, yhi, gy, &oy, &h);
            groups(p->OW, xlo, xhi, gx, &ox, &w);
            n += rect_tiles(p, h, w);
        }
    return n;
}

static int64_t oblocks(const kiln__d16c *p) { return (p->M + OB - 1) / OB; }

int64_t kiln__d16c_units(const kiln__d16c *p) { return image_tiles(p) * oblocks(p); }

/* What every unit of a call shares, found once per kiln__d16c_run: a unit
 * of a 1x1 conv from 64 channels is ~800 cycles of FMAs, and the ~15
 * integer divisions of finding its tile from scratch cost 5-20% there
 * (tactic 13's shapes run through this kernel, one run each way). */
typedef struct plan {
    int64_t nt, nb; /* tiles per image, output channel blocks */
    int whole;      /* the output is one rectangle (every tap inside X for every pixel) */
} plan;

static plan plan_of(const kiln__d16c *p) {
    int64_t ylo, yhi, xlo, xhi;
    inner(p->OH, p->sh, p->pt, p->KH, p->H, &ylo, &yhi);
    inner(p->OW, p->sw, p->pl, p->KW, p->W, &xlo, &xhi);
    return (plan){.nt = image_tiles(p), .nb = oblocks(p),
                  .whole = ylo == 0 && xlo == 0 && yhi == p->OH && xhi == p->OW};
}

static void unit_of(const kiln__d16c *p, const plan *pl, int64_t u, kiln__d16c_tile *q) {
    const int64_t t = p->wmajor ? u % pl->nt : u / pl->nb;
    if (pl->whole)
        rect_tile(p, p->OH, p->OW, t, q);
    else
        tile_at(p, t, q);
    q->m0 = (p->wmajor ? u / pl->nt : u % pl->nb) * OB;
    q->m1 = q->m0 + OB < p->M ? q->m0 + OB : p->M;
    /* Output blocks outer: the first tile of a block reads its W (590 KB
     * on ResNet-50's layer4.0 conv2) from memory in the network, faster
     * than one core streams it; each tile fetches its share of the next
     * block's W into L2 instead (the T1 prefetch 16 KB ahead is too
     * short to cover that). */
    q->pf_lines = 0;
    if (p->wmajor && q->m1 < p->M) {
        const int64_t taps = p->KH * p->KW, lines = (p->M - q->m1 < OB ? p->M - q->m1 : OB) * p->C * taps / 16;
        const int64_t l0 = t * lines / pl->nt, l1 = (t + 1) * lines / pl->nt;
        q->pf = (const char *)(p->wp + q->m1 * p->C * taps) + l0 * 64, q->pf_lines = l1 - l0;
    }
}

void kiln__d16c_unit(const kiln__d16c *p, int64_t u, kiln__d16c_tile *q) {
    const plan pl = plan_of(p);
    unit_of(p, &pl, u, q);
}

/* The taps of a tile: kernel rows [k[0], k[1]) and columns [k[2], k[3])
 * inside X for all of its pixels (the same cut for each, by the tiling). */
static void tile_taps(const kiln__d16c *p, const kiln__d16c_tile *q, int64_t k[4]) {
    const int64_t iy0 = q->oy * p->sh - p->pt, iyl = iy0 + (q->rows - 1) * p->sh;
    const int64_t ix0 = q->ox * p->sw - p->pl, ixl = ix0 + (q->cols - 1) * p->sw;
    k[0] = iy0 < 0 ? -iy0 : 0;
    k[1] = p->H - iyl < p->KH ? p->H - iyl : p->KH;
    k[2] = ix0 < 0 ? -ix0 : 0;
    k[3] = p->W - ixl < p->KW ? p->W - ixl : p->KW;
}

#if defined(__AVX512F__)
/* Column j of the accumulators (channels m0..m0+15 of tile q, R x NC
 * pixels): residual, Relu, store (j a constant: no accumulator goes to
 * memory). */
static inline __attribute__((always_inline)) void store(const kiln__d16c *p, const kiln__d16c_tile *q, int R, int NC,
                                                        int64_t m0, __m512 acc[][2], int j) {
    const int64_t off = ((m0 / 16 * p->OH + q->oy) * p->OW + q->ox) * 16;
    float *y = p->y + off;
    const float *r = p->res ? p->res + off : NULL;
#pragma GCC unroll 12
    for (int i = 0; i < R * NC; i++) {
        const int64_t o = (i / NC * p->OW + i % NC) * 16;
        __m512 v = acc[i][j];
        if (r) v = _mm512_add_ps(v, _mm512_loadu_ps(r + o));
        if (p->relu) v = _mm512_max_ps(_mm512_setzero_ps(), v); /* NaN stays (maxps: 2nd operand) */
        _mm512_storeu_ps(y + o, v);
    }
}

/* One tap of one channel block into the accumulators: per input channel
 * two W vectors (wc, 16 x 16 nv floats) and a broadcast per pixel from xk
 * (pixel i at i / NC * rs + i % NC * 16 SW); prefetches: the next block's W
 * share (*pf, *pfl lines), W ahead, the next channel block's X (xn). */
static inline __attribute__((always_inline)) void tap(__m512 acc[][2], const float *xk, const float *xn,
                                                      const float *wc, const char **pf, int64_t *pfl, int64_t rs,
                                                      int R, int NC, int nv, int SW) {
    const int64_t ps = 16 * SW, ws = 16 * nv;
    for (int j = 0; j < 8 && *pfl > 0; j++) { /* the next block's W (unit_of): up to 512 bytes a tap */
        _mm_prefetch(*pf, _MM_HINT_T1);
        *pf += 64, --*pfl;
    }
    int64_t xo = 0; /* pixel ci's offset in xn, ci / NC * rs + ci % NC * ps, kept as it goes: computed
                     * per step it took a division and ~15 scalar instructions beside the 24 FMAs */
    int col = 0;
    for (int ci = 0; ci < 16; ci++) { /* W streams: to L1 2 KB ahead, to L2 16 KB ahead */
        _mm_prefetch((const char *)(wc + ci * ws) + PF_W, _MM_HINT_T0);
        if (nv == 2) _mm_prefetch((const char *)(wc + ci * ws) + PF_W + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)(wc + ci * ws) + 8 * PF_W, _MM_HINT_T1);
        if (nv == 2) _mm_prefetch((const char *)(wc + ci * ws) + 8 * PF_W + 64, _MM_HINT_T1);
        /* the next channel block's lines of X, where they are no stream for
         * the hardware prefetcher (a stride, two rows) */
        if (!(R == 1 && SW == 1) && ci < R * NC) {
            _mm_prefetch((const char *)(xn + xo), _MM_HINT_T0);
            xo += ++col < NC ? ps : rs - (NC - 1) * ps;
            col = col < NC ? col : 0;
        }
        const __m512 w0 = _mm512_loadu_ps(wc + ci * ws);
        const __m512 w1 = nv == 2 ? _mm512_loadu_ps(wc + ci * ws + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
        for (int i = 0; i < R * NC; i++) kiln__16c_px(acc[i], xk + i / NC * rs + i % NC * ps + ci, i, nv, w0, w1);
    }
}

/* Tile q (R rows x NC columns of pixels) x nv vectors of 16 output
 * channels from m0; SW the column stride (a constant where NC > 1: 1 or
 * 2).  R, NC, nv and SW are constants where it is inlined: the
 * accumulators stay in registers and the broadcasts' offsets within a row
 * are immediates. */
static inline __attribute__((always_inline)) void tile(const kiln__d16c *p, const kiln__d16c_tile *q, int R, int NC,
                                                       int64_t m0, int nv, int SW) {
    const int64_t rs = 16 * p->sh * p->W, taps = p->KH * p->KW, ws = 16 * nv, CB = p->C / 16;
    const int64_t plane = p->H * p->W * 16, ix0 = q->ox * p->sw - p->pl, iy0 = q->oy * p->sh - p->pt;
    int64_t k[4];
    tile_taps(p, q, k);
    const float *wb = p->wp + m0 * p->C * taps;
    const char *pf = q->pf;
    int64_t pfl = q->pf_lines;
    __m512 acc[PT][2];
    __m512 b0 = p->bias ? _mm512_loadu_ps(p->bias + m0) : _mm512_setzero_ps();
    __m512 b1 = nv == 2 && p->bias ? _mm512_loadu_ps(p->bias + m0 + 16) : _mm512_setzero_ps();
#pragma GCC unroll 12
    for (int i = 0; i < R * NC; i++) acc[i][0] = b0, acc[i][1] = b1;
    if (taps == 1) { /* a 1x1 conv (tactic 13's loop): no tap loops, pointers that step */
        const float *xk = p->x + (iy0 * p->W + ix0) * 16, *wc = wb;
        for (int64_t cb = 0; cb < CB && k[0] < k[1] && k[2] < k[3]; cb++, xk += plane, wc += 16 * ws)
            tap(acc, xk, cb + 1 < CB ? xk + plane : xk, wc, &pf, &pfl, rs, R, NC, nv, SW);
    } else {
        for (int64_t cb = 0; cb < CB; cb++)
            for (int64_t ky = k[0]; ky < k[1]; ky++)
                for (int64_t kx = k[2]; kx < k[3]; kx++) {
                    const float *xk = p->x + cb * plane + ((iy0 + ky) * p->W + ix0 + kx) * 16;
                    tap(acc, xk, cb + 1 < CB ? xk + plane : xk, wb + ((cb * taps + ky * p->KW + kx) * 16) * ws, &pf,
                        &pfl, rs, R, NC, nv, SW); /* (no address past X) */
                }
    }
#pragma GCC unroll 2
    for (int j = 0; j < nv; j++) store(p, q, R, NC, m0 + 16 * j, acc, j);
}

#define TILE_RC(r, c, sw)                                                                                              \
    case (r) * 16 + (c):                                                                                               \
        if (nv == 2)                                                                                                   \
            tile(p, q, r, c, m0, 2, sw);                                                                               \
        else                                                                                                           \
            tile(p, q, r, c, m0, 1, sw);                                                                               \
        break;
/* the shapes rect_tile makes: rows of 2..12 columns and pairs of rows of
 * 2..6 at column stride SW; columns of 1..12 rows (any stride) */
#define TILE_ROWS(sw)                                                                                                  \
    TILE_RC(1, 2, sw) TILE_RC(1, 3, sw) TILE_RC(1, 4, sw) TILE_RC(1, 5, sw) TILE_RC(1, 6, sw) TILE_RC(1, 7, sw)       \
    TILE_RC(1, 8, sw) TILE_RC(1, 9, sw) TILE_RC(1, 10, sw) TILE_RC(1, 11, sw) TILE_RC(1, 12, sw) TILE_RC(2, 2, sw)    \
    TILE_RC(2, 3, sw) TILE_RC(2, 4, sw) TILE_RC(2, 5, sw) TILE_RC(2, 6, sw)

static void unit(const kiln__d16c *p, const kiln__d16c_tile *q, int64_t m0, int nv) {
    if (q->cols == 1) {
        switch ((int)q->rows * 16 + 1) {
            TILE_RC(1, 1, 1) TILE_RC(2, 1, 1) TILE_RC(3, 1, 1) TILE_RC(4, 1, 1) TILE_RC(5, 1, 1) TILE_RC(6, 1, 1)
            TILE_RC(7, 1, 1) TILE_RC(8, 1, 1) TILE_RC(9, 1, 1) TILE_RC(10, 1, 1) TILE_RC(11, 1, 1) TILE_RC(12, 1, 1)
        default: break;
        }
    } else if (p->sw == 1) {
        switch ((int)(q->rows * 16 + q->cols)) {
            TILE_ROWS(1)
        default: break;
        }
    } else {
        switch ((int)(q->rows * 16 + q->cols)) {
            TILE_ROWS(2)
        default: break;
        }
    }
}
#else
/* Portable: the same sums in the same order per output (input channel
 * blocks, kernel rows, columns, channels, from the bias), one output
 * channel at a time. */
static void unit(const kiln__d16c *p, const kiln__d16c_tile *q, int64_t m0, int nv) {
    const int64_t taps = p->KH * p->KW, ws = 16 * nv, plane = p->H * p->W * 16;
    const float *wb = p->wp + m0 * p->C * taps;
    int64_t k[4];
    tile_taps(p, q, k);
    for (int64_t oy = q->oy; oy < q->oy + q->rows; oy++)
        for (int64_t ox = q->ox; ox < q->ox + q->cols; ox++)
            for (int j = 0; j < ws; j++) {
                const int64_t ix0 = ox * p->sw - p->pl, iy0 = oy * p->sh - p->pt;
                float s = p->bias ? p->bias[m0 + j] : 0.0f;
                for (int64_t cb = 0; cb < p->C / 16; cb++)
                    for (int64_t ky = k[0]; ky < k[1]; ky++)
                        for (int64_t kx = k[2]; kx < k[3]; kx++)
                            for (int ci = 0; ci < 16; ci++)
                                s += p->x[cb * plane + ((iy0 + ky) * p->W + ix0 + kx) * 16 + ci] *
                                     wb[((cb * taps + ky * p->KW + kx) * 16 + ci) * ws + j];
                const int64_t off = (((m0 + j) / 16 * p->OH + oy) * p->OW + ox) * 16 + j % 16;
                if (p->res) s += p->res[off];
                if (p->relu && s < 0.0f) s = 0.0f;
                p->y[off] = s;
            }
}
#endif

void kiln__d16c_run(const kiln__d16c *p, int64_t u0, int64_t u1) {
    const plan pl = plan_of(p);
    for (int64_t u = u0; u < u1; u++) {
        kiln__d16c_tile q;
        unit_of(p, &pl, u, &q);
        unit(p, &q, q.m0, (int)((q.m1 - q.m0) / 16));
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
        const int64_t n = b / f->units, u0 = b % f->units;
        const int64_t u1 = e - n * f->units < f->units ? e - n * f->units : f->units;
        kiln__d16c p = f->p;
        p.x += n * f->xs;
        p.y += n * f->ys;
        if (p.res) p.res += n * f->ys;
        kiln__d16c_run(&p, u0, u1);
        for (int64_t u = u0; u < u1 && !f->fused; u++) { /* a chain of 16 channels per pixel */
            kiln__d16c_tile q;
            kiln__d16c_unit(&p, u, &q);
            for (int64_t m = q.m0; m < q.m1; m += 16)
                for (int64_t oy = q.oy; oy < q.oy + q.rows; oy++)
                    for (int64_t ox = q.ox; ox < q.ox + q.cols; ox++)
                        kiln_call_epilogue(f->c, 0, p.y + (m * p.OH * p.OW + (oy * p.OW + ox) * 16), 16, m, 1);
        }
        b = (n + 1) * f->units < e ? (n + 1) * f->units : e;
    }
}

/* A 1x1 conv whose outputs all read X (no padding reached): its plane is
 * one row of OH x OW pixels, so the runs of 12 span the output's rows
 * (tactic 13's tiles: 7x7 outputs in 10 + 10 + 10 + 10 + 9, not 7 runs of
 * 7).  At a stride, read in place, that row would not be one stride
 * apart: the pixels are gathered first (downsamples: a quarter of X). */
static int flat(const kiln__d16c *g) {
    return g->KH == 1 && g->KW == 1 && g->pt == 0 && g->pl == 0 && (g->OH - 1) * g->sh < g->H &&
           (g->OW - 1) * g->sw < g->W;
}
static int gathers(const kiln__d16c *g) { return flat(g) && (g->sh > 1 || g->sw > 1); }

size_t kiln__d16c_ws(const kiln__d16c *g, int64_t N) {
    return gathers(g) ? (size_t)(N * g->C * g->OH * g->OW) * sizeof(float) : 0;
}

typedef struct gather_job {
    const kiln__d16c *g;
    const float *x;
    float *d;
} gather_job;

/* Rows [b, e) of (image, channel block, output row): their pixels. */
static void gather_range(void *ud, int64_t b, int64_t e) {
    const gather_job *j = ud;
    const kiln__d16c *g = j->g;
    for (int64_t r = b; r < e; r++) {
        const int64_t plane = r / g->OH, oy = r % g->OH; /* plane: image x channel block */
        const float *x = j->x + ((plane * g->H + oy * g->sh) * g->W) * 16;
        float *d = j->d + r * g->OW * 16;
        for (int64_t ox = 0; ox < g->OW; ox++) memcpy(d + ox * 16, x + ox * g->sw * 16, 16 * sizeof(float));
    }
}

int kiln__d16c_conv(const kiln_call *c, int64_t N, const kiln__d16c *geom) {
    const kiln_tensor *x = &c->in[0], *y = &c->out[0];
    if (x->dtype != KILN_DTYPE_F32 || y->dtype != KILN_DTYPE_F32 || x->format != KILN_FORMAT_NCHW16C ||
        y->format != KILN_FORMAT_NCHW16C || !c->prepacked || !c->prepacked[1] ||
        (c->nin > 2 && c->in[2].data && !kiln__ops_dense(&c->in[2])))
        return kiln_set_error(KILN_EUNSUPPORTED, "Conv tactic %d: needs F32 NCHW16C X and Y, W packed at build",
                              c->tactic);
    if (N * geom->M * geom->OH * geom->OW == 0) return 0;
    d16c_job f = {.c = c, .p = *geom, .xs = geom->C * geom->H * geom->W, .ys = geom->M * geom->OH * geom->OW};
    f.p.x = x->data;
    if (gathers(geom)) {
        if (!c->workspace || c->workspace_size < kiln__d16c_ws(geom, N))
            return kiln_set_error(KILN_EINTERNAL, "Conv tactic 16: no workspace for the strided 1x1 conv's pixels");
        gather_job j = {.g = geom, .x = x->data, .d = c->workspace};
        kiln_exec_parallel_for(c->exec, N * geom->C / 16 * geom->OH, 1, gather_range, &j);
        f.p.x = c->workspace, f.xs = geom->C * geom->OH * geom->OW, f.p.sh = f.p.sw = 1;
    }
    if (flat(geom)) { /* one row of OH x OW pixels */
        f.p.W = f.p.OW = geom->OH * geom->OW;
        f.p.H = f.p.OH = 1;
        f.p.sh = f.p.sw = 1;
    }
    f.p.wp = c->prepacked[1], f.p.y = y->data, f.p.res = NULL, f.p.relu = 0;
    f.p.bias = c->nin > 2 && c->in[2].data ? c->in[2].data : NULL;
    f.p.wmajor = kiln__d16c_wmajor(geom->C, geom->M, geom->KH * geom->KW, geom->OH * geom->OW,
                                   c->exec ? kiln_exec_threads(c->exec) : 1);
    f.fused = kiln__16c_fused_chain(c, &f.p.res, &f.p.relu);
    int rc = kiln__16c_inplace_check(c, f.fused);
    if (rc) return rc;
    f.units = kiln__d16c_units(&f.p);
    kiln_exec_parallel_for(c->exec, N * f.units, 1, d16c_range, &f);
    return 0;
}
