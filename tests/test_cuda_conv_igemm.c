/*
 * test_cuda_conv_igemm.c — the implicit-GEMM Conv kernels (conv_igemm.cu,
 * Conv tactics 5 and 6) against a naive double-precision reference
 * (test_conv_ref) on the GPU; without one it exits 77 saying why, after
 * the launcher's refusals (host only) have run.
 *
 * Geometries chosen to hit the edges of the tiles: Cout not a multiple of
 * 8 or of the 64-row tile, output planes of odd size, K = Cin*KH*KW odd
 * (the scalar weight loads) and a multiple of 8 (16-byte loads), K longer
 * than many 32-wide steps, several images folded into the columns (a tile
 * that spans two images), groups, strides, dilations, padding, the 7x7/2
 * stem and a 1-D conv.  Each runs in FP16 and BF16 with both tile widths,
 * with bias + ReLU, bias + residual + ReLU, residual alone, and bias + each
 * of a list of activations (with parameters, and an activation followed by
 * y * a + b), on fresh random inputs, into an output poisoned with NaN
 * bytes.  Tolerance: |gpu - ref| <= eps * (1 + sum |x w| + |bias| + |z|),
 * eps 2e-3 for FP16, 8e-3 for BF16: the reference sees the rounded inputs,
 * so what is left is FP32 accumulation and the output's one rounding
 * (2^-11 and 2^-8 relative); an indexing error is off by O(1).
 */
#include "device/device.h"
#include "kiln_int.h"
#include "ops/common/ops_cuda.h"
#include "test.h"
#include "test_cuda_util.h"
#include "test_ops_util.h"

#include <math.h>

static const kiln__device *D;

typedef struct icase {
    const char *name;
    int n, c, h, w, k, kh, kw, s, p, d, g;
} icase;

static const icase cases[] = {
    {"3x3 pad 1, Cout 13, K 45, 2 images of 9x7", 2, 5, 9, 7, 13, 3, 3, 1, 1, 1, 1},
    {"1x1, K 64, Cout 72, 7x7", 1, 64, 7, 7, 72, 1, 1, 1, 0, 1, 1},
    {"3x3, K 864 (27 steps), Cout 70, 3 images of 6x6", 3, 96, 6, 6, 70, 3, 3, 1, 1, 1, 1},
    {"grouped 2, stride 2, dilation 2, pad 2, 11x13", 3, 16, 11, 13, 24, 3, 3, 2, 2, 2, 2},
    {"stem 7x7 stride 2 pad 3, K 147", 2, 3, 23, 23, 20, 7, 7, 2, 3, 1, 1},
    {"1x1 stride 2, Cout 130", 2, 32, 9, 9, 130, 1, 1, 2, 0, 1, 1},
    {"1-D k 5 pad 2", 2, 8, 1, 37, 9, 1, 5, 1, 2, 1, 1},
};

typedef struct act {
    int code;
    float a, b;
} act;

static const act acts[] = {
    {KILN_CU_ACT_SIGMOID, 0, 0},   {KILN_CU_ACT_HARDSWISH, 0, 0}, {KILN_CU_ACT_LEAKYRELU, 0.1f, 0},
    {KILN_CU_ACT_GELU, 0, 0},      {KILN_CU_ACT_CLIP, -0.5f, 0.5f}, {KILN_CU_ACT_SILU, 0, 0},
    {KILN_CU_ACT_TANH, 0, 0},      {KILN_CU_ACT_THEN_AFFINE + KILN_CU_ACT_HARDSWISH, 1.5f, 0.25f},
};

static double sigmoid(double x) { return 1 / (1 + exp(-x)); }

static double act1(int code, double x, double a, double b) {
    switch (code) {
    case KILN_CU_ACT_NONE: return x;
    case KILN_CU_ACT_RELU: return x > 0 ? x : 0;
    case KILN_CU_ACT_SIGMOID: return sigmoid(x);
    case KILN_CU_ACT_HARDSWISH: return x * fmax(0, fmin(1, x / 6 + 0.5));
    case KILN_CU_ACT_LEAKYRELU: return x < 0 ? a * x : x;
    case KILN_CU_ACT_GELU: return 0.5 * x * (1 + erf(x / sqrt(2)));
    case KILN_CU_ACT_CLIP: return fmin(fmax(x, a), b);
    case KILN_CU_ACT_SILU: return x * sigmoid(x);
    case KILN_CU_ACT_TANH: return tanh(x);
    }
    if (code >= KILN_CU_ACT_THEN_AFFINE) return act1(code - KILN_CU_ACT_THEN_AFFINE, x, 0, 0) * a + b;
    TEST__FAIL("no host reference for activation %d", code);
    return 0;
}

static void *upload(const void *h, size_t n) {
    void *d = NULL;
    ASSERT_OK(D->alloc(n, &d));
    ASSERT_OK(D->copy(d, h, n, NULL));
    return d;
}

/* Rounds v to dt in place (the reference sees what the GPU sees); its bits. */
static uint16_t *to16(float *v, size_t n, kiln_dtype dt) {
    uint16_t *b = malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        b[i] = dt == KILN_DTYPE_F16 ? kiln_f32_to_f16(v[i]) : kiln_f32_to_bf16(v[i]);
        v[i] = dt == KILN_DTYPE_F16 ? kiln_f16_to_f32(b[i]) : kiln_bf16_to_f32(b[i]);
    }
    return b;
}

static float *rnd(size_t n, uint64_t *seed) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = test_randf(seed, -1.0f, 1.0f);
    return v;
}

static int g_runs;

/* One case in dt: every tile width and epilogue.  Fails the test on a
 * mismatch, naming the case, the epilogue and the element. */
static void run_case(const icase *cc, kiln_dtype dt, uint64_t *seed) {
    /* a 1-D conv (kh 1): no padding, stride or dilation along the unit dim */
    const int ph = cc->kh > 1 ? cc->p : 0, sh = cc->kh > 1 ? cc->s : 1, dh = cc->kh > 1 ? cc->d : 1;
    const int oh = (cc->h + 2 * ph - dh * (cc->kh - 1) - 1) / sh + 1;
    const int ow = (cc->w + 2 * cc->p - cc->d * (cc->kw - 1) - 1) / cc->s + 1;
    size_t nx = (size_t)cc->n * cc->c * cc->h * cc->w, nw = (size_t)cc->k * (cc->c / cc->g) * cc->kh * cc->kw;
    size_t ny = (size_t)cc->n * cc->k * oh * ow;
    float *x = rnd(nx, seed), *w = rnd(nw, seed), *b = rnd((size_t)cc->k, seed), *z = rnd(ny, seed);
    uint16_t *hx = to16(x, nx, dt), *hw = to16(w, nw, dt), *hb = to16(b, (size_t)cc->k, dt), *hz = to16(z, ny, dt);
    float *ax = malloc(nx * sizeof *ax), *aw = malloc(nw * sizeof *aw);
    for (size_t i = 0; i < nx; i++) ax[i] = fabsf(x[i]);
    for (size_t i = 0; i < nw; i++) aw[i] = fabsf(w[i]);
    int64_t in[2] = {cc->h, cc->w}, kk[2] = {cc->kh, cc->kw}, s[2] = {sh, cc->s}, d[2] = {dh, cc->d},
            pb[2] = {ph, cc->p}, o[2] = {oh, ow};
    test_conv_geo g = test_conv_geo_make(cc->n, cc->c, cc->k, cc->g, 2, in, kk, s, d, pb, o);
    double *ref = malloc(ny * sizeof *ref), *mag = malloc(ny * sizeof *mag);
    test_conv_ref(&g, x, w, NULL, ref);
    test_conv_ref(&g, ax, aw, NULL, mag);
    void *dx = upload(hx, nx * 2), *dw = upload(hw, nw * 2), *db = upload(hb, (size_t)cc->k * 2),
         *dz = upload(hz, ny * 2), *dy = NULL;
    ASSERT_OK(D->alloc(ny * 2, &dy));
    uint16_t *out = malloc(ny * 2);
    const double eps = dt == KILN_DTYPE_F16 ? 2e-3 : 8e-3;
    const char *suf = dt == KILN_DTYPE_F16 ? "f16" : "bf16";
    const int nepi = 3 + (int)(sizeof acts / sizeof acts[0]);
    for (int bn = 32; bn <= 64; bn += 32)
        for (int e = 0; e < nepi; e++) {
            /* 0 bias + ReLU, 1 bias + residual + ReLU, 2 residual alone, 3.. bias + acts[e - 3] */
            const int with_b = e != 2, with_z = e == 1 || e == 2;
            const act a = e < 3 ? (act){e == 2 ? KILN_CU_ACT_NONE : KILN_CU_ACT_RELU, 0, 0} : acts[e - 3];
            kiln_cu_conv p = {.n = cc->n, .c = cc->c, .h = cc->h, .w = cc->w, .k = cc->k, .oh = oh, .ow = ow,
                              .kh = cc->kh, .kw = cc->kw, .sh = sh, .sw = cc->s, .ph = ph, .pw = cc->p, .dh = dh,
                              .dw = cc->d, .group = cc->g, .act = a.code, .act_a = a.a, .act_b = a.b};
            ASSERT_OK(D->memset(dy, 0xFF, ny * 2, NULL)); /* NaN in both types */
            const void *bias = with_b ? db : NULL, *res = with_z ? dz : NULL;
            const int64_t cols = (int64_t)cc->n * oh * ow;
            const unsigned grid[3] = {(unsigned)((cols + bn - 1) / bn), (unsigned)((cc->k / cc->g + 63) / 64),
                                      (unsigned)cc->g},
                           block[3] = {128, 1, 1};
            void *args[] = {&p, &dx, &dw, (void *)&bias, (void *)&res, &dy};
            char name[32];
            snprintf(name, sizeof name, "conv_igemm%d_%s", bn, suf);
            kiln_call c = {.layer = cc->name};
            ASSERT_OK(kiln__cuda_launch(&c, name, grid, block, 0, args));
            ASSERT_OK(D->stream_sync(NULL));
            ASSERT_OK(D->copy(out, dy, ny * 2, NULL));
            ASSERT_OK(D->stream_sync(NULL));
            int bad = 0;
            for (size_t i = 0; i < ny; i++) {
                int m = (int)(i / ((size_t)oh * ow) % (size_t)cc->k);
                double v = ref[i] + (with_b ? b[m] : 0) + (with_z ? z[i] : 0);
                double want = act1(a.code, v, a.a, a.b);
                double got = dt == KILN_DTYPE_F16 ? kiln_f16_to_f32(out[i]) : kiln_bf16_to_f32(out[i]);
                double tol = eps * (1 + mag[i] + (with_b ? fabs(b[m]) : 0) + (with_z ? fabs(z[i]) : 0));
                if (!(fabs(got - want) <= tol) && bad++ < 3)
                    printf("FAIL %s %s %s act %d bias %d z %d y[%zu]: gpu %.7g ref %.7g (tol %.3g)\n", cc->name,
                           suf, name, a.code, with_b, with_z, i, got, want, tol);
            }
            ASSERT_EQ(bad, 0);
            g_runs++;
        }
    printf("  ok %s %s: tiles 64x32 and 64x64, %d epilogues\n", cc->name, suf, nepi);
    D->free(dx), D->free(dw), D->free(db), D->free(dz), D->free(dy);
    free(x), free(w), free(b), free(z), free(hx), free(hw), free(hb), free(hz), free(ax), free(aw);
    free(ref), free(mag), free(out);
}

TEST_IMPL(conv_igemm_vs_reference) {
    D = test_need_gpu();
    uint64_t seed = 0x16e3a;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_case(&cases[i], KILN_DTYPE_F16, &seed);
        run_case(&cases[i], KILN_DTYPE_BF16, &seed);
    }
    printf("%d kernel runs matched the reference\n", g_runs);
}

/* Through the Conv op's launcher, on the host alone (the refusals come
 * before any launch, so this part runs on CI too): FP32 is refused (the
 * builder drops the tactic, so an FP32 engine never names it), and while
 * the builder times, so is a pointwise conv (1x1, stride 1, unpadded). */
TEST_IMPL(conv_igemm_refusals) {
    const kiln__op *op = kiln__registry_resolve("ai.onnx", "Conv", 11);
    ASSERT(op && op->quick && op->quick->cuda_impl);
    kiln__attrset s;
    ASSERT_OK(kiln__attrset_init(&s, op));
    kiln_attrs av = kiln__attrset_view(&s);
    int64_t xd[4] = {1, 2, 3, 3}, wd[4] = {2, 2, 1, 1};
    static char never_read[64]; /* no kernel runs: the launcher refuses first */
    kiln_tensor in[2], out[1];
    for (int dt = 0; dt < 2; dt++) {
        const kiln_dtype t = dt ? KILN_DTYPE_F16 : KILN_DTYPE_F32;
        kiln__tensor_view(&in[0], never_read, t, KILN_FORMAT_LINEAR, KILN_DEVICE_CUDA, 4, xd);
        kiln__tensor_view(&in[1], never_read, t, KILN_FORMAT_LINEAR, KILN_DEVICE_CUDA, 4, wd);
        kiln__tensor_view(&out[0], never_read, t, KILN_FORMAT_LINEAR, KILN_DEVICE_CUDA, 4, xd);
        kiln__b_timing = dt; /* FP16: as the builder's timing sees it */
        for (int tac = 5; tac <= 6; tac++) {
            kiln_call c = {.in = in, .nin = 2, .out = out, .nout = 1, .attrs = &av, .tactic = tac, .layer = "r"};
            ASSERT_EQ(op->quick->cuda_impl(&c), KILN_EUNSUPPORTED);
            ASSERT_CONTAINS(kiln_errmsg(), dt ? "not timed on 1x1 stride-1" : "FP16 and BF16");
        }
        kiln__b_timing = 0;
    }
    kiln__attrset_free(&s);
}

TEST_LIST(TEST_ENTRY(conv_igemm_refusals), TEST_ENTRY(conv_igemm_vs_reference))
