/*
 * test_epilogue_fail.c — a fused epilogue that fails fails the layer.
 *
 * test::FailAbove is an elementwise op with a host epilogue that returns
 * an error when a value exceeds its `limit` attribute (a plugin whose
 * epilogue breaks its "must not fail" contract, or meets data it cannot
 * take).  Fused into a Conv (every CPU tactic forced on the layer, 2
 * threads, so the failure happens on a worker thread whose message is
 * its own) and into a MatMul, the run must fail naming the layer and the
 * epilogue's message; the same context then runs inputs whose outputs stay
 * under the limit (nothing of the failure is left over), and with a limit
 * no value reaches every run succeeds; successful runs match a naive
 * double reference computed here (so the fused path ran).
 */
#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "kiln_int.h"
#include "test.h"
#include "test_ops_util.h"

#include <math.h>

static int above(const float *x, int64_t n, double limit, int64_t *at) {
    for (int64_t i = 0; i < n; i++)
        if (x[i] > limit) {
            *at = i;
            return 1;
        }
    return 0;
}

static int fail_impl(const kiln_call *c) {
    int64_t n = kiln_tensor_numel(&c->in[0]), at;
    double limit = kiln_attrs_float(c->attrs, "limit");
    if (above(c->in[0].data, n, limit, &at))
        return kiln_set_error(KILN_EINVAL, "FailAbove: element %lld above the limit %g", (long long)at, limit);
    memcpy(c->out[0].data, c->in[0].data, (size_t)n * sizeof(float));
    return 0;
}

static int fail_epi(const kiln_epilogue_args *a, float *x, int64_t n, int64_t channel, int64_t chan_len) {
    (void)chan_len;
    int64_t at;
    if (above(x, n, a->p[0], &at))
        return kiln_set_error(KILN_EINVAL, "FailAbove: a value above the limit %g in channel %lld", a->p[0],
                              (long long)channel);
    return 0;
}

static int fail_epi_check(kiln_epilogue_args *a) {
    a->p[0] = kiln_attrs_float(a->attrs, "limit");
    return 0;
}

static const kiln_attr_def fail_attrs[] = {
    {"limit", KILN_ATTR_FLOAT, 0, NULL, 1, "values above it are an error"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static const kiln_quick_op fail_op = {
    .ns = "test", .name = "FailAbove", .version = 1, .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
    .attrs = fail_attrs, .shape = same_shape, .impl = fail_impl, .formats = NULL,
    .epilogue = fail_epi, .epilogue_check = fail_epi_check, .doc = "fails above a limit",
};

static uint64_t g_seed = 0xE91F4117u;

/* Build producer -> FailAbove(limit) and return the engine (the epilogue
 * fused: one layer).  conv: X[1,8,10,10] * W[6,8,3,3] pads 1, else
 * X[12,16] @ W[16,6]. */
static kiln_engine *build(int conv, const float *w, double limit) {
    kiln_network *net = kiln_network_create();
    ASSERT(net);
    int64_t xd[4] = {1, 8, 10, 10}, wd[4] = {6, 8, 3, 3}, xm[2] = {12, 16}, wm[2] = {16, 6};
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, conv ? 4 : 2, conv ? xd : xm, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "W", KILN_DTYPE_F32, conv ? 4 : 2, conv ? wd : wm, w));
    const char *in[2] = {"X", "W"}, *mid[1] = {"m"}, *out[1] = {"Y"};
    kiln_layer *l = conv ? kiln_network_add_layer(net, "ai.onnx::Conv", 11, "prod", 2, in, 1, mid)
                         : kiln_network_add_layer(net, "ai.onnx::MatMul", 13, "prod", 2, in, 1, mid);
    ASSERT(l);
    if (conv) {
        int64_t pads[4] = {1, 1, 1, 1};
        ASSERT_OK(kiln_layer_set_ints(l, "pads", pads, 4));
    }
    kiln_layer *f = kiln_network_add_layer(net, "test::FailAbove", 1, "fail", 1, mid, 1, out);
    ASSERT(f);
    ASSERT_OK(kiln_layer_set_float(f, "limit", limit));
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_build_stats st;
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, 2, &st);
    kiln_network_free(net);
    ASSERT_EQ(st.layers, 1);
    ASSERT_EQ(st.fused, 1);
    return e;
}

/* Naive reference of the producer. */
static void reference(int conv, const float *x, const float *w, double *ref) {
    if (!conv) {
        for (int i = 0; i < 12; i++)
            for (int j = 0; j < 6; j++) {
                double acc = 0;
                for (int k = 0; k < 16; k++) acc += (double)x[i * 16 + k] * w[k * 6 + j];
                ref[i * 6 + j] = acc;
            }
        return;
    }
    for (int m = 0; m < 6; m++)
        for (int oy = 0; oy < 10; oy++)
            for (int ox = 0; ox < 10; ox++) {
                double acc = 0;
                for (int c = 0; c < 8; c++)
                    for (int ky = 0; ky < 3; ky++)
                        for (int kx = 0; kx < 3; kx++) {
                            int iy = oy + ky - 1, ix = ox + kx - 1;
                            if (iy >= 0 && iy < 10 && ix >= 0 && ix < 10)
                                acc += (double)x[(c * 10 + iy) * 10 + ix] * w[((m * 8 + c) * 3 + ky) * 3 + kx];
                        }
                ref[(m * 10 + oy) * 10 + ox] = acc;
            }
}

static void run_case(int conv, int tactic) {
    const int64_t nx = conv ? 800 : 192, nw = conv ? 432 : 96, ny = conv ? 600 : 72;
    float *x = test_rnd_f32(&g_seed, nx, -1.0f, 1.0f), *w = test_rnd_f32(&g_seed, nw, -1.0f, 1.0f);
    float *y = test_xmalloc((size_t)ny * sizeof(float));
    float *xs = test_xmalloc((size_t)nx * sizeof(float));
    double *ref = test_xmalloc((size_t)ny * sizeof(double)), big = 0;
    double *sref = test_xmalloc((size_t)ny * sizeof(double));
    reference(conv, x, w, ref);
    for (int64_t i = 0; i < ny; i++) big = fabs(ref[i]) > big ? fabs(ref[i]) : big;
    for (int failing = 0; failing <= 1; failing++) {
        /* failing: a limit half the largest output (some values exceed it) */
        kiln_engine *e = build(conv, w, failing ? 0.5 * big : 2.0 * big + 1.0);
        if (tactic) ASSERT_OK(test_force_tactic(e, 0, tactic));
        /* run 0: x; run 1 (same context): x / 4, whose outputs stay under a
         * failing limit, so a failure is not left over for the next run */
        kiln_context *ctx;
        ASSERT_OK(kiln_context_create(e, 2, &ctx));
        char what[64];
        snprintf(what, sizeof what, "%s tactic %d", conv ? "Conv" : "MatMul", tactic);
        for (int run = 0; run < 2; run++) {
            if (run)
                for (int64_t i = 0; i < nx; i++) xs[i] = 0.25f * x[i];
            ASSERT_OK(kiln_context_bind(ctx, "X", run ? xs : x, (size_t)nx * sizeof(float)));
            memset(y, 0xA5, (size_t)ny * sizeof(float));
            ASSERT_OK(kiln_context_bind(ctx, "Y", y, (size_t)ny * sizeof(float)));
            int rc = kiln_context_run(ctx);
            if (failing && !run) {
                if (rc != KILN_EINVAL) TEST__FAIL("%s: run returned %d, expected KILN_EINVAL", what, rc);
                ASSERT_CONTAINS(kiln_errmsg(), "layer 'prod'");
                ASSERT_CONTAINS(kiln_errmsg(), "fused epilogue: FailAbove: a value above the limit");
                continue;
            }
            if (rc) TEST__FAIL("%s run %d: %s", what, run, kiln_errmsg());
            for (int64_t i = 0; i < ny; i++) sref[i] = (run ? 0.25 : 1.0) * ref[i];
            test_check_close(what, y, sref, ny, 1e-4 * big);
        }
        kiln_context_free(ctx);
        kiln_engine_free(e);
    }
    free(x); free(xs); free(w); free(y); free(ref); free(sref);
}

TEST_IMPL(conv_every_tactic) {
    ASSERT_OK(kiln_register_quick_op(&fail_op));
    for (int tactic = 1; tactic <= 6; tactic++) run_case(1, tactic);
}

TEST_IMPL(matmul) {
    kiln_register_quick_op(&fail_op); /* KILN_EEXISTS when the test above ran */
    run_case(0, 0);
}

TEST_LIST(TEST_ENTRY(conv_every_tactic), TEST_ENTRY(matmul))
