/*
 * test_cuda_coverage.c — placement decides at build time what the CUDA
 * kernels cover, on any machine (the host-memory stand-in device of
 * src/device/cuda/fake.c, as test_cuda_placement.c): a layer whose CUDA
 * implementation does not take its types, rank or attributes is placed on
 * the CPU when the engine is built, never placed on the GPU to be refused
 * when it runs.
 *   - every built-in op with a CUDA implementation states its CUDA types
 *     (cuda_formats or cuda_check): without either, the builder would place
 *     it for any type;
 *   - built-in layers the kernels do not cover (int32 ReduceL1,
 *     BatchNormalization with training_mode=1) go to the CPU, their
 *     covered siblings to the GPU; --strict-device names the layer and the
 *     reason; Conv/ConvTranspose of every rank (3-D too) are GPU layers;
 *   - Shape of a tensor with dynamic dims is a GPU layer (ppocr_cls had
 *     one CPU layer, a Shape fed by a device->host copy of its input);
 *   - a plugin's cuda_check sees the layer (attributes, ranks) and its
 *     refusal places the layer on the CPU with its message; cuda_check
 *     without cuda_impl is refused at registration.
 */
#include "device/cuda/cuda_int.h"
#include "kiln_int.h"
#include "test.h"
#include "test_cuda_util.h"
#include "test_ops_util.h"

/* ------------------------------------------------------------ helpers */

/* One layer `op` (ai.onnx, opset ver) named "L" over inputs x (dims xd)
 * and optional constant w; output y. */
static kiln_network *one_layer(const char *op, int ver, kiln_dtype t, int xn, const int64_t *xd, int wn,
                               const int64_t *wd, const void *w, kiln_layer **L) {
    kiln_network *net = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(net, "x", t, xn, xd, NULL));
    if (wn) ASSERT_OK(kiln_network_add_constant(net, "w", t, wn, wd, w));
    const char *in[] = {"x", "w"}, *out[] = {"y"};
    char id[64];
    snprintf(id, sizeof id, "ai.onnx::%s", op);
    *L = kiln_network_add_layer(net, id, ver, "L", wn ? 2 : 1, in, 1, out);
    ASSERT(*L);
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    return net;
}

/* The device layer "L" lands on in a CUDA build (-1: the build failed). */
static int placed(const kiln_network *net) {
    kiln_engine *e = build_cuda(net, KILN_BUILD_NO_TIMING);
    if (!e) return -1;
    int d = layer_device(e, "L");
    kiln_engine_free(e);
    return d;
}

/* ------------------------------------------------------------ tests */

TEST_IMPL(builtin_ops_state_cuda_types) {
    int n = 0;
    for (int i = 0;; i++) {
        const kiln__op *op = kiln__registry_at(i);
        if (!op) break;
        const kiln_quick_op *q = op->quick;
        int reserved = !strncmp(op->ns, "ai.onnx", 7) || !strcmp(op->ns, "kiln"); /* libkiln's own namespaces */
        if (!op->builtin || !reserved || !q || !q->cuda_impl) continue;
        if (!strcmp(op->ns, "kiln") && !strcmp(op->name, "reformat")) continue; /* inserted, never placed */
        n++;
        if (!q->cuda_formats && !q->cuda_check)
            TEST__FAIL("%s::%s v%d has cuda_impl but neither cuda_formats nor cuda_check", op->ns, op->name,
                       op->version);
    }
    ASSERT(n > 100); /* the walk saw the built-in CUDA ops */
}

/* Conv and ConvTranspose take 1-D to 3-D windows on the GPU (3-D: the
 * direct kernel of conv3d.cu; a 3-D ConvTranspose used to be placed on the
 * GPU and refused by the 2-D launcher when run): every rank is a GPU layer,
 * and a strict build of each succeeds. */
TEST_IMPL(conv_ranks_on_gpu) {
    kiln__cuda_fake(1);
    uint64_t seed = 31;
    float w[2 * 3 * 2 * 2 * 2];
    test_fill_f32(&seed, w, 2 * 3 * 2 * 2 * 2, -1, 1);
    for (int transpose = 0; transpose < 2; transpose++)
        for (int nsp = 1; nsp <= 3; nsp++) {
            int64_t xd[5] = {1, 2, 3, 3, 3}, wd[5] = {transpose ? 2 : 3, transpose ? 3 : 2, 2, 2, 2};
            kiln_layer *L;
            kiln_network *net =
                one_layer(transpose ? "ConvTranspose" : "Conv", 11, KILN_DTYPE_F32, nsp + 2, xd, nsp + 2, wd, w, &L);
            kiln_engine *e = build_cuda(net, KILN_BUILD_NO_TIMING | KILN_BUILD_STRICT_DEVICE);
            ASSERT(e);
            ASSERT_EQ(layer_device(e, "L"), KILN_DEVICE_CUDA);
            kiln_engine_free(e);
            kiln_network_free(net);
        }
    kiln__cuda_fake(0);
}

/* The reductions' kernels take the float types (FP64 too) and, for the
 * exact ops (Sum Mean Max Min Prod), int32/int64: ReduceL1 of int32 and
 * ReduceSum of int8 stay on the CPU (for both the opset-1 op, which has
 * cuda_formats, and the opset-13/18 ones, which state types by cuda_check);
 * FP64 and int32 sums go to the GPU. */
TEST_IMPL(reduce_types_by_cuda_check) {
    kiln__cuda_fake(1);
    const struct {
        const char *op;
        int ver;
        kiln_dtype t;
        int dev;
        const char *why;
    } cases[] = {{"ReduceL1", 18, KILN_DTYPE_I32, KILN_DEVICE_CPU, "found i32"},
                 {"ReduceL1", 1, KILN_DTYPE_I32, KILN_DEVICE_CPU, "found i32"},
                 {"ReduceSum", 13, KILN_DTYPE_I8, KILN_DEVICE_CPU, "found i8"},
                 {"ReduceL1", 18, KILN_DTYPE_F64, KILN_DEVICE_CUDA, NULL},
                 {"ReduceSum", 13, KILN_DTYPE_I32, KILN_DEVICE_CUDA, NULL},
                 {"ReduceSum", 1, KILN_DTYPE_F32, KILN_DEVICE_CUDA, NULL}};
    int64_t xd[2] = {3, 4};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        kiln_layer *L;
        kiln_network *net = one_layer(cases[k].op, cases[k].ver, cases[k].t, 2, xd, 0, NULL, NULL, &L);
        ASSERT_EQ(placed(net), cases[k].dev);
        if (cases[k].why) {
            ASSERT(!build_cuda(net, KILN_BUILD_NO_TIMING | KILN_BUILD_STRICT_DEVICE));
            ASSERT_CONTAINS(kiln_errmsg(), cases[k].why);
        }
        kiln_network_free(net);
    }
    kiln__cuda_fake(0);
}

/* Tile on the GPU splits each repeated dim in two, within the CUDA copy's
 * 8 dims: a rank-6 Tile repeating 2 dims fits, repeating 3 does not (its
 * launcher would refuse it when run). */
TEST_IMPL(tile_rank_by_repeats) {
    kiln__cuda_fake(1);
    const int64_t reps[2][6] = {{2, 1, 1, 1, 1, 2}, {2, 1, 3, 1, 1, 2}};
    for (int k = 0; k < 2; k++) {
        kiln_network *net = kiln_network_create();
        int64_t xd[6] = {1, 2, 1, 2, 1, 2}, rd[1] = {6};
        ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 6, xd, NULL));
        ASSERT_OK(kiln_network_add_constant(net, "r", KILN_DTYPE_I64, 1, rd, reps[k]));
        const char *in[] = {"x", "r"}, *out[] = {"y"};
        ASSERT(kiln_network_add_layer(net, "ai.onnx::Tile", 13, "L", 2, in, 1, out));
        ASSERT_OK(kiln_network_mark_output(net, "y"));
        ASSERT_EQ(placed(net), k ? KILN_DEVICE_CPU : KILN_DEVICE_CUDA);
        kiln_network_free(net);
    }
    kiln__cuda_fake(0);
}

/* BatchNormalization's CUDA kernel is inference only. */
TEST_IMPL(batchnorm_training_on_cpu) {
    kiln__cuda_fake(1);
    for (int training = 0; training < 2; training++) {
        kiln_network *net = kiln_network_create();
        int64_t xd[4] = {2, 3, 2, 2}, cd[1] = {3};
        float s[3] = {1.5f, 0.5f, -1}, b[3] = {0.1f, 0.2f, 0.3f}, m[3] = {0, 1, -1}, v[3] = {1, 2, 0.5f};
        ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 4, xd, NULL));
        ASSERT_OK(kiln_network_add_constant(net, "s", KILN_DTYPE_F32, 1, cd, s));
        ASSERT_OK(kiln_network_add_constant(net, "b", KILN_DTYPE_F32, 1, cd, b));
        ASSERT_OK(kiln_network_add_constant(net, "m", KILN_DTYPE_F32, 1, cd, m));
        ASSERT_OK(kiln_network_add_constant(net, "v", KILN_DTYPE_F32, 1, cd, v));
        const char *in[] = {"x", "s", "b", "m", "v"}, *out[] = {"y"};
        kiln_layer *L = kiln_network_add_layer(net, "ai.onnx::BatchNormalization", 15, "L", 5, in, 1, out);
        ASSERT(L);
        ASSERT_OK(kiln_layer_set_int(L, "training_mode", training));
        ASSERT_OK(kiln_network_mark_output(net, "y"));
        ASSERT_EQ(placed(net), training ? KILN_DEVICE_CPU : KILN_DEVICE_CUDA);
        kiln_network_free(net);
    }
    kiln__cuda_fake(0);
}

/* Shape of a GPU tensor with a dynamic dim is a GPU layer: no copy of the
 * tensor to the host, no CPU layer between GPU layers (ppocr_cls). */
TEST_IMPL(shape_of_dynamic_tensor_on_gpu) {
    kiln__cuda_fake(1);
    kiln_network *net = kiln_network_create();
    int64_t xd[2] = {-1, 4}, lo[2] = {1, 4}, hi[2] = {8, 4};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, xd, NULL));
    const char *i1[] = {"x"}, *o1[] = {"r"}, *o2[] = {"y"}, *i2[] = {"r"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 14, "relu", 1, i1, 1, o1));
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Shape", 15, "L", 1, i2, 1, o2));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_device(cfg, KILN_DEVICE_CUDA);
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING | KILN_BUILD_STRICT_DEVICE);
    ASSERT_OK(kiln_build_config_set_profile(cfg, "x", 2, lo, lo, hi));
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    ASSERT_EQ(layer_device(e, "L"), KILN_DEVICE_CUDA);
    /* the only copies: x up, y down */
    int copies = 0;
    for (int32_t l = 0; l < e->nlayers; l++) copies += !strcmp(e->layers[l].op_name, "reformat");
    ASSERT_EQ(copies, 2);
    kiln_engine_free(e);
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    kiln__cuda_fake(0);
}

/* A plugin's cuda_check: sees the layer's attributes and ranks; its refusal
 * puts the layer on the CPU and explains strict mode's error. */
static int g_checks;
static int cc_impl(const kiln_call *c) {
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    for (int64_t i = 0, n = kiln_tensor_numel(&c->out[0]); i < n; i++) y[i] = 3 * x[i];
    return 0;
}
static int cc_cuda(const kiln_call *c) { return kiln__cuda_fake_kernel(cc_impl, c); }
static int cc_check(const kiln_shape_ctx *c) {
    g_checks++;
    if (kiln_attrs_int(c->attrs, "wide"))
        return kiln_set_error(KILN_EUNSUPPORTED, "ccheck: no wide kernel on the GPU");
    return c->in[0].ndim <= 2 ? 0 : kiln_set_error(KILN_EUNSUPPORTED, "ccheck: rank %d on the GPU", c->in[0].ndim);
}
static const kiln_attr_def cc_attrs[] = {{.name = "wide", .type = KILN_ATTR_INT, .def = "0"}, {NULL}};
static const kiln_combo cc_formats[] = {{"FP32", NULL, {0}}, {NULL, NULL, {0}}};
static const kiln_quick_op cc_op = {.ns = "ctest", .name = "ccheck", .version = 1, .min_inputs = 1,
                                    .max_inputs = 1, .num_outputs = 1, .attrs = cc_attrs, .shape = same_shape,
                                    .impl = cc_impl, .cuda_impl = cc_cuda, .cuda_formats = cc_formats,
                                    .cuda_check = cc_check};
KILN_OP(cc_op)

TEST_IMPL(plugin_cuda_check) {
    kiln__cuda_fake(1);
    const struct {
        int rank, wide, dev;
        const char *why;
    } cases[] = {{2, 0, KILN_DEVICE_CUDA, NULL},
                 {2, 1, KILN_DEVICE_CPU, "no wide kernel"},
                 {3, 0, KILN_DEVICE_CPU, "rank 3 on the GPU"}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        kiln_network *net = kiln_network_create();
        int64_t xd[3] = {2, 3, 4};
        ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, cases[k].rank, xd, NULL));
        const char *in[] = {"x"}, *out[] = {"y"};
        kiln_layer *L = kiln_network_add_layer(net, "ctest::ccheck", 1, "L", 1, in, 1, out);
        ASSERT(L);
        ASSERT_OK(kiln_layer_set_int(L, "wide", cases[k].wide));
        ASSERT_OK(kiln_network_mark_output(net, "y"));
        g_checks = 0;
        ASSERT_EQ(placed(net), cases[k].dev);
        ASSERT(g_checks >= 1);
        if (cases[k].why) {
            ASSERT(!build_cuda(net, KILN_BUILD_NO_TIMING | KILN_BUILD_STRICT_DEVICE));
            ASSERT_CONTAINS(kiln_errmsg(), cases[k].why);
        }
        kiln_network_free(net);
    }
    /* a check without a CUDA implementation is a registration error */
    kiln_quick_op bad = cc_op;
    bad.name = "ccheck_bad";
    bad.cuda_impl = NULL;
    bad.cuda_formats = NULL;
    ASSERT_EQ(kiln_register_quick_op(&bad), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "cuda_check given without cuda_impl");
    kiln__cuda_fake(0);
}

TEST_LIST(TEST_ENTRY(builtin_ops_state_cuda_types), TEST_ENTRY(conv_ranks_on_gpu),
          TEST_ENTRY(reduce_types_by_cuda_check), TEST_ENTRY(tile_rank_by_repeats), TEST_ENTRY(batchnorm_training_on_cpu),
          TEST_ENTRY(shape_of_dynamic_tensor_on_gpu), TEST_ENTRY(plugin_cuda_check))
