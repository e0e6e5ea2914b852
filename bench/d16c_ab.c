/*
 * d16c_ab.c — Conv tactic 16 (src/ops/nn/conv_direct16c.c, direct convs in
 * NCHW16C) against the builder's best NCHW tactic on ResNet-50's and
 * ResNet-18's strided convs (and a few stride-1 ones), two builds of the
 * kernel in one process (bench/d16c_ab.sh builds it: "base" from a git
 * revision, "new" from the working tree, each compiled with its exported
 * names renamed, both linked with build/libkiln.a).
 *
 *     build-d16c-ab/d16c_ab [THREADS [ROUNDS [SHAPE]]]
 *
 * Each shape is built as Conv [+ Relu] with the library's builder at
 * THREADS threads without KILN_BUILD_CPU_BLOCKED (so its best NCHW tactic
 * with the Relu fused in its store) and timed by the context's per-layer
 * profile; base and new run the same conv in NCHW16C on a pool of THREADS
 * (the units split as Conv tactic 16 splits them).  Activations rotate over
 * 6 buffer sets so that they come from L3 as in the network; W stays hot.
 * Rounds alternate the three; printed: min / median microseconds, base and
 * new against NCHW (minima), and the FMA peak before and after.
 */
#include "kiln/kiln.h"
#include "ab_util.h"
#include "kiln_int.h"
#include "ops/nn/conv_direct16c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t base_d16c_packed(int64_t M, int64_t C, int64_t taps);
void base_d16c_pack(const float *w, int64_t M, int64_t C, int64_t taps, float *dst);
int64_t base_d16c_units(const kiln__d16c *p);
void base_d16c_run(const kiln__d16c *p, int64_t u0, int64_t u1);
int base_d16c_wmajor(int64_t C, int64_t M, int64_t taps, int64_t P, int threads);
int64_t new_d16c_packed(int64_t M, int64_t C, int64_t taps);
void new_d16c_pack(const float *w, int64_t M, int64_t C, int64_t taps, float *dst);
int64_t new_d16c_units(const kiln__d16c *p);
void new_d16c_run(const kiln__d16c *p, int64_t u0, int64_t u1);
int new_d16c_wmajor(int64_t C, int64_t M, int64_t taps, int64_t P, int threads);
#define NSETS 6
typedef struct shp {
    int64_t C, M, H, W, K, S; /* K x K kernel, stride S, pad K / 2 */
    int relu;
    const char *what;
} shp;
static const shp S[] = {
    {128, 128, 56, 56, 3, 2, 1, "R50 layer2.0 conv2 128->128 3x3/2 56->28 +relu"},
    {256, 256, 28, 28, 3, 2, 1, "R50 layer3.0 conv2 256->256 3x3/2 28->14 +relu"},
    {512, 512, 14, 14, 3, 2, 1, "R50 layer4.0 conv2 512->512 3x3/2 14->7 +relu"},
    {256, 512, 56, 56, 1, 2, 0, "R50 layer2.0 downsample 256->512 1x1/2 56->28"},
    {512, 1024, 28, 28, 1, 2, 0, "R50 layer3.0 downsample 512->1024 1x1/2 28->14"},
    {1024, 2048, 14, 14, 1, 2, 0, "R50 layer4.0 downsample 1024->2048 1x1/2 14->7"},
    {64, 128, 56, 56, 3, 2, 1, "R18 layer2.0 conv1 64->128 3x3/2 56->28 +relu"},
    {128, 256, 28, 28, 3, 2, 1, "R18 layer3.0 conv1 128->256 3x3/2 28->14 +relu"},
    {256, 512, 14, 14, 3, 2, 1, "R18 layer4.0 conv1 256->512 3x3/2 14->7 +relu"},
    {64, 128, 56, 56, 1, 2, 0, "R18 layer2.0 downsample 64->128 1x1/2 56->28"},
    {128, 256, 28, 28, 1, 2, 0, "R18 layer3.0 downsample 128->256 1x1/2 28->14"},
    {256, 512, 14, 14, 1, 2, 0, "R18 layer4.0 downsample 256->512 1x1/2 14->7"},
    {512, 512, 7, 7, 3, 1, 1, "R50/R18 layer4 conv 512->512 3x3/1 7x7 +relu"},
    {256, 256, 14, 14, 3, 1, 1, "R50 layer3 conv2 256->256 3x3/1 14x14 +relu"},
};

typedef struct job {
    const kiln__d16c *p;
    void (*run)(const kiln__d16c *, int64_t, int64_t);
} job;
static void range(void *ud, int64_t b, int64_t e) { ((const job *)ud)->run(((const job *)ud)->p, b, e); }

/* The conv as one engine: the builder's NCHW choice, Add and Relu fused. */
static kiln_engine *nchw_engine(const shp *s, const float *w, const float *b, int threads) {
    kiln_network *net = kiln_network_create();
    int64_t xd[4] = {1, s->C, s->H, s->W}, wd[4] = {s->M, s->C, s->K, s->K}, bd[1] = {s->M};
    int64_t pads[4] = {s->K / 2, s->K / 2, s->K / 2, s->K / 2}, strides[2] = {s->S, s->S};
    kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL);
    kiln_network_add_constant(net, "W", KILN_DTYPE_F32, 4, wd, w);
    kiln_network_add_constant(net, "B", KILN_DTYPE_F32, 1, bd, b);
    const char *cin[3] = {"X", "W", "B"}, *c1[1] = {s->relu ? "c" : "Y"};
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::Conv", 11, "conv", 3, cin, 1, c1);
    kiln_layer_set_ints(l, "pads", pads, 4);
    kiln_layer_set_ints(l, "strides", strides, 2);
    if (s->relu) {
        const char *ri[1] = {"c"}, *ro[1] = {"Y"};
        kiln_network_add_layer(net, "ai.onnx::Relu", 14, "relu", 1, ri, 1, ro);
    }
    kiln_network_mark_output(net, "Y");
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_threads(cfg, threads);
    kiln_engine *e = NULL;
    if (kiln_build(net, cfg, &e, NULL)) fprintf(stderr, "build: %s\n", kiln_errmsg());
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    return e;
}

int main(int argc, char **argv) {
    const int T = argc > 1 ? atoi(argv[1]) : 1, rounds = argc > 2 ? atoi(argv[2]) : 200;
    const int only = argc > 3 ? atoi(argv[3]) : -1;
    if (T < 1 || rounds < 1) return 1;
    printf("FMA peak %.1f GFLOP/s (%d thread%s)\n", cli_fma_peak_gflops(T), T, T > 1 ? "s" : "");
    kiln__pool *pool = kiln__pool_create(T);
    kiln_exec ex = {.device = KILN_DEVICE_CPU, .pool = pool};
    printf("| conv | NCHW tactic | NCHW us | base 16c us | new 16c us | base/NCHW | new/NCHW |\n");
    printf("|---|---|---|---|---|---|---|\n");
    for (int si = 0; si < (int)(sizeof S / sizeof S[0]); si++) {
        if (only >= 0 && si != only) continue;
        const shp *s = &S[si];
        const int64_t OH = (s->H + 2 * (s->K / 2) - s->K) / s->S + 1, P = s->H * s->W, OP = OH * OH;
        const int64_t nx = s->C * P, ny = s->M * OP, taps = s->K * s->K;
        float *w = ab_rnd(s->M * s->C * taps, NULL), *b = ab_rnd(s->M, NULL), *x[NSETS], *r[NSETS], *y[NSETS];
        for (int i = 0; i < NSETS; i++) x[i] = ab_rnd(nx, NULL), r[i] = ab_rnd(ny, NULL), y[i] = ab_rnd(ny, NULL);
        kiln_engine *e = nchw_engine(s, w, b, T);
        if (!e) return 1;
        int tactic = -1;
        for (int32_t l = 0; l < e->nlayers; l++)
            if (e->layers[l].op && !strcmp(e->layers[l].op->name, "Conv")) tactic = e->layers[l].tactic;
        kiln_context *ctx;
        if (kiln_context_create(e, T, &ctx)) return 1;
        kiln_context_set_profiling(ctx, 1);
        float *wb = ab_rnd(base_d16c_packed(s->M, s->C, taps), NULL), *wn = ab_rnd(new_d16c_packed(s->M, s->C, taps), NULL);
        base_d16c_pack(w, s->M, s->C, taps, wb);
        new_d16c_pack(w, s->M, s->C, taps, wn);
        kiln__d16c p = {.C = s->C, .M = s->M, .H = s->H, .W = s->W, .OH = OH, .OW = OH, .KH = s->K, .KW = s->K,
                        .sh = s->S, .sw = s->S, .pt = s->K / 2, .pl = s->K / 2, .bias = b, .relu = s->relu};
        kiln__d16c pn = p;
        /* new: a 1x1 conv as tactic 16 runs it (conv_direct16c.c's flat()):
         * one row of OH x OW pixels, gathered first at a stride */
        const int flat = s->K == 1;
        float *g = flat && s->S > 1 ? ab_rnd(s->C * OP, NULL) : NULL;
        if (flat) pn.H = pn.OH = 1, pn.W = pn.OW = OP, pn.sh = pn.sw = 1;
        p.wmajor = base_d16c_wmajor(s->C, s->M, taps, OP, T);
        pn.wmajor = new_d16c_wmajor(s->C, s->M, taps, OP, T);
        double *t[3];
        for (int i = 0; i < 3; i++) t[i] = malloc(sizeof(double) * (size_t)rounds);
        for (int it = -5; it < rounds; it++) {
            const int k = (it + 60) % NSETS;
            for (int half = 0; half < 3; half++) {
                const int which = (half + it + 60) % 3;
                double us;
                if (which == 0) {
                    kiln_context_bind(ctx, "X", x[k], (size_t)nx * 4);
                    kiln_context_bind(ctx, "Y", y[k], (size_t)ny * 4);
                    if (kiln_context_run(ctx)) return 1;
                    double ms = 0, v;
                    const char *nm;
                    for (int l = 0; !kiln_context_profile(ctx, l, &nm, &v); l++)
                        if (strstr(nm, "conv")) ms = v;
                    us = ms * 1e3;
                } else {
                    kiln__d16c *q = which == 1 ? &p : &pn;
                    q->x = x[k], q->y = y[k], q->wp = which == 1 ? wb : wn;
                    kiln__pool_hold(pool, 1);
                    const double t0 = cli_now_ms();
                    if (which == 2 && g) { /* (the gather on one thread here) */
                        for (int64_t r = 0; r < s->C / 16 * OH; r++)
                            for (int64_t ox = 0; ox < OH; ox++)
                                memcpy(g + (r * OH + ox) * 16,
                                       x[k] + ((r / OH * s->H + r % OH * s->S) * s->W + ox * s->S) * 16, 64);
                        q->x = g;
                    }
                    job j = {q, which == 1 ? base_d16c_run : new_d16c_run};
                    const int64_t units = which == 1 ? base_d16c_units(q) : new_d16c_units(q);
                    kiln_exec_parallel_for(&ex, units, 1, range, &j);
                    us = (cli_now_ms() - t0) * 1e3;
                    kiln__pool_hold(pool, 0);
                }
                if (it >= 0) t[which][it] = us;
            }
        }
        for (int i = 0; i < 3; i++) qsort(t[i], (size_t)rounds, sizeof(double), ab_cmpd);
        printf("| %s | %d | %.0f / %.0f | %.0f / %.0f | %.0f / %.0f | %+.0f%% | %+.0f%% |\n", s->what, tactic, t[0][0],
               t[0][rounds / 2], t[1][0], t[1][rounds / 2], t[2][0], t[2][rounds / 2], (t[1][0] / t[0][0] - 1) * 100,
               (t[2][0] / t[0][0] - 1) * 100);
        fflush(stdout);
        kiln_context_free(ctx);
        kiln_engine_free(e);
        for (int i = 0; i < NSETS; i++) free(x[i]), free(r[i]), free(y[i]);
        for (int i = 0; i < 3; i++) free(t[i]);
        free(w), free(b), free(wb), free(wn), free(g);
    }
    kiln__pool_free(pool);
    printf("FMA peak %.1f GFLOP/s (%d thread%s)\n", cli_fma_peak_gflops(T), T, T > 1 ? "s" : "");
    return 0;
}
