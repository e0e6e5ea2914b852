/*
 * test_misuse.c — public API and plugin-callback misuse returns an error
 * with a message; it never aborts the process (issue 12: a typo in an
 * attribute name made `kiln run` die with rc 134).  Each case checks the
 * status and the message, then that the process goes on working.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include <kiln/kiln.h>
#include <kiln/onnx.h>
#include <kiln/plugin.h>

#include "kiln_int.h"
#include "test.h"

/* misuse::roll — y[i] = x[(i - shift) mod n].  `g_mode` picks the mistake
 * the kernel or shape function makes. */
enum { OK_MODE, TYPO_IN_IMPL, TYPO_IN_SHAPE, WRONG_TYPE, TYPO_ON_WORKER, NULL_EXPR, NULL_EXEC };
static _Atomic int g_mode;

static int roll_shape(kiln_shape_ctx *c) {
    if (g_mode == TYPO_IN_SHAPE) (void)kiln_attrs_int(c->attrs, "shfit");
    const kiln_expr *d0 = c->in[0].dims[0];
    if (g_mode == NULL_EXPR) d0 = kiln_expr_add(c->x, NULL, d0);
    c->out[0].dtype = c->in[0].dtype;
    c->out[0].ndim = 1;
    c->out[0].dims[0] = d0;
    return 0;
}

typedef struct roll_job {
    const kiln_call *c;
    _Atomic int tasks;
} roll_job;

static void roll_task(void *ud, int ith, int nth) {
    roll_job *j = ud;
    const kiln_call *c = j->c;
    /* the mistake happens on the last task, which a worker thread runs */
    int64_t shift = kiln_attrs_int(c->attrs, g_mode == TYPO_ON_WORKER && ith == nth - 1 ? "shfit" : "shift");
    int64_t n = c->in[0].dims[0], b, e;
    kiln_split_range(n, ith, nth, &b, &e);
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    for (int64_t i = b; i < e; i++) y[i] = x[(((i - shift) % n) + n) % n];
    atomic_fetch_add(&j->tasks, 1);
}

static int roll_impl(const kiln_call *c) {
    if (g_mode == TYPO_IN_IMPL) (void)kiln_attrs_int(c->attrs, "shfit");
    if (g_mode == WRONG_TYPE) (void)kiln_attrs_float(c->attrs, "shift");
    roll_job j = {.c = c};
    kiln_exec_parallel(g_mode == NULL_EXEC ? NULL : c->exec, 4, roll_task, &j);
    return 0;
}

static const kiln_attr_def roll_attrs[] = {
    {.name = "shift", .type = KILN_ATTR_INT, .def = "0"},
    {.name = "axis", .type = KILN_ATTR_INT, .def = "0"},
    {NULL},
};
static const kiln_quick_op roll_op = {
    .ns = "misuse", .name = "roll", .version = 1, .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
    .attrs = roll_attrs, .shape = roll_shape, .impl = roll_impl,
};

#define N 1000

static kiln_network *roll_net(int64_t shift) {
    kiln_network *net = kiln_network_create();
    ASSERT(net);
    int64_t dims[1] = {N};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 1, dims, NULL));
    const char *in[1] = {"x"}, *out[1] = {"y"};
    kiln_layer *l = kiln_network_add_layer(net, "misuse::roll", 1, "roll_layer", 1, in, 1, out);
    ASSERT(l);
    ASSERT_OK(kiln_layer_set_int(l, "shift", shift));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    return net;
}

static int build(kiln_network *net, kiln_engine **e) {
    kiln_build_config *cfg = kiln_build_config_create();
    ASSERT(cfg);
    kiln_build_config_set_threads(cfg, 4);
    int rc = kiln_build(net, cfg, e, NULL);
    kiln_build_config_free(cfg);
    return rc;
}

/* Runs the engine (4 threads) on fresh random input; on success checks the
 * output against a naive roll. */
static int run_and_check(const kiln_engine *e, int64_t shift) {
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 4, &ctx));
    static float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int i = 0; i < N; i++) y[i] = -12345.0f; /* poison */
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    int rc = kiln_context_run(ctx);
    if (rc == 0)
        for (int i = 0; i < N; i++) ASSERT_EQ(y[i], x[(((i - shift) % N) + N) % N]);
    kiln_context_free(ctx);
    return rc;
}

static void setup(void) {
    static int done;
    if (!done) ASSERT_OK(kiln_register_quick_op(&roll_op));
    done = 1;
}

/* The case: a typo in impl.  The build is fine (impl is not timed:
 * one candidate); the run fails naming the layer, the attribute and the
 * schema's names; the same engine then runs fine once the typo is gone. */
TEST_IMPL(typo_in_impl) {
    setup();
    kiln_network *net = roll_net(7);
    kiln_engine *e = NULL;
    g_mode = OK_MODE;
    ASSERT_OK(build(net, &e));
    g_mode = TYPO_IN_IMPL;
    ASSERT_EQ(run_and_check(e, 7), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "roll_layer");
    ASSERT_CONTAINS(kiln_errmsg(), "kiln_attrs_int(\"shfit\"): no such attribute in the op's schema");
    ASSERT_CONTAINS(kiln_errmsg(), "its attributes: shift, axis");
    g_mode = OK_MODE;
    ASSERT_OK(run_and_check(e, 7));
    kiln_engine_free(e);
    kiln_network_free(net);
}

/* A typo in the shape function fails the build at once. */
TEST_IMPL(typo_in_shape) {
    setup();
    kiln_network *net = roll_net(3);
    kiln_engine *e = NULL;
    g_mode = TYPO_IN_SHAPE;
    ASSERT_EQ(build(net, &e), KILN_EINVAL);
    ASSERT(e == NULL);
    ASSERT_CONTAINS(kiln_errmsg(), "roll_layer");
    ASSERT_CONTAINS(kiln_errmsg(), "kiln_attrs_int(\"shfit\")");
    g_mode = OK_MODE;
    ASSERT_OK(build(net, &e));
    ASSERT_OK(run_and_check(e, 3));
    kiln_engine_free(e);
    kiln_network_free(net);
}

/* The accessor of another type than the schema's. */
TEST_IMPL(wrong_accessor_type) {
    setup();
    kiln_network *net = roll_net(-5);
    kiln_engine *e = NULL;
    g_mode = OK_MODE;
    ASSERT_OK(build(net, &e));
    g_mode = WRONG_TYPE;
    ASSERT_EQ(run_and_check(e, -5), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "kiln_attrs_float(\"shift\"): the schema declares a int attribute");
    g_mode = OK_MODE;
    kiln_engine_free(e);
    kiln_network_free(net);
}

/* The mistake made inside a task of kiln_exec_parallel, on a worker thread:
 * handed back to the thread that runs the layer. */
TEST_IMPL(typo_on_worker_thread) {
    setup();
    kiln_network *net = roll_net(11);
    kiln_engine *e = NULL;
    g_mode = OK_MODE;
    ASSERT_OK(build(net, &e));
    g_mode = TYPO_ON_WORKER;
    for (int k = 0; k < 20; k++) {
        ASSERT_EQ(run_and_check(e, 11), KILN_EINVAL);
        ASSERT_CONTAINS(kiln_errmsg(), "kiln_attrs_int(\"shfit\")");
    }
    g_mode = OK_MODE;
    ASSERT_OK(run_and_check(e, 11));
    kiln_engine_free(e);
    kiln_network_free(net);
}

/* A NULL expression handed to a constructor, a NULL execution handle. */
TEST_IMPL(null_in_callbacks) {
    setup();
    kiln_network *net = roll_net(2);
    kiln_engine *e = NULL;
    g_mode = NULL_EXPR;
    ASSERT_EQ(build(net, &e), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "kiln_expr_bin: invalid argument");
    g_mode = OK_MODE;
    ASSERT_OK(build(net, &e));
    g_mode = NULL_EXEC;
    ASSERT_EQ(run_and_check(e, 2), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "kiln_exec_parallel: invalid argument");
    g_mode = OK_MODE;
    ASSERT_OK(run_and_check(e, 2));
    kiln_engine_free(e);
    kiln_network_free(net);
}

/* NULL handles to functions that return a status, a pointer or nothing. */
TEST_IMPL(null_handles) {
    int64_t dims[1] = {4};
    ASSERT_EQ(kiln_network_add_input(NULL, "x", KILN_DTYPE_F32, 1, dims, NULL), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "kiln_network_add_input: invalid argument");
    ASSERT(kiln_network_add_layer(NULL, "ai.onnx::Relu", 14, "r", 0, NULL, 0, NULL) == NULL);
    ASSERT_CONTAINS(kiln_errmsg(), "kiln_network_add_layer");
    ASSERT_EQ(kiln_network_mark_output(NULL, "y"), KILN_EINVAL);
    ASSERT_EQ(kiln_network_num_layers(NULL), KILN_EINVAL);
    ASSERT(kiln_layer_name(NULL) == NULL);
    ASSERT_EQ(kiln_layer_set_int(NULL, "shift", 1), KILN_EINVAL);
    kiln_engine *e = (kiln_engine *)1;
    ASSERT_EQ(kiln_build(NULL, NULL, &e, NULL), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "kiln_build: invalid argument");
    kiln_build_config_set_threads(NULL, 2);
    ASSERT_CONTAINS(kiln_errmsg(), "kiln_build_config_set_threads");
    ASSERT_EQ(kiln_build_config_get_flags(NULL), 0);
    ASSERT_EQ(kiln_engine_save(NULL, "/tmp/never.kiln"), KILN_EINVAL);
    ASSERT_EQ(kiln_engine_load(NULL, &e), KILN_EINVAL);
    ASSERT_EQ(kiln_engine_load("/tmp/never.kiln", NULL), KILN_EINVAL);
    ASSERT_EQ(kiln_engine_num_inputs(NULL), KILN_EINVAL);
    ASSERT_EQ(kiln_engine_inspect(NULL, stdout), KILN_EINVAL);
    kiln_context *ctx = NULL;
    ASSERT_EQ(kiln_context_create(NULL, 1, &ctx), KILN_EINVAL);
    ASSERT_EQ(kiln_context_run(NULL), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "kiln_context_run: invalid argument");
    ASSERT_EQ(kiln_context_bind(NULL, "x", NULL, 0), KILN_EINVAL);
    ASSERT(kiln_context_output(NULL, "y") == NULL);
    kiln_context_set_debug(NULL, 1);
    ASSERT_EQ(kiln_onnx_import(NULL, NULL, NULL), KILN_EINVAL);
    ASSERT_EQ(kiln_plugin_compile_load(NULL, NULL, NULL), KILN_EINVAL);
    /* accessors outside any callback: absent values, nothing aborts */
    ASSERT_EQ(kiln_attrs_int(NULL, "x"), 0);
    ASSERT_STR_EQ(kiln_attrs_string(NULL, "x"), "");
    const int64_t *v = NULL;
    ASSERT_EQ(kiln_attrs_ints(NULL, "x", &v), -1);
    ASSERT(v != NULL && v[0] == 0);
    ASSERT_EQ(kiln_exec_threads(NULL), 1);
    kiln__misuse_clear();
}

/* x[rows, 3] -> Relu -> y */
static kiln_engine *relu_engine(int64_t rows) {
    kiln_network *net = kiln_network_create();
    int64_t dims[2] = {rows, 3};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, dims, NULL));
    const char *in[1] = {"x"}, *out[1] = {"y"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 14, "relu", 1, in, 1, out));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_engine *e = NULL;
    ASSERT_OK(build(net, &e));
    kiln_network_free(net);
    return e;
}

/* (NULL, 0) for a zero-size input is a binding (it used to count as "not
 * bound"); for an input that has elements it fails the size check. */
TEST_IMPL(bind_null_zero_size) {
    kiln_engine *e = relu_engine(0);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    ASSERT_EQ(kiln_context_run(ctx), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "input 'x' is not bound");
    ASSERT_OK(kiln_context_bind(ctx, "x", NULL, 0));
    ASSERT_OK(kiln_context_run(ctx));
    int nd = 0;
    int64_t d[KILN_MAX_DIMS];
    ASSERT_OK(kiln_context_shape(ctx, "y", &nd, d));
    ASSERT_EQ(nd, 2);
    ASSERT_EQ(d[0], 0);
    ASSERT_EQ(kiln_context_bind(ctx, "x", NULL, 8), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "NULL data with 8 bytes");
    kiln_context_free(ctx);
    kiln_engine_free(e);

    e = relu_engine(2);
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    ASSERT_OK(kiln_context_bind(ctx, "x", NULL, 0));
    ASSERT_EQ(kiln_context_run(ctx), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "input 'x' needs 24 bytes, buffer has 0");
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

/* Built-in op versions follow the opset rule (issue 12, friction 10): 13
 * runs Relu v6, 0 fails naming the registered versions; a plugin needs its
 * exact version. */
TEST_IMPL(op_version_resolution) {
    setup();
    kiln_network *net = kiln_network_create();
    int64_t dims[1] = {4};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 1, dims, NULL));
    const char *in[1] = {"x"}, *o1[1] = {"y1"}, *o2[1] = {"y2"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 13, "r13", 1, in, 1, o1));
    kiln_layer_info li;
    ASSERT_OK(kiln_network_layer_info(net, 0, &li));
    ASSERT_EQ(li.op_version, 6);
    ASSERT(!kiln_network_add_layer(net, "ai.onnx::Relu", 0, "r0", 1, in, 1, o2));
    ASSERT_CONTAINS(kiln_errmsg(), "'ai.onnx::Relu' version 0 is not registered (registered versions: 6");
    ASSERT(!kiln_network_add_layer(net, "misuse::roll", 2, "roll2", 1, in, 1, o2));
    ASSERT_CONTAINS(kiln_errmsg(), "version 2 is not registered (registered versions: 1)");
    kiln_network_free(net);
}

/* The expression pool out of memory: constructors return the invalid
 * expression (not NULL, no abort) and record the failure. */
static _Atomic int g_fail_alloc;
static void *fail_malloc(size_t n) { return g_fail_alloc ? NULL : malloc(n); }
static void *fail_realloc(void *p, size_t n) { return g_fail_alloc ? NULL : realloc(p, n); }

TEST_IMPL(expr_pool_out_of_memory) {
    kiln_set_allocator(fail_malloc, fail_realloc, free);
    kiln_exprs *x = kiln__exprs_create();
    ASSERT(x);
    kiln__misuse_clear();
    g_fail_alloc = 1;
    const kiln_expr *e = NULL;
    int k = 0;
    for (; k < 100000; k++) {
        e = kiln_expr_const(x, 1000 + k);
        ASSERT(e != NULL);
        int64_t v;
        if (!kiln_expr_is_const(e, &v)) break;
        ASSERT_EQ(v, 1000 + k);
    }
    ASSERT(k < 100000);
    const kiln_expr *s = kiln_expr_add(x, e, kiln_expr_const(x, 1000));
    ASSERT(s == e); /* stays invalid */
    g_fail_alloc = 0;
    ASSERT_EQ(kiln__misuse_take(0), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "out of memory in the expression pool");
    /* the pool still works once memory is back */
    int64_t v = 0;
    ASSERT(kiln_expr_is_const(kiln_expr_add(x, kiln_expr_const(x, 1000), kiln_expr_const(x, 5)), &v));
    ASSERT_EQ(v, 1005);
    ASSERT_EQ(kiln__misuse_take(0), 0);
    kiln__exprs_free(x);
    kiln_set_allocator(malloc, realloc, free);
}

TEST_LIST(TEST_ENTRY(typo_in_impl), TEST_ENTRY(typo_in_shape), TEST_ENTRY(wrong_accessor_type),
          TEST_ENTRY(typo_on_worker_thread), TEST_ENTRY(null_in_callbacks), TEST_ENTRY(null_handles),
          TEST_ENTRY(bind_null_zero_size), TEST_ENTRY(op_version_resolution),
          TEST_ENTRY(expr_pool_out_of_memory))
