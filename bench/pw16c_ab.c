/*
 * pw16c_ab.c — Conv tactic 13 (src/ops/nn/conv_pw16c.c, 1x1 convs in
 * NCHW16C) against the builder's best NCHW tactic on ResNet-50's 1x1 convs,
 * two builds of the kernel in one process (bench/pw16c_ab.sh builds it:
 * "base" from a git revision, "new" from the working tree, each compiled
 * with its exported names renamed, both linked with build/libkiln.a).
 *
 *     build-pw16c-ab/pw16c_ab [THREADS [ROUNDS [SHAPE]]]
 *
 * Each shape is built as Conv [+ residual Add] + Relu with the library's
 * builder at THREADS threads without KILN_BUILD_CPU_BLOCKED (so its best NCHW
 * tactic, 1 / 4 / 11, with the Add and Relu fused in its store) and timed
 * by the context's per-layer profile; base and new run the same conv in
 * NCHW16C on a pool of THREADS (the units split as Conv tactic 13 splits
 * them, pixel tiles outer unless W is large: conv_pw16c.c).  Activations
 * rotate over 6 buffer sets so that they come from L3 as in the network;
 * W stays hot (in the network it does not: bench/README.md, session 14).
 * Rounds alternate the three; printed: min / median microseconds, base
 * and new against NCHW (minima), and the FMA peak before and after.
 * KILN_AB_INPLACE=1: base and new write Y over the residual (the builder's in
 * place, kiln_quick_op.residual_inplace_tactics; its values then grow
 * round by round: a timing only).  KILN_AB_COLDW=1: base and new read a
 * packed W of their own per buffer set (from L3 like X; the NCHW engine's
 * stays hot).
 */
#include "kiln/kiln.h"
#include "ab_util.h"
#include "kiln_int.h"
#include "ops/nn/conv_pw16c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t base_pw16c_packed(int64_t M, int64_t C);
void base_pw16c_pack(const float *w, int64_t M, int64_t C, float *dst);
int64_t base_pw16c_units(const kiln__pw16c *p);
void base_pw16c_run(const kiln__pw16c *p, int64_t u0, int64_t u1);
int64_t new_pw16c_packed(int64_t M, int64_t C);
void new_pw16c_pack(const float *w, int64_t M, int64_t C, float *dst);
int64_t new_pw16c_units(const kiln__pw16c *p);
void new_pw16c_run(const kiln__pw16c *p, int64_t u0, int64_t u1);
#define NSETS 6
typedef struct shp {
    int64_t C, M, H, W;
    int res; /* 1: + residual, Relu; 2: no Relu (a downsample) */
    const char *what;
} shp;
static const shp S[] = {
    {64, 256, 56, 56, 1, "layer1 conv3 64->256 56x56 +res+relu"},
    {64, 256, 56, 56, 2, "layer1.0 downsample 64->256 56x56"},
    {256, 64, 56, 56, 0, "layer1.1-2 conv1 256->64 56x56 +relu"},
    {64, 64, 56, 56, 0, "layer1.0 conv1 64->64 56x56 +relu"},
    {256, 128, 56, 56, 0, "layer2.0 conv1 256->128 56x56 +relu"},
    {128, 512, 28, 28, 1, "layer2 conv3 128->512 28x28 +res+relu"},
    {512, 128, 28, 28, 0, "layer2.1-3 conv1 512->128 28x28 +relu"},
    {512, 256, 28, 28, 0, "layer3.0 conv1 512->256 28x28 +relu"},
    {256, 1024, 14, 14, 1, "layer3 conv3 256->1024 14x14 +res+relu"},
    {1024, 256, 14, 14, 0, "layer3.1-5 conv1 1024->256 14x14 +relu"},
    {1024, 512, 14, 14, 0, "layer4.0 conv1 1024->512 14x14 +relu"},
    {512, 2048, 7, 7, 1, "layer4 conv3 512->2048 7x7 +res+relu"},
    {2048, 512, 7, 7, 0, "layer4.1-2 conv1 2048->512 7x7 +relu"},
};

typedef struct job {
    const kiln__pw16c *p;
    void (*run)(const kiln__pw16c *, int64_t, int64_t);
} job;
static void range(void *ud, int64_t b, int64_t e) { ((const job *)ud)->run(((const job *)ud)->p, b, e); }

/* The conv as one engine: the builder's NCHW choice, Add and Relu fused. */
static kiln_engine *nchw_engine(const shp *s, const float *w, const float *b, int threads) {
    kiln_network *net = kiln_network_create();
    int64_t xd[4] = {1, s->C, s->H, s->W}, yd[4] = {1, s->M, s->H, s->W}, wd[4] = {s->M, s->C, 1, 1}, bd[1] = {s->M};
    kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL);
    if (s->res == 1) kiln_network_add_input(net, "R", KILN_DTYPE_F32, 4, yd, NULL);
    kiln_network_add_constant(net, "W", KILN_DTYPE_F32, 4, wd, w);
    kiln_network_add_constant(net, "B", KILN_DTYPE_F32, 1, bd, b);
    const char *cin[3] = {"X", "W", "B"}, *c1[1] = {s->res == 2 ? "Y" : "c"}, *last = "c";
    kiln_network_add_layer(net, "ai.onnx::Conv", 11, "conv", 3, cin, 1, c1);
    if (s->res == 1) {
        const char *ai[2] = {"c", "R"}, *ao[1] = {"a"};
        kiln_network_add_layer(net, "ai.onnx::Add", 14, "add", 2, ai, 1, ao);
        last = "a";
    }
    if (s->res != 2) {
        const char *ri[1] = {last}, *ro[1] = {"Y"};
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
    const int inplace = getenv("KILN_AB_INPLACE") && atoi(getenv("KILN_AB_INPLACE"));
    const int coldw = getenv("KILN_AB_COLDW") && atoi(getenv("KILN_AB_COLDW"));
    if (T < 1 || rounds < 1) return 1;
    printf("FMA peak %.1f GFLOP/s (%d thread%s)\n", cli_fma_peak_gflops(T), T, T > 1 ? "s" : "");
    kiln__pool *pool = kiln__pool_create(T);
    kiln_exec ex = {.device = KILN_DEVICE_CPU, .pool = pool};
    printf("| conv (ResNet-50) | NCHW tactic | NCHW us | base 16c us | new 16c us | base/NCHW | new/NCHW | new/base per "
           "round (quartiles) |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (int si = 0; si < (int)(sizeof S / sizeof S[0]); si++) {
        if (only >= 0 && si != only) continue;
        const shp *s = &S[si];
        const int64_t P = s->H * s->W, nx = s->C * P, ny = s->M * P;
        float *w = ab_rnd(s->M * s->C, NULL), *b = ab_rnd(s->M, NULL), *x[NSETS], *r[NSETS], *y[NSETS];
        for (int i = 0; i < NSETS; i++) x[i] = ab_rnd(nx, NULL), r[i] = ab_rnd(ny, NULL), y[i] = ab_rnd(ny, NULL);
        kiln_engine *e = nchw_engine(s, w, b, T);
        if (!e) return 1;
        int tactic = -1;
        for (int32_t l = 0; l < e->nlayers; l++)
            if (e->layers[l].op && !strcmp(e->layers[l].op->name, "Conv")) tactic = e->layers[l].tactic;
        kiln_context *ctx;
        if (kiln_context_create(e, T, &ctx)) return 1;
        kiln_context_set_profiling(ctx, 1);
        /* coldw: a packed W per buffer set, so that W too comes from L3 (as in the network) */
        const int nw = coldw ? NSETS : 1;
        float *wb[NSETS], *wn[NSETS];
        for (int i = 0; i < nw; i++) {
            wb[i] = ab_rnd(base_pw16c_packed(s->M, s->C), NULL), wn[i] = ab_rnd(new_pw16c_packed(s->M, s->C), NULL);
            base_pw16c_pack(w, s->M, s->C, wb[i]);
            new_pw16c_pack(w, s->M, s->C, wn[i]);
        }
        /* the unit order conv_pw16c.c picks (kiln__pw16c_conv's rule) */
        const int64_t wbytes = s->M * s->C * 4, xbytes = P * s->C * 4;
        const int wmajor = (T > 1 && s->M > P) || (wbytes > (1 << 20) && (s->M + 31) / 32 * xbytes < (P + 11) / 12 * wbytes);
        kiln__pw16c p = {.C = s->C, .M = s->M, .P = P, .bias = b, .relu = s->res != 2, .wmajor = wmajor};
        double *t[3];
        for (int i = 0; i < 3; i++) t[i] = malloc(sizeof(double) * (size_t)rounds);
        for (int it = -5; it < rounds; it++) {
            const int k = (it + 60) % NSETS;
            for (int half = 0; half < 3; half++) {
                const int which = (half + it + 60) % 3;
                double us;
                if (which == 0) {
                    kiln_context_bind(ctx, "X", x[k], (size_t)nx * 4);
                    if (s->res == 1) kiln_context_bind(ctx, "R", r[k], (size_t)ny * 4);
                    kiln_context_bind(ctx, "Y", y[k], (size_t)ny * 4);
                    if (kiln_context_run(ctx)) return 1;
                    double ms = 0, v;
                    const char *nm;
                    for (int l = 0; !kiln_context_profile(ctx, l, &nm, &v); l++)
                        if (strstr(nm, "conv")) ms = v;
                    us = ms * 1e3;
                } else {
                    p.x = x[k], p.y = y[k], p.res = s->res == 1 ? r[k] : NULL, p.wp = which == 1 ? wb[k % nw] : wn[k % nw];
                    if (inplace && p.res) p.y = r[k]; /* Y over the residual (values grow: timing only) */
                    job j = {&p, which == 1 ? base_pw16c_run : new_pw16c_run};
                    const int64_t units = which == 1 ? base_pw16c_units(&p) : new_pw16c_units(&p);
                    kiln__pool_hold(pool, 1);
                    const double t0 = cli_now_ms();
                    kiln_exec_parallel_for(&ex, units, 1, range, &j);
                    us = (cli_now_ms() - t0) * 1e3;
                    kiln__pool_hold(pool, 0);
                }
                if (it >= 0) t[which][it] = us;
            }
        }
        /* new over base per round (the two ran back to back: a stretch of
         * the host's speed hits both) */
        double *q = malloc(sizeof(double) * (size_t)rounds);
        for (int i = 0; i < rounds; i++) q[i] = t[2][i] / t[1][i];
        qsort(q, (size_t)rounds, sizeof(double), ab_cmpd);
        for (int i = 0; i < 3; i++) qsort(t[i], (size_t)rounds, sizeof(double), ab_cmpd);
        printf("| %s | %d | %.0f / %.0f | %.0f / %.0f | %.0f / %.0f | %+.0f%% | %+.0f%% | %.3f (%.3f-%.3f) |\n", s->what,
               tactic, t[0][0], t[0][rounds / 2], t[1][0], t[1][rounds / 2], t[2][0], t[2][rounds / 2],
               (t[1][0] / t[0][0] - 1) * 100, (t[2][0] / t[0][0] - 1) * 100, q[rounds / 2], q[rounds / 4],
               q[3 * rounds / 4]);
        free(q);
        fflush(stdout);
        kiln_context_free(ctx);
        kiln_engine_free(e);
        for (int i = 0; i < NSETS; i++) free(x[i]), free(r[i]), free(y[i]);
        for (int i = 0; i < 3; i++) free(t[i]);
        for (int i = 0; i < nw; i++) free(wb[i]), free(wn[i]);
        free(w), free(b);
    }
    kiln__pool_free(pool);
    printf("FMA peak %.1f GFLOP/s (%d thread%s)\n", cli_fma_peak_gflops(T), T, T > 1 ? "s" : "");
    return 0;
}
