/*
 * lcnet_nets.h — PP-LCNet blocks (PP-OCRv4's detector backbone) in the form
 * Paddle's ONNX export writes them, for the pointwise rewrite tests
 * (test_pointwise_fold.c on the CPU and the stand-in GPU, test_cuda_fusion.c
 * on a GPU), with a naive reference in double.
 *
 *   x [LC_N, LC_C, LC_H, LC_W]
 *   a  = Add(Mul(s1, Conv1(x)), c1)                 3x3 pad 1 conv with bias, scalar scale and shift
 *   h  = Div(Mul(a, Clip(Add(a, 3), 0, 6)), 6)      Paddle's hardswish, four layers
 *   p  = Add(Mul(h, s2), c2)                        learnable affine after the activation
 *   b  = Sub(Mul(Conv2(p), k), d)                   1x1 conv without bias, per-channel scale [M,1,1]
 *   q  = Mul(b, Mul(Clip(Add(3, b), 0, 6), 1/6))    the 1/6 on the Clip first, Add(3, x) order
 *   r  = Div(q, 2)
 *   y  = Mul(HardSigmoid(z), z), z = Conv3(r)       depthwise 3x3 pad 1, HardSigmoid(1/6, 1/2) * x
 *
 * Include after test.h.
 */
#ifndef KILN_TEST_LCNET_NETS_H
#define KILN_TEST_LCNET_NETS_H

#include "test_ops_util.h"

#include <math.h>

enum { LC_N = 2, LC_C = 6, LC_M = 8, LC_H = 9, LC_W = 7, LC_HW = LC_H * LC_W };

typedef struct lc_w {
    float w1[LC_M * LC_C * 9], b1[LC_M], w2[LC_M * LC_M], k[LC_M], w3[LC_M * 9], b3[LC_M];
    float s1, c1, s2, c2, d;
} lc_w;

static inline void lc_weights(lc_w *w, uint64_t seed) {
    for (int i = 0; i < LC_M * LC_C * 9; i++) w->w1[i] = test_randf(&seed, -0.4f, 0.4f);
    for (int i = 0; i < LC_M * LC_M; i++) w->w2[i] = test_randf(&seed, -0.5f, 0.5f);
    for (int i = 0; i < LC_M * 9; i++) w->w3[i] = test_randf(&seed, -0.6f, 0.6f);
    for (int i = 0; i < LC_M; i++) {
        w->b1[i] = test_randf(&seed, -1, 1);
        w->k[i] = test_randf(&seed, 0.5f, 2.0f);
        w->b3[i] = test_randf(&seed, -1, 1);
    }
    w->s1 = test_randf(&seed, 0.5f, 2.0f);
    w->c1 = test_randf(&seed, -1, 1);
    w->s2 = test_randf(&seed, 0.3f, 1.5f);
    w->c2 = test_randf(&seed, -1, 1);
    w->d = test_randf(&seed, -1, 1);
}

static inline void lc_layer(kiln_network *net, const char *op, int ver, const char *name, int nin, const char *i0,
                            const char *i1, const char *i2, const char *out) {
    const char *ins[3] = {i0, i1, i2}, *outs[1] = {out};
    if (!kiln_network_add_layer(net, op, ver, name, nin, ins, 1, outs)) TEST__FAIL("add %s: %s", name, kiln_errmsg());
}

static inline void lc_conv(kiln_network *net, const char *name, const char *x, const char *w, const char *b,
                           const char *y, int k, int group) {
    const char *ins[3] = {x, w, b}, *outs[1] = {y};
    kiln_layer *L = kiln_network_add_layer(net, "ai.onnx::Conv", 11, name, b ? 3 : 2, ins, 1, outs);
    if (!L) TEST__FAIL("add %s: %s", name, kiln_errmsg());
    int64_t p = k / 2, pads[4] = {p, p, p, p};
    ASSERT_OK(kiln_layer_set_ints(L, "pads", pads, 4));
    ASSERT_OK(kiln_layer_set_int(L, "group", group));
}

static inline kiln_network *lc_network(const lc_w *w) {
    static const float three = 3, zero = 0, six = 6, sixth = 1.0f / 6, two = 2;
    kiln_network *net = kiln_network_create();
    int64_t xd[4] = {LC_N, LC_C, LC_H, LC_W}, w1d[4] = {LC_M, LC_C, 3, 3}, w2d[4] = {LC_M, LC_M, 1, 1},
            w3d[4] = {LC_M, 1, 3, 3}, md[1] = {LC_M}, kd[3] = {LC_M, 1, 1}, one[1] = {1};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 4, xd, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "w1", KILN_DTYPE_F32, 4, w1d, w->w1));
    ASSERT_OK(kiln_network_add_constant(net, "b1", KILN_DTYPE_F32, 1, md, w->b1));
    ASSERT_OK(kiln_network_add_constant(net, "w2", KILN_DTYPE_F32, 4, w2d, w->w2));
    ASSERT_OK(kiln_network_add_constant(net, "k", KILN_DTYPE_F32, 3, kd, w->k));
    ASSERT_OK(kiln_network_add_constant(net, "w3", KILN_DTYPE_F32, 4, w3d, w->w3));
    ASSERT_OK(kiln_network_add_constant(net, "b3", KILN_DTYPE_F32, 1, md, w->b3));
    ASSERT_OK(kiln_network_add_constant(net, "s1", KILN_DTYPE_F32, 1, one, &w->s1)); /* Paddle: shape [1] */
    ASSERT_OK(kiln_network_add_constant(net, "c1", KILN_DTYPE_F32, 1, one, &w->c1));
    ASSERT_OK(kiln_network_add_constant(net, "s2", KILN_DTYPE_F32, 1, one, &w->s2));
    ASSERT_OK(kiln_network_add_constant(net, "c2", KILN_DTYPE_F32, 1, one, &w->c2));
    ASSERT_OK(kiln_network_add_constant(net, "d", KILN_DTYPE_F32, 0, one, &w->d));
    ASSERT_OK(kiln_network_add_constant(net, "three", KILN_DTYPE_F32, 0, one, &three));
    ASSERT_OK(kiln_network_add_constant(net, "zero", KILN_DTYPE_F32, 0, one, &zero));
    ASSERT_OK(kiln_network_add_constant(net, "six", KILN_DTYPE_F32, 0, one, &six));
    ASSERT_OK(kiln_network_add_constant(net, "sixth", KILN_DTYPE_F32, 0, one, &sixth));
    ASSERT_OK(kiln_network_add_constant(net, "two", KILN_DTYPE_F32, 0, one, &two));
    lc_conv(net, "conv1", "x", "w1", "b1", "v1", 3, 1);
    lc_layer(net, "ai.onnx::Mul", 7, "mul1", 2, "s1", "v1", NULL, "m1");
    lc_layer(net, "ai.onnx::Add", 7, "add1", 2, "m1", "c1", NULL, "a");
    lc_layer(net, "ai.onnx::Add", 7, "hs1_add", 2, "a", "three", NULL, "t1");
    lc_layer(net, "ai.onnx::Clip", 11, "hs1_clip", 3, "t1", "zero", "six", "t2");
    lc_layer(net, "ai.onnx::Mul", 7, "hs1_mul", 2, "a", "t2", NULL, "t3");
    lc_layer(net, "ai.onnx::Div", 7, "hs1_div", 2, "t3", "six", NULL, "h");
    lc_layer(net, "ai.onnx::Mul", 7, "mul2", 2, "h", "s2", NULL, "m2");
    lc_layer(net, "ai.onnx::Add", 7, "add2", 2, "m2", "c2", NULL, "p");
    lc_conv(net, "conv2", "p", "w2", NULL, "v2", 1, 1);
    lc_layer(net, "ai.onnx::Mul", 7, "mul3", 2, "v2", "k", NULL, "m3");
    lc_layer(net, "ai.onnx::Sub", 7, "sub3", 2, "m3", "d", NULL, "b");
    lc_layer(net, "ai.onnx::Add", 7, "hs2_add", 2, "three", "b", NULL, "u1");
    lc_layer(net, "ai.onnx::Clip", 11, "hs2_clip", 3, "u1", "zero", "six", "u2");
    lc_layer(net, "ai.onnx::Mul", 7, "hs2_sixth", 2, "u2", "sixth", NULL, "u3");
    lc_layer(net, "ai.onnx::Mul", 7, "hs2_mul", 2, "b", "u3", NULL, "q");
    lc_layer(net, "ai.onnx::Div", 7, "div2", 2, "q", "two", NULL, "r");
    lc_conv(net, "conv3", "r", "w3", "b3", "z", 3, LC_M);
    kiln_layer *hs = NULL;
    {
        const char *ins[1] = {"z"}, *outs[1] = {"g"};
        hs = kiln_network_add_layer(net, "ai.onnx::HardSigmoid", 6, "hsig", 1, ins, 1, outs);
        ASSERT(hs);
        ASSERT_OK(kiln_layer_set_float(hs, "alpha", 1.0f / 6));
        ASSERT_OK(kiln_layer_set_float(hs, "beta", 0.5f));
    }
    lc_layer(net, "ai.onnx::Mul", 7, "hsig_mul", 2, "g", "z", NULL, "y");
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    return net;
}

static inline double lc_hswish(double v) {
    return v * fmin(fmax(v + 3, 0), 6) / 6;
}

/* out (LC_N x LC_M x LC_HW) = conv of in (cin channels, group g) with w (k x k, pad k / 2) + bias. */
static inline void lc_conv_ref(const float *in, int cin, const float *w, const float *bias, int k, int g, double *out) {
    const int64_t hw[2] = {LC_H, LC_W}, kk[2] = {k, k}, one[2] = {1, 1}, p[2] = {k / 2, k / 2};
    test_conv_geo geo = test_conv_geo_make(LC_N, cin, LC_M, g, 2, hw, kk, one, one, p, hw);
    test_conv_ref(&geo, in, w, bias, out);
}

/* y (LC_N x LC_M x LC_HW) of lc_network for x, in double op by op (the
 * tensors between the convolutions stored as floats, as the network does). */
static inline void lc_ref(const lc_w *w, const float *x, double *y) {
    static float f[LC_N * LC_M * LC_HW];
    static double t[LC_N * LC_M * LC_HW];
    const int n = LC_N * LC_M * LC_HW;
    lc_conv_ref(x, LC_C, w->w1, w->b1, 3, 1, t);
    for (int i = 0; i < n; i++) f[i] = (float)(lc_hswish(t[i] * w->s1 + w->c1) * w->s2 + w->c2);
    lc_conv_ref(f, LC_M, w->w2, NULL, 1, 1, t);
    for (int i = 0; i < n; i++) f[i] = (float)(lc_hswish(t[i] * w->k[i / LC_HW % LC_M] - w->d) / 2);
    lc_conv_ref(f, LC_M, w->w3, w->b3, 3, LC_M, t);
    for (int i = 0; i < n; i++) y[i] = lc_hswish(t[i]);
}

#endif
