/*
 * wino16c_ab.c — Conv tactics 14 and 15 (Winograd F(4x4) and F(2x2) in
 * NCHW16C, conv_wino16c.c) against the NCHW Winograd tactics 6 (F(4x4)) and 10
 * (F(2x2)) on ResNet-50's stride-1 3x3 convs, in one process, plus the two
 * reformats (kiln::reformat's kernel, LINEAR -> NCHW16C of X and back of
 * Y) a layer in NCHW16C between NCHW layers would cost, and a memcpy of
 * the same tensor (what a reformat at copy speed would).
 *
 *     cc ... bench/wino16c_ab.c tools/fma_peak.c build/libkiln.a (see bench/README.md)
 *     build-scratch/wino16c_ab [ROUNDS]
 *
 * X and Y rotate over 8 buffer sets (what a layer reads was written a
 * layer or more before: from L3, not L2).  Rounds alternate the kernels'
 * order; each figure is the fastest call and the median over the rounds,
 * at 1 and 2 threads.  Bias on, no activation (the same for all).
 * KILN_AB_COLDW=1: tactics 14 / 15 read a packed U of their own per call,
 * from enough copies (64 MB or more, at most 64) that it comes from memory,
 * as in a network whose weights outgrow L3 (ResNet-50's do).
 */
#include "kiln/plugin.h"
#include "ab_util.h"
#include "kiln_int.h"
#include "ops/nn/conv_wino16c.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int kiln__reformat_host(const kiln_call *c); /* ops/common/reformat.c */
#define SETS 8
enum { K6, K10, K14, K15, RF_IN, RF_OUT, COPY, NK };
static const char *const kname[NK] = {"t6", "t10", "t14", "t15", "rf X", "rf Y", "memcpy"};

static kiln_tensor tensor(void *data, int64_t C, int64_t H, int64_t W, kiln_format f) {
    kiln_tensor t = {.data = data, .dtype = KILN_DTYPE_F32, .format = f, .ndim = 4, .dims = {1, C, H, W}};
    t.strides[3] = 1, t.strides[2] = W, t.strides[1] = H * W, t.strides[0] = C * H * W;
    return t;
}

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 30;
    printf("FMA peak %.1f GFLOP/s at 1 thread, %.1f at 2; %d rounds\n", cli_fma_peak_gflops(1), cli_fma_peak_gflops(2),
           rounds);
    static const int64_t sh[][2] = {{64, 56}, {128, 28}, {256, 14}, {512, 7}};
    unsigned seed = 7;
    const int coldw = getenv("KILN_AB_COLDW") && atoi(getenv("KILN_AB_COLDW"));
    for (int threads = 1; threads <= 2; threads++) {
        kiln__pool *pool = kiln__pool_create(threads);
        kiln_exec ex = {.device = KILN_DEVICE_CPU, .pool = pool};
        for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++) {
            const int64_t C = sh[s][0], M = C, H = sh[s][1], W = H, n = C * H * W;
            float *x[SETS], *x16[SETS], *y[SETS], *y16[SETS];
            for (int i = 0; i < SETS; i++)
                x[i] = ab_rnd(n, &seed), x16[i] = ab_rnd(n, &seed), y[i] = ab_rnd(n, &seed), y16[i] = ab_rnd(n, &seed);
            float *w = ab_rnd(M * C * 9, &seed), *b = ab_rnd(M, &seed);
            void *p4 = aligned_alloc(64, kiln__wino_pack_bytes(4, M, C)),
                 *p2 = aligned_alloc(64, kiln__wino_pack_bytes(2, M, C)),
                 *p16[64], *p162[64];
            const size_t u4 = kiln__wino16c_pack_bytes(4, M, C), u2 = kiln__wino16c_pack_bytes(2, M, C);
            const int nu = coldw ? (int)((64u << 20) / u2 + 1 < 64 ? (64u << 20) / u2 + 1 : 64) : 1;
            kiln__wino_pack(4, w, M, C, p4);
            kiln__wino_pack(2, w, M, C, p2);
            for (int i = 0; i < nu; i++) {
                p16[i] = aligned_alloc(64, (u4 + 63) / 64 * 64), p162[i] = aligned_alloc(64, (u2 + 63) / 64 * 64);
                kiln__wino16c_pack(4, w, M, C, p16[i]);
                kiln__wino16c_pack(2, w, M, C, p162[i]);
            }
            size_t wsb = kiln__wino_ws_bytes(4, C, M, H, W), ws2 = kiln__wino_ws_bytes(2, C, M, H, W);
            float *ws = aligned_alloc(64, ((wsb > ws2 ? wsb : ws2) + 63) / 64 * 64);
            static double t[NK][1000];
            const int R = rounds < 1000 ? rounds : 1000;
            double maxdiff = 0;
            for (int r = 0; r < R; r++)
                for (int q = 0; q < NK; q++) {
                    const int k = (q + r) % NK, i = (r * NK + q) % SETS;
                    double t0 = ab_now();
                    if (k == K6 || k == K10) {
                        const int m = k == K6 ? 4 : 2;
                        kiln__wino wp = {.m = m, .C = C, .M = M, .H = H, .W = W, .OH = H, .OW = W, .pt = 1, .pl = 1,
                                         .x = x[i], .u = kiln__wino_packed(m == 4 ? p4 : p2, m, M, C), .bias = b,
                                         .y = y[i], .ws = ws, .exec = &ex};
                        kiln__wino_run(&wp);
                    } else if (k == K14 || k == K15) {
                        const int m = k == K14 ? 4 : 2;
                        kiln__wino16c p = {.w = {.m = m, .C = C, .M = M, .H = H, .W = W, .OH = H, .OW = W, .pt = 1,
                                                 .pl = 1, .x = x16[i],
                                                 .u = kiln__wino16c_packed(m == 4 ? p16[r % nu] : p162[r % nu], m, M, C),
                                                 .bias = b, .y = y16[i], .ws = ws, .exec = &ex}};
                        kiln__wino16c_run(&p);
                    } else if (k == COPY) {
                        memcpy(y[(i + 1) % SETS], x[i], (size_t)n * sizeof(float));
                    } else {
                        kiln_tensor in = tensor(k == RF_IN ? x[i] : y16[i], C, H, W,
                                                k == RF_IN ? KILN_FORMAT_LINEAR : KILN_FORMAT_NCHW16C);
                        kiln_tensor out = tensor(k == RF_IN ? x16[(i + 1) % SETS] : y[(i + 1) % SETS], C, H, W,
                                                 k == RF_IN ? KILN_FORMAT_NCHW16C : KILN_FORMAT_LINEAR);
                        kiln_call c = {.in = &in, .nin = 1, .out = &out, .nout = 1, .exec = &ex};
                        kiln__reformat_host(&c);
                    }
                    t[k][r] = ab_now() - t0;
                }
            /* the outputs agree: t6's Y and t14's Y of the same X (set 0) */
            kiln_tensor in = tensor(x[0], C, H, W, KILN_FORMAT_LINEAR), out = tensor(x16[0], C, H, W, KILN_FORMAT_NCHW16C);
            kiln_call c = {.in = &in, .nin = 1, .out = &out, .nout = 1, .exec = &ex};
            kiln__reformat_host(&c);
            kiln__wino wp = {.m = 4, .C = C, .M = M, .H = H, .W = W, .OH = H, .OW = W, .pt = 1, .pl = 1, .x = x[0],
                             .u = kiln__wino_packed(p4, 4, M, C), .bias = b, .y = y[0], .ws = ws, .exec = &ex};
            kiln__wino_run(&wp);
            kiln__wino16c p = {.w = wp};
            p.w.x = x16[0], p.w.y = y16[0], p.w.u = kiln__wino16c_packed(p16[0], 4, M, C);
            kiln__wino16c_run(&p);
            for (int64_t cc = 0; cc < C; cc++)
                for (int64_t j = 0; j < H * W; j++) {
                    double d = fabs((double)y[0][cc * H * W + j] - y16[0][((cc / 16) * H * W + j) * 16 + cc % 16]);
                    if (d > maxdiff) maxdiff = d;
                }
            printf("%d thr %4lld->%-4lld %2lldx%-2lld", threads, (long long)C, (long long)M, (long long)H, (long long)W);
            double mn[NK], md[NK];
            for (int k = 0; k < NK; k++) {
                qsort(t[k], (size_t)R, sizeof(double), ab_cmpd);
                mn[k] = t[k][0] * 1e3, md[k] = t[k][R / 2] * 1e3;
                printf("  %s %.3f/%.3f", kname[k], mn[k], md[k]);
            }
            const double best = mn[K6] < mn[K10] ? mn[K6] : mn[K10], b16 = mn[K14] < mn[K15] ? mn[K14] : mn[K15];
            const double mbest = md[K6] < md[K10] ? md[K6] : md[K10], mb16 = md[K14] < md[K15] ? md[K14] : md[K15];
            printf("  | best 16c / best NCHW min %.3f, med %.3f; max|diff| %.2g\n", b16 / best, mb16 / mbest,
                   maxdiff);
            fflush(stdout);
            for (int i = 0; i < SETS; i++) free(x[i]), free(x16[i]), free(y[i]), free(y16[i]);
            for (int i = 0; i < nu; i++) free(p16[i]), free(p162[i]);
            free(w), free(b), free(p4), free(p2), free(ws);
        }
        kiln__pool_free(pool);
    }
    return 0;
}
