/*
 * fewc_ab.c — the stem kernel kiln__fewc_rows (src/ops/nn/conv_fewc.c,
 * Conv tactics 12 and 17), two builds in one process (bench/fewc_ab.sh
 * builds it: "base" from a git revision, "new" from the working tree, each
 * compiled with its exported names renamed).
 *
 *     build-fewc-ab/fewc_ab [ROUNDS [SHAPE]]
 *
 * One thread, the whole image in bands of 8 output rows as Conv's work
 * units are (conv.c's FEWC_ROWS), W packed once; rounds alternate base and
 * new (which goes first alternates too).  Printed per shape: min / median
 * microseconds, GFLOP/s of the minimum against the FMA peak measured right
 * before the shape, and the largest difference between the two outputs.
 */
#include "ops/nn/conv_fewc.h"
#include "ab_util.h"
#include "ops/nn/pool16c.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t base_fewc_scratch(const kiln__fewc *p);
int64_t base_fewc_packed_w(const kiln__fewc *p);
void base_fewc_pack_w(const kiln__fewc *p, float *wp);
void base_fewc_rows(const kiln__fewc *p, int64_t oy0, int64_t oy1, float *y, int64_t ys, float *scratch);
int64_t new_fewc_scratch(const kiln__fewc *p);
int64_t new_fewc_packed_w(const kiln__fewc *p);
void new_fewc_pack_w(const kiln__fewc *p, float *wp);
void new_fewc_rows(const kiln__fewc *p, int64_t oy0, int64_t oy1, float *y, int64_t ys, float *scratch);
typedef struct shp {
    int64_t C, H, W, M, K, s, pad;
    int b16;
    const char *what;
} shp;
static const shp S[] = {
    {3, 224, 224, 64, 7, 2, 3, 0, "ResNet stem 3->64 7x7/2 224 (t12, planar)"},
    {3, 224, 224, 64, 7, 2, 3, 1, "ResNet stem 3->64 7x7/2 224 (t17, 16c)"},
    {3, 224, 224, 32, 3, 2, 1, 0, "MobileNetV2 stem 3->32 3x3/2 224 (t12, in mbconv)"},
    {3, 48, 192, 8, 3, 2, 1, 0, "PP-OCR cls stem 3->8 3x3/2 48x192 (t12)"},
    {3, 640, 640, 16, 3, 2, 1, 0, "3->16 3x3/2 640 (t12)"},
    {3, 640, 640, 16, 3, 2, 1, 1, "3->16 3x3/2 640 (t17, 16c)"},
};

/* SHAPE 9: ResNet's stem conv (16c, Relu) + MaxPool 3x3/2 pads 1 (16c), the
 * new kernel both ways: conv to the whole 3.2 MB Y then pool (as two
 * layers), or fused: each band of BR pool rows from the 2 BR conv rows
 * (and the last of the band before, kept) in an L2-resident buffer. */
static void chain(int rounds, int BR) {
    const int64_t C = 3, H = 224, W = 224, M = 64, OH = 112, OW = 112, PH = 56, PW = 56, CB = M / 16;
    float *x = ab_rnd(C * H * W, NULL), *w = ab_rnd(M * C * 49, NULL), *b = ab_rnd(M, NULL), *y = ab_rnd(M * OH * OW, NULL), *pool[2];
    pool[0] = ab_rnd(M * PH * PW, NULL), pool[1] = ab_rnd(M * PH * PW, NULL);
    const int64_t BH = 2 * BR + 1; /* band buffer rows */
    float *band = ab_rnd(CB * BH * OW * 16, NULL);
    kiln__fewc p = {.C = C, .H = H, .W = W, .M = M, .OH = OH, .OW = OW, .KH = 7, .KW = 7, .sy = 2, .sx = 2, .pt = 3,
                    .pl = 3, .x = x, .w = w, .bias = b, .lo = 0.0f, .hi = INFINITY, .nchw16c = 1};
    float *wp = ab_rnd(new_fewc_packed_w(&p), NULL), *scr = ab_rnd(new_fewc_scratch(&p), NULL);
    int64_t tab[3 * 112];
    new_fewc_pack_w(&p, wp);
    p.wp = wp;
    kiln__pool16c q = {.N = 1, .CB = 1, .H = OH, .W = OW, .OH = PH, .OW = PW, .kh = 3, .kw = 3, .sy = 2, .sx = 2, .dy = 1,
                       .dx = 1, .pt = 1, .pl = 1, .pb = 1, .pr = 1};
    double *t[3] = {malloc(sizeof(double) * (size_t)rounds), malloc(sizeof(double) * (size_t)rounds),
                    malloc(sizeof(double) * (size_t)rounds)};
    const double peak = cli_fma_peak_gflops(1);
    for (int it = -3; it < rounds; it++)
        for (int h = 0; h < 2; h++) {
            const int k = (h + it + 4) % 2;
            double t0 = cli_now_ms(), t1 = 0;
            if (k == 0) {
                for (int64_t oy0 = 0; oy0 < OH; oy0 += 8)
                    new_fewc_rows(&p, oy0, oy0 + 8, y + oy0 * OW * 16, OH * OW * 16, scr);
                t1 = cli_now_ms();
                kiln__pool16c qq = q;
                qq.CB = CB, qq.x = y, qq.y = pool[0];
                kiln__pool16c_run(&qq, 0, CB * PH, tab);
            } else {
                int64_t have = -1; /* conv row held in the band's row 0 (the last of the band before) */
                for (int64_t py0 = 0; py0 < PH; py0 += BR) {
                    const int64_t py1 = py0 + BR < PH ? py0 + BR : PH;
                    const int64_t r0 = 2 * py0 - 1 < 0 ? 0 : 2 * py0 - 1, r1 = 2 * py1 < OH ? 2 * py1 : OH;
                    int64_t a = r0;
                    if (have == r0) a = r0 + 1; /* already in row 0 */
                    else if (have >= 0) { /* not reached: bands follow each other */ }
                    for (int64_t c0 = a; c0 < r1; c0 += 8) {
                        const int64_t c1 = c0 + 8 < r1 ? c0 + 8 : r1;
                        new_fewc_rows(&p, c0, c1, band + (c0 - r0) * OW * 16, BH * OW * 16, scr);
                    }
                    for (int64_t cb = 0; cb < CB; cb++) {
                        kiln__pool16c qq = q;
                        qq.x = band + cb * BH * OW * 16, qq.H = r1 - r0, qq.OH = py1 - py0;
                        qq.pt = r0 - (2 * py0 - 1);
                        qq.y = pool[1] + cb * PH * PW * 16 + py0 * PW * 16;
                        kiln__pool16c_run(&qq, 0, py1 - py0, tab);
                    }
                    for (int64_t cb = 0; cb < CB; cb++) /* keep the last conv row for the next band */
                        memcpy(band + cb * BH * OW * 16, band + cb * BH * OW * 16 + (r1 - 1 - r0) * OW * 16,
                               (size_t)OW * 16 * sizeof(float));
                    have = r1 - 1;
                }
            }
            const double t2 = cli_now_ms();
            if (it >= 0) {
                t[k][it] = (t2 - t0) * 1e3;
                if (k == 0) t[2][it] = (t1 - t0) * 1e3;
            }
        }
    double md = 0;
    for (int64_t i = 0; i < M * PH * PW; i++) md = fmax(md, fabs((double)pool[0][i] - pool[1][i]));
    for (int i = 0; i < 3; i++) qsort(t[i], (size_t)rounds, sizeof(double), ab_cmpd);
    printf("stem conv + maxpool, 1 thread, FMA peak %.0f: conv then pool %.1f / %.1f us (conv alone %.1f / %.1f), "
           "fused (%d pool rows a band) %.1f / %.1f us (min / median), fused/unfused %.3f, max |diff| %g\n",
           peak, t[0][0], t[0][rounds / 2], t[2][0], t[2][rounds / 2], BR, t[1][0], t[1][rounds / 2], t[1][0] / t[0][0], md);
}

int main(int argc, char **argv) {
    const int rounds = argc > 1 ? atoi(argv[1]) : 100, only = argc > 2 ? atoi(argv[2]) : -1;
    if (rounds < 1) return 1;
    if (only >= 9) {
        chain(rounds, argc > 3 ? atoi(argv[3]) : 4);
        return 0;
    }
    printf("| shape | base us min / med | new us min / med | new/base (min) | base / new GFLOP/s (%% of peak) | max |diff| |\n");
    printf("|---|---|---|---|---|---|\n");
    for (int si = 0; si < (int)(sizeof S / sizeof S[0]); si++) {
        if (only >= 0 && si != only) continue;
        const shp *s = &S[si];
        const int64_t OH = (s->H + 2 * s->pad - s->K) / s->s + 1, OW = (s->W + 2 * s->pad - s->K) / s->s + 1;
        const int64_t ny = s->M * OH * OW;
        float *x = ab_rnd(s->C * s->H * s->W, NULL), *w = ab_rnd(s->M * s->C * s->K * s->K, NULL), *b = ab_rnd(s->M, NULL);
        float *y[2] = {ab_rnd(ny, NULL), ab_rnd(ny, NULL)};
        kiln__fewc p = {.C = s->C, .H = s->H, .W = s->W, .M = s->M, .OH = OH, .OW = OW, .KH = s->K, .KW = s->K,
                        .sy = s->s, .sx = s->s, .pt = s->pad, .pl = s->pad, .x = x, .w = w, .bias = b,
                        .lo = 0.0f, .hi = INFINITY, .nchw16c = s->b16};
        float *wp[2] = {ab_rnd(base_fewc_packed_w(&p), NULL), ab_rnd(new_fewc_packed_w(&p), NULL)};
        base_fewc_pack_w(&p, wp[0]);
        new_fewc_pack_w(&p, wp[1]);
        int64_t ns = base_fewc_scratch(&p) > new_fewc_scratch(&p) ? base_fewc_scratch(&p) : new_fewc_scratch(&p);
        float *scr = ab_rnd(ns, NULL);
        void (*run[2])(const kiln__fewc *, int64_t, int64_t, float *, int64_t, float *) = {base_fewc_rows, new_fewc_rows};
        double *t[2] = {malloc(sizeof(double) * (size_t)rounds), malloc(sizeof(double) * (size_t)rounds)};
        const double peak = cli_fma_peak_gflops(1);
        for (int it = -3; it < rounds; it++)
            for (int h = 0; h < 2; h++) {
                const int k = (h + it + 4) % 2;
                kiln__fewc q = p;
                q.wp = wp[k];
                const double t0 = cli_now_ms();
                for (int64_t oy0 = 0; oy0 < OH; oy0 += 8) {
                    const int64_t oy1 = oy0 + 8 < OH ? oy0 + 8 : OH;
                    if (s->b16)
                        run[k](&q, oy0, oy1, y[k] + oy0 * OW * 16, OH * OW * 16, scr);
                    else
                        run[k](&q, oy0, oy1, y[k] + oy0 * OW, OH * OW, scr);
                }
                if (it >= 0) t[k][it] = (cli_now_ms() - t0) * 1e3;
            }
        double md = 0;
        for (int64_t i = 0; i < ny; i++) md = fmax(md, fabs((double)y[0][i] - y[1][i]));
        for (int i = 0; i < 2; i++) qsort(t[i], (size_t)rounds, sizeof(double), ab_cmpd);
        const double gf = 2.0 * s->M * OH * OW * s->C * s->K * s->K / 1e3;
        printf("| %s | %.1f / %.1f | %.1f / %.1f | %.3f | %.1f / %.1f (%.0f%% / %.0f%% of %.0f) | %g |\n", s->what, t[0][0],
               t[0][rounds / 2], t[1][0], t[1][rounds / 2], t[1][0] / t[0][0], gf / t[0][0], gf / t[1][0],
               100 * gf / t[0][0] / peak, 100 * gf / t[1][0] / peak, peak, md);
        fflush(stdout);
        free(x), free(w), free(b), free(y[0]), free(y[1]), free(wp[0]), free(wp[1]), free(scr), free(t[0]), free(t[1]);
    }
    printf("FMA peak %.1f GFLOP/s (1 thread)\n", cli_fma_peak_gflops(1));
    return 0;
}
