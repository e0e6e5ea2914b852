/*
 * test_engine_trust.c — crafted engines and the trust model.
 *
 * Crafted engines are made the way an attacker would: take a real engine,
 * change what it says (a dim, a lifetime, an input index) and write it back
 * with valid checksums (here: edit the loaded structure, then serialize).
 * Each must fail with an error naming what is inconsistent, at load or at
 * the run that would have read or written out of bounds (run under ASan in
 * CI, so an out-of-bounds access fails the test even if the code "passed").
 *
 * Trust: an engine with native code (AOT kernels) loads only by the
 * caller's choice (kiln_load_options.code), and Ed25519 signatures cover
 * every byte of the file: each single-bit change of a signed engine, with
 * its checksums recomputed, fails verification.
 */
#include "kiln_int.h"
#include "test.h"
#include "test_ops_util.h"

#include "engine/trust.h"

#include <kiln/onnx.h>
#include <stdlib.h>


/* x[2,4] + w[2,4] -> a; a @ m[4,3] -> y */
static float g_w[8], g_m[12];

static kiln_engine *build_net(void) {
    kiln_network *net = kiln_network_create();
    int64_t xd[2] = {2, 4}, md[2] = {4, 3};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, xd, NULL));
    uint64_t s = 77;
    for (int i = 0; i < 8; i++) g_w[i] = test_randf(&s, -1, 1);
    for (int i = 0; i < 12; i++) g_m[i] = test_randf(&s, -1, 1);
    ASSERT_OK(kiln_network_add_constant(net, "w", KILN_DTYPE_F32, 2, xd, g_w));
    ASSERT_OK(kiln_network_add_constant(net, "m", KILN_DTYPE_F32, 2, md, g_m));
    const char *i1[] = {"x", "w"}, *o1[] = {"a"}, *i2[] = {"a", "m"}, *o2[] = {"y"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Add", 14, "add", 2, i1, 1, o1));
    ASSERT(kiln_network_add_layer(net, "ai.onnx::MatMul", 13, "mm", 2, i2, 1, o2));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING | KILN_BUILD_NO_FUSION, 1, NULL);
    kiln_network_free(net);
    return e;
}

/* Run on fresh random x; compare with a naive (x + w) @ m. */
static int run_net(const kiln_engine *e) {
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    float x[8], y[6];
    uint64_t s = 1234;
    for (int i = 0; i < 8; i++) x[i] = test_randf(&s, -3, 3);
    for (int i = 0; i < 6; i++) y[i] = 1e30f; /* poison */
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    int rc = kiln_context_run(ctx);
    kiln_context_free(ctx);
    if (rc) return rc;
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 3; c++) {
            double ref = 0;
            for (int k = 0; k < 4; k++) ref += (double)(x[r * 4 + k] + g_w[r * 4 + k]) * g_m[k * 3 + c];
            ASSERT_NEAR(y[r * 3 + c], ref, 1e-4);
        }
    return 0;
}

static int32_t find_tensor(const kiln_engine *e, const char *name) {
    for (int32_t i = 0; i < e->ntensors; i++)
        if (!strcmp(e->tensors[i].name, name)) return i;
    TEST__FAIL("no tensor '%s'", name);
    return -1;
}

/* A CONST node of value v (the builder hash-conses: there is one). */
static int32_t const_node(const kiln_engine *e, int64_t v) {
    for (int32_t i = 0; i < e->nnodes; i++)
        if (e->nodes[i].op == KILN_EXPR_CONST && e->nodes[i].v == v) return i;
    TEST__FAIL("no constant node %lld", (long long)v);
    return -1;
}

/* Serialize e (as edited), free it, load the bytes back.  The packed
 * forms of constant inputs are dropped first: they were packed for the
 * dims as built, and load refuses stored ones that disagree with the
 * edited dims by itself (test_packed.c), before the checks these tests
 * reach. */
static int reload(kiln_engine *e, const kiln_load_options *opt, kiln_engine **out) {
    for (int32_t i = 0; i < e->nlayers; i++) {
        kiln__elayer *L = &e->layers[i];
        for (int32_t k = 0; L->prepacked && k < L->nin; k++) kiln__aligned_free(L->prepacked[k]);
        kiln__free(L->prepacked);
        kiln__free(L->prepacked_size);
        L->prepacked = NULL;
        L->prepacked_size = NULL;
    }
    void *b = NULL;
    size_t n = 0;
    ASSERT_OK(kiln_engine_serialize(e, &b, &n));
    kiln_engine_free(e);
    int rc = kiln_engine_load_memory_ex(b, n, opt, out);
    kiln_free(b);
    return rc;
}

TEST_IMPL(intact_engine_runs) {
    kiln_engine *e = build_net(), *l = NULL;
    ASSERT_OK(reload(e, NULL, &l));
    ASSERT_EQ(kiln_engine_has_code(l), 0);
    ASSERT_OK(run_net(l));
    kiln_engine_free(l);
}

/* MatMul's inner dims disagree ([2,4] @ [2,3]): the Gemm kernel would
 * read past 'm'.  Refused before the layer runs. */
TEST_IMPL(crafted_inner_dim) {
    kiln_engine *e = build_net(), *l = NULL;
    e->tensors[find_tensor(e, "m")].dims[0] = const_node(e, 2);
    ASSERT_OK(reload(e, NULL, &l));
    ASSERT_EQ(run_net(l), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "engine is inconsistent: layer 'mm' (ai.onnx::MatMul v1) at input dims [2x4], [2x3]: "
                                   "MatMul: inner dims differ");
    kiln_engine_free(l);
}

/* The Add's output is smaller than its inputs: the kernel would write
 * past 'a'. */
TEST_IMPL(crafted_output_dims) {
    kiln_engine *e = build_net(), *l = NULL;
    e->tensors[find_tensor(e, "a")].dims[1] = const_node(e, 3);
    ASSERT_OK(reload(e, NULL, &l));
    ASSERT_EQ(run_net(l), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "layer 'add' (ai.onnx::Add v7) output 0 'a' has dims [2, 3], "
                                   "its op computes [2, 4]");
    kiln_engine_free(l);
}

/* A constant's dims ask for more bytes than the weights hold for it. */
TEST_IMPL(crafted_constant_dims) {
    kiln_engine *e = build_net(), *l = NULL;
    e->tensors[find_tensor(e, "w")].dims[0] = const_node(e, 4);
    ASSERT_EQ(reload(e, NULL, &l), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "constant 'w' needs 64 bytes for its dims, has 32");
}

/* A constant moved off its alignment (kernels load it aligned). */
TEST_IMPL(crafted_constant_misaligned) {
    kiln_engine *e = build_net(), *l = NULL;
    e->tensors[find_tensor(e, "w")].const_off += 4;
    ASSERT_EQ(reload(e, NULL, &l), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "constant 'w' at weights offset 4, expected a multiple of 64");
}

/* A lifetime that ends before a reader: the planner would give that
 * memory to another tensor while it is still read. */
TEST_IMPL(crafted_lifetime) {
    kiln_engine *e = build_net(), *l = NULL;
    kiln__etensor *a = &e->tensors[find_tensor(e, "a")];
    a->last = a->first;
    ASSERT_EQ(reload(e, NULL, &l), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "layer 1 'mm' uses 'a', whose lifetime is layers 0..0");
}

/* A layer reading an activation no earlier layer wrote (stale memory). */
TEST_IMPL(crafted_read_before_write) {
    kiln_engine *e = build_net(), *l = NULL;
    e->layers[0].in[0] = find_tensor(e, "a");
    ASSERT_EQ(reload(e, NULL, &l), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "layer 0 'add' reads 'a' before any layer writes it");
}

/* An output dtype the op does not produce (f16 in place of f32: the
 * kernel would write twice the bytes). */
TEST_IMPL(crafted_dtype) {
    kiln_engine *e = build_net(), *l = NULL;
    e->tensors[find_tensor(e, "y")].dtype = KILN_DTYPE_F16;
    /* the layer's record of its chosen types disagrees: refused at load */
    ASSERT_EQ(reload(e, NULL, &l), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "layer 'mm' (ai.onnx::MatMul v1) position 2 was chosen as f32 LINEAR, its tensor "
                                   "is f16 LINEAR");
    /* both changed: MatMul takes f16 (so the combination is valid), but
     * its shape function makes f32 from f32 inputs: refused before it runs */
    e = build_net();
    e->tensors[find_tensor(e, "y")].dtype = KILN_DTYPE_F16;
    for (int32_t i = 0; i < e->nlayers; i++)
        if (!strcmp(e->layers[i].name, "mm")) e->layers[i].io.dtype[2] = KILN_DTYPE_F16;
    ASSERT_OK(reload(e, NULL, &l));
    ASSERT_EQ(run_net(l), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "output 0 'y' is f16, its op makes f32");
    kiln_engine_free(l);
}

/* One layer `op` (Conv or LSTM) on input x and random constants, built
 * for this machine. */
static kiln_engine *build_one(const char *op, int version, int nconst, const char *const *names,
                              const int64_t (*dims)[3], int64_t xn, const int64_t *xd, const char *attr,
                              int64_t attr_v) {
    kiln_network *net = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, (int)xn, xd, NULL));
    uint64_t s = 99;
    const char *in[4] = {"x"};
    for (int k = 0; k < nconst; k++) {
        float v[64];
        for (int i = 0; i < 64; i++) v[i] = test_randf(&s, -1, 1);
        ASSERT(dims[k][0] * dims[k][1] * dims[k][2] <= 64);
        ASSERT_OK(kiln_network_add_constant(net, names[k], KILN_DTYPE_F32, 3, dims[k], v));
        in[k + 1] = names[k];
    }
    const char *out[] = {"y"};
    kiln_layer *L = kiln_network_add_layer(net, op, version, "L", 1 + nconst, in, 1, out);
    ASSERT(L);
    if (attr) ASSERT_OK(kiln_layer_set_int(L, attr, attr_v));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING | KILN_BUILD_NO_FUSION, 1, NULL);
    kiln_network_free(net);
    return e;
}

static kiln__elayer *layer_named(kiln_engine *e, const char *name) {
    for (int32_t i = 0; i < e->nlayers; i++)
        if (!strcmp(e->layers[i].name, name)) return &e->layers[i];
    TEST__FAIL("no layer '%s'", name);
    return NULL;
}

/* Conv over x [1, 2, 5, 5] with a 3x2x3 "filter" (rank 3: Conv1d-like over
 * [1, 2, 5]); types, layouts and tactics are Conv's combinations. */
static kiln_engine *build_conv(void) {
    static const char *const names[] = {"w"};
    static const int64_t dims[][3] = {{3, 2, 3}};
    int64_t xd[3] = {1, 2, 5};
    return build_one("ai.onnx::Conv", 11, 1, names, dims, 3, xd, NULL, 0);
}

/* A tactic the op never offered for these types: the kernel would switch
 * on a value it does not know. */
TEST_IMPL(crafted_tactic) {
    kiln_engine *e = build_conv(), *l = NULL;
    layer_named(e, "L")->tactic = 99;
    ASSERT_EQ(reload(e, NULL, &l), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "layer 'L' (ai.onnx::Conv v1) on cpu: types/layouts [f32 LINEAR, f32 LINEAR, f32 LINEAR]");
    ASSERT_CONTAINS(kiln_errmsg(), "with tactic 99 are not a combination its op accepts");
}

/* A 2-D Conv x[1, 4, H, W] * w[4, 4, 3, 3] with strides s; H and W
 * dynamic (profile 6..12, timed at 9) or 9.  st: the build's counters. */
static kiln_engine *build_conv3x3(int64_t s, int dynamic, kiln_build_stats *st) {
    kiln_network *net = kiln_network_create();
    int64_t xd[4] = {1, 4, dynamic ? -1 : 9, dynamic ? -1 : 9}, wd[4] = {4, 4, 3, 3}, st2[2] = {s, s};
    const char *dn[4] = {NULL, NULL, "h", "w"};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 4, xd, dn));
    float w[144];
    uint64_t seed = 5;
    for (int i = 0; i < 144; i++) w[i] = test_randf(&seed, -1, 1);
    ASSERT_OK(kiln_network_add_constant(net, "w", KILN_DTYPE_F32, 4, wd, w));
    const char *in[] = {"x", "w"}, *out[] = {"y"};
    kiln_layer *L = kiln_network_add_layer(net, "ai.onnx::Conv", 11, "L", 2, in, 1, out);
    ASSERT(L);
    ASSERT_OK(kiln_layer_set_ints(L, "strides", st2, 2));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_build_config *cfg = test_build_config(KILN_BUILD_NO_FUSION, 1);
    int64_t lo[4] = {1, 4, 6, 6}, opt[4] = {1, 4, 9, 9}, hi[4] = {1, 4, 12, 12};
    if (dynamic) ASSERT_OK(kiln_build_config_set_profile(cfg, "x", 4, lo, opt, hi));
    kiln_engine *e = NULL;
    if (kiln_build(net, cfg, &e, st)) TEST__FAIL("build: %s", kiln_errmsg());
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    return e;
}

/* Conv's Winograd tactics (6: 4x4 tiles, 10: 2x2) run only 3x3 stride-1
 * undilated 2-D convs of one group: the builder offers them only there
 * (two candidates more than the same conv at stride 2), and an engine
 * naming one elsewhere fails to load instead of running another kernel
 * under its name. */
TEST_IMPL(crafted_winograd_tactic) {
    for (int dynamic = 0; dynamic <= 1; dynamic++)
        for (int tac = 6; tac <= 10; tac += 4) {
            kiln_build_stats s1, s2;
            kiln_engine *e = build_conv3x3(2, dynamic, &s2), *l = NULL;
            layer_named(e, "L")->tactic = tac;
            ASSERT_EQ(reload(e, NULL, &l), KILN_EFORMAT);
            ASSERT_CONTAINS(kiln_errmsg(), "layer 'L' (ai.onnx::Conv v1) on cpu");
            char want[64];
            snprintf(want, sizeof want, "with tactic %d are not a combination its op accepts", tac);
            ASSERT_CONTAINS(kiln_errmsg(), want);
            e = build_conv3x3(1, dynamic, &s1);
            ASSERT_EQ(s1.candidates, s2.candidates + 2);
            layer_named(e, "L")->tactic = tac;
            ASSERT_OK(reload(e, NULL, &l));
            ASSERT_EQ(layer_named(l, "L")->tactic, tac);
            kiln_context *ctx = NULL;
            ASSERT_OK(kiln_context_create(l, 1, &ctx));
            float x[4 * 81], y[4 * 81];
            uint64_t seed = 11;
            for (int i = 0; i < 4 * 81; i++) x[i] = test_randf(&seed, -1, 1);
            if (dynamic) {
                int64_t xd[4] = {1, 4, 9, 9};
                ASSERT_OK(kiln_context_set_input_shape(ctx, "x", 4, xd));
            }
            ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
            ASSERT_OK(kiln_context_bind(ctx, "y", y, 4 * 49 * sizeof(float)));
            ASSERT_OK(kiln_context_run(ctx));
            kiln_context_free(ctx);
            kiln_engine_free(l);
        }
}

/* Types no combination has (an f16 input with f32 weights and output;
 * Conv takes all FP32 or all FP16), the layer's record changed with the
 * tensor, so only the op's combinations can tell. */
TEST_IMPL(crafted_combination) {
    kiln_engine *e = build_conv(), *l = NULL;
    e->tensors[find_tensor(e, "x")].dtype = KILN_DTYPE_F16;
    layer_named(e, "L")->io.dtype[0] = KILN_DTYPE_F16;
    ASSERT_EQ(reload(e, NULL, &l), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "types/layouts [f16 LINEAR, f32 LINEAR");
    /* a layout Conv never declared (NHWC), record and tensor alike */
    e = build_conv();
    e->tensors[find_tensor(e, "w")].format = KILN_FORMAT_NHWC;
    layer_named(e, "L")->io.format[1] = KILN_FORMAT_NHWC;
    ASSERT_EQ(reload(e, NULL, &l), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "f32 NHWC");
    ASSERT_CONTAINS(kiln_errmsg(), "are not a combination its op accepts");
}

/* LSTM reads W as floats (fuzz/open/lstm_gemm_reads_past_input.crash: a
 * bool W, 1 byte an element, read as 4): an op without declared
 * combinations takes the types its shape function accepts, which is run
 * again before the first run of a loaded engine. */
TEST_IMPL(crafted_input_type) {
    static const char *const names[] = {"W", "R"};
    static const int64_t dims[][3] = {{1, 12, 2}, {1, 12, 3}};
    int64_t xd[3] = {1, 3, 2};
    kiln_engine *e = build_one("ai.onnx::LSTM", 14, 2, names, dims, 3, xd, "hidden_size", 3), *l = NULL;
    e->tensors[find_tensor(e, "W")].dtype = KILN_DTYPE_BOOL;
    layer_named(e, "L")->io.dtype[1] = KILN_DTYPE_BOOL;
    ASSERT_OK(reload(e, NULL, &l));
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(l, 1, &ctx));
    float x[6], y[18];
    uint64_t s = 5;
    for (int i = 0; i < 6; i++) x[i] = test_randf(&s, -1, 1);
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    ASSERT_EQ(kiln_context_run(ctx), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "layer 'L' (ai.onnx::LSTM v14)");
    ASSERT_CONTAINS(kiln_errmsg(), "LSTM: inputs 1 and 0 must have the same type, found bool and f32");
    kiln_context_free(ctx);
    kiln_engine_free(l);
}

/* Input dims the op refuses, reached through an input's dynamic dim (a
 * model run with its dynamic dims at 1, as `kiln bench` of ppocr_cls did):
 * the caller's shape, not the engine, and the message says which input
 * dim to change. */
TEST_IMPL(refused_input_dims_named) {
    kiln_network *net = kiln_network_create();
    int64_t xd[3] = {1, 2, -1};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 3, xd, NULL));
    const char *in[] = {"x"}, *out[] = {"y"};
    kiln_layer *L = kiln_network_add_layer(net, "ai.onnx::MaxPool", 12, "pool", 1, in, 1, out);
    ASSERT(L);
    int64_t k[1] = {3};
    ASSERT_OK(kiln_layer_set_ints(L, "kernel_shape", k, 1));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_build_config *cfg = kiln_build_config_create();
    int64_t mn[3] = {1, 2, 1}, opt[3] = {1, 2, 6}, mx[3] = {1, 2, 8};
    ASSERT_OK(kiln_build_config_set_profile(cfg, "x", 3, mn, opt, mx));
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING);
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    for (int len = 1; len <= 5; len += len == 1 ? 1 : 3) {
        int64_t dims[3] = {1, 2, len};
        float x[10], y[6];
        uint64_t s = 21;
        for (int i = 0; i < 2 * len; i++) x[i] = test_randf(&s, -2, 2);
        for (int i = 0; i < 6; i++) y[i] = 1e30f; /* poison */
        ASSERT_OK(kiln_context_set_input_shape(ctx, "x", 3, dims));
        ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof(float) * 2 * (size_t)len));
        if (len == 1) { /* MaxPool's output length would be -1 */
            ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
            ASSERT_EQ(kiln_context_run(ctx), KILN_ESHAPE);
            ASSERT_CONTAINS(kiln_errmsg(), "tensor 'y': dim 2 = -1 (negative); its dims follow from dims 2 of input "
                                           "'x': give those input dims other values");
            continue;
        }
        if (len == 2) {
            ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y)); /* larger than needed: fine */
            ASSERT_EQ(kiln_context_run(ctx), KILN_ESHAPE);
            ASSERT_CONTAINS(kiln_errmsg(), "layer 'pool' (ai.onnx::MaxPool v");
            ASSERT_CONTAINS(kiln_errmsg(), "rejects its input dims [1x2x2], which follow from dims 2 of input 'x'");
            continue;
        }
        ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
        ASSERT_OK(kiln_context_run(ctx));
        for (int c = 0; c < 2; c++)
            for (int j = 0; j < 3; j++) {
                float m = x[c * 5 + j];
                for (int t = 1; t < 3; t++) m = x[c * 5 + j + t] > m ? x[c * 5 + j + t] : m;
                ASSERT_NEAR(y[c * 3 + j], m, 0);
            }
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

/* A data-dependent output (NonZero's [rank, N]) whose size symbol is
 * given a smaller upper bound than the op states: the kernel would write
 * N <= 12 columns into memory reserved for 2. */
TEST_IMPL(crafted_upper_bound) {
    kiln_network *net = kiln_network_create();
    int64_t xd[2] = {3, 4};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, xd, NULL));
    const char *in[] = {"x"}, *out[] = {"nz"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::NonZero", 13, "nonzero", 1, in, 1, out));
    ASSERT_OK(kiln_network_mark_output(net, "nz"));
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING, 1, NULL), *l = NULL;
    kiln_network_free(net);
    int found = 0;
    for (int32_t t = 0; t < e->ntensors; t++)
        if (e->tensors[t].is_size) e->tensors[t].upper = const_node(e, 2), found = 1;
    ASSERT(found);
    ASSERT_OK(reload(e, NULL, &l));
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(l, 1, &ctx));
    float x[12];
    uint64_t s = 5;
    for (int i = 0; i < 12; i++) x[i] = test_randf(&s, 0.5f, 2.0f); /* all nonzero: N = 12 */
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_EQ(kiln_context_run(ctx), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "layer 'nonzero' (ai.onnx::NonZero v9) output 0 'nz' may need 192 bytes, "
                                   "the engine reserves 32");
    kiln_context_free(ctx);
    kiln_engine_free(l);
}

/* ------------------------------------------------------------ signatures */

TEST_IMPL(sign_and_verify) {
    if (!kiln_sign_available()) {
        unsigned char pk[32], sk[64];
        ASSERT_EQ(kiln_sign_keypair(pk, sk), KILN_EUNSUPPORTED);
        ASSERT_CONTAINS(kiln_errmsg(), "built without libsodium");
        return;
    }
    unsigned char pk[32], sk[64], pk2[32], sk2[64];
    ASSERT_OK(kiln_sign_keypair(pk, sk));
    ASSERT_OK(kiln_sign_keypair(pk2, sk2));
    kiln_engine *e = build_net(), *l = NULL;
    void *sb = NULL, *ub = NULL;
    size_t sn = 0, un = 0;
    ASSERT_OK(kiln_engine_serialize_signed(e, sk, &sb, &sn));
    ASSERT_OK(kiln_engine_serialize(e, &ub, &un));
    kiln_engine_free(e);
    kiln_load_options good = {.verify_key = pk}, other = {.verify_key = pk2};

    ASSERT_OK(kiln_engine_load_memory_ex(sb, sn, &good, &l));
    ASSERT_EQ(l->signature, 2);
    ASSERT_OK(run_net(l));
    kiln_engine_free(l);
    /* Without a key a signed engine loads as any other. */
    ASSERT_OK(kiln_engine_load_memory_ex(sb, sn, NULL, &l));
    ASSERT_EQ(l->signature, 1);
    kiln_engine_free(l);

    ASSERT_EQ(kiln_engine_load_memory_ex(sb, sn, &other, &l), KILN_ETRUST);
    ASSERT_CONTAINS(kiln_errmsg(), "engine is signed by another key");
    ASSERT_EQ(kiln_engine_load_memory_ex(ub, un, &good, &l), KILN_ETRUST);
    ASSERT_CONTAINS(kiln_errmsg(), "engine is not signed, and a signature was required");

    /* Every bit position: flip it, recompute the checksums; verification
     * (or parsing) must fail. */
    uint8_t *c = malloc(sn);
    int trust = 0;
    for (size_t i = 0; i < sn; i++) {
        memcpy(c, sb, sn);
        c[i] ^= (uint8_t)(1u << (i % 8));
        kiln__file_reseal(c, sn);
        if (!memcmp(c, sb, sn)) continue; /* a checksum byte: recomputing undid the flip */
        int rc = kiln_engine_load_memory_ex(c, sn, &good, &l);
        if (rc == 0) TEST__FAIL("flipping bit %zu of byte %zu: the signed engine still verifies", i % 8, i);
        trust += rc == KILN_ETRUST;
    }
    /* Most flips stop at the signature, not at a structural check. */
    ASSERT(trust > (int)sn / 2);
    free(c);
    kiln_free(sb);
    kiln_free(ub);
}

/* ------------------------------------------------------------ code policy */

static kiln_engine *build_aot(void) {
    static int loaded;
    if (!loaded) {
        ASSERT_OK(kiln_registry_load_library(KILN_SAMPLES_LIB));
        loaded = 1;
    }
    kiln_network *net = NULL;
    ASSERT_OK(kiln_onnx_import(KILN_SOURCE_DIR "/tests/fixtures/circ_pad_aot1.onnx", NULL, &net));
    kiln_engine *e = test_build_ok(net, KILN_BUILD_NO_TIMING | KILN_BUILD_PREFER_AOT, 1, NULL);
    kiln_network_free(net);
    ASSERT(e->naot > 0);
    return e;
}

TEST_IMPL(code_policy) {
    kiln_engine *e = build_aot(), *l = NULL;
    ASSERT_EQ(kiln_engine_has_code(e), 1);
    void *b = NULL, *fb = NULL;
    size_t n = 0, fn = 0;
    ASSERT_OK(kiln_engine_serialize(e, &b, &n));
    /* The same engine as if built on another machine. */
    uint64_t here = e->host_id ? e->host_id : kiln__host_id();
    e->host_id = here ^ 0x5a5a5a5a5a5a5a5aull;
    ASSERT_OK(kiln_engine_serialize(e, &fb, &fn));
    kiln_load_options deny = {.code = KILN_CODE_DENY}, allow = {.code = KILN_CODE_ALLOW};

    ASSERT_OK(kiln_engine_load_memory_ex(b, n, NULL, &l)); /* local: built here */
    kiln_engine_free(l);
    ASSERT_EQ(kiln_engine_load_memory_ex(b, n, &deny, &l), KILN_ETRUST);
    ASSERT_CONTAINS(kiln_errmsg(), "engine carries native code (1 AOT kernel and 0 embedded plugin "
                                   "libraries) and code is not allowed (KILN_CODE_DENY)");
    ASSERT_EQ(kiln_engine_load_memory_ex(fb, fn, NULL, &l), KILN_ETRUST);
    ASSERT_CONTAINS(kiln_errmsg(), "was built on another machine");
    ASSERT_OK(kiln_engine_load_memory_ex(fb, fn, &allow, &l));
    kiln_engine_free(l);

    /* A signature verified by the caller's key is the explicit choice. */
    if (kiln_sign_available()) {
        unsigned char pk[32], sk[64];
        ASSERT_OK(kiln_sign_keypair(pk, sk));
        void *sb = NULL;
        size_t sn = 0;
        ASSERT_OK(kiln_engine_serialize_signed(e, sk, &sb, &sn));
        kiln_load_options v = {.code = KILN_CODE_DENY, .verify_key = pk};
        ASSERT_OK(kiln_engine_load_memory_ex(sb, sn, &v, &l));
        kiln_engine_free(l);
        kiln_free(sb);
    }
    /* A policy outside the enum is the caller's error, from memory and from a file. */
    kiln_load_options bad = {.code = (kiln_code_policy)3};
    l = (kiln_engine *)&bad; /* poisoned: must come back NULL */
    ASSERT_EQ(kiln_engine_load_memory_ex(b, n, &bad, &l), KILN_EINVAL);
    ASSERT_EQ(l == NULL, 1);
    ASSERT_CONTAINS(kiln_errmsg(), "kiln_load_options.code is 3; expected KILN_CODE_LOCAL (0)");
    bad.code = (kiln_code_policy)-1;
    ASSERT_EQ(kiln_engine_load_ex("/nonexistent/engine.kiln", &bad, &l), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "kiln_load_options.code is -1");
    /* Engines without code load under DENY. */
    kiln_engine *d = build_net();
    ASSERT_OK(reload(d, &deny, &l));
    kiln_engine_free(l);
    kiln_engine_free(e);
    kiln_free(b);
    kiln_free(fb);
}

TEST_LIST(TEST_ENTRY(intact_engine_runs), TEST_ENTRY(crafted_inner_dim), TEST_ENTRY(crafted_output_dims),
          TEST_ENTRY(crafted_constant_dims), TEST_ENTRY(crafted_constant_misaligned), TEST_ENTRY(crafted_lifetime), TEST_ENTRY(crafted_read_before_write),
          TEST_ENTRY(crafted_dtype), TEST_ENTRY(crafted_tactic), TEST_ENTRY(crafted_winograd_tactic), TEST_ENTRY(crafted_combination),
          TEST_ENTRY(crafted_input_type), TEST_ENTRY(refused_input_dims_named), TEST_ENTRY(crafted_upper_bound), TEST_ENTRY(sign_and_verify), TEST_ENTRY(code_policy))
