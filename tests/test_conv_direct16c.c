/*
 * test_conv_direct16c.c — Conv tactic 16: direct 2-D convs with X, Y and a
 * fused residual in NCHW16C (ops/nn/conv_direct16c.c).
 *
 * The kernel, called directly: random X, W, bias and residual; odd input
 * sizes, strides 1, 2 and 3, pads 0, 1, asymmetric and larger than the
 * kernel's reach, 1x1 / 3x3 / 5x5 / 7x7 / 1x3 / 3x1 kernels, C and M in
 * {16, 32, 48, 64, 160} (M % 32 == 16: a last block of 16 channels), with
 * and without bias, residual, Relu, both unit orders, against a naive
 * double reference on the LINEAR layout (X, Y and the residual reformatted
 * here by hand); Y poisoned with NaN first, so a lane it does not write
 * fails.  The units split as 1, 2 or 3 threads would split them give the
 * same bits (no sum depends on the split).
 *
 * Through the engine ($KILN_CPU_BLOCKED=force: blocked candidates first):
 * a 3x3 stride-2 conv, 1x1 stride-2 ones (ResNet's downsample; odd sizes:
 * the pixels gathered into the workspace), a padded 1x1, a 5x5 and a 7x7/2
 * conv, batches of two and three images, ones whose residual Add and Relu
 * fuse into it and one with a chain the kernel leaves per pixel (two
 * Relus), built with tactic 16 and
 * its reformats, give the reference at 1-3 threads, the same bits at each,
 * and the same bits after the engine is saved and loaded, its packed W read
 * from the file.  Skipped where the builder does not offer tactic 16 (not
 * an AVX-512 build).
 */
#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "kiln_int.h"
#include "ops/nn/conv_direct16c.h"
#include "ops/nn/conv_dwrows.h"
#include "test.h"
#include "test_ops_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_seed = 0xD16C2026ull;

typedef struct cshape {
    int64_t C, M, H, W, KH, KW, sh, sw, pt, pl, pb, pr;
} cshape;

static int64_t out_h(const cshape *s) { return (s->H + s->pt + s->pb - s->KH) / s->sh + 1; }
static int64_t out_w(const cshape *s) { return (s->W + s->pl + s->pr - s->KW) / s->sw + 1; }

/* y = conv(x, w) (+ bias) (+ res), Relu: LINEAR, double. */
static void reference(const cshape *s, const float *x, const float *w, const float *bias, const float *res, int relu,
                      double *y) {
    const int64_t OH = out_h(s), OW = out_w(s);
    for (int64_t m = 0; m < s->M; m++)
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++) {
                double a = bias ? bias[m] : 0.0;
                for (int64_t c = 0; c < s->C; c++)
                    for (int64_t ky = 0; ky < s->KH; ky++)
                        for (int64_t kx = 0; kx < s->KW; kx++) {
                            const int64_t iy = oy * s->sh - s->pt + ky, ix = ox * s->sw - s->pl + kx;
                            if (iy < 0 || iy >= s->H || ix < 0 || ix >= s->W) continue;
                            a += (double)w[((m * s->C + c) * s->KH + ky) * s->KW + kx] * x[(c * s->H + iy) * s->W + ix];
                        }
                const int64_t o = (m * OH + oy) * OW + ox;
                if (res) a += res[o];
                y[o] = relu && a < 0 ? 0 : a;
            }
}

static void kernel_case(const cshape *s, int bias_on, int res_on, int relu, int wmajor) {
    const int64_t OH = out_h(s), OW = out_w(s), P = s->H * s->W, OP = OH * OW, taps = s->KH * s->KW;
    const int64_t nx = s->C * P, ny = s->M * OP;
    float *x = test_rnd_f32(&g_seed, nx, -1.0f, 1.0f), *w = test_rnd_f32(&g_seed, s->M * s->C * taps, -1.0f, 1.0f);
    float *b = test_rnd_f32(&g_seed, s->M, -0.5f, 0.5f), *r = test_rnd_f32(&g_seed, ny, -1.0f, 1.0f);
    float *x16 = test_xmalloc((size_t)nx * sizeof(float)), *r16 = test_xmalloc((size_t)ny * sizeof(float));
    float *wp = test_xmalloc((size_t)kiln__d16c_packed(s->M, s->C, taps) * sizeof(float));
    float *y16 = test_xmalloc((size_t)ny * sizeof(float)), *y1 = test_xmalloc((size_t)ny * sizeof(float));
    float *y = test_xmalloc((size_t)ny * sizeof(float));
    double *ref = test_xmalloc((size_t)ny * sizeof(double));
    test_to16c(x, s->C, P, x16);
    test_to16c(r, s->M, OP, r16);
    kiln__d16c_pack(w, s->M, s->C, taps, wp);
    reference(s, x, w, bias_on ? b : NULL, res_on ? r : NULL, relu, ref);
    kiln__d16c p = {.C = s->C, .M = s->M, .H = s->H, .W = s->W, .OH = OH, .OW = OW, .KH = s->KH, .KW = s->KW,
                    .sh = s->sh, .sw = s->sw, .pt = s->pt, .pl = s->pl, .x = x16, .wp = wp,
                    .bias = bias_on ? b : NULL, .res = res_on ? r16 : NULL, .y = y16, .relu = relu, .wmajor = wmajor};
    const int64_t units = kiln__d16c_units(&p);
    for (int threads = 1; threads <= 3; threads++) {
        for (int64_t i = 0; i < ny; i++) y16[i] = NAN;
        for (int t = 0; t < threads; t++) /* the chunks parallel_for would hand out */
            kiln__d16c_run(&p, units * t / threads, units * (t + 1) / threads);
        test_from16c(y16, s->M, OP, y);
        char what[200];
        snprintf(what, sizeof what,
                 "C %lld M %lld %lldx%lld k %lldx%lld s %lld,%lld pads %lld,%lld,%lld,%lld bias %d res %d relu %d "
                 "wmajor %d, %d chunk(s)",
                 (long long)s->C, (long long)s->M, (long long)s->H, (long long)s->W, (long long)s->KH,
                 (long long)s->KW, (long long)s->sh, (long long)s->sw, (long long)s->pt, (long long)s->pl,
                 (long long)s->pb, (long long)s->pr, bias_on, res_on, relu, wmajor, threads);
        test_check_close(what, y, ref, ny, 1e-5 * (double)(s->C * taps));
        if (threads == 1) memcpy(y1, y16, (size_t)ny * sizeof(float));
        else if (memcmp(y1, y16, (size_t)ny * sizeof(float))) TEST__FAIL("%s: not the bits of 1 chunk", what);
    }
    free(x), free(w), free(b), free(r), free(x16), free(r16), free(wp), free(y16), free(y1), free(y), free(ref);
}

TEST_IMPL(conv_direct16c_kernel) {
    static const cshape S[] = {
        /* C, M, H, W, KH, KW, sh, sw, pt, pl, pb, pr */
        {16, 16, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1},       {32, 48, 15, 13, 3, 3, 2, 2, 1, 1, 1, 1},
        {48, 32, 14, 14, 3, 3, 2, 2, 1, 1, 1, 1},     {64, 160, 9, 11, 3, 3, 1, 1, 1, 1, 1, 1},
        {160, 64, 13, 29, 3, 3, 2, 2, 1, 1, 1, 1},    {64, 64, 27, 31, 3, 3, 1, 1, 1, 1, 1, 1},
        {32, 64, 15, 15, 1, 1, 2, 2, 0, 0, 0, 0},     {64, 160, 14, 14, 1, 1, 2, 2, 0, 0, 0, 0},
        {16, 32, 9, 9, 1, 1, 1, 1, 1, 1, 1, 1},       {48, 16, 11, 13, 5, 5, 1, 1, 2, 2, 2, 2},
        {32, 32, 17, 19, 5, 5, 2, 2, 2, 2, 2, 2},     {16, 48, 21, 23, 7, 7, 2, 2, 3, 3, 3, 3},
        {32, 16, 9, 10, 7, 7, 1, 1, 3, 3, 3, 3},      {16, 32, 8, 9, 3, 3, 1, 2, 0, 1, 2, 0},
        {32, 48, 10, 11, 3, 3, 2, 1, 2, 0, 0, 2},     {16, 16, 5, 4, 3, 3, 1, 1, 3, 3, 3, 3},
        {48, 32, 11, 25, 3, 3, 3, 3, 1, 1, 1, 1},     {16, 64, 6, 30, 1, 3, 1, 1, 0, 1, 0, 1},
        {32, 16, 12, 7, 3, 1, 1, 1, 1, 0, 1, 0},      {64, 32, 56, 56, 3, 3, 2, 2, 1, 1, 1, 1},
        {16, 16, 3, 3, 7, 7, 1, 1, 3, 3, 3, 3},       {32, 32, 1, 40, 1, 5, 1, 2, 0, 2, 0, 2},
    };
    for (size_t i = 0; i < sizeof S / sizeof S[0]; i++) kernel_case(&S[i], i % 2, i / 2 % 2, i / 4 % 2, i / 8 % 2);
    /* every epilogue combination on one odd strided shape, both unit orders */
    const cshape odd = {48, 48, 13, 11, 3, 3, 2, 2, 1, 1, 1, 1};
    for (int v = 0; v < 16; v++) kernel_case(&odd, v & 1, v >> 1 & 1, v >> 2 & 1, v >> 3 & 1);
}

/* ---- through the engine --------------------------------------------------- */

/* Y = conv(X) (+ bias); res 1: Y = Relu(conv(X) + bias + Relu(R0)), the
 * residual's Relu before the conv, so the residual Add and the last Relu
 * fuse into it (NCHW16C throughout); res 2: Y = Relu(Relu(conv(X))). */
static void engine_case(const cshape *s, int64_t N, int with_bias, int res) {
    const int64_t OH = out_h(s), OW = out_w(s), taps = s->KH * s->KW, nx1 = s->C * s->H * s->W, ny1 = s->M * OH * OW;
    const int64_t nx = N * nx1, ny = N * ny1;
    float *x = test_rnd_f32(&g_seed, nx, -1.0f, 1.0f), *w = test_rnd_f32(&g_seed, s->M * s->C * taps, -1.0f, 1.0f);
    float *b = test_rnd_f32(&g_seed, s->M, -0.5f, 0.5f), *y = test_xmalloc((size_t)ny * sizeof(float));
    float *r0 = test_rnd_f32(&g_seed, ny, -1.0f, 1.0f), *r = test_xmalloc((size_t)ny * sizeof(float));
    float *y1 = test_xmalloc((size_t)ny * sizeof(float));
    double *ref = test_xmalloc((size_t)ny * sizeof(double));
    for (int64_t i = 0; i < ny; i++) r[i] = r0[i] > 0 ? r0[i] : 0.0f;
    for (int64_t n = 0; n < N; n++)
        reference(s, x + n * nx1, w, with_bias ? b : NULL, res == 1 ? r + n * ny1 : NULL, res != 0, ref + n * ny1);

    kiln_network *net = kiln_network_create();
    ASSERT(net);
    int64_t xd[4] = {N, s->C, s->H, s->W}, yd[4] = {N, s->M, OH, OW}, wd[4] = {s->M, s->C, s->KH, s->KW};
    int64_t bd[1] = {s->M}, pads[4] = {s->pt, s->pl, s->pb, s->pr}, strides[2] = {s->sh, s->sw};
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL));
    if (res == 1) {
        ASSERT_OK(kiln_network_add_input(net, "R0", KILN_DTYPE_F32, 4, yd, NULL));
        const char *ri[1] = {"R0"}, *ro[1] = {"R"};
        ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 14, "relu0", 1, ri, 1, ro));
    }
    ASSERT_OK(kiln_network_add_constant(net, "W", KILN_DTYPE_F32, 4, wd, w));
    ASSERT_OK(kiln_network_add_constant(net, "B", KILN_DTYPE_F32, 1, bd, b));
    const char *cin[3] = {"X", "W", "B"}, *cout[1] = {res ? "c" : "Y"};
    kiln_layer *conv_l = kiln_network_add_layer(net, "ai.onnx::Conv", 11, "conv", with_bias ? 3 : 2, cin, 1, cout);
    ASSERT(conv_l);
    ASSERT_OK(kiln_layer_set_ints(conv_l, "pads", pads, 4));
    ASSERT_OK(kiln_layer_set_ints(conv_l, "strides", strides, 2));
    if (res) { /* 1: + R, Relu; 2: Relu, Relu (a chain the kernel leaves to kiln_call_epilogue) */
        const char *ai[2] = {"c", "R"}, *ao[1] = {"a"}, *ri[1] = {"a"}, *ro[1] = {"Y"};
        if (res == 1) ASSERT(kiln_network_add_layer(net, "ai.onnx::Add", 14, "add", 2, ai, 1, ao));
        else ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 14, "relu1", 1, (const char *[1]){"c"}, 1, ao));
        ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 14, "relu", 1, ri, 1, ro));
    }
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_engine *e = test_build_forced16c(net, 0, 2, NULL);
    kiln_network_free(net);

    /* reformats of X (and R0) to NCHW16C and of Y back to LINEAR; the
     * residual Add and the Relu fused into the conv */
    const int conv = test_last_op(e, "Conv"), reformats = test_count_op(e, "reformat");
    ASSERT(conv >= 0);
    ASSERT_EQ(e->layers[conv].tactic, 16);
    ASSERT_EQ(reformats, (res == 1 ? 3 : 2));
    ASSERT_EQ(e->layers[conv].nepi, (res ? 2 : 0));
    /* res 1: Y's NCHW16C variant written over R (read by the conv alone) */
    ASSERT_EQ(e->tensors[e->layers[conv].out[0]].alias_of, (res == 1 ? e->layers[conv].in[3] : -1));
    ASSERT(e->layers[conv].prepacked && e->layers[conv].prepacked[1]);
    ASSERT_EQ(e->layers[conv].prepacked_size[1], (uint64_t)(s->M * s->C * taps) * sizeof(float));
    char what[160];
    for (int round = 0; round < 2; round++) {
        kiln_engine *e2 = round ? test_roundtrip(e) : e;
        if (round) { /* the packed W comes from the file */
            ASSERT_EQ(e2->layers[conv].tactic, 16);
            ASSERT(e2->layers[conv].prepacked_stored >> 1 & 1);
        }
        for (int threads = 1; threads <= 3; threads++) {
            kiln_context *ctx;
            ASSERT_OK(kiln_context_create(e2, threads, &ctx));
            kiln_context_set_debug(ctx, 1);
            ASSERT_OK(kiln_context_bind(ctx, "X", x, (size_t)nx * sizeof(float)));
            if (res == 1) ASSERT_OK(kiln_context_bind(ctx, "R0", r0, (size_t)ny * sizeof(float)));
            for (int64_t i = 0; i < ny; i++) y[i] = NAN;
            ASSERT_OK(kiln_context_bind(ctx, "Y", y, (size_t)ny * sizeof(float)));
            if (kiln_context_run(ctx)) TEST__FAIL("run: %s", kiln_errmsg());
            kiln_context_free(ctx);
            snprintf(what, sizeof what,
                     "engine C %lld M %lld %lldx%lld k %lldx%lld s %lld bias %d res %d, %d thread(s)%s",
                     (long long)s->C, (long long)s->M, (long long)s->H, (long long)s->W, (long long)s->KH,
                     (long long)s->KW, (long long)s->sh, with_bias, res, threads, round ? ", loaded" : "");
            test_check_close(what, y, ref, ny, 1e-5 * (double)(s->C * taps));
            if (threads == 1 && !round) memcpy(y1, y, (size_t)ny * sizeof(float));
            else if (memcmp(y1, y, (size_t)ny * sizeof(float))) TEST__FAIL("%s: not the bits of 1 thread", what);
        }
        if (round) kiln_engine_free(e2);
    }
    kiln_engine_free(e);
    free(x), free(w), free(b), free(y), free(r0), free(r), free(y1), free(ref);
}

TEST_IMPL(conv_direct16c_engine) {
    if (!kiln__dwrows_fits(1, 3)) { /* the builder offers tactic 16 on AVX-512 builds only */
        fprintf(stderr, "skipped: not an AVX-512 build (the kernel alone is checked above)\n");
        return;
    }
    static const cshape S[] = {
        {32, 64, 15, 13, 3, 3, 2, 2, 1, 1, 1, 1}, /* ResNet's 3x3/2 */
        {64, 128, 14, 14, 1, 1, 2, 2, 0, 0, 0, 0}, /* its downsample */
        {48, 32, 11, 9, 5, 5, 1, 1, 2, 2, 2, 2},
        {16, 48, 19, 17, 7, 7, 2, 2, 3, 3, 3, 3},
        {48, 32, 15, 13, 1, 1, 2, 2, 0, 0, 0, 0}, /* odd: the gathered pixels, 8 x 7 */
        {32, 16, 9, 7, 1, 1, 1, 1, 1, 1, 1, 1},   /* a padded 1x1: edge pixels see no tap */
    };
    engine_case(&S[0], 1, 1, 0);
    engine_case(&S[1], 1, 0, 0);
    engine_case(&S[2], 1, 1, 0);
    engine_case(&S[3], 1, 1, 0);
    engine_case(&S[0], 2, 1, 1); /* two images: the units run over both */
    engine_case(&S[1], 1, 1, 2);
    engine_case(&S[4], 3, 1, 1); /* three images gathered */
    engine_case(&S[5], 1, 0, 1);
}

TEST_LIST(TEST_ENTRY(conv_direct16c_kernel), TEST_ENTRY(conv_direct16c_engine))
