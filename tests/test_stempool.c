/*
 * test_stempool.c — kiln::stempool (ops/nn/stempool.c), the stem conv +
 * Relu + MaxPool the builder fuses (builder/stempool_fuse.c).
 *
 * Networks Conv [-> Relu] -> MaxPool over odd sizes (1-4 input channels,
 * 32-96 outputs, kernels 3-7, strides 1-2, pool windows 2-3 at strides
 * 1-3 with and without pads, 1-2 images, enough rows for several bands a
 * thread), built, checked to run as one stempool layer, then run with
 * each tactic (1: Y LINEAR, a LINEAR-only build; 2: Y NCHW16C, a forced-
 * 16c build, one reformat after it) at 1-3 threads, after a save and load too, against conv-then-
 * pool computed naively in double; every thread count gives the same
 * bits.  Chains it must leave alone: M not a multiple of 32, the pool's
 * Indices read, the conv's output read elsewhere.
 */
#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "kiln_int.h"
#include "ops/nn/conv_dwrows.h"
#include "test.h"
#include "test_ops_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_seed = 0x57E3900C0CA1ull;

typedef struct sc {
    int64_t N, C, M, H, W, k, s, p; /* the conv */
    int relu;
    int64_t pk, ps, pp; /* the pool: window, stride, pads (all sides) */
} sc;

static int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t p) { return (in + 2 * p - k) / s + 1; }

/* The network; extra: 1 the pool's Indices a network output too, 2 the
 * conv's output (before the Relu) one too. */
static kiln_network *stem_net(const sc *t, const float *w, const float *b, int extra) {
    kiln_network *net = kiln_network_create();
    ASSERT(net);
    int64_t xd[4] = {t->N, t->C, t->H, t->W}, wd[4] = {t->M, t->C, t->k, t->k}, bd[1] = {t->M};
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "W", KILN_DTYPE_F32, 4, wd, w));
    ASSERT_OK(kiln_network_add_constant(net, "B", KILN_DTYPE_F32, 1, bd, b));
    const char *cin[3] = {"X", "W", "B"}, *cout[1] = {"c"};
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::Conv", 11, "conv", 3, cin, 1, cout);
    ASSERT(l);
    int64_t s[2] = {t->s, t->s}, p[4] = {t->p, t->p, t->p, t->p};
    ASSERT_OK(kiln_layer_set_ints(l, "strides", s, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "pads", p, 4));
    const char *r = "c";
    if (t->relu) {
        const char *ri[1] = {"c"}, *ro[1] = {"r"};
        ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 14, "relu", 1, ri, 1, ro));
        r = "r";
    }
    const char *pin[1] = {r}, *pout[2] = {"Y", "I"};
    l = kiln_network_add_layer(net, "ai.onnx::MaxPool", 12, "pool", 1, pin, extra == 1 ? 2 : 1, pout);
    ASSERT(l);
    int64_t k[2] = {t->pk, t->pk}, ps[2] = {t->ps, t->ps}, pp[4] = {t->pp, t->pp, t->pp, t->pp};
    ASSERT_OK(kiln_layer_set_ints(l, "kernel_shape", k, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "strides", ps, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "pads", pp, 4));
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    if (extra == 1) ASSERT_OK(kiln_network_mark_output(net, "I"));
    if (extra == 2) ASSERT_OK(kiln_network_mark_output(net, "c"));
    return net;
}

/* Conv (+ Relu) then MaxPool, naively, in double. */
static void stem_ref(const sc *t, const float *x, const float *w, const float *b, double *y) {
    const int64_t OH = out_dim(t->H, t->k, t->s, t->p), OW = out_dim(t->W, t->k, t->s, t->p);
    const int64_t PH = out_dim(OH, t->pk, t->ps, t->pp), PW = out_dim(OW, t->pk, t->ps, t->pp);
    double *c = test_xmalloc((size_t)(t->N * t->M * OH * OW) * sizeof(double));
    int64_t in[2] = {t->H, t->W}, k[2] = {t->k, t->k}, s[2] = {t->s, t->s}, d[2] = {1, 1}, pb[2] = {t->p, t->p};
    int64_t o[2] = {OH, OW};
    test_conv_geo g = test_conv_geo_make(t->N, t->C, t->M, 1, 2, in, k, s, d, pb, o);
    test_conv_ref(&g, x, w, b, c);
    for (int64_t pl = 0; pl < t->N * t->M; pl++)
        for (int64_t py = 0; py < PH; py++)
            for (int64_t px = 0; px < PW; px++) {
                double m = -INFINITY;
                for (int64_t ky = 0; ky < t->pk; ky++)
                    for (int64_t kx = 0; kx < t->pk; kx++) {
                        const int64_t iy = py * t->ps - t->pp + ky, ix = px * t->ps - t->pp + kx;
                        if (iy < 0 || iy >= OH || ix < 0 || ix >= OW) continue;
                        double v = c[(pl * OH + iy) * OW + ix];
                        if (t->relu && v < 0) v = 0;
                        if (v > m) m = v;
                    }
                y[(pl * PH + py) * PW + px] = m;
            }
    free(c);
}

/* Runs e (and e saved and loaded) at 1-3 threads against ref; the same
 * bits at every thread count. */
static void check_runs(kiln_engine *e, const sc *t, float *x, int64_t nx, const double *ref, int64_t ny,
                       const char *what) {
    float *y = test_xmalloc((size_t)ny * sizeof(float)), *y1 = test_xmalloc((size_t)ny * sizeof(float));
    kiln_engine *e2 = test_roundtrip(e);
    char msg[256];
    for (int pass = 0; pass < 2; pass++)
        for (int threads = 1; threads <= 3; threads++) {
            test_run_xy(pass ? e2 : e, threads, 0, x, nx, y, ny, -1);
            snprintf(msg, sizeof msg, "stem %lldx%lldx%lld M %lld %lldx%lld/%lld pool %lld/%lld pads %lld, %s, %d thread(s)%s",
                     (long long)t->C, (long long)t->H, (long long)t->W, (long long)t->M, (long long)t->k,
                     (long long)t->k, (long long)t->s, (long long)t->pk, (long long)t->ps, (long long)t->pp, what,
                     threads, pass ? ", loaded" : "");
            test_check_close(msg, y, ref, ny, 1e-5);
            if (pass == 0 && threads == 1) memcpy(y1, y, (size_t)ny * sizeof(float));
            else if (memcmp(y1, y, (size_t)ny * sizeof(float))) TEST__FAIL("%s: bits differ from 1 thread's", msg);
        }
    kiln_engine_free(e2);
    free(y), free(y1);
}

static void run_case(const sc *t) {
    const int64_t OH = out_dim(t->H, t->k, t->s, t->p), OW = out_dim(t->W, t->k, t->s, t->p);
    const int64_t nx = t->N * t->C * t->H * t->W, ny = t->N * t->M * out_dim(OH, t->pk, t->ps, t->pp) *
                                                        out_dim(OW, t->pk, t->ps, t->pp);
    float *x = test_rnd_f32(&g_seed, nx, -1.0f, 1.0f), *w = test_rnd_f32(&g_seed, t->M * t->C * t->k * t->k, -1.0f, 1.0f);
    float *b = test_rnd_f32(&g_seed, t->M, -0.5f, 0.5f);
    double *ref = test_xmalloc((size_t)ny * sizeof(double));
    stem_ref(t, x, w, b, ref);
    kiln_network *net = stem_net(t, w, b, 0);
    /* tactic 1: Y LINEAR (a LINEAR-only build: the only row) */
    kiln_engine *e = test_build_ok(net, KILN_BUILD_CPU_LINEAR, 1, NULL);
    ASSERT_EQ(e->nlayers, 1);
    ASSERT_EQ(test_count_op(e, "stempool"), 1);
    ASSERT_EQ(e->layers[0].tactic, 1);
    check_runs(e, t, x, nx, ref, ny, "tactic 1");
    kiln_engine_free(e);
    /* tactic 2: Y NCHW16C, then a reformat to the LINEAR network output */
    e = test_build_forced16c(net, 0, 2, NULL);
    const int l = test_last_op(e, "stempool");
    ASSERT(l >= 0);
    ASSERT_EQ(e->layers[l].tactic, 2);
    ASSERT_EQ(test_count_op(e, "reformat"), 1);
    check_runs(e, t, x, nx, ref, ny, "tactic 2");
    kiln_engine_free(e);
    kiln_network_free(net);
    free(x), free(w), free(b), free(ref);
}

/* A chain the pass must leave alone (extra: stem_net's). */
static void not_fused(const sc *t, int extra) {
    float *w = test_rnd_f32(&g_seed, t->M * t->C * t->k * t->k, -1.0f, 1.0f), *b = test_rnd_f32(&g_seed, t->M, 0, 1);
    kiln_network *net = stem_net(t, w, b, extra);
    kiln_engine *e = test_build_ok(net, 0, 1, NULL);
    ASSERT_EQ(test_count_op(e, "stempool"), 0);
    kiln_engine_free(e);
    kiln_network_free(net);
    free(w), free(b);
}

TEST_IMPL(stempool_engine) {
    if (!kiln__dwrows_fits(1, 3)) { /* conv_fewc.c's kernel is AVX-512 only */
        fprintf(stderr, "skipped: not an AVX-512 build\n");
        return;
    }
    static const sc cases[] = {
        /* ResNet's stem, smaller: odd sizes, bands of 8 pool rows, one conv row carried */
        {1, 3, 64, 61, 37, 7, 2, 3, 1, 3, 2, 1},
        /* no Relu, two images, a 2x2/2 pool without pads: no row shared */
        {2, 3, 32, 23, 40, 3, 2, 1, 0, 2, 2, 0},
        /* pool stride 1: bands share two conv rows */
        {1, 1, 32, 45, 18, 5, 1, 2, 1, 3, 1, 1},
        /* 4 channels, pool stride 3 over a 3x3 window (no shared rows); 9 columns */
        {1, 4, 96, 53, 9, 3, 1, 1, 1, 3, 3, 0},
        /* a 2x2 pool with pads, 17 pool rows (bands of 8, 8, 1; the split at 2-3 threads) */
        {1, 2, 32, 64, 21, 7, 2, 3, 1, 2, 2, 1},
        /* 33 pool columns (two transposed 16-column blocks and a tail), two channel blocks */
        {1, 3, 32, 19, 130, 3, 2, 1, 1, 3, 2, 1},
        /* the last pool row's window past the conv rows (floor sizes), 1 input channel */
        {1, 1, 32, 50, 33, 3, 2, 0, 1, 3, 2, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
    const sc m48 = {1, 3, 48, 23, 21, 3, 2, 1, 1, 3, 2, 1};
    not_fused(&m48, 0);                                   /* M % 32 != 0 */
    const sc m32 = {1, 3, 32, 23, 21, 3, 2, 1, 1, 3, 2, 1};
    not_fused(&m32, 1);                                   /* Indices read */
    not_fused(&m32, 2);                                   /* the conv's output read */
}

TEST_LIST(TEST_ENTRY(stempool_engine))
