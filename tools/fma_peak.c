/*
 * fma_peak.c — the CPU's measured single-precision FMA peak, for
 * `kiln bench --profile`: each of N threads runs independent chains of
 * vector FMAs (enough of them to cover the FMA latency on two ports) for a
 * fixed count; GFLOP/s = 2 x lanes x FMAs / wall time, the best of 10 trials.  What a perfect
 * kernel could reach on this machine now (it is measured, not taken from
 * a datasheet: turbo, AVX-512 clocks and a shared VM's neighbours count).
 */
#include <pthread.h>
#include <stdint.h>

#include "cli.h"

#if defined(__AVX512F__) || defined(__FMA__)
#include <immintrin.h>
#endif

#define CHAINS 16
#define ROUNDS (1L << 20)

#if defined(__AVX512F__)
typedef __m512 vec;
#define LANES 16
#define SPLAT(x) _mm512_set1_ps(x)
#define FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define LANE0(v) _mm512_cvtss_f32(v)
#elif defined(__FMA__)
typedef __m256 vec;
#define LANES 8
#define SPLAT(x) _mm256_set1_ps(x)
#define FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define LANE0(v) _mm256_cvtss_f32(v)
#else
typedef float vec;
#define LANES 1
#define SPLAT(x) (x)
#define FMA(a, b, c) __builtin_fmaf(a, b, c)
#define LANE0(v) (v)
#endif

static void *chains(void *out) {
    vec acc[CHAINS];
    const vec m = SPLAT(0.9999999f), b = SPLAT(1e-7f);
    for (int j = 0; j < CHAINS; j++) acc[j] = SPLAT((float)j);
    for (long r = 0; r < ROUNDS; r++)
        for (int j = 0; j < CHAINS; j++) acc[j] = FMA(acc[j], m, b);
    float s = 0;
    for (int j = 0; j < CHAINS; j++) s += LANE0(acc[j]);
    *(volatile float *)out = s; /* keeps the chains alive */
    return NULL;
}

/* The best of 10 short trials: on a shared machine a neighbour's burst lowers
 * one trial, never raises it. */
double cli_fma_peak_gflops(int threads) {
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    double best = 0;
    for (int trial = 0; trial < 10; trial++) {
        pthread_t t[64];
        float sink[64];
        double t0 = cli_now_ms();
        int started = 0;
        for (; started < threads; started++)
            if (pthread_create(&t[started], NULL, chains, &sink[started])) break;
        for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
        double s = (cli_now_ms() - t0) / 1e3, g = s > 0 ? 2.0 * LANES * CHAINS * (double)ROUNDS * started / s / 1e9 : 0;
        if (g > best) best = g;
    }
    return best;
}
