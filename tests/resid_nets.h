/*
 * resid_nets.h — an epilogue Add whose other operand is a network input
 * (host memory: on the GPU it needs a host-to-device copy), for
 * test_pointwise_fold.c (CPU and the stand-in GPU) and test_cuda_fusion.c
 * (a GPU), with a naive reference in double.  Every input and the output
 * have RS_NX floats.
 *
 *   RS_HSWISH_X2:  y = HardSwish(Conv(x, W, B) + x2)   x, x2 [RS_N, RS_C, RS_H, RS_W]; 3x3, pads 1
 *   RS_RELU_SELF:  y = Relu(Conv(x, W, B) + x)         the Conv's own input as the residual
 *   RS_MATMUL_X2:  y = Relu(MatMul(x, Wm) + x2)        x, x2 [RS_N * RS_C * RS_H, RS_W], Wm [RS_W, RS_W]
 *
 * Include after test.h.
 */
#ifndef KILN_TEST_RESID_NETS_H
#define KILN_TEST_RESID_NETS_H

#include "test_ops_util.h"

enum { RS_N = 2, RS_C = 4, RS_H = 5, RS_W = 6, RS_NX = RS_N * RS_C * RS_H * RS_W, RS_ROWS = RS_NX / RS_W };
typedef enum { RS_HSWISH_X2, RS_RELU_SELF, RS_MATMUL_X2, RS_NMODES } rs_mode;

typedef struct rs_w {
    float w[RS_C * RS_C * 9], b[RS_C], wm[RS_W * RS_W];
} rs_w;

static inline void rs_weights(rs_w *w, uint64_t seed) {
    for (int i = 0; i < RS_C * RS_C * 9; i++) w->w[i] = test_randf(&seed, -0.5f, 0.5f);
    for (int i = 0; i < RS_C; i++) w->b[i] = test_randf(&seed, -1, 1);
    for (int i = 0; i < RS_W * RS_W; i++) w->wm[i] = test_randf(&seed, -0.5f, 0.5f);
}

static inline kiln_network *rs_network(const rs_w *w, rs_mode mode) {
    kiln_network *net = kiln_network_create();
    int64_t xd[4] = {RS_N, RS_C, RS_H, RS_W}, wd[4] = {RS_C, RS_C, 3, 3}, bd[1] = {RS_C}, md[2] = {RS_ROWS, RS_W},
            wmd[2] = {RS_W, RS_W};
    int mm = mode == RS_MATMUL_X2;
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, mm ? 2 : 4, mm ? md : xd, NULL));
    if (mode != RS_RELU_SELF) ASSERT_OK(kiln_network_add_input(net, "x2", KILN_DTYPE_F32, mm ? 2 : 4, mm ? md : xd, NULL));
    if (mm) {
        ASSERT_OK(kiln_network_add_constant(net, "wm", KILN_DTYPE_F32, 2, wmd, w->wm));
        const char *mi[2] = {"x", "wm"}, *mo[1] = {"t"};
        ASSERT(kiln_network_add_layer(net, "ai.onnx::MatMul", 13, "matmul", 2, mi, 1, mo));
    } else {
        ASSERT_OK(kiln_network_add_constant(net, "w", KILN_DTYPE_F32, 4, wd, w->w));
        ASSERT_OK(kiln_network_add_constant(net, "b", KILN_DTYPE_F32, 1, bd, w->b));
        const char *ci[3] = {"x", "w", "b"}, *co[1] = {"t"};
        kiln_layer *L = kiln_network_add_layer(net, "ai.onnx::Conv", 11, "conv", 3, ci, 1, co);
        ASSERT(L);
        int64_t pads[4] = {1, 1, 1, 1};
        ASSERT_OK(kiln_layer_set_ints(L, "pads", pads, 4));
    }
    const char *ai[2] = {"t", mode == RS_RELU_SELF ? "x" : "x2"}, *ao[1] = {"a"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Add", 7, "add", 2, ai, 1, ao));
    const char *li[1] = {"a"}, *lo[1] = {"y"};
    ASSERT(kiln_network_add_layer(net, mode == RS_HSWISH_X2 ? "ai.onnx::HardSwish" : "ai.onnx::Relu",
                                  mode == RS_HSWISH_X2 ? 14 : 6, "act", 1, li, 1, lo));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    return net;
}

/* y of rs_network(w, mode) for x and x2 (unused by RS_RELU_SELF), in double. */
static inline void rs_ref(const rs_w *w, rs_mode mode, const float *x, const float *x2, double *y) {
    for (int i = 0; i < RS_NX; i++) {
        double t = 0;
        if (mode == RS_MATMUL_X2) {
            int r = i / RS_W, j = i % RS_W;
            for (int k = 0; k < RS_W; k++) t += (double)x[r * RS_W + k] * w->wm[k * RS_W + j];
        } else {
            int n = i / (RS_C * RS_H * RS_W), m = i / (RS_H * RS_W) % RS_C, oy = i / RS_W % RS_H, ox = i % RS_W;
            t = w->b[m];
            for (int c = 0; c < RS_C; c++)
                for (int a = 0; a < 3; a++)
                    for (int b = 0; b < 3; b++) {
                        int iy = oy - 1 + a, ix = ox - 1 + b;
                        if (iy < 0 || iy >= RS_H || ix < 0 || ix >= RS_W) continue;
                        t += (double)x[((n * RS_C + c) * RS_H + iy) * RS_W + ix] * w->w[((m * RS_C + c) * 3 + a) * 3 + b];
                    }
        }
        t += mode == RS_RELU_SELF ? x[i] : x2[i];
        if (mode == RS_HSWISH_X2) {
            double g = t / 6 + 0.5;
            y[i] = t * (g < 0 ? 0 : g > 1 ? 1 : g);
        } else {
            y[i] = t > 0 ? t : 0;
        }
    }
}

/* Run e on fresh x, x2 (mode's inputs) into y (poisoned first); the worst
 * |y - ref| / (1 + |ref|) against rs_ref, NaN as infinity. */
static inline double rs_run(const kiln_engine *e, const rs_w *w, rs_mode mode, uint64_t seed) {
    static float x[RS_NX], x2[RS_NX], y[RS_NX];
    static double ref[RS_NX];
    for (int i = 0; i < RS_NX; i++) {
        x[i] = test_randf(&seed, -3, 3);
        x2[i] = test_randf(&seed, -3, 3);
    }
    rs_ref(w, mode, x, x2, ref);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    if (mode != RS_RELU_SELF) ASSERT_OK(kiln_context_bind(ctx, "x2", x2, sizeof x2));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    memset(y, 0xFF, sizeof y); /* NaN: a value not written shows */
    ASSERT_OK(kiln_context_run(ctx));
    kiln_context_free(ctx);
    return test_worst_rel(y, ref, RS_NX, 0);
}

#endif
