/*
 * test_cuda_nhwc.c — NHWC on the GPU (ctest label `cuda`; exits 77, saying
 * why, without a GPU): the LINEAR <-> NHWC reformat kernels, the NHWC Conv
 * tactics, and an engine that keeps a ResNet-like chain in NHWC.
 *
 *   reformat_nhwc_round_trip: kiln::reformat on CUDA, F32 LINEAR -> F16 NHWC
 *     -> F32 LINEAR, F32 LINEAR -> F32 NHWC -> BF16 LINEAR and INT64 LINEAR
 *     -> NHWC -> LINEAR on a tensor of odd dims, each step against a host transposition (exact: the
 *     reference rounds the same way), outputs poisoned first.
 *   conv_nhwc_gemm: Conv tactic 2 on NHWC 1x1 convs (one cuBLASLt GEMM with
 *     the bias in its epilogue), odd channel counts, FP16 and BF16, against
 *     a naive double reference (test_conv_ref).
 *   conv_nhwc_cudnn: cuDNN in NHWC (filter KRSC) with bias + residual z +
 *     ReLU, every algorithm that takes the case, 3x3 / grouped + strided /
 *     1x1 strided / the 7x7 stem, FP16 and BF16 (skipped, saying so,
 *     without cuDNN).
 *   engine_nhwc_chain: Conv(3x3/2) + Relu, MaxPool (its Indices a network
 *     output too: checked to point at the window's maximum), 1x1 Conv + Relu, 3x3
 *     Conv + residual Add + Relu (then a Mul of its output by itself, a
 *     binary op on its own), strided 1x1 Conv, 1x1 Conv + residual Add,
 *     GlobalAveragePool, built FP16 and BF16 for CUDA with
 *     KILN_CUDA_NHWC=force (NHWC wherever a candidate runs), =0 (all
 *     LINEAR), =1 (timed) and unset (the default: the timed NHWC engine
 *     raced against the LINEAR one, the faster kept): the forced engine
 *     must hold NHWC tensors, the LINEAR one none, the raced one the
 *     layout its log line names, and all must match a double reference
 *     (the layout of each conv and its tactic are printed); a second run
 *     (CUDA graph replay) must repeat the first bit for bit.
 * Tolerances: |gpu - ref| <= eps * (1 + sum |x w| (+ |b| + |z|)) for one
 * conv (eps 8e-3 FP16, 6e-2 BF16: the inputs are rounded for the
 * reference too, so only FP32 accumulation and the output rounding are
 * left); the 6-layer engine |y - ref| / (1 + |ref|) <= 2e-2 FP16, 1e-1 BF16
 * (every activation rounded to the 16-bit type on the way).
 */
#include "device/cuda/cudnn.h"
#include "device/device.h"
#include "kiln_int.h"
#include "ops/common/cuda_impls.h"
#include "test.h"
#include "test_cuda_util.h"
#include "test_ops_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int kiln__reformat_cuda(const kiln_call *c); /* ops/common/reformat_cuda.c */

static const kiln__device *D;

static void *upload(const void *h, size_t n) {
    void *d = NULL;
    ASSERT_OK(D->alloc(n, &d));
    ASSERT_OK(D->copy(d, h, n, NULL));
    return d;
}

static void download(void *h, const void *d, size_t n) {
    ASSERT_OK(D->stream_sync(NULL));
    ASSERT_OK(D->copy(h, d, n, NULL));
    ASSERT_OK(D->stream_sync(NULL));
}

/* Rounds v to dt (F32/F16/BF16) in place; its bytes in dt. */
static void *to_dtype(float *v, size_t n, kiln_dtype dt) {
    size_t es = kiln_dtype_size(dt);
    uint8_t *b = malloc(n * es);
    for (size_t i = 0; i < n; i++) {
        if (dt == KILN_DTYPE_F32) {
            memcpy(b + i * 4, &v[i], 4);
            continue;
        }
        uint16_t h = dt == KILN_DTYPE_F16 ? kiln_f32_to_f16(v[i]) : kiln_f32_to_bf16(v[i]);
        v[i] = dt == KILN_DTYPE_F16 ? kiln_f16_to_f32(h) : kiln_bf16_to_f32(h);
        memcpy(b + i * 2, &h, 2);
    }
    return b;
}

static float *rnd(size_t n, uint64_t *seed, float scale) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = test_randf(seed, -scale, scale);
    return v;
}

/* NCHW index of NHWC element i of [n, c, h, w]. */
static size_t nchw_of(size_t i, int64_t c, int64_t hw) {
    size_t ch = i % (size_t)c, r = i / (size_t)c, p = r % (size_t)hw, n = r / (size_t)hw;
    return (n * (size_t)c + ch) * (size_t)hw + p;
}

/* ---- reformat ------------------------------------------------------------ */

/* One kiln::reformat call on the GPU: src (dims, dt/format) -> dst. */
static void reformat(const void *src, kiln_dtype sdt, kiln_format sf, void *dst, kiln_dtype ddt, kiln_format df,
                     const int64_t *dims) {
    kiln_tensor in, out;
    kiln__tensor_view(&in, (void *)src, sdt, sf, KILN_DEVICE_CUDA, 4, dims);
    kiln__tensor_view(&out, dst, ddt, df, KILN_DEVICE_CUDA, 4, dims);
    kiln_call c = {.in = &in, .nin = 1, .out = &out, .nout = 1, .layer = "reformat"};
    ASSERT_OK(kiln__reformat_cuda(&c));
}

TEST_IMPL(reformat_nhwc_round_trip) {
    D = test_need_gpu();
    const int64_t dims[4] = {3, 5, 7, 9}, C = 5, HW = 63;
    const size_t n = 3 * 5 * 7 * 9;
    uint64_t seed = 0x4e4843;
    float *x = rnd(n, &seed, 4.0f);
    void *dx = upload(x, n * 4), *d16 = NULL, *d32 = NULL, *dbf = NULL;
    ASSERT_OK(D->alloc(n * 2, &d16));
    ASSERT_OK(D->alloc(n * 4, &d32));
    ASSERT_OK(D->alloc(n * 2, &dbf));
    uint8_t *h = malloc(n * 4);
    /* F32 LINEAR -> F16 NHWC */
    ASSERT_OK(D->memset(d16, 0xFF, n * 2, NULL));
    reformat(dx, KILN_DTYPE_F32, KILN_FORMAT_LINEAR, d16, KILN_DTYPE_F16, KILN_FORMAT_NHWC, dims);
    download(h, d16, n * 2);
    for (size_t i = 0; i < n; i++) {
        float want = kiln_f16_to_f32(kiln_f32_to_f16(x[nchw_of(i, C, HW)]));
        if (test_from_dtype(h, i, KILN_DTYPE_F16) != want) TEST__FAIL("to NHWC F16: [%zu] %g, want %g", i, test_from_dtype(h, i, KILN_DTYPE_F16), want);
    }
    /* F16 NHWC -> F32 LINEAR: back where it started, rounded to F16 */
    ASSERT_OK(D->memset(d32, 0xFF, n * 4, NULL));
    reformat(d16, KILN_DTYPE_F16, KILN_FORMAT_NHWC, d32, KILN_DTYPE_F32, KILN_FORMAT_LINEAR, dims);
    download(h, d32, n * 4);
    for (size_t i = 0; i < n; i++) {
        float want = kiln_f16_to_f32(kiln_f32_to_f16(x[i]));
        if (test_from_dtype(h, i, KILN_DTYPE_F32) != want) TEST__FAIL("to LINEAR F32: [%zu] %g, want %g", i, test_from_dtype(h, i, KILN_DTYPE_F32), want);
    }
    /* F32 LINEAR -> F32 NHWC -> BF16 LINEAR */
    ASSERT_OK(D->memset(d32, 0xFF, n * 4, NULL));
    ASSERT_OK(D->memset(dbf, 0xFF, n * 2, NULL));
    reformat(dx, KILN_DTYPE_F32, KILN_FORMAT_LINEAR, d32, KILN_DTYPE_F32, KILN_FORMAT_NHWC, dims);
    download(h, d32, n * 4);
    for (size_t i = 0; i < n; i++) ASSERT_EQ(test_from_dtype(h, i, KILN_DTYPE_F32), x[nchw_of(i, C, HW)]);
    reformat(d32, KILN_DTYPE_F32, KILN_FORMAT_NHWC, dbf, KILN_DTYPE_BF16, KILN_FORMAT_LINEAR, dims);
    download(h, dbf, n * 2);
    for (size_t i = 0; i < n; i++)
        ASSERT_EQ(test_from_dtype(h, i, KILN_DTYPE_BF16), kiln_bf16_to_f32(kiln_f32_to_bf16(x[i])));
    /* INT64 LINEAR -> NHWC -> LINEAR: the bits moved as they are */
    int64_t *iv = malloc(n * 8), *ih = malloc(n * 8);
    for (size_t i = 0; i < n; i++) iv[i] = (int64_t)(test_rand_u64(&seed) >> 1) * (i % 2 ? -1 : 1);
    void *di = upload(iv, n * 8), *dn = NULL, *dl = NULL;
    ASSERT_OK(D->alloc(n * 8, &dn));
    ASSERT_OK(D->alloc(n * 8, &dl));
    ASSERT_OK(D->memset(dn, 0xFF, n * 8, NULL));
    ASSERT_OK(D->memset(dl, 0xFF, n * 8, NULL));
    reformat(di, KILN_DTYPE_I64, KILN_FORMAT_LINEAR, dn, KILN_DTYPE_I64, KILN_FORMAT_NHWC, dims);
    download(ih, dn, n * 8);
    for (size_t i = 0; i < n; i++) ASSERT_EQ(ih[i], iv[nchw_of(i, C, HW)]);
    reformat(dn, KILN_DTYPE_I64, KILN_FORMAT_NHWC, dl, KILN_DTYPE_I64, KILN_FORMAT_LINEAR, dims);
    download(ih, dl, n * 8);
    ASSERT(!memcmp(ih, iv, n * 8));
    D->free(di), D->free(dn), D->free(dl);
    free(iv), free(ih);
    /* what the GPU does not convert is refused, saying so */
    const int64_t d3[4] = {2, 3, 4, 1};
    kiln_tensor in, out;
    kiln__tensor_view(&in, dx, KILN_DTYPE_F32, KILN_FORMAT_LINEAR, KILN_DEVICE_CUDA, 4, d3);
    kiln__tensor_view(&out, d32, KILN_DTYPE_F32, KILN_FORMAT_NCHW8C, KILN_DEVICE_CUDA, 4, d3);
    kiln_call c = {.in = &in, .nin = 1, .out = &out, .nout = 1, .layer = "r"};
    ASSERT_EQ(kiln__reformat_cuda(&c), KILN_EUNSUPPORTED);
    ASSERT_CONTAINS(kiln_errmsg(), "LINEAR <-> NHWC");
    printf("LINEAR <-> NHWC round trips of [3, 5, 7, 9] exact (F32, F16, BF16, INT64)\n");
    D->free(dx), D->free(d16), D->free(d32), D->free(dbf);
    free(x), free(h);
}

/* ---- one conv ------------------------------------------------------------ */

typedef struct ccase {
    const char *name;
    int n, c, h, w, k, kh, kw, s, p, g;
} ccase;

/* The conv of cc on x [NCHW] and w [K, C/g, kh, kw] (host floats, already
 * rounded), as NHWC / KRSC device copies in dt; ref and mag (sum |x w|)
 * in NCHW order. */
typedef struct cdata {
    int oh, ow;
    size_t nx, nw, ny;
    float *x, *w, *b, *z;
    double *ref, *mag;
    void *dx, *dw, *db, *dz, *dy;
} cdata;

static void cdata_make(cdata *d, const ccase *cc, kiln_dtype dt, uint64_t *seed) {
    d->oh = (cc->h + 2 * cc->p - cc->kh) / cc->s + 1;
    d->ow = (cc->w + 2 * cc->p - cc->kw) / cc->s + 1;
    const int cg = cc->c / cc->g;
    d->nx = (size_t)cc->n * cc->c * cc->h * cc->w;
    d->nw = (size_t)cc->k * cg * cc->kh * cc->kw;
    d->ny = (size_t)cc->n * cc->k * d->oh * d->ow;
    d->x = rnd(d->nx, seed, 1), d->w = rnd(d->nw, seed, 1), d->b = rnd((size_t)cc->k, seed, 1);
    d->z = rnd(d->ny, seed, 1);
    free(to_dtype(d->x, d->nx, dt)), free(to_dtype(d->w, d->nw, dt)), free(to_dtype(d->b, (size_t)cc->k, dt));
    free(to_dtype(d->z, d->ny, dt));
    /* NHWC x, KRSC w, NHWC z */
    float *xt = malloc(d->nx * 4), *wt = malloc(d->nw * 4), *zt = malloc(d->ny * 4);
    for (size_t i = 0; i < d->nx; i++) xt[i] = d->x[nchw_of(i, cc->c, (int64_t)cc->h * cc->w)];
    for (size_t i = 0; i < d->nw; i++) wt[i] = d->w[nchw_of(i, cg, (int64_t)cc->kh * cc->kw)];
    for (size_t i = 0; i < d->ny; i++) zt[i] = d->z[nchw_of(i, cc->k, (int64_t)d->oh * d->ow)];
    void *hx = to_dtype(xt, d->nx, dt), *hw = to_dtype(wt, d->nw, dt), *hb = to_dtype(d->b, (size_t)cc->k, dt),
         *hz = to_dtype(zt, d->ny, dt);
    size_t es = kiln_dtype_size(dt);
    d->dx = upload(hx, d->nx * es), d->dw = upload(hw, d->nw * es), d->db = upload(hb, (size_t)cc->k * es);
    d->dz = upload(hz, d->ny * es);
    ASSERT_OK(D->alloc(d->ny * es, &d->dy));
    free(xt), free(wt), free(zt), free(hx), free(hw), free(hb), free(hz);
    float *ax = malloc(d->nx * 4), *aw = malloc(d->nw * 4);
    for (size_t i = 0; i < d->nx; i++) ax[i] = fabsf(d->x[i]);
    for (size_t i = 0; i < d->nw; i++) aw[i] = fabsf(d->w[i]);
    int64_t in[2] = {cc->h, cc->w}, kk[2] = {cc->kh, cc->kw}, s[2] = {cc->s, cc->s}, dl[2] = {1, 1},
            pb[2] = {cc->p, cc->p}, o[2] = {d->oh, d->ow};
    test_conv_geo g = test_conv_geo_make(cc->n, cc->c, cc->k, cc->g, 2, in, kk, s, dl, pb, o);
    d->ref = malloc(d->ny * sizeof *d->ref), d->mag = malloc(d->ny * sizeof *d->mag);
    test_conv_ref(&g, d->x, d->w, NULL, d->ref);
    test_conv_ref(&g, ax, aw, NULL, d->mag);
    free(ax), free(aw);
}

static void cdata_free(cdata *d) {
    D->free(d->dx), D->free(d->dw), D->free(d->db), D->free(d->dz), D->free(d->dy);
    free(d->x), free(d->w), free(d->b), free(d->z), free(d->ref), free(d->mag);
}

/* Compares NHWC output dy with the reference (+ bias, + z, ReLU as asked;
 * host_epi: cuDNN did not fuse them, so they are added here as bias_act
 * would). */
static void check(const cdata *d, const ccase *cc, kiln_dtype dt, int with_b, int with_z, int relu, const char *what) {
    size_t es = kiln_dtype_size(dt);
    uint8_t *out = malloc(d->ny * es);
    download(out, d->dy, d->ny * es);
    const double eps = dt == KILN_DTYPE_F16 ? 8e-3 : 6e-2;
    int bad = 0;
    for (size_t i = 0; i < d->ny; i++) {
        size_t j = nchw_of(i, cc->k, (int64_t)d->oh * d->ow);
        int m = (int)(i % (size_t)cc->k);
        double v = d->ref[j] + (with_b ? d->b[m] : 0) + (with_z ? d->z[j] : 0);
        if (relu && v < 0) v = 0;
        double got = test_from_dtype(out, i, dt);
        double tol = eps * (1 + d->mag[j] + (with_b ? fabs(d->b[m]) : 0) + (with_z ? fabs(d->z[j]) : 0));
        if (!(fabs(got - v) <= tol) && bad++ < 3)
            printf("FAIL %s %s %s: y[%zu] gpu %.7g ref %.7g (tol %.3g)\n", cc->name, kiln_dtype_name(dt), what, i, got,
                   v, tol);
    }
    free(out);
    ASSERT_EQ(bad, 0);
}

static const ccase gemm_cases[] = {
    {"1x1 C 12 -> K 9, 5x7", 2, 12, 5, 7, 9, 1, 1, 1, 0, 1},
    {"1x1 C 64 -> K 72, 7x7", 3, 64, 7, 7, 72, 1, 1, 1, 0, 1},
};

TEST_IMPL(conv_nhwc_gemm) {
    D = test_need_gpu();
    const kiln__op *op = kiln__registry_resolve("ai.onnx", "Conv", 11);
    ASSERT(op && op->quick && op->quick->cuda_impl && op->quick->cuda_workspace);
    uint64_t seed = 0x9e33;
    int runs = 0;
    for (size_t ci = 0; ci < sizeof gemm_cases / sizeof gemm_cases[0]; ci++)
        for (int t = 0; t < 2; t++) {
            const ccase *cc = &gemm_cases[ci];
            const kiln_dtype dt = t ? KILN_DTYPE_BF16 : KILN_DTYPE_F16;
            cdata d;
            cdata_make(&d, cc, dt, &seed);
            int64_t xd[4] = {cc->n, cc->c, cc->h, cc->w}, wd[4] = {cc->k, cc->c, 1, 1}, bd[1] = {cc->k},
                    yd[4] = {cc->n, cc->k, d.oh, d.ow};
            kiln_tensor in[3], out[1];
            kiln__tensor_view(&in[0], d.dx, dt, KILN_FORMAT_NHWC, KILN_DEVICE_CUDA, 4, xd);
            kiln__tensor_view(&in[1], d.dw, dt, KILN_FORMAT_NHWC, KILN_DEVICE_CUDA, 4, wd);
            kiln__tensor_view(&in[2], d.db, dt, KILN_FORMAT_LINEAR, KILN_DEVICE_CUDA, 1, bd);
            kiln__tensor_view(&out[0], d.dy, dt, KILN_FORMAT_NHWC, KILN_DEVICE_CUDA, 4, yd);
            kiln_call c = {.in = in, .nin = 3, .out = out, .nout = 1, .tactic = 2, .layer = cc->name};
            size_t ws = op->quick->cuda_workspace(&c);
            ASSERT(ws > 0);
            ASSERT_OK(D->alloc(ws, &c.workspace));
            c.workspace_size = ws;
            ASSERT_OK(D->memset(d.dy, 0xFF, d.ny * kiln_dtype_size(dt), NULL));
            ASSERT_OK(op->quick->cuda_impl(&c));
            check(&d, cc, dt, 1, 0, 0, "tactic 2 + bias");
            /* a 3x3 conv is not the GEMM tactic's (the builder drops it) */
            int64_t w3[4] = {cc->k, cc->c, 3, 3};
            kiln_tensor in3[3] = {in[0], in[1], in[2]};
            kiln__tensor_view(&in3[1], d.dw, dt, KILN_FORMAT_NHWC, KILN_DEVICE_CUDA, 4, w3);
            kiln_call c3 = c;
            c3.in = in3;
            int64_t y3[4] = {cc->n, cc->k, cc->h - 2, cc->w - 2};
            kiln_tensor out3;
            kiln__tensor_view(&out3, d.dy, dt, KILN_FORMAT_NHWC, KILN_DEVICE_CUDA, 4, y3);
            c3.out = &out3;
            ASSERT_EQ(op->quick->cuda_impl(&c3), KILN_EUNSUPPORTED);
            ASSERT_CONTAINS(kiln_errmsg(), "1x1 stride-1");
            D->free(c.workspace);
            cdata_free(&d);
            runs++;
        }
    printf("%d NHWC GEMM convs matched the reference\n", runs);
}

static const ccase dnn_cases[] = {
    {"3x3 pad 1, C 5 -> K 7", 2, 5, 9, 7, 7, 3, 3, 1, 1, 1},
    {"3x3 pad 1, C 16 -> K 32", 2, 16, 10, 10, 32, 3, 3, 1, 1, 1},
    {"grouped 2, stride 2", 2, 16, 11, 9, 24, 3, 3, 2, 1, 2},
    {"1x1 stride 2, C 32 -> K 40", 2, 32, 9, 9, 40, 1, 1, 2, 0, 1},
    {"stem 7x7 stride 2", 2, 3, 20, 20, 16, 7, 7, 2, 3, 1},
};

TEST_IMPL(conv_nhwc_cudnn) {
    D = test_need_gpu();
    if (kiln__cudnn_load()) {
        printf("SKIP: cuDNN not usable: %s\n", kiln_errmsg());
        exit(77);
    }
    uint64_t seed = 0xd11;
    int runs = 0;
    for (size_t ci = 0; ci < sizeof dnn_cases / sizeof dnn_cases[0]; ci++)
        for (int t = 0; t < 2; t++) {
            const ccase *cc = &dnn_cases[ci];
            const kiln_dtype dt = t ? KILN_DTYPE_BF16 : KILN_DTYPE_F16;
            cdata d;
            cdata_make(&d, cc, dt, &seed);
            int ran = 0;
            for (int a = 0; a < KILN_CUDNN_ALGOS; a++) {
                kiln_cudnn_conv q = {.geo = {.n = cc->n, .c = cc->c, .h = cc->h, .w = cc->w, .k = cc->k,
                                             .oh = d.oh, .ow = d.ow, .kh = cc->kh, .kw = cc->kw, .sh = cc->s,
                                             .sw = cc->s, .ph = cc->p, .pw = cc->p, .dh = 1, .dw = 1,
                                             .group = cc->g},
                                     .dtype = dt, .algo = a, .relu = 1, .nhwc = 1, .x = d.dx, .w = d.dw,
                                     .bias = d.db, .z = d.dz, .y = d.dy};
                size_t ws = 0;
                if (kiln__cudnn_conv_workspace(&q, &ws)) continue;
                void *dws = NULL;
                if (ws) ASSERT_OK(D->alloc(ws, &dws));
                kiln_call c = {.workspace = dws, .workspace_size = ws, .layer = cc->name};
                ASSERT_OK(D->memset(d.dy, 0xFF, d.ny * kiln_dtype_size(dt), NULL));
                int fused = 0, rc = kiln__cudnn_conv(&c, &q, &fused);
                if (rc == KILN_EUNSUPPORTED) {
                    if (dws) D->free(dws);
                    continue;
                }
                ASSERT_OK(rc);
                char what[64];
                snprintf(what, sizeof what, "algorithm %d%s", a, fused ? " fused" : "");
                if (fused) {
                    check(&d, cc, dt, 1, 1, 1, what);
                } else { /* conv + z only: the launcher's bias_act does the rest */
                    check(&d, cc, dt, 0, 1, 0, what);
                }
                if (dws) D->free(dws);
                ran++;
            }
            printf("  %s %s: %d cuDNN algorithms in NHWC matched\n", cc->name, kiln_dtype_name(dt), ran);
            ASSERT(ran > 0);
            runs += ran;
            cdata_free(&d);
        }
    printf("%d NHWC cuDNN convs matched the reference\n", runs);
}

/* ---- an engine ----------------------------------------------------------- */

enum { EN = 2, EC = 5, EH = 16, EW = 16 };

typedef struct cw {
    int k, c, kh, s, p;
    float *w, *b;
} cw;

static void conv_layer(kiln_network *net, const char *name, const char *x, const char *y, cw *w, uint64_t *seed) {
    char wn[32], bn[32];
    snprintf(wn, sizeof wn, "%s.w", name);
    snprintf(bn, sizeof bn, "%s.b", name);
    size_t nw = (size_t)w->k * w->c * w->kh * w->kh;
    if (!w->w) { /* made once: every build of the net and the reference share them */
        w->w = rnd(nw, seed, 1.0f / sqrtf((float)(w->c * w->kh * w->kh)));
        w->b = rnd((size_t)w->k, seed, 0.5f);
    }
    int64_t wd[4] = {w->k, w->c, w->kh, w->kh}, bd[1] = {w->k};
    ASSERT_OK(kiln_network_add_constant(net, wn, KILN_DTYPE_F32, 4, wd, w->w));
    ASSERT_OK(kiln_network_add_constant(net, bn, KILN_DTYPE_F32, 1, bd, w->b));
    const char *in[3] = {x, wn, bn}, *out[1] = {y};
    kiln_layer *L = kiln_network_add_layer(net, "ai.onnx::Conv", 11, name, 3, in, 1, out);
    ASSERT(L);
    int64_t pads[4] = {w->p, w->p, w->p, w->p}, st[2] = {w->s, w->s};
    ASSERT_OK(kiln_layer_set_ints(L, "pads", pads, 4));
    ASSERT_OK(kiln_layer_set_ints(L, "strides", st, 2));
}

static void op1(kiln_network *net, const char *op, int ver, const char *name, const char *x, const char *y) {
    const char *in[1] = {x}, *out[1] = {y};
    ASSERT(kiln_network_add_layer(net, op, ver, name, 1, in, 1, out));
}

static void add2(kiln_network *net, const char *name, const char *a, const char *b, const char *y) {
    const char *in[2] = {a, b}, *out[1] = {y};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Add", 7, name, 2, in, 1, out));
}

static cw W[5] = {{12, EC, 3, 2, 1, NULL, NULL}, {7, 12, 1, 1, 0, NULL, NULL}, {12, 7, 3, 1, 1, NULL, NULL},
                  {9, 12, 1, 2, 0, NULL, NULL}, {9, 9, 1, 1, 0, NULL, NULL}};

static kiln_network *chain_net(void) {
    uint64_t seed = 0xc4a1;
    kiln_network *net = kiln_network_create();
    int64_t xd[4] = {EN, EC, EH, EW};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 4, xd, NULL));
    conv_layer(net, "conv0", "x", "c0", &W[0], &seed);
    op1(net, "ai.onnx::Relu", 6, "relu0", "c0", "t0");
    const char *pi[1] = {"t0"}, *po[2] = {"p", "pidx"};
    kiln_layer *P = kiln_network_add_layer(net, "ai.onnx::MaxPool", 12, "pool", 1, pi, 2, po);
    ASSERT(P);
    int64_t k[2] = {3, 3}, s[2] = {2, 2}, pads[4] = {1, 1, 1, 1};
    ASSERT_OK(kiln_layer_set_ints(P, "kernel_shape", k, 2));
    ASSERT_OK(kiln_layer_set_ints(P, "strides", s, 2));
    ASSERT_OK(kiln_layer_set_ints(P, "pads", pads, 4));
    conv_layer(net, "conv1", "p", "c1", &W[1], &seed);
    op1(net, "ai.onnx::Relu", 6, "relu1", "c1", "a");
    conv_layer(net, "conv2", "a", "c2", &W[2], &seed);
    add2(net, "add2", "c2", "p", "s2");
    op1(net, "ai.onnx::Relu", 6, "relu2", "s2", "r");
    const char *mi[2] = {"r", "r"}, *mo[1] = {"m"}; /* a binary op on its own (not fusable) */
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Mul", 7, "mul", 2, mi, 1, mo));
    conv_layer(net, "conv3", "r", "c3", &W[3], &seed);
    conv_layer(net, "conv4", "c3", "c4", &W[4], &seed);
    add2(net, "add4", "c4", "c3", "e");
    op1(net, "ai.onnx::GlobalAveragePool", 1, "gap", "e", "y");
    ASSERT_OK(kiln_network_mark_output(net, "r"));
    ASSERT_OK(kiln_network_mark_output(net, "m"));
    ASSERT_OK(kiln_network_mark_output(net, "pidx"));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    return net;
}

/* conv of w on x [EN, c, h, w] -> y [EN, k, oh, ow] (double). */
static void ref_conv(const cw *w, const double *x, int h, int wd, double *y, int *oh, int *ow) {
    *oh = (h + 2 * w->p - w->kh) / w->s + 1;
    *ow = (wd + 2 * w->p - w->kh) / w->s + 1;
    for (int n = 0; n < EN; n++)
        for (int m = 0; m < w->k; m++)
            for (int i = 0; i < *oh; i++)
                for (int j = 0; j < *ow; j++) {
                    double acc = w->b[m];
                    for (int c = 0; c < w->c; c++)
                        for (int a = 0; a < w->kh; a++)
                            for (int b = 0; b < w->kh; b++) {
                                int iy = i * w->s - w->p + a, ix = j * w->s - w->p + b;
                                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                                acc += x[((n * w->c + c) * h + iy) * wd + ix] * w->w[((m * w->c + c) * w->kh + a) * w->kh + b];
                            }
                    y[((n * w->k + m) * *oh + i) * *ow + j] = acc;
                }
}

static void relu(double *v, size_t n) {
    for (size_t i = 0; i < n; i++) v[i] = v[i] > 0 ? v[i] : 0;
}

static double c0[EN * 12 * 8 * 8]; /* chain_ref's Relu(conv0): what pool's Indices point into */

/* r [EN, 12, 4, 4] and y [EN, 9] of chain_net for x; pmax: the pool's maxima. */
static void chain_ref(const float *x, double *r, double *y, double *pmax) {
    static double xd[EN * EC * EH * EW], p[EN * 12 * 4 * 4], a[EN * 7 * 16], c2[EN * 12 * 16], c3[EN * 9 * 4],
        c4[EN * 9 * 4];
    int oh, ow;
    for (int i = 0; i < EN * EC * EH * EW; i++) xd[i] = x[i];
    ref_conv(&W[0], xd, EH, EW, c0, &oh, &ow);
    relu(c0, sizeof c0 / sizeof c0[0]);
    for (int n = 0; n < EN * 12; n++) /* MaxPool 3x3 / 2, pads 1: 8x8 -> 4x4 */
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) {
                double m = -INFINITY;
                for (int u = 0; u < 3; u++)
                    for (int v = 0; v < 3; v++) {
                        int iy = 2 * i - 1 + u, ix = 2 * j - 1 + v;
                        if (iy >= 0 && iy < 8 && ix >= 0 && ix < 8 && c0[(n * 8 + iy) * 8 + ix] > m)
                            m = c0[(n * 8 + iy) * 8 + ix];
                    }
                p[(n * 4 + i) * 4 + j] = pmax[(n * 4 + i) * 4 + j] = m;
            }
    ref_conv(&W[1], p, 4, 4, a, &oh, &ow);
    relu(a, sizeof a / sizeof a[0]);
    ref_conv(&W[2], a, 4, 4, c2, &oh, &ow);
    for (int i = 0; i < EN * 12 * 16; i++) r[i] = c2[i] + p[i];
    relu(r, EN * 12 * 16);
    ref_conv(&W[3], r, 4, 4, c3, &oh, &ow);
    ref_conv(&W[4], c3, 2, 2, c4, &oh, &ow);
    for (int i = 0; i < EN * 9; i++) {
        double s = 0;
        for (int q = 0; q < 4; q++) s += c4[i * 4 + q] + c3[i * 4 + q];
        y[i] = s / 4;
    }
}

static int count_nhwc(const kiln_engine *e) {
    int n = 0;
    for (int32_t t = 0; t < e->ntensors; t++) n += e->tensors[t].format == KILN_FORMAT_NHWC;
    return n;
}

/* The verbose log of an "auto" build (nhwc_race's verdict). */
static char g_race[512];
static void race_log(void *ud, kiln_log_level lvl, const char *msg) {
    (void)ud;
    (void)lvl;
    if (strstr(msg, "CUDA layouts:")) snprintf(g_race, sizeof g_race, "%s", msg);
}

/* mode: $KILN_CUDA_NHWC, or "auto" (unset: the NHWC engine raced against
 * the LINEAR one, the faster kept). */
static void run_engine(unsigned flags, const char *mode, double tol) {
    const int race = !strcmp(mode, "auto");
    if (race) unsetenv("KILN_CUDA_NHWC");
    else setenv("KILN_CUDA_NHWC", mode, 1);
    g_race[0] = 0;
    if (race) kiln_log_set(KILN_LOG_VERBOSE, race_log, NULL);
    kiln_network *net = chain_net();
    kiln_engine *e = build_cuda(net, flags | KILN_BUILD_STRICT_DEVICE);
    kiln_log_set(KILN_LOG_WARN, NULL, NULL);
    unsetenv("KILN_CUDA_NHWC");
    if (race) printf("  auto: %s\n", g_race[0] ? g_race : "no NHWC tensor in the first pass: no race");
    if (!e) TEST__FAIL("build (KILN_CUDA_NHWC=%s): %s", mode, kiln_errmsg());
    kiln_network_free(net);
    const int nhwc = count_nhwc(e);
    printf("%s KILN_CUDA_NHWC=%s: %d layers, %d NHWC tensors;", flags & KILN_BUILD_FP16 ? "FP16" : "BF16", mode,
           (int)e->nlayers, nhwc);
    for (int32_t l = 0; l < e->nlayers; l++) {
        const kiln__elayer *L = &e->layers[l];
        if (!strcmp(L->op_name, "Conv"))
            printf(" %s:%s/t%d", L->name, L->nin && L->in[0] >= 0 && e->tensors[L->in[0]].format == KILN_FORMAT_NHWC
                                              ? "NHWC"
                                              : "LINEAR",
                   (int)L->tactic);
    }
    printf("\n");
    if (!strcmp(mode, "0")) ASSERT_EQ(nhwc, 0);
    if (!strcmp(mode, "force")) ASSERT(nhwc > 0);
    /* a race keeps the engine it names */
    if (race && g_race[0]) ASSERT((nhwc > 0) == (strstr(g_race, "NHWC kept") != NULL));
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    static float x[EN * EC * EH * EW], r[EN * 12 * 16], m[EN * 12 * 16], y[EN * 9], r1[EN * 12 * 16],
        m1[EN * 12 * 16], y1[EN * 9];
    static double rr[EN * 12 * 16], ry[EN * 9], pmax[EN * 12 * 16];
    static int64_t pidx[EN * 12 * 16], pidx1[EN * 12 * 16];
    uint64_t seed = 77 + flags;
    for (int i = 0; i < EN * EC * EH * EW; i++) x[i] = test_randf(&seed, -1, 1);
    chain_ref(x, rr, ry, pmax);
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "r", r, sizeof r));
    ASSERT_OK(kiln_context_bind(ctx, "m", m, sizeof m));
    ASSERT_OK(kiln_context_bind(ctx, "pidx", pidx, sizeof pidx));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    for (int run = 0; run < 2; run++) { /* eager (capture), then graph replay */
        memset(r, 0xFF, sizeof r);
        memset(m, 0xFF, sizeof m);
        memset(pidx, 0xFF, sizeof pidx);
        memset(y, 0xFF, sizeof y);
        ASSERT_OK(kiln_context_run(ctx));
        double worst = 0;
        for (int i = 0; i < EN * 12 * 16; i++) {
            double err = fabs(r[i] - rr[i]) / (1 + fabs(rr[i]));
            if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
            err = fabs(m[i] - rr[i] * rr[i]) / (1 + rr[i] * rr[i]);
            if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
        }
        for (int i = 0; i < EN * 9; i++) {
            double err = fabs(y[i] - ry[i]) / (1 + fabs(ry[i]));
            if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
        }
        /* Indices: ONNX's NCHW numbering, inside the window, at a maximum
         * (to the tolerance: 16-bit rounding may tie or reorder near-equal values) */
        for (int i = 0; i < EN * 12 * 16; i++) {
            const int64_t k = pidx[i], plane = i / 16, oy = i / 4 % 4, ox = i % 4, iy = k % 64 / 8, ix = k % 8;
            if (k < plane * 64 || k >= (plane + 1) * 64 || iy < 2 * oy - 1 || iy > 2 * oy + 1 || ix < 2 * ox - 1 ||
                ix > 2 * ox + 1 || !(fabs(c0[k] - pmax[i]) <= tol * (1 + fabs(pmax[i]))))
                TEST__FAIL("pool Indices[%d] = %lld: not the window's maximum (%g there, max %g)", i, (long long)k,
                           k >= 0 && k < EN * 12 * 64 ? c0[k] : NAN, pmax[i]);
        }
        printf("  run %d: max |out - ref| / (1 + |ref|) = %.3g (tolerance %.3g); Indices ok\n", run, worst, tol);
        ASSERT(worst <= tol);
        if (run == 0) {
            memcpy(r1, r, sizeof r);
            memcpy(m1, m, sizeof m);
            memcpy(pidx1, pidx, sizeof pidx);
            memcpy(y1, y, sizeof y);
        } else {
            ASSERT(!memcmp(r1, r, sizeof r) && !memcmp(m1, m, sizeof m) && !memcmp(y1, y, sizeof y) &&
                   !memcmp(pidx1, pidx, sizeof pidx));
        }
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

TEST_IMPL(engine_nhwc_chain) {
    D = test_need_gpu();
    run_engine(KILN_BUILD_FP16, "force", 2e-2);
    run_engine(KILN_BUILD_FP16, "0", 2e-2);
    run_engine(KILN_BUILD_FP16, "1", 2e-2);
    run_engine(KILN_BUILD_FP16, "auto", 2e-2);
    run_engine(KILN_BUILD_BF16, "force", 1e-1);
    run_engine(KILN_BUILD_BF16, "0", 1e-1);
    for (int i = 0; i < 5; i++) free(W[i].w), free(W[i].b);
}

TEST_LIST(TEST_ENTRY(reformat_nhwc_round_trip), TEST_ENTRY(conv_nhwc_gemm), TEST_ENTRY(conv_nhwc_cudnn),
          TEST_ENTRY(engine_nhwc_chain))
