/* test_sgemm.c — the packed SGEMM (src/device/cpu/sgemm.c) against a naive
 * double-precision reference: random M/N/K including the edges of the
 * register tile (1 .. MR+1 rows, NR-1 .. NR+1 columns, K = 1, around the K
 * block), every way of handing it B (matrix, transposed, packing callback,
 * shifted rows, prepacked), prepacked or strided A, alpha, bias, ReLU,
 * accumulate, a residual, the done hook, with 1 and 2 threads (and 3 for
 * the split over K); results must be the same bit for bit from run to run
 * at a given thread count.
 *
 * `test_sgemm timing` (run by hand, not by ctest) prints GFLOP/s of the
 * shapes of a transformer encoder and of ResNet-18's convolutions. */
#include "kiln/plugin.h"
#include "kiln_int.h"
#include "device/cpu/sgemm.h"
#include "test.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { B_MATRIX, B_TRANS, B_CALLBACK, B_SHIFT, B_PREPACKED, B_KINDS };
static const char *const b_kind_name[] = {"matrix", "transposed", "callback", "shift",
                                          "prepacked"};

typedef struct problem {
    int64_t M, N, K;
    float *a;      /* row-major M x K, or K x M when a_trans */
    int a_trans;
    float *b;      /* row-major K x N (K x ldb for shift), or N x K when b_kind == B_TRANS */
    int64_t ldb;
    int b_kind;
    int64_t *b_off;
    float *bias;
    float alpha;
    int relu, accumulate, pack_a, split_k;
    float *c0;  /* C before the call (accumulate) */
    float *res; /* M x N residual added before relu, or NULL */
} problem;

static int g_max_threads = 2; /* check_case runs 1 .. this many */
static int g_same_bits;       /* check_case: every thread count gives 1 thread's bits */

static void packb_cb(const void *ud, int64_t k0, int64_t kc, int64_t n0, int64_t nc, int nr,
                     float *dst) {
    const problem *p = ud;
    for (int64_t s = 0; s < nc; s += nr)
        for (int64_t k = 0; k < kc; k++)
            for (int j = 0; j < nr; j++) {
                int64_t col = n0 + s + j;
                dst[s * kc + k * nr + j] =
                    (s + j < nc) ? p->b[(k0 + k) * p->ldb + col] : 0.0f;
            }
}

typedef struct done_log {
    int64_t M, N;
    unsigned char *seen; /* M x N: times each element was reported final */
} done_log;

static void done_cb(void *ud, int64_t i0, int64_t i1, int64_t j0, int64_t n) {
    done_log *d = ud;
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = j0; j < j0 + n; j++) __atomic_fetch_add(&d->seen[i * d->N + j], 1, __ATOMIC_RELAXED);
}

static double a_at(const problem *p, int64_t i, int64_t k) {
    return p->a_trans ? p->a[k * p->M + i] : p->a[i * p->K + k];
}
static double b_at(const problem *p, int64_t k, int64_t j) {
    if (p->b_kind == B_TRANS) return p->b[j * p->K + k];
    if (p->b_kind == B_SHIFT) return p->b[p->b_off[k] + j];
    return p->b[k * p->ldb + j];
}

/* Run the problem through kiln__sgemm with `threads` (1: no pool) into c. */
static void run(const problem *p, int threads, float *c, done_log *dl, float *packed) {
    kiln__gemm g;
    memset(&g, 0, sizeof g);
    g.M = p->M, g.N = p->N, g.K = p->K;
    g.a = p->a;
    g.a_rs = p->a_trans ? 1 : p->K;
    g.a_cs = p->a_trans ? p->M : 1;
    g.alpha = p->alpha;
    g.c = c, g.ldc = p->N;
    g.accumulate = p->accumulate;
    g.bias_row = p->bias;
    g.relu = p->relu;
    g.res = p->res, g.ldr = p->N;
    g.split_k = p->split_k;
    switch (p->b_kind) {
    case B_MATRIX: case B_PREPACKED: g.b = p->b, g.b_rs = p->ldb, g.b_cs = 1; break;
    case B_TRANS: g.b = p->b, g.b_rs = 1, g.b_cs = p->K; break;
    case B_CALLBACK: g.packb = packb_cb, g.packb_ud = p; break;
    case B_SHIFT: g.b_shift = p->b, g.b_off = p->b_off; break;
    }
    if (dl) g.done = done_cb, g.done_ud = dl;
    float *pa = NULL, *pb = NULL;
    if (p->pack_a) {
        pa = kiln__aligned_alloc(kiln__sgemm_pack_a_floats(p->M, p->K) * sizeof(float));
        ASSERT(pa);
        kiln__sgemm_pack_a(&g, pa);
        g.a_packed = pa;
    }
    if (p->b_kind == B_PREPACKED) {
        pb = packed;
        kiln__sgemm_pack_b(&g, pb);
        g.b_packed = pb;
    }
    if (p->accumulate) memcpy(c, p->c0, (size_t)(p->M * p->N) * sizeof(float));
    if (threads <= 1) {
        kiln__sgemm(&g, NULL);
    } else {
        kiln__pool *pool = kiln__pool_create(threads);
        ASSERT(pool);
        kiln_exec e = {.device = KILN_DEVICE_CPU, .pool = pool};
        kiln__sgemm(&g, &e);
        kiln__pool_free(pool);
    }
    kiln__aligned_free(pa);
}

static void check_case(uint64_t *rs, int64_t M, int64_t N, int64_t K, int b_kind, int flags) {
    problem p = {.M = M, .N = N, .K = K, .b_kind = b_kind};
    p.a_trans = flags & 1;
    p.relu = (flags >> 1) & 1;
    p.accumulate = (flags >> 2) & 1;
    p.pack_a = (flags >> 3) & 1;
    int with_bias = (flags >> 4) & 1, with_done = (flags >> 5) & 1;
    p.alpha = (flags >> 6) & 1 ? 0.75f : 1.0f;
    p.split_k = (flags >> 7) & 1;
    int with_res = (flags >> 8) & 1;
    int64_t nr = kiln__sgemm_nr();
    p.a = malloc((size_t)(M * K) * sizeof(float));
    p.ldb = b_kind == B_SHIFT ? N + 3 : N;
    size_t bsz = (size_t)(K * p.ldb + nr + 16);
    p.b = malloc(bsz * sizeof(float));
    p.b_off = malloc((size_t)K * sizeof(int64_t));
    p.bias = with_bias ? malloc((size_t)M * sizeof(float)) : NULL;
    p.c0 = malloc((size_t)(M * N) * sizeof(float));
    p.res = with_res ? malloc((size_t)(M * N) * sizeof(float)) : NULL;
    ASSERT(p.a && p.b && p.b_off && p.c0);
    for (int64_t i = 0; i < M * K; i++) p.a[i] = test_randf(rs, -1, 1);
    for (size_t i = 0; i < bsz; i++) p.b[i] = test_randf(rs, -1, 1);
    /* shifted rows: row k starts at a scattered offset (rows overlap, as in a
     * convolution over a padded input) */
    for (int64_t k = 0; k < K; k++)
        p.b_off[k] = (int64_t)(test_rand_u64(rs) % (uint64_t)((K - 1) * p.ldb + 1));
    for (int64_t i = 0; with_bias && i < M; i++) p.bias[i] = test_randf(rs, -1, 1);
    for (int64_t i = 0; i < M * N; i++) p.c0[i] = test_randf(rs, -1, 1);
    for (int64_t i = 0; with_res && i < M * N; i++) p.res[i] = test_randf(rs, -1, 1);

    size_t cn = (size_t)(M * N);
    float *c1 = malloc(cn * sizeof(float)), *c2 = malloc(cn * sizeof(float));
    float *packed = kiln__aligned_alloc(kiln__sgemm_pack_b_floats(K, N) * sizeof(float) + 64);
    unsigned char *seen = calloc(cn, 1);
    float *one = malloc(cn * sizeof(float)); /* the 1-thread result */
    ASSERT(c1 && c2 && packed && seen && one);
    for (int threads = 1; threads <= g_max_threads; threads++) {
        float *first = NULL;
        for (int rep = 0; rep < 2; rep++) {
            float *c = rep ? c2 : c1;
            for (size_t i = 0; i < cn; i++) c[i] = NAN; /* poison */
            memset(seen, 0, cn);
            done_log dl = {M, N, seen};
            run(&p, threads, c, with_done ? &dl : NULL, packed);
            if (rep == 0) first = c;
            else if (memcmp(first, c, cn * sizeof(float)) != 0)
                TEST__FAIL("M=%lld N=%lld K=%lld B=%s flags=%d threads=%d: two runs differ",
                           (long long)M, (long long)N, (long long)K, b_kind_name[b_kind], flags,
                           threads);
            if (rep == 0 && threads == 1) memcpy(one, c, cn * sizeof(float));
            else if (rep == 0 && g_same_bits && memcmp(one, c, cn * sizeof(float)) != 0)
                TEST__FAIL("M=%lld N=%lld K=%lld B=%s flags=%d threads=%d: not 1 thread's bits",
                           (long long)M, (long long)N, (long long)K, b_kind_name[b_kind], flags,
                           threads);
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double s = 0, mag = 0;
                    for (int64_t k = 0; k < K; k++) {
                        double t = a_at(&p, i, k) * b_at(&p, k, j);
                        s += t;
                        mag += fabs(t);
                    }
                    s *= p.alpha;
                    if (p.bias) s += p.bias[i];
                    if (p.accumulate) s += p.c0[i * N + j];
                    if (p.res) s += p.res[i * N + j];
                    if (p.relu && s < 0) s = 0;
                    double got = c[i * N + j];
                    double tol = 2e-6 * (mag + 2.0) + 1e-6;
                    if (!(fabs(got - s) <= tol))
                        TEST__FAIL("M=%lld N=%lld K=%lld B=%s flags=%d threads=%d: C[%lld,%lld] "
                                   "= %.9g, expected %.9g",
                                   (long long)M, (long long)N, (long long)K, b_kind_name[b_kind],
                                   flags, threads, (long long)i, (long long)j, got, s);
                    if (with_done && seen[i * N + j] != 1)
                        TEST__FAIL("M=%lld N=%lld K=%lld B=%s threads=%d: done hook reported "
                                   "C[%lld,%lld] %d times, expected once",
                                   (long long)M, (long long)N, (long long)K, b_kind_name[b_kind],
                                   threads, (long long)i, (long long)j, seen[i * N + j]);
                }
        }
    }
    free(p.a), free(p.b), free(p.b_off), free(p.bias), free(p.c0), free(p.res);
    free(c1), free(c2), free(seen), free(one);
    kiln__aligned_free(packed);
}

/* The edges of the register tile and of the K block, every kind of B. */
TEST_IMPL(sgemm_edges) {
    uint64_t rs = 0x5EED1234u;
    int64_t nr = kiln__sgemm_nr();
    const int64_t Ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 25, 150};
    /* 49 and 52: a last strip of 17 and 20 columns (the AVX-512 build's
     * 16-wide kernel + narrow columns), 97 and 67 of 1 and 3 (narrow only) */
    const int64_t Ns[] = {1, nr - 1, nr, nr + 1, 2 * nr + 3, 97, 49, 52};
    const int64_t Ks[] = {1, 3, 17, 255, 257};
    int n = 0;
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++)
            for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
                int b_kind = (int)((mi + ni + ki) % B_KINDS);
                int flags = (int)(test_rand_u64(&rs) % 128);
                check_case(&rs, Ms[mi], Ns[ni], Ks[ki], b_kind, flags);
                n++;
            }
    fprintf(stderr, "%d shapes\n", n);
}

/* B read in place (shifted rows) on every row-tile form (12 rows, the 4-
 * and 8-row tails, several tiles) and full 32-column strips (their rows
 * stored from registers), K shorter than the micro-kernels' prefetch
 * distance (8 rows ahead, clamped to the panel's last row) and K across a
 * K block; every store option. */
TEST_IMPL(sgemm_shift_tiles) {
    uint64_t rs = 0x5817F7u;
    const int64_t Ms[] = {4, 8, 12, 16, 20, 64};
    const int64_t Ks[] = {1, 5, 8, 9, 300};
    int64_t nr = kiln__sgemm_nr();
    for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
            for (int flags = 0; flags < 64; flags += 2 + (int)(test_rand_u64(&rs) % 9))
                check_case(&rs, Ms[mi], 2 * nr, Ks[ki], B_SHIFT, flags);
}

/* Random shapes, every B kind with every option. */
TEST_IMPL(sgemm_random) {
    uint64_t rs = 0xC0FFEEu;
    for (int t = 0; t < 60; t++) {
        int64_t M = 1 + (int64_t)(test_rand_u64(&rs) % 160);
        int64_t N = 1 + (int64_t)(test_rand_u64(&rs) % 300);
        int64_t K = 1 + (int64_t)(test_rand_u64(&rs) % 600);
        check_case(&rs, M, N, K, t % B_KINDS, (int)(test_rand_u64(&rs) % 128));
    }
}

/* Shapes large enough for several column and row blocks and for both ways
 * of splitting the work over threads. */
TEST_IMPL(sgemm_large) {
    uint64_t rs = 0xABCDEFu;
    check_case(&rs, 300, 2100, 70, B_MATRIX, 16 | 32);
    check_case(&rs, 520, 49, 300, B_CALLBACK, 8 | 16 | 32);
    check_case(&rs, 128, 768, 256, B_PREPACKED, 16);
    /* a prepacked B wider than A is tall, over 1 MiB (2 threads split its columns),
     * with its next strip prefetched across K blocks and column blocks
     * (N > NC), a partial last strip, A transposed in one */
    check_case(&rs, 37, 2085, 600, B_PREPACKED, 1 | 4 | 16 | 32 | 64);
    check_case(&rs, 128, 600, 520, B_PREPACKED, 2 | 32);
    check_case(&rs, 13, 97, 3000, B_PREPACKED, 0);
    check_case(&rs, 64, 3000, 27, B_SHIFT, 2 | 16 | 32);
    check_case(&rs, 200, 1, 513, B_MATRIX, 4);
    check_case(&rs, 1, 1000, 513, B_TRANS, 4 | 16);
    /* a prepacked A larger than B (threads split its rows), a partial
     * last row tile and strip, B as a matrix, shifted rows and by
     * callback, 1-3 threads; and at M = N (columns) */
    g_max_threads = 3;
    check_case(&rs, 1021, 197, 259, B_MATRIX, 8 | 16 | 32 | 256 | 2);
    check_case(&rs, 517, 61, 300, B_SHIFT, 8 | 16 | 32 | 256);
    check_case(&rs, 400, 70, 513, B_CALLBACK, 8 | 2 | 32);
    check_case(&rs, 196, 196, 64, B_MATRIX, 8 | 16 | 32 | 256);
    check_case(&rs, 257, 196, 1030, B_MATRIX, 8 | 2);
    g_max_threads = 2;
}

/* The split over K (kiln__gemm.split_k, Conv tactic 11): whole K blocks
 * per thread (2 and 3 threads over 2..9 blocks, a partial last one), the
 * partials summed with bias, residual, relu and the done hook; odd M and
 * N, B as a matrix and as shifted rows (where it splits), prepacked or
 * plain A; and where it does not apply (one K block, accumulate, B by
 * callback or prepacked) the usual split. */
TEST_IMPL(sgemm_split_k) {
    uint64_t rs = 0x5B117Cu;
    const int64_t kc = kiln__sgemm_kc();
    g_max_threads = 3;
    const struct { int64_t M, N, K; int b_kind, flags; } cs[] = {
        {37, 61, 2 * kc + 1, B_MATRIX, 8 | 16 | 2},
        {256, 196, 4 * kc, B_SHIFT, 8 | 16 | 2 | 32},
        {61, 49, 8 * kc + 7, B_MATRIX, 8 | 16 | 2 | 256},
        {13, 97, 3 * kc - 5, B_SHIFT, 16 | 2 | 256 | 32},
        {150, 33, 2 * kc, B_MATRIX, 8 | 1 | 64 | 32},
        {5, 3, 2 * kc + 9, B_SHIFT, 8 | 16}, /* one tile: not split */
        {40, 70, kc - 3, B_MATRIX, 8 | 16 | 2 | 256},         /* one K block */
        {40, 70, 2 * kc + 3, B_MATRIX, 8 | 16 | 4 | 256},     /* accumulate */
        {40, 70, 2 * kc + 3, B_CALLBACK, 8 | 16 | 2 | 32},    /* B by callback */
        {40, 70, 2 * kc + 3, B_PREPACKED, 16 | 2 | 256 | 32}, /* B prepacked */
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        check_case(&rs, cs[i].M, cs[i].N, cs[i].K, cs[i].b_kind, cs[i].flags | 128);
    g_max_threads = 2;
}

/* K <= 64 (one short K block) runs one row tile a block over all the
 * strips of a column block: M past MC (144) in odd counts, N past a column
 * block (NC = 2048), K at the edges of the rule (64 in, 65 not), B as a
 * matrix, shifted rows or by callback, with residual, relu, bias, the done
 * hook and accumulate, at 1-3 threads. */
TEST_IMPL(sgemm_short_k) {
    uint64_t rs = 0x5407Cu;
    g_max_threads = 3;
    const struct { int64_t M, N, K; int b_kind, flags; } cs[] = {
        {157, 97, 64, B_MATRIX, 8 | 16 | 2 | 256},
        {157, 2100, 63, B_MATRIX, 8 | 2 | 256 | 32},
        {300, 197, 65, B_MATRIX, 8 | 16 | 2 | 256},
        {150, 61, 17, B_SHIFT, 8 | 16 | 2 | 32},
        {150, 61, 64, B_CALLBACK, 16 | 4},
        {13, 2051, 1, B_SHIFT, 8 | 2 | 256},
        {25, 33, 64, B_PREPACKED, 16 | 2 | 32},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        check_case(&rs, cs[i].M, cs[i].N, cs[i].K, cs[i].b_kind, cs[i].flags);
    g_max_threads = 2;
}

/* A prepacked B split by columns (wide weights: N >= 2M, over 1 MiB) in
 * runs of strips the threads claim as they go, each its own share first,
 * then the others' from their backs (sgemm.c's dyn_task, A
 * packed whole per thread): runs of 5, 4, 3 (5 rows) and 1 strips, a partial last run
 * and strip, M over MC (two row blocks), K across K blocks, bias,
 * residual, relu, accumulate, alpha, A transposed, the done hook; 1-3
 * threads, each giving 1 thread's bits. */
TEST_IMPL(sgemm_column_runs) {
    uint64_t rs = 0xC01DC0u;
    g_max_threads = 3;
    g_same_bits = 1;
    const struct { int64_t M, N, K; int flags; } cs[] = {
        {150, 700, 400, 2 | 16 | 32 | 256}, /* 5 strips a run */
        {128, 1000, 520, 1 | 16 | 32},      /* 4 */
        {130, 300, 2000, 4 | 64 | 32},      /* 1 */
        {5, 1200, 300, 16 | 32},            /* few rows: 3 strips a run (4 runs a thread) */
        {1, 2085, 300, 16 | 2},             /* one row: gemv_block, the fixed split */
        {25, 2085, 270, 8 | 2 | 256},       /* A prepacked: the fixed split */
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        check_case(&rs, cs[i].M, cs[i].N, cs[i].K, B_PREPACKED, cs[i].flags);
    g_same_bits = 0;
    g_max_threads = 2;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* By hand: GFLOP/s of model shapes (not a pass/fail test). */
/* 260 sampled entries of c (its corners among them) against the double
 * reference: the timing shapes' operands are laid out as the timing sets
 * them up (shifted rows at conv-like offsets, prepacked copies), so the
 * configurations it times are checked to compute the right thing. */
static void check_sampled(const problem *p, const float *c, const char *what, int th, uint64_t *rs) {
    const int64_t M = p->M, N = p->N, K = p->K;
    for (int q = 0; q < 260; q++) {
        int64_t i = q < 4 ? (q & 1) * (M - 1) : (int64_t)(test_rand_u64(rs) % (uint64_t)M);
        int64_t j = q < 4 ? (q >> 1) * (N - 1) : (int64_t)(test_rand_u64(rs) % (uint64_t)N);
        double s = 0, mag = 0;
        for (int64_t k = 0; k < K; k++) {
            double t = a_at(p, i, k) * b_at(p, k, j);
            s += t;
            mag += fabs(t);
        }
        double got = c[i * N + j];
        if (!(fabs(got - s) <= 2e-6 * (mag + 2.0) + 1e-6))
            TEST__FAIL("%s %lldx%lldx%lld, %d threads: C[%lld,%lld] = %.9g, expected %.9g", what, (long long)M,
                       (long long)N, (long long)K, th, (long long)i, (long long)j, got, s);
    }
}

/* The GEMM shapes of the models bench/README.md follows, each run at 1 and
 * 2 threads into a NaN-poisoned C and checked (check_sampled).  With
 * KILN_SGEMM_TIMING set ("1": all, else a name prefix) they are also timed
 * and their GFLOP/s printed: a benchmark by hand, never a pass/fail on
 * time. */
static void timing_shapes(void) {
    /* pw: B is a pointwise conv's input read in place (row k at k * N) */
    static const struct { int64_t M, N, K; int b_kind, pack_a; const char *what; int pw; } s[] = {
        {128, 2304, 768, B_PREPACKED, 0, "bert QKV", 0},
        {128, 768, 768, B_PREPACKED, 0, "bert out-proj", 0},
        {128, 3072, 768, B_PREPACKED, 0, "bert FFN1", 0},
        {128, 768, 3072, B_PREPACKED, 0, "bert FFN2", 0},
        {128, 768, 256, B_PREPACKED, 0, "transformer QKV", 0},
        {128, 256, 256, B_PREPACKED, 0, "transformer out-proj", 0},
        {128, 1024, 256, B_PREPACKED, 0, "transformer FFN1", 0},
        {128, 256, 1024, B_PREPACKED, 0, "transformer FFN2", 0},
        {64, 3136, 576, B_SHIFT, 1, "resnet 3x3 64ch 56^2", 0},
        {128, 784, 1152, B_SHIFT, 1, "resnet 3x3 128ch 28^2", 0},
        {256, 196, 2304, B_SHIFT, 1, "resnet 3x3 256ch 14^2", 0},
        {512, 49, 4608, B_CALLBACK, 1, "resnet 3x3 512ch 7^2", 0},
        {64, 196, 384, B_SHIFT, 1, "mobilenet 1x1 384->64 14^2", 0},
        {384, 196, 64, B_SHIFT, 1, "mobilenet 1x1 64->384 14^2", 0},
        {960, 49, 160, B_SHIFT, 1, "mobilenet 1x1 160->960 7^2", 0},
        {2048, 49, 512, B_MATRIX, 1, "resnet50 1x1 512->2048 7^2", 0},
        {512, 49, 2048, B_MATRIX, 1, "resnet50 1x1 2048->512 7^2", 0},
        {1024, 196, 256, B_MATRIX, 1, "resnet50 1x1 256->1024 14^2", 0},
        {64, 3136, 256, B_SHIFT, 1, "resnet50 1x1 256->64 56^2", 1},
        {64, 3136, 256, B_MATRIX, 1, "resnet50 1x1 256->64 56^2 packed", 0},
        {64, 3136, 64, B_SHIFT, 1, "resnet50 1x1 64->64 56^2", 1},
        {256, 3136, 64, B_MATRIX, 1, "resnet50 1x1 64->256 56^2", 0},
        {128, 3136, 256, B_MATRIX, 1, "resnet50 1x1 256->128 56^2", 0},
        {64, 12880, 147, B_SHIFT, 1, "resnet50 conv1 7x7 s2", 0},
    };
    uint64_t rs = 42;
    kiln__pool *pool = kiln__pool_create(2);
    kiln_exec e = {.device = KILN_DEVICE_CPU, .pool = pool};
    const char *only = getenv("KILN_SGEMM_TIMING"); /* a name prefix, or "1": all; unset: checks only */
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        if (only && strcmp(only, "1") && strncmp(s[i].what, only, strlen(only))) continue;
        problem p = {.M = s[i].M, .N = s[i].N, .K = s[i].K, .b_kind = s[i].b_kind,
                     .alpha = 1, .pack_a = s[i].pack_a};
        int64_t M = p.M, N = p.N, K = p.K;
        p.ldb = p.b_kind == B_SHIFT && !s[i].pw ? N + 2 : N;
        size_t bsz = (size_t)(K * p.ldb + 64);
        p.a = malloc((size_t)(M * K) * sizeof(float));
        p.b = malloc(bsz * sizeof(float));
        p.b_off = malloc((size_t)K * sizeof(int64_t));
        float *c = malloc((size_t)(M * N) * sizeof(float));
        ASSERT(p.a && p.b && p.b_off && c);
        /* KILN_SGEMM_COLD=n: n copies of a prepacked B used in turn, so
         * that (n large enough) each call finds its weights out of cache, as
         * a model's layer does (each weight is used once per inference) */
        const char *cold = getenv("KILN_SGEMM_COLD");
        int copies = p.b_kind == B_PREPACKED && cold ? atoi(cold) : 1;
        if (copies < 1) copies = 1;
        size_t pbf = kiln__sgemm_pack_b_floats(K, N);
        float *packed = kiln__aligned_alloc(pbf * (size_t)copies * sizeof(float));
        for (int64_t j = 0; j < M * K; j++) p.a[j] = test_randf(&rs, -1, 1);
        for (size_t j = 0; j < bsz; j++) p.b[j] = test_randf(&rs, -1, 1);
        for (int64_t k = 0; k < K; k++) p.b_off[k] = s[i].pw ? k * N : (k % 9) * 2 + (k / 9) * p.ldb / 4;
        kiln__gemm g;
        memset(&g, 0, sizeof g);
        g.M = M, g.N = N, g.K = K, g.a = p.a, g.a_rs = K, g.a_cs = 1, g.alpha = 1;
        g.c = c, g.ldc = N;
        if (p.b_kind == B_SHIFT) g.b_shift = p.b, g.b_off = p.b_off;
        else if (p.b_kind == B_CALLBACK) g.packb = packb_cb, g.packb_ud = &p;
        else g.b = p.b, g.b_rs = N, g.b_cs = 1;
        float *pa = NULL;
        if (p.pack_a) {
            pa = kiln__aligned_alloc(kiln__sgemm_pack_a_floats(M, K) * sizeof(float));
            kiln__sgemm_pack_a(&g, pa);
            g.a_packed = pa;
        }
        if (p.b_kind == B_PREPACKED) {
            for (int q = 0; q < copies; q++) kiln__sgemm_pack_b(&g, packed + pbf * (size_t)q);
            g.b_packed = packed;
        }
        double flop = 2.0 * (double)(M * N * K);
        for (int th = 1; th <= 2; th++) {
            /* the best single call: on a machine shared with other work a
             * call that was not preempted shows what the kernel does */
            int reps = only ? (int)(1e10 / flop) + 5 : 1;
            double best = 1e9, best_cpu = 1e9; /* wall, and CPU time of all threads */
            for (int64_t j = 0; j < M * N; j++) c[j] = NAN; /* poison */
            for (int r = 0; r < reps; r++) {
                if (g.b_packed) g.b_packed = packed + pbf * (size_t)(r % copies);
                double t0 = now_s(), c0 = cpu_s();
                kiln__sgemm(&g, th == 1 ? NULL : &e);
                double t = now_s() - t0, tc = cpu_s() - c0;
                if (t < best) best = t;
                if (tc < best_cpu) best_cpu = tc;
            }
            check_sampled(&p, c, s[i].what, th, &rs);
            if (only)
                printf("%-24s %4lldx%4lldx%4lld  %d thr  %8.1f us  %6.1f GFLOP/s  (CPU %8.1f us: %6.1f per "
                       "thread)\n", s[i].what, (long long)M, (long long)N, (long long)K, th, best * 1e6,
                       flop / best * 1e-9, best_cpu * 1e6, flop / best_cpu * th * 1e-9);
        }
        kiln__aligned_free(pa);
        kiln__aligned_free(packed);
        free(p.a), free(p.b), free(p.b_off), free(c);
    }
    kiln__pool_free(pool);
}

/* A packed operand is written whole, up to the 64-byte line the size
 * rounds to: its bytes go into engine files, so none may be left over from
 * the buffer (ResNet's stem, 64 x 147, left 32 bytes of heap behind).  The
 * buffer starts as 0xFF bytes (NaNs); every float must be a packed value or
 * a zero, and two packs into differently poisoned buffers must agree. */
TEST_IMPL(sgemm_packed_whole) {
    uint64_t rs = 0x7A11u;
    const int64_t shapes[][2] = {{64, 147}, {1, 1}, {13, 5}, {12, 16}, {37, 301}, {5, 1030}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int side = 0; side < 2; side++) { /* 0: A (rows x K), 1: B (K x columns) */
            int64_t R = shapes[s][0], K = shapes[s][1];
            size_t n = side ? kiln__sgemm_pack_b_floats(K, R) : kiln__sgemm_pack_a_floats(R, K);
            float *src = malloc((size_t)(R * K) * sizeof(float)), *p[2];
            ASSERT(src && n % 16 == 0);
            for (int64_t i = 0; i < R * K; i++) src[i] = test_randf(&rs, 0.5f, 1.5f); /* never 0 */
            for (int v = 0; v < 2; v++) {
                p[v] = kiln__aligned_alloc(n * sizeof(float));
                ASSERT(p[v]);
                memset(p[v], v ? 0xFF : 0x7F, n * sizeof(float));
                kiln__gemm g = {.M = R, .N = R, .K = K, .alpha = 1.0f};
                if (side) {
                    g.b = src, g.b_rs = R, g.b_cs = 1;
                    kiln__sgemm_pack_b(&g, p[v]);
                } else {
                    g.a = src, g.a_rs = K, g.a_cs = 1;
                    kiln__sgemm_pack_a(&g, p[v]);
                }
            }
            size_t values = 0;
            for (size_t i = 0; i < n; i++) {
                if (!(p[0][i] == 0.0f || (p[0][i] >= 0.5f && p[0][i] <= 1.5f)))
                    TEST__FAIL("%s %lld x %lld: packed float %zu of %zu is %g (not written)", side ? "B" : "A",
                               (long long)R, (long long)K, i, n, p[0][i]);
                values += p[0][i] != 0.0f;
            }
            ASSERT(values == (size_t)(R * K));
            ASSERT(memcmp(p[0], p[1], n * sizeof(float)) == 0);
            free(src), kiln__aligned_free(p[0]), kiln__aligned_free(p[1]);
        }
}

TEST_IMPL(sgemm_timing_shapes) { timing_shapes(); }

TEST_LIST(TEST_ENTRY(sgemm_edges), TEST_ENTRY(sgemm_shift_tiles), TEST_ENTRY(sgemm_random), TEST_ENTRY(sgemm_large),
          TEST_ENTRY(sgemm_split_k), TEST_ENTRY(sgemm_short_k), TEST_ENTRY(sgemm_packed_whole),
          TEST_ENTRY(sgemm_column_runs),
          TEST_ENTRY(sgemm_timing_shapes))
