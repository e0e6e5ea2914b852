/*
 * test_pool_max.c — 2-D MaxPool without Indices (the row path of pool.c,
 * whose AVX-512 build reads the windows that lie inside the plane 16
 * outputs at a time, a 3-wide stride-2 window through a kernel of its own)
 * against a naive reference written here: the max of the window's taps
 * inside the plane, NaN skipped unless every tap is NaN (ONNX Runtime's
 * rule).  Fresh random inputs, a few NaNs planted, output poisoned, debug
 * mode (every element written), 1 and 2 threads.  Widths put 0, 1, 15, 16,
 * 17 and more outputs in the vector range, with tails shorter than a
 * vector; windows 2..5 wide at strides 1 and 2 (the generic vector path),
 * 3 at stride 2 (ResNet's stem), asymmetric pads, a stride-3 and a
 * dilated case that stay on the scalar path.
 */
#include "kiln/kiln.h"
#include "test.h"
#include "test_ops_util.h"

#include <math.h>
#include <stdint.h>

static uint64_t g_seed = 0x9001BEEF5EEDull;

typedef struct pcase {
    int64_t N, C, H, W, kh, kw, sy, sx, dy, dx, pt, pl, pb, pr;
    int64_t nan_step; /* a NaN every nan_step inputs (0: 101) */
} pcase;

static int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1) {
    return (in + p0 + p1 - d * (k - 1) - 1) / s + 1;
}

static void run_case(const pcase *t, int threads) {
    const int64_t OH = out_dim(t->H, t->kh, t->sy, t->dy, t->pt, t->pb);
    const int64_t OW = out_dim(t->W, t->kw, t->sx, t->dx, t->pl, t->pr);
    ASSERT(OH >= 1 && OW >= 1);
    const int64_t planes = t->N * t->C, nx = planes * t->H * t->W, ny = planes * OH * OW;
    float *x = test_rnd_f32(&g_seed, nx, -2.0f, 2.0f), *y = test_xmalloc((size_t)ny * sizeof(float));
    float *ref = test_xmalloc((size_t)ny * sizeof(float));
    for (int64_t i = 7; i < nx; i += t->nan_step ? t->nan_step : 101) x[i] = NAN; /* some windows hold a NaN */
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++) {
                float best = -INFINITY;
                int any = 0;
                for (int64_t ky = 0; ky < t->kh; ky++)
                    for (int64_t kx = 0; kx < t->kw; kx++) {
                        int64_t iy = oy * t->sy - t->pt + ky * t->dy, ix = ox * t->sx - t->pl + kx * t->dx;
                        if (iy < 0 || iy >= t->H || ix < 0 || ix >= t->W) continue;
                        float v = x[(pl * t->H + iy) * t->W + ix];
                        if (!any || isnan(best) || v > best) best = v;
                        any = 1;
                    }
                ref[(pl * OH + oy) * OW + ox] = best;
            }

    kiln_network *net = kiln_network_create();
    ASSERT(net);
    int64_t xd[4] = {t->N, t->C, t->H, t->W};
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL));
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::MaxPool", 12, "mp", 1, (const char *[]){"X"}, 1,
                                           (const char *[]){"Y"});
    ASSERT(l);
    ASSERT_OK(kiln_layer_set_ints(l, "kernel_shape", (int64_t[]){t->kh, t->kw}, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "strides", (int64_t[]){t->sy, t->sx}, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "dilations", (int64_t[]){t->dy, t->dx}, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "pads", (int64_t[]){t->pt, t->pl, t->pb, t->pr}, 4));
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, threads, NULL);
    kiln_network_free(net);
    for (int debug = 0; debug <= 1; debug++) {
        test_run_xy(e, threads, debug, x, nx, y, ny, 0);
        for (int64_t i = 0; i < ny; i++) {
            int same = isnan(ref[i]) ? isnan(y[i]) : y[i] == ref[i];
            if (!same)
                TEST__FAIL("MaxPool %lldx%lldx%lldx%lld k=%lldx%lld s=%lld,%lld d=%lld,%lld "
                           "p=%lld,%lld,%lld,%lld threads %d: y[%lld] = %g, expected %g",
                           (long long)t->N, (long long)t->C, (long long)t->H, (long long)t->W,
                           (long long)t->kh, (long long)t->kw, (long long)t->sy, (long long)t->sx,
                           (long long)t->dy, (long long)t->dx, (long long)t->pt, (long long)t->pl,
                           (long long)t->pb, (long long)t->pr, threads, (long long)i, (double)y[i],
                           (double)ref[i]);
        }
    }
    kiln_engine_free(e);
    free(x); free(y); free(ref);
}

/* ResNet's stem pool (3x3, stride 2, pads 1) over widths around the
 * vector's 16 outputs, and its real size. */
TEST_IMPL(maxpool_3x3_s2) {
    static const int64_t widths[] = {1, 2, 5, 31, 33, 34, 35, 36, 37, 65, 67, 112, 113};
    int i = 0;
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++, i++) {
        pcase t = {.N = 1 + (i % 3 == 0), .C = 3, .H = 5 + i % 4, .W = widths[wi], .kh = 3, .kw = 3,
                   .sy = 2, .sx = 2, .dy = 1, .dx = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1};
        run_case(&t, 1 + i % 2);
    }
    pcase r = {.N = 1, .C = 4, .H = 112, .W = 112, .kh = 3, .kw = 3, .sy = 2, .sx = 2, .dy = 1, .dx = 1,
               .pt = 1, .pl = 1, .pb = 1, .pr = 1};
    run_case(&r, 1);
    run_case(&r, 2);
}

/* The stem pool's vector blocks take max_ps and redo a block with PMAX
 * only where its result holds a NaN: every width 1..40 (blocks cut at
 * each lane, the last column's plain load present or not), NaNs dense
 * (every 5th input: most blocks redone, NaN in the first row of a
 * reduction) or sparse (every 173rd: most blocks plain), 1-3 threads. */
TEST_IMPL(maxpool_3x3_s2_nan_blocks) {
    for (int64_t w = 1; w <= 40; w++) {
        pcase t = {.N = 1, .C = 2 + w % 2, .H = 6 + w % 3, .W = w, .kh = 3, .kw = 3, .sy = 2, .sx = 2, .dy = 1,
                   .dx = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .nan_step = w % 2 ? 5 : 173};
        run_case(&t, 1 + (int)(w % 3));
    }
}

/* Other windows and strides on the generic vector path, and two that stay
 * scalar (stride 3, dilation 2). */
TEST_IMPL(maxpool_windows) {
    static const int64_t widths[] = {17, 40, 71};
    int i = 0;
    for (int64_t kw = 2; kw <= 5; kw++)
        for (int64_t s = 1; s <= 2; s++)
            for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++, i++) {
                pcase t = {.N = 1, .C = 2, .H = 6, .W = widths[wi], .kh = 1 + i % 3, .kw = kw, .sy = 1 + i % 2,
                           .sx = s, .dy = 1, .dx = 1, .pt = i % 2, .pl = kw / 2, .pb = 0, .pr = (i + 1) % 3};
                if (t.pl >= kw) t.pl = kw - 1;
                if (t.pr >= kw) t.pr = kw - 1;
                if (t.pt >= t.kh) t.pt = t.kh - 1;
                run_case(&t, 1 + i % 2);
            }
    pcase s3 = {.N = 1, .C = 2, .H = 9, .W = 70, .kh = 3, .kw = 3, .sy = 3, .sx = 3, .dy = 1, .dx = 1,
                .pt = 1, .pl = 1, .pb = 1, .pr = 1};
    run_case(&s3, 2);
    pcase d2 = {.N = 1, .C = 2, .H = 9, .W = 70, .kh = 3, .kw = 3, .sy = 2, .sx = 2, .dy = 2, .dx = 2,
                .pt = 1, .pl = 1, .pb = 1, .pr = 1};
    run_case(&d2, 1);
}

TEST_LIST(TEST_ENTRY(maxpool_3x3_s2), TEST_ENTRY(maxpool_3x3_s2_nan_blocks), TEST_ENTRY(maxpool_windows))
