/*
 * test_cuda_cudnn.c — the cuDNN convolution tactic (device/cuda/cudnn.c)
 * against a naive double-precision reference (test_conv_ref), on the GPU.
 *
 * Says first whether cuDNN was found (and which version) or exits with the
 * skip code 77 saying why: no GPU, or no libcudnn.so.9 ($KILN_CUDNN, the
 * loader path, a pip wheel's site-packages/nvidia/cudnn/lib).
 *
 * For every case (plain, grouped + strided + dilated, depthwise, 1x1,
 * the 7x7/2 stem) in FP32, FP16 and BF16, with and without bias, residual
 * z and ReLU, every cuDNN algorithm that takes the case runs on fresh
 * random inputs into an output poisoned with NaN bytes.  When cuDNN did not
 * fuse bias and activation (kiln__cudnn_conv's *fused = 0) the test adds
 * them on the host, as conv_cuda.c's bias_act kernel does on the GPU.
 * Tolerance: |gpu - ref| <= eps * (1 + sum |x w| + |z|), eps 1e-4 for FP32
 * (FFT and Winograd algorithms round differently than a direct sum), 8e-3
 * for FP16 and 6e-2 for BF16 (inputs rounded for the reference too; the
 * output's one rounding and FP32 accumulation).  Every algorithm cuDNN's
 * heuristic ranks in its first KILN_CUDNN_TOPK must run, and each case must
 * have run with at least one algorithm.  More conv shapes than the
 * descriptor cache holds pass through it (test_cudnn_plans checks its LRU
 * bookkeeping host-side), then a case runs again on a remade plan.
 */
#include "device/cuda/cudnn.h"
#include "device/device.h"
#include "kiln_int.h"
#include "test.h"
#include "test_ops_util.h"
#include "test_cuda_util.h"

#include <math.h>

static const kiln__device *D;

static void need_cudnn(void) {
    D = test_need_gpu();
    if (kiln__cudnn_load()) {
        printf("SKIP: cuDNN not usable: %s\n", kiln_errmsg());
        exit(77);
    }
    printf("cuDNN found: version %d\n", kiln__cudnn_version());
    char buf[4096]; /* and `kiln devices` says so */
    ASSERT_EQ(kiln_devices_describe(buf, sizeof buf), 1);
    ASSERT_CONTAINS(buf, "cudnn: 9.");
    ASSERT_CONTAINS(buf, "libcudnn.so.9");
}

typedef struct ccase {
    const char *name;
    int n, c, h, w, k, kh, kw, s, p, d, g;
} ccase;

static const ccase cases[] = {
    {"3x3 pad 1", 2, 16, 12, 12, 32, 3, 3, 1, 1, 1, 1},
    {"grouped 4, stride 2, dilation 2", 2, 16, 13, 11, 16, 3, 3, 2, 2, 2, 4},
    {"depthwise 3x3", 1, 8, 9, 9, 8, 3, 3, 1, 1, 1, 8},
    {"1x1", 2, 64, 7, 7, 32, 1, 1, 1, 0, 1, 1},
    {"stem 7x7 stride 2", 2, 3, 20, 20, 16, 7, 7, 2, 3, 1, 1},
};

static void *upload(const void *h, size_t n) {
    void *d = NULL;
    ASSERT_OK(D->alloc(n, &d));
    ASSERT_OK(D->copy(d, h, n, NULL));
    return d;
}

/* Round v to dt in place (the reference sees what the GPU sees) and give
 * its bytes in dt. */
static void *to_dtype(float *v, size_t n, kiln_dtype dt) {
    size_t es = kiln_dtype_size(dt);
    uint8_t *b = malloc(n * es);
    for (size_t i = 0; i < n; i++) {
        if (dt == KILN_DTYPE_F16) {
            uint16_t h = kiln_f32_to_f16(v[i]);
            v[i] = kiln_f16_to_f32(h);
            memcpy(b + i * 2, &h, 2);
        } else if (dt == KILN_DTYPE_BF16) {
            uint16_t h = kiln_f32_to_bf16(v[i]);
            v[i] = kiln_bf16_to_f32(h);
            memcpy(b + i * 2, &h, 2);
        } else {
            memcpy(b + i * 4, &v[i], 4);
        }
    }
    return b;
}

static float *rnd(size_t n, uint64_t *seed) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = (float)(test_rand_u64(seed) % 20001) / 10000.0f - 1.0f;
    return v;
}

/* One case, dtype and fusion: every algorithm.  Returns how many ran. */
static int run_case(const ccase *cc, kiln_dtype dt, int with_bias, int with_z, int relu, uint64_t *seed) {
    int oh = (cc->h + 2 * cc->p - cc->d * (cc->kh - 1) - 1) / cc->s + 1;
    int ow = (cc->w + 2 * cc->p - cc->d * (cc->kw - 1) - 1) / cc->s + 1;
    size_t nx = (size_t)cc->n * cc->c * cc->h * cc->w, nw = (size_t)cc->k * (cc->c / cc->g) * cc->kh * cc->kw;
    size_t ny = (size_t)cc->n * cc->k * oh * ow, es = kiln_dtype_size(dt);
    float *x = rnd(nx, seed), *w = rnd(nw, seed), *b = rnd((size_t)cc->k, seed), *z = rnd(ny, seed);
    void *hx = to_dtype(x, nx, dt), *hw = to_dtype(w, nw, dt), *hb = to_dtype(b, (size_t)cc->k, dt),
         *hz = to_dtype(z, ny, dt);
    float *ax = malloc(nx * sizeof *ax), *aw = malloc(nw * sizeof *aw);
    for (size_t i = 0; i < nx; i++) ax[i] = fabsf(x[i]);
    for (size_t i = 0; i < nw; i++) aw[i] = fabsf(w[i]);
    int64_t in[2] = {cc->h, cc->w}, kk[2] = {cc->kh, cc->kw}, s[2] = {cc->s, cc->s}, d[2] = {cc->d, cc->d},
            pb[2] = {cc->p, cc->p}, o[2] = {oh, ow};
    test_conv_geo g = test_conv_geo_make(cc->n, cc->c, cc->k, cc->g, 2, in, kk, s, d, pb, o);
    double *ref = malloc(ny * sizeof *ref), *mag = malloc(ny * sizeof *mag);
    test_conv_ref(&g, x, w, NULL, ref);
    test_conv_ref(&g, ax, aw, NULL, mag);
    void *dx = upload(hx, nx * es), *dw = upload(hw, nw * es), *db = upload(hb, (size_t)cc->k * es),
         *dz = upload(hz, ny * es), *dy = NULL;
    ASSERT_OK(D->alloc(ny * es, &dy));
    uint8_t *out = malloc(ny * es), *poison = malloc(ny * es);
    memset(poison, 0xFF, ny * es);
    kiln_cudnn_conv q = {.geo = {.n = cc->n, .c = cc->c, .h = cc->h, .w = cc->w, .k = cc->k, .oh = oh, .ow = ow,
                                 .kh = cc->kh, .kw = cc->kw, .sh = cc->s, .sw = cc->s, .ph = cc->p, .pw = cc->p,
                                 .dh = cc->d, .dw = cc->d, .group = cc->g},
                         .dtype = dt, .relu = relu, .x = dx, .w = dw, .bias = with_bias ? db : NULL,
                         .z = with_z ? dz : NULL, .y = dy};
    double eps = dt == KILN_DTYPE_F32 ? 1e-4 : dt == KILN_DTYPE_F16 ? 8e-3 : 6e-2;
    int ran = 0;
    for (int a = 0; a < KILN_CUDNN_ALGOS; a++) {
        q.algo = a;
        size_t ws = 0;
        int rc = kiln__cudnn_conv_workspace(&q, &ws), ranked = kiln__cudnn_conv_ranked(&q);
        void *dws = NULL;
        if (!rc && ws) ASSERT_OK(D->alloc(ws, &dws));
        ASSERT_OK(D->copy(dy, poison, ny * es, NULL));
        kiln_call c = {.workspace = dws, .workspace_size = ws, .layer = cc->name};
        int fused = 0;
        if (!rc) rc = kiln__cudnn_conv(&c, &q, &fused);
        if (rc == KILN_EUNSUPPORTED && !ranked) {
            printf("  %s %s algo %d: not taken (%s)\n", cc->name, kiln_dtype_name(dt), a, kiln_errmsg());
            if (dws) D->free(dws);
            continue;
        }
        if (rc) printf("FAIL %s %s algo %d (ranked %d): %s\n", cc->name, kiln_dtype_name(dt), a, ranked, kiln_errmsg());
        ASSERT_OK(rc);
        ASSERT_OK(D->stream_sync(NULL));
        ASSERT_OK(D->copy(out, dy, ny * es, NULL));
        ASSERT_OK(D->stream_sync(NULL));
        int bad = 0;
        for (size_t i = 0; i < ny; i++) {
            int m = (int)(i / ((size_t)oh * ow) % (size_t)cc->k);
            double want = ref[i] + (with_bias ? b[m] : 0) + (with_z ? z[i] : 0);
            if (relu && want < 0) want = 0;
            double got = test_from_dtype(out, i, dt);
            if (!fused) { /* the launcher's bias_act: bias, then the activation */
                got += with_bias ? b[m] : 0;
                if (relu && got < 0) got = 0;
            }
            double tol = eps * (1 + mag[i] + (with_z ? fabs(z[i]) : 0) + (with_bias ? fabs(b[m]) : 0));
            if (!(fabs(got - want) <= tol) && bad++ < 3)
                printf("FAIL %s %s algo %d (fused %d) y[%zu]: gpu %.7g ref %.7g (tol %.3g)\n", cc->name,
                       kiln_dtype_name(dt), a, fused, i, got, want, tol);
        }
        ASSERT_EQ(bad, 0);
        printf("  ok %s %s bias %d z %d relu %d algo %d%s%s (workspace %zu)\n", cc->name, kiln_dtype_name(dt),
               with_bias, with_z, relu, a, fused ? " fused" : "", ranked ? " top-ranked" : "", ws);
        ran++;
        if (dws) D->free(dws);
    }
    D->free(dx), D->free(dw), D->free(db), D->free(dz), D->free(dy);
    free(x), free(w), free(b), free(z), free(hx), free(hw), free(hb), free(hz), free(ax), free(aw);
    free(ref), free(mag), free(out), free(poison);
    return ran;
}

TEST_IMPL(cudnn_conv_vs_reference) {
    need_cudnn();
    uint64_t seed = 0x5eed1234;
    const kiln_dtype dts[] = {KILN_DTYPE_F32, KILN_DTYPE_F16, KILN_DTYPE_BF16};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (size_t t = 0; t < 3; t++)
            for (int f = 0; f < 4; f++) { /* bias + relu; bias + z + relu; z only; bias only */
                static const int fb[4] = {1, 1, 0, 1}, fz[4] = {0, 1, 1, 0}, fr[4] = {1, 1, 0, 0};
                int ran = run_case(&cases[i], dts[t], fb[f], fz[f], fr[f], &seed);
                if (!ran) printf("FAIL %s %s: no cuDNN algorithm took it\n", cases[i].name, kiln_dtype_name(dts[t]));
                ASSERT(ran > 0);
            }
}

/* Outside the builder an unknown algorithm is an error, not a crash. */
TEST_IMPL(cudnn_conv_bad_algo) {
    need_cudnn();
    kiln_cudnn_conv q = {.geo = {.n = 1, .c = 1, .h = 3, .w = 3, .k = 1, .oh = 3, .ow = 3, .kh = 1, .kw = 1,
                                 .sh = 1, .sw = 1, .dh = 1, .dw = 1, .group = 1},
                         .dtype = KILN_DTYPE_F32, .algo = KILN_CUDNN_ALGOS};
    size_t ws;
    ASSERT_EQ(kiln__cudnn_conv_workspace(&q, &ws), KILN_EUNSUPPORTED);
    ASSERT_CONTAINS(kiln_errmsg(), "algorithm 8");
}

/* Past the cache's capacity the least recently used plan is destroyed
 * (cuDNN's own descriptor calls here), and a shape whose plan went is
 * made again and computes right. */
TEST_IMPL(cudnn_plan_eviction) {
    need_cudnn();
    uint64_t seed = 0x0e71c7;
    ASSERT(run_case(&cases[0], KILN_DTYPE_F32, 1, 1, 1, &seed) > 0);
    kiln_cudnn_plan_stats st;
    kiln__cudnn_plan_stats(&st);
    const long made0 = st.made;
    for (int i = 0; i < st.capacity + 100; i++) { /* 1x1 convs of heights 8.. */
        kiln_cudnn_conv q = {.geo = {.n = 1, .c = 4, .h = 8 + i, .w = 5, .k = 4, .oh = 8 + i, .ow = 5, .kh = 1,
                                     .kw = 1, .sh = 1, .sw = 1, .dh = 1, .dw = 1, .group = 1},
                             .dtype = KILN_DTYPE_F32, .algo = 0};
        size_t ws;
        int rc = kiln__cudnn_conv_workspace(&q, &ws);
        if (rc && rc != KILN_EUNSUPPORTED) printf("FAIL shape %d: %s\n", i, kiln_errmsg());
        ASSERT(rc == 0 || rc == KILN_EUNSUPPORTED);
    }
    kiln__cudnn_plan_stats(&st);
    printf("  plans %d of %d, made %ld, evicted %ld\n", st.plans, st.capacity, st.made, st.evicted);
    ASSERT_EQ(st.plans, st.capacity);
    ASSERT_EQ(st.indexed, st.plans);
    ASSERT(st.made >= made0 + st.capacity + 100);
    ASSERT_EQ(st.evicted, st.made - st.capacity);
    ASSERT(run_case(&cases[0], KILN_DTYPE_F32, 1, 1, 1, &seed) > 0); /* its plans were evicted: made again */
}

TEST_LIST(TEST_ENTRY(cudnn_conv_vs_reference), TEST_ENTRY(cudnn_conv_bad_algo), TEST_ENTRY(cudnn_plan_eviction))
