/*
 * test_pool16c.c — pooling on NCHW16C (ops/nn/pool16c.c) and Conv tactic
 * 17 (the stem conv writing NCHW16C, ops/nn/conv_fewc.c).
 *
 * The pool kernel, called directly: MaxPool and AveragePool over random
 * geometries (planes 1..13 wide, windows 1..4, strides 1..3, dilations 1
 * and 2, pads up to the window, ceil_mode's last window, count_include_pad),
 * inputs with NaNs (some windows all NaN) and -inf, against a naive
 * reference written here (max: NaN skipped unless every tap is NaN, ONNX
 * Runtime's rule; an empty window -inf; average in double), Y poisoned
 * with NaN, the units split as 1-3 threads would (same bits); MaxPool's
 * Indices against pool.c's (NCHW numbering, both storage orders); the
 * global pools likewise.  Through the engine ($KILN_CPU_BLOCKED=force):
 * MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool run in NCHW16C
 * and give the bits of the LINEAR engine (the same order of operations),
 * 1-3 threads; a MaxPool whose Indices the network reads, in 16c.
 * Tactic 17 against the naive conv reference (with and without bias and
 * Relu; a chain of two Relus runs per pixel), and the
 * stem chain conv 7x7/2 + Relu -> MaxPool 3x3/2 (fused: kiln::stempool)
 * -> 1x1 conv (tactic 13) in NCHW16C with no reformat between them,
 * against the LINEAR engine, after a save and load too.
 */
#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "kiln_int.h"
#include "ops/nn/conv_dwrows.h"
#include "ops/nn/pool16c.h"
#include "test.h"
#include "test_ops_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_seed = 0x9016C0DE2026ull;

typedef struct pc {
    int64_t N, C, H, W, kh, kw, sy, sx, dy, dx, pt, pl, pb, pr;
    int avg, ceil, count_pad;
} pc;

/* pool.c's output size (ceil_mode: the last window starts inside) */
static int64_t odim(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1, int ceil) {
    int64_t num = in + p0 + p1 - (k - 1) * d - 1, o = (ceil ? (num + s - 1) / s : num / s) + 1;
    if (ceil && (o - 1) * s >= in + p0) o--;
    return o;
}

/* Same value: bits, or both NaN, or both zero. */
static int same(float a, float b) { return (isnan(a) && isnan(b)) || a == b; }

/* The naive reference on LINEAR x: y (and, for max, the NCHW index). */
static void pool_ref(const pc *t, int64_t OH, int64_t OW, const float *x, float *y, int64_t *ind, int order) {
    for (int64_t pl = 0; pl < t->N * t->C; pl++)
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++) {
                float best = -INFINITY;
                int64_t bi = -1, cnt = 0, cntp = 0;
                double s = 0;
                for (int64_t ky = 0; ky < t->kh; ky++)
                    for (int64_t kx = 0; kx < t->kw; kx++) {
                        int64_t iy = oy * t->sy - t->pt + ky * t->dy, ix = ox * t->sx - t->pl + kx * t->dx;
                        if (iy < t->H + t->pb && ix < t->W + t->pr) cntp++; /* inside the pads */
                        if (iy < 0 || iy >= t->H || ix < 0 || ix >= t->W) continue;
                        float v = x[(pl * t->H + iy) * t->W + ix];
                        s += v;
                        if (bi < 0 || isnan(best) || v > best) best = v, bi = iy * t->W + ix;
                        cnt++;
                    }
                int64_t o = (pl * OH + oy) * OW + ox, dv = t->count_pad ? cntp : cnt;
                y[o] = t->avg ? (dv ? (float)(s / (double)dv) : 0.0f) : best;
                if (ind) ind[o] = bi < 0 ? -1 : pl * t->H * t->W + (order ? bi % t->W * t->H + bi / t->W : bi);
            }
}

static void kernel_case(const pc *t) {
    const int64_t OH = odim(t->H, t->kh, t->sy, t->dy, t->pt, t->pb, t->ceil);
    const int64_t OW = odim(t->W, t->kw, t->sx, t->dx, t->pl, t->pr, t->ceil);
    if (OH < 1 || OW < 1) return;
    const int64_t S = t->H * t->W, nx = t->N * t->C * S, ny = t->N * t->C * OH * OW;
    float *x = test_rnd_f32(&g_seed, nx, -2.0f, 2.0f), *x16 = test_xmalloc((size_t)nx * sizeof(float));
    for (int64_t i = 3; i < nx; i += 37) x[i] = NAN;
    for (int64_t i = 11; i < nx; i += 53) x[i] = -INFINITY;
    for (int64_t i = 0; i < nx && t->H * t->W > 4; i++) /* plane 1: all NaN but one pixel row */
        if (i / S == 1 % (t->N * t->C) && i % S >= t->W) x[i] = NAN;
    float *ref = test_xmalloc((size_t)ny * sizeof(float)), *y16 = test_xmalloc((size_t)ny * sizeof(float));
    float *y = test_xmalloc((size_t)ny * sizeof(float)), *y1 = test_xmalloc((size_t)ny * sizeof(float));
    int64_t *iref = test_xmalloc((size_t)ny * sizeof(int64_t)), *ind = test_xmalloc((size_t)ny * sizeof(int64_t));
    int64_t *tab = test_xmalloc((size_t)(3 * OW) * sizeof(int64_t));
    for (int64_t n = 0; n < t->N; n++) test_to16c(x + n * t->C * S, t->C, S, x16 + n * t->C * S);
    kiln__pool16c p = {.N = t->N, .CB = t->C / 16, .H = t->H, .W = t->W, .OH = OH, .OW = OW, .kh = t->kh, .kw = t->kw,
                       .sy = t->sy, .sx = t->sx, .dy = t->dy, .dx = t->dx, .pt = t->pt, .pl = t->pl, .pb = t->pb,
                       .pr = t->pr, .avg = t->avg, .count_pad = t->count_pad, .x = x16, .y = y16};
    const int64_t units = kiln__pool16c_units(&p);
    char what[200];
    snprintf(what, sizeof what, "%s N %lld C %lld %lldx%lld k %lldx%lld s %lld,%lld d %lld,%lld pads %lld %lld %lld %lld ceil %d cip %d",
             t->avg ? "avg" : "max", (long long)t->N, (long long)t->C, (long long)t->H, (long long)t->W, (long long)t->kh,
             (long long)t->kw, (long long)t->sy, (long long)t->sx, (long long)t->dy, (long long)t->dx, (long long)t->pt,
             (long long)t->pl, (long long)t->pb, (long long)t->pr, t->ceil, t->count_pad);
    for (int with_ind = 0; with_ind < (t->avg ? 1 : 3); with_ind++) { /* 1, 2: Indices in either storage order */
        pool_ref(t, OH, OW, x, ref, with_ind ? iref : NULL, with_ind == 2);
        p.ind = with_ind ? ind : NULL;
        p.order = with_ind == 2;
        for (int threads = 1; threads <= 3; threads++) {
            for (int64_t i = 0; i < ny; i++) y16[i] = NAN, ind[i] = -7;
            for (int th = 0; th < threads; th++) kiln__pool16c_run(&p, units * th / threads, units * (th + 1) / threads, tab);
            for (int64_t n = 0; n < t->N; n++) test_from16c(y16 + n * t->C * OH * OW, t->C, OH * OW, y + n * t->C * OH * OW);
            for (int64_t i = 0; i < ny; i++) {
                if (t->avg ? !(fabsf(y[i] - ref[i]) <= 1e-6f * (1 + fabsf(ref[i])) || same(y[i], ref[i])) : !same(y[i], ref[i]))
                    TEST__FAIL("%s (Indices %d): element %lld: got %.9g, expected %.9g", what, with_ind, (long long)i,
                               (double)y[i], (double)ref[i]);
                if (with_ind && ind[i] != iref[i])
                    TEST__FAIL("%s (Indices %d): index %lld: got %lld, expected %lld", what, with_ind, (long long)i,
                               (long long)ind[i], (long long)iref[i]);
            }
            if (threads == 1) memcpy(y1, y16, (size_t)ny * sizeof(float));
            else if (memcmp(y1, y16, (size_t)ny * sizeof(float))) TEST__FAIL("%s: not the bits of 1 chunk", what);
        }
    }
    free(x), free(x16), free(ref), free(y16), free(y), free(y1), free(iref), free(ind), free(tab);
}

TEST_IMPL(pool16c_kernel) {
    /* ResNet's stem pool, then random geometries */
    kernel_case(&(pc){1, 64, 112, 112, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, 0});
    kernel_case(&(pc){2, 32, 13, 11, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, 0});
    kernel_case(&(pc){1, 16, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1});
    for (int k = 0; k < 300; k++) {
        pc t = {.N = test_rnd_int(&g_seed, 1, 2), .C = 16 * test_rnd_int(&g_seed, 1, 3), .H = test_rnd_int(&g_seed, 1, 13),
                .W = test_rnd_int(&g_seed, 1, 13), .kh = test_rnd_int(&g_seed, 1, 4), .kw = test_rnd_int(&g_seed, 1, 4),
                .sy = test_rnd_int(&g_seed, 1, 3), .sx = test_rnd_int(&g_seed, 1, 3), .dy = test_rnd_int(&g_seed, 1, 2),
                .dx = test_rnd_int(&g_seed, 1, 2), .avg = k % 2, .ceil = k / 2 % 2, .count_pad = k / 4 % 2};
        t.pt = test_rnd_int(&g_seed, 0, t.kh - 1), t.pb = test_rnd_int(&g_seed, 0, t.kh - 1);
        t.pl = test_rnd_int(&g_seed, 0, t.kw - 1), t.pr = test_rnd_int(&g_seed, 0, t.kw - 1);
        kernel_case(&t);
    }
}

TEST_IMPL(gpool16c_kernel) {
    static const int64_t sizes[] = {1, 2, 7, 49, 50};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int avg = 0; avg < 2; avg++) {
            const int64_t S = sizes[si], C = 48, N = 2, nx = N * C * S;
            float *x = test_rnd_f32(&g_seed, nx, -2.0f, 2.0f), *x16 = test_xmalloc((size_t)nx * sizeof(float));
            float y[2 * 48], ref[2 * 48], y1[2 * 48];
            for (int64_t i = 0; i < nx; i += 5) x[i] = NAN; /* pixel 0 of some channels: the PMAX path */
            for (int64_t i = 1; i < nx; i += 7) x[i] = -INFINITY;
            for (int64_t i = 0; i < S; i++) x[3 * S + i] = NAN; /* channel 3: all NaN */
            for (int64_t n = 0; n < N; n++) test_to16c(x + n * C * S, C, S, x16 + n * C * S);
            for (int64_t pl = 0; pl < N * C; pl++) {
                double s = 0;
                float m = x[pl * S];
                for (int64_t i = 0; i < S; i++) s += x[pl * S + i], m = x[pl * S + i] > m || isnan(m) ? x[pl * S + i] : m;
                ref[pl] = avg ? (float)(s / (double)S) : m;
            }
            for (int threads = 1; threads <= 3; threads++) {
                for (int i = 0; i < 96; i++) y[i] = NAN;
                for (int th = 0; th < threads; th++) kiln__gpool16c_run(x16, S, avg, 6 * th / threads, 6 * (th + 1) / threads, y);
                for (int i = 0; i < 96; i++)
                    if (!same(y[i], ref[i])) TEST__FAIL("global %s S %lld: channel %d: got %.9g, expected %.9g",
                                                        avg ? "avg" : "max", (long long)S, i, (double)y[i], (double)ref[i]);
                if (threads == 1) memcpy(y1, y, sizeof y);
                else ASSERT(!memcmp(y1, y, sizeof y));
            }
            free(x), free(x16);
        }
}

/* ---- through the engine ----------------------------------------------------- */

static int layer_of(const kiln_engine *e, const char *name) {
    for (int32_t l = 0; l < e->nlayers; l++)
        if (!strcmp(e->layers[l].op->name, name)) return l;
    return -1;
}

static int in_format(const kiln_engine *e, int l, int i) { return e->tensors[e->layers[l].in[i]].format; }

/* net built at 2 threads with blocked
 * candidates first ($KILN_CPU_BLOCKED=force); net is freed. */
static kiln_engine *build_forced(kiln_network *net) {
    kiln_engine *e = test_build_forced16c(net, 0, 2, NULL);
    kiln_network_free(net);
    return e;
}

/* Runs e at 1-3 threads on x (nx floats) into y (ny): the same bits at each. */
static void run_engine(kiln_engine *e, const float *x, int64_t nx, float *y, int64_t ny, const char *what) {
    float *y1 = test_xmalloc((size_t)ny * sizeof(float));
    for (int threads = 1; threads <= 3; threads++) {
        kiln_context *ctx;
        ASSERT_OK(kiln_context_create(e, threads, &ctx));
        kiln_context_set_debug(ctx, 1);
        ASSERT_OK(kiln_context_bind(ctx, "X", (void *)x, (size_t)nx * sizeof(float)));
        for (int64_t i = 0; i < ny; i++) y[i] = NAN;
        ASSERT_OK(kiln_context_bind(ctx, "Y", y, (size_t)ny * sizeof(float)));
        if (kiln_context_run(ctx)) TEST__FAIL("%s: run: %s", what, kiln_errmsg());
        kiln_context_free(ctx);
        if (threads == 1) memcpy(y1, y, (size_t)ny * sizeof(float));
        else if (memcmp(y1, y, (size_t)ny * sizeof(float))) TEST__FAIL("%s: %d threads: not the bits of 1", what, threads);
    }
    free(y1);
}

/* A Relu (so that the pool reads an activation a 16c layer wrote) then the
 * pool; forced into NCHW16C against the default LINEAR engine. */
static void engine_pool(const char *op, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t pad, int ceil) {
    const int global = !strncmp(op, "Global", 6);
    const int64_t OH = global ? 1 : odim(H, k, s, 1, pad, pad, ceil), OW = global ? 1 : odim(W, k, s, 1, pad, pad, ceil);
    const int64_t nx = 2 * C * H * W, ny = 2 * C * OH * OW;
    float *x = test_rnd_f32(&g_seed, nx, -2.0f, 2.0f), *y = test_xmalloc((size_t)ny * sizeof(float));
    float *yl = test_xmalloc((size_t)ny * sizeof(float));
    for (int64_t i = 5; i < nx; i += 41) x[i] = NAN;
    kiln_network *net = kiln_network_create();
    int64_t xd[4] = {2, C, H, W};
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL));
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 14, "relu", 1, (const char *[]){"X"}, 1, (const char *[]){"r"}));
    char id[64];
    snprintf(id, sizeof id, "ai.onnx::%s", op);
    kiln_layer *l = kiln_network_add_layer(net, id, !strcmp(op, "MaxPool") ? 12 : !strcmp(op, "AveragePool") ? 11 : 1,
                                           "pool", 1, (const char *[]){"r"}, 1, (const char *[]){"Y"});
    ASSERT(l);
    if (!global) {
        ASSERT_OK(kiln_layer_set_ints(l, "kernel_shape", (const int64_t[]){k, k}, 2));
        ASSERT_OK(kiln_layer_set_ints(l, "strides", (const int64_t[]){s, s}, 2));
        ASSERT_OK(kiln_layer_set_ints(l, "pads", (const int64_t[]){pad, pad, pad, pad}, 4));
        ASSERT_OK(kiln_layer_set_int(l, "ceil_mode", ceil));
        if (!strcmp(op, "AveragePool")) ASSERT_OK(kiln_layer_set_int(l, "count_include_pad", 1));
    }
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_engine *el = test_build_ok(net, KILN_BUILD_CPU_LINEAR, 2, NULL), *e = build_forced(net);
    char what[128];
    snprintf(what, sizeof what, "engine %s C %lld %lldx%lld k %lld s %lld pad %lld ceil %d", op, (long long)C,
             (long long)H, (long long)W, (long long)k, (long long)s, (long long)pad, ceil);
    const int pl = layer_of(e, op);
    ASSERT(pl >= 0);
    if (in_format(e, pl, 0) != KILN_FORMAT_NCHW16C) TEST__FAIL("%s: the pool reads %d, not NCHW16C", what, in_format(e, pl, 0));
    ASSERT_EQ(test_count_op(el, "reformat"), 0);
    run_engine(el, x, nx, yl, ny, what);
    run_engine(e, x, nx, y, ny, what);
    for (int64_t i = 0; i < ny; i++)
        if (!same(y[i], yl[i])) TEST__FAIL("%s: element %lld: %.9g, LINEAR engine %.9g", what, (long long)i, (double)y[i], (double)yl[i]);
    kiln_engine_free(e);
    kiln_engine_free(el);
    free(x), free(y), free(yl);
}

/* A MaxPool whose Indices the network reads, forced into NCHW16C: the
 * 16c kernel computes them lane by lane (LINEAR, NCHW numbering). */
static void engine_pool_indices(void) {
    const int64_t nx = 32 * 9 * 9, ny = 32 * 4 * 4;
    float *x = test_rnd_f32(&g_seed, nx, -2.0f, 2.0f), y[32 * 16];
    int64_t ind[32 * 16];
    kiln_network *net = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, (const int64_t[]){1, 32, 9, 9}, NULL));
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 14, "relu", 1, (const char *[]){"X"}, 1, (const char *[]){"r"}));
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::MaxPool", 12, "pool", 1, (const char *[]){"r"}, 2,
                                           (const char *[]){"Y", "I"});
    ASSERT_OK(kiln_layer_set_ints(l, "kernel_shape", (const int64_t[]){3, 3}, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "strides", (const int64_t[]){2, 2}, 2));
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    ASSERT_OK(kiln_network_mark_output(net, "I"));
    kiln_engine *e = build_forced(net);
    const int pl = layer_of(e, "MaxPool");
    ASSERT(pl >= 0);
    ASSERT_EQ(in_format(e, pl, 0), KILN_FORMAT_NCHW16C);
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, 2, &ctx));
    ASSERT_OK(kiln_context_bind(ctx, "X", x, (size_t)nx * sizeof(float)));
    ASSERT_OK(kiln_context_bind(ctx, "Y", y, sizeof y));
    ASSERT_OK(kiln_context_bind(ctx, "I", ind, sizeof ind));
    if (kiln_context_run(ctx)) TEST__FAIL("MaxPool with Indices: run: %s", kiln_errmsg());
    for (int64_t i = 0; i < ny; i++) { /* Y is the input at the index */
        const float v = x[ind[i]] > 0 ? x[ind[i]] : 0.0f;
        ASSERT(ind[i] >= 0 && ind[i] < nx && same(v, y[i]));
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
    free(x);
}

TEST_IMPL(pool16c_engine) {
    engine_pool_indices();
    engine_pool("MaxPool", 64, 20, 22, 3, 2, 1, 0);
    engine_pool("MaxPool", 32, 9, 7, 2, 2, 0, 1);
    engine_pool("AveragePool", 48, 9, 7, 3, 2, 1, 1);
    engine_pool("GlobalAveragePool", 64, 7, 7, 0, 0, 0, 0);
    engine_pool("GlobalMaxPool", 32, 5, 3, 0, 0, 0, 0);
}

/* ---- Conv tactic 17 ----------------------------------------------------------- */

/* Conv (C -> M, k x k, stride s, pad p) [+ Relu [+ Relu]]: the stem's
 * conv forced into tactic 17 (NCHW16C out, reformatted back to LINEAR
 * for Y), against the naive reference. */
static void engine_stem(int64_t C, int64_t M, int64_t H, int64_t W, int64_t k, int64_t s, int64_t p, int bias,
                        int relus) {
    const int64_t OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1, nx = C * H * W, ny = M * OH * OW;
    float *x = test_rnd_f32(&g_seed, nx, -1.0f, 1.0f), *w = test_rnd_f32(&g_seed, M * C * k * k, -1.0f, 1.0f);
    float *b = test_rnd_f32(&g_seed, M, -0.5f, 0.5f), *y = test_xmalloc((size_t)ny * sizeof(float));
    double *ref = test_xmalloc((size_t)ny * sizeof(double));
    test_conv_geo g = test_conv_geo_make(1, C, M, 1, 2, (const int64_t[]){H, W}, (const int64_t[]){k, k},
                                         (const int64_t[]){s, s}, (const int64_t[]){1, 1}, (const int64_t[]){p, p},
                                         (const int64_t[]){OH, OW});
    test_conv_ref(&g, x, w, bias ? b : NULL, ref);
    for (int64_t i = 0; i < ny && relus; i++) ref[i] = ref[i] > 0 ? ref[i] : 0;
    kiln_network *net = kiln_network_create();
    int64_t xd[4] = {1, C, H, W}, wd[4] = {M, C, k, k};
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "W", KILN_DTYPE_F32, 4, wd, w));
    ASSERT_OK(kiln_network_add_constant(net, "B", KILN_DTYPE_F32, 1, (const int64_t[]){M}, b));
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::Conv", 11, "conv", bias ? 3 : 2, (const char *[]){"X", "W", "B"},
                                           1, (const char *[]){relus ? "c" : "Y"});
    ASSERT_OK(kiln_layer_set_ints(l, "strides", (const int64_t[]){s, s}, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "pads", (const int64_t[]){p, p, p, p}, 4));
    if (relus == 1) ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 14, "r1", 1, (const char *[]){"c"}, 1, (const char *[]){"Y"}));
    if (relus == 2) {
        ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 14, "r1", 1, (const char *[]){"c"}, 1, (const char *[]){"d"}));
        ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 14, "r2", 1, (const char *[]){"d"}, 1, (const char *[]){"Y"}));
    }
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_engine *e = build_forced(net);
    const int cl = layer_of(e, "Conv");
    ASSERT(cl >= 0);
    ASSERT_EQ(e->layers[cl].tactic, 17);
    ASSERT_EQ(e->layers[cl].nepi, relus);
    ASSERT(e->layers[cl].prepacked && e->layers[cl].prepacked[1]);
    ASSERT_EQ(test_count_op(e, "reformat"), 1); /* Y back to LINEAR */
    char what[128];
    snprintf(what, sizeof what, "tactic 17: C %lld M %lld %lldx%lld k %lld s %lld p %lld bias %d relus %d", (long long)C,
             (long long)M, (long long)H, (long long)W, (long long)k, (long long)s, (long long)p, bias, relus);
    for (int round = 0; round < 2; round++) {
        kiln_engine *e2 = round ? test_roundtrip(e) : e;
        if (round) ASSERT(e2->layers[cl].prepacked_stored >> 1 & 1); /* W packed in the file */
        run_engine(e2, x, nx, y, ny, what);
        test_check_close(what, y, ref, ny, 1e-5 * (double)(C * k * k));
        if (round) kiln_engine_free(e2);
    }
    kiln_engine_free(e);
    free(x), free(w), free(b), free(y), free(ref);
}

/* ResNet's stem in miniature: conv 7x7/2 (3 -> 64) + Relu -> MaxPool 3x3/2
 * -> conv 1x1 (64 -> 64) + Relu, forced into NCHW16C: the stem and pool
 * fused (kiln::stempool tactic 2, tactic 17's tile and this pool kernel in
 * row bands) and tactic 13 with no reformat between them, the LINEAR
 * engine's result. */
static void engine_chain(int64_t H, int64_t W) {
    const int64_t OH = (H + 6 - 7) / 2 + 1, OW = (W + 6 - 7) / 2 + 1, PH = (OH + 2 - 3) / 2 + 1, PW = (OW + 2 - 3) / 2 + 1;
    const int64_t nx = 3 * H * W, ny = 64 * PH * PW;
    float *x = test_rnd_f32(&g_seed, nx, -1.0f, 1.0f), *w1 = test_rnd_f32(&g_seed, 64 * 3 * 49, -0.3f, 0.3f);
    float *w2 = test_rnd_f32(&g_seed, 64 * 64, -0.3f, 0.3f), *b1 = test_rnd_f32(&g_seed, 64, -0.1f, 0.1f);
    float *y = test_xmalloc((size_t)ny * sizeof(float)), *yl = test_xmalloc((size_t)ny * sizeof(float));
    double *ref = test_xmalloc((size_t)ny * sizeof(double));
    kiln_network *net = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, (const int64_t[]){1, 3, H, W}, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "W1", KILN_DTYPE_F32, 4, (const int64_t[]){64, 3, 7, 7}, w1));
    ASSERT_OK(kiln_network_add_constant(net, "B1", KILN_DTYPE_F32, 1, (const int64_t[]){64}, b1));
    ASSERT_OK(kiln_network_add_constant(net, "W2", KILN_DTYPE_F32, 4, (const int64_t[]){64, 64, 1, 1}, w2));
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::Conv", 11, "stem", 3, (const char *[]){"X", "W1", "B1"}, 1,
                                           (const char *[]){"c"});
    ASSERT_OK(kiln_layer_set_ints(l, "strides", (const int64_t[]){2, 2}, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "pads", (const int64_t[]){3, 3, 3, 3}, 4));
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 14, "r1", 1, (const char *[]){"c"}, 1, (const char *[]){"r"}));
    l = kiln_network_add_layer(net, "ai.onnx::MaxPool", 12, "mp", 1, (const char *[]){"r"}, 1, (const char *[]){"m"});
    ASSERT_OK(kiln_layer_set_ints(l, "kernel_shape", (const int64_t[]){3, 3}, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "strides", (const int64_t[]){2, 2}, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "pads", (const int64_t[]){1, 1, 1, 1}, 4));
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Conv", 11, "pw", 2, (const char *[]){"m", "W2"}, 1, (const char *[]){"p"}));
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 14, "r2", 1, (const char *[]){"p"}, 1, (const char *[]){"Y"}));
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_engine *el = test_build_ok(net, KILN_BUILD_CPU_LINEAR, 2, NULL), *e = build_forced(net);
    /* stem + Relu + MaxPool as one kiln::stempool (stempool_fuse.c) writing
     * NCHW16C (its tactic 2), pw + Relu, the reformat of Y */
    ASSERT_EQ(e->nlayers, 3);
    ASSERT_EQ(test_count_op(e, "reformat"), 1);
    ASSERT_EQ(test_count_op(e, "stempool"), 1);
    ASSERT_EQ(e->layers[0].tactic, 2);
    ASSERT_EQ(e->layers[1].tactic, 13);
    ASSERT_EQ(in_format(e, 1, 0), KILN_FORMAT_NCHW16C);
    char what[64];
    snprintf(what, sizeof what, "stem chain %lldx%lld", (long long)H, (long long)W);
    run_engine(el, x, nx, yl, ny, "LINEAR stem chain");
    for (int64_t i = 0; i < ny; i++) ref[i] = yl[i];
    for (int round = 0; round < 2; round++) {
        kiln_engine *e2 = round ? test_roundtrip(e) : e;
        run_engine(e2, x, nx, y, ny, what);
        test_check_close(what, y, ref, ny, 1e-4);
        if (round) kiln_engine_free(e2);
    }
    kiln_engine_free(e);
    kiln_engine_free(el);
    free(x), free(w1), free(w2), free(b1), free(y), free(yl), free(ref);
}

TEST_IMPL(conv_fewc16c) {
    if (!kiln__dwrows_fits(1, 3)) { /* tactic 12's kernel, and so 17's, is AVX-512 only */
        fprintf(stderr, "skipped: not an AVX-512 build\n");
        return;
    }
    engine_stem(3, 64, 37, 29, 7, 2, 3, 1, 1);
    engine_stem(3, 32, 23, 40, 3, 2, 1, 0, 0);
    engine_stem(1, 16, 17, 18, 5, 1, 2, 1, 2);
    engine_stem(4, 48, 9, 33, 3, 1, 1, 1, 1);
    engine_chain(45, 39);
    engine_chain(64, 64);
}

TEST_LIST(TEST_ENTRY(pool16c_kernel), TEST_ENTRY(gpool16c_kernel), TEST_ENTRY(pool16c_engine), TEST_ENTRY(conv_fewc16c))
