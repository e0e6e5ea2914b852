/*
 * test_conv_tactics.c — the Conv tactics the builder times: each kernel
 * once.  On many convs several CPU tactics run the same code (auto, direct
 * and depthwise fall back to the padded GEMM on a dense conv; on a 1x1
 * conv auto, direct, depthwise and the padded GEMM all run the GEMM that
 * reads X in place or packs it); of those the builder keeps auto, its
 * first candidate (what a build without timing runs).  The builder's verbose log lists each
 * candidate it weighed; the sets expected here are worked out by hand from
 * the kernels conv.c documents, not from its code.  A tactic left out of
 * the timed set stays valid in an engine file (engines written before
 * chose them): forced on the built engine, serialized and loaded back, it
 * (and every timed one: 9, the compact padded GEMM, among them) runs and matches a naive reference at 1, 2 and 3 threads, output
 * poisoned; a dense conv's with the same bits at every thread count (the
 * padded GEMM's column blocks depend on it; every element's sum must not),
 * except the split over K (11), whose partial sums follow the threads, and
 * Winograd's split mode (21, 22), whose GEMMs' columns (a thread's piece
 * of tiles) and so their edge strips do.
 */
#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "device/cpu/sgemm.h"
#include "kiln_int.h"
#include "ops/nn/conv_dwrows.h"
#include "test.h"
#include "test_ops_util.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uint64_t g_seed = 0x7AC71C5C0417E5EDull;

/* One conv: X 1 x C x H x W, W M x C/G x k x k, stride s, pads p. */
typedef struct tcase {
    const char *what;
    int64_t C, M, G, H, W, k, s, p;
    unsigned timed;   /* bit t: tactic t is a candidate the builder weighs (one bit: its only candidate, taken untimed) */
    unsigned dropped; /* tactics left out of that set, checked to load and run */
} tcase;

#define B(t) (1u << (t))
static const tcase g_cases[] = {
    /* dense 3x3 stride 1: auto (the padded GEMM, which 3/4/5 run too),
     * im2col GEMM 2, the padded GEMM with packed B 8 or compact B 9,
     * Winograd 6 (4x4 tiles) and 10 (2x2 tiles) */
    {"dense 3x3", 16, 24, 1, 13, 11, 3, 1, 1, B(1) | B(2) | B(6) | B(8) | B(9) | B(10) | B(21) | B(22),
     B(3) | B(4) | B(5)},
    /* Winograd over several lane groups of 16 tiles a channel, groups that
     * start in one tile row and end in the next (18 tiles a row, 8 rows:
     * the transforms' prefetch of the group two ahead, and of the next
     * channel's first groups, walks every case) */
    {"dense 3x3, 144 tiles", 20, 24, 1, 30, 70, 3, 1, 1, B(1) | B(2) | B(8) | B(9) | B(21) | B(22),
     B(3) | B(4) | B(5) | B(6) | B(10)},
    /* Winograd's split mode (21, 22) in several pieces a band: 16 tile
     * rows of 16 tiles, pieces of 4 rows (64 tiles), bands of 8 rows at 2
     * threads and of 5-6 at 3 (a short last piece); channels not multiples
     * of 16 (no NCHW16C row).  V and the products outweigh U, so a
     * 2-thread build weighs 21 and 22 in 6's and 10's place. */
    {"dense 3x3, split pieces", 60, 52, 1, 64, 64, 3, 1, 1, B(1) | B(2) | B(8) | B(9) | B(21) | B(22),
     B(3) | B(4) | B(5) | B(6) | B(10)},
    /* dense 3x3 stride 2: no Winograd (a 9 x 8 output: above 64 pixels) */
    {"dense 3x3 stride 2", 16, 20, 1, 17, 16, 3, 2, 1, B(1) | B(2) | B(8) | B(9), B(3) | B(4) | B(5)},
    /* strided, 64 output pixels or fewer (ResNet's layer4.0 3x3/2): tactic
     * 9 alone is weighed; the others still load and run.  7 x 7 outputs
     * (49 columns: a strip of 32 and one of 17) from 13 x 14 and (pads 0)
     * 15 x 16 inputs, odd channel counts (K of 256 or more: smaller convs
     * keep every candidate), 8 x 8 (64) from 16 x 15 */
    {"3x3 stride 2 to 7x7", 37, 53, 1, 13, 14, 3, 2, 1, B(9), B(1) | B(2) | B(3) | B(4) | B(5) | B(8)},
    {"3x3 stride 2 to 7x7, no pads", 31, 29, 1, 15, 16, 3, 2, 0, B(9), B(1) | B(2) | B(3) | B(4) | B(5) | B(8)},
    {"3x3 stride 2 to 8x8", 29, 14, 1, 16, 15, 3, 2, 1, B(9), B(1) | B(2) | B(3) | B(4) | B(5) | B(8)},
    {"3x3 stride 2 to 7x7, K 252", 28, 14, 1, 13, 13, 3, 2, 1, B(1) | B(2) | B(8) | B(9), B(3) | B(4) | B(5)},
    /* and K of 9 blocks (229 x 9 = 2061): tactic 9 splits K at 2 and 3 threads */
    {"3x3 stride 2 to 7x7, split over K", 229, 37, 1, 13, 13, 3, 2, 1, B(9), B(1) | B(2) | B(3) | B(4) | B(5) | B(8)},
    /* odd input width: the phase rows' even and odd columns end one
     * apart, every row in the deinterleave's masked tail (19 and 18) */
    {"dense 3x3 stride 2, odd width", 8, 12, 1, 9, 37, 3, 2, 1, B(1) | B(2) | B(8) | B(9), B(3) | B(4) | B(5)},
    /* both column phases of a row in one pass (pad_channels): pads of 2
     * (lanes before the row masked), an odd height and width, three
     * 16-column steps a plane row (37 wide: the last one 5 columns) */
    {"5x5 stride 2, pads 2, odd sizes", 7, 13, 1, 23, 71, 5, 2, 2, B(1) | B(2) | B(8) | B(9), B(3) | B(4) | B(5)},
    /* a 7x7 output (ResNet's layer4): 49 of the grid's 63 columns */
    {"dense 3x3 7x7", 40, 52, 1, 7, 7, 3, 1, 1, B(1) | B(2) | B(6) | B(8) | B(9) | B(10) | B(21) | B(22),
     B(3) | B(4) | B(5)},
    /* a grid of 40 x 46 columns for 64 rows: the padded GEMM in column
     * blocks, as many for each thread */
    {"dense 3x3 stride 2, blocks", 8, 64, 1, 80, 90, 3, 2, 1, B(1) | B(2) | B(8) | B(9), B(3) | B(4) | B(5)},
    /* 1x1 up to 64 output channels: auto reads X in place (as 3/4/5 do), 2 packs it */
    {"pointwise 40", 32, 40, 1, 9, 10, 1, 1, 0, B(1) | B(2), B(3) | B(4) | B(5)},
    /* above 64 output channels auto (and 3/5) packs X, as 2 does; 4 reads it in place */
    {"pointwise 80", 24, 80, 1, 7, 9, 1, 1, 0, B(1) | B(4), B(2) | B(3) | B(5)},
    /* 1x1 over 2 K blocks and 7 channels: the split over K (11), rows
     * split (M = 37, 55 columns) at 2 and 3 threads */
    {"pointwise 519 channels", 519, 37, 1, 5, 11, 1, 1, 0, B(1) | B(2) | B(11), B(3) | B(4) | B(5)},
    /* strided 1x1 (ResNet's downsamples): tactic 9 alone is weighed (its
     * phase plane is the output grid); the others still load and run: odd
     * sizes, 37 output channels, 8 x 7 and (pads 1) 9 x 8 outputs */
    {"1x1 stride 2", 19, 37, 1, 15, 13, 1, 2, 0, B(9), B(1) | B(2) | B(3) | B(4) | B(5) | B(8)},
    {"1x1 stride 2, pads", 21, 37, 1, 15, 13, 1, 2, 1, B(9), B(1) | B(2) | B(3) | B(4) | B(5) | B(8)},
    /* few input channels (12, conv_fewc.c): a stem-like 7x7/2 with odd
     * sizes, 20 output channels (packed blocks of 16 and 4, run as tiles of
     * 8, 8 and 4), 16 output rows (two bands of 8) and 19 columns (a vector
     * and a tail of 3) */
    {"stem 7x7 stride 2", 3, 20, 1, 31, 37, 7, 2, 3, B(1) | B(2) | B(8) | B(9) | B(12), B(3) | B(4) | B(5)},
    /* 4 channels (its largest), 3x3 stride 1: 9 rows (a band of 1), 19
     * columns, beside Winograd */
    {"4 channels 3x3", 4, 17, 1, 9, 19, 3, 1, 1, B(1) | B(2) | B(8) | B(9) | B(12) | B(21) | B(22),
     B(3) | B(4) | B(5) | B(6) | B(10)},
    /* blocks of at most 8 channels (conv_fewc.c's tile8: 8 channels x up
     * to 3 vectors of 16 columns): PP-OCR's 3 -> 8 3x3/2 with an odd
     * width (51 columns: 4 vectors, tiles of 2 and 2, the last 3 wide), 16 + 8 channels
     * from a 5x5 (38 columns: 3 vectors, the last 6 wide), 5 channels
     * unpadded (34 columns), 7 channels of 23 columns (2 vectors) */
    {"stem 3 -> 8 3x3 stride 2, odd width", 3, 8, 1, 13, 101, 3, 2, 1, B(1) | B(2) | B(8) | B(9) | B(12),
     B(3) | B(4) | B(5)},
    {"stem 3 -> 24 5x5 stride 2, pads 2", 3, 24, 1, 19, 75, 5, 2, 2, B(1) | B(2) | B(8) | B(9) | B(12),
     B(3) | B(4) | B(5)},
    {"stem 2 -> 5 3x3 stride 2, no pads", 2, 5, 1, 11, 69, 3, 2, 0, B(1) | B(2) | B(8) | B(9) | B(12),
     B(3) | B(4) | B(5)},
    {"stem 3 -> 7 3x3 stride 2, 23 columns", 3, 7, 1, 17, 45, 3, 2, 1, B(1) | B(2) | B(8) | B(9) | B(12),
     B(3) | B(4) | B(5)},
    /* depthwise: auto is 5; direct, GEMM, padded GEMM, rows (7) differ */
    {"depthwise 3x3", 8, 8, 8, 12, 12, 3, 1, 1, B(1) | B(2) | B(3) | B(4) | B(7), B(5)},
};

typedef struct seen {
    unsigned tactics;
} seen;

/* "layer 'conv': candidate [..] LINEAR tactic N: ..." */
static void log_fn(void *ud, kiln_log_level level, const char *msg) {
    (void)level;
    seen *s = ud;
    const char *c = strstr(msg, "layer 'conv': candidate ");
    const char *t = c ? strstr(c, " tactic ") : NULL;
    int n;
    if (t && sscanf(t, " tactic %d", &n) == 1 && n >= 0 && n < 32) s->tactics |= 1u << n;
}

static void tactics_text(unsigned m, char *buf, size_t size) {
    size_t at = 0;
    buf[0] = 0;
    for (int t = 0; t < 32 && at < size; t++)
        if (m >> t & 1) at += (size_t)snprintf(buf + at, size - at, "%s%d", at ? "," : "", t);
}

static void run_case(const tcase *t) {
    const int64_t Cg = t->C / t->G, OH = (t->H + 2 * t->p - t->k) / t->s + 1, OW = (t->W + 2 * t->p - t->k) / t->s + 1;
    const int64_t nx = t->C * t->H * t->W, nw = t->M * Cg * t->k * t->k, ny = t->M * OH * OW;
    float *x = test_rnd_f32(&g_seed, nx, -1.0f, 1.0f), *w = test_rnd_f32(&g_seed, nw, -1.0f, 1.0f);
    float *b = test_rnd_f32(&g_seed, t->M, -0.5f, 0.5f), *y = test_xmalloc((size_t)ny * sizeof(float));
    float *y1 = test_xmalloc((size_t)ny * sizeof(float));
    double *ref = test_xmalloc((size_t)ny * sizeof(double));
    int64_t in[2] = {t->H, t->W}, k[2] = {t->k, t->k}, s[2] = {t->s, t->s}, d[2] = {1, 1}, pb[2] = {t->p, t->p};
    int64_t o[2] = {OH, OW};
    test_conv_geo geo = test_conv_geo_make(1, t->C, t->M, t->G, 2, in, k, s, d, pb, o);
    test_conv_ref(&geo, x, w, b, ref);

    kiln_network *net = kiln_network_create();
    ASSERT(net);
    int64_t xd[4] = {1, t->C, t->H, t->W}, wd[4] = {t->M, Cg, t->k, t->k}, bd[1] = {t->M};
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "W", KILN_DTYPE_F32, 4, wd, w));
    ASSERT_OK(kiln_network_add_constant(net, "B", KILN_DTYPE_F32, 1, bd, b));
    const char *cin[3] = {"X", "W", "B"}, *cout[1] = {"Y"};
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::Conv", 11, "conv", 3, cin, 1, cout);
    if (!l) TEST__FAIL("add_layer Conv: %s", kiln_errmsg());
    int64_t p[4] = {t->p, t->p, t->p, t->p};
    ASSERT_OK(kiln_layer_set_ints(l, "strides", s, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "pads", p, 4));
    ASSERT_OK(kiln_layer_set_int(l, "group", t->G));
    ASSERT_OK(kiln_network_mark_output(net, "Y"));

    /* timed build: the candidates it weighs */
    seen sn = {0};
    kiln_log_set(KILN_LOG_VERBOSE, log_fn, &sn);
    kiln_engine *e = test_build_ok(net, 0, 2, NULL);
    /* a 1-thread build leaves out 11 (auto's kernel at 1 thread) and 21
     * and 22 (6 and 10 there, which it weighs in their place) */
    const unsigned multi = B(11) | B(21) | B(22);
    seen sn1 = {0};
    if (t->timed & multi) {
        kiln_log_set(KILN_LOG_VERBOSE, log_fn, &sn1);
        kiln_engine_free(test_build_ok(net, 0, 1, NULL));
    }
    kiln_log_set(KILN_LOG_WARN, NULL, NULL);
    kiln_network_free(net);
    unsigned want = t->timed;
    if (!kiln__dwrows_fits(t->s, t->k)) want &= ~B(7); /* (an AVX-512 kernel) */
    if (!kiln__dwrows_fits(1, 3)) want &= ~B(12);      /* (so is 12: a build without AVX-512) */
    if (sn.tactics != (want & (want - 1) ? want : 0)) {
        char got[64], exp[64];
        tactics_text(sn.tactics, got, sizeof got);
        tactics_text(want, exp, sizeof exp);
        TEST__FAIL("%s: the builder weighed tactics {%s}, expected {%s}", t->what, got, exp);
    }
    ASSERT(want >> e->layers[0].tactic & 1);
    if (t->timed & multi) {
        const unsigned want1 = (want & ~multi) | (want >> 21 & 1 ? B(6) : 0) | (want >> 22 & 1 ? B(10) : 0);
        if (sn1.tactics != (want1 & (want1 - 1) ? want1 : 0)) {
            char got[64], exp[64];
            tactics_text(sn1.tactics, got, sizeof got);
            tactics_text(want1, exp, sizeof exp);
            TEST__FAIL("%s: a 1-thread build weighed tactics {%s}, expected {%s}", t->what, got, exp);
        }
    }

    /* tactic 9 on an output of <= 64 pixels and K of >= 8 blocks splits K
     * at >= 2 threads (conv_padcompact): its sums' order then differs */
    const int64_t oh = (t->H + 2 * t->p - t->k) / t->s + 1, ow = (t->W + 2 * t->p - t->k) / t->s + 1;
    const int ksplit9 = oh * ow <= 64 && Cg * t->k * t->k >= 8 * kiln__sgemm_kc();
    /* the chosen tactic, then every other, through a saved engine */
    for (int tac = 0; tac < 32; tac++) {
        if (tac && !((t->dropped | want) >> tac & 1)) continue;
        if (tac) ASSERT_OK(test_force_tactic(e, 0, tac));
        kiln_engine *e2 = test_roundtrip(e);
        ASSERT_EQ(e2->layers[0].tactic, tac ? tac : e->layers[0].tactic);
        for (int threads = 1; threads <= 3; threads++) {
            test_run_xy(e2, threads, 1, x, nx, y, ny, tac);
            char what[96];
            snprintf(what, sizeof what, "%s, tactic %d, %d thread(s)", t->what, e2->layers[0].tactic, threads);
            test_check_close(what, y, ref, ny, 1e-5 * (double)(Cg * t->k * t->k));
            if (threads == 1) memcpy(y1, y, (size_t)ny * sizeof(float));
            else if (t->G == 1 && !(multi >> e2->layers[0].tactic & 1) && !(ksplit9 && e2->layers[0].tactic == 9) &&
                     memcmp(y1, y, (size_t)ny * sizeof(float)))
                TEST__FAIL("%s: not the bits of 1 thread", what);
        }
        kiln_engine_free(e2);
    }
    kiln_engine_free(e);
    free(x);
    free(w);
    free(b);
    free(y);
    free(y1);
    free(ref);
}

TEST_IMPL(conv_tactics_each_kernel_once) {
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) run_case(&g_cases[i]);
}

/* A kernel's per-thread scratch out of memory fails the run with a message
 * naming it; it never returns success with Y unwritten.  The run is on a
 * fresh thread (no scratch yet) after a warm-up run on this one (the
 * context's own allocations done), with every allocation failing. */
static _Atomic int g_fail_alloc;
static void *fail_malloc(size_t n) { return g_fail_alloc ? NULL : malloc(n); }
static void *fail_realloc(void *p, size_t n) { return g_fail_alloc ? NULL : realloc(p, n); }

typedef struct oom_run {
    kiln_context *ctx;
    int rc;
    char msg[512];
} oom_run;

static void *oom_thread(void *arg) {
    oom_run *r = arg;
    g_fail_alloc = 1;
    r->rc = kiln_context_run(r->ctx);
    g_fail_alloc = 0;
    snprintf(r->msg, sizeof r->msg, "%s", kiln_errmsg());
    return NULL;
}

TEST_IMPL(conv_scratch_out_of_memory) {
    /* a stem-like conv: 3 -> 20 channels, 7x7 stride 2, 31 x 37 input */
    const int64_t C = 3, M = 20, H = 31, W = 37, K = 7, OH = (H + 6 - K) / 2 + 1, OW = (W + 6 - K) / 2 + 1;
    const int64_t nx = C * H * W, ny = M * OH * OW;
    float *x = test_rnd_f32(&g_seed, nx, -1.0f, 1.0f), *w = test_rnd_f32(&g_seed, M * C * K * K, -1.0f, 1.0f);
    float *y = test_xmalloc((size_t)ny * sizeof(float));
    kiln_network *net = kiln_network_create();
    ASSERT(net);
    int64_t xd[4] = {1, C, H, W}, wd[4] = {M, C, K, K}, s[2] = {2, 2}, p[4] = {3, 3, 3, 3};
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "W", KILN_DTYPE_F32, 4, wd, w));
    const char *cin[2] = {"X", "W"}, *cout[1] = {"Y"};
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::Conv", 11, "conv", 2, cin, 1, cout);
    if (!l) TEST__FAIL("add_layer Conv: %s", kiln_errmsg());
    ASSERT_OK(kiln_layer_set_ints(l, "strides", s, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "pads", p, 4));
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_engine *e = test_build_ok(net, 0, 1, NULL);
    kiln_network_free(net);
    /* the padded GEMM (SGEMM scratch), direct, compact, few channels */
    static const int tactics[] = {4, 3, 9, 12};
    kiln_set_allocator(fail_malloc, fail_realloc, free);
    for (size_t i = 0; i < sizeof tactics / sizeof tactics[0]; i++) {
        if (tactics[i] == 12 && !kiln__dwrows_fits(1, 3)) continue; /* (an AVX-512 kernel) */
        ASSERT_OK(test_force_tactic(e, 0, tactics[i]));
        oom_run r = {0};
        ASSERT_OK(kiln_context_create(e, 1, &r.ctx));
        ASSERT_OK(kiln_context_bind(r.ctx, "X", x, (size_t)nx * sizeof(float)));
        ASSERT_OK(kiln_context_bind(r.ctx, "Y", y, (size_t)ny * sizeof(float)));
        ASSERT_OK(kiln_context_run(r.ctx)); /* warm-up: memory is there */
        memset(y, 0xA5, (size_t)ny * sizeof(float));
        pthread_t th;
        ASSERT_EQ(pthread_create(&th, NULL, oom_thread, &r), 0);
        ASSERT_EQ(pthread_join(th, NULL), 0);
        if (r.rc == 0) TEST__FAIL("tactic %d: a run out of scratch memory returned success", tactics[i]);
        if (!strstr(r.msg, "out of memory"))
            TEST__FAIL("tactic %d: the error does not say out of memory: %s", tactics[i], r.msg);
        ASSERT_OK(kiln_context_run(r.ctx)); /* memory back: runs again */
        kiln_context_free(r.ctx);
    }
    kiln_set_allocator(malloc, realloc, free);
    kiln_engine_free(e);
    free(x);
    free(w);
    free(y);
}

TEST_LIST(TEST_ENTRY(conv_tactics_each_kernel_once), TEST_ENTRY(conv_scratch_out_of_memory))
