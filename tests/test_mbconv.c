/*
 * test_mbconv.c — kiln::mbconv, the inverted-residual block the builder
 * makes of [1x1 Conv -> Clip/Relu ->] depthwise Conv -> Clip/Relu -> 1x1
 * Conv [-> Add X] (builder/mbconv_fuse.c, ops/nn/mbconv.c), against a
 * naive double reference written here.  The network is built once without
 * timing; it must come out as one kiln::mbconv layer (with the residual
 * Add fused); tactics 1 (whole tensors), 2 (row bands) and 3 (row bands,
 * the expand conv by conv_fewc.c's pointwise kernel: offered where its
 * input has at most 64 channels, refused elsewhere) and 4 (whole tensors
 * channels-last: offered where the 1x1 expand conv's input has at most 1024
 * pixels and the output at most 64, refused elsewhere) are then forced
 * on it and run with the output poisoned, in debug mode (every element
 * written) and not, at 1 and 2 threads.  Odd sizes: channel counts off the
 * vector width, planes of 1 to 57 rows (one band and many), strides 1 and
 * 2, asymmetric pads, a 5x5 kernel, dilation, 2 images, with and without
 * the expand conv, ReLU6 / Relu / no activation, dynamic height and width
 * (one engine run at several sizes).  Tactic 5 (NCHW16C) through a build
 * that forces blocked layouts (mbconv_16c).  Chains the block cannot
 * take (an intermediate read elsewhere) stay separate layers; a block
 * written by hand with inconsistent operands fails with a clear message.
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

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

static uint64_t g_seed = 0x3B0C0A7E5EED0015ull;

enum { ACT_NONE, ACT_RELU, ACT_RELU6 };

typedef struct mbcase {
    int64_t N, C, Ce, M, H, W, k, sy, sx, d, pt, pl, pb, pr;
    int expand, act, residual;
    int pre_relu; /* X first through a Relu (the block's input then made by a layer) */
    /* a dense expand conv (a stem): kernel ek x ek (0: the 1x1 one),
     * strides, pads (top, left, bottom, right) */
    int64_t ek, esy, esx, ep[4];
} mbcase;

/* E's height and width. */
static void e_dims(const mbcase *t, int64_t *EH, int64_t *EW) {
    *EH = t->ek ? (t->H + t->ep[0] + t->ep[2] - t->ek) / t->esy + 1 : t->H;
    *EW = t->ek ? (t->W + t->ep[1] + t->ep[3] - t->ek) / t->esx + 1 : t->W;
}

static double act(int a, double v) {
    if (a != ACT_NONE && v < 0) v = 0;
    if (a == ACT_RELU6 && v > 6) v = 6;
    return v;
}

/* The block in double, channel-major like the tensors. */
static void reference(const mbcase *t, int64_t OH, int64_t OW, const float *x, const float *we, const float *be,
                      const float *wd, const float *bd, const float *wp, const float *bp, double *y) {
    int64_t EH, EW;
    e_dims(t, &EH, &EW);
    const int64_t xsp = t->H * t->W, isp = EH * EW, osp = OH * OW, ek = t->ek ? t->ek : 1;
    double *e = test_xmalloc((size_t)(t->Ce * isp) * sizeof *e), *dd = test_xmalloc((size_t)(t->Ce * osp) * sizeof *dd);
    for (int64_t n = 0; n < t->N; n++) {
        const float *xn = x + n * t->C * xsp;
        for (int64_t c = 0; c < t->Ce; c++)
            for (int64_t i = 0; i < isp; i++) {
                if (!t->expand) {
                    e[c * isp + i] = xn[c * isp + i];
                    continue;
                }
                double s = be[c];
                for (int64_t k = 0; k < t->C; k++)
                    for (int64_t ky = 0; ky < ek; ky++)
                        for (int64_t kx = 0; kx < ek; kx++) {
                            int64_t iy = i / EW, ix = i % EW;
                            if (t->ek) {
                                iy = iy * t->esy - t->ep[0] + ky;
                                ix = ix * t->esx - t->ep[1] + kx;
                            }
                            if (iy >= 0 && iy < t->H && ix >= 0 && ix < t->W)
                                s += (double)we[((c * t->C + k) * ek + ky) * ek + kx] * xn[k * xsp + iy * t->W + ix];
                        }
                e[c * isp + i] = act(t->act, s);
            }
        for (int64_t c = 0; c < t->Ce; c++)
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    double s = bd[c];
                    for (int64_t ky = 0; ky < t->k; ky++)
                        for (int64_t kx = 0; kx < t->k; kx++) {
                            int64_t iy = oy * t->sy - t->pt + ky * t->d, ix = ox * t->sx - t->pl + kx * t->d;
                            if (iy >= 0 && iy < EH && ix >= 0 && ix < EW)
                                s += e[c * isp + iy * EW + ix] * wd[(c * t->k + ky) * t->k + kx];
                        }
                    dd[c * osp + oy * OW + ox] = act(t->act, s);
                }
        for (int64_t m = 0; m < t->M; m++)
            for (int64_t i = 0; i < osp; i++) {
                double s = bp[m];
                for (int64_t c = 0; c < t->Ce; c++) s += (double)wp[m * t->Ce + c] * dd[c * osp + i];
                if (t->residual) s += xn[m * isp + i];
                y[(n * t->M + m) * osp + i] = s;
            }
    }
    free(e);
    free(dd);
}

/* A 1x1 conv or the depthwise one: layer `name` from `in` to `out`. */
static void add_conv(kiln_network *net, const char *name, const char *in, const char *w, const char *b,
                     const char *out, int64_t group, const int64_t *s, const int64_t *p, int64_t d) {
    const char *ci[3] = {in, w, b}, *co[1] = {out};
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::Conv", 11, name, 3, ci, 1, co);
    if (!l) TEST__FAIL("add_layer Conv: %s", kiln_errmsg());
    int64_t one[2] = {1, 1}, zero[4] = {0, 0, 0, 0}, dil[2] = {d, d};
    ASSERT_OK(kiln_layer_set_ints(l, "strides", s ? s : one, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "pads", p ? p : zero, 4));
    ASSERT_OK(kiln_layer_set_ints(l, "dilations", s ? dil : one, 2));
    ASSERT_OK(kiln_layer_set_int(l, "group", group));
}

static void add_act(kiln_network *net, int a, const char *name, const char *in, const char *out) {
    if (a == ACT_RELU) {
        const char *ri[1] = {in}, *ro[1] = {out};
        ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 14, name, 1, ri, 1, ro));
    } else {
        const char *ci[3] = {in, "zero", "six"}, *co[1] = {out};
        ASSERT(kiln_network_add_layer(net, "ai.onnx::Clip", 13, name, a == ACT_RELU6 ? 3 : 1, ci, 1, co));
    }
}

/* build()'s flags: timed builds only where a test checks the builder's
 * candidates (mbconv_candidates). */
static unsigned g_build_flags = KILN_BUILD_NO_TIMING;

/* Builds the chain; `leak`: also mark the depthwise conv's output as a
 * network output (then it must not fuse); `hw` (or NULL): X's height and
 * width are dynamic, profile min/opt/max hw[0..2] x hw[3..5].  Returns the
 * engine. */
static kiln_engine *build(const mbcase *t, int threads, int leak, const int64_t *hw, const float *we,
                          const float *be, const float *wd, const float *bd, const float *wp, const float *bp,
                          kiln_build_stats *st) {
    kiln_network *net = kiln_network_create();
    ASSERT(net);
    int64_t ek = t->ek ? t->ek : 1, xd[4] = {t->N, t->C, hw ? -1 : t->H, hw ? -1 : t->W}, wed[4] = {t->Ce, t->C, ek, ek};
    int64_t wdd[4] = {t->Ce, 1, t->k, t->k}, wpd[4] = {t->M, t->Ce, 1, 1}, ced[1] = {t->Ce}, md[1] = {t->M};
    const char *names[4] = {NULL, NULL, "H", "W"};
    float zero = 0.0f, six = 6.0f;
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, hw ? names : NULL));
    ASSERT_OK(kiln_network_add_constant(net, "zero", KILN_DTYPE_F32, 0, NULL, &zero));
    ASSERT_OK(kiln_network_add_constant(net, "six", KILN_DTYPE_F32, 0, NULL, &six));
    ASSERT_OK(kiln_network_add_constant(net, "Wd", KILN_DTYPE_F32, 4, wdd, wd));
    ASSERT_OK(kiln_network_add_constant(net, "Bd", KILN_DTYPE_F32, 1, ced, bd));
    ASSERT_OK(kiln_network_add_constant(net, "Wp", KILN_DTYPE_F32, 4, wpd, wp));
    ASSERT_OK(kiln_network_add_constant(net, "Bp", KILN_DTYPE_F32, 1, md, bp));
    const char *x = "X", *e = "X";
    if (t->pre_relu) {
        add_act(net, ACT_RELU, "pre", "X", "X1");
        x = e = "X1";
    }
    if (t->expand) {
        ASSERT_OK(kiln_network_add_constant(net, "We", KILN_DTYPE_F32, 4, wed, we));
        ASSERT_OK(kiln_network_add_constant(net, "Be", KILN_DTYPE_F32, 1, ced, be));
        int64_t es[2] = {t->esy, t->esx};
        add_conv(net, "expand", x, "We", "Be", t->act == ACT_NONE ? "E" : "e", 1, t->ek ? es : NULL,
                 t->ek ? t->ep : NULL, 1);
        if (t->act != ACT_NONE) add_act(net, t->act, "act_e", "e", "E");
        e = "E";
    }
    int64_t s[2] = {t->sy, t->sx}, p[4] = {t->pt, t->pl, t->pb, t->pr};
    add_conv(net, "dw", e, "Wd", "Bd", t->act == ACT_NONE ? "D" : "d", t->Ce, s, p, t->d);
    if (t->act != ACT_NONE) add_act(net, t->act, "act_d", "d", "D");
    add_conv(net, "project", "D", "Wp", "Bp", t->residual ? "P" : "Y", 1, NULL, NULL, 1);
    if (t->residual) {
        const char *ai[2] = {"P", x}, *ao[1] = {"Y"};
        ASSERT(kiln_network_add_layer(net, "ai.onnx::Add", 14, "add", 2, ai, 1, ao));
    }
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    if (leak) ASSERT_OK(kiln_network_mark_output(net, "D"));
    kiln_build_config *cfg = test_build_config(g_build_flags, threads);
    if (hw) {
        int64_t mn[4] = {t->N, t->C, hw[0], hw[3]}, opt[4] = {t->N, t->C, hw[1], hw[4]}, mx[4] = {t->N, t->C, hw[2], hw[5]};
        ASSERT_OK(kiln_build_config_set_profile(cfg, "X", 4, mn, opt, mx));
    }
    kiln_engine *eng = NULL;
    if (kiln_build(net, cfg, &eng, st)) TEST__FAIL("build: %s", kiln_errmsg());
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    return eng;
}

/* The block needs the depthwise rows kernel (an AVX-512 build). */
static int skip(void) {
    if (kiln__dwrows_fits(1, 3)) return 0;
    printf("  skipped: no AVX-512 in this build, the builder makes no kiln::mbconv\n");
    return 1;
}

static void run_case(const mbcase *t, int threads) {
    int64_t EH, EW;
    e_dims(t, &EH, &EW);
    const int64_t OH = (EH + t->pt + t->pb - t->d * (t->k - 1) - 1) / t->sy + 1;
    const int64_t OW = (EW + t->pl + t->pr - t->d * (t->k - 1) - 1) / t->sx + 1;
    ASSERT(OH >= 1 && OW >= 1 && (t->expand || t->C == t->Ce) && (!t->residual || (t->M == t->C && OH == t->H && OW == t->W)));
    const int64_t nx = t->N * t->C * t->H * t->W, ny = t->N * t->M * OH * OW;
    float *x = test_rnd_f32(&g_seed, nx, -1.0f, 1.0f);
    const int64_t nwe = t->Ce * t->C * (t->ek ? t->ek * t->ek : 1);
    float *we = test_rnd_f32(&g_seed, nwe, -0.8f, 0.8f), *be = test_rnd_f32(&g_seed, t->Ce, -0.5f, 0.5f);
    float *wd = test_rnd_f32(&g_seed, t->Ce * t->k * t->k, -1.0f, 1.0f), *bd = test_rnd_f32(&g_seed, t->Ce, -0.5f, 0.5f);
    float *wp = test_rnd_f32(&g_seed, t->M * t->Ce, -0.5f, 0.5f), *bp = test_rnd_f32(&g_seed, t->M, -0.5f, 0.5f);
    /* scale the expand weights so ReLU6 clamps some values above 6 too */
    for (int64_t i = 0; i < nwe; i++) we[i] *= 6.0f;
    float *y = test_xmalloc((size_t)ny * sizeof(float));
    double *ref = test_xmalloc((size_t)ny * sizeof(double));
    reference(t, OH, OW, x, we, be, wd, bd, wp, bp, ref);

    kiln_build_stats st;
    kiln_engine *e = build(t, threads, 0, NULL, we, be, wd, bd, wp, bp, &st);
    ASSERT_EQ(st.layers, 1);
    ASSERT_STR_EQ(e->layers[0].op_name, "mbconv");
    char what[240];
    /* 3: a 1x1 expand conv of at most 64 channels; 4: one over at most 1024 pixels, 64 out */
    const int t3 = t->expand && !t->ek && t->C <= 64, t4 = t->expand && !t->ek && t->H * t->W <= 1024 && OH * OW <= 64;
    /* a build without timing takes the first candidate: where the block
     * has an expand conv (1x1 or a stem) builds leave tactic 1 out, so that
     * is tactic 2, but where tactic 4 would compete with it (expand of more
     * than 64 channels) they offer one, tactic 1 at stride 1, 2 at stride 2
     * (and below, an engine with any offered tactic still loads and runs) */
    const int first = t->expand && !(t4 && t->C > 64 && t->sy == 1 && t->sx == 1) ? 2 : 1;
    ASSERT_EQ(e->layers[0].tactic, first);
    for (int tactic = 0; tactic <= 4; tactic++) {
        int offered = tactic < 3 || (tactic == 3 ? t3 : t4);
        if (!offered) { /* an engine with it is refused */
            ASSERT(test_force_tactic(e, 0, tactic) != 0);
            continue;
        }
        if (tactic) ASSERT_OK(test_force_tactic(e, 0, tactic));
        for (int debug = 0; debug <= 1; debug++) {
            test_run_xy(e, threads, debug, x, nx, y, ny, tactic);
            snprintf(what, sizeof what,
                     "mbconv N=%lld C=%lld Ce=%lld M=%lld %lldx%lld k=%lld s=%lld,%lld d=%lld p=%lld,%lld,%lld,%lld "
                     "expand=%d act=%d residual=%d threads=%d tactic %d debug %d",
                     (long long)t->N, (long long)t->C, (long long)t->Ce, (long long)t->M, (long long)t->H,
                     (long long)t->W, (long long)t->k, (long long)t->sy, (long long)t->sx, (long long)t->d,
                     (long long)t->pt, (long long)t->pl, (long long)t->pb, (long long)t->pr, t->expand, t->act,
                     t->residual, threads, tactic, debug);
            test_check_close(what, y, ref, ny, 2e-4 * (double)(t->C + t->Ce));
        }
    }
    kiln_engine_free(e);
    free(x); free(we); free(be); free(wd); free(bd); free(wp); free(bp); free(y); free(ref);
}

/* MobileNetV2's shapes, scaled down: expand 6x, 3x3 depthwise at strides 1
 * and 2, ReLU6, residual where the block keeps its shape. */
TEST_IMPL(mobilenet_blocks) {
    if (skip()) return;
    static const int64_t sizes[][2] = {{1, 1}, {2, 3}, {7, 7}, {14, 14}, {29, 31}, {57, 56}};
    int i = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (int64_t st = 1; st <= 2; st++, i++) {
            int64_t C = 3 + 5 * (i % 4);
            mbcase t = {.N = 1 + (i % 3 == 1), .C = C, .Ce = 6 * C, .M = st == 1 && i % 2 ? C : 7 + i, .H = sizes[si][0],
                        .W = sizes[si][1], .k = 3, .sy = st, .sx = st, .d = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1,
                        .expand = 1, .act = ACT_RELU6};
            t.residual = st == 1 && t.M == C;
            run_case(&t, 1);
            run_case(&t, 2);
        }
    /* MobileNetV2's features.5: E and D of the whole 28x28 plane take 1.25 MB,
     * one band at 1 thread (WHOLE_BAND, mbconv.c), two at 2 */
    mbcase t = {.N = 1, .C = 32, .Ce = 192, .M = 32, .H = 28, .W = 28, .k = 3, .sy = 1, .sx = 1, .d = 1, .pt = 1,
                .pl = 1, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU6, .residual = 1};
    run_case(&t, 1);
    run_case(&t, 2);
}

/* No expand conv (MobileNetV2's first block), Relu and no activation,
 * asymmetric pads, a 5x5 kernel, dilation 2, mixed strides, wide planes
 * (several bands at the 1 MB band budget). */
TEST_IMPL(mbconv_general) {
    if (skip()) return;
    mbcase cases[] = {
        {.N = 1, .C = 32, .Ce = 32, .M = 16, .H = 40, .W = 41, .k = 3, .sy = 1, .sx = 1, .d = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .act = ACT_RELU6},
        {.N = 2, .C = 5, .Ce = 17, .M = 5, .H = 9, .W = 12, .k = 3, .sy = 1, .sx = 1, .d = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU, .residual = 1},
        {.N = 1, .C = 4, .Ce = 9, .M = 6, .H = 13, .W = 10, .k = 5, .sy = 2, .sx = 2, .d = 1, .pt = 2, .pl = 1, .pb = 0, .pr = 2, .expand = 1, .act = ACT_NONE},
        {.N = 1, .C = 6, .Ce = 20, .M = 70, .H = 16, .W = 15, .k = 3, .sy = 2, .sx = 1, .d = 2, .pt = 2, .pl = 2, .pb = 2, .pr = 2, .expand = 1, .act = ACT_RELU6},
        {.N = 2, .C = 8, .Ce = 40, .M = 8, .H = 6, .W = 7, .k = 3, .sy = 1, .sx = 1, .d = 2, .pt = 2, .pl = 2, .pb = 2, .pr = 2, .expand = 1, .act = ACT_RELU6, .residual = 1},
        {.N = 1, .C = 20, .Ce = 100, .M = 30, .H = 14, .W = 13, .k = 3, .sy = 2, .sx = 2, .d = 1, .pt = 1, .pl = 0, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU},
        {.N = 1, .C = 24, .Ce = 144, .M = 24, .H = 56, .W = 56, .k = 3, .sy = 1, .sx = 1, .d = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU6, .residual = 1},
        {.N = 1, .C = 16, .Ce = 96, .M = 24, .H = 112, .W = 112, .k = 3, .sy = 2, .sx = 2, .d = 1, .pt = 0, .pl = 0, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU6},
        /* expands of more than 64 input channels: over a small plane (tactic 4 offered) tactic 1 stays the
         * first candidate, over a larger one it does not */
        {.N = 1, .C = 67, .Ce = 130, .M = 67, .H = 7, .W = 6, .k = 3, .sy = 1, .sx = 1, .d = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU6, .residual = 1},
        {.N = 1, .C = 67, .Ce = 130, .M = 67, .H = 11, .W = 9, .k = 3, .sy = 1, .sx = 1, .d = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU6, .residual = 1},
        /* tactic 4 (channels-last): expanded channels off the vector width over 2 images, a 5x5 kernel,
         * 260 input channels (more than the SGEMM's K block) */
        {.N = 2, .C = 40, .Ce = 111, .M = 37, .H = 7, .W = 8, .k = 3, .sy = 1, .sx = 1, .d = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU6},
        {.N = 1, .C = 9, .Ce = 24, .M = 9, .H = 5, .W = 5, .k = 5, .sy = 1, .sx = 1, .d = 1, .pt = 2, .pl = 2, .pb = 2, .pr = 2, .expand = 1, .act = ACT_RELU, .residual = 1},
        {.N = 1, .C = 260, .Ce = 70, .M = 33, .H = 4, .W = 6, .k = 3, .sy = 2, .sx = 2, .d = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU6},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_case(&cases[i], 1);
        run_case(&cases[i], 2);
    }
}

/* A stem conv (a dense conv of at most 4 input channels) -> act in front
 * of a block without expand conv: MobileNetV2's first two layers scaled
 * down, and odd ones: 1 to 4 input channels, expanded channels off the
 * 16-channel blocks, kernels 2 to 7, strides 1 to 3 and mixed, asymmetric
 * pads, planes down to 3 x 3. */
TEST_IMPL(mbconv_stem) {
    if (skip()) return;
    mbcase cases[] = {
        {.N = 1, .C = 3, .Ce = 32, .M = 16, .H = 45, .W = 46, .k = 3, .sy = 1, .sx = 1, .d = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU6, .ek = 3, .esy = 2, .esx = 2, .ep = {1, 1, 1, 1}},
        {.N = 2, .C = 1, .Ce = 20, .M = 7, .H = 17, .W = 33, .k = 3, .sy = 2, .sx = 2, .d = 1, .pt = 1, .pl = 0, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU, .ek = 5, .esy = 1, .esx = 2, .ep = {2, 1, 0, 2}},
        {.N = 1, .C = 4, .Ce = 16, .M = 5, .H = 30, .W = 29, .k = 5, .sy = 1, .sx = 1, .d = 1, .pt = 2, .pl = 2, .pb = 2, .pr = 2, .expand = 1, .act = ACT_NONE, .ek = 7, .esy = 3, .esx = 3, .ep = {3, 3, 3, 3}},
        {.N = 1, .C = 2, .Ce = 33, .M = 12, .H = 8, .W = 40, .k = 3, .sy = 1, .sx = 2, .d = 2, .pt = 2, .pl = 2, .pb = 2, .pr = 2, .expand = 1, .act = ACT_RELU6, .ek = 2, .esy = 2, .esx = 1},
        {.N = 1, .C = 3, .Ce = 8, .M = 4, .H = 3, .W = 3, .k = 3, .sy = 1, .sx = 1, .d = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU6, .ek = 3, .esy = 2, .esx = 2, .ep = {1, 1, 1, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_case(&cases[i], 1);
        run_case(&cases[i], 2);
    }
}

/* 3 threads: the row bands are split into one contiguous share per thread
 * (bands_task in mbconv.c), so band counts that 3 does not divide (a band
 * per output row, 2 images, one band) leave threads uneven or idle. */
TEST_IMPL(mbconv_three_threads) {
    if (skip()) return;
    mbcase cases[] = {
        {.N = 1, .C = 16, .Ce = 96, .M = 24, .H = 112, .W = 112, .k = 3, .sy = 2, .sx = 2, .d = 1, .pt = 0, .pl = 0, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU6},
        {.N = 2, .C = 5, .Ce = 17, .M = 5, .H = 9, .W = 12, .k = 3, .sy = 1, .sx = 1, .d = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU, .residual = 1},
        {.N = 1, .C = 32, .Ce = 32, .M = 16, .H = 40, .W = 41, .k = 3, .sy = 1, .sx = 1, .d = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .act = ACT_RELU6},
        {.N = 1, .C = 3, .Ce = 18, .M = 7, .H = 2, .W = 3, .k = 3, .sy = 1, .sx = 1, .d = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU6},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], 3);
}

/* An intermediate the chain does not own (here a network output) keeps
 * the convs as separate layers, and their results are still right. */
TEST_IMPL(mbconv_not_fused) {
    mbcase t = {.N = 1, .C = 4, .Ce = 12, .M = 5, .H = 6, .W = 7, .k = 3, .sy = 1, .sx = 1, .d = 1, .pt = 1, .pl = 1,
                .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU6};
    float *we = test_rnd_f32(&g_seed, 48, -1, 1), *be = test_rnd_f32(&g_seed, 12, -1, 1);
    float *wd = test_rnd_f32(&g_seed, 108, -1, 1), *bd = test_rnd_f32(&g_seed, 12, -1, 1);
    float *wp = test_rnd_f32(&g_seed, 60, -1, 1), *bp = test_rnd_f32(&g_seed, 5, -1, 1);
    kiln_build_stats st;
    kiln_engine *e = build(&t, 1, 1, NULL, we, be, wd, bd, wp, bp, &st);
    ASSERT_EQ(st.layers, 3); /* expand + act, dw + act, project */
    for (int32_t l = 0; l < e->nlayers; l++) ASSERT_STR_EQ(e->layers[l].op_name, "Conv");
    kiln_engine_free(e);
    free(we); free(be); free(wd); free(bd); free(wp); free(bp);
}

/* A block's weights for the dynamic-shape runs (the expand's scaled so
 * ReLU6 clamps above 6 too). */
typedef struct mbw {
    float *we, *be, *wd, *bd, *wp, *bp;
} mbw;
static mbw mbw_rnd(const mbcase *t) {
    mbw w = {test_rnd_f32(&g_seed, t->Ce * t->C, -3, 3), test_rnd_f32(&g_seed, t->Ce, -0.5f, 0.5f),
             test_rnd_f32(&g_seed, t->Ce * 9, -1, 1), test_rnd_f32(&g_seed, t->Ce, -0.5f, 0.5f),
             test_rnd_f32(&g_seed, t->M * t->Ce, -0.5f, 0.5f), test_rnd_f32(&g_seed, t->M, -0.5f, 0.5f)};
    return w;
}
static void mbw_free(mbw *w) { free(w->we); free(w->be); free(w->wd); free(w->bd); free(w->wp); free(w->bp); }

/* Runs ctx (an engine of block t with a dynamic X) at each of the ns
 * sizes, X drawn from [x_lo, 1), Y poisoned, against the reference;
 * `label` names the run in a failure. */
static void run_sizes(kiln_context *ctx, mbcase *t, const int64_t (*sizes)[2], size_t ns, float x_lo, const mbw *w,
                      const char *label) {
    for (size_t si = 0; si < ns; si++) {
        t->H = sizes[si][0];
        t->W = sizes[si][1];
        const int64_t n = t->C * t->H * t->W, dims[4] = {1, t->C, t->H, t->W};
        float *x = test_rnd_f32(&g_seed, n, x_lo, 1), *y = test_xmalloc((size_t)n * sizeof(float));
        double *ref = test_xmalloc((size_t)n * sizeof(double));
        reference(t, t->H, t->W, x, w->we, w->be, w->wd, w->bd, w->wp, w->bp, ref);
        ASSERT_OK(kiln_context_set_input_shape(ctx, "X", 4, dims));
        ASSERT_OK(kiln_context_bind(ctx, "X", x, (size_t)n * sizeof(float)));
        memset(y, 0xA5, (size_t)n * sizeof(float));
        ASSERT_OK(kiln_context_bind(ctx, "Y", y, (size_t)n * sizeof(float)));
        if (kiln_context_run(ctx)) TEST__FAIL("%s, run %lldx%lld: %s", label, (long long)t->H, (long long)t->W,
                                              kiln_errmsg());
        char what[160];
        snprintf(what, sizeof what, "%s %lldx%lld", label, (long long)t->H, (long long)t->W);
        test_check_close(what, y, ref, n, 2e-4 * (double)(t->C + t->Ce));
        free(x); free(y); free(ref);
    }
}

/* Dynamic height and width (a profile from 3x4 to 41x40): one engine run
 * at several sizes, each tactic, 1 and 2 threads; the workspace (tactic 1)
 * and the bands (2, 3) follow the actual dims. */
TEST_IMPL(mbconv_dynamic) {
    if (skip()) return;
    mbcase t = {.N = 1, .C = 8, .Ce = 48, .M = 8, .k = 3, .sy = 1, .sx = 1, .d = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1,
                .expand = 1, .act = ACT_RELU6, .residual = 1};
    const int64_t hw[6] = {3, 20, 41, 4, 20, 40}, sizes[][2] = {{20, 20}, {3, 4}, {41, 40}, {17, 9}};
    mbw w = mbw_rnd(&t);
    for (int threads = 1; threads <= 2; threads++) {
        kiln_build_stats st;
        kiln_engine *e = build(&t, threads, 0, hw, w.we, w.be, w.wd, w.bd, w.wp, w.bp, &st);
        ASSERT_EQ(st.layers, 1);
        for (int tactic = 1; tactic <= 3; tactic++) {
            ASSERT_OK(test_force_tactic(e, 0, tactic));
            kiln_context *ctx;
            ASSERT_OK(kiln_context_create(e, threads, &ctx));
            kiln_context_set_debug(ctx, 1);
            char label[80];
            snprintf(label, sizeof label, "mbconv dynamic threads=%d tactic %d", threads, tactic);
            run_sizes(ctx, &t, sizes, sizeof sizes / sizeof sizes[0], -1, &w, label);
            kiln_context_free(ctx);
        }
        kiln_engine_free(e);
    }
    mbw_free(&w);
}

/* A kiln::mbconv layer written by hand with inconsistent operands fails
 * to build with a message naming the operand, expected and found: Wp
 * taking wp_in channels, a kh x 3 depthwise kernel, nstrides strides;
 * ek > 0: with an ek x ek expand conv (We) of 8 input channels. */
static void bad_block(int64_t wp_in, int64_t kh, int nstrides, int64_t ek, const char *want) {
    kiln_network *net = kiln_network_create();
    ASSERT(net);
    static float w[4096];
    int64_t xd[4] = {1, 8, 5, 5}, wdd[4] = {8, 1, kh, 3}, wpd[4] = {4, wp_in, 1, 1}, cd[1] = {8}, md[1] = {4};
    int64_t wed[4] = {8, 8, ek, ek};
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "Wd", KILN_DTYPE_F32, 4, wdd, w));
    ASSERT_OK(kiln_network_add_constant(net, "Bd", KILN_DTYPE_F32, 1, cd, w));
    ASSERT_OK(kiln_network_add_constant(net, "Wp", KILN_DTYPE_F32, 4, wpd, w));
    ASSERT_OK(kiln_network_add_constant(net, "Bp", KILN_DTYPE_F32, 1, md, w));
    if (ek) ASSERT_OK(kiln_network_add_constant(net, "We", KILN_DTYPE_F32, 4, wed, w));
    const char *in[7] = {"X", "Wd", "Bd", "Wp", "Bp", "We", "Bd"}, *out[1] = {"Y"};
    kiln_layer *l = kiln_network_add_layer(net, "kiln::mbconv", 1, "block", ek ? 7 : 5, in, 1, out);
    int rc = l ? 0 : -1;
    const int64_t s[3] = {1, 1, 1};
    if (l) ASSERT_OK(kiln_layer_set_ints(l, "strides", s, nstrides));
    if (l && (rc = kiln_network_mark_output(net, "Y")) == 0) {
        kiln_engine *e = NULL;
        kiln_build_stats st;
        rc = test_build_net(net, KILN_BUILD_NO_TIMING, 1, &e, &st);
        kiln_engine_free(e);
    }
    ASSERT(rc != 0);
    ASSERT_CONTAINS(kiln_errmsg(), want);
    kiln_network_free(net);
}

TEST_IMPL(mbconv_bad_input) {
    bad_block(7, 3, 2, 0, "kiln::mbconv: Wp dim 1: expected 8, found 7");
    bad_block(8, 0, 2, 0, "depthwise kernel 0 x 3, expected 1..64");
    bad_block(8, 3, 3, 0, "kiln::mbconv: strides: expected 2 values, found 3");
    bad_block(8, 3, 2, 3, "kiln::mbconv: a 3 x 3 expand conv of 8 input channels; one other than 1x1");
}

/* Timed builds of a block over a small plane with a wide expand: the
 * builder has one candidate, whatever its timings say (bench/README.md
 * session 11: tactic 4 lost in the network where its timings chose it),
 * tactic 1 at stride 1 (MobileNetV2's 7x7 blocks), tactic 2 at stride 2
 * (its 14x14 -> 7x7 one). */
TEST_IMPL(mbconv_candidates) {
    if (skip()) return;
    mbcase cases[] = {
        {.N = 1, .C = 80, .Ce = 160, .M = 40, .H = 7, .W = 7, .k = 3, .sy = 1, .sx = 1, .d = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU6},
        {.N = 1, .C = 80, .Ce = 160, .M = 40, .H = 14, .W = 14, .k = 3, .sy = 2, .sx = 2, .d = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU6},
    };
    int one[2] = {0, 0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const mbcase *t = &cases[i];
        float *we = test_rnd_f32(&g_seed, t->Ce * t->C, -1, 1), *be = test_rnd_f32(&g_seed, t->Ce, -1, 1);
        float *wd = test_rnd_f32(&g_seed, t->Ce * 9, -1, 1), *bd = test_rnd_f32(&g_seed, t->Ce, -1, 1);
        float *wp = test_rnd_f32(&g_seed, t->M * t->Ce, -1, 1), *bp = test_rnd_f32(&g_seed, t->M, -1, 1);
        for (int threads = 1; threads <= 2; threads++) {
            kiln_build_stats st;
            g_build_flags = 0;
            kiln_engine *e = build(t, threads, 0, NULL, we, be, wd, bd, wp, bp, &st);
            g_build_flags = KILN_BUILD_NO_TIMING;
            ASSERT_EQ(st.layers, 1);
            ASSERT_STR_EQ(e->layers[0].op_name, "mbconv");
            int tac = e->layers[0].tactic;
            if (t->sy == 1) {
                one[threads - 1] = st.candidates; /* the block's one tactic (as the same build elsewhere) */
                ASSERT_EQ(tac, 1);
            } else {
                ASSERT_EQ(st.candidates, one[threads - 1]);
                ASSERT_EQ(tac, 2);
            }
            kiln_engine_free(e);
        }
        free(we); free(be); free(wd); free(bd); free(wp); free(bp);
    }
}

/* Tactics 5 and 6 (whole tensors in NCHW16C; 6 with the hidden channels
 * split over the threads): with $KILN_CPU_BLOCKED=force the
 * block is built with X and Y in NCHW16C (reformats inserted around it)
 * where C, Ce and M are multiples of 16, its residual Add fused in the
 * 16c store; against the reference at 1, 2 and 3 threads, debug mode and
 * not, the output poisoned.  Strides 1 and 2, a 5x5 kernel, dilation,
 * asymmetric pads, 2 images, ReLU6 / Relu / none (a Relu before the
 * residual blocks, on x >= 0, makes their input in 16c); 7x7 and 14x14 planes
 * (pixel tiles of 9-12) and odd ones; a dynamic height and width (one
 * engine at several sizes).  A block of 24 input channels gets another
 * tactic (not offered). */
TEST_IMPL(mbconv_16c) {
    if (skip()) return;
    mbcase cases[] = {
        {.N = 1, .C = 32, .Ce = 192, .M = 32, .H = 14, .W = 14, .k = 3, .sy = 1, .sx = 1, .d = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU6, .residual = 1, .pre_relu = 1},
        {.N = 1, .C = 16, .Ce = 96, .M = 48, .H = 14, .W = 14, .k = 3, .sy = 2, .sx = 2, .d = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU},
        {.N = 2, .C = 48, .Ce = 160, .M = 16, .H = 7, .W = 7, .k = 5, .sy = 1, .sx = 1, .d = 1, .pt = 2, .pl = 2, .pb = 2, .pr = 2, .expand = 1, .act = ACT_NONE},
        {.N = 1, .C = 32, .Ce = 64, .M = 32, .H = 9, .W = 11, .k = 3, .sy = 1, .sx = 1, .d = 2, .pt = 2, .pl = 2, .pb = 2, .pr = 2, .expand = 1, .act = ACT_RELU6, .residual = 1, .pre_relu = 1},
        {.N = 1, .C = 16, .Ce = 32, .M = 32, .H = 13, .W = 10, .k = 3, .sy = 2, .sx = 2, .d = 1, .pt = 1, .pl = 0, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU6},
        {.N = 1, .C = 24, .Ce = 144, .M = 32, .H = 14, .W = 14, .k = 3, .sy = 1, .sx = 1, .d = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .expand = 1, .act = ACT_RELU6},
    };
    ASSERT_OK(setenv("KILN_CPU_BLOCKED", "force", 1));
    g_build_flags = 0; /* timed: blocked candidates ranked first */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const mbcase *t = &cases[i];
        const int64_t OH = (t->H + t->pt + t->pb - t->d * (t->k - 1) - 1) / t->sy + 1;
        const int64_t OW = (t->W + t->pl + t->pr - t->d * (t->k - 1) - 1) / t->sx + 1;
        const int64_t nx = t->N * t->C * t->H * t->W, ny = t->N * t->M * OH * OW;
        const int fits = t->C % 16 == 0;
        float *x = test_rnd_f32(&g_seed, nx, t->pre_relu ? 0.0f : -1.0f, 1.0f); /* (Relu(x) = x) */
        float *we = test_rnd_f32(&g_seed, t->Ce * t->C, -4.0f, 4.0f), *be = test_rnd_f32(&g_seed, t->Ce, -0.5f, 0.5f);
        float *wd = test_rnd_f32(&g_seed, t->Ce * t->k * t->k, -1.0f, 1.0f);
        float *bd = test_rnd_f32(&g_seed, t->Ce, -0.5f, 0.5f);
        float *wp = test_rnd_f32(&g_seed, t->M * t->Ce, -0.5f, 0.5f), *bp = test_rnd_f32(&g_seed, t->M, -0.5f, 0.5f);
        float *y = test_xmalloc((size_t)ny * sizeof(float));
        double *ref = test_xmalloc((size_t)ny * sizeof(double));
        reference(t, OH, OW, x, we, be, wd, bd, wp, bp, ref);
        for (int threads = 1; threads <= 3; threads++) { /* 2, 3: the pixel split's shares (run_16c) */
            kiln_build_stats st;
            kiln_engine *e = build(t, threads, 0, NULL, we, be, wd, bd, wp, bp, &st);
            const int l = test_last_op(e, "mbconv");
            ASSERT(l >= 0);
            const kiln__elayer *L = &e->layers[l];
            /* 6 (the hidden channels split) is offered in builds of 2 threads or more */
            ASSERT_EQ(L->tactic == 5 || (threads > 1 && L->tactic == 6), fits);
            if (fits) {
                ASSERT_EQ(L->io.format[0], KILN_FORMAT_NCHW16C);
                ASSERT_EQ(L->io.format[L->io.n - 1], KILN_FORMAT_NCHW16C);
                /* the residual Add, fused in NCHW16C (X made by a layer in 16c: a network
             * input reformatted is not, fuse.c) */
            ASSERT_EQ(L->nepi, t->residual);
                ASSERT(L->prepacked && L->prepacked[1] && L->prepacked[3] && L->prepacked[5]);
            }
            /* both 16c tactics on the same engine (the same packed weights), whichever the
             * builder chose; 6 at 1 thread runs as 5, and at 3 threads (Ce/32 shares of 1-6
             * blocks of 32) leaves a share of 16 channels where Ce % 32 == 16 */
            for (int k = 0; k < (fits ? 2 : 1); k++) {
                if (fits) ASSERT_OK(test_force_tactic(e, l, 5 + k));
                for (int debug = 0; debug <= 1; debug++) {
                    test_run_xy(e, threads, debug, x, nx, y, ny, L->tactic);
                    char what[200];
                    snprintf(what, sizeof what, "mbconv 16c case %zu (C=%lld Ce=%lld M=%lld %lldx%lld) threads=%d "
                             "tactic %d debug %d", i, (long long)t->C, (long long)t->Ce, (long long)t->M,
                             (long long)t->H, (long long)t->W, threads, L->tactic, debug);
                    test_check_close(what, y, ref, ny, 2e-4 * (double)(t->C + t->Ce));
                }
            }
            kiln_engine_free(e);
        }
        free(x); free(we); free(be); free(wd); free(bd); free(wp); free(bp); free(y); free(ref);
    }
    /* dynamic height and width (a profile from 3x4 to 29x30): one engine run at several sizes, its
     * workspace and pixel tiles following the actual dims */
    mbcase t = {.N = 1, .C = 16, .Ce = 64, .M = 16, .k = 3, .sy = 1, .sx = 1, .d = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1,
                .expand = 1, .act = ACT_RELU6, .residual = 1, .pre_relu = 1};
    const int64_t hw[6] = {3, 14, 29, 4, 14, 30}, sizes[][2] = {{14, 14}, {3, 4}, {29, 30}, {7, 9}};
    mbw w = mbw_rnd(&t);
    for (int threads = 1; threads <= 2; threads++) {
        kiln_build_stats st;
        kiln_engine *e = build(&t, threads, 0, hw, w.we, w.be, w.wd, w.bd, w.wp, w.bp, &st);
        const int l = test_last_op(e, "mbconv");
        ASSERT(l >= 0);
        ASSERT(e->layers[l].tactic == 5 || (threads > 1 && e->layers[l].tactic == 6));
        for (int k = 5; k <= 6; k++) {
            ASSERT_OK(test_force_tactic(e, l, k));
            kiln_context *ctx;
            ASSERT_OK(kiln_context_create(e, threads, &ctx));
            char label[80];
            snprintf(label, sizeof label, "mbconv 16c dynamic threads=%d tactic %d", threads, k);
            run_sizes(ctx, &t, sizes, sizeof sizes / sizeof sizes[0], 0, &w, label); /* x >= 0: Relu(x) = x */
            kiln_context_free(ctx);
        }
        kiln_engine_free(e);
    }
    mbw_free(&w);
    unsetenv("KILN_CPU_BLOCKED");
    g_build_flags = KILN_BUILD_NO_TIMING;
}

TEST_LIST(TEST_ENTRY(mobilenet_blocks), TEST_ENTRY(mbconv_16c), TEST_ENTRY(mbconv_candidates), TEST_ENTRY(mbconv_general), TEST_ENTRY(mbconv_stem), TEST_ENTRY(mbconv_three_threads), TEST_ENTRY(mbconv_dynamic),
          TEST_ENTRY(mbconv_not_fused), TEST_ENTRY(mbconv_bad_input))
