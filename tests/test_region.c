/*
 * test_region.c — chain-aware layout selection (src/builder/region.c) on
 * synthetic cost graphs, no timing: chains that switch and that lose, ties
 * and the margin, a branch whose other reader cannot take the layout, a
 * residual join, a greedy candidate of mixed layouts, and random graphs of
 * two labels against a brute force over every labelling (the min cut is
 * exact there), and islands taken back to their neighbours' layout.  The
 * builder's use of it: test_build.c region_chain.
 */
#include "builder/region.h"
#include "test.h"

enum { LIN = KILN_FORMAT_LINEAR, B16 = KILN_FORMAT_NCHW16C, B8 = KILN_FORMAT_NCHW8C };

static kiln__rg_node node(double lin, double b16) {
    kiln__rg_node n;
    for (int f = 0; f < KILN__RG_LABELS; f++) n.ms[f] = -1;
    n.ms[LIN] = lin;
    n.ms[B16] = b16;
    n.label = LIN;
    return n;
}

/* An edge whose reformat between two different labels costs rf. */
static kiln__rg_edge edge(int from, int to, double rf) {
    kiln__rg_edge e;
    e.from = from;
    e.to = to;
    for (int a = 0; a < KILN__RG_LABELS; a++)
        for (int b = 0; b < KILN__RG_LABELS; b++) e.rf[a][b] = a == b ? 0 : rf;
    return e;
}

/* Total cost of the labelling in the nodes. */
static double total(const kiln__rg_node *n, int nn, const kiln__rg_edge *e, int ne) {
    double s = 0;
    for (int i = 0; i < nn; i++) s += n[i].ms[n[i].label];
    for (int k = 0; k < ne; k++) {
        int a = e[k].from >= 0 ? n[e[k].from].label : LIN, b = e[k].to >= 0 ? n[e[k].to].label : LIN;
        s += e[k].rf[a][b];
    }
    return s;
}

/* A chain in -> 0 -> 1 -> ... -> len-1 -> out, each layer lin / b16 ms, each reformat rf. */
static int chain(kiln__rg_node *n, kiln__rg_edge *e, int len, double lin, double b16, double rf) {
    int ne = 0;
    for (int i = 0; i < len; i++) {
        n[i] = node(lin, b16);
        e[ne++] = edge(i - 1, i, rf);
    }
    e[ne++] = edge(len - 1, -1, rf);
    return ne;
}

static int solve(kiln__rg_node *n, int nn, const kiln__rg_edge *e, int ne, double margin, kiln__rg_region *reg,
                 int *region) {
    int nreg = -1;
    ASSERT_OK(kiln__rg_solve(n, nn, e, ne, margin, reg, 8, &nreg, region));
    return nreg;
}

TEST_IMPL(chain_switches) {
    /* 4 layers 3 ms LINEAR, 1 ms NCHW16C, reformats 2.5 ms: one layer alone
     * would lose (1 + 2.5 > 3, what the greedy pass sees); the chain wins
     * 12 -> 4 + 2 x 2.5 = 9. */
    kiln__rg_node n[4];
    kiln__rg_edge e[5];
    kiln__rg_region reg[8];
    int region[4];
    int ne = chain(n, e, 4, 3, 1, 2.5);
    ASSERT_EQ(solve(n, 4, e, ne, 1.1, reg, region), 1);
    for (int i = 0; i < 4; i++) {
        ASSERT_EQ(n[i].label, B16);
        ASSERT_EQ(region[i], 0);
    }
    ASSERT_EQ(reg[0].label, B16);
    ASSERT_EQ(reg[0].nnodes, 4);
    ASSERT_EQ(reg[0].first, 0);
    ASSERT_NEAR(reg[0].before, 12, 1e-9);
    ASSERT_NEAR(reg[0].after, 9, 1e-9);
    /* the same layer alone stays LINEAR */
    ne = chain(n, e, 1, 3, 1, 2.5);
    ASSERT_EQ(solve(n, 1, e, ne, 1.1, reg, region), 0);
    ASSERT_EQ(n[0].label, LIN);
    ASSERT_EQ(region[0], -1);
}

TEST_IMPL(loses_ties_and_margin) {
    kiln__rg_node n[4];
    kiln__rg_edge e[5];
    kiln__rg_region reg[8];
    /* 2 layers save 2 x 1 ms, the reformats in and out cost 2 x 1.5 */
    int ne = chain(n, e, 2, 2, 1, 1.5);
    ASSERT_EQ(solve(n, 2, e, ne, 1.1, reg, NULL), 0);
    ASSERT_EQ(n[0].label, LIN);
    ASSERT_EQ(n[1].label, LIN);
    /* a tie: 4 x 2 = 4 x 1 + 2 x 2: the greedy layouts stay, margin 1 or not */
    ne = chain(n, e, 4, 2, 1, 2);
    ASSERT_EQ(solve(n, 4, e, ne, 1.0, reg, NULL), 0);
    ASSERT_EQ(n[0].label, LIN);
    /* 3% better: kept below a 10% margin, taken without one */
    ne = chain(n, e, 4, 2, 1, 1.88); /* 8 -> 7.76 */
    ASSERT_EQ(solve(n, 4, e, ne, 1.1, reg, NULL), 0);
    for (int i = 0; i < 4; i++) ASSERT_EQ(n[i].label, LIN);
    ASSERT_EQ(solve(n, 4, e, ne, 1.0, reg, NULL), 1);
    for (int i = 0; i < 4; i++) ASSERT_EQ(n[i].label, B16);
    ASSERT_NEAR(reg[0].after, 7.76, 1e-9);
}

TEST_IMPL(branch_other_reader_linear) {
    /* in -> 0 -> 1 -> 2 -> 3 -> out; layer 0's output is also read by
     * layer 4 (LINEAR only) -> out.  Layers 0-3: 3 ms LINEAR, 1 ms NCHW16C.
     * Reformats of 2.5 ms: switching layer 0 too would cost layer 4 a
     * reformat (13 -> 12.5), switching 1-3 alone is better (13 -> 12:
     * their 9 ms -> 3 + 2 x 2.5).  Reformats of 1.5: all four switch
     * (12 -> 4 + 3 x 1.5, layer 4 paying its reformat). */
    for (int pass = 0; pass < 2; pass++) {
        const double rf = pass ? 1.5 : 2.5;
        kiln__rg_node n[5];
        kiln__rg_edge e[8];
        kiln__rg_region reg[8];
        int ne = chain(n, e, 4, 3, 1, rf);
        n[4] = node(1, -1);
        e[ne++] = edge(0, 4, rf);
        e[ne++] = edge(4, -1, rf);
        ASSERT_EQ(solve(n, 5, e, ne, 1.1, reg, NULL), 1);
        ASSERT_EQ(n[4].label, LIN);
        for (int i = 1; i < 4; i++) ASSERT_EQ(n[i].label, B16);
        ASSERT_EQ(n[0].label, pass ? B16 : LIN);
        ASSERT_EQ(reg[0].nnodes, pass ? 4 : 3);
        ASSERT_NEAR(reg[0].before, pass ? 12 : 9, 1e-9);
        ASSERT_NEAR(reg[0].after, pass ? 4 + 3 * 1.5 : 3 + 2 * 2.5, 1e-9);
    }
}

TEST_IMPL(branch_reader_cannot_keeps_head) {
    /* in -> 0 -> {1, 2}; 1 -> 3 -> out; 2 (LINEAR only) -> out.  Switching
     * 0 would cost layer 2 a 5 ms reformat: 1 and 3 switch alone
     * (6 -> 2 + 2 x 1), 0 stays LINEAR. */
    kiln__rg_node n[4] = {node(3, 1), node(3, 1), node(1, -1), node(3, 1)};
    kiln__rg_edge e[6] = {edge(-1, 0, 5), edge(0, 1, 1), edge(0, 2, 5), edge(1, 3, 1), edge(3, -1, 1), edge(2, -1, 5)};
    kiln__rg_region reg[8];
    ASSERT_EQ(solve(n, 4, e, 6, 1.1, reg, NULL), 1);
    ASSERT_EQ(n[0].label, LIN);
    ASSERT_EQ(n[1].label, B16);
    ASSERT_EQ(n[2].label, LIN);
    ASSERT_EQ(n[3].label, B16);
    ASSERT_EQ(reg[0].nnodes, 2);
    ASSERT_NEAR(reg[0].before, 6, 1e-9);
    ASSERT_NEAR(reg[0].after, 4, 1e-9);
}

TEST_IMPL(residual_join) {
    /* a ResNet block: in -> 0 -> 1 -> 2 -> add(3) -> out, and 0 -> add (the
     * skip).  The Add (which fuse.c later folds into layer 2 as its
     * residual) reads both in the region's layout: the whole block
     * switches, the skip costs nothing. */
    kiln__rg_node n[4] = {node(3, 1), node(3, 1), node(3, 1), node(1, 0.5)};
    kiln__rg_edge e[6] = {edge(-1, 0, 2), edge(0, 1, 2), edge(1, 2, 2), edge(2, 3, 2), edge(0, 3, 2), edge(3, -1, 2)};
    kiln__rg_region reg[8];
    ASSERT_EQ(solve(n, 4, e, 6, 1.1, reg, NULL), 1);
    for (int i = 0; i < 4; i++) ASSERT_EQ(n[i].label, B16);
    ASSERT_NEAR(reg[0].before, 10, 1e-9);
    ASSERT_NEAR(reg[0].after, 3.5 + 4, 1e-9);
    /* an Add that cannot take NCHW16C splits the block: layer 0's output
     * is read by it (2 ms) and layer 1, layer 2 writes to it (2 ms); only
     * 0 -> 1 -> 2 could switch: 9 -> 3 + 2 (in) + 2 (skip) + 2 (2 -> add) = 9: stays */
    for (int i = 0; i < 3; i++) n[i] = node(3, 1);
    n[3] = node(1, -1);
    ASSERT_EQ(solve(n, 4, e, 6, 1.1, reg, NULL), 0);
    for (int i = 0; i < 4; i++) ASSERT_EQ(n[i].label, LIN);
}

TEST_IMPL(mixed_greedy_and_third_layout) {
    /* layer 0's greedy candidate has mixed layouts (KEEP): LINEAR in,
     * NCHW8C out; layer 1 offers NCHW8C (greedy: it reads it so) and
     * NCHW16C; both offer NCHW16C.  Costs make an all-NCHW16C pair best. */
    kiln__rg_node n[2];
    for (int i = 0; i < 2; i++)
        for (int f = 0; f < KILN__RG_LABELS; f++) n[i].ms[f] = -1;
    n[0].ms[KILN__RG_KEEP] = 3;
    n[0].ms[B16] = 1;
    n[0].label = KILN__RG_KEEP;
    n[1].ms[B8] = 3;
    n[1].ms[B16] = 1;
    n[1].label = B8;
    kiln__rg_edge e[3] = {edge(-1, 0, 1), edge(0, 1, 1), edge(1, -1, 1)};
    /* KEEP reads LINEAR and writes NCHW8C: the edges say what that costs */
    e[0].rf[LIN][KILN__RG_KEEP] = 0;
    e[1].rf[KILN__RG_KEEP][B8] = 0;
    e[1].rf[KILN__RG_KEEP][B16] = 1;
    double before = total(n, 2, e, 3);
    ASSERT_NEAR(before, 3 + 3 + 1, 1e-9);
    kiln__rg_region reg[8];
    ASSERT_EQ(solve(n, 2, e, 3, 1.1, reg, NULL), 1);
    ASSERT_EQ(n[0].label, B16);
    ASSERT_EQ(n[1].label, B16);
    ASSERT_NEAR(total(n, 2, e, 3), 1 + 1 + 1 + 1, 1e-9);
}

TEST_IMPL(random_two_labels_brute_force) {
    /* Random DAGs of up to 10 layers, LINEAR / NCHW16C (some LINEAR only),
     * reformat costs per edge: with margin 1 the result costs what the
     * best of all 2^n labellings costs. */
    uint64_t seed = 0xC0FFEE;
    for (int iter = 0; iter < 400; iter++) {
        enum { MAXN = 10, MAXE = 40 };
        kiln__rg_node n[MAXN], m[MAXN];
        kiln__rg_edge e[MAXE];
        const int nn = 1 + (int)(test_rand_u64(&seed) % MAXN);
        int ne = 0;
        for (int i = 0; i < nn; i++) {
            n[i] = node(test_randf(&seed, 0.5f, 4), test_randf(&seed, 0.2f, 4));
            if (test_rand_u64(&seed) % 5 == 0) n[i].ms[B16] = -1;
            if (test_rand_u64(&seed) % 3 == 0) e[ne++] = edge(-1, i, test_randf(&seed, 0, 3));
            if (test_rand_u64(&seed) % 3 == 0) e[ne++] = edge(i, -1, test_randf(&seed, 0, 3));
            for (int j = 0; j < i && ne < MAXE; j++)
                if (test_rand_u64(&seed) % 3 == 0) e[ne++] = edge(j, i, test_randf(&seed, 0, 3));
        }
        double best = 1e300;
        for (unsigned mask = 0; mask < 1u << nn; mask++) {
            int ok = 1;
            for (int i = 0; i < nn; i++) {
                m[i] = n[i];
                m[i].label = mask >> i & 1u ? B16 : LIN;
                ok &= m[i].ms[m[i].label] >= 0;
            }
            if (ok && total(m, nn, e, ne) < best) best = total(m, nn, e, ne);
        }
        kiln__rg_region reg[8];
        solve(n, nn, e, ne, 1.0, reg, NULL);
        for (int i = 0; i < nn; i++) ASSERT(n[i].ms[n[i].label] >= 0);
        ASSERT_NEAR(total(n, nn, e, ne), best, 1e-6);
    }
}

TEST_IMPL(empty_and_fixed) {
    kiln__rg_region reg[8];
    int nreg = -1;
    ASSERT_OK(kiln__rg_solve(NULL, 0, NULL, 0, 1.1, reg, 8, &nreg, NULL));
    ASSERT_EQ(nreg, 0);
    kiln__rg_node n[2] = {node(1, -1), node(1, -1)};
    kiln__rg_edge e[1] = {edge(0, 1, 1)};
    ASSERT_EQ(solve(n, 2, e, 1, 1.1, reg, NULL), 0);
}

/* A chain of N = 16 layers, all NCHW16C (1 ms there, 1.2 LINEAR) but layers
 * [i0, i1) LINEAR (lin ms there), each reformat 0.1 ms: an island.  (The
 * chain's ends are LINEAR, the network's input and output: the 16c runs
 * next to them are islands too when they have 4 layers or fewer.) */
#define N 16
static int island_chain(kiln__rg_node *n, kiln__rg_edge *e, int i0, int i1, double lin) {
    const int ne = chain(n, e, N, 1.2, 1.0, 0.1);
    for (int i = 0; i < N; i++) n[i].label = i >= i0 && i < i1 ? LIN : B16;
    for (int i = i0; i < i1; i++) n[i].ms[LIN] = lin;
    return ne;
}

static int labels(const kiln__rg_node *n, int lab) {
    int c = 0;
    for (int i = 0; i < N; i++) c += n[i].label == lab;
    return c;
}

TEST_IMPL(islands_heal) {
    kiln__rg_node n[N];
    kiln__rg_edge e[N + 1];
    /* layer 7 alone LINEAR at 0.9 ms: 0.9 + 2 reformats = 1.1 now, 1.0 in
     * 16c: taken back at any ratio >= 1/1.1 */
    int ne = island_chain(n, e, 7, 8, 0.9);
    ASSERT_EQ(kiln__rg_heal(n, N, e, ne, 1.0), 1);
    ASSERT_EQ(labels(n, B16), N);
    /* LINEAR at 0.6 ms: 0.8 now against 1.0, taken back at 1.26 (the network
     * decides), not at 1.2 */
    ne = island_chain(n, e, 7, 8, 0.6);
    ASSERT_EQ(kiln__rg_heal(n, N, e, ne, 1.2), 0);
    ASSERT_EQ(n[7].label, LIN);
    ASSERT_EQ(kiln__rg_heal(n, N, e, ne, 1.26), 1);
    ASSERT_EQ(n[7].label, B16);
    /* a conv + its Relu (two layers) up to four layers are islands; five are not */
    for (int len = 2; len <= 5; len++) {
        ne = island_chain(n, e, 6, 6 + len, 0.9);
        ASSERT_EQ(kiln__rg_heal(n, N, e, ne, 1.3), len <= 4);
        ASSERT_EQ(labels(n, B16), len <= 4 ? N : N - len);
    }
    /* two islands in one chain: both */
    ne = island_chain(n, e, 5, 6, 0.9);
    n[9].label = n[10].label = LIN;
    ASSERT_EQ(kiln__rg_heal(n, N, e, ne, 1.3), 2);
    ASSERT_EQ(labels(n, B16), N);
    /* neighbours that disagree: layers 0 and 15 read the network's input and
     * write its output (LINEAR) */
    ne = island_chain(n, e, 0, 1, 0.9);
    ASSERT_EQ(kiln__rg_heal(n, N, e, ne, 1.3), 0);
    ASSERT_EQ(n[0].label, LIN);
    ne = island_chain(n, e, 15, 16, 0.9);
    ASSERT_EQ(kiln__rg_heal(n, N, e, ne, 1.3), 0);
    /* 16c layers 0-3 between the input and a LINEAR layer 4 that offers
     * nothing else: an island of NCHW16C, 4 x 1.0 + 2 reformats = 4.2 now,
     * 4 x 1.2 = 4.8 in LINEAR: taken there at 1.3, not at 1.1 */
    ne = island_chain(n, e, 4, 5, 1.2);
    n[4].ms[B16] = -1;
    ASSERT_EQ(kiln__rg_heal(n, N, e, ne, 1.1), 0);
    ASSERT_EQ(labels(n, LIN), 1);
    ASSERT_EQ(kiln__rg_heal(n, N, e, ne, 1.3), 1);
    ASSERT_EQ(labels(n, LIN), 5);
    /* a layer that does not offer its neighbours' layout stays; so does
     * the rest of its island */
    ne = island_chain(n, e, 7, 9, 0.9);
    n[8].ms[B16] = -1;
    ASSERT_EQ(kiln__rg_heal(n, N, e, ne, 1.3), 0);
    ASSERT(n[7].label == LIN && n[8].label == LIN);
    /* all of one layout: nothing to heal; no nodes: nothing */
    ne = island_chain(n, e, 0, 0, 0.9);
    ASSERT_EQ(kiln__rg_heal(n, N, e, ne, 1.3), 0);
    ASSERT_EQ(kiln__rg_heal(NULL, 0, NULL, 0, 1.3), 0);
}
#undef N

TEST_LIST(TEST_ENTRY(chain_switches), TEST_ENTRY(loses_ties_and_margin),
          TEST_ENTRY(branch_other_reader_linear), TEST_ENTRY(branch_reader_cannot_keeps_head),
          TEST_ENTRY(residual_join), TEST_ENTRY(mixed_greedy_and_third_layout),
          TEST_ENTRY(random_two_labels_brute_force), TEST_ENTRY(empty_and_fixed),
          TEST_ENTRY(islands_heal))
