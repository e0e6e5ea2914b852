/*
 * test_refine.c — the builder's in-network refinement (src/builder/refine.c,
 * KILN_BUILD_REFINE; off by default): a tactic
 * that wins in isolation and loses in the network is replaced, identical
 * layers get one decision, the time budget holds, an engine that runs too
 * fast is left alone, the timing cache replays the refined choice without
 * running anything, and a build with refinement off keeps the isolated
 * choice (a cache that holds refined choices included).
 *
 * The hook is honest and does not depend on timer noise: test::evict marks
 * that it ran, as a producer leaves the cache cold for its consumer;
 * test::pick's tactic 1 pays 20 ms when it runs right after an evict, which
 * happens only in a whole-engine run, never in the builder's isolated
 * timing of pick.  In isolation tactic 1 takes 3.0 ms and tactic 2 3.2 ms
 * (2 within REFINE_MARGIN's 10%, 1 chosen); in the network 23 ms against
 * 3.2 ms: more than the time slices other processes take from a run of
 * the variant under ctest -j2 (an 8 ms penalty lost 1 round in 4 there).
 */
#include "builder/builder.h"
#include "kiln_int.h"
#include "test.h"
#include "test_ops_util.h"

#include <unistd.h>

static int g_evicted, g_evicts;
/* pick's times: tactic 1 alone, its extra after an evict, tactic 2 */
static double g_t1 = 3.0, g_t1_evicted = 20.0, g_t2 = 3.2;

static void spin_ms(double ms) {
    for (double t0 = kiln__now_ms(); kiln__now_ms() - t0 < ms;) {
    }
}

static int copy_impl(const kiln_call *c) {
    memcpy(c->out[0].data, c->in[0].data, (size_t)kiln_tensor_numel(&c->out[0]) * sizeof(float));
    return 0;
}
static int evict_impl(const kiln_call *c) {
    g_evicted = 1;
    g_evicts++;
    return copy_impl(c);
}
/* pick's optional constant input w (WN floats, w[k] = k % 7): a packed
 * copy (prepack), so that the refined engine reads packed forms and
 * weights that refine.c shared and handed over (y = x + w[i] + 2 w[WN-1]) */
#define WN (1 << 18)
static int add_w(const kiln_call *c) {
    int rc = copy_impl(c);
    if (c->nin < 2) return rc;
    const float *p = c->prepacked ? (const float *)c->prepacked[1] : NULL, *w = c->in[1].data;
    if (!p) return kiln_set_error(KILN_EINTERNAL, "no packed w");
    float *y = c->out[0].data;
    for (int64_t i = 0; i < kiln_tensor_numel(&c->out[0]); i++) y[i] += p[i] + p[WN - 1] + w[WN - 1];
    return rc;
}
static int pick_impl(const kiln_call *c) {
    spin_ms(c->tactic == 1 ? g_t1 + (g_evicted ? g_t1_evicted : 0) : g_t2);
    g_evicted = 0;
    return add_w(c);
}
static int pick_prepack(const kiln_call *c, int input, void *dst, size_t *size) {
    if (input != 1) {
        *size = 0;
        return 0;
    }
    if (dst) memcpy(dst, c->in[1].data, WN * sizeof(float));
    else *size = WN * sizeof(float);
    return 0;
}
static const kiln_combo evict_formats[] = {{"FP32", NULL, {0}}, {NULL, NULL, {0}}};
static const kiln_quick_op evict_op = {.ns = "test", .name = "evict", .version = 1, .min_inputs = 1,
                                       .max_inputs = 1, .num_outputs = 1, .shape = same_shape,
                                       .impl = evict_impl, .formats = evict_formats};
KILN_OP(evict_op)
static const kiln_combo pick_formats[] = {{"FP32", NULL, {1, 2}}, {NULL, NULL, {0}}};
static const kiln_quick_op pick_op = {.ns = "test", .name = "pick", .version = 1, .min_inputs = 1,
                                      .max_inputs = 2, .num_outputs = 1, .shape = same_shape,
                                      .impl = pick_impl, .formats = pick_formats, .prepack = pick_prepack};
KILN_OP(pick_op)
/* test::hold: one tactic, w packed as pick's: a layer refinement leaves alone */
static const kiln_quick_op hold_op = {.ns = "test", .name = "hold", .version = 1, .min_inputs = 2,
                                      .max_inputs = 2, .num_outputs = 1, .shape = same_shape,
                                      .impl = add_w, .formats = evict_formats, .prepack = pick_prepack};
KILN_OP(hold_op)

static test_logbuf g_log;

/* n x (evict -> pick): the picks identical layers (one candidate key) */
static kiln_network *evict_pick_net_n(int n) {
    kiln_network *net = kiln_network_create();
    int64_t d[2] = {4, 8};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, d, NULL));
    char prev[16] = "x";
    for (int i = 0; i < n; i++) {
        char h[16], y[16], ev[16], pk[16];
        snprintf(h, sizeof h, "h%d", i);
        snprintf(y, sizeof y, i == n - 1 ? "y" : "y%d", i);
        snprintf(ev, sizeof ev, i ? "evict%d" : "evict", i);
        snprintf(pk, sizeof pk, i ? "pick%d" : "pick", i);
        const char *in[] = {prev}, *hh[] = {h}, *yy[] = {y};
        ASSERT(kiln_network_add_layer(net, "test::evict", 1, ev, 1, in, 1, hh));
        ASSERT(kiln_network_add_layer(net, "test::pick", 1, pk, 1, hh, 1, yy));
        snprintf(prev, sizeof prev, "%s", y);
    }
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    return net;
}

static kiln_network *evict_pick_net(void) { return evict_pick_net_n(1); }

static float g_w[WN];
static int g_with_w; /* build_pick: the network's pick reads w */

/* evict -> pick(h, w) -> hold(., w) */
static kiln_network *evict_pick_w_net(void) {
    kiln_network *net = kiln_network_create();
    int64_t d[2] = {4, 8}, dw[1] = {WN};
    for (int k = 0; k < WN; k++) g_w[k] = (float)(k % 7);
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, d, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "w", KILN_DTYPE_F32, 1, dw, g_w));
    const char *x[] = {"x"}, *h[] = {"h"}, *hw[] = {"h", "w"}, *p[] = {"p"}, *pw[] = {"p", "w"}, *y[] = {"y"};
    ASSERT(kiln_network_add_layer(net, "test::evict", 1, "evict", 1, x, 1, h));
    ASSERT(kiln_network_add_layer(net, "test::pick", 1, "pick", 2, hw, 1, p));
    ASSERT(kiln_network_add_layer(net, "test::hold", 1, "hold", 2, pw, 1, y));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    return net;
}

/* a != b: the builder's log of the last build_pick, then the assertion */
#define ASSERT_PICK(a, b)                                        \
    do {                                                         \
        const int pick_ = (a);                                   \
        if (pick_ != (b)) fprintf(stderr, "%s\n", g_log.text);   \
        ASSERT_EQ(pick_, (b));                                   \
    } while (0)

/* pick's tactic in an engine built with `flags` (and the timing cache
 * `cache`, or none); *st the build's counters, the verbose log in g_log. */
static int build_pick(kiln_network *net, unsigned flags, const char *cache, kiln_build_stats *st) {
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_threads(cfg, 1);
    kiln_build_config_set_timing_reps(cfg, 5);
    kiln_build_config_set_flags(cfg, flags);
    if (cache) ASSERT_OK(kiln_build_config_set_timing_cache(cfg, cache));
    kiln_engine *e = NULL;
    g_log.n = 0;
    g_log.text[0] = 0;
    kiln_log_set(KILN_LOG_VERBOSE, test_log_fn, &g_log);
    g_evicted = 0;
    int rc = kiln_build(net, cfg, &e, st);
    kiln_log_set(KILN_LOG_WARN, NULL, NULL);
    ASSERT_OK(rc);
    /* pick's tactic; -1 if the picks differ */
    int tactic = 0;
    for (int32_t l = 0; l < e->nlayers; l++)
        if (!strncmp(e->layers[l].name, "pick", 4)) tactic = !tactic || tactic == e->layers[l].tactic ? e->layers[l].tactic : -1;
    /* the engine computes the same whichever tactic */
    kiln_context *c = NULL;
    float xv[32], yv[32];
    for (int i = 0; i < 32; i++) xv[i] = (float)i - 7.5f;
    ASSERT_OK(kiln_context_create(e, 1, &c));
    ASSERT_OK(kiln_context_bind(c, "x", xv, sizeof xv));
    ASSERT_OK(kiln_context_bind(c, "y", yv, sizeof yv));
    ASSERT_OK(kiln_context_run(c));
    for (int i = 0; i < 32; i++) ASSERT_EQ(yv[i], xv[i] + (g_with_w ? 2 * (g_w[i] + 2 * g_w[WN - 1]) : 0));
    kiln_context_free(c);
    kiln_engine_free(e);
    kiln_build_config_free(cfg);
    return tactic;
}

/* build_pick from no timing cache (cache: the file it writes, removed
 * first), up to 5 times until it gives tactic `want` (0: until refinement
 * ran): under ctest -j2 or a busy machine a neighbour's time slices can
 * put tactic 1's every sample above tactic 2's, make the builder cut
 * tactic 2 short after one slow sample (> 2x tactic 1) so that it is not
 * within 10% and refinement has nothing to do, or leave a paired round
 * undecided.  None of that is what these tests check (the callers assert
 * refined / refine_changed of the build that gave `want`); a real fault
 * fails five times. */
static int fresh_pick(kiln_network *net, unsigned flags, const char *cache, kiln_build_stats *st, int want) {
    int tactic = -1;
    for (int try = 0; try < 5; try++) {
        if (cache) remove(cache);
        tactic = build_pick(net, flags, cache, st);
        if (want ? tactic == want : st->refined > 0) break;
    }
    return tactic;
}

/* Without the flag (the default) the isolated timing's choice stands;
 * with it the network run replaces it. */
TEST_IMPL(refine_replaces_isolated_choice) {
    kiln_network *net = evict_pick_net();
    kiln_build_stats st;
    ASSERT_PICK(fresh_pick(net, 0, NULL, &st, 1), 1);
    ASSERT_EQ(st.refined, 0);
    ASSERT_CONTAINS(g_log.text, "layer 'pick' (test::pick v1): chose [FP32,FP32] LINEAR tactic 1");
    ASSERT_PICK(fresh_pick(net, KILN_BUILD_REFINE, NULL, &st, 2), 2);
    ASSERT_EQ(st.refined, 1);
    ASSERT_EQ(st.refine_changed, 1);
    ASSERT_CONTAINS(g_log.text, "refine: layer 'pick' in the network (paired rounds): tactic 1 ");
    ASSERT_CONTAINS(g_log.text, "takes tactic 2");
    /* no timing: nothing to refine */
    ASSERT_PICK(build_pick(net, KILN_BUILD_REFINE | KILN_BUILD_NO_TIMING, NULL, &st), 1);
    ASSERT_EQ(st.refined, 0);
    ASSERT_CONTAINS(g_log.text, "refine: skipped (KILN_BUILD_NO_TIMING)");
    kiln_network_free(net);
}

/* The refined engine (the final pass) shares the base engine's weights
 * block and the packed forms of its unchanged layers (hold's), then takes
 * them over before the base is freed: pick, switched, packs w again; the
 * engine runs right (build_pick checks y) after the base is gone. */
TEST_IMPL(refine_hands_over_weights) {
    kiln_network *net = evict_pick_w_net();
    kiln_build_stats st;
    g_with_w = 1;
    ASSERT_PICK(fresh_pick(net, 0, NULL, &st, 1), 1);
    ASSERT_PICK(fresh_pick(net, KILN_BUILD_REFINE, NULL, &st, 2), 2);
    ASSERT_EQ(st.refine_changed, 1);
    ASSERT_CONTAINS(g_log.text, "refine: 1 of 3 layers pack as the base engine's did: its packed forms shared, and its weights");
    g_with_w = 0;
    kiln_network_free(net);
}

/* Identical layers (same candidate key) get one decision from their
 * spans summed per round: three picks, one group, all switched. */
TEST_IMPL(refine_pooled_decision) {
    kiln_network *net = evict_pick_net_n(3);
    kiln_build_stats st;
    ASSERT_PICK(fresh_pick(net, 0, NULL, &st, 1), 1);
    ASSERT_PICK(fresh_pick(net, KILN_BUILD_REFINE, NULL, &st, 2), 2);
    ASSERT_EQ(st.refined, 3);
    ASSERT_EQ(st.refine_changed, 3);
    ASSERT_CONTAINS(g_log.text, "refine: layer 'pick' and 2 identical in the network (paired rounds)");
    ASSERT_CONTAINS(g_log.text, "3 layers with close tactics in 1 groups");
    kiln_network_free(net);
}

/* A runner-up 5% slower in isolation and as fast in the network: on a
 * quiet machine neither taken nor dropped before the time budget (40 base
 * runs) ends refinement; under load a neighbour's time slices may decide
 * it either way.  What the test holds the code to does not depend on how
 * long anything took (a loaded CI machine's builds overrun any margin): the
 * budget is 40 of the base engine's runs, capped at 2 s; tests left
 * undecided mean the rounds were stopped (by the budget, or at the most
 * rounds), never that they ended early; the times are printed.  An engine
 * that runs in under a millisecond is not refined at all. */
static int starts(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

TEST_IMPL(refine_budget) {
    kiln_network *net = evict_pick_net_n(2);
    kiln_build_stats st;
    g_t1 = 3.0, g_t1_evicted = 0.15, g_t2 = 3.15;
    ASSERT(fresh_pick(net, KILN_BUILD_REFINE, NULL, &st, 0) > 0);
    ASSERT_EQ(st.refined, 2);
    const char *sum = strstr(g_log.text, " engines, ");
    ASSERT(sum);
    while (sum > g_log.text && sum[-1] != ' ') sum--;
    int engines = 0, rounds = 0, threads = 0, changed = 0, reverted = 0, open = 0, n = 0;
    double run_ms = 0;
    ASSERT_EQ(sscanf(sum, "%d engines, %d rounds at %d threads (%lf ms a run): %d choices changed, %d regions reverted, "
                     "%d tests undecided%n", &engines, &rounds, &threads, &run_ms, &changed, &reverted, &open, &n), 7);
    const char *after = sum + n, *times = strchr(after, ';');
    ASSERT(times);
    double building = 0, running = 0, all = 0, budget = 0;
    ASSERT_EQ(sscanf(times, "; %lf s building variants, %lf s running, %lf s in all (budget %lf s)", &building,
                     &running, &all, &budget), 4);
    printf("   %d engines, %d rounds, %d undecided: %.2f s building, %.2f s running, %.2f s in all, budget %.2f s\n",
           engines, rounds, open, building, running, all, budget);
    ASSERT(engines >= 2 && rounds >= 0 && rounds <= REFINE_ROUNDS_MAX);
    ASSERT(run_ms >= 6.0 - 0.05); /* two picks spinning 3 ms or more each */
    /* 40 base runs, at most 2 s (printed to 0.1 ms and 0.01 s); the run
     * printed is the fastest of the warm-up and the rounds, the budget's
     * the warm-up's: 40 of it or more */
    const double want = 40 * run_ms / 1000 < 2.0 ? 40 * run_ms / 1000 : 2.0, tol = 0.005 + 40 * 0.05 / 1000 + 1e-9;
    ASSERT(budget >= want - tol && budget <= 2.0 + tol);
    /* undecided: stopped, by the budget (logged why) or at the most rounds */
    if (open > 0)
        ASSERT(rounds == REFINE_ROUNDS_MAX || starts(after, ": the time budget ran out") ||
               starts(after, ": no time left for more variant engines"));
    /* too fast to refine (whichever of the two close tactics isolation took) */
    g_t1 = 0.01, g_t1_evicted = 0.02, g_t2 = 0.0105;
    ASSERT(build_pick(net, KILN_BUILD_REFINE, NULL, &st) > 0);
    ASSERT_EQ(st.refined, 0); /* logged "the engine runs in ..." when listed */
    ASSERT(!strstr(g_log.text, "(paired rounds)"));
    g_t1 = 3.0, g_t1_evicted = 20.0, g_t2 = 3.2;
    kiln_network_free(net);
}

/* The timing cache replays the refined choice (no engine runs: evict never
 * ran during the build) and a build without the flag ignores it. */
TEST_IMPL(refine_timing_cache) {
    char path[512];
    snprintf(path, sizeof path, "%s/refine_tc_%ld.txt", KILN_BINARY_DIR, (long)getpid());
    remove(path);
    kiln_network *net = evict_pick_net_n(2);
    kiln_build_stats st;
    ASSERT_PICK(fresh_pick(net, KILN_BUILD_REFINE, path, &st, 2), 2);
    ASSERT_EQ(st.refined, 2);
    g_evicts = 0;
    ASSERT_PICK(build_pick(net, KILN_BUILD_REFINE, path, &st), 2);
    ASSERT_EQ(st.timed, 0);
    ASSERT_EQ(st.refined, 0);
    ASSERT_CONTAINS(g_log.text, "layer 'pick': tactic 2 (refined in the network, timing cache) replaces tactic 1");
    ASSERT_CONTAINS(g_log.text, "layer 'pick1': tactic 2 (refined in the network, timing cache) replaces tactic 1");
    ASSERT(g_evicts <= 4); /* the packed-only check's run and the test's own, no refinement rounds */
    ASSERT_PICK(build_pick(net, 0, path, &st), 1);
    ASSERT_EQ(st.timed, 0);
    remove(path);
    kiln_network_free(net);
}

/* The decision alone (kiln__b_judge), on synthetic paired rounds: d the
 * alternative's change of its span's time in a round (< 0: it won the
 * round), seg the reference's span time.  No engine, no timing. */
static b_test judge_rounds(const double *d, int n, double seg, double tie, int *open_at) {
    b_test t;
    memset(&t, 0, sizeof t);
    *open_at = -1; /* the round that decided it (1-based), -1: undecided */
    for (int r = 0; r < n; r++)
        if (!kiln__b_judge(&t, d[r], seg, tie) && *open_at < 0) *open_at = r + 1;
    return t;
}

TEST_IMPL(refine_judge) {
    double d[REFINE_ROUNDS_MAX + 4];
    int at;
    /* five straight wins of 10%: taken at the fifth round (a fair coin gives 5 of 5 with p = 1/32), not before */
    for (int r = 0; r < REFINE_ROUNDS_MAX + 4; r++) d[r] = -1.0;
    b_test t = judge_rounds(d, 4, 10.0, 0.03, &at);
    ASSERT_EQ(t.verdict, 0);
    ASSERT_EQ(at, -1);
    t = judge_rounds(d, 9, 10.0, 0.03, &at);
    ASSERT_EQ(t.verdict, 1);
    ASSERT_EQ(at, 5);
    ASSERT_EQ(t.rounds, 5); /* decided: later rounds not recorded */
    /* a burst (one round +50 ms, a neighbour's time slice) among wins: 7 of 8 passes, the median holds */
    d[1] = 50.0;
    t = judge_rounds(d, 12, 10.0, 0.03, &at);
    ASSERT_EQ(t.verdict, 1);
    ASSERT_EQ(at, 8);
    ASSERT_EQ(t.wins, 7);
    ASSERT_EQ(t.losses, 1);
    /* every round won by 2% of the span: above a 1% tie (a region's), below a 3% one (a tactic's):
     * then dropped only at REFINE_ROUNDS_MAX (it never loses a round) */
    for (int r = 0; r < REFINE_ROUNDS_MAX + 4; r++) d[r] = -0.2;
    t = judge_rounds(d, REFINE_ROUNDS_MAX + 4, 10.0, 0.01, &at);
    ASSERT_EQ(t.verdict, 1);
    ASSERT_EQ(at, 5);
    t = judge_rounds(d, REFINE_ROUNDS_MAX + 4, 10.0, 0.03, &at);
    ASSERT_EQ(t.verdict, -1);
    ASSERT_EQ(at, REFINE_ROUNDS_MAX);
    ASSERT_EQ(t.rounds, REFINE_ROUNDS_MAX);
    /* losses: dropped at the sixth, when 15 wins of 20 (the test's bar at 20 rounds) are out of reach */
    for (int r = 0; r < REFINE_ROUNDS_MAX + 4; r++) d[r] = 1.0;
    t = judge_rounds(d, REFINE_ROUNDS_MAX + 4, 10.0, 0.03, &at);
    ASSERT_EQ(t.verdict, -1);
    ASSERT_EQ(at, 6);
    /* a tie (d = 0) counts as a loss: no change is taken on equal times */
    for (int r = 0; r < REFINE_ROUNDS_MAX + 4; r++) d[r] = 0;
    t = judge_rounds(d, REFINE_ROUNDS_MAX + 4, 10.0, 0.01, &at);
    ASSERT_EQ(t.verdict, -1);
    ASSERT_EQ(at, 6);
    /* a coin: alternating wins and losses of 10%: never taken, dropped at the sixth loss (round 12) */
    for (int r = 0; r < REFINE_ROUNDS_MAX + 4; r++) d[r] = r % 2 ? 1.0 : -1.0;
    t = judge_rounds(d, REFINE_ROUNDS_MAX + 4, 10.0, 0.01, &at);
    ASSERT_EQ(t.verdict, -1);
    ASSERT_EQ(at, 12);
    ASSERT_EQ(t.wins, 6);
    /* within a budget of 8 rounds: 6 wins, 2 losses is still open (7 of 8 needed) */
    for (int r = 0; r < 8; r++) d[r] = r == 2 || r == 5 ? 0.5 : -1.0;
    t = judge_rounds(d, 8, 10.0, 0.01, &at);
    ASSERT_EQ(t.verdict, 0);
    ASSERT_EQ(t.wins, 6);
    ASSERT_NEAR(kiln__b_test_median(t.d, t.rounds), -1.0, 1e-12);
    /* ... which leans to the alternative (the region check's last word), with a median gain of 10% */
    ASSERT_EQ(kiln__b_judge_lean(&t, 0.01), 1);
    ASSERT_EQ(kiln__b_judge_lean(&t, 0.15), 0); /* not past a 15% tie */
    /* 3 wins 2 losses, as many losses as wins, or fewer than REFINE_LEAN_ROUNDS rounds: no lean */
    for (int r = 0; r < 5; r++) d[r] = r % 2 ? 0.5 : -1.0;
    t = judge_rounds(d, 5, 10.0, 0.01, &at);
    ASSERT_EQ(t.wins, 3);
    ASSERT_EQ(kiln__b_judge_lean(&t, 0.01), 0);
    for (int r = 0; r < 8; r++) d[r] = r % 2 ? 0.5 : -1.0;
    t = judge_rounds(d, 8, 10.0, 0.01, &at);
    ASSERT_EQ(t.verdict, 0);
    ASSERT_EQ(kiln__b_judge_lean(&t, 0.01), 0);
    for (int r = 0; r < 4; r++) d[r] = -1.0;
    t = judge_rounds(d, 4, 10.0, 0.01, &at);
    ASSERT_EQ(kiln__b_judge_lean(&t, 0.01), 0);
    /* a decided test: its verdict */
    for (int r = 0; r < 6; r++) d[r] = 1.0;
    t = judge_rounds(d, 6, 10.0, 0.01, &at);
    ASSERT_EQ(t.verdict, -1);
    ASSERT_EQ(kiln__b_judge_lean(&t, 0.01), 0);
    /* a region's verdict (kiln__b_region_keep): six straight losses (significant) revert it whatever its
     * isolated gain */
    ASSERT_EQ(kiln__b_region_keep(&t, 0.01, 100.0, 80.0), 0);
    /* the GPU host's ResNet-50: 4 wins 6 losses of 72 ms spans, median +0.35 ms (dropped by the sign test,
     * its losses short of it): the isolated costs decide, 8% kept, 3% not */
    for (int r = 0; r < 10; r++) d[r] = r % 5 < 2 ? -2.0 : (r % 5 == 2 ? 0.3 : 0.4);
    t = judge_rounds(d, 10, 72.0, 0.01, &at);
    ASSERT_EQ(t.verdict, -1);
    ASSERT_EQ(t.wins, 4);
    ASSERT_EQ(kiln__b_region_keep(&t, 0.01, 56.8, 52.1), 2);
    ASSERT_EQ(kiln__b_region_keep(&t, 0.01, 56.8, 55.1), 0);
    /* the Intel host's ResNet-50 (session 21): 2 wins 6 losses of 56.6 ms spans, median +0.64 ms (+1.1%,
     * past the 1% tie but short of the sign test and of REGION_LOSS): 10.7% in isolation, kept */
    const double intel[8] = {0.834, 0.694, 0.106, 0.589, 1.919, -0.698, -0.125, 3.187};
    t = judge_rounds(intel, 8, 56.6, 0.01, &at);
    ASSERT_EQ(t.wins, 2);
    ASSERT(t.losses < 7); /* (need_wins(8) = 7: not a significant loss) */
    ASSERT_EQ(kiln__b_region_keep(&t, 0.01, 42.57, 38.0), 2);
    /* the same with a median loss past REGION_LOSS (+4% of the span): reverted */
    for (int r = 0; r < 10; r++) d[r] = r % 5 < 2 ? -2.0 : 2.9;
    t = judge_rounds(d, 10, 72.0, 0.01, &at);
    ASSERT(t.losses < 9); /* (not the sign test: the median decides) */
    ASSERT_EQ(kiln__b_region_keep(&t, 0.01, 56.8, 52.1), 0);
    /* fewer than REFINE_LEAN_ROUNDS rounds (the budget's 2 s hold 4 rounds of an engine that runs 250 ms):
     * no significant loss to go on, so the isolated costs decide, unless the rounds' median loses past
     * REGION_LOSS */
    for (int r = 0; r < 4; r++) d[r] = r % 2 ? 0.1 : -0.1;
    t = judge_rounds(d, 4, 72.0, 0.01, &at);
    ASSERT_EQ(kiln__b_region_keep(&t, 0.01, 56.8, 40.0), 2);
    ASSERT_EQ(kiln__b_region_keep(&t, 0.01, 56.8, 55.1), 0); /* (3% in isolation) */
    for (int r = 0; r < 3; r++) d[r] = 3.0;                  /* +4% of the span in every round */
    t = judge_rounds(d, 3, 72.0, 0.01, &at);
    ASSERT_EQ(t.verdict, 0);
    ASSERT_EQ(kiln__b_region_keep(&t, 0.01, 56.8, 40.0), 0);
    /* no round at all: the isolated costs */
    memset(&t, 0, sizeof t);
    ASSERT_EQ(kiln__b_region_keep(&t, 0.01, 56.8, 52.1), 2);
    ASSERT_EQ(kiln__b_region_keep(&t, 0.01, 56.8, 55.1), 0);
    /* a win: kept by the network (1), whatever the isolated costs say */
    for (int r = 0; r < 5; r++) d[r] = -1.0;
    t = judge_rounds(d, 5, 10.0, 0.01, &at);
    ASSERT_EQ(kiln__b_region_keep(&t, 0.01, 10.0, 11.0), 1);
}

TEST_LIST(TEST_ENTRY(refine_judge), TEST_ENTRY(refine_replaces_isolated_choice), TEST_ENTRY(refine_hands_over_weights), TEST_ENTRY(refine_pooled_decision), TEST_ENTRY(refine_budget),
          TEST_ENTRY(refine_timing_cache))
