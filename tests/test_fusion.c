/*
 * test_fusion.c — speed paths that must not change results.
 *
 * GEMV: Gemm and MatMul with one row of A (M == 1) stream the weights
 * through a dedicated matrix-vector kernel (sgemm.c: gemv_cols for
 * transB = 1, gemv_rows for row-major B) instead of the packed SGEMM.
 * Every variant the kernel distinguishes is built through the public API
 * and compared with a naive double-precision reference on fresh random
 * data: transA/transB, alpha/beta, every C shape, N and K around the
 * vector widths (remainders), a strided A row longer than the stack copy
 * (packed fallback), 1 and 2 threads, outputs poisoned before each run.
 *
 * Epilogue fusion (plugin.h): networks such as Conv -> BatchNormalization
 * -> Clip, Gemm -> Relu, Conv -> PRelu, MatMul -> Sigmoid, ConvTranspose ->
 * LeakyRelu are built through the public API and compared with naive
 * references computed here; the build stats and kiln_engine_inspect show
 * the fusion happened (or, for graphs where it must not, that it did not);
 * a fused engine survives serialize/load.
 *
 * Optional outputs: MaxPool's Indices, when nothing reads them, reach the
 * kernel as NULL (kiln_quick_op.optional_outputs) and are not computed.
 */
#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "kiln_int.h"
#include "ops/nn/conv_dwrows.h"
#include "test.h"
#include "test_engine_util.h"
#include "test_ops_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* engine/file.c (kiln_int.h): checksums of an image patched on purpose made consistent again */
void kiln__file_reseal(uint8_t *p, size_t n);

static uint64_t g_seed = 0x5DEECE66Dull;

static float *rnd(int64_t n) { return test_rnd_f32(&g_seed, n, -1.0f, 1.0f); }

/* Build `net` (output "Y" of n floats), run it on input "A" with `threads`
 * threads, output poisoned first. */
static void run1(kiln_network *net, const float *a, int64_t na, float *y, int64_t ny, int threads) {
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, threads, NULL);
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, threads, &ctx));
    ASSERT_OK(kiln_context_bind(ctx, "A", (void *)a, (size_t)na * sizeof(float)));
    memset(y, 0xA5, (size_t)ny * sizeof(float)); /* poison: a NaN pattern */
    ASSERT_OK(kiln_context_bind(ctx, "Y", y, (size_t)ny * sizeof(float)));
    int rc = kiln_context_run(ctx);
    if (rc) TEST__FAIL("run: %s", kiln_errmsg());
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

typedef struct gemv_case {
    int64_t N, K;
    int ta, tb;
    float alpha, beta;
    int cdims; /* 0 none, 1: (N), 2: (1, N), 3: (1, 1), 4: (1) */
} gemv_case;

static void gemm_m1(const gemv_case *g, int threads) {
    int64_t N = g->N, K = g->K;
    float *a = rnd(K), *b = rnd(K * N), *c = rnd(N);
    float *y = malloc((size_t)N * sizeof(float));
    double *ref = malloc((size_t)N * sizeof(double));
    ASSERT(y && ref);
    kiln_network *net = kiln_network_create();
    ASSERT(net);
    int64_t ad[2] = {g->ta ? K : 1, g->ta ? 1 : K};
    int64_t bd[2] = {g->tb ? N : K, g->tb ? K : N};
    ASSERT_OK(kiln_network_add_input(net, "A", KILN_DTYPE_F32, 2, ad, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "B", KILN_DTYPE_F32, 2, bd, b));
    int64_t cd[2] = {N, 0};
    int cn = 1;
    switch (g->cdims) {
    case 1: cn = (int)N; break;
    case 2: cd[0] = 1; cd[1] = N; cn = (int)N; break;
    case 3: cd[0] = 1; cd[1] = 1; break;
    case 4: cd[0] = 1; break;
    }
    if (g->cdims)
        ASSERT_OK(kiln_network_add_constant(net, "C", KILN_DTYPE_F32, g->cdims == 2 || g->cdims == 3 ? 2 : 1,
                                            cd, c));
    const char *ins[3] = {"A", "B", "C"}, *outs[1] = {"Y"};
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::Gemm", 11, "fc", g->cdims ? 3 : 2, ins, 1, outs);
    if (!l) TEST__FAIL("add_layer: %s", kiln_errmsg());
    ASSERT_OK(kiln_layer_set_int(l, "transA", g->ta));
    ASSERT_OK(kiln_layer_set_int(l, "transB", g->tb));
    ASSERT_OK(kiln_layer_set_float(l, "alpha", g->alpha));
    ASSERT_OK(kiln_layer_set_float(l, "beta", g->beta));
    run1(net, a, K, y, N, threads);
    kiln_network_free(net);
    for (int64_t j = 0; j < N; j++) {
        double s = 0;
        for (int64_t k = 0; k < K; k++) s += (double)a[k] * (g->tb ? b[j * K + k] : b[k * N + j]);
        s *= g->alpha;
        if (g->cdims) s += (double)g->beta * c[cn == 1 ? 0 : j];
        ref[j] = s;
    }
    char what[128];
    snprintf(what, sizeof what, "Gemm M=1 N=%lld K=%lld ta=%d tb=%d c=%d threads=%d", (long long)N,
             (long long)K, g->ta, g->tb, g->cdims, threads);
    test_check_close(what, y, ref, N, 2e-6 * (double)K);
    free(a); free(b); free(c); free(y); free(ref);
}

TEST_IMPL(gemv_gemm) {
    static const gemv_case cases[] = {
        {1000, 1280, 0, 1, 1.0f, 1.0f, 1},  /* classifier head, as in MobileNetV2 */
        {1000, 1280, 0, 0, 1.0f, 1.0f, 2},  /* row-major weights */
        {1, 7, 0, 1, 1.0f, 0.0f, 0},        /* N = 1 */
        {3, 1, 0, 0, 2.0f, 1.0f, 3},        /* K = 1 */
        {17, 33, 1, 1, -0.5f, 2.0f, 4},     /* strided A row (transA), remainders */
        {63, 15, 1, 0, 1.5f, 0.5f, 1},      /* K below one vector */
        {129, 100, 0, 0, 1.0f, -1.0f, 2},   /* 64 + 64 + 1 columns */
        {300, 2100, 1, 1, 1.0f, 1.0f, 1},   /* strided A longer than the stack copy */
        {80, 2100, 1, 0, 0.25f, 1.0f, 0},
        {600, 64, 0, 1, 1.0f, 3.0f, 2},     /* accumulate over several 256 blocks */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int t = 1; t <= 2; t++) gemm_m1(&cases[i], t);
}

/* MatMul with a 1-D A ([K] x [K, N] -> [N]) and one row ([1, K] x [K, N]). */
static void matmul_m1(int rank_a, int64_t N, int64_t K, int threads) {
    float *a = rnd(K), *b = rnd(K * N), *y = malloc((size_t)N * sizeof(float));
    double *ref = malloc((size_t)N * sizeof(double));
    ASSERT(y && ref);
    kiln_network *net = kiln_network_create();
    ASSERT(net);
    int64_t ad[2] = {1, K}, bd[2] = {K, N};
    ASSERT_OK(kiln_network_add_input(net, "A", KILN_DTYPE_F32, rank_a, rank_a == 1 ? ad + 1 : ad, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "B", KILN_DTYPE_F32, 2, bd, b));
    const char *ins[2] = {"A", "B"}, *outs[1] = {"Y"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::MatMul", 13, "mm", 2, ins, 1, outs));
    run1(net, a, K, y, N, threads);
    kiln_network_free(net);
    for (int64_t j = 0; j < N; j++) {
        double s = 0;
        for (int64_t k = 0; k < K; k++) s += (double)a[k] * b[k * N + j];
        ref[j] = s;
    }
    char what[96];
    snprintf(what, sizeof what, "MatMul rank(A)=%d N=%lld K=%lld threads=%d", rank_a, (long long)N,
             (long long)K, threads);
    test_check_close(what, y, ref, N, 2e-6 * (double)K);
    free(a); free(b); free(y); free(ref);
}

TEST_IMPL(gemv_matmul) {
    for (int t = 1; t <= 2; t++) {
        matmul_m1(1, 1000, 512, t);
        matmul_m1(2, 77, 301, t);
        matmul_m1(2, 16, 3, t);
        matmul_m1(1, 5, 40, t);
    }
}


/* ---- epilogue fusion ----------------------------------------------------- */

static void add_const(kiln_network *net, const char *name, int nd, const int64_t *dims, const float *d) {
    ASSERT_OK(kiln_network_add_constant(net, name, KILN_DTYPE_F32, nd, dims, d));
}

static kiln_layer *layer(kiln_network *net, const char *op, int ver, const char *name, int nin,
                         const char *const *ins, const char *out) {
    const char *outs[1] = {out};
    kiln_layer *l = kiln_network_add_layer(net, op, ver, name, nin, ins, 1, outs);
    if (!l) TEST__FAIL("add_layer %s: %s", op, kiln_errmsg());
    return l;
}

/* in -> BatchNormalization (version ver; constants scale, bb, mean, var of
 * [m] from the arrays) -> out. */
static void add_bn(kiln_network *net, int ver, const char *in, const char *out, int64_t m, const float *sc,
                   const float *bb, const float *mean, const float *var) {
    int64_t md[1] = {m};
    add_const(net, "scale", 1, md, sc);
    add_const(net, "bb", 1, md, bb);
    add_const(net, "mean", 1, md, mean);
    add_const(net, "var", 1, md, var);
    layer(net, "ai.onnx::BatchNormalization", ver, "bn", 5, (const char *[]){in, "scale", "bb", "mean", "var"},
          out);
}

/* in -> Clip to [*lo, *hi] (scalar constants "lo", "hi") -> out. */
static void add_clip(kiln_network *net, const char *in, const char *out, const float *lo, const float *hi) {
    add_const(net, "lo", 0, NULL, lo);
    add_const(net, "hi", 0, NULL, hi);
    layer(net, "ai.onnx::Clip", 13, "clip", 3, (const char *[]){in, "lo", "hi"}, out);
}

/* Run e on input "X" (nx floats) into output "Y" (ny floats, poisoned). */
static void run_xy(const kiln_engine *e, int threads, int debug, const float *x, int64_t nx, float *y,
                   int64_t ny) {
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, threads, &ctx));
    kiln_context_set_debug(ctx, debug);
    ASSERT_OK(kiln_context_bind(ctx, "X", (void *)x, (size_t)nx * sizeof(float)));
    memset(y, 0xA5, (size_t)ny * sizeof(float));
    ASSERT_OK(kiln_context_bind(ctx, "Y", y, (size_t)ny * sizeof(float)));
    int rc = kiln_context_run(ctx);
    if (rc) TEST__FAIL("run: %s", kiln_errmsg());
    kiln_context_free(ctx);
}

/* Convolution geometry (test_ops_util.h; naive reference test_conv_ref). */
typedef test_conv_geo cgeo;

static void cgeo_out(cgeo *g) {
    for (int i = 0; i < 3; i++) g->o[i] = (g->id[i] + 2 * g->p[i] - g->d[i] * (g->k[i] - 1) - 1) / g->s[i] + 1;
}

/* Set Conv attributes for the last `nsp` spatial dims of g. */
static void conv_attrs(kiln_layer *l, const cgeo *g, int nsp) {
    int64_t k[3], s[3], p[6], d[3];
    for (int i = 0; i < nsp; i++) {
        int j = 3 - nsp + i;
        k[i] = g->k[j]; s[i] = g->s[j]; d[i] = g->d[j];
        p[i] = p[i + nsp] = g->p[j];
    }
    ASSERT_OK(kiln_layer_set_ints(l, "kernel_shape", k, nsp));
    ASSERT_OK(kiln_layer_set_ints(l, "strides", s, nsp));
    ASSERT_OK(kiln_layer_set_ints(l, "pads", p, 2 * nsp));
    ASSERT_OK(kiln_layer_set_ints(l, "dilations", d, nsp));
    ASSERT_OK(kiln_layer_set_int(l, "group", g->G));
}

/* Conv -> BatchNormalization -> Clip (-> PRelu when prelu), all fused. */
static void conv_chain(cgeo g, int nsp, int prelu, unsigned flags, int threads) {
    cgeo_out(&g);
    int64_t Cg = g.C / g.G, ksz = g.k[0] * g.k[1] * g.k[2];
    int64_t nx = g.N * g.C * g.id[0] * g.id[1] * g.id[2], nw = g.M * Cg * ksz;
    int64_t osp = g.o[0] * g.o[1] * g.o[2], ny = g.N * g.M * osp;
    float *x = rnd(nx), *w = rnd(nw), *bias = rnd(g.M), *sc = rnd(g.M), *bb = rnd(g.M), *mean = rnd(g.M);
    float *var = rnd(g.M), *slope = rnd(g.M);
    for (int64_t i = 0; i < g.M; i++) var[i] = 0.1f + var[i] * var[i];
    float lo = -0.4f, hi = 0.7f;
    kiln_network *net = kiln_network_create();
    int64_t xd[5] = {g.N, g.C}, wd[5] = {g.M, Cg}, md[1] = {g.M}, sd[4] = {g.M, 1, 1, 1};
    for (int i = 0; i < nsp; i++) {
        xd[2 + i] = g.id[3 - nsp + i];
        wd[2 + i] = g.k[3 - nsp + i];
    }
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 2 + nsp, xd, NULL));
    add_const(net, "W", 2 + nsp, wd, w);
    add_const(net, "B", 1, md, bias);
    add_const(net, "slope", 1 + nsp, sd, slope);
    conv_attrs(layer(net, "ai.onnx::Conv", 11, "conv", 3, (const char *[]){"X", "W", "B"}, "c"), &g, nsp);
    add_bn(net, 15, "c", "n", g.M, sc, bb, mean, var);
    add_clip(net, "n", prelu ? "r" : "Y", &lo, &hi);
    if (prelu) layer(net, "ai.onnx::PRelu", 16, "prelu", 2, (const char *[]){"r", "slope"}, "Y");
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_build_stats st;
    kiln_engine *e = test_build_ok(net, flags, threads, &st);
    kiln_network_free(net);
    ASSERT_EQ(st.fused, 2 + prelu);
    ASSERT_EQ(st.layers, 1);
    char *txt = test_inspect_text(e);
    /* the BatchNormalization is folded into W and B (builder/pointwise_fold.c) */
    ASSERT_CONTAINS(txt, prelu ? "ai.onnx::Conv v1 + Clip + PRelu" : "ai.onnx::Conv v1 + Clip");
    ASSERT_CONTAINS(txt, "'W:scaled' f32");
    free(txt);
    double *ref = malloc((size_t)ny * sizeof(double));
    test_conv_ref(&g, x, w, bias, ref);
    for (int64_t n = 0; n < g.N; n++)
        for (int64_t m = 0; m < g.M; m++)
            for (int64_t i = 0; i < osp; i++) {
                double *v = &ref[(n * g.M + m) * osp + i];
                *v = (*v - mean[m]) / sqrt((double)var[m] + 1e-5) * sc[m] + bb[m];
                *v = *v < lo ? lo : *v > hi ? hi : *v;
                if (prelu && *v < 0) *v *= slope[m];
            }
    float *y = malloc((size_t)ny * sizeof(float));
    run_xy(e, threads, 0, x, nx, y, ny);
    char what[160];
    snprintf(what, sizeof what, "conv chain N=%lld C=%lld M=%lld G=%lld k=%lld nsp=%d flags=%u",
             (long long)g.N, (long long)g.C, (long long)g.M, (long long)g.G, (long long)g.k[2], nsp, flags);
    test_check_close(what, y, ref, ny, 1e-4 * (double)(Cg * ksz));
    run_xy(e, threads, 1, x, nx, y, ny); /* debug mode: every element written */
    test_check_close(what, y, ref, ny, 1e-4 * (double)(Cg * ksz));
    kiln_engine_free(e);
    free(x); free(w); free(bias); free(sc); free(bb); free(mean); free(var); free(slope);
    free(ref); free(y);
}

TEST_IMPL(fuse_conv_bn_clip) {
    /* depthwise 3x3 (direct tactic), dense 3x3 (padded GEMM), 1x1 (GEMM),
     * strided + dilated, 1-D, 3-D (GEMM), 2 images, timed build */
    cgeo dw = {.N = 1, .C = 16, .M = 16, .G = 16, .id = {1, 13, 11}, .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 1, 1}, .d = {1, 1, 1}};
    cgeo dense = {.N = 2, .C = 8, .M = 24, .G = 1, .id = {1, 10, 9}, .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 1, 1}, .d = {1, 1, 1}};
    cgeo pw = {.N = 1, .C = 32, .M = 40, .G = 1, .id = {1, 7, 7}, .k = {1, 1, 1}, .s = {1, 1, 1}, .p = {0, 0, 0}, .d = {1, 1, 1}};
    cgeo sd = {.N = 1, .C = 6, .M = 12, .G = 2, .id = {1, 17, 15}, .k = {1, 3, 3}, .s = {1, 2, 2}, .p = {0, 2, 2}, .d = {1, 2, 2}};
    cgeo c1 = {.N = 2, .C = 5, .M = 7, .G = 1, .id = {1, 1, 50}, .k = {1, 1, 5}, .s = {1, 1, 1}, .p = {0, 0, 2}, .d = {1, 1, 1}};
    cgeo c3 = {.N = 1, .C = 3, .M = 4, .G = 1, .id = {5, 6, 7}, .k = {3, 3, 3}, .s = {1, 1, 1}, .p = {1, 1, 1}, .d = {1, 1, 1}};
    cgeo dw2 = {.N = 1, .C = 8, .M = 8, .G = 8, .id = {1, 21, 75}, .k = {1, 3, 3}, .s = {1, 2, 2}, .p = {0, 1, 1}, .d = {1, 1, 1}};
    conv_chain(dw, 2, 0, KILN_BUILD_NO_TIMING, 1);
    conv_chain(dw2, 2, 1, KILN_BUILD_NO_TIMING, 2); /* stride-2 depthwise (deinterleaved rows) */
    conv_chain(dense, 2, 0, KILN_BUILD_NO_TIMING, 2);
    conv_chain(pw, 2, 1, KILN_BUILD_NO_TIMING, 1);
    conv_chain(sd, 2, 1, KILN_BUILD_NO_TIMING, 2);
    conv_chain(c1, 1, 0, KILN_BUILD_NO_TIMING, 1);
    conv_chain(c3, 3, 1, KILN_BUILD_NO_TIMING, 2);
    cgeo big = {.N = 1, .C = 3, .M = 3, .G = 3, .id = {1, 70, 66}, .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 1, 1}, .d = {1, 1, 1}};
    conv_chain(big, 2, 1, KILN_BUILD_NO_TIMING, 1); /* planes longer than an epilogue chunk */
    conv_chain(dense, 2, 1, 0, 2); /* every tactic timed (with the epilogue off) */
    conv_chain(dw, 2, 0, 0, 1);
}

/* Gemm -> BatchNormalization -> PRelu -> Relu on [M, N] (channels = columns)
 * and Gemm -> Relu; M = 1 takes the GEMV kernel. */
static void gemm_chain(int64_t M, int64_t N, int64_t K, int tb, int threads) {
    float *x = rnd(M * K), *w = rnd(K * N), *bias = rnd(N), *sc = rnd(N), *bb = rnd(N), *mean = rnd(N);
    float *var = rnd(N), *slope = rnd(N);
    for (int64_t i = 0; i < N; i++) var[i] = 0.2f + var[i] * var[i];
    kiln_network *net = kiln_network_create();
    int64_t xd[2] = {M, K}, wd[2] = {tb ? N : K, tb ? K : N}, nd[1] = {N};
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 2, xd, NULL));
    float *wt = malloc((size_t)(K * N) * sizeof(float));
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N; j++) wt[tb ? j * K + k : k * N + j] = w[k * N + j];
    add_const(net, "W", 2, wd, wt);
    add_const(net, "B", 1, nd, bias);
    add_const(net, "slope", 1, nd, slope);
    kiln_layer *g = layer(net, "ai.onnx::Gemm", 13, "fc", 3, (const char *[]){"X", "W", "B"}, "g");
    ASSERT_OK(kiln_layer_set_int(g, "transB", tb));
    add_bn(net, 9, "g", "n", N, sc, bb, mean, var);
    layer(net, "ai.onnx::PRelu", 16, "prelu", 2, (const char *[]){"n", "slope"}, "p");
    layer(net, "ai.onnx::Relu", 14, "relu", 1, (const char *[]){"p"}, "Y");
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_build_stats st;
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, threads, &st);
    kiln_network_free(net);
    ASSERT_EQ(st.fused, 3);
    char *txt = test_inspect_text(e);
    ASSERT_CONTAINS(txt, "ai.onnx::Gemm v11 + BatchNormalization + PRelu + Relu");
    free(txt);
    double *ref = malloc((size_t)(M * N) * sizeof(double));
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = bias[j];
            for (int64_t k = 0; k < K; k++) s += (double)x[i * K + k] * w[k * N + j];
            s = (s - mean[j]) / sqrt((double)var[j] + 1e-5) * sc[j] + bb[j];
            if (s < 0) s *= slope[j];
            ref[i * N + j] = s < 0 ? 0 : s;
        }
    float *y = malloc((size_t)(M * N) * sizeof(float));
    run_xy(e, threads, 0, x, M * K, y, M * N);
    char what[96];
    snprintf(what, sizeof what, "Gemm chain M=%lld N=%lld K=%lld tb=%d", (long long)M, (long long)N,
             (long long)K, tb);
    test_check_close(what, y, ref, M * N, 1e-4 * (double)K);
    kiln_engine_free(e);
    free(x); free(w); free(wt); free(bias); free(sc); free(bb); free(mean); free(var); free(slope);
    free(ref); free(y);
}

TEST_IMPL(fuse_gemm) {
    gemm_chain(5, 37, 19, 1, 1);
    gemm_chain(1, 300, 64, 1, 2);   /* GEMV, transB */
    gemm_chain(1, 100, 33, 0, 1);   /* GEMV, row-major B */
    gemm_chain(70, 130, 300, 0, 2); /* packed SGEMM, several blocks */
    gemm_chain(1, 2600, 40, 1, 1);  /* rows longer than an epilogue chunk */
}

/* MatMul [2, T, K] x [K, C] -> Sigmoid -> HardSwish (channel = dim 1 = T,
 * unused by these epilogues) and ConvTranspose -> LeakyRelu. */
TEST_IMPL(fuse_matmul_convtranspose) {
    int64_t T = 6, K = 20, C = 9;
    float *x = rnd(2 * T * K), *w = rnd(K * C);
    kiln_network *net = kiln_network_create();
    int64_t xd[3] = {2, T, K}, wd[2] = {K, C};
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 3, xd, NULL));
    add_const(net, "W", 2, wd, w);
    layer(net, "ai.onnx::MatMul", 13, "mm", 2, (const char *[]){"X", "W"}, "m");
    layer(net, "ai.onnx::Sigmoid", 13, "sig", 1, (const char *[]){"m"}, "s");
    layer(net, "ai.onnx::HardSwish", 14, "hs", 1, (const char *[]){"s"}, "Y");
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_build_stats st;
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, 2, &st);
    kiln_network_free(net);
    ASSERT_EQ(st.fused, 2);
    double *ref = malloc((size_t)(2 * T * C) * sizeof(double));
    for (int64_t r = 0; r < 2 * T; r++)
        for (int64_t j = 0; j < C; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) s += (double)x[r * K + k] * w[k * C + j];
            s = 1 / (1 + exp(-s));
            double h = s / 6 + 0.5;
            ref[r * C + j] = s * (h < 0 ? 0 : h > 1 ? 1 : h);
        }
    float *y = malloc((size_t)(2 * T * C) * sizeof(float));
    run_xy(e, 2, 1, x, 2 * T * K, y, 2 * T * C);
    test_check_close("MatMul -> Sigmoid -> HardSwish", y, ref, 2 * T * C, 1e-5 * (double)K);
    kiln_engine_free(e);
    free(x); free(w); free(ref); free(y);

    /* ConvTranspose 2-D, stride 2, 3x3, pads 1, groups 2 */
    int64_t N = 1, Ci = 4, M = 6, G = 2, H = 5, W = 4, k = 3, s = 2, p = 1;
    int64_t OH = (H - 1) * s - 2 * p + k, OW = (W - 1) * s - 2 * p + k;
    int64_t Cg = Ci / G, Mg = M / G;
    float *cx = rnd(N * Ci * H * W), *cw = rnd(Ci * Mg * k * k), *cb = rnd(M);
    net = kiln_network_create();
    int64_t cxd[4] = {N, Ci, H, W}, cwd[4] = {Ci, Mg, k, k}, cbd[1] = {M};
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, cxd, NULL));
    add_const(net, "W", 4, cwd, cw);
    add_const(net, "B", 1, cbd, cb);
    kiln_layer *ct = layer(net, "ai.onnx::ConvTranspose", 11, "ct", 3, (const char *[]){"X", "W", "B"}, "c");
    ASSERT_OK(kiln_layer_set_ints(ct, "kernel_shape", (int64_t[]){k, k}, 2));
    ASSERT_OK(kiln_layer_set_ints(ct, "strides", (int64_t[]){s, s}, 2));
    ASSERT_OK(kiln_layer_set_ints(ct, "pads", (int64_t[]){p, p, p, p}, 4));
    ASSERT_OK(kiln_layer_set_int(ct, "group", G));
    kiln_layer *lr = layer(net, "ai.onnx::LeakyRelu", 16, "lrelu", 1, (const char *[]){"c"}, "Y");
    ASSERT_OK(kiln_layer_set_float(lr, "alpha", 0.3f));
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    e = test_build_ok(net, KILN_BUILD_NO_TIMING, 1, &st);
    kiln_network_free(net);
    ASSERT_EQ(st.fused, 1);
    int64_t ny = N * M * OH * OW;
    ref = calloc((size_t)ny, sizeof(double));
    for (int64_t m = 0; m < M; m++)
        for (int64_t i = 0; i < OH * OW; i++) ref[m * OH * OW + i] = cb[m];
    for (int64_t ci = 0; ci < Ci; ci++)
        for (int64_t iy = 0; iy < H; iy++)
            for (int64_t ix = 0; ix < W; ix++)
                for (int64_t mg = 0; mg < Mg; mg++)
                    for (int64_t ky = 0; ky < k; ky++)
                        for (int64_t kx = 0; kx < k; kx++) {
                            int64_t oy = iy * s - p + ky, ox = ix * s - p + kx;
                            if (oy < 0 || oy >= OH || ox < 0 || ox >= OW) continue;
                            int64_t m = (ci / Cg) * Mg + mg;
                            ref[(m * OH + oy) * OW + ox] +=
                                (double)cx[(ci * H + iy) * W + ix] * cw[((ci * Mg + mg) * k + ky) * k + kx];
                        }
    for (int64_t i = 0; i < ny; i++)
        if (ref[i] < 0) ref[i] *= 0.3;
    y = malloc((size_t)ny * sizeof(float));
    run_xy(e, 1, 1, cx, N * Ci * H * W, y, ny);
    test_check_close("ConvTranspose -> LeakyRelu", y, ref, ny, 1e-4 * (double)(Cg * k * k));
    kiln_engine_free(e);
    free(cx); free(cw); free(cb); free(ref); free(y);
}

/* Conv -> Mul (scalar) -> Add ([C, 1, 1]) -> Sub (scalar - x) -> Div (x /
 * [1, C, 1, 1]): folded into the Conv's weights and bias before selection
 * (builder/pointwise_fold.c); the same chain after a Gemm (constants per
 * column) and Gemm -> Add ([N], per column): arithmetic with a constant
 * operand fuses as epilogues, either operand order. */
TEST_IMPL(fuse_arith) {
    cgeo g = {.N = 2, .C = 4, .M = 6, .G = 1, .id = {1, 7, 9}, .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 1, 1}, .d = {1, 1, 1}};
    cgeo_out(&g);
    int64_t nx = 2 * 4 * 7 * 9, osp = g.o[1] * g.o[2], ny = 2 * 6 * osp;
    float *x = rnd(nx), *w = rnd(6 * 4 * 9), *ad = rnd(6), *dv = rnd(6);
    for (int i = 0; i < 6; i++) dv[i] = 0.5f + dv[i] * dv[i];
    float ms = 1.75f, ss = 0.25f;
    kiln_network *net = kiln_network_create();
    int64_t xd[4] = {2, 4, 7, 9}, wd[4] = {6, 4, 3, 3}, c3[3] = {6, 1, 1}, c4[4] = {1, 6, 1, 1};
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL));
    add_const(net, "W", 4, wd, w);
    add_const(net, "ms", 0, NULL, &ms);
    add_const(net, "ad", 3, c3, ad);
    add_const(net, "ss", 0, NULL, &ss);
    add_const(net, "dv", 4, c4, dv);
    kiln_layer *cl = layer(net, "ai.onnx::Conv", 11, "conv", 2, (const char *[]){"X", "W"}, "c");
    ASSERT_OK(kiln_layer_set_ints(cl, "pads", (int64_t[]){1, 1, 1, 1}, 4));
    layer(net, "ai.onnx::Mul", 14, "mul", 2, (const char *[]){"ms", "c"}, "m");
    layer(net, "ai.onnx::Add", 14, "add", 2, (const char *[]){"m", "ad"}, "a");
    layer(net, "ai.onnx::Sub", 14, "sub", 2, (const char *[]){"ss", "a"}, "s");
    layer(net, "ai.onnx::Div", 14, "div", 2, (const char *[]){"s", "dv"}, "Y");
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_build_stats st;
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, 2, &st);
    kiln_network_free(net);
    ASSERT_EQ(st.fused, 4);
    ASSERT_EQ(kiln_engine_num_layers(e), 1);
    char *txt = test_inspect_text(e);
    ASSERT_CONTAINS(txt, "'conv' ai.onnx::Conv v1  ");
    ASSERT_CONTAINS(txt, "'W:scaled' f32");
    free(txt);
    double *ref = malloc((size_t)ny * sizeof(double));
    test_conv_ref(&g, x, w, NULL, ref);
    for (int64_t i = 0; i < ny; i++) {
        int64_t m = (i / osp) % 6;
        ref[i] = ((double)ss - (ref[i] * ms + ad[m])) / dv[m];
    }
    float *y = malloc((size_t)ny * sizeof(float));
    run_xy(e, 2, 1, x, nx, y, ny);
    test_check_close("Conv -> Mul -> Add -> Sub -> Div", y, ref, ny, 1e-3);
    kiln_engine_free(e);
    free(ref); free(y);

    int64_t M = 3, N = 50, K = 20;
    float *a = rnd(M * K), *b = rnd(K * N), *bias = rnd(N), *dn = rnd(N);
    for (int i = 0; i < N; i++) dn[i] = 0.5f + dn[i] * dn[i];
    net = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 2, (int64_t[]){M, K}, NULL));
    add_const(net, "B", 2, (int64_t[]){K, N}, b);
    add_const(net, "ms", 0, NULL, &ms);
    add_const(net, "bias", 1, (int64_t[]){N}, bias);
    add_const(net, "ss", 0, NULL, &ss);
    add_const(net, "dn", 2, (int64_t[]){1, N}, dn);
    layer(net, "ai.onnx::Gemm", 11, "fc", 2, (const char *[]){"X", "B"}, "g");
    layer(net, "ai.onnx::Mul", 14, "mul", 2, (const char *[]){"ms", "g"}, "m");
    layer(net, "ai.onnx::Add", 14, "add", 2, (const char *[]){"m", "bias"}, "a");
    layer(net, "ai.onnx::Sub", 14, "sub", 2, (const char *[]){"ss", "a"}, "s");
    layer(net, "ai.onnx::Div", 14, "div", 2, (const char *[]){"s", "dn"}, "Y");
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    e = test_build_ok(net, KILN_BUILD_NO_TIMING, 1, &st);
    kiln_network_free(net);
    ASSERT_EQ(st.fused, 4);
    txt = test_inspect_text(e);
    ASSERT_CONTAINS(txt, "ai.onnx::Gemm v11 + Mul + Add + Sub + Div");
    free(txt);
    ref = malloc((size_t)(M * N) * sizeof(double));
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++) acc += (double)a[i * K + k] * b[k * N + j];
            ref[i * N + j] = ((double)ss - (acc * ms + bias[j])) / dn[j];
        }
    y = malloc((size_t)(M * N) * sizeof(float));
    run_xy(e, 1, 1, a, M * K, y, M * N);
    test_check_close("Gemm -> Mul -> Add -> Sub -> Div", y, ref, M * N, 1e-4 * (double)K);
    kiln_engine_free(e);
    free(ref); free(y);

    net = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 2, (int64_t[]){M, K}, NULL));
    add_const(net, "B", 2, (int64_t[]){K, N}, b);
    add_const(net, "bias", 1, (int64_t[]){N}, bias);
    layer(net, "ai.onnx::Gemm", 11, "fc", 2, (const char *[]){"X", "B"}, "g");
    layer(net, "ai.onnx::Add", 14, "add", 2, (const char *[]){"g", "bias"}, "Y");
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    e = test_build_ok(net, KILN_BUILD_NO_TIMING, 1, &st);
    kiln_network_free(net);
    ASSERT_EQ(st.fused, 1);
    ref = malloc((size_t)(M * N) * sizeof(double));
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double acc = bias[j];
            for (int64_t k = 0; k < K; k++) acc += (double)a[i * K + k] * b[k * N + j];
            ref[i * N + j] = acc;
        }
    y = malloc((size_t)(M * N) * sizeof(float));
    run_xy(e, 1, 1, a, M * K, y, M * N);
    test_check_close("Gemm -> Add", y, ref, M * N, 1e-4 * (double)K);
    kiln_engine_free(e);
    free(x); free(w); free(ad); free(dv); free(a); free(b); free(bias); free(dn); free(ref); free(y);
}

/* Graphs that must not fuse, still correct:
 *  a) the Conv output also feeds an Add (two consumers),
 *  b) the Conv output is itself a network output,
 *  c) PRelu's slope is a network input (not a constant). */
TEST_IMPL(fuse_refused) {
    int64_t C = 4, H = 6, Wd = 5, n = C * H * Wd;
    float *x = rnd(n), *w = rnd(C * C), *b = rnd(C), *slope = rnd(C);
    cgeo g = {.N = 1, .C = C, .M = C, .G = 1, .id = {1, H, Wd}, .k = {1, 1, 1}, .s = {1, 1, 1}, .p = {0, 0, 0}, .d = {1, 1, 1}};
    cgeo_out(&g);
    double *conv = malloc((size_t)n * sizeof(double));
    test_conv_ref(&g, x, w, b, conv);
    int64_t xd[4] = {1, C, H, Wd}, wd[4] = {C, C, 1, 1}, bd[1] = {C}, sd[3] = {C, 1, 1};
    float *y = malloc((size_t)n * sizeof(float)), *c = malloc((size_t)n * sizeof(float));
    double *ref = malloc((size_t)n * sizeof(double));
    for (int mode = 0; mode < 3; mode++) {
        kiln_network *net = kiln_network_create();
        ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL));
        add_const(net, "W", 4, wd, w);
        add_const(net, "B", 1, bd, b);
        if (mode == 2) ASSERT_OK(kiln_network_add_input(net, "S", KILN_DTYPE_F32, 3, sd, NULL));
        else add_const(net, "S", 3, sd, slope);
        kiln_layer *cl = layer(net, "ai.onnx::Conv", 11, "conv", 3, (const char *[]){"X", "W", "B"}, "c");
        ASSERT_OK(kiln_layer_set_ints(cl, "kernel_shape", (int64_t[]){1, 1}, 2));
        layer(net, "ai.onnx::PRelu", 16, "prelu", 2, (const char *[]){"c", "S"}, mode == 0 ? "r" : "Y");
        if (mode == 0) layer(net, "ai.onnx::Add", 14, "add", 2, (const char *[]){"c", "r"}, "Y");
        ASSERT_OK(kiln_network_mark_output(net, "Y"));
        if (mode == 1) ASSERT_OK(kiln_network_mark_output(net, "c"));
        kiln_build_stats st;
        kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, 1, &st);
        kiln_network_free(net);
        ASSERT_EQ(st.fused, 0);
        char *txt = test_inspect_text(e);
        ASSERT(strstr(txt, "+ PRelu") == NULL);
        free(txt);
        for (int64_t i = 0; i < n; i++) {
            double v = conv[i], r = v < 0 ? v * slope[i / (H * Wd)] : v;
            ref[i] = mode == 0 ? v + r : r;
        }
        kiln_context *ctx;
        ASSERT_OK(kiln_context_create(e, 1, &ctx));
        kiln_context_set_debug(ctx, 1);
        ASSERT_OK(kiln_context_bind(ctx, "X", x, (size_t)n * sizeof(float)));
        if (mode == 2) ASSERT_OK(kiln_context_bind(ctx, "S", slope, (size_t)C * sizeof(float)));
        memset(y, 0xA5, (size_t)n * sizeof(float));
        ASSERT_OK(kiln_context_bind(ctx, "Y", y, (size_t)n * sizeof(float)));
        if (mode == 1) {
            memset(c, 0xA5, (size_t)n * sizeof(float));
            ASSERT_OK(kiln_context_bind(ctx, "c", c, (size_t)n * sizeof(float)));
        }
        ASSERT_OK(kiln_context_run(ctx));
        kiln_context_free(ctx);
        test_check_close("refused fusion", y, ref, n, 1e-4 * (double)C);
        if (mode == 1) test_check_close("refused fusion: conv output", c, conv, n, 1e-4 * (double)C);
        kiln_engine_free(e);
    }
    /* KILN_BUILD_NO_FUSION keeps the layers */
    kiln_network *net = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL));
    add_const(net, "W", 4, wd, w);
    add_const(net, "B", 1, bd, b);
    kiln_layer *cl = layer(net, "ai.onnx::Conv", 11, "conv", 3, (const char *[]){"X", "W", "B"}, "c");
    ASSERT_OK(kiln_layer_set_ints(cl, "kernel_shape", (int64_t[]){1, 1}, 2));
    layer(net, "ai.onnx::Relu", 14, "relu", 1, (const char *[]){"c"}, "Y");
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_build_stats st;
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING | KILN_BUILD_NO_FUSION, 1, &st);
    ASSERT_EQ(st.fused, 0);
    ASSERT_EQ(st.layers, 2);
    kiln_engine_free(e);
    e = test_build_ok(net, KILN_BUILD_NO_TIMING, 1, &st);
    ASSERT_EQ(st.fused, 1);
    ASSERT_EQ(st.layers, 1);
    kiln_engine_free(e);
    kiln_network_free(net);
    free(x); free(w); free(b); free(slope); free(conv); free(y); free(c); free(ref);
}

/* A copy of serialized engine buf with pointers into its FUSION section's
 * first chain entry: u32 count, i32 layer, u32 nops, str ns, str name, i32
 * version, i32 nin, i32 x, i32 in[]. */
typedef struct fusion_file {
    uint8_t *q, *entry, *sec, *name, *nin, *xs;
    uint64_t ssz;
    uint32_t hsize;
} fusion_file;

static fusion_file fusion_copy(const void *buf, size_t size) {
    fusion_file f = {.q = malloc(size)};
    memcpy(f.q, buf, size);
    uint32_t nsec, siglen;
    memcpy(&f.hsize, f.q + 12, 4);
    memcpy(&nsec, f.q + 20, 4);
    memcpy(&siglen, f.q + 24, 4);
    for (uint32_t i = 0; i < nsec; i++) {
        uint8_t *t = f.q + 40 + ((siglen + 7) & ~7u) + 32 * i;
        uint32_t id;
        uint64_t off;
        memcpy(&id, t, 4);
        if (id != 10) continue; /* FUSION */
        f.entry = t;
        memcpy(&off, t + 8, 8);
        memcpy(&f.ssz, t + 16, 8);
        f.sec = f.q + off;
    }
    ASSERT(f.sec && f.entry);
    uint32_t nslen, nmlen;
    memcpy(&nslen, f.sec + 12, 4);
    uint8_t *nm = f.sec + 16 + nslen;
    memcpy(&nmlen, nm, 4);
    f.name = nm + 4;
    f.nin = nm + 4 + nmlen + 4;
    f.xs = f.nin + 4;
    return f;
}

/* Fix the checksums of a patched fusion_copy; loading it must fail with msg. */
static void fusion_refused(fusion_file *f, size_t size, const char *msg) {
    kiln__file_reseal(f->q, size);
    kiln_engine *e2 = NULL;
    int rc = kiln_engine_load_memory(f->q, size, &e2);
    ASSERT(rc != 0 && e2 == NULL);
    ASSERT_CONTAINS(kiln_errmsg(), msg);
    free(f->q);
}

/* Residual Add fused into a Conv (builder/fuse.c): kind 0: Relu(Add(Conv(X),
 * X)), the network input as residual; kind 1: ResNet's downsample block,
 * Relu(Add(Conv_a(X), Conv_b(X))) with Conv_b later, so the Add goes into
 * Conv_b reading Conv_a's output (Add's inputs swapped when swap); kind 2:
 * Add(Conv(X), X) alone (no activation), no bias.  Built with and without
 * timing (every Conv tactic), run in normal and debug mode, against a naive
 * double reference; the fused engine survives serialize / load. */
static void residual_case(int kind, int swap, cgeo g, unsigned flags, int threads) {
    g.M = g.C; /* the output has the input's shape: stride 1, "same" padding */
    cgeo_out(&g);
    int64_t Cg = g.C / g.G, ksz = g.k[1] * g.k[2];
    int64_t n = g.N * g.C * g.id[1] * g.id[2];
    ASSERT_EQ(g.N * g.M * g.o[1] * g.o[2], n);
    float *x = rnd(n), *wa = rnd(g.M * Cg * ksz), *wb = rnd(g.M * Cg * ksz), *ba = rnd(g.M), *bb = rnd(g.M);
    kiln_network *net = kiln_network_create();
    int64_t xd[4] = {g.N, g.C, g.id[1], g.id[2]}, wd[4] = {g.M, Cg, g.k[1], g.k[2]}, md[1] = {g.M};
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL));
    add_const(net, "Wa", 4, wd, wa);
    add_const(net, "Wb", 4, wd, wb);
    add_const(net, "Ba", 1, md, ba);
    add_const(net, "Bb", 1, md, bb);
    conv_attrs(layer(net, "ai.onnx::Conv", 11, "conv_a", kind == 2 ? 2 : 3,
                     (const char *[]){"X", "Wa", "Ba"}, "a"), &g, 2);
    const char *other = "X";
    if (kind == 1) {
        conv_attrs(layer(net, "ai.onnx::Conv", 11, "conv_b", 3, (const char *[]){"X", "Wb", "Bb"}, "b"), &g, 2);
        other = "b";
    }
    layer(net, "ai.onnx::Add", 14, "add", 2, swap ? (const char *[]){other, "a"} : (const char *[]){"a", other},
          kind == 2 ? "Y" : "s");
    if (kind != 2) layer(net, "ai.onnx::Relu", 14, "relu", 1, (const char *[]){"s"}, "Y");
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_build_stats st;
    kiln_engine *e = test_build_ok(net, flags, threads, &st);
    kiln_network_free(net);
    ASSERT_EQ(st.fused, kind == 2 ? 1 : 2);
    ASSERT_EQ(st.layers, kind == 1 ? 2 : 1);
    char *txt = test_inspect_text(e);
    ASSERT_CONTAINS(txt, kind == 1 ? "'conv_b' ai.onnx::Conv v1 + Add + Relu"
                         : kind == 0 ? "'conv_a' ai.onnx::Conv v1 + Add + Relu"
                                     : "'conv_a' ai.onnx::Conv v1 + Add");
    free(txt);
    double *ref = malloc((size_t)n * sizeof(double)), *rb = malloc((size_t)n * sizeof(double));
    test_conv_ref(&g, x, wa, kind == 2 ? NULL : ba, ref);
    if (kind == 1) test_conv_ref(&g, x, wb, bb, rb);
    for (int64_t i = 0; i < n; i++) {
        ref[i] += kind == 1 ? rb[i] : x[i];
        if (kind != 2 && ref[i] < 0) ref[i] = 0;
    }
    float *y = malloc((size_t)n * sizeof(float));
    char what[160];
    snprintf(what, sizeof what, "residual kind %d swap %d N=%lld C=%lld k=%lld flags=%u", kind, swap, (long long)g.N,
             (long long)g.C, (long long)g.k[2], flags);
    double tol = 1e-4 * (double)(Cg * ksz);
    run_xy(e, threads, 0, x, n, y, n);
    test_check_close(what, y, ref, n, tol);
    run_xy(e, threads, 1, x, n, y, n); /* debug mode: every element written */
    test_check_close(what, y, ref, n, tol);
    void *buf = NULL;
    size_t size = 0;
    ASSERT_OK(kiln_engine_serialize(e, &buf, &size));
    kiln_engine *e2 = NULL;
    ASSERT_OK(kiln_engine_load_memory(buf, size, &e2));
    run_xy(e2, threads, 0, x, n, y, n);
    test_check_close(what, y, ref, n, tol);
    kiln_engine_free(e2);
    /* the GEMM tactics (im2col 2, padded or in place 4), whose SGEMM adds
     * the residual and clamps on store where it can, and on 3x3 stride-1
     * convs Winograd (6, 10), which applies them to each finished block of
     * tile rows; on convs of at most 4 input channels the few-channel
     * kernel (12), which applies them to each band of output rows; at 1
     * and 2 threads */
    const int wino = g.G == 1 && g.k[1] == 3 && g.k[2] == 3 && g.s[1] == 1 && g.s[2] == 1 && g.d[1] == 1 &&
                     g.d[2] == 1;
    const int fewc = g.G == 1 && g.C <= 4 && g.k[1] <= 7 && g.k[2] <= 7 && g.d[1] == 1 && g.d[2] == 1;
    static const int tactics[] = {2, 4, 12, 6, 10};
    for (int ti = 0; ti < (wino ? 5 : 3); ti++) {
        const int tactic = tactics[ti];
        if (tactic == 12 && (!fewc || !kiln__dwrows_fits(1, 3))) continue; /* (elsewhere it runs 4; an AVX-512 kernel) */
        ASSERT_OK(test_force_tactic(e, st.layers - 1, tactic));
        for (int t = 1; t <= 2; t++) {
            run_xy(e, t, 1, x, n, y, n);
            char wt[200];
            snprintf(wt, sizeof wt, "%s tactic %d threads %d", what, tactic, t);
            test_check_close(wt, y, ref, n, tol);
        }
    }
    if (kind == 1) { /* the extra input without its residual Add is refused at load */
        fusion_file f = fusion_copy(buf, size);
        ASSERT(!memcmp(f.name, "Add", 3));
        memcpy(f.name, "Sub", 3);
        fusion_refused(&f, size, "one more only for a residual Add");
        f = fusion_copy(buf, size);
        int32_t xslot, other = 0; /* the Add's other input: tensor 0, the network input */
        memcpy(&xslot, f.xs, 4);
        memcpy(f.xs + 4 + 4 * (1 - xslot), &other, 4);
        fusion_refused(&f, size, "one more only for a residual Add");
    }
    kiln_free(buf);
    kiln_engine_free(e);
    free(x); free(wa); free(wb); free(ba); free(bb); free(ref); free(rb); free(y);
}

TEST_IMPL(fuse_residual) {
    cgeo dense = {.N = 2, .C = 8, .G = 1, .id = {1, 10, 9}, .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 1, 1}, .d = {1, 1, 1}};
    cgeo pw = {.N = 1, .C = 24, .G = 1, .id = {1, 7, 6}, .k = {1, 1, 1}, .s = {1, 1, 1}, .p = {0, 0, 0}, .d = {1, 1, 1}};
    cgeo dw = {.N = 1, .C = 16, .G = 16, .id = {1, 70, 66}, .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 1, 1}, .d = {1, 1, 1}};
    for (int kind = 0; kind < 3; kind++)
        for (int swap = 0; swap < 2; swap++) residual_case(kind, swap, dense, KILN_BUILD_NO_TIMING, 1 + swap);
    residual_case(1, 0, pw, KILN_BUILD_NO_TIMING, 2);
    /* 1x1 convs, the residual added in the SGEMM's store: tiles of 12 + 4
     * rows and 32 + 32 + 26 columns, N = 2; 12 + 1 rows and 32 + 17
     * columns (the narrow kernel); 72 rows, where X is packed */
    cgeo pw40 = {.N = 2, .C = 40, .G = 1, .id = {1, 9, 10}, .k = {1, 1, 1}, .s = {1, 1, 1}, .p = {0, 0, 0}, .d = {1, 1, 1}};
    cgeo pw13 = {.N = 1, .C = 13, .G = 1, .id = {1, 7, 7}, .k = {1, 1, 1}, .s = {1, 1, 1}, .p = {0, 0, 0}, .d = {1, 1, 1}};
    cgeo pw72 = {.N = 1, .C = 72, .G = 1, .id = {1, 5, 5}, .k = {1, 1, 1}, .s = {1, 1, 1}, .p = {0, 0, 0}, .d = {1, 1, 1}};
    residual_case(0, 0, pw40, KILN_BUILD_NO_TIMING, 1);
    residual_case(1, 1, pw13, KILN_BUILD_NO_TIMING, 2);
    residual_case(0, 1, pw72, KILN_BUILD_NO_TIMING, 2);
    residual_case(0, 1, dw, KILN_BUILD_NO_TIMING, 1); /* depthwise, planes longer than an epilogue chunk */
    residual_case(1, 1, dense, 0, 2);                 /* every tactic timed */
    residual_case(0, 0, dw, 0, 1);
    /* a wider 3x3 conv, timed: the Winograd and padded-GEMM tactics compete
     * (LINEAR: with C = 32 the region pass may take the conv into NCHW16C,
     * where a residual arriving LINEAR, the network input, is not fused) */
    cgeo wide = {.N = 2, .C = 32, .G = 1, .id = {1, 24, 20}, .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 1, 1}, .d = {1, 1, 1}};
    residual_case(0, 1, wide, KILN_BUILD_CPU_LINEAR, 2);
    /* Winograd with dozens of tiles a thread at 2 threads (110 of 4x4, 420
     * of 2x2), 19 channels */
    cgeo tiles = {.N = 1, .C = 19, .G = 1, .id = {1, 40, 41}, .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 1, 1}, .d = {1, 1, 1}};
    residual_case(1, 0, tiles, KILN_BUILD_NO_TIMING, 2);
    residual_case(0, 1, tiles, KILN_BUILD_NO_TIMING, 1);
    /* 3 channels, 7x7 (tactic 12, the stems' kernel): 11 rows (bands of 8
     * and 3), 37 columns; with and without a bias */
    cgeo few = {.N = 2, .C = 3, .G = 1, .id = {1, 11, 37}, .k = {1, 7, 7}, .s = {1, 1, 1}, .p = {0, 3, 3}, .d = {1, 1, 1}};
    for (int kind = 0; kind < 3; kind++) residual_case(kind, kind == 1, few, KILN_BUILD_NO_TIMING, 2);
    residual_case(0, 0, few, 0, 1); /* timed */
}

/* A fused engine through serialize / load: same chain, same results; a
 * damaged FUSION section is refused with a message, not a crash. */
TEST_IMPL(fuse_roundtrip) {
    cgeo g = {.N = 1, .C = 3, .M = 8, .G = 1, .id = {1, 9, 8}, .k = {1, 3, 3}, .s = {1, 1, 1}, .p = {0, 1, 1}, .d = {1, 1, 1}};
    cgeo_out(&g);
    int64_t nx = 3 * 9 * 8, ny = 8 * g.o[1] * g.o[2];
    float *x = rnd(nx), *w = rnd(8 * 3 * 9), *sc = rnd(8), *bb = rnd(8), *mean = rnd(8), *var = rnd(8);
    for (int i = 0; i < 8; i++) var[i] = 0.5f + var[i] * var[i];
    float lo = 0.0f, hi = 0.5f;
    kiln_network *net = kiln_network_create();
    int64_t xd[4] = {1, 3, 9, 8}, wd[4] = {8, 3, 3, 3};
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL));
    add_const(net, "W", 4, wd, w);
    kiln_layer *cl = layer(net, "ai.onnx::Conv", 11, "conv_2", 2, (const char *[]){"X", "W"}, "c");
    ASSERT_OK(kiln_layer_set_ints(cl, "pads", (int64_t[]){1, 1, 1, 1}, 4));
    add_bn(net, 15, "c", "n", 8, sc, bb, mean, var);
    add_clip(net, "n", "Y", &lo, &hi);
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_build_stats st;
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, 1, &st);
    kiln_network_free(net);
    ASSERT_EQ(st.fused, 2);
    float *y0 = malloc((size_t)ny * sizeof(float)), *y1 = malloc((size_t)ny * sizeof(float));
    run_xy(e, 1, 0, x, nx, y0, ny);
    void *buf = NULL;
    size_t size = 0;
    ASSERT_OK(kiln_engine_serialize(e, &buf, &size));
    kiln_engine *e2 = NULL;
    ASSERT_OK(kiln_engine_load_memory(buf, size, &e2));
    char *txt = test_inspect_text(e2);
    ASSERT_CONTAINS(txt, "'conv_2' ai.onnx::Conv v1 + Clip"); /* the BatchNormalization in W and B */
    free(txt);
    run_xy(e2, 2, 1, x, nx, y1, ny);
    ASSERT(memcmp(y0, y1, (size_t)ny * sizeof(float)) == 0);
    /* independent check of a few elements: conv + BN + clip */
    double *ref = malloc((size_t)ny * sizeof(double));
    test_conv_ref(&g, x, w, NULL, ref);
    for (int64_t i = 0; i < ny; i++) {
        int64_t m = i / (g.o[1] * g.o[2]);
        double v = (ref[i] - mean[m]) / sqrt((double)var[m] + 1e-5) * sc[m] + bb[m];
        ref[i] = v < lo ? lo : v > hi ? hi : v;
    }
    test_check_close("round trip", y1, ref, ny, 1e-3);
    kiln_engine_free(e2);
    /* Every byte flip inside the file must be refused cleanly (checksums,
     * then the FUSION checks); flip a byte near the end (the FUSION
     * section is the last one). */
    uint8_t *p = buf;
    for (size_t k = 1; k <= 64 && k < size; k += 7) {
        p[size - k] ^= 0x5A;
        e2 = NULL;
        int rc = kiln_engine_load_memory(buf, size, &e2);
        ASSERT(rc != 0 && e2 == NULL);
        p[size - k] ^= 0x5A;
    }
    /* Well-formed (checksums fixed up) but wrong FUSION contents are
     * refused by the loader's checks, naming the problem. */
    static const struct { int what; const char *msg; } bad[] = {
        {0, "fused layer index"}, {1, "input count"}, {2, "expected a constant"},
        {3, "activation slot"}, {4, "not registered"},
    };
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        fusion_file f = fusion_copy(buf, size);
        int32_t v;
        switch (bad[b].what) {
        case 0: v = 999; memcpy(f.sec + 4, &v, 4); break;
        case 1: v = 99; memcpy(f.nin, &v, 4); break;
        case 2: v = 0; memcpy(f.xs + 8, &v, 4); break; /* in[1]; tensor 0 is the input X */
        case 3: v = 7; memcpy(f.xs, &v, 4); break;
        case 4: f.name[0] = 'Q'; break; /* "QatchNormalization" */
        }
        fusion_refused(&f, size, bad[b].msg);
    }
    kiln_free(buf);
    kiln_engine_free(e);
    free(x); free(w); free(sc); free(bb); free(mean); free(var); free(y0); free(y1); free(ref);
}

/* MaxPool-8 with its Indices output unread (passed as NULL: the op skips
 * them and takes the row-reduction path) and read (network output). */
TEST_IMPL(maxpool_unread_indices) {
    int64_t C = 3, H = 13, W = 40, k = 3, s = 2, p = 1;
    int64_t OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1, n = C * H * W, no = C * OH * OW;
    float *x = rnd(n), *y = malloc((size_t)no * sizeof(float));
    int64_t *ind = malloc((size_t)no * sizeof(int64_t));
    for (int with_ind = 0; with_ind < 2; with_ind++) {
        kiln_network *net = kiln_network_create();
        int64_t xd[4] = {1, C, H, W};
        ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL));
        const char *outs[2] = {"Y", "I"};
        kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::MaxPool", 12, "mp", 1, (const char *[]){"X"}, 2, outs);
        ASSERT(l);
        ASSERT_OK(kiln_layer_set_ints(l, "kernel_shape", (int64_t[]){k, k}, 2));
        ASSERT_OK(kiln_layer_set_ints(l, "strides", (int64_t[]){s, s}, 2));
        ASSERT_OK(kiln_layer_set_ints(l, "pads", (int64_t[]){p, p, p, p}, 4));
        ASSERT_OK(kiln_network_mark_output(net, "Y"));
        if (with_ind) ASSERT_OK(kiln_network_mark_output(net, "I"));
        kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, 1, NULL);
        kiln_network_free(net);
        for (int debug = 0; debug < 2; debug++) {
            kiln_context *ctx;
            ASSERT_OK(kiln_context_create(e, 1, &ctx));
            kiln_context_set_debug(ctx, debug);
            ASSERT_OK(kiln_context_bind(ctx, "X", x, (size_t)n * sizeof(float)));
            memset(y, 0xA5, (size_t)no * sizeof(float));
            memset(ind, 0xA5, (size_t)no * sizeof(int64_t));
            ASSERT_OK(kiln_context_bind(ctx, "Y", y, (size_t)no * sizeof(float)));
            if (with_ind) ASSERT_OK(kiln_context_bind(ctx, "I", ind, (size_t)no * sizeof(int64_t)));
            ASSERT_OK(kiln_context_run(ctx));
            kiln_context_free(ctx);
            for (int64_t c = 0; c < C; c++)
                for (int64_t oy = 0; oy < OH; oy++)
                    for (int64_t ox = 0; ox < OW; ox++) {
                        float best = -INFINITY;
                        int64_t bi = -1;
                        for (int64_t ky = 0; ky < k; ky++)
                            for (int64_t kx = 0; kx < k; kx++) {
                                int64_t iy = oy * s - p + ky, ix = ox * s - p + kx;
                                if (iy < 0 || iy >= H || ix < 0 || ix >= W) continue;
                                float v = x[(c * H + iy) * W + ix];
                                if (bi < 0 || v > best) { best = v; bi = (c * H + iy) * W + ix; }
                            }
                        int64_t o = (c * OH + oy) * OW + ox;
                        if (y[o] != best) TEST__FAIL("MaxPool y[%lld] = %g, expected %g", (long long)o, (double)y[o], (double)best);
                        if (with_ind) ASSERT_EQ(ind[o], bi);
                    }
        }
        kiln_engine_free(e);
    }
    free(x); free(y); free(ind);
}

/* ---- Linear: MatMul + bias Add (+ GELU) as one CPU layer ------------------
 * X [B, T, K] x W -> Add(bias) -> [GELU] -> Y, against a naive double
 * reference.  bias: 0 = [N] (last dim: fuses), 1 = [1, 1, N] (fuses),
 * 2 = [T, N] (not a broadcast over the last dim: the Add must stay a layer),
 * 3 = W 1-D [K] and bias [T] (the output [B, T] has no column dim: not
 * a linear bias; Add's own per-channel epilogue may take it, dim 1 being
 * T, so only the values are checked, with the channel of each row).  gelu: 0 none, 1 a Gelu layer (tanh if 2),
 * 3 the five-layer erf form torch exports. */
static void linear_case(int64_t B, int64_t T, int64_t K, int64_t N, int bias, int gelu, int threads) {
    int w1 = bias == 3;
    int64_t cols = w1 ? 1 : N, ny = B * T * cols, nb = bias == 2 ? T * N : w1 ? T : N;
    float *x = rnd(B * T * K), *w = rnd(K * cols), *bv = rnd(nb);
    kiln_network *net = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 3, (int64_t[]){B, T, K}, NULL));
    add_const(net, "W", w1 ? 1 : 2, (int64_t[]){K, N}, w);
    if (bias == 1) add_const(net, "bias", 3, (int64_t[]){1, 1, N}, bv);
    else if (bias == 2) add_const(net, "bias", 2, (int64_t[]){T, N}, bv);
    else add_const(net, "bias", 1, (int64_t[]){nb}, bv);
    layer(net, "ai.onnx::MatMul", 13, "mm", 2, (const char *[]){"X", "W"}, "m");
    layer(net, "ai.onnx::Add", 14, "add", 2, (const char *[]){"m", "bias"}, gelu ? "h" : "Y");
    if (gelu == 1 || gelu == 2) {
        kiln_layer *l = layer(net, "ai.onnx::Gelu", 20, "gelu", 1, (const char *[]){"h"}, "Y");
        if (gelu == 2) ASSERT_OK(kiln_layer_set_string(l, "approximate", "tanh"));
    } else if (gelu == 3) {
        const float r2 = 1.4142135623730951f, one = 1.0f, half = 0.5f;
        add_const(net, "r2", 0, NULL, &r2);
        add_const(net, "one", 0, NULL, &one);
        add_const(net, "half", 0, NULL, &half);
        layer(net, "ai.onnx::Div", 14, "div", 2, (const char *[]){"h", "r2"}, "d");
        layer(net, "ai.onnx::Erf", 13, "erf", 1, (const char *[]){"d"}, "e");
        layer(net, "ai.onnx::Add", 14, "add1", 2, (const char *[]){"e", "one"}, "a1");
        layer(net, "ai.onnx::Mul", 14, "mulx", 2, (const char *[]){"h", "a1"}, "mx");
        layer(net, "ai.onnx::Mul", 14, "mulh", 2, (const char *[]){"mx", "half"}, "Y");
    }
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_build_stats st;
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, threads, &st);
    kiln_network_free(net);
    char what[160];
    snprintf(what, sizeof what, "MatMul [%lld,%lld,%lld]x[%lld] + bias %d, gelu %d, %d threads", (long long)B,
             (long long)T, (long long)K, (long long)cols, bias, gelu, threads);
    char *txt = test_inspect_text(e);
    if (bias <= 1) {
        /* Add (+ the erf form's Div, Erf, Add, Mul, Mul rewritten into one Gelu) */
        ASSERT_EQ(st.fused, gelu == 0 ? 1 : gelu == 3 ? 6 : 2);
        ASSERT_CONTAINS(txt, gelu ? "ai.onnx::MatMul v1 + Add + Gelu" : "ai.onnx::MatMul v1 + Add");
    } else if (bias == 2 && strstr(txt, "MatMul v1 + Add")) {
        TEST__FAIL("%s: the Add fused as a bias:\n%s", what, txt);
    }
    free(txt);
    double *ref = malloc((size_t)ny * sizeof(double));
    for (int64_t r = 0; r < B * T; r++)
        for (int64_t j = 0; j < cols; j++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++) acc += (double)x[r * K + k] * w[k * cols + j];
            acc += bias == 2 ? bv[r % T * N + j] : w1 ? bv[r % T] : bv[j];
            if (gelu == 2)
                acc = 0.5 * acc * (1 + tanh(0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)));
            else if (gelu)
                acc = 0.5 * acc * (1 + erf(acc / sqrt(2.0)));
            ref[r * cols + j] = acc;
        }
    float *y = malloc((size_t)ny * sizeof(float));
    run_xy(e, threads, 0, x, B * T * K, y, ny);
    test_check_close(what, y, ref, ny, 1e-5 * (double)K);
    kiln_engine *e2 = test_roundtrip(e); /* the chain survives serialize/load */
    run_xy(e2, threads, 1, x, B * T * K, y, ny);
    test_check_close(what, y, ref, ny, 1e-5 * (double)K);
    kiln_engine_free(e2);
    kiln_engine_free(e);
    free(x); free(w); free(bv); free(ref); free(y);
}

TEST_IMPL(fuse_linear) {
    for (int gelu = 0; gelu <= 3; gelu++) linear_case(2, 7, 33, 45, 0, gelu, 1);
    linear_case(1, 128, 96, 300, 1, 3, 2);  /* several tiles, 2 threads */
    linear_case(3, 5, 70, 2600, 0, 1, 2);   /* rows longer than an epilogue chunk */
    linear_case(1, 1, 40, 50, 0, 3, 1);     /* one row: the matrix-vector path */
    linear_case(2, 6, 20, 9, 2, 1, 1);      /* [T, N] bias: not a last-dim bias */
    linear_case(2, 6, 20, 9, 3, 0, 1);      /* 1-D B: no column bias */
}

/* ---- MatMul + Add of a tensor that is not a constant (CPU) -----------------
 * X [B, T, K] x W ([K, N], or batched [B, K, N]) -> Add(R) -> [Relu] -> Y,
 * R a network input (or, r = 4, Relu of one, computed before the MatMul):
 * r 0 = [B, T, N] (a residual: fuses), 1 = [N] and 2 = [1, 1, N] (a bias
 * that is not a constant, added by column: fuses), 3 = [T, 1] (broadcast
 * over another dim: the Add stays a layer), 4 = Relu(Rin) [B, T, N]
 * (fuses).  Against a naive double reference and the unfused engine, after
 * a serialize/load too. */
static void input_add_case(int64_t B, int64_t T, int64_t K, int64_t N, int r, int relu, int wbatch, int threads) {
    static const int64_t rank[5] = {3, 1, 3, 2, 3};
    const int64_t rdims[5][3] = {{B, T, N}, {N}, {1, 1, N}, {T, 1}, {B, T, N}};
    const int64_t nr = r == 1 || r == 2 ? N : r == 3 ? T : B * T * N, ny = B * T * N, nx = B * T * K;
    float *x = rnd(nx), *w = rnd((wbatch ? B : 1) * K * N), *rv = rnd(nr), *y = malloc((size_t)ny * sizeof *y),
          *y2 = malloc((size_t)ny * sizeof *y2);
    kiln_network *net = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 3, (int64_t[]){B, T, K}, NULL));
    ASSERT_OK(kiln_network_add_input(net, r == 4 ? "Rin" : "R", KILN_DTYPE_F32, (int)rank[r], rdims[r], NULL));
    if (r == 4) layer(net, "ai.onnx::Relu", 14, "rrelu", 1, (const char *[]){"Rin"}, "R");
    if (wbatch) add_const(net, "W", 3, (int64_t[]){B, K, N}, w);
    else add_const(net, "W", 2, (int64_t[]){K, N}, w);
    layer(net, "ai.onnx::MatMul", 13, "mm", 2, (const char *[]){"X", "W"}, "m");
    layer(net, "ai.onnx::Add", 14, "add", 2, (const char *[]){r == 2 ? "R" : "m", r == 2 ? "m" : "R"}, relu ? "h" : "Y");
    if (relu) layer(net, "ai.onnx::Relu", 14, "relu", 1, (const char *[]){"h"}, "Y");
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, threads, NULL);
    kiln_engine *u = test_build_ok(net, KILN_BUILD_NO_TIMING | KILN_BUILD_NO_FUSION, threads, NULL);
    kiln_network_free(net);
    char what[160];
    snprintf(what, sizeof what, "MatMul [%lld,%lld,%lld]x[%lld,%lld]%s + R case %d, relu %d, %d threads",
             (long long)B, (long long)T, (long long)K, (long long)K, (long long)N, wbatch ? " batched" : "", r, relu,
             threads);
    char *txt = test_inspect_text(e);
    const char *chain = relu ? "ai.onnx::MatMul v1 + Add + Relu" : "ai.onnx::MatMul v1 + Add";
    if (r != 3 && !strstr(txt, chain)) TEST__FAIL("%s: the Add did not fuse:\n%s", what, txt);
    if (r == 3 && strstr(txt, "MatMul v1 + Add")) TEST__FAIL("%s: a [T, 1] Add fused:\n%s", what, txt);
    free(txt);
    double *ref = malloc((size_t)ny * sizeof *ref);
    for (int64_t i = 0; i < ny; i++) {
        int64_t b = i / (T * N), t = i / N % T, j = i % N;
        double acc = 0;
        for (int64_t k = 0; k < K; k++) acc += (double)x[(b * T + t) * K + k] * w[((wbatch ? b : 0) * K + k) * N + j];
        double rr = r == 1 || r == 2 ? rv[j] : r == 3 ? rv[t] : rv[i];
        acc += r == 4 && rr < 0 ? 0 : rr;
        ref[i] = relu && acc < 0 ? 0 : acc;
    }
    kiln_engine *e2 = test_roundtrip(e); /* the chain survives serialize/load */
    const kiln_engine *engines[3] = {e, e2, u};
    for (int k = 0; k < 3; k++) {
        kiln_context *ctx;
        ASSERT_OK(kiln_context_create(engines[k], threads, &ctx));
        ASSERT_OK(kiln_context_bind(ctx, "X", x, (size_t)nx * sizeof *x));
        ASSERT_OK(kiln_context_bind(ctx, r == 4 ? "Rin" : "R", rv, (size_t)nr * sizeof *rv));
        memset(y, 0xA5, (size_t)ny * sizeof *y);
        ASSERT_OK(kiln_context_bind(ctx, "Y", y, (size_t)ny * sizeof *y));
        if (kiln_context_run(ctx)) TEST__FAIL("%s: run: %s", what, kiln_errmsg());
        kiln_context_free(ctx);
        test_check_close(what, y, ref, ny, 1e-5 * (double)K);
        if (k == 0) memcpy(y2, y, (size_t)ny * sizeof *y);
    }
    /* fused and unfused: the same sums, in the same order */
    for (int64_t i = 0; i < ny; i++)
        if (fabsf(y[i] - y2[i]) > 1e-6f * (1 + fabsf(y[i])))
            TEST__FAIL("%s: y[%lld] fused %g, unfused %g", what, (long long)i, (double)y2[i], (double)y[i]);
    kiln_engine_free(e2);
    kiln_engine_free(e);
    kiln_engine_free(u);
    free(x); free(w); free(rv); free(y); free(y2); free(ref);
}

TEST_IMPL(fuse_matmul_input_add) {
    for (int r = 0; r <= 4; r++) input_add_case(2, 7, 33, 45, r, r & 1, 0, 1);
    input_add_case(1, 128, 96, 300, 1, 1, 0, 2);  /* several tiles, 2 threads */
    input_add_case(3, 5, 70, 2600, 0, 0, 0, 2);   /* rows longer than an epilogue chunk */
    input_add_case(3, 5, 70, 2600, 1, 1, 0, 2);
    input_add_case(1, 1, 40, 50, 2, 1, 0, 1);     /* one row: the matrix-vector path */
    input_add_case(2, 6, 20, 9, 1, 0, 1, 2);      /* batched W: one pass after the product */
    input_add_case(2, 6, 20, 9, 0, 1, 1, 1);
}

TEST_LIST(TEST_ENTRY(gemv_gemm), TEST_ENTRY(maxpool_unread_indices), TEST_ENTRY(gemv_matmul), TEST_ENTRY(fuse_conv_bn_clip),
          TEST_ENTRY(fuse_gemm), TEST_ENTRY(fuse_matmul_convtranspose), TEST_ENTRY(fuse_arith),
          TEST_ENTRY(fuse_refused),
          TEST_ENTRY(fuse_roundtrip), TEST_ENTRY(fuse_residual), TEST_ENTRY(fuse_linear),
          TEST_ENTRY(fuse_matmul_input_add))
