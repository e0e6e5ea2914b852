/*
 * dbhead_nets.h — PP-OCRv4's detector neck/head steps in the form Paddle's
 * ONNX export writes them, for the ConvTranspose fold and the FP16 Resize
 * (test_pointwise_fold.c on the CPU and the stand-in GPU, test_cuda_fusion.c
 * on a GPU), with a naive reference in double.
 *
 *   x [DB_N, DB_C, DB_H, DB_W]
 *   r = Resize(x, roi [], scales [1, 1, 2, 2])        nearest, the FPN's 2x upsampling
 *   t = ConvTranspose(r, W)                          W [DB_C, DB_M / DB_G, 3, 3], group DB_G,
 *                                                    strides 2, pads 1, output_padding 1, no bias
 *   y = Relu(BatchNormalization(Add(t, b)))          b [1, DB_M, 1, 1]; inference BN
 *
 * The fold makes t's layer one ConvTranspose with bias and a Relu epilogue.
 * Include after test.h.
 */
#ifndef KILN_TEST_DBHEAD_NETS_H
#define KILN_TEST_DBHEAD_NETS_H

#include "test_ops_util.h"

#include <math.h>

enum {
    DB_N = 2, DB_C = 8, DB_M = 6, DB_G = 2, DB_H = 7, DB_W = 5,
    DB_RH = 2 * DB_H, DB_RW = 2 * DB_W, /* after the Resize */
    DB_OH = 2 * DB_RH, DB_OW = 2 * DB_RW, /* after the ConvTranspose */
    DB_NX = DB_N * DB_C * DB_H * DB_W, DB_NY = DB_N * DB_M * DB_OH * DB_OW
};
#define DB_EPS 1e-5f

typedef struct db_w {
    float w[DB_C * (DB_M / DB_G) * 9], b[DB_M], scale[DB_M], shift[DB_M], mean[DB_M], var[DB_M];
} db_w;

static inline void db_weights(db_w *w, uint64_t seed) {
    for (int i = 0; i < DB_C * (DB_M / DB_G) * 9; i++) w->w[i] = test_randf(&seed, -0.5f, 0.5f);
    for (int i = 0; i < DB_M; i++) {
        w->b[i] = test_randf(&seed, -1, 1);
        w->scale[i] = test_randf(&seed, 0.5f, 2.0f);
        w->shift[i] = test_randf(&seed, -1, 1);
        w->mean[i] = test_randf(&seed, -0.5f, 0.5f);
        w->var[i] = test_randf(&seed, 0.2f, 2.0f);
    }
}

static inline kiln_network *db_network(const db_w *w) {
    static const float scales[4] = {1, 1, 2, 2}, roi[1] = {0};
    kiln_network *net = kiln_network_create();
    int64_t xd[4] = {DB_N, DB_C, DB_H, DB_W}, wd[4] = {DB_C, DB_M / DB_G, 3, 3}, bd[4] = {1, DB_M, 1, 1},
            md[1] = {DB_M}, four[1] = {4}, none[1] = {0};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 4, xd, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "roi", KILN_DTYPE_F32, 1, none, roi));
    ASSERT_OK(kiln_network_add_constant(net, "scales", KILN_DTYPE_F32, 1, four, scales));
    ASSERT_OK(kiln_network_add_constant(net, "w", KILN_DTYPE_F32, 4, wd, w->w));
    ASSERT_OK(kiln_network_add_constant(net, "b", KILN_DTYPE_F32, 4, bd, w->b));
    ASSERT_OK(kiln_network_add_constant(net, "scale", KILN_DTYPE_F32, 1, md, w->scale));
    ASSERT_OK(kiln_network_add_constant(net, "shift", KILN_DTYPE_F32, 1, md, w->shift));
    ASSERT_OK(kiln_network_add_constant(net, "mean", KILN_DTYPE_F32, 1, md, w->mean));
    ASSERT_OK(kiln_network_add_constant(net, "var", KILN_DTYPE_F32, 1, md, w->var));
    const char *ri[3] = {"x", "roi", "scales"}, *ro[1] = {"r"};
    kiln_layer *L = kiln_network_add_layer(net, "ai.onnx::Resize", 11, "resize", 3, ri, 1, ro);
    ASSERT(L);
    ASSERT_OK(kiln_layer_set_string(L, "mode", "nearest"));
    const char *ti[2] = {"r", "w"}, *to[1] = {"t"};
    L = kiln_network_add_layer(net, "ai.onnx::ConvTranspose", 11, "convt", 2, ti, 1, to);
    ASSERT(L);
    int64_t two[2] = {2, 2}, ones[2] = {1, 1}, pads[4] = {1, 1, 1, 1};
    ASSERT_OK(kiln_layer_set_ints(L, "strides", two, 2));
    ASSERT_OK(kiln_layer_set_ints(L, "pads", pads, 4));
    ASSERT_OK(kiln_layer_set_ints(L, "output_padding", ones, 2));
    ASSERT_OK(kiln_layer_set_int(L, "group", DB_G));
    const char *ai[2] = {"t", "b"}, *ao[1] = {"a"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Add", 7, "add", 2, ai, 1, ao));
    const char *bi[5] = {"a", "scale", "shift", "mean", "var"}, *bo[1] = {"n"};
    L = kiln_network_add_layer(net, "ai.onnx::BatchNormalization", 9, "bn", 5, bi, 1, bo);
    ASSERT(L);
    ASSERT_OK(kiln_layer_set_float(L, "epsilon", DB_EPS));
    const char *li[1] = {"n"}, *lo[1] = {"y"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 6, "relu", 1, li, 1, lo));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    return net;
}

/* y (DB_N x DB_M x DB_OH x DB_OW) of db_network for x, in double: the
 * ConvTranspose scatters each input of the 2x nearest-upsampled x. */
static inline void db_ref(const db_w *w, const float *x, double *y) {
    const int cpg = DB_C / DB_G, mpg = DB_M / DB_G;
    for (int i = 0; i < DB_NY; i++) y[i] = 0;
    for (int n = 0; n < DB_N; n++)
        for (int c = 0; c < DB_C; c++)
            for (int iy = 0; iy < DB_RH; iy++)
                for (int ix = 0; ix < DB_RW; ix++) {
                    double v = x[((n * DB_C + c) * DB_H + iy / 2) * DB_W + ix / 2];
                    for (int j = 0; j < mpg; j++)
                        for (int a = 0; a < 3; a++)
                            for (int b = 0; b < 3; b++) {
                                int oy = iy * 2 - 1 + a, ox = ix * 2 - 1 + b, m = c / cpg * mpg + j;
                                if (oy < 0 || oy >= DB_OH || ox < 0 || ox >= DB_OW) continue;
                                y[((n * DB_M + m) * DB_OH + oy) * DB_OW + ox] += v * w->w[((c * mpg + j) * 3 + a) * 3 + b];
                            }
                }
    for (int i = 0; i < DB_NY; i++) {
        int m = i / (DB_OH * DB_OW) % DB_M;
        double t = y[i] + w->b[m];
        double v = (t - w->mean[m]) * w->scale[m] / sqrt((double)w->var[m] + DB_EPS) + w->shift[m];
        y[i] = v > 0 ? v : 0;
    }
}

#endif
