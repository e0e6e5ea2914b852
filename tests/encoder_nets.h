/*
 * encoder_nets.h — transformer encoder pieces in the form ONNX exporters
 * write them, for the GPU fusion tests (test_cuda_placement.c on the
 * stand-in device, test_cuda_fusion.c on a GPU), with references in double.
 *
 * The feed-forward block (ffn_*):
 *
 *   x [batch, S, K]  (batch dynamic, profile 1..4)
 *   a  = Add(b1, MatMul(x, W1))                      Linear 1 (bias first)
 *   g  = Mul(Mul(a, Add(Erf(Div(a, sqrt 2)), 1)), 0.5)  erf GELU, 5 layers
 *   y  = Relu(Add(MatMul(g, W2), b2))                Linear 2 + Relu
 *   s  = Shape(x)                                    (int64 [3])
 *
 * Attention (attn_*), inputs q, k, v [batch, H, S, D] (batch dynamic):
 *
 *   y1 = MatMul(Softmax13(MatMul(Mul(q, c), Mul(Transpose(k), c))), v)
 *        (torch's export: the scale sqrt(1/sqrt D) on both sides, K
 *        transposed by a Transpose of the last two dims: folded in)
 *   y2 = MatMul(Softmax11(Div(MatMul(q, kt), sqrt D), axis 3), v)
 *        (kt = Transpose(k) also read by output kt: K^T stays as is)
 *   y3 = LayerNormalization(Add(q, y1), lns, lnb)   (a residual + norm)
 *
 * mha_engine: tests/fixtures/mha_encoder.onnx, a torch export (packed QKV).
 *
 * Include after test.h.
 */
#ifndef KILN_TEST_ENCODER_NETS_H
#define KILN_TEST_ENCODER_NETS_H

#include "kiln/onnx.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

enum { ATTN_H = 2, ATTN_S = 20, ATTN_D = 64 };
#define ATTN_N (ATTN_H * ATTN_S * ATTN_D) /* elements per batch item */

static inline kiln_network *attn_network(void) {
    static const float c = 0.35355339f /* sqrt(1 / sqrt 64) */, sd = 8.0f;
    kiln_network *net = kiln_network_create();
    int64_t d[4] = {-1, ATTN_H, ATTN_S, ATTN_D}, one[1] = {1};
    const char *dn[4] = {"batch", NULL, NULL, NULL};
    const char *names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) ASSERT_OK(kiln_network_add_input(net, names[i], KILN_DTYPE_F32, 4, d, dn));
    ASSERT_OK(kiln_network_add_constant(net, "c", KILN_DTYPE_F32, 0, one, &c));
    ASSERT_OK(kiln_network_add_constant(net, "sd", KILN_DTYPE_F32, 0, one, &sd));
    static const struct {
        const char *op;
        int ver;
        const char *name, *in[3], *out;
    } L[] = {
        {"Transpose", 13, "kt1", {"k", NULL}, "kt1"}, {"Transpose", 13, "kt", {"k", NULL}, "kt"},
        {"Mul", 14, "qs", {"q", "c"}, "qs"},
        {"Mul", 14, "ks", {"kt1", "c"}, "ks"},       {"MatMul", 13, "qk1", {"qs", "ks"}, "s1"},
        {"Softmax", 13, "sm1", {"s1", NULL}, "p1"},  {"MatMul", 13, "pv1", {"p1", "v"}, "y1"},
        {"MatMul", 13, "qk2", {"q", "kt"}, "s2"},    {"Div", 14, "div", {"s2", "sd"}, "s2d"},
        {"Softmax", 11, "sm2", {"s2d", NULL}, "p2"}, {"MatMul", 13, "pv2", {"p2", "v"}, "y2"},
        {"Add", 14, "res", {"q", "y1"}, "r"},       {"LayerNormalization", 17, "ln", {"r", "lns", "lnb"}, "y3"},
    };
    static float lns[ATTN_D], lnb[ATTN_D];
    uint64_t seed = 5;
    for (int i = 0; i < ATTN_D; i++) lns[i] = test_randf(&seed, 0.5f, 1.5f), lnb[i] = test_randf(&seed, -1, 1);
    int64_t ld[1] = {ATTN_D};
    ASSERT_OK(kiln_network_add_constant(net, "lns", KILN_DTYPE_F32, 1, ld, lns));
    ASSERT_OK(kiln_network_add_constant(net, "lnb", KILN_DTYPE_F32, 1, ld, lnb));
    for (size_t i = 0; i < sizeof L / sizeof L[0]; i++) {
        char op[64];
        snprintf(op, sizeof op, "ai.onnx::%s", L[i].op);
        int nin = L[i].in[2] ? 3 : L[i].in[1] ? 2 : 1;
        kiln_layer *l = kiln_network_add_layer(net, op, L[i].ver, L[i].name, nin, L[i].in, 1, &L[i].out);
        ASSERT(l);
        static const int64_t perm[4] = {0, 1, 3, 2};
        if (!strcmp(L[i].op, "Transpose")) ASSERT_OK(kiln_layer_set_ints(l, "perm", perm, 4));
        if (!strcmp(L[i].name, "sm2")) ASSERT_OK(kiln_layer_set_int(l, "axis", 3));
    }
    ASSERT_OK(kiln_network_mark_output(net, "y1"));
    ASSERT_OK(kiln_network_mark_output(net, "y2"));
    ASSERT_OK(kiln_network_mark_output(net, "kt"));
    ASSERT_OK(kiln_network_mark_output(net, "y3"));
    return net;
}

/* y3 = LayerNormalization(q + y1) over the last dim (the network's lns, lnb). */
static inline void attn_ln_ref(const float *q, const double *y1, int64_t rows, double *y3) {
    float lns[ATTN_D], lnb[ATTN_D];
    uint64_t seed = 5;
    for (int i = 0; i < ATTN_D; i++) lns[i] = test_randf(&seed, 0.5f, 1.5f), lnb[i] = test_randf(&seed, -1, 1);
    for (int64_t r = 0; r < rows; r++) {
        double x[ATTN_D], m = 0, v = 0;
        for (int i = 0; i < ATTN_D; i++) m += x[i] = q[r * ATTN_D + i] + y1[r * ATTN_D + i];
        m /= ATTN_D;
        for (int i = 0; i < ATTN_D; i++) v += (x[i] - m) * (x[i] - m);
        double rs = 1.0 / sqrt(v / ATTN_D + 1e-5);
        for (int i = 0; i < ATTN_D; i++) y3[r * ATTN_D + i] = (x[i] - m) * rs * lns[i] + lnb[i];
    }
}

static inline kiln_build_config *attn_config(unsigned flags) {
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_device(cfg, KILN_DEVICE_CUDA);
    kiln_build_config_set_flags(cfg, flags);
    int64_t mn[4] = {1, ATTN_H, ATTN_S, ATTN_D}, opt[4] = {2, ATTN_H, ATTN_S, ATTN_D},
            mx[4] = {FFN_BMAX, ATTN_H, ATTN_S, ATTN_D};
    const char *names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) ASSERT_OK(kiln_build_config_set_profile(cfg, names[i], 4, mn, opt, mx));
    return cfg;
}

/* Masked attention (HF BERT's export): y = MatMul(Softmax(Add(Div(MatMul(q,
 * Transpose(k)), 8), mask)), v), q, k, v [batch, H, S, D], mask [batch, 1,
 * 1, S] (additive, padding-style). */
static inline kiln_network *mask_network(void) {
    static const float sd = 8.0f;
    kiln_network *net = kiln_network_create();
    int64_t d[4] = {-1, ATTN_H, ATTN_S, ATTN_D}, md[4] = {-1, 1, 1, ATTN_S}, one[1] = {1};
    const char *dn[4] = {"batch", NULL, NULL, NULL};
    const char *names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) ASSERT_OK(kiln_network_add_input(net, names[i], KILN_DTYPE_F32, 4, d, dn));
    ASSERT_OK(kiln_network_add_input(net, "mask", KILN_DTYPE_F32, 4, md, dn));
    ASSERT_OK(kiln_network_add_constant(net, "sd", KILN_DTYPE_F32, 0, one, &sd));
    static const struct {
        const char *op;
        int ver;
        const char *name, *in[2], *out;
    } L[] = {
        {"Transpose", 13, "kt", {"k", NULL}, "kt"}, {"MatMul", 13, "qk", {"q", "kt"}, "s"},
        {"Div", 14, "div", {"s", "sd"}, "sdiv"},    {"Add", 14, "addmask", {"sdiv", "mask"}, "sm"},
        {"Softmax", 13, "softmax", {"sm", NULL}, "p"}, {"MatMul", 13, "pv", {"p", "v"}, "y"},
    };
    for (size_t i = 0; i < sizeof L / sizeof *L; i++) {
        const char *out[1] = {L[i].out};
        char op[64];
        snprintf(op, sizeof op, "ai.onnx::%s", L[i].op);
        kiln_layer *l = kiln_network_add_layer(net, op, L[i].ver, L[i].name, L[i].in[1] ? 2 : 1, L[i].in, 1, out);
        ASSERT(l);
        if (!strcmp(L[i].op, "Transpose")) {
            const int64_t perm[4] = {0, 1, 3, 2};
            ASSERT_OK(kiln_layer_set_ints(l, "perm", perm, 4));
        }
    }
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    return net;
}

/* mask_network's build config: device dev, flags, batch 1..4. */
static inline kiln_build_config *mask_config(kiln_device_kind dev, unsigned flags) {
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_device(cfg, dev);
    kiln_build_config_set_flags(cfg, flags);
    int64_t mn[4] = {1, ATTN_H, ATTN_S, ATTN_D}, mx[4] = {4, ATTN_H, ATTN_S, ATTN_D}, mmn[4] = {1, 1, 1, ATTN_S},
            mmx[4] = {4, 1, 1, ATTN_S};
    const char *names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) ASSERT_OK(kiln_build_config_set_profile(cfg, names[i], 4, mn, mn, mx));
    ASSERT_OK(kiln_build_config_set_profile(cfg, "mask", 4, mmn, mmn, mmx));
    return cfg;
}

/* tests/fixtures/mha_encoder.onnx (gen_mha_encoder.py): a 2-layer torch
 * TransformerEncoder, x [batch, 10, 32] (4 heads of 8), batch 1..8, built
 * for the device with these flags. */
#define MHA_S 10
#define MHA_E 32
static inline kiln_engine *mha_engine(kiln_device_kind dev, unsigned flags) {
    kiln_network *net = NULL;
    /* KILN_TEST_FIXTURES: the fixtures folder where the test binary runs
     * away from its source tree (scripts/test_gpu.sh on the GPU machine) */
    const char *fx = getenv("KILN_TEST_FIXTURES");
    char path[4096];
    snprintf(path, sizeof path, "%s/mha_encoder.onnx", fx && *fx ? fx : KILN_SOURCE_DIR "/tests/fixtures");
    ASSERT_OK(kiln_onnx_import(path, NULL, &net));
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_device(cfg, dev);
    kiln_build_config_set_flags(cfg, flags);
    int64_t mn[3] = {1, MHA_S, MHA_E}, opt[3] = {3, MHA_S, MHA_E}, mx[3] = {8, MHA_S, MHA_E};
    ASSERT_OK(kiln_build_config_set_profile(cfg, "x", 3, mn, opt, mx));
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    return e;
}

/* y of mha_encoder.onnx (torch's export: Q, K, V out of a packed projection
 * through Reshape/Transpose/Gather chains) for x [nb, 10, 32] on engine e,
 * `threads` threads. */
static inline void mha_run(kiln_engine *e, const float *x, int64_t nb, float *y, int threads) {
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, threads, &ctx));
    int64_t d[3] = {nb, MHA_S, MHA_E};
    size_t bytes = (size_t)(nb * MHA_S * MHA_E) * sizeof *x;
    ASSERT_OK(kiln_context_set_input_shape(ctx, "x", 3, d));
    ASSERT_OK(kiln_context_bind(ctx, "x", (void *)x, bytes));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, bytes));
    memset(y, 0xFF, bytes); /* NaN: a value not written shows */
    ASSERT_OK(kiln_context_run(ctx));
    kiln_context_free(ctx);
}

/* softmax(scale q k^T) v per head of `heads` [S, D] matrices. */
static inline void attn_ref(const float *q, const float *k, const float *v, int64_t heads, double scale, double *y) {
    double s[ATTN_S];
    for (int64_t h = 0; h < heads; h++) {
        const float *qh = q + h * ATTN_S * ATTN_D, *kh = k + h * ATTN_S * ATTN_D, *vh = v + h * ATTN_S * ATTN_D;
        for (int i = 0; i < ATTN_S; i++) {
            double m = -INFINITY, sum = 0;
            for (int j = 0; j < ATTN_S; j++) {
                double a = 0;
                for (int d = 0; d < ATTN_D; d++) a += (double)qh[i * ATTN_D + d] * kh[j * ATTN_D + d];
                s[j] = a * scale;
                m = s[j] > m ? s[j] : m;
            }
            for (int j = 0; j < ATTN_S; j++) sum += s[j] = exp(s[j] - m);
            for (int d = 0; d < ATTN_D; d++) {
                double a = 0;
                for (int j = 0; j < ATTN_S; j++) a += s[j] * vh[j * ATTN_D + d];
                y[(h * ATTN_S + i) * ATTN_D + d] = a / sum;
            }
        }
    }
}

/* Two residual + LayerNorm blocks as torch exports an encoder on
 * [seq, batch, dim] activations (res_*): x [RES_S, batch, RES_K] (batch
 * dynamic, profile 1 / 2 / FFN_BMAX):
 *
 *   n1 = LayerNormalization(Add(x,  Add(MatMul(x,  W1), b1)), g1, c1)
 *   y  = LayerNormalization(Add(n1, Add(MatMul(n1, W2), b2)), g2, c2)
 *
 * Each MatMul is RES_S batches of `batch` rows sharing W (one GEMM of
 * RES_S * batch rows on the GPU); each Add -> LayerNormalization one
 * kiln::add_layernorm. */
enum { RES_S = 64, RES_K = 256 };

typedef struct res_w {
    float w[2][RES_K * RES_K], b[2][RES_K], g[2][RES_K], c[2][RES_K];
} res_w;

static inline void res_weights(res_w *w, uint64_t seed) {
    for (int j = 0; j < 2; j++) {
        for (int i = 0; i < RES_K * RES_K; i++) w->w[j][i] = test_randf(&seed, -0.1f, 0.1f);
        for (int i = 0; i < RES_K; i++) {
            w->b[j][i] = test_randf(&seed, -0.5f, 0.5f);
            w->g[j][i] = test_randf(&seed, 0.5f, 1.5f);
            w->c[j][i] = test_randf(&seed, -0.5f, 0.5f);
        }
    }
}

static inline kiln_network *res_network(const res_w *w) {
    kiln_network *net = kiln_network_create();
    int64_t xd[3] = {RES_S, -1, RES_K}, wd[2] = {RES_K, RES_K}, vd[1] = {RES_K};
    const char *xn[3] = {NULL, "batch", NULL};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 3, xd, xn));
    static const char *cn[2][4] = {{"W1", "b1", "g1", "c1"}, {"W2", "b2", "g2", "c2"}};
    for (int j = 0; j < 2; j++) {
        ASSERT_OK(kiln_network_add_constant(net, cn[j][0], KILN_DTYPE_F32, 2, wd, w->w[j]));
        ASSERT_OK(kiln_network_add_constant(net, cn[j][1], KILN_DTYPE_F32, 1, vd, w->b[j]));
        ASSERT_OK(kiln_network_add_constant(net, cn[j][2], KILN_DTYPE_F32, 1, vd, w->g[j]));
        ASSERT_OK(kiln_network_add_constant(net, cn[j][3], KILN_DTYPE_F32, 1, vd, w->c[j]));
    }
    static const struct {
        const char *op, *name, *in[3], *out;
    } L[] = {
        {"MatMul", "lin1", {"x", "W1", NULL}, "h1"},   {"Add", "bias1", {"h1", "b1", NULL}, "a1"},
        {"Add", "res1", {"x", "a1", NULL}, "r1"},      {"LayerNormalization", "ln1", {"r1", "g1", "c1"}, "n1"},
        {"MatMul", "lin2", {"n1", "W2", NULL}, "h2"},  {"Add", "bias2", {"h2", "b2", NULL}, "a2"},
        {"Add", "res2", {"n1", "a2", NULL}, "r2"},     {"LayerNormalization", "ln2", {"r2", "g2", "c2"}, "y"},
    };
    for (size_t i = 0; i < sizeof L / sizeof L[0]; i++) {
        char op[64];
        snprintf(op, sizeof op, "ai.onnx::%s", L[i].op);
        int nin = L[i].in[2] ? 3 : 2;
        ASSERT(kiln_network_add_layer(net, op, 17, L[i].name, nin, L[i].in, 1, &L[i].out));
    }
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    return net;
}

/* Build config: device CUDA, flags, batch (dim 1) profile 1 / 2 / FFN_BMAX. */
static inline kiln_build_config *res_config(unsigned flags) {
    kiln_build_config *cfg = ffn_config(flags); /* (its profile of x replaced) */
    int64_t mn[3] = {RES_S, 1, RES_K}, opt[3] = {RES_S, 2, RES_K}, mx[3] = {RES_S, FFN_BMAX, RES_K};
    ASSERT_OK(kiln_build_config_set_profile(cfg, "x", 3, mn, opt, mx));
    return cfg;
}

/* y for x [rows = RES_S * batch, RES_K] in double. */
static inline void res_ref(const res_w *w, const float *x, int64_t rows, double *y) {
    double in[RES_K], r[RES_K];
    for (int64_t row = 0; row < rows; row++) {
        for (int i = 0; i < RES_K; i++) in[i] = x[row * RES_K + i];
        for (int j = 0; j < 2; j++) {
            double m = 0, v = 0;
            for (int n = 0; n < RES_K; n++) {
                double s = w->b[j][n];
                for (int k = 0; k < RES_K; k++) s += in[k] * w->w[j][k * RES_K + n];
                m += r[n] = in[n] + s;
            }
            m /= RES_K;
            for (int n = 0; n < RES_K; n++) v += (r[n] - m) * (r[n] - m);
            double rs = 1.0 / sqrt(v / RES_K + 1e-5);
            for (int n = 0; n < RES_K; n++) in[n] = (r[n] - m) * rs * w->g[j][n] + w->c[j][n];
        }
        for (int i = 0; i < RES_K; i++) y[row * RES_K + i] = in[i];
    }
}

#endif /* KILN_TEST_ENCODER_NETS_H */
