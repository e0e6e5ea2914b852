/*
 * test_copy_plan.c — the host half of the CUDA strided copy
 * (kiln__cu_copy_plan_make, src/ops/tensor/copy_plan.c), checked on the CPU
 * so CI covers it without a GPU: the plans chosen for known shapes (unit
 * width, tiled transpose, 32/64-bit indexing), and, for thousands of random
 * Transpose/Slice/Expand/Concat-like copies, the plan executed on the host
 * the way copy.cu's kernels read it equals a naive element-by-element copy.
 */
#include "ops/tensor/copy_plan.h"
#include "test.h"

#include <stdlib.h>
#include <string.h>

static uint64_t g_seed = 0x5eed0c0e7ull;

static int64_t rnd(int64_t n) { return (int64_t)(test_rand_u64(&g_seed) % (uint64_t)n); }

/* The kernels' reading of a plan: copy_<unit> moves unit bytes from src at
 * st[0] offsets to dst at st[1] offsets of every point of it;
 * transpose_<unit> moves the P x Q block of every batch point. */
static void run_plan(const kiln__cu_copy_plan *p, const unsigned char *src, unsigned char *dst) {
    size_t u = (size_t)p->unit;
    if (p->transpose) {
        const kiln_cu_transpose *t = &p->tr;
        for (int64_t b = 0; b < t->batch.numel; b++) {
            int64_t r = b, o0 = 0, o1 = 0;
            for (int d = t->batch.ndim - 1; d >= 0; d--) {
                int64_t i = r % t->batch.dims[d];
                r /= t->batch.dims[d];
                o0 += i * t->batch.st[0][d], o1 += i * t->batch.st[1][d];
            }
            for (int64_t pp = 0; pp < t->P; pp++)
                for (int64_t q = 0; q < t->Q; q++)
                    memcpy(dst + (size_t)(o1 + q + pp * t->dp) * u, src + (size_t)(o0 + pp + q * t->sq) * u, u);
        }
        return;
    }
    const kiln_cu_iter *it = &p->it;
    for (int64_t e = 0; e < it->numel; e++) {
        int64_t r = e, o0 = 0, o1 = 0;
        for (int d = it->ndim - 1; d >= 0; d--) {
            int64_t i = r % it->dims[d];
            r /= it->dims[d];
            o0 += i * it->st[0][d], o1 += i * it->st[1][d];
        }
        memcpy(dst + (ptrdiff_t)o1 * (ptrdiff_t)u, src + (ptrdiff_t)o0 * (ptrdiff_t)u, u);
    }
}

static kiln__cu_copy_plan plan(int nd, const int64_t *dims, size_t es, uintptr_t src, const int64_t *ss, uintptr_t dst,
                               const int64_t *ds) {
    kiln__cu_copy_plan p;
    kiln__cu_copy_plan_make(nd, dims, es, src, ss, dst, ds, &p);
    return p;
}

TEST_IMPL(copy_plan_known) {
    /* Concat part [2, 3, 40] FP16 into [2, 5, 40] at channel 0: rows of 240 bytes -> 16-byte units */
    int64_t d1[] = {2, 3, 40}, s1[] = {120, 40, 1}, y1[] = {200, 40, 1};
    kiln__cu_copy_plan p = plan(3, d1, 2, 4096, s1, 8192, y1);
    ASSERT_EQ(p.unit, 16);
    ASSERT_EQ(p.transpose, 0);
    ASSERT_EQ(p.it.ndim, 2);
    ASSERT_EQ(p.it.dims[1], 15); /* 3 x 40 x 2 bytes / 16 */
    ASSERT_EQ(p.it.st[1][0], 25);
    /* the same part at channel 3 of the output (base + 240 bytes: still 16-aligned) */
    ASSERT_EQ(plan(3, d1, 2, 4096, s1, 8192 + 240, y1).unit, 16);
    /* Slice starting at element 1: the source base is 2 bytes off, so no widening */
    ASSERT_EQ(plan(3, d1, 2, 4096 + 2, s1, 8192, y1).unit, 2);
    /* odd row length (3 x 17 FP32 = 204 bytes): 4-byte units stay */
    int64_t d2[] = {5, 3, 17}, s2[] = {51, 17, 1};
    ASSERT_EQ(plan(3, d2, 4, 0, s2, 64, s2).unit, 4);
    /* 2 x 17 FP32 in rows of 136 bytes: 8-byte units */
    int64_t d3[] = {7, 34}, s3[] = {34, 1}, y3[] = {68, 1};
    ASSERT_EQ(plan(2, d3, 4, 0, s3, 0, y3).unit, 8);
    /* NCHW -> NHWC [2, 64, 16, 16] FP32: H and W merge; tiled transpose P = H W, Q = C */
    int64_t d4[] = {2, 16, 16, 64}, s4[] = {16384, 16, 1, 256}, y4[] = {16384, 1024, 64, 1};
    p = plan(4, d4, 4, 0, s4, 0, y4);
    ASSERT_EQ(p.transpose, 1);
    ASSERT_EQ(p.unit, 4);
    ASSERT_EQ(p.tr.P, 256);
    ASSERT_EQ(p.tr.Q, 64);
    ASSERT_EQ(p.tr.sq, 256);
    ASSERT_EQ(p.tr.dp, 64);
    ASSERT_EQ(p.tr.batch.numel, 2);
    ASSERT_EQ(p.tr.nblocks, 2 * 8 * 2);
    /* NCHW -> NHWC with C = 3 (an image): too narrow for a tile, the plain copy */
    int64_t d5[] = {2, 16, 16, 3}, s5[] = {768, 16, 1, 256}, y5[] = {768, 48, 3, 1};
    ASSERT_EQ(plan(4, d5, 4, 0, s5, 0, y5).transpose, 0);
    /* Expand along the innermost dim (source stride 0): no widening, no tile */
    int64_t d6[] = {4, 64}, s6[] = {1, 0}, y6[] = {64, 1};
    p = plan(2, d6, 2, 0, s6, 0, y6);
    ASSERT_EQ(p.unit, 2);
    ASSERT_EQ(p.transpose, 0);
    /* negative innermost step (Slice step -1): the plain copy, element units */
    int64_t d7[] = {8, 32}, s7[] = {32, -1}, y7[] = {32, 1};
    p = plan(2, d7, 4, 4096, s7, 0, y7);
    ASSERT_EQ(p.unit, 4);
    ASSERT_EQ(p.transpose, 0);
    /* dims of 1 dropped */
    int64_t d8[] = {1, 6, 1, 5}, s8[] = {999, 5, 77, 1};
    p = plan(4, d8, 1, 0, s8, 0, s8);
    ASSERT_EQ(p.it.ndim, 1);
    ASSERT_EQ(p.unit, 2); /* one row of 30 bytes: 15 2-byte units */
    ASSERT_EQ(p.it.numel, 15);
}

/* 32-bit indexing only when numel and every offset fit in int32 */
TEST_IMPL(copy_plan_index_width) {
    int64_t one_src[] = {0}, one_dst[] = {1};
    int64_t n = ((int64_t)1 << 31) - 2; /* an Expand of one element to n: offsets up to n - 1 */
    ASSERT_EQ(plan(1, &n, 2, 0, one_src, 0, one_dst).it.small, 1);
    n = (int64_t)1 << 31;
    ASSERT_EQ(plan(1, &n, 2, 0, one_src, 0, one_dst).it.small, 0);
    /* 2^31 contiguous FP32 elements: in 16-byte units 2^29, so 32-bit indexing again */
    kiln__cu_copy_plan p = plan(1, &n, 4, 0, one_dst, 0, one_dst);
    ASSERT_EQ(p.unit, 16);
    ASSERT_EQ(p.it.numel, (int64_t)1 << 29);
    ASSERT_EQ(p.it.small, 1);
    /* few elements but a source offset beyond int32 */
    int64_t d[] = {2, 3}, s[] = {(int64_t)1 << 31, 7}, y[] = {3, 1};
    ASSERT_EQ(plan(2, d, 1, 0, s, 0, y).it.small, 0);
}

/* Random strided copies: the plan run as the kernels read it == a naive copy. */
TEST_IMPL(copy_plan_random) {
    static const int64_t sizes[] = {1, 2, 3, 4, 5, 8, 16, 17, 32, 33, 40, 64};
    int nplain = 0, nwide = 0, ntr = 0;
    for (int iter = 0; iter < 3000; iter++) {
        int nd = 1 + (int)rnd(5);
        size_t es = (size_t)1 << rnd(4);
        int64_t SD[5], CS[5], D[5], ss[5], perm[5], start = 0;
        int64_t budget = 1;
        for (int d = 0; d < nd; d++) {
            SD[d] = sizes[rnd(12)];
            if (budget * SD[d] > 20000) SD[d] = 1;
            budget *= SD[d];
            perm[d] = d;
        }
        for (int d = nd - 1, s = 1; d >= 0; d--) CS[d] = s, s *= (int)SD[d];
        for (int d = nd - 1; d > 0; d--) { /* a random permutation (Transpose) */
            int j = (int)rnd(d + 1);
            int64_t t = perm[d];
            perm[d] = perm[j], perm[j] = t;
        }
        if (rnd(3) == 0)
            for (int d = 0; d < nd; d++) perm[d] = d;
        for (int d = 0; d < nd; d++) {
            int64_t a = perm[d], len = SD[a], kind = rnd(8);
            if (kind == 0) { /* Expand: stride 0 */
                D[d] = 1 + rnd(6);
                ss[d] = 0;
            } else if (kind == 1 && len > 1) { /* Slice step -1 or 2 from a random start */
                int64_t step = rnd(2) ? -1 : 2, n = 1 + rnd((len + 1) / 2);
                int64_t first = step > 0 ? rnd(len - (n - 1) * step) : (n - 1) + rnd(len - (n - 1));
                D[d] = n, ss[d] = step * CS[a], start += first * CS[a];
            } else if (kind == 2 && len > 1) { /* Slice step 1 */
                int64_t n = 1 + rnd(len), first = rnd(len - n + 1);
                D[d] = n, ss[d] = CS[a], start += first * CS[a];
            } else {
                D[d] = len, ss[d] = CS[a];
            }
        }
        /* the destination: contiguous, possibly a slab of a larger tensor (Concat/Split) */
        int64_t DD[5], ys[5], ystart = 0;
        memcpy(DD, D, sizeof DD);
        int cat = (int)rnd(nd);
        int64_t extra = rnd(2) ? rnd(4) : 0;
        DD[cat] += extra;
        for (int d = nd - 1, s = 1; d >= 0; d--) ys[d] = s, s *= (int)DD[d];
        ystart = rnd(extra + 1) * ys[cat];
        int64_t sn = 1, yn = 1, n = 1;
        for (int d = 0; d < nd; d++) sn *= SD[d], yn *= DD[d], n *= D[d];
        size_t pad = (size_t)rnd(3) * es; /* base alignment varies */
        size_t sbytes = ((size_t)sn * es + 127) / 64 * 64, ybytes = ((size_t)yn * es + 127) / 64 * 64;
        unsigned char *sbuf = aligned_alloc(64, sbytes), *ref = aligned_alloc(64, ybytes), *got = aligned_alloc(64, ybytes);
        ASSERT(sbuf && ref && got);
        for (size_t k = 0; k < (size_t)sn * es + pad; k++) sbuf[k] = (unsigned char)test_rand_u64(&g_seed);
        memset(ref, 0xA5, ybytes);
        memset(got, 0xA5, ybytes);
        const unsigned char *src = sbuf + pad + (size_t)start * es;
        unsigned char *rdst = ref + pad + (size_t)ystart * es, *gdst = got + pad + (size_t)ystart * es;
        for (int64_t e = 0; e < n; e++) { /* naive reference */
            int64_t r = e, o0 = 0, o1 = 0;
            for (int d = nd - 1; d >= 0; d--) {
                int64_t i = r % D[d];
                r /= D[d];
                o0 += i * ss[d], o1 += i * ys[d];
            }
            memcpy(rdst + o1 * (int64_t)es, src + o0 * (int64_t)es, es);
        }
        kiln__cu_copy_plan p = plan(nd, D, es, (uintptr_t)src, ss, (uintptr_t)gdst, ys);
        ASSERT_EQ(p.it.numel * p.unit, n * (int64_t)es);
        ASSERT(p.unit >= (int)es && p.unit <= 16 && (p.unit & (p.unit - 1)) == 0);
        if (p.unit > (int)es)
            ASSERT((uintptr_t)src % (uintptr_t)p.unit == 0 && (uintptr_t)gdst % (uintptr_t)p.unit == 0);
        run_plan(&p, src, gdst);
        if (memcmp(ref, got, ybytes)) {
            fprintf(stderr, "case %d: nd %d es %zu dims", iter, nd, es);
            for (int d = 0; d < nd; d++) fprintf(stderr, " %lld/%lld/%lld", (long long)D[d], (long long)ss[d], (long long)ys[d]);
            TEST__FAIL("plan (unit %d, transpose %d) differs from the naive copy", p.unit, p.transpose);
        }
        nplain += !p.transpose && p.unit == (int)es;
        nwide += p.unit > (int)es;
        ntr += p.transpose;
        free(sbuf), free(ref), free(got);
    }
    fprintf(stderr, "plain %d, widened %d, tiled transpose %d\n", nplain, nwide, ntr);
    ASSERT(nplain > 100 && nwide > 100 && ntr > 100); /* every path was exercised */
}

TEST_LIST(TEST_ENTRY(copy_plan_known), TEST_ENTRY(copy_plan_index_width), TEST_ENTRY(copy_plan_random))
