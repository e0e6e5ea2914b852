/*
 * ab_util.h — what the kernel A/B programs (bench/NAME_ab.c, built by
 * kernel_ab.sh and attn_ab.sh) share: uniform random floats in [-0.5, 0.5]
 * in 64-byte aligned buffers, and the comparison qsort needs for a median
 * of timings.
 */
#ifndef KILN_BENCH_AB_UTIL_H
#define KILN_BENCH_AB_UTIL_H

#include <stdint.h>
#include <stdlib.h>

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
