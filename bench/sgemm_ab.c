/*
 * sgemm_ab.c — two builds of src/device/cpu/sgemm.c in one process, timed
 * against each other on network GEMM shapes (bench/sgemm_ab.sh builds it:
 * "base" from a git revision, "new" from the working tree, each compiled with
 * its exported names renamed, both linked with build/libkiln.a).
 *
 *     build-sgemm-ab/sgemm_ab [ROUNDS [NAME|all [THREADS [ONLY]]]]
 *
 * Rounds alternate base, new, new, base, ... and each variant's figure is
 * its fastest call (a neighbour's burst on a shared machine slows a call,
 * never speeds one up); operands are hot except with COLD=n in the
 * environment (n copies of the prepacked operand, A or B, used in turn, as a weight read once
 * per inference) and RES=1 adds a residual of C's shape and a relu, as a conv's
 * fused Add + Relu.  Printed: GFLOP/s, % of the FMA peak measured just after
 * (tools/fma_peak.c), new/base and the largest difference of the outputs
 * (0 where the summation order is the same).  ONLY = 0 or 1 times that
 * variant alone (for perf record).
 */
#include "device/cpu/sgemm.h"
#include "kiln_int.h"
#include "ab_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DECL(p)                                                                                    \
    void p##_sgemm(const kiln__gemm *, kiln_exec *);                                              \
    size_t p##_sgemm_pack_a_floats(int64_t, int64_t);                                             \
    void p##_sgemm_pack_a(const kiln__gemm *, float *);                                           \
    size_t p##_sgemm_pack_b_floats(int64_t, int64_t);                                             \
    void p##_sgemm_pack_b(const kiln__gemm *, float *);
DECL(base)
DECL(new)
#undef DECL

typedef struct variant {
    void (*gemm)(const kiln__gemm *, kiln_exec *);
    size_t (*pa_floats)(int64_t, int64_t);
    void (*pack_a)(const kiln__gemm *, float *);
    size_t (*pb_floats)(int64_t, int64_t);
    void (*pack_b)(const kiln__gemm *, float *);
} variant;
static const variant V[2] = {
    {base_sgemm, base_sgemm_pack_a_floats, base_sgemm_pack_a, base_sgemm_pack_b_floats, base_sgemm_pack_b},
    {new_sgemm, new_sgemm_pack_a_floats, new_sgemm_pack_a, new_sgemm_pack_b_floats, new_sgemm_pack_b}};

/* How the network calls the GEMM: a conv's prepacked weights as A with its
 * input as a plain B matrix (packed by the GEMM) or read in place (shifted
 * rows, Conv tactic 4), or a MatMul's activations as A with a prepacked
 * weight as B. */
enum { A_PACKED_B_MATRIX, A_PACKED_B_IN_PLACE, B_PACKED };
static const struct {
    int M, N, K, kind;
    const char *what;
} S[] = {
    {256, 3136, 64, A_PACKED_B_MATRIX, "r50 1x1 64->256 56^2"},
    {64, 3136, 256, A_PACKED_B_MATRIX, "r50 1x1 256->64 56^2"},
    {64, 3136, 256, A_PACKED_B_IN_PLACE, "r50 1x1 256->64 56^2 inpl"},
    {64, 3136, 64, A_PACKED_B_IN_PLACE, "r50 1x1 64->64 56^2 inpl"},
    {128, 784, 512, A_PACKED_B_IN_PLACE, "r50 1x1 512->128 28^2 inpl"},
    {512, 784, 128, A_PACKED_B_IN_PLACE, "r50 1x1 128->512 28^2 inpl"},
    {256, 196, 1024, A_PACKED_B_MATRIX, "r50 1x1 1024->256 14^2"},
    {1024, 196, 256, A_PACKED_B_MATRIX, "r50 1x1 256->1024 14^2"},
    {2048, 49, 512, A_PACKED_B_MATRIX, "r50 1x1 512->2048 7^2"},
    {512, 49, 2048, A_PACKED_B_MATRIX, "r50 1x1 2048->512 7^2"},
    {512, 49, 4608, A_PACKED_B_MATRIX, "r50 3x3 512 7^2"},
    {49, 2048, 512, B_PACKED, "r50 1x1 512->2048 7^2 T"},
    {49, 512, 2048, B_PACKED, "r50 1x1 2048->512 7^2 T"},
    {49, 512, 4608, B_PACKED, "r50 3x3 512 7^2 T"},
    {512, 16, 512, A_PACKED_B_MATRIX, "r50 wino2 7^2 one of 16"},
    {256, 16, 256, A_PACKED_B_MATRIX, "r50 wino4 14^2 one of 36"},
    {144, 512, 256, A_PACKED_B_MATRIX, "in L2, 12 | M 144x512x256"},
    {128, 768, 768, B_PACKED, "bert 768x768"},
    {128, 3072, 768, B_PACKED, "bert FFN1 3072x768"},
    {128, 768, 3072, B_PACKED, "bert FFN2 768x3072"},
};

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    const char *only = argc > 2 && strcmp(argv[2], "all") ? argv[2] : NULL;
    int threads = argc > 3 ? atoi(argv[3]) : 1;
    int alone = argc > 4 ? atoi(argv[4]) : -1;
    kiln__pool *pool = threads > 1 ? kiln__pool_create(threads) : NULL;
    kiln_exec e = {.device = KILN_DEVICE_CPU, .pool = pool};
    int copies = getenv("COLD") ? atoi(getenv("COLD")) : 1;
    int res = getenv("RES") && atoi(getenv("RES")); /* a residual of C's shape + relu, as a conv's fused Add */
    if (copies < 1) copies = 1;
    printf("FMA peak %.1f GFLOP/s (1 thread); %d thread(s), %d round(s)%s\n", cli_fma_peak_gflops(1), threads,
           rounds, copies > 1 ? ", cold prepacked weights" : "");
    srand(1);
    for (size_t s = 0; s < sizeof S / sizeof S[0]; s++) {
        if (only && !strstr(S[s].what, only)) continue;
        int64_t M = S[s].M, N = S[s].N, K = S[s].K;
        float *a = malloc(sizeof(float) * (size_t)(M * K)), *b = malloc(sizeof(float) * (size_t)(K * N + 64));
        int64_t *off = malloc(sizeof(int64_t) * (size_t)K);
        for (int64_t i = 0; i < M * K; i++) a[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        for (int64_t i = 0; i < K * N + 64; i++) b[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        for (int64_t k = 0; k < K; k++) off[k] = k * N;
        kiln__gemm g[2];
        float *c[2], *packed[2], *r = NULL;
        if (res) {
            r = malloc(sizeof(float) * (size_t)(M * N));
            for (int64_t i = 0; i < M * N; i++) r[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        }
        size_t pfloats[2];
        int ncopies = copies;
        for (int v = 0; v < 2; v++) {
            c[v] = malloc(sizeof(float) * (size_t)(M * N));
            memset(&g[v], 0, sizeof g[v]);
            g[v] = (kiln__gemm){.M = M, .N = N, .K = K, .a = a, .a_rs = K, .a_cs = 1, .alpha = 1, .b = b,
                                .b_rs = N, .b_cs = 1, .c = c[v], .ldc = N, .res = r, .ldr = N, .relu = res};
            int pb = S[s].kind == B_PACKED;
            pfloats[v] = pb ? V[v].pb_floats(K, N) : V[v].pa_floats(M, K);
            packed[v] = kiln__aligned_alloc(pfloats[v] * (size_t)ncopies * sizeof(float));
            for (int q = 0; q < ncopies; q++)
                (pb ? V[v].pack_b : V[v].pack_a)(&g[v], packed[v] + pfloats[v] * (size_t)q);
            if (pb) g[v].b_packed = packed[v];
            else g[v].a_packed = packed[v];
            if (S[s].kind == A_PACKED_B_IN_PLACE) g[v].b = NULL, g[v].b_shift = b, g[v].b_off = off;
        }
        double flop = 2.0 * (double)(M * N * K), best[2] = {1e9, 1e9};
        int reps = (int)(2e9 / flop) + 3;
        for (int r = 0; r < rounds; r++)
            for (int i = 0; i < 2; i++) {
                int v = r & 1 ? 1 - i : i;
                if (alone >= 0 && v != alone) continue;
                for (int q = 0; q < reps; q++) {
                    if (ncopies > 1) {
                        float *pk = packed[v] + pfloats[v] * (size_t)((r * reps + q) % ncopies);
                        if (S[s].kind == B_PACKED) g[v].b_packed = pk;
                        else g[v].a_packed = pk;
                    }
                    double t0 = ab_now();
                    V[v].gemm(&g[v], pool ? &e : NULL);
                    double t = ab_now() - t0;
                    if (t < best[v]) best[v] = t;
                }
            }
        double diff = 0, pk = cli_fma_peak_gflops(1) * threads;
        for (int64_t i = 0; i < M * N; i++) {
            double d = c[0][i] > c[1][i] ? c[0][i] - c[1][i] : c[1][i] - c[0][i];
            if (d > diff) diff = d;
        }
        printf("%-28s %4lldx%4lldx%4lld  base %6.1f GFLOP/s (%4.1f%%)  new %6.1f (%4.1f%%)  new/base %.3f  "
               "max diff %.2g  peak %.0f\n",
               S[s].what, (long long)M, (long long)N, (long long)K, flop / best[0] * 1e-9,
               100 * flop / best[0] * 1e-9 / pk, flop / best[1] * 1e-9, 100 * flop / best[1] * 1e-9 / pk,
               best[0] / best[1], diff, pk);
        fflush(stdout);
        for (int v = 0; v < 2; v++) kiln__aligned_free(packed[v]), free(c[v]);
        free(a), free(b), free(off), free(r);
    }
    if (pool) kiln__pool_free(pool);
    return 0;
}
