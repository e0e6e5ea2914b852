/*
 * test_cuda_placement.c — the CUDA backend's placement and runtime logic,
 * on any machine: the CUDA device is replaced by the host-memory stand-in
 * of src/device/cuda/fake.c (kiln__cuda_fake), whose allocations are
 * recorded.  Test ops with a "CUDA" implementation check that they get only
 * device memory, CPU ops that they get only host memory; results are
 * checked against a naive reference on fresh random inputs.  What runs on
 * the real GPU is test_cuda.c's job (skipped without one).
 */
#include "device/cuda/cuda_int.h"
#include "device/cuda/cuda_kernel_args.h"
#include "device/device.h"
#include "kiln_int.h"
#include "test.h"
#include "test_engine_util.h"
#include "test_cuda_util.h"
#include "test_ops_util.h"
#include "encoder_nets.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------ test ops */

static int g_gpu_calls, g_cpu_calls;

/* y[i, j] = 2 x[i, j] + w[j]; the CUDA side checks its pointers are device memory. */
static void gscale_f32(const kiln_call *c) {
    const float *x = c->in[0].data, *w = c->in[1].data;
    float *y = c->out[0].data;
    int64_t n = c->in[0].dims[0], ch = c->in[0].dims[1];
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < ch; j++) y[i * ch + j] = 2.0f * x[i * ch + j] + w[j];
}
static int gscale_cpu_body(const kiln_call *c) {
    gscale_f32(c);
    return 0;
}
static int gscale_cpu(const kiln_call *c) {
    g_cpu_calls++;
    return gscale_cpu_body(c);
}
static int gscale_gpu(const kiln_call *c) {
    for (int k = 0; k < 2; k++)
        if (!kiln__cuda_fake_owns(c->in[k].data) || c->in[k].device != KILN_DEVICE_CUDA)
            return kiln_set_error(KILN_EINTERNAL, "gscale (cuda): input %d is not in device memory", k);
    if (!kiln__cuda_fake_owns(c->out[0].data) || c->out[0].device != KILN_DEVICE_CUDA)
        return kiln_set_error(KILN_EINTERNAL, "gscale (cuda): output is not in device memory");
    if (kiln_exec_device(c->exec) != KILN_DEVICE_CUDA)
        return kiln_set_error(KILN_EINTERNAL, "gscale (cuda): exec is not the CUDA one");
    g_gpu_calls++;
    return kiln__cuda_fake_kernel(gscale_cpu_body, c);
}
static const kiln_combo gscale_cuda_formats[] = {{"FP32", NULL, {0}}, {NULL, NULL, {0}}};
static const kiln_quick_op gscale_op = {
    .ns = "ptest", .name = "gscale", .version = 1, .min_inputs = 2, .max_inputs = 2, .num_outputs = 1,
    .shape = same_shape, .impl = gscale_cpu, .cuda_impl = gscale_gpu, .cuda_formats = gscale_cuda_formats};
KILN_OP(gscale_op)

/* y = x + 1, CPU only: checks it gets host memory. */
static int addone_cpu(const kiln_call *c) {
    if (kiln__cuda_fake_owns(c->in[0].data) || kiln__cuda_fake_owns(c->out[0].data))
        return kiln_set_error(KILN_EINTERNAL, "addone (cpu) got device memory");
    g_cpu_calls++;
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    for (int64_t i = 0, n = kiln_tensor_numel(&c->out[0]); i < n; i++) y[i] = x[i] + 1.0f;
    return 0;
}
static const kiln_quick_op addone_op = {.ns = "ptest", .name = "addone", .version = 1, .min_inputs = 1,
                                        .max_inputs = 1, .num_outputs = 1, .shape = same_shape,
                                        .impl = addone_cpu};
KILN_OP(addone_op)

/* y = -x; its CUDA side takes FP16 only (so it runs on the GPU only in an
 * FP16 build), its CPU side FP32. */
static int neg_cpu(const kiln_call *c) {
    g_cpu_calls++;
    const float *x = c->in[0].data;
    float *y = c->out[0].data;
    for (int64_t i = 0, n = kiln_tensor_numel(&c->out[0]); i < n; i++) y[i] = -x[i];
    return 0;
}
/* The "kernel": runs with the fake's device memory readable (the host
 * cannot touch it otherwise). */
static int neg_f16_kernel(const kiln_call *c) {
    const uint16_t *x = c->in[0].data;
    uint16_t *y = c->out[0].data;
    for (int64_t i = 0, n = kiln_tensor_numel(&c->out[0]); i < n; i++) y[i] = x[i] ^ 0x8000u;
    return 0;
}
static int neg_gpu(const kiln_call *c) {
    if (c->in[0].dtype != KILN_DTYPE_F16 || !kiln__cuda_fake_owns(c->in[0].data) ||
        !kiln__cuda_fake_owns(c->out[0].data))
        return kiln_set_error(KILN_EINTERNAL, "neg (cuda): expected F16 device tensors");
    g_gpu_calls++;
    return kiln__cuda_fake_kernel(neg_f16_kernel, c);
}
static const kiln_combo neg_cuda_formats[] = {{"FP16", NULL, {0}}, {NULL, NULL, {0}}};
static const kiln_quick_op neg_op = {.ns = "ptest", .name = "neg", .version = 1, .min_inputs = 1, .max_inputs = 1,
                                     .num_outputs = 1, .shape = same_shape, .impl = neg_cpu, .cuda_impl = neg_gpu,
                                     .cuda_formats = neg_cuda_formats};
KILN_OP(neg_op)

/* ------------------------------------------------------------ helpers */

enum { N = 3, C = 5 };

/* x -> gscale(w1) -> a -> addone -> b -> gscale(w2) -> y;  a is also an
 * output.  Weights are fresh random values, returned in w1/w2. */
static kiln_network *mixed_net(uint64_t *seed, float *w1, float *w2) {
    kiln_network *net = kiln_network_create();
    int64_t dims[2] = {N, C}, wd[1] = {C};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, dims, NULL));
    for (int j = 0; j < C; j++) w1[j] = test_randf(seed, -1, 1), w2[j] = test_randf(seed, -1, 1);
    ASSERT_OK(kiln_network_add_constant(net, "w1", KILN_DTYPE_F32, 1, wd, w1));
    ASSERT_OK(kiln_network_add_constant(net, "w2", KILN_DTYPE_F32, 1, wd, w2));
    const char *i1[] = {"x", "w1"}, *o1[] = {"a"}, *i2[] = {"a"}, *o2[] = {"b"}, *i3[] = {"b", "w2"}, *o3[] = {"y"};
    ASSERT(kiln_network_add_layer(net, "ptest::gscale", 1, "g1", 2, i1, 1, o1));
    ASSERT(kiln_network_add_layer(net, "ptest::addone", 1, "cpu1", 1, i2, 1, o2));
    ASSERT(kiln_network_add_layer(net, "ptest::gscale", 1, "g2", 2, i3, 1, o3));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    ASSERT_OK(kiln_network_mark_output(net, "a"));
    return net;
}

/* Run e on random x; check y and a against the reference. */
static void run_and_check(kiln_engine *e, uint64_t *seed, const float *w1, const float *w2) {
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    for (int rep = 0; rep < 4; rep++) { /* later runs take the steady-state path; the last one debug mode */
        kiln_context_set_debug(ctx, rep == 3);
        float x[N * C], y[N * C], a[N * C];
        for (int i = 0; i < N * C; i++) x[i] = test_randf(seed, -2, 2);
        memset(y, 0xA5, sizeof y); /* poison */
        memset(a, 0xA5, sizeof a);
        ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
        ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
        ASSERT_OK(kiln_context_bind(ctx, "a", a, sizeof a));
        g_gpu_calls = g_cpu_calls = 0;
        ASSERT_OK(kiln_context_run(ctx));
        ASSERT_EQ(g_gpu_calls, 2);
        ASSERT_EQ(g_cpu_calls, 1);
        for (int i = 0; i < N; i++)
            for (int j = 0; j < C; j++) {
                double ra = 2.0 * x[i * C + j] + w1[j], rb = ra + 1.0, ry = 2.0 * rb + w2[j];
                ASSERT_NEAR(a[i * C + j], ra, 1e-5);
                ASSERT_NEAR(y[i * C + j], ry, 1e-5);
            }
    }
    kiln_context_free(ctx);
}

/* ------------------------------------------------------------ tests */

TEST_IMPL(mixed_placement) {
    kiln__cuda_fake(1);
    uint64_t seed = 42;
    float w1[C], w2[C];
    kiln_network *net = mixed_net(&seed, w1, w2);
    kiln_engine *e = build_cuda(net, KILN_BUILD_NO_TIMING);
    ASSERT(e);
    ASSERT_EQ(e->device, KILN_DEVICE_CUDA);
    ASSERT_EQ(layer_device(e, "g1"), KILN_DEVICE_CUDA);
    ASSERT_EQ(layer_device(e, "cpu1"), KILN_DEVICE_CPU);
    ASSERT_EQ(layer_device(e, "g2"), KILN_DEVICE_CUDA);
    /* copies: x up, a down (one copy serves addone and the output), b up, y down */
    int up = 0, down = 0;
    for (int32_t l = 0; l < e->nlayers; l++) {
        const kiln__elayer *L = &e->layers[l];
        if (strcmp(L->op_name, "reformat")) continue;
        int from = e->tensors[L->in[0]].loc, to = e->tensors[L->out[0]].loc;
        up += from == KILN_DEVICE_CPU && to == KILN_DEVICE_CUDA;
        down += from == KILN_DEVICE_CUDA && to == KILN_DEVICE_CPU;
        ASSERT_EQ(L->device, KILN_DEVICE_CUDA);
    }
    ASSERT_EQ(up, 2);
    ASSERT_EQ(down, 2);
    /* network I/O stays in host memory */
    for (int32_t i = 0; i < e->ninputs; i++) ASSERT_EQ(e->tensors[e->inputs[i]].loc, KILN_DEVICE_CPU);
    for (int32_t i = 0; i < e->noutputs; i++) ASSERT_EQ(e->tensors[e->outputs[i]].loc, KILN_DEVICE_CPU);
    run_and_check(e, &seed, w1, w2);

    /* the file keeps the placement; the loaded engine runs the same way */
    void *buf = NULL;
    size_t size = 0;
    ASSERT_OK(kiln_engine_serialize(e, &buf, &size));
    kiln_engine *e2 = NULL;
    ASSERT_OK(kiln_engine_load_memory(buf, size, &e2));
    ASSERT_EQ(e2->device, KILN_DEVICE_CUDA);
    ASSERT_EQ(layer_device(e2, "cpu1"), KILN_DEVICE_CPU);
    ASSERT_EQ(layer_device(e2, "g2"), KILN_DEVICE_CUDA);
    run_and_check(e2, &seed, w1, w2);

    /* inspect names devices and copies */
    char *text = test_inspect_text(e2);
    ASSERT_CONTAINS(text, "[cpu]");
    ASSERT_CONTAINS(text, "copy host->device");
    ASSERT_CONTAINS(text, "copy device->host");
    ASSERT_CONTAINS(text, "@cuda");
    free(text);
    kiln_free(buf);
    kiln_engine_free(e2);
    kiln_engine_free(e);
    kiln_network_free(net);
    kiln__cuda_fake(0);
}

/* Two contexts share one upload of the weights, in device memory. */
TEST_IMPL(weights_uploaded_once) {
    kiln__cuda_fake(1);
    uint64_t seed = 7;
    float w1[C], w2[C];
    kiln_network *net = mixed_net(&seed, w1, w2);
    kiln_engine *e = build_cuda(net, KILN_BUILD_NO_TIMING);
    ASSERT(e);
    kiln_context *c1 = NULL, *c2 = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &c1));
    void *first = e->dweights;
    ASSERT(first && kiln__cuda_fake_owns(first));
    ASSERT_OK(kiln_context_create(e, 1, &c2));
    ASSERT(e->dweights == first);
    kiln_context_free(c1);
    kiln_context_free(c2);
    kiln_engine_free(e);
    kiln_network_free(net);
    kiln__cuda_fake(0);
}

/* --strict-device: a layer left on the CPU is an error naming it. */
TEST_IMPL(strict_device_lists_cpu_layers) {
    kiln__cuda_fake(1);
    uint64_t seed = 9;
    float w1[C], w2[C];
    kiln_network *net = mixed_net(&seed, w1, w2);
    ASSERT(!build_cuda(net, KILN_BUILD_NO_TIMING | KILN_BUILD_STRICT_DEVICE));
    ASSERT_CONTAINS(kiln_errmsg(), "cpu1");
    ASSERT_CONTAINS(kiln_errmsg(), "ptest::addone");
    kiln_network_free(net);
    kiln__cuda_fake(0);
}

/* A type-agnostic layer between two FP16-only GPU layers in an FP16 build
 * (stand-in device, no timing): its input arrives in FP16, so it stays
 * FP16 -- its FP32 candidates are not even considered -- and the engine
 * casts only at the network's input and output.  Unsqueeze-13 and
 * Squeeze-13 (axes as an input, and Squeeze-13 without one) took only their
 * logical types before, so each put a cast before and after itself (BERT's
 * QKV split). */
TEST_IMPL(fp16_chain_through_axes_ops) {
    kiln__cuda_fake(1);
    kiln_network *net = kiln_network_create();
    int64_t dims[2] = {3, 17}, one[1] = {1}, ax0 = 0;
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, dims, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "axes", KILN_DTYPE_I64, 1, one, &ax0));
    static const struct {
        const char *op, *name, *in[2], *out;
    } L[] = {{"ptest::neg", "neg1", {"x", NULL}, "a"},
             {"ai.onnx::Unsqueeze", "unsq", {"a", "axes"}, "b"},
             {"ai.onnx::Squeeze", "sq", {"b", "axes"}, "c"},
             {"ai.onnx::Unsqueeze", "unsq2", {"c", "axes"}, "d"},
             {"ai.onnx::Squeeze", "sq_all", {"d", NULL}, "e"}, /* no axes: the one-slot row */
             {"ptest::neg", "neg2", {"e", NULL}, "y"}};
    for (size_t i = 0; i < sizeof L / sizeof L[0]; i++)
        ASSERT(kiln_network_add_layer(net, L[i].op, L[i].op[0] == 'a' ? 13 : 1, L[i].name, L[i].in[1] ? 2 : 1, L[i].in,
                                      1, &L[i].out));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_engine *e = build_cuda(net, KILN_BUILD_NO_TIMING | KILN_BUILD_FP16);
    ASSERT(e);
    int casts = 0, f16 = 0;
    for (int32_t l = 0; l < e->nlayers; l++) {
        const kiln__elayer *el = &e->layers[l];
        const kiln__etensor *a = &e->tensors[el->in[0]], *b = &e->tensors[el->out[0]];
        if (!strcmp(el->op_name, "reformat")) casts += a->dtype != b->dtype;
        if (!strcmp(el->op_name, "Unsqueeze") || !strcmp(el->op_name, "Squeeze")) {
            ASSERT_EQ(el->device, KILN_DEVICE_CUDA);
            f16 += a->dtype == KILN_DTYPE_F16 && b->dtype == KILN_DTYPE_F16;
        }
    }
    ASSERT_EQ(f16, 4);
    ASSERT_EQ(casts, 2); /* x in, y out */
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    uint64_t seed = 11;
    float x[3 * 17], y[3 * 17];
    for (int i = 0; i < 3 * 17; i++) x[i] = test_randf(&seed, -4, 4);
    memset(y, 0xA5, sizeof y);
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    ASSERT_OK(kiln_context_run(ctx));
    for (int i = 0; i < 3 * 17; i++) ASSERT_NEAR(y[i], x[i], fabs(x[i]) * 1e-3); /* -(-x), through FP16 */
    kiln_context_free(ctx);
    kiln_engine_free(e);
    kiln_network_free(net);
    kiln__cuda_fake(0);
}

/* An op whose CUDA side is FP16-only: on the CPU in an FP32 build, on the
 * GPU in an FP16 build (F32 copied up, cast on the GPU; cast on the GPU,
 * F32 copied down: the host never converts). */
TEST_IMPL(fp16_moves_layer_to_gpu) {
    kiln__cuda_fake(1);
    kiln_network *net = kiln_network_create();
    int64_t dims[1] = {17};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 1, dims, NULL));
    const char *in[] = {"x"}, *out[] = {"y"};
    ASSERT(kiln_network_add_layer(net, "ptest::neg", 1, "neg", 1, in, 1, out));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    for (int fp16 = 0; fp16 < 2; fp16++) {
        kiln_engine *e = build_cuda(net, KILN_BUILD_NO_TIMING | (fp16 ? KILN_BUILD_FP16 : 0));
        ASSERT(e);
        ASSERT_EQ(layer_device(e, "neg"), fp16 ? KILN_DEVICE_CUDA : KILN_DEVICE_CPU);
        int casts = 0, moves = 0;
        for (int32_t l = 0; l < e->nlayers; l++) {
            const kiln__elayer *L = &e->layers[l];
            if (strcmp(L->op_name, "reformat")) continue;
            const kiln__etensor *a = &e->tensors[L->in[0]], *b = &e->tensors[L->out[0]];
            ASSERT_EQ(L->device, KILN_DEVICE_CUDA);
            if (a->loc != b->loc) {
                moves++;
                ASSERT_EQ(a->dtype, KILN_DTYPE_F32);
                ASSERT_EQ(b->dtype, KILN_DTYPE_F32);
            } else {
                casts++;
                ASSERT_EQ(a->loc, KILN_DEVICE_CUDA);
            }
        }
        ASSERT_EQ(casts, fp16 ? 2 : 0);
        ASSERT_EQ(moves, fp16 ? 2 : 0);
        kiln_context *ctx = NULL;
        ASSERT_OK(kiln_context_create(e, 1, &ctx));
        uint64_t seed = 3 + (uint64_t)fp16;
        float x[17], y[17];
        for (int i = 0; i < 17; i++) x[i] = test_randf(&seed, -4, 4);
        memset(y, 0xA5, sizeof y);
        ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
        ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
        g_gpu_calls = g_cpu_calls = 0;
        ASSERT_OK(kiln_context_run(ctx));
        ASSERT_EQ(g_gpu_calls, fp16);
        for (int i = 0; i < 17; i++) ASSERT_NEAR(y[i], -x[i], fp16 ? 4e-3 : 0); /* FP16: 2^-11 relative */
        kiln_context_free(ctx);
        kiln_engine_free(e);
    }
    kiln_network_free(net);
    kiln__cuda_fake(0);
}

/* I/O bound to device memory: x is read by the GPU's copy, y (produced on
 * the GPU, read by no CPU layer) is written in place, a (also read by the
 * CPU layer addone) goes through host staging and is then copied there;
 * all values right.  An input in device memory that a CPU layer reads is a
 * clear error. */
TEST_IMPL(device_memory_bindings) {
    kiln__cuda_fake(1);
    const kiln__device *d = kiln__cuda_fake_device();
    uint64_t seed = 5;
    float w1[C], w2[C];
    kiln_network *net = mixed_net(&seed, w1, w2);
    kiln_engine *e = build_cuda(net, KILN_BUILD_NO_TIMING);
    ASSERT(e);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    float *x = NULL, *y = NULL, *a = NULL;
    ASSERT_OK(d->alloc(N * C * sizeof(float), (void **)&x));
    ASSERT_OK(d->alloc(N * C * sizeof(float), (void **)&y));
    ASSERT_OK(d->alloc(N * C * sizeof(float), (void **)&a));
    ASSERT(d->is_device_ptr(y) && !d->is_device_ptr(w1));
    const size_t nb = N * C * sizeof(float);
    for (int rep = 0; rep < 2; rep++) { /* the host reaches device memory only through the device's copy */
        float xh[N * C], yh[N * C], ah[N * C];
        for (int i = 0; i < N * C; i++) xh[i] = test_randf(&seed, -2, 2);
        ASSERT_OK(d->copy(x, xh, nb, NULL));
        ASSERT_OK(d->memset(y, 0xA5, nb, NULL)); /* poison */
        ASSERT_OK(d->memset(a, 0xA5, nb, NULL));
        ASSERT_OK(kiln_context_bind(ctx, "x", x, nb));
        ASSERT_OK(kiln_context_bind(ctx, "y", y, nb));
        ASSERT_OK(kiln_context_bind(ctx, "a", a, nb));
        ASSERT_OK(kiln_context_run(ctx));
        ASSERT_OK(d->copy(yh, y, nb, NULL));
        ASSERT_OK(d->copy(ah, a, nb, NULL));
        for (int i = 0; i < N; i++)
            for (int j = 0; j < C; j++) {
                double ra = 2.0 * xh[i * C + j] + w1[j], ry = 2.0 * (ra + 1.0) + w2[j];
                ASSERT_NEAR(ah[i * C + j], ra, 1e-5);
                ASSERT_NEAR(yh[i * C + j], ry, 1e-5);
            }
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
    kiln_network_free(net);

    /* ptest::neg runs on the CPU in an FP32 build: it reads x itself */
    net = kiln_network_create();
    int64_t dims[1] = {N * C};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 1, dims, NULL));
    const char *in[] = {"x"}, *out[] = {"y"};
    ASSERT(kiln_network_add_layer(net, "ptest::neg", 1, "neg", 1, in, 1, out));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    ASSERT((e = build_cuda(net, KILN_BUILD_NO_TIMING)));
    ASSERT_EQ(layer_device(e, "neg"), KILN_DEVICE_CPU);
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    float yh[N * C];
    ASSERT_OK(kiln_context_bind(ctx, "x", x, nb));
    ASSERT_OK(kiln_context_bind(ctx, "y", yh, sizeof yh));
    ASSERT_EQ(kiln_context_run(ctx), KILN_EINVAL);
    ASSERT_CONTAINS(kiln_errmsg(), "input 'x' is bound to device memory, but layer 'neg' reads it on the CPU");
    kiln_context_free(ctx);
    kiln_engine_free(e);
    kiln_network_free(net);
    d->free(x);
    d->free(y);
    d->free(a);
    kiln__cuda_fake(0);
}

/* The fake's device memory is not host memory: the fake's copy, memset and
 * kernels reach it, plain host code faults (so CI catches host code that
 * reads a device pointer). */
static int read_first_byte(const kiln_call *c) { return ((const volatile uint8_t *)c->in[0].data)[0]; }
TEST_IMPL(host_cannot_read_device_memory) {
    kiln__cuda_fake(1);
    const kiln__device *d = kiln__device_get(KILN_DEVICE_CUDA);
    ASSERT(d);
    void *p = NULL;
    ASSERT_OK(d->alloc(100, &p));
    ASSERT_OK(d->memset(p, 0x5A, 100, NULL));
    uint8_t back[100];
    memset(back, 0, sizeof back);
    ASSERT_OK(d->copy(back, p, sizeof back, NULL));
    for (int i = 0; i < 100; i++) ASSERT_EQ(back[i], 0x5A);
    kiln_tensor t = {.data = p};
    kiln_call c = {.in = &t, .nin = 1};
    ASSERT_EQ(kiln__cuda_fake_kernel(read_first_byte, &c), 0x5A);
    fflush(NULL);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        /* quiet: the fault is the expected outcome (ASan reports it and exits 1) */
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, 2);
        signal(SIGSEGV, SIG_DFL);
        volatile uint8_t v = *(volatile uint8_t *)p; /* must fault */
        _exit(v == 0x5A ? 42 : 43);
    }
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    if (WIFEXITED(st)) ASSERT(WEXITSTATUS(st) != 42 && WEXITSTATUS(st) != 43); /* the read went through */
    d->free(p);
    kiln__cuda_fake(0);
}

/* GPU epilogue fusion: a Conv on the GPU takes the activation after it as
 * data (its kiln_cu_act code and parameters, applied in its kernels): Relu
 * and HardSigmoid(alpha) fuse, and survive a save and load; a Clip with
 * constant min/max inputs stays a layer.  (Kernels are not faked: this
 * checks the builder and the engine; test_cuda_ops and the GPU model
 * checks run them.) */
TEST_IMPL(gpu_activation_fusion) {
    kiln__cuda_fake(1);
    uint64_t seed = 11;
    kiln_network *net = kiln_network_create();
    int64_t xd[4] = {1, 4, 6, 6}, wd[4] = {8, 4, 3, 3}, bd[1] = {8}, sd[1] = {1};
    float w[8 * 4 * 9], b[8], lo = 0.0f, hi = 6.0f;
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) w[i] = test_randf(&seed, -1, 1);
    for (int i = 0; i < 8; i++) b[i] = test_randf(&seed, -1, 1);
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 4, xd, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "w", KILN_DTYPE_F32, 4, wd, w));
    ASSERT_OK(kiln_network_add_constant(net, "b", KILN_DTYPE_F32, 1, bd, b));
    ASSERT_OK(kiln_network_add_constant(net, "lo", KILN_DTYPE_F32, 0, sd, &lo));
    ASSERT_OK(kiln_network_add_constant(net, "hi", KILN_DTYPE_F32, 0, sd, &hi));
    const char *ci[] = {"x", "w", "b"}, *c1[] = {"c1"}, *c2[] = {"c2"};
    const char *r1[] = {"y1"}, *r2[] = {"y2"}, *r3[] = {"y3"}, *k3[] = {"c3", "lo", "hi"};
    int64_t pads[4] = {1, 1, 1, 1};
    const char *convs_in[3][1] = {{"c1"}, {"c2"}, {"c3"}}, *cname[3] = {"conv1", "conv2", "conv3"};
    for (int i = 0; i < 3; i++) {
        kiln_layer *L = kiln_network_add_layer(net, "ai.onnx::Conv", 11, cname[i], 3, ci, 1, convs_in[i]);
        ASSERT(L);
        ASSERT_OK(kiln_layer_set_ints(L, "pads", pads, 4));
    }
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 14, "relu", 1, c1, 1, r1));
    ASSERT(kiln_network_add_layer(net, "ai.onnx::HardSigmoid", 6, "hsig", 1, c2, 1, r2));
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Clip", 13, "clip", 3, k3, 1, r3));
    ASSERT_OK(kiln_network_mark_output(net, "y1"));
    ASSERT_OK(kiln_network_mark_output(net, "y2"));
    ASSERT_OK(kiln_network_mark_output(net, "y3"));
    kiln_engine *e = build_cuda(net, KILN_BUILD_NO_TIMING);
    ASSERT(e);
    void *buf = NULL;
    size_t size = 0;
    ASSERT_OK(kiln_engine_serialize(e, &buf, &size));
    kiln_engine *e2 = NULL;
    ASSERT_OK(kiln_engine_load_memory(buf, size, &e2));
    const kiln_engine *es[2] = {e, e2};
    for (int k = 0; k < 2; k++) {
        int convs = 0, clips = 0;
        for (int32_t l = 0; l < es[k]->nlayers; l++) {
            const kiln__elayer *el = &es[k]->layers[l];
            ASSERT(strcmp(el->op_name, "Relu") && strcmp(el->op_name, "HardSigmoid"));
            clips += !strcmp(el->op_name, "Clip");
            if (strcmp(el->op_name, "Conv")) continue;
            convs++;
            ASSERT_EQ(el->device, KILN_DEVICE_CUDA);
            float a = -1, bb = -1;
            int act = kiln__epi_cuda_act(el->epi_rt, &a, &bb);
            if (!strcmp(el->name, "conv1")) {
                ASSERT_EQ(act, KILN_CU_ACT_RELU);
            } else if (!strcmp(el->name, "conv2")) {
                ASSERT_EQ(act, KILN_CU_ACT_HARDSIGMOID);
                ASSERT_NEAR(a, 0.2, 1e-7); /* ONNX defaults alpha 0.2, beta 0.5 */
                ASSERT_NEAR(bb, 0.5, 1e-7);
            } else {
                ASSERT_EQ(act, KILN_CU_ACT_NONE);
                ASSERT_EQ(el->nepi, 0);
            }
        }
        ASSERT_EQ(convs, 3);
        ASSERT_EQ(clips, 1);
    }
    /* inspect names the fused op on its producer */
    char *text = test_inspect_text(e2);
    ASSERT_CONTAINS(text, "+ Relu");
    ASSERT_CONTAINS(text, "+ HardSigmoid");
    free(text);
    kiln_free(buf);
    kiln_engine_free(e2);
    kiln_engine_free(e);
    kiln_network_free(net);
    kiln__cuda_fake(0);
}

/* No GPU (here: no fake, and the machine's driver absent or not): building
 * for CUDA and running a CUDA engine fail with a message that says why. */
TEST_IMPL(no_gpu_errors_are_clear) {
    kiln__cuda_fake(0);
    if (kiln__device_get(KILN_DEVICE_CUDA)) {
        fprintf(stderr, "a real GPU is present: the no-GPU errors are not reachable here\n");
        return;
    }
    uint64_t seed = 11;
    float w1[C], w2[C];
    kiln_network *net = mixed_net(&seed, w1, w2);
    ASSERT(!build_cuda(net, KILN_BUILD_NO_TIMING));
    ASSERT_CONTAINS(kiln_errmsg(), "no CUDA device");
    /* an engine built (on the fake GPU) for CUDA, run where there is none */
    kiln__cuda_fake(1);
    kiln_engine *e = build_cuda(net, KILN_BUILD_NO_TIMING);
    ASSERT(e);
    kiln__cuda_fake(0);
    kiln_context *ctx = NULL;
    ASSERT_EQ(kiln_context_create(e, 1, &ctx), KILN_EDEVICE);
    ASSERT_CONTAINS(kiln_errmsg(), "engine built for CUDA (cuda:fake GPU");
    ASSERT_CONTAINS(kiln_errmsg(), "no CUDA device");
    kiln_engine_free(e);
    kiln_network_free(net);
}

/* A transformer feed-forward block (encoder_nets.h) on the GPU: the erf GELU's
 * five layers become one Gelu, each MatMul takes its bias Add (converted
 * to the layer's type) and activation as its epilogue, Shape of a dynamic
 * input runs on the GPU (strict device passes); the chain survives a file
 * round trip; without fusion nothing is fused. */
static void check_ffn(const kiln_engine *e) {
    int mm = 0;
    for (int32_t l = 0; l < e->nlayers; l++) {
        const kiln__elayer *el = &e->layers[l];
        ASSERT_EQ(el->device, KILN_DEVICE_CUDA);
        ASSERT(strcmp(el->op_name, "Erf") && strcmp(el->op_name, "Div") && strcmp(el->op_name, "Add") &&
               strcmp(el->op_name, "Mul") && strcmp(el->op_name, "Relu") && strcmp(el->op_name, "Gelu"));
        if (strcmp(el->op_name, "MatMul")) continue;
        mm++;
        char desc[128];
        kiln__epi_describe(el, desc, sizeof desc);
        int first = !strcmp(el->name, "linear1");
        ASSERT(!strcmp(desc, first ? " + Add + Gelu" : " + Add + Relu"));
        float a, b;
        int64_t n = -1;
        ASSERT_EQ(kiln__epi_cuda_act(el->epi_rt, &a, &b), first ? KILN_CU_ACT_GELU : KILN_CU_ACT_RELU);
        ASSERT(!kiln__epi_cuda_bias(el->epi_rt, &n)); /* no weights uploaded: no device pointer */
        ASSERT_EQ(n, first ? FFN_N : FFN_N2);
        const kiln__etensor *bias = &e->tensors[el->epi[0].in[1 - el->epi[0].x]];
        ASSERT_EQ(bias->dtype, e->tensors[el->out[0]].dtype); /* the layer's type (--fp16: F16 if chosen) */
        ASSERT_EQ(bias->kind, KILN__ET_CONST);
    }
    ASSERT_EQ(mm, 2);
}

TEST_IMPL(gpu_linear_bias_gelu_fusion) {
    kiln__cuda_fake(1);
    ffn_w w;
    ffn_weights(&w, 21);
    kiln_network *net = ffn_network(&w);
    for (int k = 0; k < 2; k++) {
        kiln_build_config *cfg =
            ffn_config(KILN_BUILD_NO_TIMING | KILN_BUILD_STRICT_DEVICE | (k ? KILN_BUILD_FP16 : 0));
        kiln_engine *e = NULL;
        ASSERT_OK(kiln_build(net, cfg, &e, NULL));
        kiln_build_config_free(cfg);
        check_ffn(e);
        kiln_engine *e2 = test_roundtrip(e);
        check_ffn(e2);
        kiln_engine_free(e2);
        kiln_engine_free(e);
    }
    /* MatMul by a vector: the output's last dim is A's rows, not a bias axis */
    kiln_network *nv = kiln_network_create();
    int64_t ad[2] = {4, 6}, vd[1] = {6}, bd[1] = {4};
    float vw[6] = {1, 2, 3, 4, 5, 6}, vb[4] = {1, 2, 3, 4};
    ASSERT_OK(kiln_network_add_input(nv, "a", KILN_DTYPE_F32, 2, ad, NULL));
    ASSERT_OK(kiln_network_add_constant(nv, "w", KILN_DTYPE_F32, 1, vd, vw));
    ASSERT_OK(kiln_network_add_constant(nv, "b", KILN_DTYPE_F32, 1, bd, vb));
    const char *mi[2] = {"a", "w"}, *mo[1] = {"h"}, *ai[2] = {"h", "b"}, *ao[1] = {"y"};
    ASSERT(kiln_network_add_layer(nv, "ai.onnx::MatMul", 13, "mv", 2, mi, 1, mo));
    ASSERT(kiln_network_add_layer(nv, "ai.onnx::Add", 14, "add", 2, ai, 1, ao));
    ASSERT_OK(kiln_network_mark_output(nv, "y"));
    kiln_engine *ev = build_cuda(nv, KILN_BUILD_NO_TIMING);
    ASSERT(ev);
    for (int32_t l = 0; l < ev->nlayers; l++) ASSERT_EQ(ev->layers[l].nepi, 0);
    kiln_engine_free(ev);
    kiln_network_free(nv);

    kiln_build_config *cfg = ffn_config(KILN_BUILD_NO_TIMING | KILN_BUILD_NO_FUSION);
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    int erf = 0;
    for (int32_t l = 0; l < e->nlayers; l++) {
        erf += !strcmp(e->layers[l].op_name, "Erf");
        ASSERT_EQ(e->layers[l].nepi, 0);
    }
    ASSERT_EQ(erf, 1);
    kiln_engine_free(e);
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    kiln__cuda_fake(0);
}

/* Attention chains (encoder_nets.h) become kiln::attention layers on the
 * GPU: y1's Transpose and both scalar Muls folded in (K, scale 1/8), y2's
 * Div folded in with K^T kept (the transpose is also an output); the
 * residual Add + LayerNormalization one kiln::add_layernorm; without
 * fusion the chains stay. */
static void check_attn(const kiln_engine *e, int fused) {
    int attn = 0, softmax = 0;
    for (int32_t l = 0; l < e->nlayers; l++) {
        const kiln__elayer *el = &e->layers[l];
        ASSERT_EQ(el->device, KILN_DEVICE_CUDA);
        softmax += !strcmp(el->op_name, "Softmax");
        if (strcmp(el->op_name, "attention")) continue;
        attn++;
        kiln_attrs a = kiln__attrset_view(&el->attrs);
        int first = !strcmp(el->name, "pv1");
        ASSERT(first || !strcmp(el->name, "pv2"));
        ASSERT_NEAR(kiln_attrs_float(&a, "scale"), 0.125, 1e-6);
        ASSERT_EQ(kiln_attrs_int(&a, "k_trans"), first ? 0 : 1);
        const char *kn = e->tensors[el->in[1]].name; /* "k:FP32:LINEAR:cuda": the device copy of k */
        ASSERT(!strncmp(kn, first ? "k:" : "kt:", first ? 2 : 3));
    }
    ASSERT_EQ(attn, fused ? 2 : 0);
    ASSERT_EQ(softmax, fused ? 0 : 2);
    int addnorm = 0, ln = 0;
    for (int32_t l = 0; l < e->nlayers; l++) {
        addnorm += !strcmp(e->layers[l].op_name, "add_layernorm");
        ln += !strcmp(e->layers[l].op_name, "LayerNormalization");
    }
    ASSERT_EQ(addnorm, fused);
    ASSERT_EQ(ln, !fused);
}

TEST_IMPL(gpu_attention_rewrite) {
    kiln__cuda_fake(1);
    kiln_network *net = attn_network();
    for (int fused = 1; fused >= 0; fused--) {
        kiln_build_config *cfg =
            attn_config(KILN_BUILD_NO_TIMING | KILN_BUILD_STRICT_DEVICE | (fused ? 0 : KILN_BUILD_NO_FUSION));
        kiln_engine *e = NULL;
        ASSERT_OK(kiln_build(net, cfg, &e, NULL));
        kiln_build_config_free(cfg);
        check_attn(e, fused);
        kiln_engine *e2 = test_roundtrip(e);
        check_attn(e2, fused);
        kiln_engine_free(e2);
        kiln_engine_free(e);
    }
    kiln_network_free(net);
    kiln__cuda_fake(0);
}

/* The torch MultiheadAttention export (mha_encoder.onnx): each attention
 * reads the packed QKV projection through views and writes [B, S, H, D]
 * (y_perm), so the 5 Transposes, 3 Gathers and the Reshape/Squeeze chain
 * around it go, and the out-projection's result is already [B, S, E]: its
 * Transpose back (batch_first) is a Reshape sharing the buffer of its input;
 * the QKV projection reads x itself (the views take its rows in (b, s)
 * order), so the Transpose of x into [S, B, E] goes too
 * (builder/transformer.c): no Transpose is left. */
static int g_mha_out_alias; /* out-projection Transposes turned into aliasing Reshapes */

static void mha_count(const kiln_engine *e, int *attn, int *views, int *tr, int *gather) {
    *attn = *views = *tr = *gather = 0;
    g_mha_out_alias = 0;
    for (int32_t l = 0; l < e->nlayers; l++) {
        const kiln__elayer *el = &e->layers[l];
        *tr += !strcmp(el->op_name, "Transpose");
        *gather += !strcmp(el->op_name, "Gather") && e->tensors[el->out[0]].dtype != KILN_DTYPE_I64; /* not shapes */
        if (!strcmp(el->op_name, "Reshape") && strstr(el->name, "Transpose_7")) { /* the out-projection's */
            ASSERT_EQ(e->tensors[el->out[0]].alias_of, el->in[0]);
            g_mha_out_alias++;
        }
        if (strcmp(el->op_name, "attention")) continue;
        (*attn)++;
        kiln_attrs a = kiln__attrset_view(&el->attrs);
        const int64_t *vw = NULL, *perm = NULL;
        if (kiln_attrs_ints(&a, "views", &vw) == 42 && kiln_attrs_ints(&a, "y_perm", &perm) == 4) {
            (*views)++;
            ASSERT(perm[0] == 0 && perm[1] == 2 && perm[2] == 1 && perm[3] == 3); /* [B, S, H, D] */
            ASSERT_EQ(el->in[0], el->in[1]); /* all three views of one packed tensor */
            ASSERT_EQ(el->in[1], el->in[2]);
        }
    }
}

TEST_IMPL(gpu_attention_views) {
    kiln__cuda_fake(1);
    int n[2], attn[2], views[2], tr[2], gather[2];
    for (int fused = 0; fused < 2; fused++) {
        kiln_engine *e = mha_engine(KILN_DEVICE_CUDA, KILN_BUILD_NO_TIMING | KILN_BUILD_STRICT_DEVICE |
                                                          (fused ? 0 : KILN_BUILD_NO_FUSION));
        n[fused] = e->nlayers;
        mha_count(e, &attn[fused], &views[fused], &tr[fused], &gather[fused]);
        ASSERT_EQ(g_mha_out_alias, fused ? 2 : 0);
        kiln_engine *e2 = test_roundtrip(e);
        int a2, v2, t2, g2;
        mha_count(e2, &a2, &v2, &t2, &g2);
        ASSERT_EQ(v2, views[fused]);
        kiln_engine_free(e2);
        kiln_engine_free(e);
    }
    printf("mha_encoder: %d layers unfused (%d Transpose, %d data Gather), %d fused (%d attention, %d with views; %d "
           "Transpose, %d data Gather)\n", n[0], tr[0], gather[0], n[1], attn[1], views[1], tr[1], gather[1]);
    ASSERT_EQ(attn[1], 2);
    ASSERT_EQ(views[1], 2);
    ASSERT_EQ(tr[1], 0);
    ASSERT_EQ(gather[1], 0);
    kiln__cuda_fake(0);
}

/* Add(scores, mask) before the Softmax becomes the attention's mask input. */
TEST_IMPL(gpu_attention_mask_rewrite) {
    kiln__cuda_fake(1);
    kiln_network *net = mask_network();
    kiln_build_config *cfg = mask_config(KILN_DEVICE_CUDA, KILN_BUILD_NO_TIMING | KILN_BUILD_STRICT_DEVICE);
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    int attn = 0, other = 0;
    for (int32_t l = 0; l < e->nlayers; l++) {
        const kiln__elayer *el = &e->layers[l];
        if (!strcmp(el->op_name, "attention")) {
            attn++;
            ASSERT_EQ(el->nin, 4);
            ASSERT(!strncmp(e->tensors[el->in[3]].name, "mask", 4));
            kiln_attrs a = kiln__attrset_view(&el->attrs);
            ASSERT_NEAR(kiln_attrs_float(&a, "scale"), 0.125, 1e-6);
        } else {
            other += !strcmp(el->op_name, "Softmax") || !strcmp(el->op_name, "Add");
        }
    }
    ASSERT_EQ(attn, 1);
    ASSERT_EQ(other, 0);
    kiln_engine_free(e);
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    kiln__cuda_fake(0);
}

TEST_LIST(TEST_ENTRY(mixed_placement), TEST_ENTRY(weights_uploaded_once), TEST_ENTRY(strict_device_lists_cpu_layers),
          TEST_ENTRY(fp16_moves_layer_to_gpu), TEST_ENTRY(fp16_chain_through_axes_ops), TEST_ENTRY(host_cannot_read_device_memory),
          TEST_ENTRY(gpu_activation_fusion), TEST_ENTRY(gpu_linear_bias_gelu_fusion), TEST_ENTRY(gpu_attention_rewrite), TEST_ENTRY(gpu_attention_views), TEST_ENTRY(gpu_attention_mask_rewrite), TEST_ENTRY(device_memory_bindings), TEST_ENTRY(no_gpu_errors_are_clear))
