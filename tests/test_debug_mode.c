/*
 * test_debug_mode.c — debug mode's "element not written" check on 1- and
 * 2-byte integer outputs, where the poison byte 0xA5 is a real value: a
 * layer that writes 0xA5 is not reported; one that leaves its output
 * unwritten still is.
 */
#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "test.h"

#include <stdint.h>
#include <string.h>

/* test::half_u8: writes y[i] = x[i] for the first half only (a bug the
 * debug check must catch). */
static int half_shape(kiln_shape_ctx *c) {
    c->out[0] = c->in[0];
    c->out[0].data = NULL;
    c->out[0].nvalues = -1;
    return 0;
}
static int half_impl(const kiln_call *c) {
    int64_t n = kiln_tensor_numel(&c->out[0]);
    memcpy(c->out[0].data, c->in[0].data, (size_t)(n / 2));
    return 0;
}
static const kiln_quick_op half_op = {
    .ns = "test", .name = "half_u8", .version = 1, .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
    .shape = half_shape, .impl = half_impl,
};
KILN_OP(half_op)

static kiln_engine *one_layer(const char *op, int ver, kiln_dtype in_t, kiln_dtype out_t, int64_t n) {
    kiln_network *net = kiln_network_create();
    int64_t d[1] = {n};
    ASSERT_OK(kiln_network_add_input(net, "x", in_t, 1, d, NULL));
    const char *in[1] = {"x"}, *out[1] = {"y"};
    kiln_layer *l = kiln_network_add_layer(net, op, ver, NULL, 1, in, 1, out);
    ASSERT(l);
    if (!strcmp(op, "ai.onnx::Cast")) ASSERT_OK(kiln_layer_set_int(l, "to", out_t));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING);
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    return e;
}

TEST_IMPL(debug_u8_poison_value_is_data) {
    static uint64_t seed = 0xa5a5f00dull;
    enum { N = 64 };
    const kiln_dtype types[3] = {KILN_DTYPE_U8, KILN_DTYPE_I8, KILN_DTYPE_I16};
    for (int t = 0; t < 3; t++) {
        kiln_engine *e = one_layer("ai.onnx::Cast", 13, KILN_DTYPE_F32, types[t], N);
        kiln_context *ctx = NULL;
        ASSERT_OK(kiln_context_create(e, 1, &ctx));
        kiln_context_set_debug(ctx, 1);
        float x[N];
        /* runs of the values whose bytes are 0xA5 (165 u8, -91 i8,
         * 0xA5A5 = -23131 i16), longer than 16, amid random values */
        float poison = types[t] == KILN_DTYPE_U8 ? 165.0f : types[t] == KILN_DTYPE_I8 ? -91.0f : -23131.0f;
        for (int i = 0; i < N; i++) x[i] = (float)(int)test_randf(&seed, 0, 100);
        for (int i = 10; i < 30; i++) x[i] = poison;
        x[N - 1] = poison;
        int16_t y[N];
        memset(y, 0, sizeof y);
        ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
        ASSERT_OK(kiln_context_bind(ctx, "y", y, (size_t)N * kiln_dtype_size(types[t])));
        /* a run of 20 real 0xA5 values is reported (the heuristic's limit);
         * 15 are not */
        ASSERT(kiln_context_run(ctx) != 0);
        ASSERT_CONTAINS(kiln_errmsg(), "was not written");
        for (int i = 25; i < 30; i++) x[i] = 7;
        ASSERT_OK(kiln_context_run(ctx));
        for (int i = 0; i < N; i++) {
            int64_t got = types[t] == KILN_DTYPE_U8 ? ((uint8_t *)y)[i]
                          : types[t] == KILN_DTYPE_I8 ? ((int8_t *)y)[i] : y[i];
            ASSERT_EQ(got, (int64_t)x[i]);
        }
        kiln_context_free(ctx);
        kiln_engine_free(e);
    }
    /* a layer that leaves half its u8 output unwritten is still caught */
    kiln_engine *e = one_layer("test::half_u8", 1, KILN_DTYPE_U8, KILN_DTYPE_U8, N);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    kiln_context_set_debug(ctx, 1);
    uint8_t x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = (uint8_t)test_rand_u64(&seed);
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    ASSERT(kiln_context_run(ctx) != 0);
    ASSERT_CONTAINS(kiln_errmsg(), "element 32");
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

TEST_LIST(TEST_ENTRY(debug_u8_poison_value_is_data))
