/*
 * test_memplan.c — kiln__memplan against a brute-force checker: buffers
 * whose lifetimes overlap never overlap in memory, offsets are 64-byte
 * aligned, aliases share their root's offset, memory is reused when
 * lifetimes are disjoint, bad input is an error (never a crash).
 */
#include "kiln_int.h"
#include "test.h"

static uint64_t g_seed = 0xC0FFEE;

static int root(const int32_t *alias, int i) {
    while (alias && alias[i] >= 0) i = alias[i];
    return i;
}

/* Brute force: every pair of distinct roots alive at the same time must be
 * disjoint in [off, off + size); total covers every buffer. */
static void check_plan(int n, const uint64_t *sizes, const int32_t *first, const int32_t *last,
                       const int32_t *alias, const uint64_t *off, uint64_t total) {
    for (int i = 0; i < n; i++) {
        ASSERT_EQ(off[i] % 64, 0);
        ASSERT(off[i] + sizes[i] <= total);
        if (alias && alias[i] >= 0) ASSERT_EQ(off[i], off[root(alias, i)]);
    }
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            if (root(alias, i) == root(alias, j)) continue;
            if (!sizes[i] || !sizes[j]) continue;
            /* lifetime of a group is the union of its members' */
            int32_t fi = first[i], li = last[i], fj = first[j], lj = last[j];
            for (int k = 0; k < n; k++) {
                if (root(alias, k) == root(alias, i)) {
                    if (first[k] < fi) fi = first[k];
                    if (last[k] > li) li = last[k];
                }
                if (root(alias, k) == root(alias, j)) {
                    if (first[k] < fj) fj = first[k];
                    if (last[k] > lj) lj = last[k];
                }
            }
            int live_together = fi <= lj && fj <= li;
            int mem_overlap = off[i] < off[j] + sizes[j] && off[j] < off[i] + sizes[i];
            if (live_together && mem_overlap)
                TEST__FAIL("buffers %d [%d,%d] @%llu+%llu and %d [%d,%d] @%llu+%llu overlap", i, fi, li,
                           (unsigned long long)off[i], (unsigned long long)sizes[i], j, fj, lj,
                           (unsigned long long)off[j], (unsigned long long)sizes[j]);
        }
}

TEST_IMPL(reuse_disjoint_lifetimes) {
    /* a chain: each buffer lives [i, i+1]; two arenas' worth suffices */
    enum { N = 10 };
    uint64_t sizes[N], off[N], total;
    int32_t first[N], last[N];
    for (int i = 0; i < N; i++) {
        sizes[i] = 1000;
        first[i] = i;
        last[i] = i + 1;
    }
    memset(off, 0xA5, sizeof off);
    ASSERT_OK(kiln__memplan(N, sizes, first, last, NULL, off, &total));
    check_plan(N, sizes, first, last, NULL, off, total);
    ASSERT_EQ(total, 2 * 1024); /* 1000 rounded to 1024, two alive at a time */
    /* disjoint lifetimes share offset 0 */
    int32_t f2[2] = {0, 2}, l2[2] = {1, 3};
    uint64_t s2[2] = {500, 300}, o2[2];
    ASSERT_OK(kiln__memplan(2, s2, f2, l2, NULL, o2, &total));
    ASSERT_EQ(o2[0], 0);
    ASSERT_EQ(o2[1], 0);
    ASSERT_EQ(total, 512);
    /* overlapping never share */
    int32_t f3[2] = {0, 1}, l3[2] = {1, 3};
    ASSERT_OK(kiln__memplan(2, s2, f3, l3, NULL, o2, &total));
    ASSERT(o2[0] != o2[1]);
    ASSERT_EQ(total, 512 + 320);
}

TEST_IMPL(random_plans) {
    for (int iter = 0; iter < 200; iter++) {
        int n = 1 + (int)(test_rand_u64(&g_seed) % 60);
        uint64_t sizes[64], off[64], total;
        int32_t first[64], last[64], alias[64];
        uint64_t sum = 0;
        for (int i = 0; i < n; i++) {
            sizes[i] = test_rand_u64(&g_seed) % 5000;
            if (test_rand_u64(&g_seed) % 10 == 0) sizes[i] = 0;
            first[i] = (int32_t)(test_rand_u64(&g_seed) % 40);
            last[i] = first[i] + (int32_t)(test_rand_u64(&g_seed) % 10);
            /* some alias an earlier buffer (in-place outputs) */
            alias[i] = i > 0 && test_rand_u64(&g_seed) % 5 == 0 ? (int32_t)(test_rand_u64(&g_seed) % (uint64_t)i) : -1;
            sum += (sizes[i] + 63) / 64 * 64;
        }
        memset(off, 0xA5, sizeof off);
        ASSERT_OK(kiln__memplan(n, sizes, first, last, alias, off, &total));
        check_plan(n, sizes, first, last, alias, off, total);
        ASSERT(total <= sum);
        /* without aliases too */
        ASSERT_OK(kiln__memplan(n, sizes, first, last, NULL, off, &total));
        check_plan(n, sizes, first, last, NULL, off, total);
        /* the peak of live bytes is a lower bound */
        uint64_t peak = 0;
        for (int t = 0; t < 50; t++) {
            uint64_t live = 0;
            for (int i = 0; i < n; i++)
                if (first[i] <= t && t <= last[i]) live += (sizes[i] + 63) / 64 * 64;
            if (live > peak) peak = live;
        }
        ASSERT(total >= peak);
    }
}

TEST_IMPL(alias_extends_lifetime) {
    /* b aliases a: a's memory must stay reserved while b lives, so c (alive
     * with b only) must not take it. */
    uint64_t sizes[3] = {256, 256, 256}, off[3], total;
    int32_t first[3] = {0, 1, 2}, last[3] = {1, 3, 3}, alias[3] = {-1, 0, -1};
    ASSERT_OK(kiln__memplan(3, sizes, first, last, alias, off, &total));
    ASSERT_EQ(off[0], off[1]);
    ASSERT(off[2] != off[0]);
    check_plan(3, sizes, first, last, alias, off, total);
}

TEST_IMPL(bad_input) {
    uint64_t sizes[2] = {64, 64}, off[2], total;
    int32_t first[2] = {0, 0}, last[2] = {1, 1};
    int32_t cyc[2] = {1, 0};
    ASSERT_EQ(kiln__memplan(2, sizes, first, last, cyc, off, &total), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "cycle");
    int32_t self[2] = {0, -1};
    ASSERT_EQ(kiln__memplan(2, sizes, first, last, self, off, &total), KILN_EINVAL);
    int32_t out_of_range[2] = {-1, 5};
    ASSERT_EQ(kiln__memplan(2, sizes, first, last, out_of_range, off, &total), KILN_EINVAL);
    int32_t bad_last[2] = {-1, 1};
    ASSERT_EQ(kiln__memplan(2, sizes, first, bad_last, NULL, off, &total), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "first > last");
    ASSERT_OK(kiln__memplan(0, sizes, first, last, NULL, off, &total));
    ASSERT_EQ(total, 0);
}

TEST_LIST(TEST_ENTRY(reuse_disjoint_lifetimes), TEST_ENTRY(random_plans), TEST_ENTRY(alias_extends_lifetime),
          TEST_ENTRY(bad_input))
