/*
 * ffn_net.h — a transformer feed-forward block in the form torch's ONNX
 * exporter writes it, for the GPU fusion tests (test_cuda_placement.c on
 * the stand-in device, test_cuda_fusion.c on a GPU):
 *
 *   x [batch, S, K]  (batch dynamic, profile 1..4)
 *   a  = Add(b1, MatMul(x, W1))                      Linear 1 (bias first)
 *   g  = Mul(Mul(a, Add(Erf(Div(a, sqrt 2)), 1)), 0.5)  erf GELU, 5 layers
 *   y  = Relu(Add(MatMul(g, W2), b2))                Linear 2 + Relu
 *   s  = Shape(x)                                    (int64 [3])
 *
 * and its reference in double.  Include after test.h.
 */
#ifndef KILN_TEST_FFN_NET_H
#define KILN_TEST_FFN_NET_H

#include <math.h>

enum { FFN_S = 8, FFN_K = 32, FFN_N = 48, FFN_N2 = 24, FFN_BMAX = 4 };

typedef struct ffn_w {
    float w1[FFN_K * FFN_N], b1[FFN_N], w2[FFN_N * FFN_N2], b2[FFN_N2];
} ffn_w;

static inline void ffn_weights(ffn_w *w, uint64_t seed) {
    for (int i = 0; i < FFN_K * FFN_N; i++) w->w1[i] = test_randf(&seed, -0.4f, 0.4f);
    for (int i = 0; i < FFN_N; i++) w->b1[i] = test_randf(&seed, -1, 1);
    for (int i = 0; i < FFN_N * FFN_N2; i++) w->w2[i] = test_randf(&seed, -0.3f, 0.3f);
    for (int i = 0; i < FFN_N2; i++) w->b2[i] = test_randf(&seed, -1, 1);
}

static inline kiln_network *ffn_network(const ffn_w *w) {
    static const float sqrt2 = 1.41421356f, one = 1.0f, half = 0.5f;
    kiln_network *net = kiln_network_create();
    int64_t xd[3] = {-1, FFN_S, FFN_K}, w1d[2] = {FFN_K, FFN_N}, b1d[1] = {FFN_N}, w2d[2] = {FFN_N, FFN_N2},
            b2d[1] = {FFN_N2};
    const char *xn[3] = {"batch", NULL, NULL};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 3, xd, xn));
    ASSERT_OK(kiln_network_add_constant(net, "W1", KILN_DTYPE_F32, 2, w1d, w->w1));
    ASSERT_OK(kiln_network_add_constant(net, "b1", KILN_DTYPE_F32, 1, b1d, w->b1));
    ASSERT_OK(kiln_network_add_constant(net, "W2", KILN_DTYPE_F32, 2, w2d, w->w2));
    ASSERT_OK(kiln_network_add_constant(net, "b2", KILN_DTYPE_F32, 1, b2d, w->b2));
    ASSERT_OK(kiln_network_add_constant(net, "sqrt2", KILN_DTYPE_F32, 0, b1d, &sqrt2));
    ASSERT_OK(kiln_network_add_constant(net, "one", KILN_DTYPE_F32, 0, b1d, &one));
    ASSERT_OK(kiln_network_add_constant(net, "half", KILN_DTYPE_F32, 0, b1d, &half));
    static const struct {
        const char *op, *name, *in[2], *out;
    } L[] = {
        {"MatMul", "linear1", {"x", "W1"}, "h"},  {"Add", "bias1", {"b1", "h"}, "a"},
        {"Div", "div", {"a", "sqrt2"}, "d"},      {"Erf", "erf", {"d", NULL}, "e"},
        {"Add", "add1", {"e", "one"}, "f"},       {"Mul", "mul", {"a", "f"}, "g0"},
        {"Mul", "mul_half", {"g0", "half"}, "g"}, {"MatMul", "linear2", {"g", "W2"}, "h2"},
        {"Add", "bias2", {"h2", "b2"}, "a2"},     {"Relu", "relu", {"a2", NULL}, "y"},
        {"Shape", "shape", {"x", NULL}, "s"},
    };
    for (size_t i = 0; i < sizeof L / sizeof L[0]; i++) {
        char op[64];
        snprintf(op, sizeof op, "ai.onnx::%s", L[i].op);
        ASSERT(kiln_network_add_layer(net, op, 17, L[i].name, L[i].in[1] ? 2 : 1, L[i].in, 1, &L[i].out));
    }
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    ASSERT_OK(kiln_network_mark_output(net, "s"));
    return net;
}

/* Build config: device CUDA, flags, batch profile 1 / 2 / FFN_BMAX. */
static inline kiln_build_config *ffn_config(unsigned flags) {
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_device(cfg, KILN_DEVICE_CUDA);
    kiln_build_config_set_flags(cfg, flags);
    int64_t mn[3] = {1, FFN_S, FFN_K}, opt[3] = {2, FFN_S, FFN_K}, mx[3] = {FFN_BMAX, FFN_S, FFN_K};
    ASSERT_OK(kiln_build_config_set_profile(cfg, "x", 3, mn, opt, mx));
    return cfg;
}

/* y for x [rows = batch * S, K] in double. */
static inline void ffn_ref(const ffn_w *w, const float *x, int64_t rows, double *y) {
    double g[FFN_N];
    for (int64_t r = 0; r < rows; r++) {
        for (int j = 0; j < FFN_N; j++) {
            double s = w->b1[j];
            for (int q = 0; q < FFN_K; q++) s += (double)x[r * FFN_K + q] * w->w1[q * FFN_N + j];
            g[j] = 0.5 * s * (1.0 + erf(s / sqrt(2.0)));
        }
        for (int j = 0; j < FFN_N2; j++) {
            double s = w->b2[j];
            for (int q = 0; q < FFN_N; q++) s += g[q] * w->w2[q * FFN_N2 + j];
            y[r * FFN_N2 + j] = s > 0 ? s : 0;
        }
    }
}

#endif /* KILN_TEST_FFN_NET_H */
