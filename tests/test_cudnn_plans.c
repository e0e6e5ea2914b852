/*
 * test_cudnn_plans.c — cuDNN's descriptor cache (device/cuda/cudnn.c's
 * "plans"), on any machine: kiln__cudnn_stand_in swaps cuDNN's descriptor
 * calls for host stand-ins that count live descriptors, and
 * kiln__cudnn_conv_workspace makes or finds the plan of a conv shape.
 *
 * Past its capacity (512 shapes) the cache used to reuse a slot without
 * destroying the old descriptors (a leak), and a plan that failed half-way
 * kept what it had made.  Checked here: descriptors stay at 6 per plan
 * however many shapes pass through; the least recently used plan is the one
 * destroyed (against a naive LRU model in the test, over a random sequence
 * of shapes: every make and eviction must be the model's); a failed plan
 * leaves nothing behind; the index reaches every plan after many removals.
 * test_cuda_cudnn does the same with the real cuDNN on the GPU machine.
 */
#include "device/cuda/cudnn.h"
#include "kiln_int.h"
#include "test.h"

#define SHAPES 700 /* more than the cache holds */

/* Conv shape `id`: a 1x1 conv whose input height is 4 + id (one plan per id). */
static kiln_cudnn_conv shape(int id, int algo) {
    kiln_cudnn_conv q = {.geo = {.n = 1, .c = 2, .h = 4 + id, .w = 3, .k = 2, .oh = 4 + id, .ow = 3, .kh = 1,
                                 .kw = 1, .sh = 1, .sw = 1, .dh = 1, .dw = 1, .group = 1},
                         .dtype = KILN_DTYPE_F32, .algo = algo};
    return q;
}

static kiln_cudnn_plan_stats stats(void) {
    kiln_cudnn_plan_stats st;
    kiln__cudnn_plan_stats(&st);
    return st;
}

/* The workspace of shape id (the stand-in's: algo KiB), which makes or
 * finds its plan. */
static void touch(int id, int algo) {
    kiln_cudnn_conv q = shape(id, algo);
    size_t ws = 1;
    ASSERT_OK(kiln__cudnn_conv_workspace(&q, &ws));
    ASSERT_EQ(ws, (size_t)algo << 10);
}

/* The cache's invariants: as many plans as the index reaches, 6
 * descriptors each, never more than the capacity. */
static void check_invariants(void) {
    kiln_cudnn_plan_stats st = stats();
    ASSERT(st.plans <= st.capacity);
    ASSERT_EQ(st.indexed, st.plans);
    ASSERT_EQ(st.descriptors, 6 * st.plans);
}

TEST_IMPL(eviction_destroys_descriptors) {
    kiln__cudnn_stand_in(1);
    kiln_cudnn_plan_stats st = stats();
    ASSERT_EQ(st.plans, 0);
    ASSERT_EQ(st.descriptors, 0);
    const int cap = st.capacity;
    ASSERT(cap > 0 && cap < SHAPES);
    /* shape 0 is used between every other: it stays cached throughout */
    for (int id = 1; id < SHAPES; id++) {
        touch(id, 1);
        touch(0, 2);
        check_invariants();
    }
    st = stats();
    ASSERT_EQ(st.plans, cap);
    ASSERT_EQ(st.made, SHAPES);
    ASSERT_EQ(st.evicted, SHAPES - cap);
    /* the hot shape and the newest are found; the oldest was destroyed */
    touch(0, 3);
    touch(SHAPES - 1, 3);
    ASSERT_EQ(stats().made, SHAPES);
    touch(1, 3);
    ASSERT_EQ(stats().made, SHAPES + 1);
    ASSERT_EQ(stats().evicted, SHAPES - cap + 1);
    check_invariants();
    kiln__cudnn_stand_in(0); /* destroys every plan */
    ASSERT_EQ(stats().plans, 0);
}

/* A random walk over the shapes, checked step by step against a naive
 * LRU of the same capacity. */
TEST_IMPL(lru_matches_model) {
    kiln__cudnn_stand_in(1);
    const int cap = stats().capacity;
    static uint64_t last[SHAPES]; /* the model: last use per shape, 0 = not cached */
    memset(last, 0, sizeof last);
    uint64_t clock = 0, seed = 0x9e3779b97f4a7c15ull;
    long made = 0, evicted = 0;
    int cached = 0;
    for (int step = 0; step < 20000; step++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        /* a working set that drifts: mostly near a moving centre, sometimes anywhere */
        int centre = (step / 40) % SHAPES, r = (int)(seed >> 33);
        int id = r % 8 ? (centre + r % 600) % SHAPES : r % SHAPES;
        if (!last[id]) {
            made++;
            if (cached == cap) {
                int v = -1;
                for (int i = 0; i < SHAPES; i++)
                    if (last[i] && (v < 0 || last[i] < last[v])) v = i;
                last[v] = 0;
                evicted++;
            } else {
                cached++;
            }
        }
        last[id] = ++clock;
        touch(id, 1 + step % 7);
        kiln_cudnn_plan_stats st = stats();
        if (st.made != made || st.evicted != evicted)
            TEST__FAIL("step %d (shape %d): made %ld evicted %ld, the LRU model says %ld and %ld", step, id,
                       st.made, st.evicted, made, evicted);
        ASSERT_EQ(st.plans, cached);
        if (step % 512 == 0) check_invariants();
    }
    ASSERT(evicted > 1000); /* the walk did exercise eviction */
    check_invariants();
    kiln__cudnn_stand_in(0);
}

/* A plan whose output shape cuDNN's padding cannot give fails cleanly and
 * keeps no descriptor; an algorithm out of range is refused first. */
TEST_IMPL(failed_plan_keeps_nothing) {
    kiln__cudnn_stand_in(1);
    touch(5, 1);
    kiln_cudnn_conv q = shape(6, 1);
    q.geo.oh += 1; /* an end pad cuDNN's symmetric padding does not have */
    size_t ws = 7;
    ASSERT_EQ(kiln__cudnn_conv_workspace(&q, &ws), KILN_EUNSUPPORTED);
    ASSERT_CONTAINS(kiln_errmsg(), "symmetric padding");
    ASSERT_EQ(ws, 0);
    check_invariants();
    ASSERT_EQ(stats().plans, 1);
    q = shape(5, KILN_CUDNN_ALGOS);
    ASSERT_EQ(kiln__cudnn_conv_workspace(&q, &ws), KILN_EUNSUPPORTED);
    ASSERT_CONTAINS(kiln_errmsg(), "algorithm 8");
    /* the stand-in ranks nothing: the builder would time no cuDNN algorithm */
    q = shape(5, 0);
    ASSERT_EQ(kiln__cudnn_conv_ranked(&q), 0);
    kiln__cudnn_stand_in(0);
    ASSERT_EQ(stats().descriptors, -1);
}

TEST_LIST(TEST_ENTRY(eviction_destroys_descriptors), TEST_ENTRY(lru_matches_model),
          TEST_ENTRY(failed_plan_keeps_nothing))
