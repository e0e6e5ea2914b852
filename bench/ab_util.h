/*
 * ab_util.h — what the kernel A/B programs (bench/NAME_ab.c, built by
 * kernel_ab.sh and attn_ab.sh) share: uniform random floats in [-0.5, 0.5]
 * in 64-byte aligned buffers, the comparison qsort needs for a median
 * of timings, and the clock: the FMA peak they print comes from
 * tools/fma_peak.c (linked into each program), which reads the CLI's
 * cli_now_ms (tools/args.c there); each program is one translation unit,
 * so that clock is defined here, once.
 */
#ifndef KILN_BENCH_AB_UTIL_H
#define KILN_BENCH_AB_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

double cli_fma_peak_gflops(int threads); /* tools/fma_peak.c */
double cli_now_ms(void);
double cli_now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* Seconds, on the same clock. */
static inline double ab_now(void) { return cli_now_ms() * 1e-3; }

/* n floats from rand_r(seed), or rand() where seed is NULL, in whole
 * 64-byte lines plus 64 floats of slack that a vector kernel may read past
 * the end (dwrows_ab's tails). */
static inline float *ab_rnd(int64_t n, unsigned *seed) {
    float *p = aligned_alloc(64, (size_t)((n * 4 + 63) / 64 * 64 + 256));
    for (int64_t i = 0; p && i < n; i++) p[i] = (float)(seed ? rand_r(seed) : rand()) / (float)RAND_MAX - 0.5f;
    return p;
}

static inline int ab_cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#endif /* KILN_BENCH_AB_UTIL_H */
