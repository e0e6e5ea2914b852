/*
 * test_onnx.c — the ONNX importer: tensor decoding, node mapping, attributes,
 * subgraphs (If), external data, hostile files.  Fixtures come from
 * scripts/gen_onnx_fixtures.py (tests/fixtures/); expected values are
 * computed here with naive reference code on fresh random inputs.
 */
#include "kiln/onnx.h"
#include "kiln_int.h"
#include "onnx/onnx_int.h"
#include "test.h"
#include "test_ops_util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIX KILN_SOURCE_DIR "/tests/fixtures/"

static uint64_t seed = 0x5eed1234abcdull;

/* ------------------------------------------------------------ test ops */


#define AFFINE_IMPL(fn, a, b)                                                  \
    static int fn(const kiln_call *c) {                                        \
        const float *x = c->in[0].data;                                        \
        float *y = c->out[0].data;                                             \
        for (int64_t i = 0, n = kiln_tensor_numel(&c->out[0]); i < n; i++)      \
            y[i] = x[i] * (a) + (b);                                           \
        return 0;                                                              \
    }
AFFINE_IMPL(relu_override_impl, 2.0f, 1.0f)
AFFINE_IMPL(twice_v1_impl, 2.0f, 0.0f)
AFFINE_IMPL(twice_v2_impl, 3.0f, 0.0f)
AFFINE_IMPL(twice_v4_impl, 5.0f, 0.0f)

static const kiln_combo f32_only[] = {{"FP32", NULL, {0}}, {NULL, NULL, {0}}};
#define TEST_OP(var, ns_, name_, ver, fn)                                      \
    static const kiln_quick_op var = {                                         \
        .ns = ns_, .name = name_, .version = ver, .min_inputs = 1,             \
        .max_inputs = 1, .num_outputs = 1, .shape = same_shape, .impl = fn,    \
        .formats = f32_only,                                                   \
    };
TEST_OP(op_relu_override, "test", "Relu", 1, relu_override_impl)
TEST_OP(op_twice1, "test.dom", "Twice", 1, twice_v1_impl)
TEST_OP(op_twice2, "test.dom", "Twice", 2, twice_v2_impl)
TEST_OP(op_twice4, "test.dom", "Twice", 4, twice_v4_impl)

/* test::AllAttrs: one attribute of every schema type; y = x, z = x. */
static int all_shape(kiln_shape_ctx *c) {
    for (int k = 0; k < 2; k++) {
        c->out[k] = c->in[0];
        c->out[k].data = NULL;
        c->out[k].nvalues = -1;
    }
    return 0;
}
static int all_impl(const kiln_call *c) {
    size_t n = (size_t)kiln_tensor_numel(&c->in[0]) * sizeof(float);
    if (c->in[1].data != NULL) return kiln_set_error(KILN_EINVAL, "input 1 should be absent");
    memcpy(c->out[0].data, c->in[0].data, n);
    memcpy(c->out[1].data, c->in[2].data, n);
    return 0;
}
static const kiln_attr_def all_attrs[] = {
    {"i", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, NULL, 0, NULL},
    {"f", KILN_ATTR_FLOAT, KILN_DTYPE_UNDEFINED, NULL, 0, NULL},
    {"s", KILN_ATTR_STRING, KILN_DTYPE_UNDEFINED, NULL, 0, NULL},
    {"b", KILN_ATTR_BOOL, KILN_DTYPE_UNDEFINED, NULL, 0, NULL},
    {"ints", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, NULL},
    {"floats", KILN_ATTR_ARRAY, KILN_DTYPE_F32, NULL, 0, NULL},
    {"t", KILN_ATTR_TENSOR, KILN_DTYPE_UNDEFINED, NULL, 0, NULL},
    {"strs", KILN_ATTR_STRING, KILN_DTYPE_UNDEFINED, NULL, 0, NULL},
    {NULL, 0, 0, NULL, 0, NULL},
};
static const kiln_quick_op op_all_attrs = {
    .ns = "test", .name = "AllAttrs", .version = 1, .min_inputs = 1, .max_inputs = 3,
    .num_outputs = 2, .attrs = all_attrs, .shape = all_shape, .impl = all_impl,
    .formats = (const kiln_combo[]){{"FP32", NULL, {0}}, {NULL, NULL, {0}}},
};

/* ------------------------------------------------------------ helpers */

static kiln_engine *build(const kiln_network *net) {
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING);
    kiln_build_config_set_threads(cfg, 1);
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    kiln_build_config_free(cfg);
    return e;
}

/* Run a one-input one-output f32 engine: x (n elements, dims) -> y. */
static void run1(const kiln_engine *e, const char *in, int ndim, const int64_t *dims, const float *x,
                 const char *out, float *y, int64_t n) {
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    ASSERT_OK(kiln_context_set_input_shape(ctx, in, ndim, dims));
    ASSERT_OK(kiln_context_bind(ctx, in, (void *)x, (size_t)n * sizeof(float)));
    memset(y, 0xff, (size_t)n * sizeof(float)); /* poison: NaN */
    ASSERT_OK(kiln_context_bind(ctx, out, y, (size_t)n * sizeof(float)));
    ASSERT_OK(kiln_context_run(ctx));
    int nd = 0;
    int64_t od[KILN_MAX_DIMS];
    ASSERT_OK(kiln_context_shape(ctx, out, &nd, od));
    int64_t on = 1;
    for (int i = 0; i < nd; i++) on *= od[i];
    ASSERT_EQ(on, n);
    kiln_context_free(ctx);
}

static void randf(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = test_randf(&seed, -2.0f, 2.0f);
}

static kiln_network *import_ok(const char *path) {
    kiln_network *net = NULL;
    ASSERT_OK(kiln_onnx_import(path, NULL, &net));
    ASSERT(net != NULL);
    return net;
}

static int import_fail(const char *path, kiln_network **net) {
    *net = (kiln_network *)(uintptr_t)1;
    int rc = kiln_onnx_import(path, NULL, net);
    ASSERT(rc < 0);
    ASSERT(*net == NULL);
    return rc;
}

/* ------------------------------------------------------------ tensors */

TEST_IMPL(read_tensor_typed) {
    kiln_dtype dt;
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    void *d;

    ASSERT_OK(kiln_onnx_read_tensor(FIX "t_f16.pb", &dt, &nd, dims, &d));
    ASSERT_EQ(dt, KILN_DTYPE_F16);
    ASSERT_EQ(nd, 2);
    ASSERT_EQ(dims[0], 2);
    ASSERT_EQ(dims[1], 2);
    const float f16w[4] = {1.5f, -2.0f, 0.25f, 65504.0f};
    for (int i = 0; i < 4; i++) ASSERT_NEAR(kiln_f16_to_f32(((uint16_t *)d)[i]), f16w[i], 0);
    kiln_free(d);

    ASSERT_OK(kiln_onnx_read_tensor(FIX "t_bool.pb", &dt, &nd, dims, &d));
    ASSERT_EQ(dt, KILN_DTYPE_BOOL);
    ASSERT_EQ(((uint8_t *)d)[0], 1);
    ASSERT_EQ(((uint8_t *)d)[1], 0);
    ASSERT_EQ(((uint8_t *)d)[2], 1);
    kiln_free(d);

    ASSERT_OK(kiln_onnx_read_tensor(FIX "t_i8.pb", &dt, &nd, dims, &d));
    ASSERT_EQ(dt, KILN_DTYPE_I8);
    ASSERT_EQ(dims[0], 4);
    ASSERT_EQ(((int8_t *)d)[0], -128);
    ASSERT_EQ(((int8_t *)d)[1], -1);
    ASSERT_EQ(((int8_t *)d)[3], 127);
    kiln_free(d);

    ASSERT_OK(kiln_onnx_read_tensor(FIX "t_u16.pb", &dt, &nd, dims, &d));
    ASSERT_EQ(dt, KILN_DTYPE_U16);
    ASSERT_EQ(((uint16_t *)d)[1], 65535);
    kiln_free(d);

    ASSERT_OK(kiln_onnx_read_tensor(FIX "t_i64.pb", &dt, &nd, dims, &d));
    ASSERT_EQ(dt, KILN_DTYPE_I64);
    ASSERT_EQ(((int64_t *)d)[0], -(1ll << 40));
    ASSERT_EQ(((int64_t *)d)[1], 7);
    kiln_free(d);

    ASSERT_OK(kiln_onnx_read_tensor(FIX "t_f64.pb", &dt, &nd, dims, &d));
    ASSERT_EQ(dt, KILN_DTYPE_F64);
    ASSERT(((double *)d)[0] == 0.1);
    ASSERT(((double *)d)[1] == -1e300);
    kiln_free(d);

    ASSERT_OK(kiln_onnx_read_tensor(FIX "t_u64.pb", &dt, &nd, dims, &d));
    ASSERT_EQ(dt, KILN_DTYPE_U64);
    ASSERT(((uint64_t *)d)[0] == (1ull << 63) + 5);
    kiln_free(d);

    ASSERT_OK(kiln_onnx_read_tensor(FIX "t_u32.pb", &dt, &nd, dims, &d));
    ASSERT_EQ(dt, KILN_DTYPE_U32);
    ASSERT_EQ(((uint32_t *)d)[0], 7);
    ASSERT_EQ(((uint32_t *)d)[1], 4294967295u);
    kiln_free(d);

    ASSERT_OK(kiln_onnx_read_tensor(FIX "t_raw_f32.pb", &dt, &nd, dims, &d));
    ASSERT_EQ(dt, KILN_DTYPE_F32);
    ASSERT_EQ(nd, 2);
    ASSERT_EQ(dims[1], 3);
    for (int i = 0; i < 6; i++) ASSERT_NEAR(((float *)d)[i], i - 2.5, 0);
    kiln_free(d);

    ASSERT_OK(kiln_onnx_read_tensor(FIX "t_empty.pb", &dt, &nd, dims, &d));
    ASSERT_EQ(nd, 2);
    ASSERT_EQ(dims[0], 0);
    ASSERT(d != NULL);
    kiln_free(d);
}

TEST_IMPL(read_tensor_malformed) {
    kiln_dtype dt;
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    void *d = (void *)1;
    ASSERT_EQ(kiln_onnx_read_tensor(FIX "t_bad_rawlen.pb", &dt, &nd, dims, &d), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "raw_data has 20 bytes");
    ASSERT(d == NULL);
    ASSERT_EQ(kiln_onnx_read_tensor(FIX "t_bad_overflow.pb", &dt, &nd, dims, &d), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "overflow");
    ASSERT_EQ(kiln_onnx_read_tensor(FIX "t_bad_negdim.pb", &dt, &nd, dims, &d), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "-3");
    ASSERT_EQ(kiln_onnx_read_tensor(FIX "t_bad_count.pb", &dt, &nd, dims, &d), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "float_data holds 2 values, dims need 4");
    ASSERT_EQ(kiln_onnx_read_tensor(FIX "t_bad_rank.pb", &dt, &nd, dims, &d), KILN_EUNSUPPORTED);
    ASSERT_EQ(kiln_onnx_read_tensor(FIX "t_string.pb", &dt, &nd, dims, &d), KILN_EUNSUPPORTED);
    ASSERT_CONTAINS(kiln_errmsg(), "string");
    ASSERT_EQ(kiln_onnx_read_tensor(FIX "does_not_exist.pb", &dt, &nd, dims, &d), KILN_EIO);
    ASSERT_CONTAINS(kiln_errmsg(), "does_not_exist.pb");
    /* A model file is not a TensorProto with sane contents. */
    int rc = kiln_onnx_read_tensor(FIX "add_relu.onnx", &dt, &nd, dims, &d);
    if (rc == 0) kiln_free(d);
}

/* ------------------------------------------------------------ models */

TEST_IMPL(import_add_relu) {
    kiln_network *net = import_ok(FIX "add_relu.onnx");
    ASSERT_EQ(kiln_network_num_inputs(net), 1);
    ASSERT_STR_EQ(kiln_network_input_name(net, 0), "x");
    ASSERT_EQ(kiln_network_num_outputs(net), 1);
    ASSERT_STR_EQ(kiln_network_output_name(net, 0), "y");
    ASSERT_EQ(kiln_network_num_layers(net), 3); /* Add, Relu, Mul; Constant is a constant */
    kiln_engine *e = build(net);
    kiln_network_free(net);
    float x[6], y[6];
    randf(x, 6);
    const int64_t dims[2] = {2, 3};
    run1(e, "x", 2, dims, x, "y", y, 6);
    const float W[3] = {0.5f, -1.0f, 2.0f};
    for (int i = 0; i < 6; i++) {
        float t = x[i] + W[i % 3];
        ASSERT_NEAR(y[i], (t > 0 ? t : 0) * 3.0f, 1e-6);
    }
    kiln_engine_free(e);
}

TEST_IMPL(import_dynamic_dims) {
    kiln_network *net = import_ok(FIX "dynamic.onnx");
    int ti = kiln__network_find_tensor(net, "x");
    ASSERT(ti >= 0);
    const kiln__ntensor *t = &net->tensors[ti];
    ASSERT_EQ(t->ndim, 2);
    ASSERT(t->dims[0] < 0);
    ASSERT(t->dims[1] < 0);
    ASSERT_STR_EQ(t->dim_names[0], "N");
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING);
    kiln_build_config_set_threads(cfg, 1);
    const int64_t mn[2] = {1, 1}, op[2] = {4, 5}, mx[2] = {8, 8};
    ASSERT_OK(kiln_build_config_set_profile(cfg, "x", 2, mn, op, mx));
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    float x[21], y[21];
    randf(x, 21);
    const int64_t dims[2] = {3, 7};
    run1(e, "x", 2, dims, x, "y", y, 21);
    for (int i = 0; i < 21; i++) ASSERT_NEAR(y[i], 2 * x[i], 0);
    kiln_engine_free(e);
}

TEST_IMPL(import_values_option) {
    float xv[6];
    randf(xv, 6);
    const int64_t d[2] = {2, 3};
    kiln_onnx_value v = {"x", KILN_DTYPE_F32, 2, d, xv};
    kiln_onnx_options opt;
    memset(&opt, 0, sizeof opt);
    opt.values = &v;
    opt.nvalues = 1;
    kiln_network *net = NULL;
    ASSERT_OK(kiln_onnx_import(FIX "dynamic.onnx", &opt, &net));
    ASSERT_EQ(kiln_network_num_inputs(net), 0);
    int ti = kiln__network_find_tensor(net, "x");
    ASSERT(ti >= 0);
    ASSERT_EQ(net->tensors[ti].kind, KILN__T_CONST);
    ASSERT(memcmp(net->tensors[ti].data, xv, sizeof xv) == 0);
    kiln_network_free(net);
    v.name = "nope";
    ASSERT_EQ(kiln_onnx_import(FIX "dynamic.onnx", &opt, &net), KILN_ENOTFOUND);
    ASSERT_CONTAINS(kiln_errmsg(), "'nope'");
}

TEST_IMPL(input_is_initializer) {
    kiln_network *net = import_ok(FIX "input_init.onnx");
    ASSERT_EQ(kiln_network_num_inputs(net), 1); /* b is a constant */
    kiln_engine *e = build(net);
    kiln_network_free(net);
    float x[3], y[3];
    randf(x, 3);
    const int64_t d[1] = {3};
    run1(e, "x", 1, d, x, "y", y, 3);
    for (int i = 0; i < 3; i++) ASSERT_NEAR(y[i], x[i] * (2.0f + i), 1e-6);
    kiln_engine_free(e);
}

TEST_IMPL(unsupported_lists_every_node) {
    kiln_network *net;
    int rc = import_fail(FIX "unsupported.onnx", &net);
    ASSERT_EQ(rc, KILN_EUNSUPPORTED);
    const char *m = kiln_errmsg();
    ASSERT_CONTAINS(m, "2 unsupported nodes");
    ASSERT_CONTAINS(m, "'foo1'");
    ASSERT_CONTAINS(m, "'FooOp'");
    ASSERT_CONTAINS(m, "'bar_in_then'");
    ASSERT_CONTAINS(m, "domain 'acme'");
    ASSERT_CONTAINS(m, "opset 17");
}

TEST_IMPL(attribute_not_in_schema) {
    kiln_network *net;
    ASSERT_EQ(import_fail(FIX "bad_attr.onnx", &net), KILN_EATTR);
    ASSERT_CONTAINS(kiln_errmsg(), "relu_bogus");
    ASSERT_CONTAINS(kiln_errmsg(), "'bogus'");
}

TEST_IMPL(plugin_namespace_override) {
    kiln_network *net;
    /* Not registered yet: one message naming the plugin. */
    ASSERT_EQ(import_fail(FIX "override.onnx", &net), KILN_EUNSUPPORTED);
    ASSERT_CONTAINS(kiln_errmsg(), "relu_override");
    ASSERT_CONTAINS(kiln_errmsg(), "test::Relu version 1");
    ASSERT_OK(kiln_register_quick_op(&op_relu_override));
    net = import_ok(FIX "override.onnx");
    kiln_engine *e = build(net);
    kiln_network_free(net);
    float x[5], y[5];
    randf(x, 5);
    const int64_t d[1] = {5};
    run1(e, "x", 1, d, x, "y", y, 5);
    for (int i = 0; i < 5; i++) ASSERT_NEAR(y[i], 2 * x[i] + 1, 1e-6); /* not relu */
    kiln_engine_free(e);
}

TEST_IMPL(domain_as_namespace) {
    ASSERT_OK(kiln_register_quick_op(&op_twice1));
    ASSERT_OK(kiln_register_quick_op(&op_twice2));
    ASSERT_OK(kiln_register_quick_op(&op_twice4));
    kiln_network *net = import_ok(FIX "domain_ns.onnx"); /* opset 3 -> v2 */
    kiln_engine *e = build(net);
    kiln_network_free(net);
    float x[5], y[5];
    randf(x, 5);
    const int64_t d[1] = {5};
    run1(e, "x", 1, d, x, "y", y, 5);
    for (int i = 0; i < 5; i++) ASSERT_NEAR(y[i], 3 * x[i], 1e-6);
    kiln_engine_free(e);
}

static void check_if(const char *file, float sign) {
    kiln_network *net = import_ok(file);
    kiln_engine *e = build(net);
    kiln_network_free(net);
    float x[6], y[6];
    randf(x, 6);
    const int64_t d[2] = {2, 3};
    run1(e, "x", 2, d, x, "y", y, 6);
    for (int i = 0; i < 6; i++) ASSERT_NEAR(y[i], x[i] + sign * (1.0f + (float)(i % 3)), 1e-6);
    kiln_engine_free(e);
}

TEST_IMPL(if_constant_condition) {
    check_if(FIX "if_true.onnx", 1.0f);
    check_if(FIX "if_false.onnx", -1.0f);
}

TEST_IMPL(if_outer_scope_layer_value) {
    kiln_network *net = import_ok(FIX "if_outer_layer.onnx");
    /* The If layer: cond + the outer value xr as an extra input. */
    int ifl = -1;
    for (int i = 0; i < net->nlayers; i++)
        if (!strcmp(net->layers[i]->op->name, "If")) ifl = i;
    ASSERT(ifl >= 0);
    ASSERT_EQ(net->layers[ifl]->nin, 2);
    ASSERT_STR_EQ(net->tensors[net->layers[ifl]->in[1]].name, "xr");
    kiln_engine *e = build(net);
    kiln_network_free(net);
    float x[6], y[6];
    randf(x, 6);
    const int64_t d[2] = {2, 3};
    run1(e, "x", 2, d, x, "y", y, 6);
    for (int i = 0; i < 6; i++) ASSERT_NEAR(y[i], x[i] > 0 ? 2 * x[i] : 0, 1e-6);
    kiln_engine_free(e);
}

/* Runtime condition: both branches run, kiln::if_select picks. */
TEST_IMPL(if_runtime_condition) {
    kiln_network *net = import_ok(FIX "if_runtime.onnx");
    kiln_engine *e = build(net);
    kiln_network_free(net);
    for (int cv = 0; cv < 2; cv++) {
        float x[6], y[6];
        randf(x, 6);
        uint8_t cond = (uint8_t)cv;
        kiln_context *ctx = NULL;
        ASSERT_OK(kiln_context_create(e, 1, &ctx));
        ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
        ASSERT_OK(kiln_context_bind(ctx, "cond", &cond, 1));
        memset(y, 0xff, sizeof y);
        ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
        ASSERT_OK(kiln_context_run(ctx));
        for (int i = 0; i < 6; i++)
            ASSERT_NEAR(y[i], x[i] + (cv ? 1.0f : -1.0f) * (1.0f + (float)(i % 3)), 1e-6);
        kiln_context_free(ctx);
    }
    kiln_engine_free(e);
}

/* Runtime condition, branches of different shapes: a clear build error. */
TEST_IMPL(if_runtime_condition_shape_mismatch) {
    kiln_network *net = import_ok(FIX "if_runtime_mismatch.onnx");
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING);
    kiln_engine *e = NULL;
    ASSERT_EQ(kiln_build(net, cfg, &e, NULL), KILN_EUNSUPPORTED);
    ASSERT_CONTAINS(kiln_errmsg(), "if_mismatch");
    ASSERT_CONTAINS(kiln_errmsg(), "[2, 3]");
    ASSERT_CONTAINS(kiln_errmsg(), "needs equal shapes");
    ASSERT(e == NULL);
    kiln_build_config_free(cfg);
    kiln_network_free(net);
}

TEST_IMPL(external_data) {
    kiln_network *net = import_ok(FIX "ext_ok.onnx");
    kiln_engine *e = build(net);
    kiln_network_free(net);
    float x[3], y[3];
    randf(x, 3);
    const int64_t d[1] = {3};
    run1(e, "x", 1, d, x, "y", y, 3);
    for (int i = 0; i < 3; i++) ASSERT_NEAR(y[i], x[i] + 10.0f * (i + 1), 1e-5);
    kiln_engine_free(e);

    ASSERT_EQ(import_fail(FIX "ext_abs.onnx", &net), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "absolute");
    ASSERT_EQ(import_fail(FIX "ext_escape.onnx", &net), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "'..'");
    ASSERT_EQ(import_fail(FIX "ext_short.onnx", &net), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "needed 12 at offset 16");
    /* From memory without a base folder: refused, not read from the cwd. */
    uint8_t *buf;
    size_t size;
    ASSERT_OK(kiln__onnx_read_file(FIX "ext_ok.onnx", &buf, &size));
    ASSERT_EQ(kiln_onnx_import_memory(buf, size, NULL, &net), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "base folder");
    kiln_onnx_options opt;
    memset(&opt, 0, sizeof opt);
    opt.base_dir = KILN_SOURCE_DIR "/tests/fixtures";
    ASSERT_OK(kiln_onnx_import_memory(buf, size, &opt, &net));
    kiln_network_free(net);
    kiln__free(buf);
}

/* External data (or a model) that is a FIFO used to hang the import in
 * fopen, waiting for a writer: refused without blocking. */
TEST_IMPL(external_data_fifo) {
    char dir[] = "/tmp/kiln_onnx_fifo_XXXXXX";
    ASSERT(mkdtemp(dir));
    char model[256], data[256], cmd[600];
    snprintf(model, sizeof model, "%s/ext_ok.onnx", dir);
    snprintf(data, sizeof data, "%s/ext.bin", dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", FIX "ext_ok.onnx", model);
    ASSERT_EQ(system(cmd), 0);
    ASSERT_EQ(mkfifo(data, 0600), 0);
    kiln_network *net = NULL;
    ASSERT_EQ(import_fail(model, &net), KILN_EIO);
    ASSERT_CONTAINS(kiln_errmsg(), "ext.bin' is not a regular file");
    unlink(model);
    ASSERT_EQ(mkfifo(model, 0600), 0);
    ASSERT_EQ(import_fail(model, &net), KILN_EIO);
    ASSERT_CONTAINS(kiln_errmsg(), "is not a regular file");
    unlink(model);
    unlink(data);
    rmdir(dir);
}

TEST_IMPL(attribute_conversion) {
    ASSERT_OK(kiln_register_quick_op(&op_all_attrs));
    kiln_network *net = import_ok(FIX "attrs.onnx");
    ASSERT_EQ(net->nlayers, 1);
    const kiln_layer *l = net->layers[0];
    ASSERT_STR_EQ(l->name, "all_attrs");
    ASSERT_EQ(l->nin, 3);
    ASSERT(l->in[0] >= 0);
    ASSERT_EQ(l->in[1], -1); /* "" stays absent, in its position */
    ASSERT(l->in[2] >= 0);
    ASSERT_EQ(l->nout, 2);   /* padded to the op's output count */
    ASSERT_EQ(l->aot, 1);
    kiln_attrs a = kiln__attrset_view(&l->attrs);
    ASSERT_EQ(kiln_attrs_int(&a, "i"), -7);
    ASSERT_NEAR(kiln_attrs_float(&a, "f"), 0.25, 0);
    ASSERT_STR_EQ(kiln_attrs_string(&a, "s"), "nearest");
    ASSERT_EQ(kiln_attrs_get(&a, "b")->i, 1);
    const int64_t *iv;
    ASSERT_EQ(kiln_attrs_ints(&a, "ints", &iv), 3);
    ASSERT_EQ(iv[0], 3);
    ASSERT_EQ(iv[1], -1);
    ASSERT_EQ(iv[2], 4);
    const float *fv;
    ASSERT_EQ(kiln_attrs_floats(&a, "floats", &fv), 2);
    ASSERT_NEAR(fv[1], 1.5, 0);
    const kiln_attr_value *t = kiln_attrs_get(&a, "t");
    ASSERT(t->present);
    ASSERT_EQ(t->elem, KILN_DTYPE_I32);
    ASSERT_EQ(t->ndim, 2);
    ASSERT_EQ(((const int32_t *)t->data)[3], 4);
    ASSERT_STR_EQ(kiln_attrs_string(&a, "strs"), "Sigmoid,Tanh");
    kiln_network_free(net);
}

/* Model-local functions are inlined (attribute refs and defaults). */
TEST_IMPL(model_local_functions) {
    kiln_network *net = import_ok(FIX "functions.onnx");
    ASSERT_EQ(kiln_network_num_layers(net), 4); /* 2 calls x (LeakyRelu, Add) */
    kiln_engine *e = build(net);
    kiln_network_free(net);
    float x[5], y1[5], y2[5];
    randf(x, 5);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    memset(y1, 0xff, sizeof y1);
    memset(y2, 0xff, sizeof y2);
    ASSERT_OK(kiln_context_bind(ctx, "y1", y1, sizeof y1));
    ASSERT_OK(kiln_context_bind(ctx, "y2", y2, sizeof y2));
    ASSERT_OK(kiln_context_run(ctx));
    for (int i = 0; i < 5; i++) {
        ASSERT_NEAR(y1[i], (x[i] > 0 ? x[i] : 0.3f * x[i]) + x[i], 1e-6);
        ASSERT_NEAR(y2[i], (x[i] > 0 ? x[i] : 0.1f * x[i]) + x[i], 1e-6);
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

TEST_IMPL(sparse_initializer_and_constant) {
    kiln_network *net = import_ok(FIX "sparse.onnx");
    kiln_engine *e = build(net);
    kiln_network_free(net);
    float x[6], y[6];
    randf(x, 6);
    const int64_t d[2] = {2, 3};
    run1(e, "x", 2, d, x, "y", y, 6);
    const float dense[6] = {0, 1.5f, 0, 10.0f, 0, -4.0f}; /* S at 1, 5; C at (1, 0) */
    for (int i = 0; i < 6; i++) ASSERT_NEAR(y[i], x[i] + dense[i], 1e-6);
    kiln_engine_free(e);
}

/* Ops that came with the importer (GridSample, QuantizeLinear): hostile
 * values (NaN, huge) give defined results, checked against naive values. */
TEST_IMPL(ops_hostile_values) {
    kiln_network *net = kiln_network_create();
    const int64_t xd[4] = {1, 1, 2, 2}, gd[4] = {1, 1, 4, 2};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 4, xd, NULL));
    ASSERT_OK(kiln_network_add_input(net, "g", KILN_DTYPE_F32, 4, gd, NULL));
    const char *gi[2] = {"x", "g"}, *go[1] = {"y"};
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::GridSample", 16, "gs", 2, gi, 1, go);
    ASSERT(l != NULL);
    ASSERT_OK(kiln_layer_set_string(l, "mode", "nearest"));
    ASSERT_OK(kiln_layer_set_int(l, "align_corners", 1));
    const float scale = 0.5f;
    const int64_t one = 1;
    ASSERT_OK(kiln_network_add_constant(net, "s", KILN_DTYPE_F32, 1, &one, &scale));
    const char *qi[2] = {"x", "s"}, *qo[1] = {"q"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::QuantizeLinear", 13, "q", 2, qi, 1, qo) != NULL);
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    ASSERT_OK(kiln_network_mark_output(net, "q"));
    kiln_engine *e = build(net);
    kiln_network_free(net);
    float x[4] = {1.0f, 2.0f, NAN, 300.0f};
    /* (x, y) pairs: corner (-1,-1), NaN, huge, (1, 1) */
    float g[8] = {-1, -1, NAN, 0, 1e30f, -1e30f, 1, 1};
    float y[4];
    uint8_t q[4];
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "g", g, sizeof g));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    ASSERT_OK(kiln_context_bind(ctx, "q", q, sizeof q));
    ASSERT_OK(kiln_context_run(ctx));
    ASSERT_NEAR(y[0], 1.0, 0);   /* x[0, 0] */
    ASSERT_NEAR(y[1], 0.0, 0);   /* NaN coordinate: outside, zero padding */
    ASSERT_NEAR(y[2], 0.0, 0);   /* far outside */
    ASSERT_NEAR(y[3], 300.0, 0); /* x[1, 1] */
    ASSERT_EQ(q[0], 2);          /* 1 / 0.5 */
    ASSERT_EQ(q[1], 4);
    ASSERT_EQ(q[2], 0);          /* NaN -> 0 */
    ASSERT_EQ(q[3], 255);        /* saturated */
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

/* Truncations and byte flips of a valid model: errors, never crashes. */
TEST_IMPL(hostile_bytes) {
    uint8_t *buf;
    size_t size;
    ASSERT_OK(kiln__onnx_read_file(FIX "if_outer_layer.onnx", &buf, &size));
    uint8_t *m = malloc(size);
    int ok = 0, failed = 0;
    for (size_t n = 0; n < size; n++) {
        kiln_network *net = NULL;
        int rc = kiln_onnx_import_memory(buf, n, NULL, &net);
        if (rc == 0) { ok++; kiln_network_free(net); }
        else { failed++; ASSERT(net == NULL); ASSERT(kiln_errmsg()[0] != 0); }
    }
    ASSERT(failed > 0);
    for (int it = 0; it < 3000; it++) {
        memcpy(m, buf, size);
        int flips = 1 + (int)(test_rand_u64(&seed) % 4);
        for (int k = 0; k < flips; k++) m[test_rand_u64(&seed) % size] = (uint8_t)test_rand_u64(&seed);
        kiln_network *net = NULL;
        int rc = kiln_onnx_import_memory(m, size, NULL, &net);
        if (rc == 0) kiln_network_free(net);
    }
    free(m);
    kiln__free(buf);
    (void)ok;
}

/* 100000 nested messages: refused before protobuf-c recurses. */
TEST_IMPL(deep_nesting) {
    size_t cap = 1 << 20, len = 0;
    uint8_t *a = malloc(cap), *b = malloc(cap);
    for (int depth = 0; depth < 100000; depth++) {
        /* field 7 (ModelProto.graph / NodeProto... any message field), wire type 2 */
        size_t p = 0;
        b[p++] = (7 << 3) | 2;
        size_t v = len;
        do { b[p++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0)); v >>= 7; } while (v);
        if (p + len > cap) break;
        memcpy(b + p, a, len);
        len += p;
        uint8_t *t = a; a = b; b = t;
    }
    kiln_network *net = NULL;
    ASSERT_EQ(kiln_onnx_import_memory(a, len, NULL, &net), KILN_EFORMAT);
    ASSERT_CONTAINS(kiln_errmsg(), "nested deeper");
    free(a);
    free(b);
}

TEST_LIST(TEST_ENTRY(read_tensor_typed), TEST_ENTRY(read_tensor_malformed),
          TEST_ENTRY(import_add_relu), TEST_ENTRY(import_dynamic_dims),
          TEST_ENTRY(import_values_option), TEST_ENTRY(input_is_initializer),
          TEST_ENTRY(unsupported_lists_every_node), TEST_ENTRY(attribute_not_in_schema),
          TEST_ENTRY(plugin_namespace_override), TEST_ENTRY(domain_as_namespace),
          TEST_ENTRY(if_constant_condition), TEST_ENTRY(if_outer_scope_layer_value),
          TEST_ENTRY(if_runtime_condition), TEST_ENTRY(if_runtime_condition_shape_mismatch),
          TEST_ENTRY(external_data), TEST_ENTRY(external_data_fifo),
          TEST_ENTRY(attribute_conversion), TEST_ENTRY(model_local_functions),
          TEST_ENTRY(sparse_initializer_and_constant),
          TEST_ENTRY(ops_hostile_values), TEST_ENTRY(hostile_bytes),
          TEST_ENTRY(deep_nesting))
