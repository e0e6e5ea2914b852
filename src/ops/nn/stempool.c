/*
 * stempool.c — kiln::stempool: a network's stem as one layer,
 *
 *   Y = MaxPool(max(Conv(X, W, B), lo))
 *
 * X [N, C, H, W] (C <= 4: the image), W [M, C, KH, KW] (KH, KW <= 7,
 * M % 32 == 0: tactic 17's 2 x 16-channel tile; with 16 channels alone it
 * ran 13% behind tactic 12 on a 3x3/2 stem, bench/fewc_ab), B [M]; attributes strides and pads of the conv, lo (0 for
 * a Relu, -inf for none), p_kernel, p_strides and p_pads of the MaxPool
 * (no dilation, floor sizes).  The builder makes it from Conv [-> Relu]
 * -> MaxPool chains whose pool Indices nothing reads, on CPU builds
 * (builder/stempool_fuse.c): ResNet's 7x7/2 to 64 channels and 3x3/2 pool.
 *
 * Why: the stem conv's output (ResNet's 64 x 112 x 112, 3.2 MB) is
 * written to memory and read back by the pool, which was bound by reading
 * it from L3 (bench/README.md, session 13).  Here a thread computes the
 * conv rows a band of pool rows needs (conv_fewc.c's kernel, tactic 17's
 * NCHW16C tile) into a buffer that stays in its L2, pools them from there
 * (pool16c.c), and carries the conv rows the next band shares (ResNet's:
 * one) over instead of computing them again.
 *
 * Tactics (the builder times them; `kiln inspect` shows the choice):
 *   1 Y LINEAR: each band's pooled rows transposed from 16c into Y's
 *     planes while they are in cache;
 *   2 Y NCHW16C (a 16c region starting at the stem), offered where the
 *     build offers the 16c rows.
 * Results are the separate layers' bits: the conv sums in tactic 12's
 * order with the Relu in its store, the pool is pool16c.c's max.
 */
#include "kiln_int.h"
#include "device/cpu/sgemm.h"
#include "device/cpu/transpose16.h"
#include "ops/common/ops_util.h"
#include "ops/nn/conv_fewc.h"
#include "ops/nn/pool16c.h"
#include "ops/nn/stempool.h"

#include <float.h>
#include <math.h>
#include <string.h>

enum { T_LINEAR = 1, T_16C = 2 };

/* Pool rows a band (8: the fused chain alone at 1 thread, pool rows a band
 * 2 / 4 / 8: 0.997 / 0.971 / 0.960 of the two layers' time; a band's conv
 * rows, 17 x 112 x 64 floats for ResNet, stay in L2), fewer where the
 * threads would outnumber the bands or where that splits them evenly over
 * the threads (ResNet at 2 threads: 8 bands of 7). */
#define BAND_MAX 8

int kiln__stempool_fits(int64_t C, int64_t KH, int64_t KW, int64_t M) {
#if defined(__AVX512F__)
    return C >= 1 && C <= KILN__FEWC_CMAX && KH >= 1 && KH <= KILN__FEWC_KMAX && KW >= 1 && KW <= KILN__FEWC_KMAX &&
           M >= 32 && M % 32 == 0;
#else
    (void)C, (void)KH, (void)KW, (void)M;
    return 0;
#endif
}

static const kiln_attr_def stempool_attrs[] = {
    {"strides", KILN_ATTR_ARRAY, KILN_DTYPE_I64, "[1, 1]", 0, "conv strides (y, x)"},
    {"pads", KILN_ATTR_ARRAY, KILN_DTYPE_I64, "[0, 0, 0, 0]", 0, "conv pads (top, left, bottom, right)"},
    {"lo", KILN_ATTR_FLOAT, 0, "-3.4028235e38", 0, "conv output clamped below (0: a Relu; the lowest float: none)"},
    {"p_kernel", KILN_ATTR_ARRAY, KILN_DTYPE_I64, "[1, 1]", 0, "MaxPool kernel (y, x)"},
    {"p_strides", KILN_ATTR_ARRAY, KILN_DTYPE_I64, "[1, 1]", 0, "MaxPool strides (y, x)"},
    {"p_pads", KILN_ATTR_ARRAY, KILN_DTYPE_I64, "[0, 0, 0, 0]", 0, "MaxPool pads (top, left, bottom, right)"},
    {NULL, 0, 0, NULL, 0, NULL},
};

/* The attributes: s, p, pk, ps, pp; checked. */
static int read_geo(const kiln_attrs *a, int64_t *s, int64_t *p, int64_t *pk, int64_t *ps, int64_t *pp) {
    const kiln__ops_geom_attr f[5] = {
        {"strides", s, 2, 1}, {"pads", p, 4, 0}, {"p_kernel", pk, 2, 1}, {"p_strides", ps, 2, 1}, {"p_pads", pp, 4, 0}};
    int rc = kiln__ops_geom_attrs(a, "kiln::stempool", f, 5);
    if (rc) return rc;
    if (pp[0] >= pk[0] || pp[2] >= pk[0] || pp[1] >= pk[1] || pp[3] >= pk[1])
        return kiln_set_error(KILN_EATTR, "kiln::stempool: p_pads must be smaller than p_kernel");
    return 0;
}

static int stempool_shape(kiln_shape_ctx *c) {
    if (c->nin != 3)
        return kiln_set_error(KILN_EINVAL, "kiln::stempool: expected 3 inputs (X, W, B), found %d", c->nin);
    static const int ranks[] = {4, 4, 1};
    for (int i = 0; i < 3; i++)
        if (c->in[i].dtype != KILN_DTYPE_F32 || c->in[i].ndim != ranks[i])
            return kiln_set_error(KILN_ETYPE, "kiln::stempool: input %d must be a rank-%d float32 tensor", i, ranks[i]);
    int64_t s[2], p[4], pk[2], ps[2], pp[4], M, C, KH, KW, xc, bm;
    int rc = read_geo(c->attrs, s, p, pk, ps, pp);
    if (rc) return rc;
    if (!kiln_expr_is_const(c->in[1].dims[0], &M) || !kiln_expr_is_const(c->in[1].dims[1], &C) ||
        !kiln_expr_is_const(c->in[1].dims[2], &KH) || !kiln_expr_is_const(c->in[1].dims[3], &KW) ||
        !kiln_expr_is_const(c->in[2].dims[0], &bm) || bm != M || !kiln__stempool_fits(C, KH, KW, M) ||
        (kiln_expr_is_const(c->in[0].dims[1], &xc) && xc != C))
        return kiln_set_error(KILN_ESHAPE, "kiln::stempool: W must be M x C x KH x KW with C <= %d, KH, KW <= %d, "
                              "M a multiple of 32 (AVX-512 builds), B M long, X C channels",
                              KILN__FEWC_CMAX, KILN__FEWC_KMAX);
    kiln_desc *y = &c->out[0];
    y->dtype = KILN_DTYPE_F32;
    y->ndim = 4;
    y->dims[0] = c->in[0].dims[0];
    y->dims[1] = c->in[1].dims[0];
    for (int a = 0; a < 2; a++) {
        const kiln_expr *o = kiln__ops_pool_dim(c->x, c->in[0].dims[2 + a], a ? KW : KH, s[a], p[a] + p[2 + a], 1, 0);
        y->dims[2 + a] = kiln__ops_pool_dim(c->x, o, pk[a], ps[a], pp[a] + pp[2 + a], 1, 0);
    }
    return 0;
}

typedef struct sp {
    const kiln_call *c;
    kiln__fewc f;      /* the conv (f.x: image 0) */
    kiln__pool16c q;   /* the pool over one channel block of a band */
    int64_t N, CB, PH, PW, br, bh; /* pool rows a band; conv rows a band buffer holds */
    int64_t ps, pt;    /* the pool's row stride and top pad */
    float *y;
    int b16;           /* tactic 2: Y NCHW16C */
} sp;

/* Floats of a thread's buffer: the band's conv rows (16c, CB blocks of bh
 * rows), the band's pooled rows for tactic 1, and pool16c's column table. */
static size_t band_floats(const sp *g) { return (size_t)(g->CB * g->bh * g->f.OW * 16); }
static size_t out_floats(const sp *g) { return g->b16 ? 0 : (size_t)(g->CB * g->br * g->PW * 16); }

#if defined(__AVX512F__)
#include <immintrin.h>

/* 16 pixels x 16 channels (s: pixel-major, 16 floats a pixel) to the 16
 * channels' rows (d + l * ds): a 16 x 16 transpose in registers. */
static void transpose16(const float *s, float *d, int64_t ds) {
    __m512 r[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(s + 16 * i);
    kiln__tr16(r);
    for (int k = 0; k < 16; k++) _mm512_storeu_ps(d + k * ds, r[k]);
}
#endif

/* Pooled rows [py0, py1) of image n from the band buffer's 16c rows into
 * Y's planes (tactic 1): 16 channels of a pixel land 16 planes apart. */
static void to_planes(const sp *g, const float *o, int64_t n, int64_t py0, int64_t py1) {
    const int64_t plane = g->PH * g->PW;
    for (int64_t cb = 0; cb < g->CB; cb++)
        for (int64_t r = py0; r < py1; r++) {
            const float *s = o + (cb * g->br + r - py0) * g->PW * 16;
            float *d = g->y + (n * g->CB * 16 + cb * 16) * plane + r * g->PW;
            int64_t px = 0;
#if defined(__AVX512F__)
            for (; px + 16 <= g->PW; px += 16) transpose16(s + px * 16, d + px, plane);
#endif
            for (; px < g->PW; px++)
                for (int l = 0; l < 16; l++) d[l * plane + px] = s[px * 16 + l];
        }
}

/* Thread ith: the ith contiguous share of the (image, band) units, so
 * that the conv rows two bands share are carried from one to the next. */
static void bands_task(void *ud, int ith, int nth) {
    const sp *g = ud;
    const int64_t nb = (g->PH + g->br - 1) / g->br, OH = g->f.OH, OW = g->f.OW, bs = g->bh * OW * 16;
    int64_t u0, u1;
    kiln_split_range(g->N * nb, ith, nth, &u0, &u1);
    if (u1 <= u0) return;
    float *scr = kiln__cpu_scratch_or_fail(1, (size_t)kiln__fewc_scratch(&g->f), "kiln::stempool");
    float *band = kiln__cpu_scratch_or_fail(2, band_floats(g) + out_floats(g) + 2 * 3 * (size_t)g->PW, "kiln::stempool");
    if (!scr || !band) return;
    float *out = band + band_floats(g);
    int64_t *tab = (int64_t *)(out + out_floats(g)); /* 3 PW of them (band_floats and out_floats are even) */
    kiln__fewc f = g->f;
    int64_t held_n = -1, h0 = 0, h1 = 0; /* conv rows [h0, h1) of image held_n in the buffer */
    for (int64_t u = u0; u < u1; u++) {
        const int64_t n = u / nb, py0 = u % nb * g->br, py1 = py0 + g->br < g->PH ? py0 + g->br : g->PH;
        int64_t r0 = py0 * g->ps - g->pt, r1 = (py1 - 1) * g->ps - g->pt + g->q.kh;
        r0 = r0 < 0 ? 0 : r0 > OH ? OH : r0;
        r1 = r1 > OH ? OH : r1 < r0 ? r0 : r1;
        int64_t a = r0;
        if (held_n == n && r0 >= h0 && r0 < h1) { /* rows the band before computed: to the buffer's front */
            const int64_t keep = (h1 < r1 ? h1 : r1) - r0;
            for (int64_t cb = 0; cb < g->CB && r0 > h0; cb++)
                memmove(band + cb * bs, band + cb * bs + (r0 - h0) * OW * 16, (size_t)(keep * OW * 16) * sizeof(float));
            a = r0 + keep;
        }
        f.x = g->f.x + n * f.C * f.H * f.W;
        for (int64_t c0 = a; c0 < r1; c0 += 8) /* (8: kiln__fewc_rows splits its input rows per 8 output rows) */
            kiln__fewc_rows(&f, c0, c0 + 8 < r1 ? c0 + 8 : r1, band + (c0 - r0) * OW * 16, bs, scr);
        held_n = n, h0 = r0, h1 = r1;
        for (int64_t cb = 0; cb < g->CB; cb++) {
            kiln__pool16c q = g->q;
            q.x = band + cb * bs;
            q.H = r1 - r0;
            q.OH = py1 - py0;
            q.pt = r0 - (py0 * g->ps - g->pt); /* the band's first window starts pt rows above its first row */
            q.y = g->b16 ? g->y + ((n * g->CB + cb) * g->PH + py0) * g->PW * 16 : out + cb * g->br * g->PW * 16;
            kiln__pool16c_run(&q, 0, q.OH, tab);
        }
        if (!g->b16) to_planes(g, out, n, py0, py1);
    }
}

static int stempool_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0], *w = &c->in[1], *b = &c->in[2], *y = &c->out[0];
    if (kiln_tensor_numel(y) == 0) return 0;
    int64_t s[2], p[4], pk[2], ps[2], pp[4];
    int rc = read_geo(c->attrs, s, p, pk, ps, pp);
    if (rc) return rc;
    const int b16 = c->tactic == T_16C;
    if (x->dtype != KILN_DTYPE_F32 || x->ndim != 4 || !kiln__ops_dense(x) || !kiln__ops_dense(w) ||
        !kiln__ops_dense(b) || !kiln__stempool_fits(w->dims[1], w->dims[2], w->dims[3], w->dims[0]) ||
        x->dims[1] != w->dims[1] || b->dims[0] != w->dims[0] ||
        y->format != (b16 ? KILN_FORMAT_NCHW16C : KILN_FORMAT_LINEAR))
        return kiln_set_error(KILN_EUNSUPPORTED, "kiln::stempool: needs a stem conv (AVX-512, C <= %d, KH, KW <= %d, "
                              "M %% 32 == 0), X LINEAR and Y %s (tactic %d)", KILN__FEWC_CMAX, KILN__FEWC_KMAX,
                              b16 ? "NCHW16C" : "LINEAR", c->tactic);
    const int64_t OH = (x->dims[2] + p[0] + p[2] - w->dims[2]) / s[0] + 1;
    const int64_t OW = (x->dims[3] + p[1] + p[3] - w->dims[3]) / s[1] + 1;
    float lo = (float)kiln_attrs_float(c->attrs, "lo");
    if (lo <= -FLT_MAX) lo = -INFINITY; /* none: as Conv's kernel without a Relu */
    sp g = {.c = c, .N = x->dims[0], .CB = w->dims[0] / 16, .PH = y->dims[2], .PW = y->dims[3], .ps = ps[0],
            .pt = pp[0], .y = y->data, .b16 = b16};
    g.f = (kiln__fewc){.C = x->dims[1], .H = x->dims[2], .W = x->dims[3], .M = w->dims[0], .OH = OH, .OW = OW,
                       .KH = w->dims[2], .KW = w->dims[3], .sy = s[0], .sx = s[1], .pt = p[0], .pl = p[1],
                       .x = x->data, .w = w->data, .bias = b->data, .lo = lo,
                       .hi = INFINITY, .wp = c->prepacked && c->prepacked[1] ? c->prepacked[1] : NULL,
                       .nchw16c = 1};
    g.q = (kiln__pool16c){.N = 1, .CB = 1, .W = OW, .OW = g.PW, .kh = pk[0], .kw = pk[1], .sy = ps[0], .sx = ps[1],
                          .dy = 1, .dx = 1, .pl = pp[1], .pb = pp[2], .pr = pp[3]};
    const int threads = kiln_exec_threads(c->exec);
    g.br = BAND_MAX;
    while (g.br > 1 && g.N * ((g.PH + g.br - 1) / g.br) < threads) g.br--; /* a band for every thread */
    for (int64_t r = g.br; r >= (g.br + 1) / 2 && g.N * ((g.PH + g.br - 1) / g.br) % threads; r--)
        if (g.N * ((g.PH + r - 1) / r) % threads == 0) g.br = r; /* an even split where one is near */
    g.bh = (g.br - 1) * ps[0] + pk[0];
    kiln_exec_parallel(c->exec, threads, bands_task, &g);
    return 0;
}

/* kiln_quick_op.prepack: W in conv_fewc.c's blocks (Conv tactic 12's
 * packing and layout string). */
static int stempool_prepack(const kiln_call *c, int input, void *dst, size_t *size) {
    const kiln_tensor *w = &c->in[1];
    size_t want = *size;
    *size = 0;
    if (input != 1 || !w->data || w->dtype != KILN_DTYPE_F32 || w->ndim != 4 || !kiln__ops_dense(w)) return 0;
    kiln__fewc p = {.C = w->dims[1], .M = w->dims[0], .KH = w->dims[2], .KW = w->dims[3], .w = w->data};
    const size_t bytes = (size_t)kiln__fewc_packed_w(&p) * sizeof(float);
    if (dst && want != bytes)
        return kiln_set_error(KILN_EINTERNAL, "kiln::stempool prepack: %zu bytes asked, %zu given", bytes, want);
    if (dst) kiln__fewc_pack_w(&p, dst);
    *size = bytes;
    return 0;
}

/* kiln_quick_op.formats_fn: Y LINEAR (tactic 1); Y NCHW16C (tactic 2)
 * where the build offers the 16c rows. */
static int stempool_formats_fn(const kiln_shape_ctx *c, kiln_combo *out, int max) {
    int n = 0;
    if (max < 1) return 0;
    out[n++] = (kiln_combo){"FP32", NULL, {T_LINEAR}};
    if (n < max && kiln__shape_ctx_cpu_blocked(c))
        out[n++] = (kiln_combo){"FP32, FP32, FP32, FP32", "LINEAR, LINEAR, LINEAR, NCHW16C", {T_16C}};
    return n;
}

static const kiln_quick_op stempool_op = {
    .ns = "kiln", .name = "stempool", .version = 1, .min_inputs = 3, .max_inputs = 3, .num_outputs = 1,
    .attrs = stempool_attrs, .shape = stempool_shape, .impl = stempool_impl, .formats_fn = stempool_formats_fn,
    .prepack = stempool_prepack,
    .doc = "stem conv of few input channels + Relu + MaxPool in row bands (the conv output stays in cache)",
};
KILN_OP(stempool_op)
