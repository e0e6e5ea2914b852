/*
 * test_wino16c.c — Conv tactics 14 and 15 (Winograd F(4x4, 3x3) and
 * F(2x2, 3x3) in NCHW16C, conv_wino16c.c), and 18 / 19 (the same with the
 * tiles split over the threads) against a naive double reference on the LINEAR layout,
 * X (and the residual) reformatted into NCHW16C here and Y back.  Random
 * inputs, both tile sizes; outputs of 1x1 (a lone tile), 3x5, 7x7, 13x11, 14x14 and 56x56
 * (sizes off the 4x4 tile), C and M in 16..144, pads 1, 0 and 2 (the
 * kernel's own geometry), with or without bias, the residual and Relu the
 * kernel applies itself, 1-3 threads; output and workspace NaN-poisoned.
 * Through the op (conv.c): its workspace, prepack and impl on NCHW16C
 * tensors, a fused chain it does not apply itself (per pixel), and the
 * refusals of other layouts.  In an engine, forced (KILN_CPU_BLOCKED=force):
 * reformats inserted around a chain of two tactic-14 convs and none
 * between them, the ONNX result, after a save and load too.  What a build
 * offers (its timing cache): 18 / 19 in place of 14 / 15 at 2 threads where
 * they run split, else 14 / 15.  Tolerance as tactic 6's (test_conv_dw.c).
 */
#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "kiln_int.h"
#include "ops/nn/conv_wino16c.h"
#include "test.h"
#include "test_engine_util.h"
#include "test_ops_util.h"

#include <stdlib.h>
#include <unistd.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uint64_t g_seed = 0x16C3E16CA5EDull;

typedef struct wcase {
    int64_t N, C, M, H, W, pt, pl, pb, pr;
    int bias, res, relu;
} wcase;

/* Y (LINEAR) of the case by the naive sum, residual and Relu; *big: the
 * largest |value|. */
static void reference(const wcase *t, int64_t OH, int64_t OW, const float *x, const float *w, const float *b,
                      const float *r, double *ref, double *big) {
    *big = 0;
    for (int64_t n = 0; n < t->N; n++)
        for (int64_t m = 0; m < t->M; m++)
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    double acc = t->bias ? b[m] : 0.0;
                    for (int64_t c = 0; c < t->C; c++)
                        for (int64_t ky = 0; ky < 3; ky++)
                            for (int64_t kx = 0; kx < 3; kx++) {
                                int64_t iy = oy + ky - t->pt, ix = ox + kx - t->pl;
                                if (iy >= 0 && iy < t->H && ix >= 0 && ix < t->W)
                                    acc += (double)w[((m * t->C + c) * 3 + ky) * 3 + kx] *
                                           x[((n * t->C + c) * t->H + iy) * t->W + ix];
                            }
                    int64_t i = ((n * t->M + m) * OH + oy) * OW + ox;
                    if (t->res) acc += r[i];
                    if (t->relu && acc < 0) acc = 0;
                    ref[i] = acc;
                    if (fabs(acc) > *big) *big = fabs(acc);
                }
}

static void check(const char *what, const wcase *t, int64_t OH, int64_t OW, const float *y16, const double *ref,
                  double big) {
    const int64_t osp = OH * OW, ny = t->N * t->M * osp;
    float *y = test_xmalloc((size_t)ny * sizeof(float));
    for (int64_t n = 0; n < t->N; n++) test_from16c(y16 + n * t->M * osp, t->M, osp, y + n * t->M * osp);
    double atol = 1e-5 * 9;
    if (1e-4 * big > atol) atol = 1e-4 * big;
    test_check_close(what, y, ref, ny, atol); /* NaN (never written) fails too */
    free(y);
}

/* The kernel on its own: every image, the residual and Relu its own;
 * split: tactics 18 / 19's mode (kiln__wino16c.split), which must then
 * run split (`split` 2) or not (1: too few tiles a thread). */
static void kernel_case_split(const wcase *t, int m, int threads, int split) {
    const int64_t OH = t->H + t->pt + t->pb - 2, OW = t->W + t->pl + t->pr - 2, isp = t->H * t->W, osp = OH * OW;
    const int64_t nx = t->N * t->C * isp, ny = t->N * t->M * osp;
    float *x = test_rnd_f32(&g_seed, nx, -1.0f, 1.0f), *w = test_rnd_f32(&g_seed, t->M * t->C * 9, -0.5f, 0.5f);
    float *b = test_rnd_f32(&g_seed, t->M, -0.5f, 0.5f), *r = test_rnd_f32(&g_seed, ny, -1.0f, 1.0f);
    float *x16 = kiln__aligned_alloc((size_t)nx * sizeof(float)), *r16 = kiln__aligned_alloc((size_t)ny * sizeof(float));
    float *y16 = kiln__aligned_alloc((size_t)ny * sizeof(float));
    ASSERT(x16 && r16 && y16);
    for (int64_t n = 0; n < t->N; n++) {
        test_to16c(x + n * t->C * isp, t->C, isp, x16 + n * t->C * isp);
        test_to16c(r + n * t->M * osp, t->M, osp, r16 + n * t->M * osp);
    }
    for (int64_t i = 0; i < ny; i++) y16[i] = NAN;
    size_t pb = kiln__wino16c_pack_bytes(m, t->M, t->C), wsb = kiln__wino_ws_bytes(m, t->C, t->M, OH, OW);
    void *pk = kiln__aligned_alloc(pb);
    float *ws = kiln__aligned_alloc(wsb);
    ASSERT(pk && ws);
    for (size_t i = 0; i < wsb / sizeof(float); i++) ws[i] = NAN;
    ASSERT_OK(kiln__wino16c_pack(m, w, t->M, t->C, pk));
    const float *u = kiln__wino16c_packed(pk, m, t->M, t->C);
    ASSERT(u);
    ASSERT(!kiln__wino16c_packed(pk, m, t->M + 16, t->C));
    ASSERT(!kiln__wino16c_packed(pk, 6 - m, t->M, t->C)); /* the other tile size's */
    ASSERT(!kiln__wino_packed(pk, 0, t->M, t->C)); /* not tactic 6's form */
    kiln__pool *pool = kiln__pool_create(threads);
    ASSERT(pool);
    kiln_exec ex = {.device = KILN_DEVICE_CPU, .pool = pool};
    for (int64_t n = 0; n < t->N; n++) {
        kiln__wino16c p = {.w = {.m = m, .C = t->C, .M = t->M, .H = t->H, .W = t->W, .OH = OH, .OW = OW, .pt = t->pt,
                                 .pl = t->pl, .x = x16 + n * t->C * isp, .u = u, .bias = t->bias ? b : NULL,
                                 .y = y16 + n * t->M * osp, .ws = ws, .exec = &ex},
                           .res = t->res ? r16 + n * t->M * osp : NULL, .relu = t->relu, .split = split > 0};
        if (split) ASSERT_EQ(kiln__wino16c_splits(&p, threads), split - 1);
        kiln__wino16c_run(&p);
    }
    double *ref = test_xmalloc((size_t)ny * sizeof(double)), big;
    reference(t, OH, OW, x, w, b, r, ref, &big);
    char what[200];
    snprintf(what, sizeof what, "wino16c F(%dx%d) N%lld C%lld M%lld %lldx%lld pads %lld,%lld,%lld,%lld%s%s%s, %d threads%s",
             m, m, (long long)t->N, (long long)t->C, (long long)t->M, (long long)t->H, (long long)t->W, (long long)t->pt,
             (long long)t->pl, (long long)t->pb, (long long)t->pr, t->bias ? " bias" : "", t->res ? " residual" : "",
             t->relu ? " relu" : "", threads, split == 2 ? ", split" : split ? ", split asked, not run" : "");
    check(what, t, OH, OW, y16, ref, big);
    kiln__pool_free(pool);
    kiln__aligned_free(pk);
    kiln__aligned_free(ws);
    kiln__aligned_free(x16);
    kiln__aligned_free(r16);
    kiln__aligned_free(y16);
    free(x); free(w); free(b); free(r); free(ref);
}

static void kernel_case(const wcase *t, int m, int threads) { kernel_case_split(t, m, threads, 0); }

TEST_IMPL(wino16c_kernel) {
    static const int64_t sizes[][2] = {{1, 1}, {3, 5}, {7, 7}, {13, 11}, {14, 14}, {56, 56}};
    static const int64_t chans[][2] = {{16, 16}, {32, 64}, {64, 32}, {144, 48}, {16, 144}};
    int i = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (size_t ci = 0; ci < sizeof chans / sizeof chans[0]; ci++, i++) {
            if (sizes[si][0] == 56 && ci > 1) continue; /* (the reference's time) */
            wcase t = {.N = 1 + (i % 4 == 1), .C = chans[ci][0], .M = chans[ci][1], .H = sizes[si][0],
                       .W = sizes[si][1], .pt = 1, .pl = 1, .pb = 1, .pr = 1, .bias = i % 3 != 2,
                       .res = i % 2, .relu = i % 5 < 3};
            kernel_case(&t, 4, 1 + i % 3);
            kernel_case(&t, 2, 1 + (i + 1) % 3);
        }
    /* pads 0 and 2, uneven ones: edges of whole zero pixels on any side */
    wcase p0 = {.N = 1, .C = 32, .M = 16, .H = 10, .W = 9, .bias = 1, .relu = 1};
    kernel_case(&p0, 4, 2);
    kernel_case(&p0, 2, 1);
    wcase p2 = {.N = 1, .C = 16, .M = 32, .H = 6, .W = 11, .pt = 2, .pl = 0, .pb = 2, .pr = 2, .res = 1};
    kernel_case(&p2, 4, 3);
    kernel_case(&p2, 2, 2);
    /* 1 thread on a large plane: blocks of a few tile rows (conv_wino16c's
     * L2-sized blocks), the last one short */
    wcase l2 = {.N = 1, .C = 64, .M = 32, .H = 45, .W = 57, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .bias = 1, .res = 1,
                .relu = 1};
    kernel_case(&l2, 4, 1);
    kernel_case(&l2, 2, 1);
    /* C over the SGEMM's K block, a ResNet layer4 plane */
    wcase big = {.N = 1, .C = 288, .M = 32, .H = 7, .W = 7, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .bias = 1, .res = 1,
                 .relu = 1};
    kernel_case(&big, 4, 2);
    kernel_case(&big, 2, 3);
}

/* Split mode (tactics 18, 19): each thread's share of the tiles in pieces
 * of at most conv_wino16c's L2 chunk, shares and pieces of uneven sizes,
 * a last tile row cut by the share; and where each thread would get too
 * few tiles, or C x M outweighs them, the phases' split instead. */
TEST_IMPL(wino16c_split) {
    /* 56x56 F(4x4): 196 tiles, 98 / 66 a thread, pieces of 64 or fewer */
    wcase a = {.N = 1, .C = 32, .M = 48, .H = 56, .W = 56, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .bias = 1, .res = 1,
               .relu = 1};
    kernel_case_split(&a, 4, 2, 2);
    kernel_case_split(&a, 4, 3, 2);
    /* 28x27 F(2x2), 2 images: 14 x 14 tiles, shares that cut tile rows */
    wcase b = {.N = 2, .C = 16, .M = 16, .H = 28, .W = 27, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .relu = 1};
    kernel_case_split(&b, 2, 2, 2);
    kernel_case_split(&b, 2, 3, 2);
    /* 13x11, pads 0 / 2: 6 x 5 tiles of 2x2 = 30: 15 a thread at 2, too few at 3 */
    wcase c = {.N = 1, .C = 16, .M = 32, .H = 13, .W = 11, .pt = 2, .pl = 0, .pb = 1, .pr = 1, .bias = 1, .res = 1};
    kernel_case_split(&c, 2, 2, 2);
    kernel_case_split(&c, 2, 3, 1);
    /* 14x14 F(2x2) with C = M = 256 (ResNet-50's layer3): 49 tiles against
     * C x M, not split; nor 14x14 F(4x4) (16 tiles); 1 thread never */
    wcase d = {.N = 1, .C = 256, .M = 256, .H = 14, .W = 14, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .bias = 1};
    kernel_case_split(&d, 2, 2, 1);
    kernel_case_split(&d, 4, 2, 1);
    kernel_case_split(&a, 4, 1, 1);
}

/* ---- through the op ------------------------------------------------------- */

static void set_ints(kiln__attrset *a, const char *name, const int64_t *v, int64_t n) {
    kiln_attr_value val = {.type = KILN_ATTR_ARRAY, .present = 1, .elem = KILN_DTYPE_I64, .count = n, .data = v};
    ASSERT_OK(kiln__attrset_set(a, name, &val));
}

/* Conv's impl with tactic 14 or 15 on NCHW16C tensors (workspace and packed W as
 * the engine gets them), 1x1 through 14x14 outputs, bias or none. */
static void op_case(int tactic, int64_t C, int64_t M, int64_t H, int64_t W, int bias, int threads) {
    const kiln__op *op = kiln__registry_find("ai.onnx", "Conv", 1);
    ASSERT(op && op->quick && op->quick->prepack && op->quick->workspace);
    kiln__attrset as;
    ASSERT_OK(kiln__attrset_init(&as, op));
    int64_t one[2] = {1, 1}, pads[4] = {1, 1, 1, 1};
    set_ints(&as, "strides", one, 2);
    set_ints(&as, "dilations", one, 2);
    set_ints(&as, "pads", pads, 4);
    kiln_attrs attrs = kiln__attrset_view(&as);
    wcase t = {.N = 1, .C = C, .M = M, .H = H, .W = W, .pt = 1, .pl = 1, .pb = 1, .pr = 1, .bias = bias};
    const int64_t S = H * W;
    float *x = test_rnd_f32(&g_seed, C * S, -1.0f, 1.0f), *w = test_rnd_f32(&g_seed, M * C * 9, -0.5f, 0.5f);
    float *b = test_rnd_f32(&g_seed, M, -0.5f, 0.5f);
    float *x16 = kiln__aligned_alloc((size_t)(C * S) * sizeof(float)), *y16 = kiln__aligned_alloc((size_t)(M * S) * sizeof(float));
    test_to16c(x, C, S, x16);
    int64_t xd[4] = {1, C, H, W}, wd[4] = {M, C, 3, 3}, bd[1] = {M}, yd[4] = {1, M, H, W};
    kiln_tensor in[3] = {test_tensor_f32(x16, 4, xd), test_tensor_f32(w, 4, wd), test_tensor_f32(b, 1, bd)};
    kiln_tensor out[1] = {test_tensor_f32(y16, 4, yd)};
    in[0].format = out[0].format = KILN_FORMAT_NCHW16C;
    kiln__pool *pool = kiln__pool_create(threads);
    kiln_exec ex = {.device = KILN_DEVICE_CPU, .pool = pool};
    kiln_call c = {.in = in, .nin = bias ? 3 : 2, .out = out, .nout = 1, .attrs = &attrs, .tactic = tactic, .exec = &ex,
                   .layer = "conv16c"};
    size_t wsb = op->quick->workspace(&c), n = 0;
    const int m = tactic == 14 || tactic == 18 ? 4 : 2;
    ASSERT(wsb >= kiln__wino_ws_bytes(m, C, M, H, W));
    void *ws = kiln__aligned_alloc(wsb);
    c.workspace = ws;
    c.workspace_size = wsb;
    /* without its packed W it refuses (never runs another kernel on 16c data) */
    ASSERT_EQ(op->quick->impl(&c), KILN_EUNSUPPORTED);
    kiln_tensor pin[3] = {in[0], in[1], in[2]}, pout[1] = {out[0]};
    pin[0].data = NULL;
    pout[0].data = NULL;
    kiln_call pc = {.in = pin, .nin = c.nin, .out = pout, .nout = 1, .attrs = &attrs, .tactic = tactic};
    ASSERT_OK(op->quick->prepack(&pc, 1, NULL, &n));
    ASSERT_EQ(n, kiln__wino16c_pack_bytes(m, M, C));
    void *blob = kiln__aligned_alloc(n);
    size_t got = n;
    ASSERT_OK(op->quick->prepack(&pc, 1, blob, &got));
    ASSERT_EQ(got, n);
    const void *pp[3] = {NULL, blob, NULL};
    c.prepacked = pp;
    for (int64_t i = 0; i < M * S; i++) y16[i] = NAN;
    ASSERT_OK(op->quick->impl(&c));
    double *ref = test_xmalloc((size_t)(M * S) * sizeof(double)), big;
    reference(&t, H, W, x, w, b, NULL, ref, &big);
    char what[120];
    snprintf(what, sizeof what, "Conv tactic %d C%lld M%lld %lldx%lld%s, %d threads", tactic, (long long)C, (long long)M,
             (long long)H, (long long)W, bias ? " bias" : "", threads);
    check(what, &t, H, W, y16, ref, big);
    /* a LINEAR X is refused */
    in[0].format = KILN_FORMAT_LINEAR;
    ASSERT_EQ(op->quick->impl(&c), KILN_EUNSUPPORTED);
    kiln__pool_free(pool);
    kiln__aligned_free(blob);
    kiln__aligned_free(ws);
    kiln__aligned_free(x16);
    kiln__aligned_free(y16);
    kiln__attrset_free(&as);
    free(x); free(w); free(b); free(ref);
}

TEST_IMPL(wino16c_op) {
    static const int tactics[] = {14, 15, 18, 19};
    for (int ti = 0; ti < 4; ti++) {
        const int tactic = tactics[ti];
        op_case(tactic, 16, 32, 1, 1, 1, 1);
        op_case(tactic, 32, 16, 3, 5, 0, 2);
        op_case(tactic, 48, 64, 14, 14, 1, 3);
        op_case(tactic, 64, 64, 7, 7, 0, 2);
        op_case(tactic, 16, 32, 28, 28, 1, 2); /* 18 / 19: split */
    }
}

/* ---- in an engine ------------------------------------------------------- */

static void run_engine(const kiln_engine *e, int threads, const float *x, int64_t nx, float *y, int64_t ny) {
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, threads, &ctx));
    ASSERT_OK(kiln_context_bind(ctx, "X", (void *)x, (size_t)nx * sizeof(float)));
    for (int64_t i = 0; i < ny; i++) y[i] = NAN;
    ASSERT_OK(kiln_context_bind(ctx, "Y", y, (size_t)ny * sizeof(float)));
    if (kiln_context_run(ctx)) TEST__FAIL("run: %s", kiln_errmsg());
    kiln_context_free(ctx);
}

static int count(const char *s, const char *what) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p++) n++;
    return n;
}

/* net (freed) built with KILN_CPU_BLOCKED=force; its inspect text must hold
 * nconv convs of tactic 14, 15, 18 or 19, two reformats and each of `want`
 * (NULL-terminated). */
static kiln_engine *build_forced(kiln_network *net, int threads, int nconv, const char *const *want) {
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_build_stats st;
    kiln_engine *e = test_build_forced16c(net, 0, threads, &st);
    kiln_network_free(net);
    char *txt = test_inspect_text(e);
    int ok = count(txt, "tactic 14") + count(txt, "tactic 15") + count(txt, "tactic 18") + count(txt, "tactic 19") ==
                 nconv &&
             count(txt, "kiln::reformat") == 2;
    for (int i = 0; want[i]; i++) ok = ok && strstr(txt, want[i]);
    if (!ok) TEST__FAIL("expected %d convs of tactic 14 or 15, two reformats%s%s:\n%s", nconv,
                        want[0] ? " and " : "", want[0] ? want[0] : "", txt);
    free(txt);
    return e;
}

/* e run on x into Y (ny floats) against ref, then saved and loaded and run
 * at the other thread count; then with its convs forced to the other mode
 * (14 <-> 18, 15 <-> 19: the split one at 2 threads runs split where the
 * plane has the tiles, conv_a's chain per pixel of its tiles too). */
static void check_engine(const char *what, kiln_engine *e, int threads, const float *x, int64_t nx, float *y,
                         int64_t ny, const double *ref) {
    double big = 0;
    for (int64_t i = 0; i < ny; i++) big = fabs(ref[i]) > big ? fabs(ref[i]) : big;
    const double atol = 1e-4 * big > 1e-4 ? 1e-4 * big : 1e-4;
    run_engine(e, threads, x, nx, y, ny);
    test_check_close(what, y, ref, ny, atol);
    kiln_engine *e2 = test_roundtrip(e);
    run_engine(e2, 3 - threads % 2, x, nx, y, ny);
    test_check_close(what, y, ref, ny, atol);
    kiln_engine_free(e2);
    for (int32_t l = 0; l < e->nlayers; l++) {
        const int t = e->layers[l].tactic;
        if (!strcmp(e->layers[l].op->name, "Conv") && t >= 14 && t != 16 && t != 17)
            ASSERT_OK(test_force_tactic(e, l, t == 14 ? 18 : t == 15 ? 19 : t - 4));
    }
    run_engine(e, 2, x, nx, y, ny);
    test_check_close(what, y, ref, ny, atol);
    kiln_engine_free(e);
}

/* X -> conv_a (3x3, bias) -> conv_b (3x3, no bias) -> Y, C -> M -> M
 * channels, both forced into NCHW16C: tactic 14 or 15 on both, one
 * reformat in front and one behind. */
static void engine_case(int64_t N, int64_t C, int64_t M, int64_t H, int64_t W, int leaky, int threads) {
    const int64_t nx = N * C * H * W, ny = N * M * H * W;
    float *x = test_rnd_f32(&g_seed, nx, -1.0f, 1.0f), *wa = test_rnd_f32(&g_seed, M * C * 9, -0.3f, 0.3f);
    float *wb = test_rnd_f32(&g_seed, M * M * 9, -0.3f, 0.3f), *ba = test_rnd_f32(&g_seed, M, -0.5f, 0.5f);
    kiln_network *net = kiln_network_create();
    int64_t xd[4] = {N, C, H, W}, wad[4] = {M, C, 3, 3}, wbd[4] = {M, M, 3, 3}, bd[1] = {M}, pads[4] = {1, 1, 1, 1};
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "Wa", KILN_DTYPE_F32, 4, wad, wa));
    ASSERT_OK(kiln_network_add_constant(net, "Wb", KILN_DTYPE_F32, 4, wbd, wb));
    ASSERT_OK(kiln_network_add_constant(net, "Ba", KILN_DTYPE_F32, 1, bd, ba));
    const char *ia[3] = {"X", "Wa", "Ba"}, *ib[2] = {"A", "Wb"}, *oa[1] = {leaky ? "A0" : "A"}, *ob[1] = {"Y"};
    const char *il[1] = {"A0"}, *ol[1] = {"A"};
    kiln_layer *la = kiln_network_add_layer(net, "ai.onnx::Conv", 11, "conv_a", 3, ia, 1, oa);
    ASSERT(la);
    if (leaky) { /* fused into conv_a: a chain the kernel runs per pixel */
        kiln_layer *ll = kiln_network_add_layer(net, "ai.onnx::LeakyRelu", 6, "leaky", 1, il, 1, ol);
        ASSERT(ll);
        ASSERT_OK(kiln_layer_set_float(ll, "alpha", 0.125));
    }
    kiln_layer *lb = kiln_network_add_layer(net, "ai.onnx::Conv", 11, "conv_b", 2, ib, 1, ob);
    ASSERT(lb);
    ASSERT_OK(kiln_layer_set_ints(la, "pads", pads, 4));
    ASSERT_OK(kiln_layer_set_ints(lb, "pads", pads, 4));
    kiln_engine *e = build_forced(net, threads, 2,
                                  (const char *const[]){leaky ? "'conv_a' ai.onnx::Conv v1 + LeakyRelu" : NULL, NULL});
    /* reference: the two convs in double */
    test_conv_geo ga = {N, C, M, 1, {1, H, W}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}, {1, H, W}};
    test_conv_geo gb = ga;
    gb.C = M;
    double *a = test_xmalloc((size_t)ny * sizeof(double)), *ref = test_xmalloc((size_t)ny * sizeof(double));
    float *af = test_xmalloc((size_t)ny * sizeof(float)), *y = test_xmalloc((size_t)ny * sizeof(float));
    test_conv_ref(&ga, x, wa, ba, a);
    for (int64_t i = 0; i < ny; i++) af[i] = (float)(leaky && a[i] < 0 ? 0.125 * a[i] : a[i]);
    test_conv_ref(&gb, af, wb, NULL, ref);
    char what[120];
    snprintf(what, sizeof what, "engine N%lld C%lld M%lld %lldx%lld, %d threads", (long long)N, (long long)C,
             (long long)M, (long long)H, (long long)W, threads);
    check_engine(what, e, threads, x, nx, y, ny, ref);
    free(x); free(wa); free(wb); free(ba); free(a); free(ref); free(af); free(y);
}

/* A residual block, forced into NCHW16C: R = Relu(conv_0(X)), Y =
 * Relu(conv_b(Relu(conv_a(R))) + R), C channels throughout (the skip from
 * a 16c conv: fuse.c folds a residual Add only where R arrives in the
 * conv's layout, builder/select.c fuses_into).  The Relus and the Add (same-shape, C % 16
 * == 0: kiln__ops_ew16c_formats) take NCHW16C too, so they fuse into
 * the convs as in LINEAR ("Conv + Relu", "Conv + Add + Relu": the kernel's
 * own residual and Relu) and only X and Y are reformatted. */
static void block_case(int64_t N, int64_t C, int64_t H, int64_t W, int threads) {
    const int64_t n = N * C * H * W;
    float *x = test_rnd_f32(&g_seed, n, -1.0f, 1.0f), *wa = test_rnd_f32(&g_seed, C * C * 9, -0.2f, 0.2f);
    float *wb = test_rnd_f32(&g_seed, C * C * 9, -0.2f, 0.2f), *ba = test_rnd_f32(&g_seed, C, -0.5f, 0.5f);
    float *bb = test_rnd_f32(&g_seed, C, -0.5f, 0.5f), *w0 = test_rnd_f32(&g_seed, C * C * 9, -0.2f, 0.2f);
    kiln_network *net = kiln_network_create();
    int64_t xd[4] = {N, C, H, W}, wd[4] = {C, C, 3, 3}, bd[1] = {C}, pads[4] = {1, 1, 1, 1};
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "Wa", KILN_DTYPE_F32, 4, wd, wa));
    ASSERT_OK(kiln_network_add_constant(net, "Wb", KILN_DTYPE_F32, 4, wd, wb));
    ASSERT_OK(kiln_network_add_constant(net, "Ba", KILN_DTYPE_F32, 1, bd, ba));
    ASSERT_OK(kiln_network_add_constant(net, "Bb", KILN_DTYPE_F32, 1, bd, bb));
    ASSERT_OK(kiln_network_add_constant(net, "W0", KILN_DTYPE_F32, 4, wd, w0));
    struct { const char *op, *name; int nin; const char *in[3], *out; } L[] = {
        {"ai.onnx::Conv", "conv_0", 2, {"X", "W0"}, "Z"}, {"ai.onnx::Relu", "relu_0", 1, {"Z"}, "R"},
        {"ai.onnx::Conv", "conv_a", 3, {"R", "Wa", "Ba"}, "A"}, {"ai.onnx::Relu", "relu_a", 1, {"A"}, "RA"},
        {"ai.onnx::Conv", "conv_b", 3, {"RA", "Wb", "Bb"}, "B"}, {"ai.onnx::Add", "add", 2, {"B", "R"}, "S"},
        {"ai.onnx::Relu", "relu", 1, {"S"}, "Y"}};
    for (size_t i = 0; i < sizeof L / sizeof L[0]; i++) {
        kiln_layer *l = kiln_network_add_layer(net, L[i].op, L[i].op[9] == 'C' ? 11 : 14, L[i].name, L[i].nin,
                                               L[i].in, 1, &L[i].out);
        ASSERT(l);
        if (L[i].op[9] == 'C') ASSERT_OK(kiln_layer_set_ints(l, "pads", pads, 4));
    }
    kiln_engine *e = build_forced(
        net, threads, 3,
        (const char *const[]){"'conv_0' ai.onnx::Conv v1 + Relu", "'conv_a' ai.onnx::Conv v1 + Relu", "'conv_b' ai.onnx::Conv v1 + Add + Relu", NULL});
    /* conv_b (read R last) writes Y's NCHW16C variant over R (builder/emit.c residual_inplace) */
    const int cb = test_last_op(e, "Conv");
    ASSERT(cb >= 0 && e->layers[cb].nepi == 2);
    ASSERT_EQ(e->tensors[e->layers[cb].out[0]].alias_of, e->layers[cb].in[3]);
    test_conv_geo g = {N, C, C, 1, {1, H, W}, {1, 3, 3}, {1, 1, 1}, {0, 1, 1}, {1, 1, 1}, {1, H, W}};
    double *a = test_xmalloc((size_t)n * sizeof(double)), *ref = test_xmalloc((size_t)n * sizeof(double));
    float *af = test_xmalloc((size_t)n * sizeof(float)), *y = test_xmalloc((size_t)n * sizeof(float));
    float *r = test_xmalloc((size_t)n * sizeof(float));
    test_conv_ref(&g, x, w0, NULL, a);
    for (int64_t i = 0; i < n; i++) r[i] = a[i] > 0 ? (float)a[i] : 0.0f;
    test_conv_ref(&g, r, wa, ba, a);
    for (int64_t i = 0; i < n; i++) af[i] = a[i] > 0 ? (float)a[i] : 0.0f;
    test_conv_ref(&g, af, wb, bb, ref);
    for (int64_t i = 0; i < n; i++) ref[i] = ref[i] + r[i] > 0 ? ref[i] + r[i] : 0;
    char what[120];
    snprintf(what, sizeof what, "residual block N%lld C%lld %lldx%lld, %d threads", (long long)N, (long long)C,
             (long long)H, (long long)W, threads);
    check_engine(what, e, threads, x, n, y, n, ref);
    free(x); free(wa); free(wb); free(ba); free(bb); free(w0); free(r); free(a); free(ref); free(af); free(y);
}

TEST_IMPL(wino16c_engine) {
    engine_case(1, 16, 32, 9, 10, 0, 1);
    engine_case(2, 32, 16, 14, 14, 0, 2);
    engine_case(1, 48, 48, 3, 2, 0, 2);
    engine_case(1, 32, 32, 11, 13, 1, 2);
    engine_case(2, 16, 16, 6, 5, 1, 1);
    block_case(1, 32, 10, 9, 1);
    block_case(2, 16, 7, 7, 2);
    /* planes with the tiles for split mode at 2 threads (check_engine's
     * forced 18 / 19): a chain per pixel, a residual block */
    engine_case(1, 16, 16, 28, 28, 1, 2);
    block_case(1, 16, 24, 24, 2);
}

/* ---- what a build offers ------------------------------------------------- */

/* Bit t set for each tactic the build timed in the NCHW16C row of the conv
 * whose W is `wdims` (cache lines "ms key|tactic=t"). */
static unsigned timed_16c(const char *cache, const char *wdims) {
    unsigned got = 0;
    for (const char *l = cache; *l;) {
        const char *e = strchr(l, '\n');
        if (!e) e = l + strlen(l);
        const char *tac = strstr(l, "|tactic="), *row = strstr(l, " [NCHW16C,LINEAR,"),
                   *w = strstr(l, wdims);
        if (tac && tac < e && row && row < e && w && w < e) got |= 1u << atoi(tac + 8);
        l = *e ? e + 1 : e;
    }
    return got;
}

/* The whole file at path (NUL-terminated, malloc'd). */
static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    ASSERT(f);
    ASSERT_OK(fseek(f, 0, SEEK_END));
    const long n = ftell(f);
    ASSERT(n >= 0);
    rewind(f);
    char *s = test_xmalloc((size_t)n + 1);
    ASSERT_EQ(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = 0;
    fclose(f);
    return s;
}

/* A build at 2+ threads offers 18 (19) in place of 14 (15) where split mode
 * runs at its thread count, and 14 (15) alone where it would not (the same
 * kernel there); at 1 thread 14 and 15.  Read from the timing cache the
 * build writes: every candidate it timed. */
TEST_IMPL(wino16c_offers) {
    for (int threads = 1; threads <= 2; threads++) {
        /* 28x28, 16 -> 16 (split at 2 threads for both tile sizes); 14x14,
         * 256 -> 256 (F(4x4): 16 tiles; F(2x2): 49 against C x M: neither) */
        kiln_network *net = kiln_network_create();
        int64_t xd[4] = {1, 16, 28, 28}, wad[4] = {16, 16, 3, 3}, pd[4] = {1, 1, 1, 1};
        int64_t zd[4] = {1, 256, 14, 14}, wbd[4] = {256, 256, 3, 3};
        float *wa = test_rnd_f32(&g_seed, 16 * 16 * 9, -0.3f, 0.3f), *wb = test_rnd_f32(&g_seed, 256 * 256 * 9, -0.1f, 0.1f);
        ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL));
        ASSERT_OK(kiln_network_add_input(net, "Z", KILN_DTYPE_F32, 4, zd, NULL));
        ASSERT_OK(kiln_network_add_constant(net, "Wa", KILN_DTYPE_F32, 4, wad, wa));
        ASSERT_OK(kiln_network_add_constant(net, "Wb", KILN_DTYPE_F32, 4, wbd, wb));
        const char *ia[2] = {"X", "Wa"}, *ib[2] = {"Z", "Wb"}, *oa[1] = {"Y"}, *ob[1] = {"V"};
        kiln_layer *la = kiln_network_add_layer(net, "ai.onnx::Conv", 11, "conv_a", 2, ia, 1, oa);
        kiln_layer *lb = kiln_network_add_layer(net, "ai.onnx::Conv", 11, "conv_b", 2, ib, 1, ob);
        ASSERT(la && lb);
        ASSERT_OK(kiln_layer_set_ints(la, "pads", pd, 4));
        ASSERT_OK(kiln_layer_set_ints(lb, "pads", pd, 4));
        ASSERT_OK(kiln_network_mark_output(net, "Y"));
        ASSERT_OK(kiln_network_mark_output(net, "V"));
        char path[512];
        snprintf(path, sizeof path, "%s/b1_wino16c_offers_%d_%ld.txt", KILN_BINARY_DIR, threads, (long)getpid());
        remove(path);
        kiln_build_config *cfg = test_build_config(0, threads);
        ASSERT_OK(kiln_build_config_set_timing_cache(cfg, path));
        ASSERT_OK(setenv("KILN_CPU_BLOCKED", "force", 1));
        kiln_engine *e = NULL;
        const int rc = kiln_build(net, cfg, &e, NULL);
        unsetenv("KILN_CPU_BLOCKED");
        if (rc) TEST__FAIL("build: %s", kiln_errmsg());
        kiln_build_config_free(cfg);
        kiln_network_free(net);
        char *cache = read_text(path);
        const unsigned a = timed_16c(cache, "[16x16x3x3]"), b = timed_16c(cache, "[256x256x3x3]");
        const unsigned split = 1u << 18 | 1u << 19, whole = 1u << 14 | 1u << 15;
        if (a != (threads == 1 ? whole : split) || b != whole)
            TEST__FAIL("%d threads: the 16c rows timed tactics 0x%x (28x28) and 0x%x (14x14, 256 channels):\n%s",
                       threads, a, b, cache);
        free(cache);
        remove(path);
        kiln_engine_free(e);
        free(wa);
        free(wb);
    }
}

TEST_LIST(TEST_ENTRY(wino16c_kernel), TEST_ENTRY(wino16c_split), TEST_ENTRY(wino16c_op), TEST_ENTRY(wino16c_engine),
          TEST_ENTRY(wino16c_offers))
