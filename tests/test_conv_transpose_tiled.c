/*
 * test_conv_transpose_tiled.c — ConvTranspose where kernel = stride, no
 * pads (2x2/stride-2 upsampling, PP-OCR det's last two layers): col2im
 * writes each output row once and splits the work over (channel, input
 * row) units, so a single output channel runs on both threads; the fused
 * epilogue (Sigmoid, Relu) is applied to each unit's rows.  Against a
 * naive double reference written here, the output poisoned, debug mode on
 * (every element written) and off, at 1 and 2 threads.  Odd sizes: one
 * output channel, groups, 2 images, kernels 2x2, 3x3 and 2x3 (unequal
 * strides), planes of 1 row and of odd widths.
 */
#include "kiln/kiln.h"
#include "test.h"
#include "test_ops_util.h"

#include <math.h>
#include <stdint.h>

static uint64_t g_seed = 0xC07A7E5EED000017ull;

enum { EPI_NONE, EPI_SIGMOID, EPI_RELU };

typedef struct ctcase {
    int64_t N, C, M, G, H, W, kh, kw;
    int epi;
} ctcase;

static void run_case(const ctcase *t) {
    const int64_t Cg = t->C / t->G, Mg = t->M / t->G, OH = t->H * t->kh, OW = t->W * t->kw;
    const int64_t nx = t->N * t->C * t->H * t->W, ny = t->N * t->M * OH * OW, nw = t->C * Mg * t->kh * t->kw;
    float *x = test_rnd_f32(&g_seed, nx, -1.0f, 1.0f), *w = test_rnd_f32(&g_seed, nw, -1.0f, 1.0f);
    float *b = test_rnd_f32(&g_seed, t->M, -0.5f, 0.5f);
    double *ref = test_xmalloc((size_t)ny * sizeof(double));
    for (int64_t n = 0; n < t->N; n++) /* the scatter definition: one contribution per output here */
        for (int64_t m = 0; m < t->M; m++)
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    const int64_t iy = oy / t->kh, ky = oy % t->kh, ix = ox / t->kw, kx = ox % t->kw;
                    const int64_t g = m / Mg, mg = m % Mg;
                    double s = b[m];
                    for (int64_t cg = 0; cg < Cg; cg++) {
                        const int64_t c = g * Cg + cg;
                        s += (double)x[((n * t->C + c) * t->H + iy) * t->W + ix] *
                             w[((c * Mg + mg) * t->kh + ky) * t->kw + kx];
                    }
                    if (t->epi == EPI_SIGMOID) s = 1.0 / (1.0 + exp(-s));
                    if (t->epi == EPI_RELU && s < 0) s = 0;
                    ref[((n * t->M + m) * OH + oy) * OW + ox] = s;
                }
    float *y = test_xmalloc((size_t)ny * sizeof(float));
    for (int threads = 1; threads <= 2; threads++) {
        kiln_network *net = kiln_network_create();
        ASSERT(net);
        int64_t xd[4] = {t->N, t->C, t->H, t->W}, wd[4] = {t->C, Mg, t->kh, t->kw}, bd[1] = {t->M};
        ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL));
        ASSERT_OK(kiln_network_add_constant(net, "W", KILN_DTYPE_F32, 4, wd, w));
        ASSERT_OK(kiln_network_add_constant(net, "B", KILN_DTYPE_F32, 1, bd, b));
        const char *ci[3] = {"X", "W", "B"}, *co[1] = {t->epi == EPI_NONE ? "Y" : "c"};
        kiln_layer *ct = kiln_network_add_layer(net, "ai.onnx::ConvTranspose", 11, "ct", 3, ci, 1, co);
        ASSERT(ct);
        ASSERT_OK(kiln_layer_set_ints(ct, "strides", (int64_t[]){t->kh, t->kw}, 2));
        ASSERT_OK(kiln_layer_set_int(ct, "group", t->G));
        if (t->epi != EPI_NONE) {
            const char *ei[1] = {"c"}, *eo[1] = {"Y"};
            ASSERT(kiln_network_add_layer(net, t->epi == EPI_SIGMOID ? "ai.onnx::Sigmoid" : "ai.onnx::Relu", 13,
                                          "epi", 1, ei, 1, eo));
        }
        ASSERT_OK(kiln_network_mark_output(net, "Y"));
        kiln_build_stats st;
        kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, threads, &st);
        kiln_network_free(net);
        ASSERT_EQ(st.layers, 1); /* the epilogue fused */
        for (int debug = 0; debug <= 1; debug++) {
            test_run_xy(e, threads, debug, x, nx, y, ny, 0);
            char what[160];
            snprintf(what, sizeof what, "ConvTranspose N=%lld C=%lld M=%lld G=%lld %lldx%lld k=%lldx%lld epi %d "
                     "threads %d debug %d", (long long)t->N, (long long)t->C, (long long)t->M, (long long)t->G,
                     (long long)t->H, (long long)t->W, (long long)t->kh, (long long)t->kw, t->epi, threads, debug);
            test_check_close(what, y, ref, ny, 1e-5 * (double)(Cg + 1));
        }
        kiln_engine_free(e);
    }
    free(x); free(w); free(b); free(ref); free(y);
}

TEST_IMPL(conv_transpose_tiled) {
    static const ctcase cases[] = {
        {1, 24, 1, 1, 37, 41, 2, 2, EPI_SIGMOID}, /* PP-OCR det's last layer, smaller */
        {1, 24, 24, 1, 19, 16, 2, 2, EPI_RELU},   /* and the one before it */
        {2, 6, 1, 1, 1, 7, 2, 2, EPI_NONE},       /* a single input row */
        {1, 4, 6, 2, 9, 5, 3, 3, EPI_SIGMOID},    /* groups, a 3x3 kernel */
        {2, 5, 3, 1, 6, 11, 2, 3, EPI_RELU},      /* unequal strides */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
}

TEST_LIST(TEST_ENTRY(conv_transpose_tiled))
