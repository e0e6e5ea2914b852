/*
 * dwrows_ab.c — two builds of src/ops/nn/conv_dwrows.c (Conv tactic 7 and
 * kiln::mbconv's depthwise step) in one process, timed against each other
 * on MobileNetV2's depthwise bands (bench/dwrows_ab.sh builds it: "base"
 * from a git revision, "new" from the working tree, each compiled with its
 * exported names renamed, both linked with build/libkiln.a).
 *
 *     build-dwrows-ab/dwrows_ab [ROUNDS [NET]]
 *
 * Each shape is one band as kiln::mbconv runs it (kiln__dwrows_band: the
 * band's input rows, pads 1, ReLU6, stride 1, stride 2 on phase-split rows
 * or on interleaved rows) over a few channels whose planes stay in L1, or
 * with NET=1 over the block's own channel count (E in L2, as in the
 * network).  Rounds alternate base and new; each figure is the fastest
 * call.  Printed: microseconds a call, cycles per useful 16-lane FMA at the
 * FMA peak measured first (tools/fma_peak.c, 2 FMAs a cycle: 0.5 is the
 * bound), new/base and the largest difference of the outputs.
 */
#include "ops/nn/conv_dwrows.h"
#include "ab_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void (*band_fn)(const kiln__dwrows *, int64_t, int64_t, int64_t, int64_t, int64_t);
void base_dwrows_band(const kiln__dwrows *p, int64_t n, int64_t m0, int64_t m1, int64_t oy0, int64_t oy1);
void new_dwrows_band(const kiln__dwrows *p, int64_t n, int64_t m0, int64_t m1, int64_t oy0, int64_t oy1);
int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 20, net = argc > 2 && atoi(argv[2]);
    const double pk = cli_fma_peak_gflops(1) * 1e9 / 32; /* vector FMAs a second */
    printf("FMA peak %.1f GFLOP/s (1 thread); %d rounds, %s\n", pk * 32 / 1e9, rounds,
           net ? "the blocks' channel counts" : "planes in L1");
    /* name, channels (L1 / network), input rows of the band, W, output rows, OW, stride, phase-split */
    static const struct {
        const char *name;
        int64_t C, Cn, H, W, OH, OW, s, phase;
    } sh[] = {
        {"s1 64x32 (steady)", 2, 2, 66, 32, 64, 32, 1, 0}, {"s1 16x112 (f.1)", 2, 32, 18, 112, 16, 112, 1, 0},
        {"s1 14x56 (f.3)", 4, 144, 16, 56, 14, 56, 1, 0},  {"s1 14x28 (f.5)", 8, 192, 16, 28, 14, 28, 1, 0},
        {"s1 14x14 (f.8)", 16, 384, 16, 14, 14, 14, 1, 0}, {"s1 7x7 (f.15)", 32, 960, 9, 7, 7, 7, 1, 0},
        {"phase 8x56 (f.2)", 2, 96, 17, 112, 8, 56, 2, 1}, {"phase 14x28 (f.4)", 4, 144, 29, 56, 14, 28, 2, 1},
        {"phase 7x14 (f.7)", 8, 192, 15, 28, 7, 14, 2, 1}, {"s2 7x7 (f.14)", 16, 576, 15, 14, 7, 7, 2, 0},
    };
    unsigned seed = 1;
    for (size_t i = 0; i < sizeof sh / sizeof sh[0]; i++) {
        const int64_t C = net ? sh[i].Cn : sh[i].C, H = sh[i].H, W = sh[i].W, OH = sh[i].OH, OW = sh[i].OW;
        float *x = ab_rnd(C * H * W, &seed), *w = ab_rnd(C * 9, &seed), *b = ab_rnd(C, &seed);
        float *y[2] = {ab_rnd(C * OH * OW, &seed), ab_rnd(C * OH * OW, &seed)};
        kiln__dwrows p = {.N = 1, .C = C, .mult = 1, .H = H, .W = W, .OH = OH, .OW = OW, .KH = 3, .KW = 3,
                          .sy = sh[i].s, .sx = sh[i].s, .dy = 1, .dx = 1, .pt = 1, .pl = 1, .x = x, .w = w,
                          .bias = b, .xs = H * W, .ys = OH * OW, .clamp = 1, .lo = 0.0f, .hi = 6.0f,
                          .phase = sh[i].phase ? H * W / 2 : 0};
        const band_fn f[2] = {base_dwrows_band, new_dwrows_band};
        double best[2] = {1e9, 1e9};
        const int64_t reps = (int64_t)(2e6 / (double)(C * OH * OW)) + 1;
        for (int r = 0; r < rounds; r++)
            for (int k = 0; k < 2; k++) {
                const int v = r % 2 ? 1 - k : k;
                p.y = y[v];
                double t0 = ab_now();
                for (int64_t q = 0; q < reps; q++) f[v](&p, 0, 0, C, 0, OH);
                double t = (ab_now() - t0) / (double)reps;
                if (t < best[v]) best[v] = t;
            }
        double diff = 0;
        for (int64_t k = 0; k < C * OH * OW; k++) diff = fmax(diff, fabs((double)y[0][k] - (double)y[1][k]));
        const double fmas = (double)(C * OH * OW * 9) / 16;
        printf("%-18s C %4lld  base %8.2f us %5.2f cyc/FMA  new %8.2f us %5.2f  new/base %.3f  diff %.2g\n",
               sh[i].name, (long long)C, best[0] * 1e6, best[0] * pk / 2 / fmas, best[1] * 1e6,
               best[1] * pk / 2 / fmas, best[1] / best[0], diff);
        free(x);
        free(w);
        free(b);
        free(y[0]);
        free(y[1]);
    }
    return 0;
}
