/*
 * test_conv_dw.c — depthwise convolutions (one input channel per group)
 * against a naive double reference written here, on every Conv tactic:
 * 5 and 7 (the depthwise kernels: phase planes, masked row loads), 3
 * (direct), 2 and 4 (GEMM, padded GEMM) and 1 (auto).  The network Conv (-> Relu or Clip, fused into the conv as its
 * epilogue) is built once without timing; each tactic is then forced on
 * the engine's layer (kiln__elayer.tactic) before a context runs it, with
 * the output poisoned and debug mode on (every element must be written).
 * Odd sizes: channel counts that are not a multiple of the vector width,
 * planes of 1, 2, 7 and uneven rows, strides 1-3, asymmetric pads,
 * dilations, depth multipliers, 1-D convs, 2 images, 1 and 2 threads.
 * Also pointwise (1x1) convs, whose GEMM may read X in place, dense 3x3
 * convs (the padded GEMM's per-block copy into Y) and tactics 6 and 10,
 * Winograd F(4x4, 3x3) and F(2x2, 3x3), which pack W in layouts of their own: the layer's prepack
 * is redone for it (as a load of an engine timed to it would), and where
 * it applies the test checks that W was packed that way.  Tactic 8, the
 * padded GEMM with B packed a strip at a time, and 9, with B packed from
 * the output's own columns, run wherever they are offered.
 */
#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "kiln_int.h"
#include "ops/nn/conv_dwrows.h"
#include "ops/nn/conv_winograd.h"
#include "test.h"
#include "test_ops_util.h"

#include <math.h>
#include <stdint.h>

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

static uint64_t g_seed = 0x5EEDD3D3C0FFEE11ull;

enum { EPI_NONE, EPI_RELU, EPI_CLIP };

/* One case: N x C x H x W input, M = C * mult output channels, group C,
 * kernel kh x kw, strides, dilations, pads (top, left, bottom, right);
 * nsp = 1: a 1-D conv over W (H must be 1, kh 1). */
typedef struct dwcase {
    int64_t N, C, mult, H, W, kh, kw, sy, sx, dy, dx, pt, pl, pb, pr;
    int nsp, epi, bias;
    int dense; /* group 1 (M = mult): a regular conv, for the 1x1 GEMM paths */
} dwcase;

static int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1) {
    return (in + p0 + p1 - d * (k - 1) - 1) / s + 1;
}

/* Returns the largest magnitude of an output before its activation. */
static double reference(const dwcase *t, const float *x, const float *w, const float *b, double *ref,
                        int64_t OH, int64_t OW) {
    double big = 0;
    const int64_t M = t->dense ? t->mult : t->C * t->mult, Cg = t->dense ? t->C : 1;
    const float lo = -0.25f, hi = 0.5f;
    for (int64_t n = 0; n < t->N; n++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    double acc = b ? b[m] : 0.0;
                    for (int64_t ci = 0; ci < Cg; ci++)
                    for (int64_t ky = 0; ky < t->kh; ky++)
                        for (int64_t kx = 0; kx < t->kw; kx++) {
                            int64_t iy = oy * t->sy - t->pt + ky * t->dy;
                            int64_t ix = ox * t->sx - t->pl + kx * t->dx;
                            if (iy < 0 || iy >= t->H || ix < 0 || ix >= t->W) continue;
                            int64_t c = t->dense ? ci : m / t->mult;
                            acc += (double)x[((n * t->C + c) * t->H + iy) * t->W + ix] *
                                   w[((m * Cg + ci) * t->kh + ky) * t->kw + kx];
                        }
                    big = fabs(acc) > big ? fabs(acc) : big;
                    if (t->epi == EPI_RELU && acc < 0) acc = 0;
                    if (t->epi == EPI_CLIP) acc = acc < lo ? lo : acc > hi ? hi : acc;
                    ref[((n * M + m) * OH + oy) * OW + ox] = acc;
                }
    return big;
}

static void run_case(const dwcase *t, int threads) {
    const int64_t M = t->dense ? t->mult : t->C * t->mult, Cg = t->dense ? t->C : 1;
    const int64_t OH = out_dim(t->H, t->kh, t->sy, t->dy, t->pt, t->pb);
    const int64_t OW = out_dim(t->W, t->kw, t->sx, t->dx, t->pl, t->pr);
    ASSERT(OH >= 1 && OW >= 1);
    ASSERT(t->nsp == 2 || (t->H == 1 && t->kh == 1 && t->pt == 0 && t->pb == 0));
    int64_t nx = t->N * t->C * t->H * t->W, nw = M * Cg * t->kh * t->kw, ny = t->N * M * OH * OW;
    float *x = test_rnd_f32(&g_seed, nx, -1.0f, 1.0f), *w = test_rnd_f32(&g_seed, nw, -1.0f, 1.0f);
    float *b = test_rnd_f32(&g_seed, M, -0.5f, 0.5f), *y = test_xmalloc((size_t)ny * sizeof(float));
    double *ref = test_xmalloc((size_t)ny * sizeof(double));
    const double big = reference(t, x, w, t->bias ? b : NULL, ref, OH, OW);

    kiln_network *net = kiln_network_create();
    ASSERT(net);
    const int nd = 2 + t->nsp;
    int64_t xd[4] = {t->N, t->C, t->H, t->W}, wd[4] = {M, Cg, t->kh, t->kw}, bd[1] = {M};
    if (t->nsp == 1) { xd[2] = t->W; wd[2] = t->kw; }
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, nd, xd, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "W", KILN_DTYPE_F32, nd, wd, w));
    ASSERT_OK(kiln_network_add_constant(net, "B", KILN_DTYPE_F32, 1, bd, b));
    const char *cin[3] = {"X", "W", "B"}, *cout[1] = {t->epi == EPI_NONE ? "Y" : "c"};
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::Conv", 11, "conv", t->bias ? 3 : 2, cin, 1, cout);
    if (!l) TEST__FAIL("add_layer Conv: %s", kiln_errmsg());
    int64_t k[2] = {t->kh, t->kw}, s[2] = {t->sy, t->sx}, d[2] = {t->dy, t->dx};
    int64_t p[4] = {t->pt, t->pl, t->pb, t->pr};
    if (t->nsp == 1) { k[0] = t->kw; s[0] = t->sx; d[0] = t->dx; p[0] = t->pl; p[1] = t->pr; }
    ASSERT_OK(kiln_layer_set_ints(l, "kernel_shape", k, t->nsp));
    ASSERT_OK(kiln_layer_set_ints(l, "strides", s, t->nsp));
    ASSERT_OK(kiln_layer_set_ints(l, "dilations", d, t->nsp));
    ASSERT_OK(kiln_layer_set_ints(l, "pads", p, 2 * t->nsp));
    ASSERT_OK(kiln_layer_set_int(l, "group", t->dense ? 1 : t->C));
    if (t->epi == EPI_RELU) {
        const char *ri[1] = {"c"}, *ro[1] = {"Y"};
        ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 14, "relu", 1, ri, 1, ro));
    } else if (t->epi == EPI_CLIP) {
        float lo = -0.25f, hi = 0.5f;
        ASSERT_OK(kiln_network_add_constant(net, "lo", KILN_DTYPE_F32, 0, NULL, &lo));
        ASSERT_OK(kiln_network_add_constant(net, "hi", KILN_DTYPE_F32, 0, NULL, &hi));
        const char *ci[3] = {"c", "lo", "hi"}, *co[1] = {"Y"};
        ASSERT(kiln_network_add_layer(net, "ai.onnx::Clip", 13, "clip", 3, ci, 1, co));
    }
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_build_stats st;
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, threads, &st);
    kiln_network_free(net);
    ASSERT_EQ(st.layers, 1); /* the activation is fused */

    for (int tactic = 1; tactic <= 10; tactic++) {
        e->layers[0].tactic = tactic;
        const int wm = tactic == 6 ? 4 : tactic == 10 ? 2 : 0; /* Winograd's tile size */
        if (tactic == 8 || tactic == 9) {
            /* the padded GEMM with B packed: offered on 2-D convs of one
             * group that are not a plain 1x1 stride-1 one (where the padded
             * GEMM runs) */
            int offered = (t->dense || t->C == 1) && t->nsp == 2 && t->kh * t->kw * t->sy * t->sx > 1 &&
                          t->sy <= 4 && t->sx <= 4;
            int rc = test_force_tactic(e, 0, tactic);
            if (!offered) {
                ASSERT_EQ(rc, KILN_EFORMAT);
                ASSERT_CONTAINS(kiln_errmsg(), tactic == 8 ? "with tactic 8 are not a combination its op accepts"
                                                           : "with tactic 9 are not a combination its op accepts");
                continue;
            }
            ASSERT_OK(rc);
        } else if (tactic >= 6) {
            /* Conv offers (and loads) 6 only on 3x3 stride-1 undilated 2-D
             * convs of one group with 2+ output channels (an output under 5
             * columns runs the padded GEMM), 7 only on 2-D depthwise convs
             * it fits (column stride 1 or 2, an AVX-512 build) */
            int offered = wm ? (t->dense || t->C == 1) && t->nsp == 2 && t->kh == 3 && t->kw == 3 &&
                                            t->sy == 1 && t->sx == 1 && t->dy == 1 && t->dx == 1 && M >= 2
                                      : Cg == 1 && t->nsp == 2 && kiln__dwrows_fits(t->sx, t->kw);
            int rc = test_force_tactic(e, 0, tactic);
            if (!offered) {
                char want[80];
                snprintf(want, sizeof want, "with tactic %d are not a combination its op accepts", tactic);
                ASSERT_EQ(rc, KILN_EFORMAT);
                ASSERT_CONTAINS(kiln_errmsg(), want);
                continue;
            }
            ASSERT_OK(rc);
        }
        if (wm) {
            int wino = kiln__wino_fits(wm, M, OW);
            const void *pk = e->layers[0].prepacked ? e->layers[0].prepacked[1] : NULL;
            ASSERT_EQ(kiln__wino_packed(pk, wm, M, Cg) != NULL, wino);
            ASSERT(!kiln__wino_packed(pk, 6 - wm, M, Cg)); /* the other tile size's layout is not taken */
        }
        for (int debug = 0; debug <= 1; debug++) {
            test_run_xy(e, threads, debug, x, nx, y, ny, tactic);
            char what[200];
            snprintf(what, sizeof what,
                     "dw N=%lld C=%lld x%lld %lldx%lld k=%lldx%lld s=%lld,%lld d=%lld,%lld "
                     "p=%lld,%lld,%lld,%lld nsp=%d epi=%d dense=%d threads=%d tactic %d",
                     (long long)t->N, (long long)t->C, (long long)t->mult, (long long)t->H,
                     (long long)t->W, (long long)t->kh, (long long)t->kw, (long long)t->sy,
                     (long long)t->sx, (long long)t->dy, (long long)t->dx, (long long)t->pt,
                     (long long)t->pl, (long long)t->pb, (long long)t->pr, t->nsp, t->epi,
                     t->dense, threads, tactic);
            /* Winograd's transforms (gains up to 8 and 1/24) cost accuracy:
             * its error is allowed 1e-4 of the output's scale (the scale
             * compare.py reports a model's difference against) */
            double atol = 1e-5 * (double)(t->kh * t->kw);
            if (wm && 1e-4 * big > atol) atol = 1e-4 * big;
            test_check_close(what, y, ref, ny, atol);
        }
    }
    kiln_engine_free(e);
    free(x); free(w); free(b); free(y); free(ref);
}

/* The MobileNet shapes: 3x3, pads 1, strides 1 and 2, Clip (ReLU6) or not. */
TEST_IMPL(dw3x3) {
    static const int64_t chans[] = {1, 3, 17, 32};
    static const int64_t sizes[][2] = {{1, 1}, {2, 2}, {7, 7}, {2, 9}, {13, 5}, {14, 14}, {29, 31}};
    int i = 0;
    for (size_t ci = 0; ci < sizeof chans / sizeof chans[0]; ci++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (int64_t st = 1; st <= 2; st++, i++) {
                dwcase t = {.N = 1 + (i % 3 == 0), .C = chans[ci], .mult = 1, .H = sizes[si][0],
                            .W = sizes[si][1], .kh = 3, .kw = 3, .sy = st, .sx = st, .dy = 1,
                            .dx = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .nsp = 2,
                            .epi = i % 3, .bias = i % 4 != 1};
                run_case(&t, 1 + (i % 2));
            }
}

/* Wide and tall planes: several row blocks per plane, blocks split over 2
 * threads, one channel (the rows are the only parallel work). */
TEST_IMPL(dw3x3_large) {
    dwcase a = {.N = 1, .C = 1, .mult = 1, .H = 150, .W = 133, .kh = 3, .kw = 3, .sy = 1, .sx = 1,
                .dy = 1, .dx = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .nsp = 2, .epi = EPI_CLIP, .bias = 1};
    run_case(&a, 2);
    a.sy = a.sx = 2;
    a.C = 5;
    a.epi = EPI_RELU;
    run_case(&a, 2);
    a.C = 19;
    a.H = 57;
    a.W = 58;
    a.sy = a.sx = 1;
    run_case(&a, 1);
}

/* Everything else tactics 5 and 7 accept (7: column strides 1 and 2): other kernel sizes (the generic tap
 * loop), no or asymmetric pads, larger pads than the kernel reach,
 * dilations, strides 3 and mixed, depth multipliers, 1-D. */
TEST_IMPL(dw_general) {
    dwcase cases[] = {
        {.N = 1, .C = 5, .mult = 1, .H = 11, .W = 12, .kh = 3, .kw = 3, .sy = 1, .sx = 1, .dy = 1, .dx = 1, .nsp = 2, .bias = 1},
        {.N = 2, .C = 6, .mult = 1, .H = 12, .W = 9, .kh = 3, .kw = 3, .sy = 2, .sx = 2, .dy = 1, .dx = 1, .pt = 0, .pl = 1, .pb = 2, .pr = 0, .nsp = 2, .epi = EPI_CLIP, .bias = 1},
        {.N = 1, .C = 7, .mult = 1, .H = 16, .W = 15, .kh = 5, .kw = 5, .sy = 1, .sx = 1, .dy = 1, .dx = 1, .pt = 2, .pl = 2, .pb = 2, .pr = 2, .nsp = 2, .epi = EPI_RELU, .bias = 1},
        {.N = 1, .C = 4, .mult = 1, .H = 19, .W = 20, .kh = 3, .kw = 3, .sy = 1, .sx = 1, .dy = 2, .dx = 3, .pt = 2, .pl = 3, .pb = 2, .pr = 3, .nsp = 2, .bias = 0},
        {.N = 1, .C = 3, .mult = 2, .H = 10, .W = 13, .kh = 3, .kw = 3, .sy = 1, .sx = 2, .dy = 1, .dx = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .nsp = 2, .epi = EPI_CLIP, .bias = 1},
        {.N = 1, .C = 9, .mult = 1, .H = 17, .W = 23, .kh = 3, .kw = 3, .sy = 3, .sx = 3, .dy = 1, .dx = 1, .pt = 1, .pl = 0, .pb = 1, .pr = 2, .nsp = 2, .bias = 1},
        {.N = 1, .C = 2, .mult = 1, .H = 6, .W = 7, .kh = 3, .kw = 1, .sy = 1, .sx = 1, .dy = 1, .dx = 1, .pt = 3, .pl = 2, .pb = 1, .pr = 4, .nsp = 2, .epi = EPI_RELU, .bias = 1},
        {.N = 1, .C = 16, .mult = 1, .H = 8, .W = 8, .kh = 7, .kw = 7, .sy = 2, .sx = 2, .dy = 1, .dx = 1, .pt = 3, .pl = 3, .pb = 3, .pr = 3, .nsp = 2, .bias = 1},
        {.N = 2, .C = 5, .mult = 1, .H = 1, .W = 40, .kh = 1, .kw = 3, .sy = 1, .sx = 1, .dy = 1, .dx = 1, .pl = 1, .pr = 1, .nsp = 1, .epi = EPI_CLIP, .bias = 1},
        {.N = 1, .C = 3, .mult = 3, .H = 1, .W = 33, .kh = 1, .kw = 5, .sy = 1, .sx = 2, .dy = 1, .dx = 2, .pl = 0, .pr = 3, .nsp = 1, .bias = 0},
        /* tactic 7's constant-size kernels (conv_dwrows.c plane_other):
         * PP-OCR's 3x3 at strides (2, 1) and 5x5 over planes of 2-3 rows,
         * 5x5 at (1, 2), (2, 2) and (2, 1); 3x3 at (1, 2) */
        {.N = 1, .C = 24, .mult = 1, .H = 12, .W = 96, .kh = 3, .kw = 3, .sy = 2, .sx = 1, .dy = 1, .dx = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .nsp = 2, .epi = EPI_RELU, .bias = 1},
        {.N = 1, .C = 20, .mult = 1, .H = 2, .W = 96, .kh = 5, .kw = 5, .sy = 1, .sx = 1, .dy = 1, .dx = 1, .pt = 2, .pl = 2, .pb = 2, .pr = 2, .nsp = 2, .epi = EPI_CLIP, .bias = 1},
        {.N = 2, .C = 9, .mult = 1, .H = 3, .W = 37, .kh = 5, .kw = 5, .sy = 2, .sx = 1, .dy = 1, .dx = 1, .pt = 2, .pl = 2, .pb = 2, .pr = 2, .nsp = 2, .bias = 1},
        {.N = 1, .C = 6, .mult = 1, .H = 13, .W = 30, .kh = 5, .kw = 5, .sy = 2, .sx = 2, .dy = 1, .dx = 1, .pt = 1, .pl = 2, .pb = 3, .pr = 2, .nsp = 2, .epi = EPI_RELU, .bias = 0},
        {.N = 1, .C = 5, .mult = 1, .H = 9, .W = 41, .kh = 5, .kw = 5, .sy = 1, .sx = 2, .dy = 1, .dx = 1, .pt = 2, .pl = 2, .pb = 2, .pr = 2, .nsp = 2, .bias = 1},
        {.N = 1, .C = 4, .mult = 1, .H = 10, .W = 34, .kh = 3, .kw = 3, .sy = 1, .sx = 2, .dy = 1, .dx = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .nsp = 2, .epi = EPI_CLIP, .bias = 1},
        /* tactic 7's rolling rows (3x3, left pad 1, OW = W) under top pads
         * of 0, 2 and 3 rows: its steps inside the plane skip the pad test */
        {.N = 1, .C = 3, .mult = 1, .H = 13, .W = 37, .kh = 3, .kw = 3, .sy = 1, .sx = 1, .dy = 1, .dx = 1, .pt = 3, .pl = 1, .pb = 0, .pr = 1, .nsp = 2, .epi = EPI_CLIP, .bias = 1},
        {.N = 1, .C = 2, .mult = 1, .H = 11, .W = 20, .kh = 3, .kw = 3, .sy = 1, .sx = 1, .dy = 1, .dx = 1, .pt = 2, .pl = 1, .pb = 2, .pr = 1, .nsp = 2, .bias = 1},
        {.N = 1, .C = 2, .mult = 1, .H = 9, .W = 16, .kh = 3, .kw = 3, .sy = 1, .sx = 1, .dy = 1, .dx = 1, .pt = 0, .pl = 1, .pb = 3, .pr = 1, .nsp = 2, .epi = EPI_RELU, .bias = 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_case(&cases[i], 1);
        run_case(&cases[i], 2);
    }
}

/* Pointwise (1x1, group 1) convs: with up to 64 output channels the GEMM
 * reads X in place (all but a partial last column strip, which is
 * packed); more channels pack X.  Planes of 64, 65, 100 and 1155 values,
 * 1 and 2 threads, fused Relu/Clip. */
TEST_IMPL(pointwise) {
    static const int64_t outs[] = {2, 7, 24, 64, 65, 100};
    static const int64_t sizes[][2] = {{8, 8}, {5, 13}, {10, 10}, {33, 35}, {1, 7}};
    int i = 0;
    for (size_t oi = 0; oi < sizeof outs / sizeof outs[0]; oi++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++, i++) {
            dwcase t = {.N = 1 + (i % 4 == 0), .C = 3 + 11 * (i % 5), .mult = outs[oi],
                        .H = sizes[si][0], .W = sizes[si][1], .kh = 1, .kw = 1, .sy = 1, .sx = 1,
                        .dy = 1, .dx = 1, .nsp = 2, .epi = i % 3, .bias = i % 4 != 1, .dense = 1};
            run_case(&t, 1 + (i % 2));
        }
}

/* Dense 3x3 convs on planes wider than one GEMM column block (2048): the
 * padded GEMM (tactic 4) copies each finished block of its grid into Y and
 * runs the epilogue there (sgemm `done`), blocks split over threads. */
TEST_IMPL(dense3x3) {
    dwcase a = {.N = 1, .C = 3, .mult = 20, .H = 61, .W = 60, .kh = 3, .kw = 3, .sy = 2, .sx = 2,
                .dy = 1, .dx = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .nsp = 2, .epi = EPI_CLIP,
                .bias = 1, .dense = 1};
    run_case(&a, 1);
    run_case(&a, 2);
    a.sy = a.sx = 1;
    a.C = 5;
    a.mult = 13;
    a.epi = EPI_RELU;
    a.N = 2;
    run_case(&a, 2);
    a.H = 7;
    a.W = 300;
    a.pl = 0;
    a.epi = EPI_NONE;
    run_case(&a, 1);
    /* more output channels than one GEMM row block (144): tactic 8 packs
     * whole column blocks of B there, strips below it; a stride-2 3x3 and
     * a stride-2 1x1 (one phase plane) */
    dwcase b = {.N = 1, .C = 7, .mult = 150, .H = 17, .W = 23, .kh = 3, .kw = 3, .sy = 2, .sx = 2,
                .dy = 1, .dx = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .nsp = 2, .epi = EPI_RELU,
                .bias = 1, .dense = 1};
    run_case(&b, 2);
    b.kh = b.kw = 1;
    b.pt = b.pl = b.pb = b.pr = 0;
    b.C = 33;
    run_case(&b, 1);
    /* grids of several GEMM column blocks (~64K floats of results each, the
     * padded GEMM's reused grid buffer): 100 channels at 40x40 (3 blocks),
     * a 7x7 stride-2 stem-like conv to 64 channels (3 blocks) */
    dwcase m = {.N = 1, .C = 4, .mult = 100, .H = 40, .W = 40, .kh = 3, .kw = 3, .sy = 1, .sx = 1,
                .dy = 1, .dx = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .nsp = 2, .epi = EPI_RELU,
                .bias = 1, .dense = 1};
    run_case(&m, 2);
    dwcase st = {.N = 1, .C = 3, .mult = 64, .H = 96, .W = 90, .kh = 7, .kw = 7, .sy = 2, .sx = 2,
                 .dy = 1, .dx = 1, .pt = 3, .pl = 3, .pb = 3, .pr = 3, .nsp = 2, .epi = EPI_RELU,
                 .bias = 1, .dense = 1};
    run_case(&st, 1);
}

/* Convs whose taps all land in phase (0, 0) of the padded GEMM's
 * space-to-depth (strided 1x1 convs, ResNet's downsamples; dilation a
 * multiple of the stride): it makes that one phase plane per channel.
 * Odd sizes, pads (also one-sided), strides 2-3, fused Relu/Clip. */
TEST_IMPL(strided_pointwise) {
    dwcase cases[] = {
        {.N = 1, .C = 5, .mult = 12, .H = 15, .W = 14, .kh = 1, .kw = 1, .sy = 2, .sx = 2, .dy = 1, .dx = 1, .nsp = 2, .bias = 1, .dense = 1},
        {.N = 2, .C = 17, .mult = 70, .H = 28, .W = 28, .kh = 1, .kw = 1, .sy = 2, .sx = 2, .dy = 1, .dx = 1, .nsp = 2, .epi = EPI_RELU, .bias = 1, .dense = 1},
        {.N = 1, .C = 3, .mult = 9, .H = 11, .W = 13, .kh = 1, .kw = 1, .sy = 3, .sx = 2, .dy = 1, .dx = 1, .pt = 1, .pl = 1, .pb = 0, .pr = 2, .nsp = 2, .epi = EPI_CLIP, .dense = 1},
        {.N = 1, .C = 4, .mult = 6, .H = 17, .W = 16, .kh = 3, .kw = 3, .sy = 2, .sx = 2, .dy = 2, .dx = 2, .pt = 2, .pl = 2, .pb = 2, .pr = 2, .nsp = 2, .bias = 1, .dense = 1},
        {.N = 1, .C = 6, .mult = 5, .H = 12, .W = 19, .kh = 3, .kw = 1, .sy = 2, .sx = 3, .dy = 2, .dx = 1, .pt = 1, .pl = 0, .pb = 2, .pr = 0, .nsp = 2, .epi = EPI_RELU, .bias = 1, .dense = 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_case(&cases[i], 1);
        run_case(&cases[i], 2);
    }
}

/* Winograd F(4x4, 3x3) and F(2x2, 3x3) (tactics 6 and 10) against the
 * reference: outputs that are not a multiple of the tile, pads 0/1/2 and asymmetric, too narrow
 * an output (fewer than two tiles a row: the padded GEMM runs), odd channel
 * counts, 2 images, fused Relu/Clip, 1-3 threads, and an image done in
 * several blocks of tile rows (C + M = 64 at 60 x 130). */
TEST_IMPL(winograd) {
    dwcase cases[] = {
        {.N = 1, .C = 3, .mult = 2, .H = 8, .W = 8, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .bias = 1},
        {.N = 2, .C = 17, .mult = 9, .H = 11, .W = 13, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .epi = EPI_RELU, .bias = 1},
        {.N = 1, .C = 5, .mult = 33, .H = 14, .W = 14, .pt = 0, .pl = 2, .pb = 2, .pr = 0, .epi = EPI_CLIP},
        {.N = 1, .C = 64, .mult = 16, .H = 7, .W = 7, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .bias = 1},
        {.N = 1, .C = 8, .mult = 8, .H = 9, .W = 6, .pt = 0, .pl = 0, .pb = 0, .pr = 0, .bias = 1},
        {.N = 1, .C = 4, .mult = 6, .H = 5, .W = 4, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .bias = 1},
        {.N = 1, .C = 1, .mult = 1, .H = 12, .W = 12, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .bias = 1},
        {.N = 1, .C = 40, .mult = 24, .H = 60, .W = 130, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .epi = EPI_CLIP, .bias = 1},
        /* 3 columns: two 2x2 tiles a row, one 4x4 (tactic 6 runs the padded GEMM) */
        {.N = 2, .C = 5, .mult = 4, .H = 3, .W = 3, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .epi = EPI_RELU, .bias = 1},
        /* a ResNet layer4 plane with channel counts off the vector width */
        {.N = 1, .C = 37, .mult = 50, .H = 7, .W = 7, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .epi = EPI_RELU, .bias = 1},
        /* more input channels than the SGEMM's K block */
        {.N = 1, .C = 300, .mult = 20, .H = 6, .W = 9, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .bias = 1},
        /* dozens of tiles a thread at 2 threads (72 of 4x4, 255 of 2x2),
         * fused Relu or no epilogue */
        {.N = 2, .C = 19, .mult = 21, .H = 30, .W = 33, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .epi = EPI_RELU, .bias = 1},
        {.N = 1, .C = 16, .mult = 35, .H = 29, .W = 30, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .bias = 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dwcase *t = &cases[i];
        t->kh = t->kw = 3;
        t->sy = t->sx = t->dy = t->dx = 1;
        t->nsp = 2;
        t->dense = 1;
        run_case(t, 1 + (int)(i % 2));
        if (i == 1 || i == 7 || i >= 11) run_case(t, 2 - (int)(i % 2));
        /* output channels in bands of whole 12-row tiles per thread (a
         * short last band, a thread with none), C over the K block */
        if (i == 1 || i >= 9) run_case(t, 3);
        if (i == 10) run_case(t, 2);
    }
}

/* kiln__dwrows_band on its own, as kiln::mbconv's row bands call it: a
 * band [oy0, oy1) of a 3x3 pads-1 depthwise conv's output rows from a
 * buffer that holds only the input rows the band reads (pt shifted by
 * the first), interleaved or split by column parity (`phase`, stride 2),
 * into planes with slack after each band (ys) that must stay poisoned.
 * Widths around the 16-lane chunks and the pairs of chunks (1-2, 8-9,
 * 15-17, 31-33, 47-49, 112), input heights 1-3 and taller, every band
 * split, depth multipliers, clamp or not, bias or not (AVX-512 builds: the
 * tactic's kernels exist only there). */
static void band_case(int64_t C, int64_t mult, int64_t IH, int64_t W, int64_t s, int phase, int64_t oy0,
                      int64_t oy1, int clamp, int bias) {
    const int64_t OH = (IH - 1) / s + 1, OW = (W - 1) / s + 1, M = C * mult;
    int64_t iy0 = oy0 * s - 1, iy1 = (oy1 - 1) * s + 2;
    iy0 = iy0 < 0 ? 0 : iy0;
    iy1 = iy1 > IH ? IH : iy1;
    const int64_t rows = iy1 - iy0, xs = rows * W + 3, ys = (oy1 - oy0) * OW + 5;
    float *xf = test_rnd_f32(&g_seed, C * IH * W, -1.0f, 1.0f), *w = test_rnd_f32(&g_seed, M * 9, -1.0f, 1.0f);
    float *b = test_rnd_f32(&g_seed, M, -0.5f, 0.5f), *x = test_xmalloc((size_t)(C * xs) * sizeof(float));
    float *y = test_xmalloc((size_t)(M * ys) * sizeof(float));
    double *ref = test_xmalloc((size_t)(M * ys) * sizeof(double));
    for (int64_t c = 0; c < C; c++) /* the band's rows, split: even columns, then the odd ones */
        for (int64_t r = 0; r < rows; r++)
            for (int64_t col = 0; col < W; col++)
                x[c * xs + (phase ? r * (W / 2) + col / 2 + (col & 1) * (rows * W / 2) : r * W + col)] =
                    xf[(c * IH + iy0 + r) * W + col];
    for (int64_t i = 0; i < M * ys; i++) y[i] = NAN;
    const float lo = -0.25f, hi = 0.5f;
    for (int64_t m = 0; m < M; m++)
        for (int64_t i = 0; i < ys; i++) {
            int64_t oy = oy0 + i / OW, ox = i % OW;
            if (i >= (oy1 - oy0) * OW) {
                ref[m * ys + i] = NAN;
                continue;
            }
            double acc = bias ? b[m] : 0.0;
            for (int64_t ky = 0; ky < 3; ky++)
                for (int64_t kx = 0; kx < 3; kx++) {
                    int64_t iy = oy * s + ky - 1, ix = ox * s + kx - 1;
                    if (iy >= 0 && iy < IH && ix >= 0 && ix < W)
                        acc += (double)w[m * 9 + ky * 3 + kx] * xf[(m / mult * IH + iy) * W + ix];
                }
            ref[m * ys + i] = clamp ? (acc < lo ? lo : acc > hi ? hi : acc) : acc;
        }
    kiln__dwrows p = {.N = 1, .C = C, .mult = mult, .H = rows, .W = W, .OH = OH, .OW = OW, .KH = 3, .KW = 3,
                      .sy = s, .sx = s, .dy = 1, .dx = 1, .pt = 1 + iy0, .pl = 1, .x = x, .w = w,
                      .bias = bias ? b : NULL, .y = y, .xs = xs, .ys = ys, .oy_base = oy0, .clamp = clamp,
                      .lo = lo, .hi = hi, .phase = phase ? rows * W / 2 : 0};
    kiln__dwrows_band(&p, 0, 0, M, oy0, oy1);
    char what[160];
    snprintf(what, sizeof what, "band C %lld x%lld, %lldx%lld s%lld%s rows [%lld, %lld)%s%s", (long long)C,
             (long long)mult, (long long)IH, (long long)W, (long long)s, phase ? " phase" : "", (long long)oy0,
             (long long)oy1, clamp ? " clamp" : "", bias ? " bias" : "");
    for (int64_t i = 0; i < M * ys; i++) {
        if (isnan(ref[i]) && !isnan(y[i])) TEST__FAIL("%s: element %lld written past the band", what, (long long)i);
        if (isnan(ref[i])) y[i] = 0.0f, ref[i] = 0.0;
    }
    test_check_close(what, y, ref, M * ys, 2e-5);
    free(xf); free(w); free(b); free(x); free(y); free(ref);
}

TEST_IMPL(dw_rows_band) {
    if (!kiln__dwrows_fits(1, 3)) return;
    static const int64_t widths[] = {1, 2, 7, 8, 9, 10, 15, 16, 17, 18, 26, 31, 32, 33, 34, 47, 48, 49, 64, 66, 112};
    static const int64_t heights[] = {1, 2, 3, 4, 7, 14, 19};
    int i = 0;
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++)
        for (size_t hi = 0; hi < sizeof heights / sizeof heights[0]; hi++)
            for (int mode = 0; mode < 3; mode++, i++) { /* stride 1, stride 2, stride 2 split */
                int64_t s = mode ? 2 : 1, IH = heights[hi], W = widths[wi];
                if (mode == 2 && W % 2) W++;
                int64_t OH = (IH - 1) / s + 1, oy0 = test_rnd_int(&g_seed, 0, OH - 1);
                int64_t oy1 = test_rnd_int(&g_seed, oy0 + 1, OH);
                if (i % 4 == 0) oy0 = 0, oy1 = OH; /* whole planes too */
                band_case(1 + i % 3, 1 + (i % 5 == 0), IH, W, s, mode == 2, oy0, oy1, i % 2, i % 3 != 1);
            }
}

TEST_LIST(TEST_ENTRY(dw3x3), TEST_ENTRY(dw3x3_large), TEST_ENTRY(dw_general), TEST_ENTRY(pointwise),
          TEST_ENTRY(dense3x3), TEST_ENTRY(strided_pointwise), TEST_ENTRY(winograd), TEST_ENTRY(dw_rows_band))
