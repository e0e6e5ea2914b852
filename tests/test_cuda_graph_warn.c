/*
 * test_cuda_graph_warn.c — a CUDA graph capture that fails is said once per
 * context at the default log level (KILN_LOG_WARN), naming the layer that
 * broke it, and the layers still run (eagerly) with correct results.
 *
 * On the stand-in CUDA device of src/device/cuda/fake.c with its graph
 * capture on (kiln__cuda_fake_graphs): x -> g1 -> g2 -> y, g1 and g2 GPU
 * layers between the copies, so [g1, g2] is a graph segment, captured on
 * the second run.  Cases: g2 refuses work inside a capture (as a CUDA call
 * that is illegal there fails): one warning naming g2; no layer refuses but
 * the capture cannot be instantiated: one warning naming the segment; a
 * device that cannot capture at all (the fake's default): no warning.
 */
#include "device/cuda/cuda_int.h"
#include "kiln_int.h"
#include "test.h"
#include "test_cuda_util.h"
#include "test_ops_util.h"

static int g_refuse; /* g2 refuses work inside a capture */

/* y = 2 x + 1 */
static int twice_body(const kiln_call *c) {
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    for (int64_t i = 0; i < kiln_tensor_numel(&c->in[0]); i++) y[i] = 2.0f * x[i] + 1.0f;
    return 0;
}
static int twice_gpu(const kiln_call *c) {
    if (g_refuse && kiln__cuda_fake_capturing() && !strcmp(c->layer, "g2"))
        return kiln_set_error(KILN_EDEVICE, "twice: a stream synchronize inside a graph capture");
    return kiln__cuda_fake_kernel(twice_body, c);
}
static const kiln_combo twice_formats[] = {{"FP32", NULL, {0}}, {NULL, NULL, {0}}};
static const kiln_quick_op twice_op = {
    .ns = "gwtest", .name = "twice", .version = 1, .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
    .shape = same_shape, .impl = twice_body, .cuda_impl = twice_gpu, .cuda_formats = twice_formats};
KILN_OP(twice_op)

static char g_log[8][600];
static int g_nlog;
static void collect(void *ud, kiln_log_level level, const char *msg) {
    (void)ud;
    if (level <= KILN_LOG_WARN && strstr(msg, "CUDA graph") && g_nlog < 8)
        snprintf(g_log[g_nlog++], sizeof g_log[0], "%s", msg);
}

/* Two contexts of e, four runs each, on fresh inputs; returns the
 * warnings about graphs logged. */
static int runs(kiln_engine *e) {
    uint64_t seed = 321;
    g_nlog = 0;
    kiln_log_set(KILN_LOG_WARN, collect, NULL);
    for (int k = 0; k < 2; k++) {
        kiln_context *ctx;
        ASSERT_OK(kiln_context_create(e, 1, &ctx));
        for (int run = 0; run < 4; run++) {
            float x[24], y[24];
            for (int i = 0; i < 24; i++) x[i] = test_randf(&seed, -2, 2);
            memset(y, 0xA5, sizeof y);
            ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
            ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
            ASSERT_OK(kiln_context_run(ctx));
            for (int i = 0; i < 24; i++) ASSERT_NEAR(y[i], 2.0 * (2.0 * x[i] + 1.0) + 1.0, 1e-5);
        }
        kiln_context_free(ctx);
    }
    kiln_log_set(KILN_LOG_WARN, NULL, NULL);
    return g_nlog;
}

TEST_IMPL(capture_failures_warn_once) {
    kiln__cuda_fake(1);
    kiln_network *net = kiln_network_create();
    int64_t dims[2] = {4, 6};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, dims, NULL));
    const char *i1[] = {"x"}, *o1[] = {"a"}, *i2[] = {"a"}, *o2[] = {"y"};
    ASSERT(kiln_network_add_layer(net, "gwtest::twice", 1, "g1", 1, i1, 1, o1));
    ASSERT(kiln_network_add_layer(net, "gwtest::twice", 1, "g2", 1, i2, 1, o2));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_engine *e = build_cuda(net, KILN_BUILD_NO_TIMING);
    ASSERT(e);
    kiln_network_free(net);

    ASSERT_EQ(runs(e), 0); /* the fake's default: it cannot capture, nothing to say */
    kiln__cuda_fake_graphs(1);
    g_refuse = 1;
    ASSERT_EQ(runs(e), 2); /* once per context */
    for (int k = 0; k < 2; k++) {
        ASSERT_CONTAINS(g_log[k], "CUDA graph capture broken by layer 'g2'");
        ASSERT_CONTAINS(g_log[k], "layers 'g1'..'g2' run without a CUDA graph");
        ASSERT_CONTAINS(g_log[k], "a stream synchronize inside a graph capture");
    }
    g_refuse = 0;
    ASSERT_EQ(runs(e), 2);
    ASSERT_CONTAINS(g_log[0], "CUDA graph capture of layers 'g1'..'g2' failed");
    ASSERT_CONTAINS(g_log[0], "a captured graph cannot be replayed");
    kiln_engine_free(e);
    kiln__cuda_fake(0);
}

TEST_LIST(TEST_ENTRY(capture_failures_warn_once))
