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
 */
#include "device/cuda/cuda_int.h"
#include "device/device.h"
#include "kiln_int.h"
#include "test.h"

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

TEST_LIST(TEST_ENTRY(size_tensor_output_on_gpu))
