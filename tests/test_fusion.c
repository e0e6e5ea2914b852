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
 */
#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_seed = 0x5DEECE66Dull;

static float *rnd(int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    ASSERT(p);
    for (int64_t i = 0; i < n; i++) p[i] = test_randf(&g_seed, -1.0f, 1.0f);
    return p;
}

static void check_close(const char *what, const float *y, const double *ref, int64_t n, double atol) {
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)y[i] - ref[i]);
        if (!(d <= atol + 1e-4 * fabs(ref[i])))
            TEST__FAIL("%s: element %lld: got %.7g, expected %.7g", what, (long long)i,
                       (double)y[i], ref[i]);
    }
}

/* Build `net` (output "Y" of n floats), run it on input "A" with `threads`
 * threads, output poisoned first. */
static void run1(kiln_network *net, const float *a, int64_t na, float *y, int64_t ny, int threads) {
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING);
    kiln_build_config_set_threads(cfg, threads);
    kiln_engine *e = NULL;
    int rc = kiln_build(net, cfg, &e, NULL);
    kiln_build_config_free(cfg);
    if (rc) TEST__FAIL("build: %s", kiln_errmsg());
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, threads, &ctx));
    ASSERT_OK(kiln_context_bind(ctx, "A", (void *)a, (size_t)na * sizeof(float)));
    memset(y, 0xA5, (size_t)ny * sizeof(float)); /* poison: a NaN pattern */
    ASSERT_OK(kiln_context_bind(ctx, "Y", y, (size_t)ny * sizeof(float)));
    rc = kiln_context_run(ctx);
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
    check_close(what, y, ref, N, 2e-6 * (double)K);
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
    check_close(what, y, ref, N, 2e-6 * (double)K);
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

TEST_LIST(TEST_ENTRY(gemv_gemm), TEST_ENTRY(gemv_matmul))
