/*
 * test_runtime.c — running engines: results against naive references,
 * dynamic shapes and profiles, in-place layers, data-dependent shapes,
 * debug mode, profiling, binding errors, concurrent contexts.
 *
 * The ops are defined here (namespace "test") so the test depends on
 * nothing but libkiln.
 */
#include "kiln_int.h"
#include "test.h"
#include "test_ops_util.h"

#include <pthread.h>

/* ------------------------------------------------------------ test ops */


/* y[i, j] = x[i, j] * alpha + w[j]   (x: [N, C] f32, w: [C] f32) */
static int affine_impl(const kiln_call *c) {
    const float *x = c->in[0].data, *w = c->in[1].data;
    float *y = c->out[0].data;
    float alpha = (float)kiln_attrs_float(c->attrs, "alpha");
    int64_t n = c->in[0].dims[0], ch = c->in[0].dims[1];
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < ch; j++) y[i * ch + j] = x[i * ch + j] * alpha + w[j];
    return 0;
}
static const kiln_attr_def affine_attrs[] = {{"alpha", KILN_ATTR_FLOAT, 0, "1.0", 0, "scale"},
                                             {NULL, 0, 0, NULL, 0, NULL}};
static const kiln_quick_op affine_op = {
    .ns = "test", .name = "affine", .version = 1, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .attrs = affine_attrs, .shape = same_shape, .impl = affine_impl};
KILN_OP(affine_op)

static void *g_relu_out;
static int relu_impl(const kiln_call *c) {
    g_relu_out = c->out[0].data;
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    for (int64_t i = 0, n = kiln_tensor_numel(&c->out[0]); i < n; i++) y[i] = x[i] > 0 ? x[i] : 0;
    return 0;
}
static const kiln_quick_op relu_op = {.ns = "test", .name = "relu", .version = 1,
                                      .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
                                      .shape = same_shape, .impl = relu_impl};
KILN_OP(relu_op)

/* In place: y = x + 1, y shares x's buffer.  Records the pointers. */
static void *g_inc_in, *g_inc_out;
static int inc_shape(kiln_shape_ctx *c) {
    same_shape(c);
    return kiln_shape_alias(c, 0, 0);
}
static int inc_impl(const kiln_call *c) {
    g_inc_in = c->in[0].data;
    g_inc_out = c->out[0].data;
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    for (int64_t i = 0, n = kiln_tensor_numel(&c->out[0]); i < n; i++) y[i] = x[i] + 1.0f;
    return 0;
}
static const kiln_quick_op inc_op = {.ns = "test", .name = "inc_inplace", .version = 1,
                                     .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
                                     .shape = inc_shape, .impl = inc_impl};
KILN_OP(inc_op)

/* Data-dependent: x f32 [N] -> idx i64 [K] (positions of x > 0), K size tensor.
 * `lie` > 0 makes it report K = N + lie (beyond the upper bound). */
static int pos_shape(kiln_shape_ctx *c) {
    const kiln_expr *n = c->in[0].dims[0];
    c->out[1].dtype = KILN_DTYPE_I64;
    c->out[1].ndim = 0;
    const kiln_expr *k =
        kiln_shape_size_tensor(c, 1, kiln_expr_floordiv(c->x, n, kiln_expr_const(c->x, 2)), n);
    if (!k) return KILN_EINVAL;
    c->out[0].dtype = KILN_DTYPE_I64;
    c->out[0].ndim = 1;
    c->out[0].dims[0] = k;
    return 0;
}
static int pos_impl(const kiln_call *c) {
    const float *x = c->in[0].data;
    int64_t *idx = c->out[0].data, k = 0;
    for (int64_t i = 0; i < c->in[0].dims[0]; i++)
        if (x[i] > 0) idx[k++] = i;
    int64_t lie = kiln_attrs_int(c->attrs, "lie");
    *(int64_t *)c->out[1].data = lie ? c->in[0].dims[0] + lie : k;
    return 0;
}
static const kiln_attr_def pos_attrs[] = {{"lie", KILN_ATTR_INT, 0, "0", 0, "test only"},
                                          {NULL, 0, 0, NULL, 0, NULL}};
static const kiln_quick_op pos_op = {.ns = "test", .name = "positive", .version = 1,
                                     .min_inputs = 1, .max_inputs = 1, .num_outputs = 2,
                                     .attrs = pos_attrs, .shape = pos_shape, .impl = pos_impl};
KILN_OP(pos_op)

/* i64 [K] -> i64 [K], y = 3 * x + 1 (runs after a data-dependent layer). */
static int lin_impl(const kiln_call *c) {
    const int64_t *x = c->in[0].data;
    int64_t *y = c->out[0].data;
    for (int64_t i = 0, n = kiln_tensor_numel(&c->out[0]); i < n; i++) y[i] = 3 * x[i] + 1;
    return 0;
}
static const kiln_quick_op lin_op = {.ns = "test", .name = "lin_i64", .version = 1,
                                     .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
                                     .shape = same_shape, .impl = lin_impl};
KILN_OP(lin_op)

/* Buggy kernels for debug mode: `skip` leaves element skip unwritten;
 * `overrun` writes one element past the end. */
static int buggy_impl(const kiln_call *c) {
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    int64_t n = kiln_tensor_numel(&c->out[0]);
    int64_t skip = kiln_attrs_int(c->attrs, "skip"), over = kiln_attrs_int(c->attrs, "overrun");
    if (over < 0) return kiln_set_error(KILN_EKERNEL, "refusing to run (overrun %lld)", (long long)over);
    for (int64_t i = 0; i < n + over; i++)
        if (i != skip) y[i] = i < n ? x[i] * 2.0f : 0.0f;
    return 0;
}
static const kiln_attr_def buggy_attrs[] = {{"skip", KILN_ATTR_INT, 0, "-1", 0, NULL},
                                            {"overrun", KILN_ATTR_INT, 0, "0", 0, NULL},
                                            {NULL, 0, 0, NULL, 0, NULL}};
static const kiln_quick_op buggy_op = {.ns = "test", .name = "buggy", .version = 1,
                                       .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
                                       .attrs = buggy_attrs, .shape = same_shape,
                                       .impl = buggy_impl};
KILN_OP(buggy_op)

/* shape i64 [2] -> y f32 [shape[0], shape[1]], y[i] = i * 0.5 (dims from input values) */
static int ramp_shape(kiln_shape_ctx *c) {
    if (c->in[0].nvalues != 2) return kiln_set_error(KILN_ESHAPE, "ramp: shape values unknown");
    c->out[0].dtype = KILN_DTYPE_F32;
    c->out[0].ndim = 2;
    c->out[0].dims[0] = c->in[0].values[0];
    c->out[0].dims[1] = c->in[0].values[1];
    return 0;
}
static int ramp_impl(const kiln_call *c) {
    float *y = c->out[0].data;
    for (int64_t i = 0, n = kiln_tensor_numel(&c->out[0]); i < n; i++) y[i] = (float)i * 0.5f;
    return 0;
}
static const kiln_quick_op ramp_op = {.ns = "test", .name = "ramp", .version = 1,
                                      .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
                                      .shape = ramp_shape, .impl = ramp_impl};
KILN_OP(ramp_op)

/* Running sum along the last dim through a workspace: x f32 [R, C] -> y. */
static size_t g_ws_seen;
static size_t cumsum_ws(const kiln_call *c) { return (size_t)c->in[0].dims[1] * sizeof(double); }
static int cumsum_impl(const kiln_call *c) {
    int64_t r = c->in[0].dims[0], n = c->in[0].dims[1];
    if (!c->workspace || (uintptr_t)c->workspace % 64 || c->workspace_size < (size_t)n * 8)
        return kiln_set_error(KILN_EINVAL, "cumsum: bad workspace %p (%zu bytes)", c->workspace,
                              c->workspace_size);
    g_ws_seen = c->workspace_size;
    double *acc = c->workspace;
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    for (int64_t i = 0; i < r; i++) {
        double s = 0;
        for (int64_t j = 0; j < n; j++) acc[j] = s += x[i * n + j];
        for (int64_t j = 0; j < n; j++) y[i * n + j] = (float)acc[j];
    }
    return 0;
}
static const kiln_quick_op cumsum_op = {.ns = "test", .name = "cumsum", .version = 1,
                                        .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
                                        .shape = same_shape, .impl = cumsum_impl,
                                        .workspace = cumsum_ws};
KILN_OP(cumsum_op)

/* A full plugin: y = x + bias.  The instance state (bias) goes through the
 * engine blob; each context gets its own state from attach_to_context,
 * which counts its runs and remembers the last shape it was told about. */
typedef struct off_state {
    float bias;
    int is_ctx, runs;
    int64_t last_n;
} off_state;
static int g_attached, g_detached;
static off_state *g_ctx_states[16];
static int off_create(const kiln_attrs *a, void **st) {
    off_state *s = calloc(1, sizeof *s);
    if (!s) return KILN_ENOMEM;
    s->bias = (float)kiln_attrs_float(a, "bias");
    *st = s;
    return 0;
}
static int off_clone(const void *st, void **out) {
    off_state *s = malloc(sizeof *s);
    if (!s) return KILN_ENOMEM;
    *s = *(const off_state *)st;
    *out = s;
    return 0;
}
static void off_destroy(void *st) { free(st); }
static int off_shape(void *st, kiln_shape_ctx *c) {
    (void)st;
    return same_shape(c);
}
static int off_on_shape(void *st, const kiln_tensor *in, int nin, const kiln_tensor *out, int nout) {
    (void)nin, (void)out, (void)nout;
    ((off_state *)st)->last_n = kiln_tensor_numel(&in[0]);
    return 0;
}
static int off_enqueue(void *st, const kiln_call *c) {
    off_state *s = st;
    if (!s->is_ctx || c->state != st) return kiln_set_error(KILN_EINTERNAL, "not the context state");
    if (s->last_n != kiln_tensor_numel(&c->in[0])) return kiln_set_error(KILN_EINTERNAL, "stale shape");
    s->runs++;
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    for (int64_t i = 0, n = kiln_tensor_numel(&c->out[0]); i < n; i++) y[i] = x[i] + s->bias;
    return 0;
}
static int off_serialize(const void *st, void *buf, size_t *size) {
    if (buf && *size >= 4) memcpy(buf, &((const off_state *)st)->bias, 4);
    *size = 4;
    return 0;
}
static int off_deserialize(const void *buf, size_t size, void **st) {
    if (size != 4) return kiln_set_error(KILN_EFORMAT, "offset: state of %zu bytes", size);
    off_state *s = calloc(1, sizeof *s);
    if (!s) return KILN_ENOMEM;
    memcpy(&s->bias, buf, 4);
    *st = s;
    return 0;
}
static int off_attach(void *st, void **cs) {
    off_state *s = calloc(1, sizeof *s);
    if (!s) return KILN_ENOMEM;
    s->bias = ((off_state *)st)->bias;
    s->is_ctx = 1;
    *cs = s;
    int k = __atomic_fetch_add(&g_attached, 1, __ATOMIC_SEQ_CST);
    if (k < 16) g_ctx_states[k] = s;
    return 0;
}
static void off_detach(void *st, void *cs) {
    (void)st;
    free(cs);
    __atomic_add_fetch(&g_detached, 1, __ATOMIC_SEQ_CST);
}
static const kiln_plugin_vtable off_vt = {
    .version = KILN_PLUGIN_VTABLE_VERSION, .create = off_create, .clone = off_clone,
    .destroy = off_destroy, .shape = off_shape, .on_shape_change = off_on_shape,
    .enqueue = off_enqueue, .serialize = off_serialize, .deserialize = off_deserialize,
    .attach_to_context = off_attach, .detach_from_context = off_detach};
static const kiln_attr_def off_attrs[] = {{"bias", KILN_ATTR_FLOAT, 0, "0", 0, NULL},
                                          {NULL, 0, 0, NULL, 0, NULL}};
static const kiln_plugin_def off_def = {.ns = "test", .name = "offset", .version = 3,
                                        .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
                                        .attrs = off_attrs, .vt = &off_vt};
KILN_PLUGIN(off_def)

/* ------------------------------------------------------------ networks */

#define C 8
static float g_w[C];

/* x [N, 8] (N dynamic, profile 1..64 opt 16) -> affine(alpha 0.75, w) ->
 * relu -> inc_inplace -> y */
static kiln_engine *build_chain(void) {
    kiln_network *net = kiln_network_create();
    ASSERT(net);
    int64_t dims[2] = {-1, C};
    const char *names[2] = {"N", NULL};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, dims, names));
    uint64_t s = 7;
    for (int j = 0; j < C; j++) g_w[j] = test_randf(&s, -1, 1);
    int64_t wd[1] = {C};
    ASSERT_OK(kiln_network_add_constant(net, "w", KILN_DTYPE_F32, 1, wd, g_w));
    const char *in1[] = {"x", "w"}, *o1[] = {"a"};
    kiln_layer *l = kiln_network_add_layer(net, "test::affine", 1, "affine1", 2, in1, 1, o1);
    ASSERT(l);
    ASSERT_OK(kiln_layer_set_float(l, "alpha", 0.75));
    const char *in2[] = {"a"}, *o2[] = {"r"};
    ASSERT(kiln_network_add_layer(net, "test::relu", 1, "relu1", 1, in2, 1, o2));
    const char *in3[] = {"r"}, *o3[] = {"y"};
    ASSERT(kiln_network_add_layer(net, "test::inc_inplace", 1, "inc1", 1, in3, 1, o3));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    int64_t mn[2] = {1, C}, op[2] = {16, C}, mx[2] = {64, C};
    kiln_engine *e = test_build_profiled(net, KILN_BUILD_NO_TIMING, 2, "x", 2, mn, op, mx);
    return e;
}

static void chain_ref(const float *x, int64_t n, float *y) {
    for (int64_t i = 0; i < n; i++)
        for (int j = 0; j < C; j++) {
            float a = x[i * C + j] * 0.75f + g_w[j];
            y[i * C + j] = (a > 0 ? a : 0) + 1.0f;
        }
}

static void fill(float *x, int64_t n, uint64_t *s) {
    for (int64_t i = 0; i < n; i++) x[i] = test_randf(s, -2, 2);
}

static void poison(void *p, size_t n) { memset(p, 0xCD, n); }

/* A context (1 thread) on a fresh build_chain() engine (in *e).  With x:
 * input "x" set to n rows and bound to x, filled with fresh random values. */
static kiln_context *chain_context(kiln_engine **e, int64_t n, float *x, uint64_t seed) {
    *e = build_chain();
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(*e, 1, &ctx));
    if (!x) return ctx;
    int64_t d[2] = {n, C};
    fill(x, n * C, &seed);
    ASSERT_OK(kiln_context_set_input_shape(ctx, "x", 2, d));
    ASSERT_OK(kiln_context_bind(ctx, "x", x, (size_t)(n * C) * sizeof(float)));
    return ctx;
}

/* ------------------------------------------------------------ tests */

TEST_IMPL(chain_dynamic_shapes) {
    kiln_engine *e = build_chain();
    ASSERT_EQ(kiln_engine_num_inputs(e), 1);
    ASSERT_EQ(kiln_engine_num_outputs(e), 1);
    kiln_io_info io;
    ASSERT_OK(kiln_engine_io(e, 0, &io));
    ASSERT_STR_EQ(io.name, "x");
    ASSERT_EQ(io.dims[0], -1);
    ASSERT_EQ(io.dims[1], C);
    ASSERT_EQ(io.min[0], 1);
    ASSERT_EQ(io.opt[0], 16);
    ASSERT_EQ(io.max[0], 64);
    ASSERT_OK(kiln_engine_io(e, 1, &io));
    ASSERT_STR_EQ(io.name, "y");
    ASSERT_EQ(io.is_input, 0);
    ASSERT_EQ(io.data_dependent, 0);
    ASSERT_EQ(kiln_engine_io(e, 2, &io), KILN_EINVAL);

    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, 2, &ctx));
    uint64_t s = 42;
    const int64_t ns[] = {16, 3, 64, 1, 17, 16};
    float x[64 * C], y[64 * C], ref[64 * C];
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        int64_t n = ns[k], d[2] = {n, C};
        ASSERT_OK(kiln_context_set_input_shape(ctx, "x", 2, d));
        fill(x, n * C, &s);
        poison(y, sizeof y);
        ASSERT_OK(kiln_context_bind(ctx, "x", x, (size_t)n * C * 4));
        ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
        for (int rep = 0; rep < 2; rep++) {
            poison(y, sizeof y);
            if (rep == 0) {
                ASSERT_OK(kiln_context_run(ctx));
            } else { /* a CPU engine enqueued (no stream) runs the same */
                ASSERT_OK(kiln_context_enqueue(ctx, NULL));
                ASSERT_OK(kiln_context_synchronize(ctx));
            }
            chain_ref(x, n, ref);
            ASSERT(memcmp(y, ref, (size_t)n * C * 4) == 0);
            int nd;
            int64_t od[KILN_MAX_DIMS];
            ASSERT_OK(kiln_context_shape(ctx, "y", &nd, od));
            ASSERT_EQ(nd, 2);
            ASSERT_EQ(od[0], n);
            ASSERT_EQ(od[1], C);
            fill(x, n * C, &s); /* new data, same shape: steady-state path */
        }
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

TEST_IMPL(context_owned_output) {
    kiln_engine *e;
    float x[5 * C], ref[5 * C];
    kiln_context *ctx = chain_context(&e, 5, x, 3);
    size_t cap = 0;
    ASSERT_OK(kiln_context_output_capacity(ctx, "y", &cap));
    ASSERT_EQ(cap, 5 * C * 4);
    ASSERT_OK(kiln_context_run(ctx));
    const float *y = kiln_context_output(ctx, "y");
    ASSERT(y);
    chain_ref(x, 5, ref);
    ASSERT(memcmp(y, ref, sizeof ref) == 0);
    ASSERT(kiln_context_output(ctx, "nope") == NULL);
    ASSERT_CONTAINS(kiln_errmsg(), "'nope'");
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

TEST_IMPL(binding_errors) {
    kiln_engine *e;
    kiln_context *ctx = chain_context(&e, 0, NULL, 0);
    int64_t d[2] = {4, C};
    ASSERT_OK(kiln_context_set_input_shape(ctx, "x", 2, d));
    ASSERT_EQ(kiln_context_run(ctx), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "input 'x'");
    float x[4 * C], y[4];
    uint64_t s = 9;
    fill(x, 4 * C, &s);
    ASSERT_OK(kiln_context_bind(ctx, "x", x, 10));
    ASSERT_EQ(kiln_context_run(ctx), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "input 'x' needs 128 bytes, buffer has 10");
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    ASSERT_EQ(kiln_context_run(ctx), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "output 'y' needs 128 bytes, buffer has 16");
    ASSERT_EQ(kiln_context_bind(ctx, "zz", y, 4), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "no input or output named 'zz'");
    int64_t bad[2] = {4, 9};
    ASSERT_EQ(kiln_context_set_input_shape(ctx, "x", 2, bad), KILN_ESHAPE);
    ASSERT_EQ(kiln_context_set_input_shape(ctx, "x", 1, bad), KILN_ESHAPE);
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

TEST_IMPL(profile_violation) {
    kiln_engine *e;
    kiln_context *ctx = chain_context(&e, 0, NULL, 0);
    int64_t d[2] = {65, C};
    ASSERT_EQ(kiln_context_set_input_shape(ctx, "x", 2, d), KILN_EPROFILE);
    ASSERT_CONTAINS(kiln_errmsg(), "input 'x' dim 0 = 65 outside profile [1, 64]");
    d[0] = 0;
    ASSERT_EQ(kiln_context_set_input_shape(ctx, "x", 2, d), KILN_EPROFILE);
    ASSERT_CONTAINS(kiln_errmsg(), "dim 0 = 0 outside profile [1, 64]");
    /* A dynamic input whose shape was never given. */
    float x[16 * C];
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_EQ(kiln_context_run(ctx), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "kiln_context_set_input_shape");
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

TEST_IMPL(inplace_really_in_place) {
    kiln_engine *e;
    float x[8 * C], y[8 * C], ref[8 * C];
    kiln_context *ctx = chain_context(&e, 8, x, 11);
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    g_inc_in = g_inc_out = NULL;
    ASSERT_OK(kiln_context_run(ctx));
    /* The in-place layer read and wrote the same buffer: the one relu wrote
     * its output to.  (The builder may copy the result into the output.) */
    ASSERT(g_inc_in != NULL);
    ASSERT(g_inc_in == g_inc_out);
    ASSERT(g_relu_out == g_inc_in);
    /* relu's output buffer now holds relu + 1: it was modified in place */
    {
        float r[8 * C];
        chain_ref(x, 8, r);
        ASSERT(memcmp(g_inc_out, r, sizeof r) == 0);
    }
    chain_ref(x, 8, ref);
    ASSERT(memcmp(y, ref, sizeof ref) == 0);
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

/* x [N] -> positive -> (idx [K], k) -> lin_i64 -> z [K] */
static kiln_engine *build_dds(int lie) {
    kiln_network *net = kiln_network_create();
    int64_t dims[1] = {-1};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 1, dims, NULL));
    const char *in1[] = {"x"}, *o1[] = {"idx", "k"};
    kiln_layer *l = kiln_network_add_layer(net, "test::positive", 1, "pos1", 1, in1, 2, o1);
    ASSERT(l);
    if (lie) ASSERT_OK(kiln_layer_set_int(l, "lie", lie));
    const char *in2[] = {"idx"}, *o2[] = {"z"};
    ASSERT(kiln_network_add_layer(net, "test::lin_i64", 1, "lin1", 1, in2, 1, o2));
    ASSERT_OK(kiln_network_mark_output(net, "z"));
    ASSERT_OK(kiln_network_mark_output(net, "k"));
    int64_t mn[1] = {1}, op[1] = {32}, mx[1] = {100};
    kiln_engine *e = test_build_profiled(net, KILN_BUILD_NO_TIMING, 0, "x", 1, mn, op, mx);
    return e;
}

TEST_IMPL(data_dependent_shape) {
    kiln_engine *e = build_dds(0);
    kiln_io_info io;
    int zi = -1;
    for (int i = 0; i < 2; i++) {
        ASSERT_OK(kiln_engine_io(e, 1 + i, &io));
        if (!strcmp(io.name, "z")) zi = 1 + i;
    }
    ASSERT(zi > 0);
    ASSERT_OK(kiln_engine_io(e, zi, &io));
    ASSERT_EQ(io.data_dependent, 1);
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    uint64_t s = 5;
    for (int64_t n = 1; n <= 100; n += 33) {
        float x[100];
        int64_t z[100], k = -7, ref[100], nref = 0;
        fill(x, n, &s);
        if (n > 3) x[2] = 0; /* not positive */
        for (int64_t i = 0; i < n; i++)
            if (x[i] > 0) ref[nref++] = 3 * i + 1;
        ASSERT_OK(kiln_context_set_input_shape(ctx, "x", 1, &n));
        size_t cap = 0;
        ASSERT_OK(kiln_context_output_capacity(ctx, "z", &cap));
        ASSERT_EQ(cap, (size_t)n * 8); /* the upper bound */
        int nd;
        int64_t d[KILN_MAX_DIMS];
        ASSERT_OK(kiln_context_shape(ctx, "z", &nd, d));
        ASSERT_EQ(d[0], -1); /* unknown before a run */
        memset(z, 0xCD, sizeof z);
        ASSERT_OK(kiln_context_bind(ctx, "x", x, (size_t)n * 4));
        ASSERT_OK(kiln_context_bind(ctx, "z", z, cap));
        ASSERT_OK(kiln_context_bind(ctx, "k", &k, 8));
        ASSERT_OK(kiln_context_run(ctx));
        ASSERT_EQ(k, nref);
        ASSERT_OK(kiln_context_shape(ctx, "z", &nd, d));
        ASSERT_EQ(nd, 1);
        ASSERT_EQ(d[0], nref);
        for (int64_t i = 0; i < nref; i++) ASSERT_EQ(z[i], ref[i]);
        /* again, with debug mode: every element of the actual shape written */
        kiln_context_set_debug(ctx, 1);
        ASSERT_OK(kiln_context_run(ctx));
        for (int64_t i = 0; i < nref; i++) ASSERT_EQ(z[i], ref[i]);
        kiln_context_set_debug(ctx, 0);
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);

    /* A kernel that reports more than the upper bound. */
    e = build_dds(5);
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    int64_t n = 10;
    float x[10];
    fill(x, n, &s);
    ASSERT_OK(kiln_context_set_input_shape(ctx, "x", 1, &n));
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_EQ(kiln_context_run(ctx), KILN_EKERNEL);
    ASSERT_CONTAINS(kiln_errmsg(), "layer 'pos1' (test::positive v1)");
    ASSERT_CONTAINS(kiln_errmsg(), "= 15, outside [0, 10]");
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

static kiln_engine *build_buggy(int64_t skip, int64_t overrun) {
    kiln_network *net = kiln_network_create();
    int64_t dims[3] = {2, 3, 4};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 3, dims, NULL));
    const char *in1[] = {"x"}, *o1[] = {"y"};
    kiln_layer *l = kiln_network_add_layer(net, "test::buggy", 1, "bug1", 1, in1, 1, o1);
    ASSERT(l);
    ASSERT_OK(kiln_layer_set_int(l, "skip", skip));
    ASSERT_OK(kiln_layer_set_int(l, "overrun", overrun));
    const char *in2[] = {"y"}, *o2[] = {"z"};
    ASSERT(kiln_network_add_layer(net, "test::relu", 1, "relu1", 1, in2, 1, o2));
    ASSERT_OK(kiln_network_mark_output(net, "z"));
    kiln_engine *e = test_build_profiled(net, KILN_BUILD_NO_TIMING, 0, NULL, 0, NULL, NULL, NULL);
    return e;
}

static int run_buggy(int64_t skip, int64_t overrun, int debug) {
    kiln_engine *e = build_buggy(skip, overrun);
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    kiln_context_set_debug(ctx, debug);
    float x[24], z[24];
    uint64_t s = 77;
    fill(x, 24, &s);
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "z", z, sizeof z));
    int rc = kiln_context_run(ctx);
    kiln_context_free(ctx);
    kiln_engine_free(e);
    return rc;
}

TEST_IMPL(debug_mode) {
    /* correct kernel: debug mode passes */
    ASSERT_OK(run_buggy(-1, 0, 1));
    /* element 17 of [2,3,4] = index [1,1,1] left unwritten */
    ASSERT_EQ(run_buggy(17, 0, 1), KILN_EDEBUG);
    ASSERT_CONTAINS(kiln_errmsg(), "layer 'bug1' (test::buggy v1) output 'y' element 17 "
                                   "(index [1,1,1]) was not written");
    ASSERT_EQ(run_buggy(-1, 1, 1), KILN_EDEBUG);
    ASSERT_CONTAINS(kiln_errmsg(), "layer 'bug1' (test::buggy v1) wrote past the end of output 'y'");
    /* without debug mode the unwritten element goes unnoticed */
    ASSERT_OK(run_buggy(17, 0, 0));
    /* a kernel's own error, prefixed with the layer */
    ASSERT_EQ(run_buggy(-1, -1, 0), KILN_EKERNEL);
    ASSERT_CONTAINS(kiln_errmsg(), "layer 'bug1' (test::buggy v1): refusing to run (overrun -1)");
}

TEST_IMPL(profiling) {
    kiln_engine *e;
    float x[64 * C], y[64 * C];
    kiln_context *ctx = chain_context(&e, 64, x, 1);
    kiln_context_set_profiling(ctx, 1);
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    ASSERT_OK(kiln_context_run(ctx));
    int seen = 0;
    for (int l = 0; l < e->nlayers; l++) {
        const char *name = NULL;
        double ms = -1;
        ASSERT_OK(kiln_context_profile(ctx, l, &name, &ms));
        ASSERT(name != NULL);
        ASSERT(ms >= 0);
        if (!strcmp(name, "affine1") || !strcmp(name, "relu1") || !strcmp(name, "inc1")) seen++;
    }
    ASSERT_EQ(seen, 3);
    ASSERT_EQ(kiln_context_profile(ctx, e->nlayers, NULL, NULL), KILN_EINVAL);
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

/* ------------------------------------------------------------ concurrency */

typedef struct worker {
    const kiln_engine *e;
    uint64_t seed;
    int failures, runs;
} worker;

static void *worker_main(void *arg) {
    worker *w = arg;
    kiln_context *ctx;
    if (kiln_context_create(w->e, 1, &ctx)) {
        w->failures++;
        return NULL;
    }
    float x[64 * C], y[64 * C], ref[64 * C];
    for (int it = 0; it < 60; it++) {
        int64_t n = 1 + (int64_t)(test_rand_u64(&w->seed) % 64), d[2] = {n, C};
        fill(x, n * C, &w->seed);
        poison(y, sizeof y);
        if (kiln_context_set_input_shape(ctx, "x", 2, d) ||
            kiln_context_bind(ctx, "x", x, (size_t)n * C * 4) ||
            kiln_context_bind(ctx, "y", y, sizeof y) || kiln_context_run(ctx)) {
            w->failures++;
            continue;
        }
        chain_ref(x, n, ref);
        if (memcmp(y, ref, (size_t)n * C * 4)) w->failures++;
        w->runs++;
    }
    kiln_context_free(ctx);
    return NULL;
}

TEST_IMPL(concurrent_contexts) {
    kiln_engine *e = build_chain();
    pthread_t th[4];
    worker w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker){e, 1000 + (uint64_t)i * 77, 0, 0};
        ASSERT_EQ(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ASSERT_EQ(w[i].failures, 0);
        ASSERT_EQ(w[i].runs, 60);
    }
    kiln_engine_free(e);
}

/* Output dims given by the values of an integer input (value symbols). */
TEST_IMPL(value_symbols) {
    kiln_network *net = kiln_network_create();
    int64_t dims[1] = {2};
    ASSERT_OK(kiln_network_add_input(net, "shape", KILN_DTYPE_I64, 1, dims, NULL));
    const char *in[] = {"shape"}, *out[] = {"y"};
    ASSERT(kiln_network_add_layer(net, "test::ramp", 1, "ramp1", 1, in, 1, out));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_engine *e = test_build_profiled(net, KILN_BUILD_NO_TIMING, 0, NULL, 0, NULL, NULL, NULL);
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    const int64_t cases[][2] = {{3, 5}, {2, 7}, {1, 1}, {4, 4}};
    for (int k = 0; k < 4; k++) {
        int64_t shape[2] = {cases[k][0], cases[k][1]};
        ASSERT_OK(kiln_context_bind(ctx, "shape", shape, sizeof shape));
        ASSERT_OK(kiln_context_run(ctx));
        int nd;
        int64_t d[KILN_MAX_DIMS];
        ASSERT_OK(kiln_context_shape(ctx, "y", &nd, d));
        ASSERT_EQ(nd, 2);
        ASSERT_EQ(d[0], shape[0]);
        ASSERT_EQ(d[1], shape[1]);
        const float *y = kiln_context_output(ctx, "y");
        for (int64_t i = 0; i < shape[0] * shape[1]; i++) ASSERT(y[i] == (float)i * 0.5f);
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

TEST_IMPL(workspace) {
    kiln_network *net = kiln_network_create();
    int64_t dims[2] = {3, -1};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, dims, NULL));
    const char *in[] = {"x"}, *out[] = {"y"};
    ASSERT(kiln_network_add_layer(net, "test::cumsum", 1, "cs", 1, in, 1, out));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    int64_t mn[2] = {3, 1}, op[2] = {3, 10}, mx[2] = {3, 300};
    kiln_engine *e = test_build_profiled(net, KILN_BUILD_NO_TIMING, 0, "x", 2, mn, op, mx);
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    uint64_t s = 4;
    static float x[3 * 300], y[3 * 300];
    for (int64_t n = 5; n <= 300; n += 98) {
        int64_t d[2] = {3, n};
        fill(x, 3 * n, &s);
        ASSERT_OK(kiln_context_set_input_shape(ctx, "x", 2, d));
        ASSERT_OK(kiln_context_bind(ctx, "x", x, (size_t)(3 * n) * 4));
        ASSERT_OK(kiln_context_bind(ctx, "y", y, (size_t)(3 * n) * 4));
        ASSERT_OK(kiln_context_run(ctx));
        ASSERT(g_ws_seen >= (size_t)n * 8);
        for (int64_t i = 0; i < 3; i++) {
            double acc = 0;
            for (int64_t j = 0; j < n; j++) {
                acc += x[i * n + j];
                ASSERT(y[i * n + j] == (float)acc);
            }
        }
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

TEST_IMPL(full_plugin_contexts) {
    kiln_network *net = kiln_network_create();
    int64_t dims[1] = {-1};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 1, dims, NULL));
    const char *in[] = {"x"}, *out[] = {"y"};
    kiln_layer *l = kiln_network_add_layer(net, "test::offset", 3, "off1", 1, in, 1, out);
    ASSERT(l);
    ASSERT_OK(kiln_layer_set_float(l, "bias", 2.5));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    int64_t mn[1] = {1}, op[1] = {8}, mx[1] = {64};
    kiln_engine *built = test_build_profiled(net, KILN_BUILD_NO_TIMING, 0, "x", 1, mn, op, mx);
    /* through the file format: the plugin state is deserialized */
    void *buf;
    size_t size;
    ASSERT_OK(kiln_engine_serialize(built, &buf, &size));
    kiln_engine_free(built);
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_engine_load_memory(buf, size, &e));
    kiln_free(buf);
    int a0 = g_attached, d0 = g_detached;
    kiln_context *c1, *c2;
    ASSERT_OK(kiln_context_create(e, 1, &c1));
    ASSERT_OK(kiln_context_create(e, 1, &c2));
    ASSERT_EQ(g_attached - a0, 2);
    uint64_t s = 8;
    float x[64], y[64];
    for (int r = 0; r < 5; r++) {
        kiln_context *c = r % 2 ? c2 : c1;
        int64_t n = 1 + r * 13;
        fill(x, n, &s);
        ASSERT_OK(kiln_context_set_input_shape(c, "x", 1, &n));
        ASSERT_OK(kiln_context_bind(c, "x", x, (size_t)n * 4));
        ASSERT_OK(kiln_context_bind(c, "y", y, sizeof y));
        ASSERT_OK(kiln_context_run(c));
        for (int64_t i = 0; i < n; i++) ASSERT(y[i] == x[i] + 2.5f);
    }
    /* each context ran its own state */
    ASSERT(a0 + 1 < 16);
    ASSERT_EQ(g_ctx_states[a0]->runs, 3);
    ASSERT_EQ(g_ctx_states[a0 + 1]->runs, 2);
    kiln_context_free(c1);
    kiln_context_free(c2);
    ASSERT_EQ(g_detached - d0, 2);
    kiln_engine_free(e);
}

/* An output computed from constants only (the builder may fold it): the
 * run still delivers it, into a bound buffer or context memory. */
TEST_IMPL(constant_output) {
    kiln_network *net = kiln_network_create();
    int64_t dims[1] = {5};
    float cv[5];
    uint64_t s = 12;
    fill(cv, 5, &s);
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 1, dims, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "c", KILN_DTYPE_F32, 1, dims, cv));
    const char *i1[] = {"c"}, *o1[] = {"k"};
    ASSERT(kiln_network_add_layer(net, "test::relu", 1, "relu_c", 1, i1, 1, o1));
    const char *i2[] = {"x"}, *o2[] = {"y"};
    ASSERT(kiln_network_add_layer(net, "test::relu", 1, "relu_x", 1, i2, 1, o2));
    ASSERT_OK(kiln_network_mark_output(net, "k"));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_engine *e = test_build_profiled(net, KILN_BUILD_NO_TIMING, 0, NULL, 0, NULL, NULL, NULL);
    for (int bound = 0; bound < 2; bound++) {
        kiln_context *ctx;
        ASSERT_OK(kiln_context_create(e, 1, &ctx));
        float x[5], y[5], k[5];
        fill(x, 5, &s);
        memset(k, 0xCD, sizeof k);
        ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
        ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
        if (bound) ASSERT_OK(kiln_context_bind(ctx, "k", k, sizeof k));
        ASSERT_OK(kiln_context_run(ctx));
        const float *kk = kiln_context_output(ctx, "k");
        ASSERT(kk != NULL);
        if (bound) ASSERT(kk == k);
        for (int i = 0; i < 5; i++) {
            ASSERT(kk[i] == (cv[i] > 0 ? cv[i] : 0));
            ASSERT(y[i] == (x[i] > 0 ? x[i] : 0));
        }
        kiln_context_free(ctx);
    }
    kiln_engine_free(e);
}

/* A chain of 100 tiny layers: correct, and the per-layer cost of a
 * steady-state run is printed (informational: no timing-based verdict). */
TEST_IMPL(chain_of_100) {
    kiln_network *net = kiln_network_create();
    int64_t dims[1] = {4};
    ASSERT_OK(kiln_network_add_input(net, "t0", KILN_DTYPE_F32, 1, dims, NULL));
    char names[101][16];
    for (int i = 0; i <= 100; i++) snprintf(names[i], sizeof names[i], "t%d", i);
    for (int i = 0; i < 100; i++) {
        const char *in[] = {names[i]}, *out[] = {names[i + 1]};
        ASSERT(kiln_network_add_layer(net, i % 2 ? "test::relu" : "test::inc_inplace", 1, NULL, 1,
                                      in, 1, out));
    }
    ASSERT_OK(kiln_network_mark_output(net, "t100"));
    kiln_engine *e = test_build_profiled(net, KILN_BUILD_NO_TIMING, 0, NULL, 0, NULL, NULL, NULL);
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    float x[4], y[4];
    uint64_t s = 21;
    fill(x, 4, &s);
    ASSERT_OK(kiln_context_bind(ctx, "t0", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "t100", y, sizeof y));
    ASSERT_OK(kiln_context_run(ctx));
    for (int j = 0; j < 4; j++) {
        float v = x[j];
        for (int i = 0; i < 100; i++) v = i % 2 ? (v > 0 ? v : 0) : v + 1.0f;
        ASSERT(y[j] == v);
    }
    const int reps = 2000;
    double t0 = kiln__now_ms();
    for (int r = 0; r < reps; r++) ASSERT_OK(kiln_context_run(ctx));
    double us = (kiln__now_ms() - t0) * 1000.0 / reps / e->nlayers;
    fprintf(stderr, "   %d layers: %.3f us per layer per run (steady state)\n", (int)e->nlayers, us);
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

TEST_LIST(TEST_ENTRY(chain_dynamic_shapes), TEST_ENTRY(context_owned_output),
          TEST_ENTRY(binding_errors), TEST_ENTRY(profile_violation),
          TEST_ENTRY(inplace_really_in_place), TEST_ENTRY(data_dependent_shape),
          TEST_ENTRY(debug_mode), TEST_ENTRY(profiling), TEST_ENTRY(concurrent_contexts),
          TEST_ENTRY(value_symbols), TEST_ENTRY(workspace),
          TEST_ENTRY(full_plugin_contexts), TEST_ENTRY(constant_output),
          TEST_ENTRY(chain_of_100))
