/*
 * test_cuda_conv_dw.c — the depthwise Conv tactic (3: conv_dw.cu, launched
 * by conv_cuda.c) on a GPU (ctest label `cuda`; exits 77, saying why,
 * without one).
 *
 * - The op's CUDA implementation at tactic 3, FP32 / FP16 / BF16, with and
 *   without bias, on geometries that take each kernel (3x3 and 5x5
 *   unrolled; 7x7, dilated and a channel multiplier of 2 through the
 *   generic one), stride 1 and 2, odd sizes spanning several 32 x 32 tiles
 *   and partial ones; fresh random inputs, the output poisoned (NaN)
 *   before the run, against a naive double reference (test_conv_ref) of the
 *   inputs as rounded to the type.  A dense conv is refused with
 *   KILN_EUNSUPPORTED (the builder drops the candidate).
 * - Its epilogue: an engine of Conv -> Conv -> Add(the first's output) ->
 *   HardSwish fuses the residual and the activation into the second Conv;
 *   both forced to tactic 3, it matches the double reference.
 */
#include "test_cuda_util.h"
#include "test_ops_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const kiln__device *g_dev;

typedef struct dw_case {
    int64_t n, c, mult, h, w;
    int k, s, d, p;
} dw_case;

static int64_t out_dim(int64_t in, const dw_case *g) { return (in + 2 * g->p - g->d * (g->k - 1) - 1) / g->s + 1; }

static void set_tensor(kiln_tensor *t, kiln_dtype dt, int nd, const int64_t *dims, void *data) {
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = nd;
    t->data = data;
    t->device = KILN_DEVICE_CUDA;
    for (int d = nd - 1, s = 1; d >= 0; s *= (int)dims[d], d--) {
        t->dims[d] = dims[d];
        t->strides[d] = s;
    }
}

/* n random floats in [lo, hi] rounded to dt (in f) and stored as dt in a
 * new device buffer. */
static void *upload(kiln_dtype dt, int64_t n, float *f, uint64_t *seed, float lo, float hi) {
    size_t es = kiln_dtype_size(dt);
    uint16_t *h16 = malloc((size_t)n * 2);
    ASSERT(h16);
    for (int64_t i = 0; i < n; i++) {
        float v = test_randf(seed, lo, hi);
        if (dt == KILN_DTYPE_F16) v = kiln_f16_to_f32(h16[i] = kiln_f32_to_f16(v));
        if (dt == KILN_DTYPE_BF16) v = kiln_bf16_to_f32(h16[i] = kiln_f32_to_bf16(v));
        f[i] = v;
    }
    void *d = NULL;
    ASSERT_OK(g_dev->alloc((size_t)n * es, &d));
    ASSERT_OK(g_dev->copy(d, dt == KILN_DTYPE_F32 ? (void *)f : (void *)h16, (size_t)n * es, NULL));
    free(h16);
    return d;
}

static void set_ints(kiln__attrset *s, const char *name, const int64_t *v, int n) {
    kiln_attr_value a = {.present = 1, .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .count = n, .data = v};
    ASSERT_OK(kiln__attrset_set(s, name, &a));
}

/* Conv at tactic 3 on case g in type dt: the return code of the launch,
 * and (when 0) the worst |y - ref| / (1 + |ref|) in *worst. */
static int run_dw(const dw_case *g, kiln_dtype dt, int bias, uint64_t seed, double *worst) {
    const kiln__op *op = kiln__registry_resolve("ai.onnx", "Conv", 11);
    ASSERT(op && op->quick && op->quick->cuda_impl);
    const int64_t m = g->c * g->mult, oh = out_dim(g->h, g), ow = out_dim(g->w, g);
    const int64_t xd[4] = {g->n, g->c, g->h, g->w}, wd[4] = {m, 1, g->k, g->k}, yd[4] = {g->n, m, oh, ow};
    const int64_t nx = g->n * g->c * g->h * g->w, nw = m * g->k * g->k, ny = g->n * m * oh * ow;
    float *x = malloc((size_t)nx * 4), *w = malloc((size_t)nw * 4), *b = malloc((size_t)m * 4), *y = malloc((size_t)ny * 4);
    double *ref = malloc((size_t)ny * sizeof *ref);
    ASSERT(x && w && b && y && ref);
    kiln_tensor in[3], out[1];
    set_tensor(&in[0], dt, 4, xd, upload(dt, nx, x, &seed, -2, 2));
    set_tensor(&in[1], dt, 4, wd, upload(dt, nw, w, &seed, -0.5f, 0.5f));
    set_tensor(&in[2], dt, 1, &m, upload(dt, m, b, &seed, -1, 1));
    void *yd_buf = NULL;
    size_t ybytes = (size_t)ny * kiln_dtype_size(dt);
    ASSERT_OK(g_dev->alloc(ybytes, &yd_buf));
    ASSERT_OK(g_dev->memset(yd_buf, 0xFF, ybytes, NULL)); /* NaN in every float type */
    set_tensor(&out[0], dt, 4, yd, yd_buf);
    kiln__attrset s;
    ASSERT_OK(kiln__attrset_init(&s, op));
    const int64_t grp[1] = {g->c}, st[2] = {g->s, g->s}, dl[2] = {g->d, g->d}, pd[4] = {g->p, g->p, g->p, g->p};
    kiln_attr_value gv = {.present = 1, .type = KILN_ATTR_INT, .i = grp[0]};
    ASSERT_OK(kiln__attrset_set(&s, "group", &gv));
    set_ints(&s, "strides", st, 2);
    set_ints(&s, "dilations", dl, 2);
    set_ints(&s, "pads", pd, 4);
    kiln_attrs av = kiln__attrset_view(&s);
    kiln_call c = {.in = in, .nin = bias ? 3 : 2, .out = out, .nout = 1, .attrs = &av, .tactic = 3, .layer = "dw"};
    int rc = op->quick->cuda_impl(&c);
    if (!rc) rc = g_dev->stream_sync(NULL);
    if (!rc) {
        uint16_t *h16 = malloc(ybytes);
        ASSERT(h16);
        ASSERT_OK(g_dev->copy(dt == KILN_DTYPE_F32 ? (void *)y : (void *)h16, yd_buf, ybytes, NULL));
        for (int64_t i = 0; i < ny && dt != KILN_DTYPE_F32; i++)
            y[i] = dt == KILN_DTYPE_F16 ? kiln_f16_to_f32(h16[i]) : kiln_bf16_to_f32(h16[i]);
        free(h16);
        const int64_t hw[2] = {g->h, g->w}, kk[2] = {g->k, g->k}, ss[2] = {g->s, g->s}, dd[2] = {g->d, g->d},
                      pp[2] = {g->p, g->p}, oo[2] = {oh, ow};
        test_conv_geo geo = test_conv_geo_make(g->n, g->c, m, g->c, 2, hw, kk, ss, dd, pp, oo);
        test_conv_ref(&geo, x, w, bias ? b : NULL, ref);
        *worst = test_worst_rel(y, ref, ny, 0); /* NaN: an output not written */
    }
    kiln__attrset_free(&s);
    for (int i = 0; i < 3; i++) g_dev->free(in[i].data);
    g_dev->free(yd_buf);
    free(x), free(w), free(b), free(y), free(ref);
    return rc;
}

TEST_IMPL(depthwise_tactic) {
    g_dev = test_need_gpu();
    static const dw_case cases[] = {
        {2, 5, 1, 37, 45, 3, 1, 1, 1},  /* 3x3 stride 1: 2 x 2 tiles, partial */
        {1, 3, 1, 70, 33, 3, 2, 1, 1},  /* 3x3 stride 2 */
        {2, 4, 1, 21, 19, 5, 1, 1, 2},  /* 5x5 */
        {1, 6, 1, 81, 40, 5, 2, 1, 2},  /* 5x5 stride 2, 2 tile rows */
        {1, 2, 2, 17, 23, 3, 1, 2, 2},  /* channel multiplier 2, dilation 2: the generic kernel */
        {1, 3, 1, 15, 14, 7, 2, 1, 3},  /* 7x7 stride 2: the generic kernel, the largest window */
        {3, 7, 1, 5, 3, 3, 1, 1, 0},    /* tiny plane, no padding */
    };
    static const kiln_dtype types[3] = {KILN_DTYPE_F32, KILN_DTYPE_F16, KILN_DTYPE_BF16};
    static const double tols[3] = {1e-5, 3e-3, 2e-2};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int t = 0; t < 3; t++)
            for (int bias = 0; bias < 2; bias++) {
                double worst = -1;
                int rc = run_dw(&cases[k], types[t], bias, 1000 + k * 10 + (uint64_t)t * 2 + (uint64_t)bias, &worst);
                if (rc) TEST__FAIL("case %zu %s bias %d: %s", k, kiln_dtype_name(types[t]), bias, kiln_errmsg());
                printf("case %zu %s bias %d: max |y - ref| / (1 + |ref|) = %.3g (tolerance %.3g)\n", k,
                       kiln_dtype_name(types[t]), bias, worst, tols[t]);
                ASSERT(worst <= tols[t]);
            }
    /* a dense conv (4 input channels per group) is not the tactic's */
    const kiln__op *op = kiln__registry_resolve("ai.onnx", "Conv", 11);
    kiln__attrset s;
    ASSERT_OK(kiln__attrset_init(&s, op));
    kiln_attrs av = kiln__attrset_view(&s);
    int64_t xd[4] = {1, 4, 6, 6}, wd[4] = {2, 4, 3, 3}, yd[4] = {1, 2, 4, 4};
    kiln_tensor in[2], out[1];
    set_tensor(&in[0], KILN_DTYPE_F32, 4, xd, NULL);
    set_tensor(&in[1], KILN_DTYPE_F32, 4, wd, NULL);
    set_tensor(&out[0], KILN_DTYPE_F32, 4, yd, NULL);
    kiln_call c = {.in = in, .nin = 2, .out = out, .nout = 1, .attrs = &av, .tactic = 3, .layer = "dense"};
    ASSERT_EQ(op->quick->cuda_impl(&c), KILN_EUNSUPPORTED);
    printf("dense conv at tactic 3: %s\n", kiln_errmsg());
    kiln__attrset_free(&s);
}

enum { EN = 2, EC = 6, EH = 35, EW = 33, ENX = EN * EC * EH * EW };

static void dw_layer(kiln_network *net, const char *name, const char *x, const char *y) {
    static const int64_t pads[4] = {1, 1, 1, 1};
    const char *in[3] = {x, "w", "b"}, *out[1] = {y};
    kiln_layer *L = kiln_network_add_layer(net, "ai.onnx::Conv", 11, name, 3, in, 1, out);
    ASSERT(L);
    ASSERT_OK(kiln_layer_set_ints(L, "pads", pads, 4));
    ASSERT_OK(kiln_layer_set_int(L, "group", EC));
}

/* x -> dw0 -> u -> dw -> v; y = HardSwish(v + u): the Add (its other
 * operand made on the GPU before dw) and the HardSwish fuse into dw. */
TEST_IMPL(depthwise_epilogue) {
    g_dev = test_need_gpu();
    static float x[ENX], u[ENX], y[ENX], w[EC * 9], b[EC];
    static double ref[ENX], v[ENX];
    uint64_t seed = 77;
    for (int i = 0; i < EC * 9; i++) w[i] = test_randf(&seed, -0.5f, 0.5f);
    for (int i = 0; i < EC; i++) b[i] = test_randf(&seed, -1, 1);
    kiln_network *net = kiln_network_create();
    int64_t xd[4] = {EN, EC, EH, EW}, wd[4] = {EC, 1, 3, 3}, bd[1] = {EC};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 4, xd, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "w", KILN_DTYPE_F32, 4, wd, w));
    ASSERT_OK(kiln_network_add_constant(net, "b", KILN_DTYPE_F32, 1, bd, b));
    dw_layer(net, "dw0", "x", "u");
    dw_layer(net, "dw", "u", "v");
    const char *ai[2] = {"v", "u"}, *ao[1] = {"a"}, *hi[1] = {"a"}, *ho[1] = {"y"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Add", 14, "res", 2, ai, 1, ao));
    ASSERT(kiln_network_add_layer(net, "ai.onnx::HardSwish", 14, "hs", 1, hi, 1, ho));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_engine *e = build_cuda(net, KILN_BUILD_NO_TIMING | KILN_BUILD_STRICT_DEVICE);
    if (!e) TEST__FAIL("build: %s", kiln_errmsg());
    kiln_network_free(net);
    int convs = 0, fused = 0;
    for (int32_t l = 0; l < e->nlayers; l++) {
        kiln__elayer *el = &e->layers[l];
        if (strcmp(el->op_name, "Conv")) continue;
        el->tactic = 3; /* (untimed, the build took tactic 1) */
        convs++;
        fused += el->nepi;
    }
    ASSERT_EQ(convs, 2);
    ASSERT_EQ(fused, 2); /* dw + Add + HardSwish */
    for (int i = 0; i < ENX; i++) x[i] = test_randf(&seed, -3, 3);
    const int64_t hw[2] = {EH, EW}, k3[2] = {3, 3}, one[2] = {1, 1};
    test_conv_geo geo = test_conv_geo_make(EN, EC, EC, EC, 2, hw, k3, one, one, one, hw);
    test_conv_ref(&geo, x, w, b, v);
    for (int i = 0; i < ENX; i++) u[i] = (float)v[i]; /* u is stored as float */
    test_conv_ref(&geo, u, w, b, v);
    for (int i = 0; i < ENX; i++) {
        double t = v[i] + u[i];
        ref[i] = t * fmin(fmax(t + 3, 0), 6) / 6;
    }
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    memset(y, 0xFF, sizeof y);
    ASSERT_OK(kiln_context_run(ctx));
    double worst = test_worst_rel(y, ref, ENX, 0);
    printf("Conv, Conv + Add + HardSwish at tactic 3: max |y - ref| / (1 + |ref|) = %.3g\n", worst);
    ASSERT(worst <= 1e-5);
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

TEST_LIST(TEST_ENTRY(depthwise_tactic), TEST_ENTRY(depthwise_epilogue))
