/*
 * test_alloc.c — kiln__grow, the one growable-array helper of the builder
 * and the network: capacities double from 16 and always cover the need,
 * contents survive every move, and an impossible size is KILN_ENOMEM with
 * the array left valid (never a wrapped allocation).
 */
#include "kiln_int.h"
#include "test.h"

static uint64_t g_seed = 0xA110C;

TEST_IMPL(grow_keeps_contents) {
    int64_t *a = NULL, want[1000];
    int cap = 0;
    for (int n = 0; n < 1000; n++) {
        int64_t *q = kiln__grow(a, &cap, n + 1, sizeof *a);
        ASSERT(q != NULL);
        a = q;
        ASSERT(cap >= n + 1);
        ASSERT(cap >= 16 && (cap & (cap - 1)) == 0); /* 16, 32, 64, ... */
        a[n] = want[n] = (int64_t)test_rand_u64(&g_seed);
    }
    ASSERT_EQ(cap, 1024);
    for (int n = 0; n < 1000; n++) ASSERT_EQ(a[n], want[n]);
    /* no growth needed: the same array, the same capacity */
    ASSERT(kiln__grow(a, &cap, 10, sizeof *a) == a);
    ASSERT_EQ(cap, 1024);
    kiln__free(a);
}

TEST_IMPL(grow_refuses_impossible_sizes) {
    int cap = 0;
    char *a = kiln__grow(NULL, &cap, 4, 1);
    ASSERT(a != NULL);
    a[3] = 'k';
    int before = cap;
    ASSERT(kiln__grow(a, &cap, INT32_MAX, (size_t)1 << 40) == NULL);
    ASSERT_CONTAINS(kiln_errmsg(), "out of memory");
    ASSERT_EQ(cap, before);
    ASSERT_EQ(a[3], 'k'); /* still ours */
    kiln__free(a);
}

TEST_LIST(TEST_ENTRY(grow_keeps_contents), TEST_ENTRY(grow_refuses_impossible_sizes))
