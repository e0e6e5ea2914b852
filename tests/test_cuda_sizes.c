/*
 * test_cuda_sizes.c — data-dependent output shapes on the GPU, on any
 * machine (the fake CUDA device of src/device/cuda/fake.c: "device memory"
 * is host memory, so a test op's CUDA side can compute on it directly).
 *
 * A non_zero-like op on the GPU writes its count (a size tensor) and its
 * indices into device memory; both are network outputs, so the builder
 * copies them to the host.  The size symbol must bind to the tensor the op
 * writes (the runtime reads it after the op, before sizing the copies), and
 * the op must see its outputs at their upper bound (the room it may fill).
 *
 * A rank-3 output whose dims are each data-dependent up to N, with N
 * elements in all (kiln_shape_numel_bound, as SequenceAt's), gets device
 * memory for N elements, not N^3: also its copy to the GPU (a CPU
 * producer feeding a GPU layer) and the device variant a GPU producer
 * writes for a network output (test_sequence_map_extract_shapes_expanded
 * asked the GPU for 329 GB).
 */
#include "device/cuda/cuda_int.h"
#include "device/device.h"
#include "kiln_int.h"
#include "test.h"
#include "test_cuda_util.h"

static int64_t g_seen_rows; /* out[0].dims[0] the op saw */

static int nz_shape(kiln_shape_ctx *c) {
    const kiln_expr *numel = kiln_expr_mul(c->x, c->in[0].dims[0], c->in[0].dims[1]);
    c->out[1].dtype = KILN_DTYPE_I64;
    c->out[1].ndim = 0;
    const kiln_expr *n =
        kiln_shape_size_tensor(c, 1, kiln_expr_floordiv(c->x, numel, kiln_expr_const(c->x, 2)), numel);
    c->out[0].dtype = KILN_DTYPE_I32;
    c->out[0].ndim = 2;
    c->out[0].dims[0] = n;
    c->out[0].dims[1] = kiln_expr_const(c->x, 2);
    return 0;
}
static int nz_gpu_body(const kiln_call *c) {
    if (!kiln__cuda_fake_owns(c->out[0].data) || !kiln__cuda_fake_owns(c->out[1].data))
        return kiln_set_error(KILN_EINTERNAL, "nz (cuda): outputs not in device memory");
    const float *x = c->in[0].data;
    int32_t *idx = c->out[0].data;
    int64_t rows = c->in[0].dims[0], cols = c->in[0].dims[1], n = 0;
    g_seen_rows = c->out[0].dims[0];
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < cols; k++)
            if (x[r * cols + k] != 0.0f) {
                idx[2 * n] = (int32_t)r;
                idx[2 * n + 1] = (int32_t)k;
                n++;
            }
    *(int64_t *)c->out[1].data = n;
    return 0;
}
/* the fake device's memory opens to host code only inside kiln__cuda_fake_kernel */
static int nz_gpu(const kiln_call *c) { return kiln__cuda_fake_kernel(nz_gpu_body, c); }
static int nz_cpu(const kiln_call *c) {
    (void)c;
    return kiln_set_error(KILN_EINTERNAL, "nz: the CPU side must not run in this test");
}
static const kiln_quick_op nz_op = {.ns = "sztest", .name = "nz", .version = 1, .min_inputs = 1, .max_inputs = 1,
                                    .num_outputs = 2, .shape = nz_shape, .impl = nz_cpu, .cuda_impl = nz_gpu};
KILN_OP(nz_op)

enum { R = 7, C = 9 };

TEST_IMPL(size_tensor_output_on_gpu) {
    kiln__cuda_fake(1);
    kiln_network *net = kiln_network_create();
    int64_t dims[2] = {R, C};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, dims, NULL));
    const char *in[] = {"x"}, *out[] = {"idx", "count"};
    ASSERT(kiln_network_add_layer(net, "sztest::nz", 1, "nonzero", 1, in, 2, out));
    ASSERT_OK(kiln_network_mark_output(net, "idx"));
    ASSERT_OK(kiln_network_mark_output(net, "count"));
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_device(cfg, KILN_DEVICE_CUDA);
    kiln_build_config_set_flags(cfg, KILN_BUILD_STRICT_DEVICE);
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    uint64_t seed = 5;
    for (int rep = 0; rep < 3; rep++) {
        float x[R * C];
        int64_t want = 0;
        for (int i = 0; i < R * C; i++) {
            x[i] = test_rand_u64(&seed) % 3 == 0 ? 0.0f : test_randf(&seed, -2, 2);
            want += x[i] != 0.0f;
        }
        int32_t idx[R * C * 2];
        int64_t count = -1;
        memset(idx, 0xA5, sizeof idx);
        ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
        ASSERT_OK(kiln_context_bind(ctx, "idx", idx, sizeof idx));
        ASSERT_OK(kiln_context_bind(ctx, "count", &count, sizeof count));
        ASSERT_OK(kiln_context_run(ctx));
        ASSERT_EQ(g_seen_rows, R * C); /* the upper bound */
        ASSERT_EQ(count, want);
        int nd = 0;
        int64_t od[KILN_MAX_DIMS];
        ASSERT_OK(kiln_context_shape(ctx, "idx", &nd, od));
        ASSERT_EQ(nd, 2);
        ASSERT_EQ(od[0], want);
        const int32_t *got = kiln_context_output(ctx, "idx");
        ASSERT(got);
        for (int i = 0, k = 0; i < R * C; i++) {
            if (x[i] == 0.0f) continue;
            ASSERT_EQ(got[2 * k], i / C);
            ASSERT_EQ(got[2 * k + 1], i % C);
            k++;
        }
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    kiln__cuda_fake(0);
}

/* ------------------------------------------------------------ numel bound */

enum { N = 4096 }; /* elements of x; each dim of "ragged" is at most N */

/* ragged(x[N], d[3]) -> y[d0,d1,d2] (x's first d0*d1*d2 values), s0, s1, s2 */
static int rg_shape(kiln_shape_ctx *c) {
    const kiln_expr *n = kiln_expr_const(c->x, N);
    c->out[0].dtype = KILN_DTYPE_F32;
    c->out[0].ndim = 3;
    for (int d = 0; d < 3; d++) {
        c->out[1 + d].dtype = KILN_DTYPE_I64;
        c->out[1 + d].ndim = 0;
        c->out[0].dims[d] = kiln_shape_size_tensor(c, 1 + d, kiln_expr_const(c->x, 1), n);
    }
    return kiln_shape_numel_bound(c, 0, n);
}
static int rg_body(const kiln_call *c) {
    const float *x = c->in[0].data;
    const int64_t *d = c->in[1].data;
    if (d[0] < 0 || d[1] < 0 || d[2] < 0 || d[0] * d[1] * d[2] > N)
        return kiln_set_error(KILN_EINVAL, "ragged: dims %lld x %lld x %lld exceed %d elements", (long long)d[0],
                              (long long)d[1], (long long)d[2], N);
    for (int64_t i = 0; i < d[0] * d[1] * d[2]; i++) ((float *)c->out[0].data)[i] = x[i];
    for (int k = 0; k < 3; k++) *(int64_t *)c->out[1 + k].data = d[k];
    return 0;
}
static int rg_gpu(const kiln_call *c) { return kiln__cuda_fake_kernel(rg_body, c); }
static const kiln_quick_op rg_cpu_op = {.ns = "sztest", .name = "ragged", .version = 1, .min_inputs = 2,
                                        .max_inputs = 2, .num_outputs = 4, .shape = rg_shape, .impl = rg_body};
static const kiln_quick_op rg_gpu_op = {.ns = "sztest", .name = "ragged_gpu", .version = 1, .min_inputs = 2,
                                        .max_inputs = 2, .num_outputs = 4, .shape = rg_shape, .impl = rg_body,
                                        .cuda_impl = rg_gpu};
KILN_OP(rg_cpu_op)
KILN_OP(rg_gpu_op)

/* sum(y) -> [sum, y's 3 dims]: a GPU layer reading the ragged tensor */
static int sum_shape(kiln_shape_ctx *c) {
    c->out[0].dtype = KILN_DTYPE_F32;
    c->out[0].ndim = 1;
    c->out[0].dims[0] = kiln_expr_const(c->x, 4);
    return 0;
}
static int sum_body(const kiln_call *c) {
    if (!kiln__cuda_fake_owns(c->in[0].data)) return kiln_set_error(KILN_EINTERNAL, "sum (cuda): input on the host");
    const int64_t *dm = c->in[0].dims;
    float *o = c->out[0].data, s = 0;
    for (int64_t i = 0; i < dm[0] * dm[1] * dm[2]; i++) s += ((const float *)c->in[0].data)[i];
    o[0] = s;
    for (int k = 0; k < 3; k++) o[1 + k] = (float)dm[k];
    return 0;
}
static int sum_gpu(const kiln_call *c) { return kiln__cuda_fake_kernel(sum_body, c); }
static int sum_cpu(const kiln_call *c) {
    (void)c;
    return kiln_set_error(KILN_EINTERNAL, "sum: the CPU side must not run in this test");
}
static const kiln_quick_op sum_op = {.ns = "sztest", .name = "sum3", .version = 1, .min_inputs = 1,
                                     .max_inputs = 1, .num_outputs = 1, .shape = sum_shape, .impl = sum_cpu,
                                     .cuda_impl = sum_gpu};
KILN_OP(sum_op)

/* x -> ragged (on the CPU, or on the GPU as `ragged_gpu`) -> y (a network
 * output) -> sum3 on the GPU -> s.  Either way a device tensor holds y. */
static void numel_bound_case(const char *ragged, int ragged_dev) {
    kiln__cuda_fake(1);
    kiln_network *net = kiln_network_create();
    int64_t xd = N, dd = 3;
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 1, &xd, NULL));
    ASSERT_OK(kiln_network_add_input(net, "d", KILN_DTYPE_I64, 1, &dd, NULL));
    const char *in[] = {"x", "d"}, *out[] = {"y", "s0", "s1", "s2"}, *sin[] = {"y"}, *sout[] = {"s"};
    ASSERT(kiln_network_add_layer(net, ragged, 1, "R", 2, in, 4, out));
    ASSERT(kiln_network_add_layer(net, "sztest::sum3", 1, "S", 1, sin, 1, sout));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    ASSERT_OK(kiln_network_mark_output(net, "s"));
    kiln_engine *e = build_cuda(net, KILN_BUILD_NO_TIMING);
    if (!e) TEST__FAIL("build: %s", kiln_errmsg());
    ASSERT_EQ(layer_device(e, "R"), ragged_dev);
    ASSERT_EQ(layer_device(e, "S"), KILN_DEVICE_CUDA);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    uint64_t seed = 17;
    static float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = test_randf(&seed, -2, 2);
    int64_t d[3] = {5, 7, 11};
    float s[4];
    memset(y, 0xA5, sizeof y);
    memset(s, 0xA5, sizeof s);
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "d", d, sizeof d));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    ASSERT_OK(kiln_context_bind(ctx, "s", s, sizeof s));
    kiln__cuda_fake_largest(1);
    int rc = kiln_context_run(ctx);
    /* N floats per copy of y, not N^3 (275 GB) */
    size_t largest = kiln__cuda_fake_largest(1);
    if (largest > (size_t)1 << 20) TEST__FAIL("%s: a device block of %zu bytes", ragged, largest);
    if (rc) TEST__FAIL("run -> %d: %s", rc, kiln_errmsg());
    int nd = 0;
    int64_t od[KILN_MAX_DIMS];
    ASSERT_OK(kiln_context_shape(ctx, "y", &nd, od));
    ASSERT_EQ(nd, 3);
    double want = 0;
    for (int k = 0; k < 3; k++) ASSERT_EQ(od[k], d[k]);
    for (int i = 0; i < 5 * 7 * 11; i++) {
        ASSERT_EQ(y[i], x[i]);
        want += x[i];
    }
    ASSERT_NEAR(s[0], want, 1e-3);
    for (int k = 0; k < 3; k++) ASSERT_EQ(s[1 + k], (float)d[k]);
    kiln_context_free(ctx);
    kiln_engine_free(e);
    kiln_network_free(net);
    kiln__cuda_fake(0);
}

TEST_IMPL(numel_bound_copy_to_gpu) { numel_bound_case("sztest::ragged", KILN_DEVICE_CPU); }
TEST_IMPL(numel_bound_gpu_output) { numel_bound_case("sztest::ragged_gpu", KILN_DEVICE_CUDA); }

TEST_LIST(TEST_ENTRY(size_tensor_output_on_gpu), TEST_ENTRY(numel_bound_copy_to_gpu),
          TEST_ENTRY(numel_bound_gpu_output))
