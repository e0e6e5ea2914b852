/*
 * test_ops2.c — the ops2 built-in ONNX operators (Gemm, MatMul, Conv,
 * ConvTranspose, pooling, normalization, Softmax family, Resize, Pad,
 * LSTM/GRU/RNN) against naive reference code written here.
 *
 * Two harnesses:
 *   run_net:    a one-layer network through the public API (kiln_network_*,
 *               kiln_build with tactic timing, kiln_context_* in debug mode so
 *               every output element must be written); outputs are poisoned.
 *   run_tactic: the op's impl called directly through the registry with a
 *               forced tactic, so every Conv tactic is checked, not only the
 *               one the builder happened to pick.
 * Inputs are fresh random values (a new xorshift stream per case).
 */
#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "kiln_int.h"
#include "test.h"
#include "test_ops_util.h"

#include <stdint.h>

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

static uint64_t g_seed = 0x0F0E0D0C0B0A0908ull;

static float *rnd(int64_t n, float lo, float hi) { return test_rnd_f32(&g_seed, n, lo, hi); }

/* Build (timing on unless no_timing) and run a one-layer network. */
static void run_net(const char *op, int ver, int nin, const tio *in, int nout, tio *out,
                    attr_fn attrs, const void *ud, int no_timing) {
    test_net_opts o = {no_timing ? KILN_BUILD_NO_TIMING : 0, 2, 0};
    if (test_net_try(&o, op, ver, nin, in, nout, out, attrs, ud)) TEST__FAIL("%s: %s", op, kiln_errmsg());
}

/* ---- direct impl calls with a forced tactic ------------------------------- */

typedef struct attr_kv {
    const char *name;
    kiln_attr_type type;
    int64_t i;
    int64_t n;
    const int64_t *ints;
    const char *s;
} attr_kv;

static void run_tactic(const char *name, int ver, int tactic, int nin, kiln_tensor *in,
                       kiln_tensor *out, const attr_kv *kv, int nkv) {
    const kiln__op *op = kiln__registry_find("ai.onnx", name, ver);
    ASSERT(op && op->quick);
    kiln__attrset s;
    ASSERT_OK(kiln__attrset_init(&s, op));
    for (int i = 0; i < nkv; i++) {
        kiln_attr_value v;
        memset(&v, 0, sizeof v);
        v.present = 1;
        v.type = kv[i].type;
        if (kv[i].type == KILN_ATTR_INT) v.i = kv[i].i;
        if (kv[i].type == KILN_ATTR_ARRAY) {
            v.elem = KILN_DTYPE_I64;
            v.count = kv[i].n;
            v.data = kv[i].ints;
        }
        if (kv[i].type == KILN_ATTR_STRING) {
            v.s = kv[i].s;
            v.len = strlen(kv[i].s);
        }
        ASSERT_OK(kiln__attrset_set(&s, kv[i].name, &v));
    }
    kiln_attrs av = kiln__attrset_view(&s);
    kiln__pool *pool = kiln__pool_create(2);
    ASSERT(pool);
    struct kiln_exec ex = {.device = KILN_DEVICE_CPU, .pool = pool};
    kiln_call c = {.in = in, .nin = nin, .out = out, .nout = 1, .attrs = &av, .tactic = tactic,
                   .exec = &ex, .layer = "direct"};
    size_t ws = op->quick->workspace ? op->quick->workspace(&c) : 0;
    void *wbuf = ws ? kiln__aligned_alloc(ws) : NULL;
    c.workspace = wbuf;
    c.workspace_size = ws;
    memset(out[0].data, 0xA5, (size_t)kiln_tensor_numel(&out[0]) * sizeof(float));
    int rc = op->quick->impl(&c);
    if (rc) TEST__FAIL("%s tactic %d: %s", name, tactic, kiln_errmsg());
    kiln__aligned_free(wbuf);
    kiln__pool_free(pool);
    kiln__attrset_free(&s);
}

static void check_close(const char *what, const float *got, const float *want, int64_t n,
                        double atol, double rtol) {
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= atol + rtol * fabs(want[i])))
            TEST__FAIL("%s: element %" PRId64 ": got %.7g, expected %.7g", what, i, got[i], want[i]);
    }
}

/* ---- Gemm / MatMul ---------------------------------------------------------- */

typedef struct gemm_case {
    int64_t M, N, K;
    int ta, tb;
    float alpha, beta;
    int cdims; /* 0 none, 1: (N), 2: (M, N), 3: (M, 1), 4: scalar (1) */
} gemm_case;

static void gemm_attrs(kiln_layer *l, const void *ud) {
    const gemm_case *g = ud;
    ASSERT_OK(kiln_layer_set_int(l, "transA", g->ta));
    ASSERT_OK(kiln_layer_set_int(l, "transB", g->tb));
    ASSERT_OK(kiln_layer_set_float(l, "alpha", g->alpha));
    ASSERT_OK(kiln_layer_set_float(l, "beta", g->beta));
}

static void gemm_one(const gemm_case *g, int no_timing) {
    int64_t M = g->M, N = g->N, K = g->K;
    float *a = rnd(M * K, -1, 1), *b = rnd(K * N, -1, 1), *c = rnd(M * N, -1, 1);
    float *y = malloc((size_t)(M * N) * sizeof(float)), *ref = malloc((size_t)(M * N) * sizeof(float));
    tio in[3] = {
        {"A", KILN_DTYPE_F32, 2, {g->ta ? K : M, g->ta ? M : K}, a},
        {"B", KILN_DTYPE_F32, 2, {g->tb ? N : K, g->tb ? K : N}, b, 1},
        {"C", KILN_DTYPE_F32, 1, {N}, c, 1},
    };
    int64_t cm = 1, cn = 1;
    switch (g->cdims) {
    case 1: cn = N; break;
    case 2: in[2].nd = 2; in[2].dims[0] = M; in[2].dims[1] = N; cm = M; cn = N; break;
    case 3: in[2].nd = 2; in[2].dims[0] = M; in[2].dims[1] = 1; cm = M; break;
    case 4: in[2].dims[0] = 1; break;
    }
    tio out = {"Y", KILN_DTYPE_F32, 2, {M, N}, y};
    run_net("ai.onnx::Gemm", 11, g->cdims ? 3 : 2, in, 1, &out, gemm_attrs, g, no_timing);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0;
            for (int64_t k = 0; k < K; k++) {
                double av = g->ta ? a[k * M + i] : a[i * K + k];
                double bv = g->tb ? b[j * K + k] : b[k * N + j];
                s += av * bv;
            }
            s *= g->alpha;
            if (g->cdims) s += g->beta * c[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)];
            ref[i * N + j] = (float)s;
        }
    check_close("Gemm", y, ref, M * N, 1e-4 * (double)K, 1e-4);
    free(a); free(b); free(c); free(y); free(ref);
}

TEST_IMPL(gemm) {
    static const gemm_case cases[] = {
        {7, 9, 5, 0, 0, 1.0f, 1.0f, 1},     {33, 70, 129, 1, 0, 0.5f, 2.0f, 2},
        {64, 1000, 300, 0, 1, 1.0f, 1.0f, 1}, /* fc layer: transB, vector bias */
        {1, 257, 512, 0, 1, 1.0f, 1.0f, 3},  /* M = 1 (gemv path) */
        {300, 1, 77, 1, 1, 2.0f, 0.5f, 4},   /* N = 1 */
        {13, 17, 0, 0, 0, 1.0f, 1.0f, 2},    /* K = 0: Y = beta*C */
        {50, 40, 30, 1, 1, -1.5f, 0.0f, 0},
        {25, 31, 600, 0, 0, 1.0f, 1.0f, 3},  /* per-row bias, K > KC blocks */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) gemm_one(&cases[i], i % 2);
}

static void matmul_one(int na, const int64_t *ad, int nb, const int64_t *bd, int ny,
                       const int64_t *yd) {
    tio in[2] = {{"A", KILN_DTYPE_F32, na}, {"B", KILN_DTYPE_F32, nb}};
    memcpy(in[0].dims, ad, (size_t)na * sizeof(int64_t));
    memcpy(in[1].dims, bd, (size_t)nb * sizeof(int64_t));
    in[0].data = rnd(tio_numel(&in[0]), -1, 1);
    in[1].data = rnd(tio_numel(&in[1]), -1, 1);
    tio out = {"Y", KILN_DTYPE_F32, ny};
    memcpy(out.dims, yd, (size_t)ny * sizeof(int64_t));
    int64_t ny_el = tio_numel(&out);
    out.data = malloc((size_t)ny_el * sizeof(float));
    float *ref = malloc((size_t)ny_el * sizeof(float));
    run_net("ai.onnx::MatMul", 1, 2, in, 1, &out, NULL, NULL, 0);
    /* promote to [batch..., M, K] x [batch..., K, N] */
    int64_t M = na >= 2 ? ad[na - 2] : 1, K = ad[na - 1], N = nb >= 2 ? bd[nb - 1] : 1;
    int ba = na > 2 ? na - 2 : 0, bb = nb > 2 ? nb - 2 : 0, nbat = ba > bb ? ba : bb;
    int64_t batch[8], nbatch = 1;
    for (int i = 0; i < nbat; i++) {
        int ia = i - (nbat - ba), ib = i - (nbat - bb);
        int64_t x = ia >= 0 ? ad[ia] : 1, y = ib >= 0 ? bd[ib] : 1;
        batch[i] = x > y ? x : y;
        nbatch *= batch[i];
    }
    const float *a = in[0].data, *b = in[1].data;
    for (int64_t t = 0; t < nbatch; t++) {
        int64_t rem = t, oa = 0, ob = 0, sa = 1, sb = 1;
        for (int i = nbat - 1; i >= 0; i--) {
            int64_t ix = rem % batch[i];
            rem /= batch[i];
            int ia = i - (nbat - ba), ib = i - (nbat - bb);
            if (ia >= 0) { oa += (ad[ia] == 1 ? 0 : ix) * sa; sa *= ad[ia]; }
            if (ib >= 0) { ob += (bd[ib] == 1 ? 0 : ix) * sb; sb *= bd[ib]; }
        }
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += (double)a[oa * M * K + i * K + k] * b[ob * K * N + k * N + j];
                ref[t * M * N + i * N + j] = (float)s;
            }
    }
    check_close("MatMul", out.data, ref, ny_el, 1e-4 * (double)K, 1e-4);
    free(in[0].data); free(in[1].data); free(out.data); free(ref);
}

TEST_IMPL(matmul) {
    matmul_one(2, (int64_t[]){5, 7}, 2, (int64_t[]){7, 3}, 2, (int64_t[]){5, 3});
    matmul_one(3, (int64_t[]){4, 6, 33}, 2, (int64_t[]){33, 40}, 3, (int64_t[]){4, 6, 40});
    matmul_one(4, (int64_t[]){2, 1, 5, 8}, 3, (int64_t[]){3, 8, 9}, 4, (int64_t[]){2, 3, 5, 9});
    matmul_one(1, (int64_t[]){8}, 3, (int64_t[]){2, 8, 6}, 2, (int64_t[]){2, 6});
    matmul_one(3, (int64_t[]){3, 4, 8}, 1, (int64_t[]){8}, 2, (int64_t[]){3, 4});
    matmul_one(3, (int64_t[]){5, 16, 64}, 3, (int64_t[]){5, 64, 16}, 3, (int64_t[]){5, 16, 16});
}

/* ---- Conv -------------------------------------------------------------------- */

typedef struct conv_case {
    int nsp;
    int64_t N, C, M, G;
    int64_t in[3], k[3], s[3], d[3], pb[3], pe[3];
    int bias;
} conv_case;

static int64_t conv_out(const conv_case *c, int i) {
    return (c->in[i] + c->pb[i] + c->pe[i] - (c->k[i] - 1) * c->d[i] - 1) / c->s[i] + 1;
}

static void conv_ref(const conv_case *c, const float *x, const float *w, const float *b, float *y) {
    int64_t o[3], ny = c->N * c->M;
    for (int i = 0; i < c->nsp; i++) ny *= o[i] = conv_out(c, i);
    test_conv_geo g = test_conv_geo_make(c->N, c->C, c->M, c->G, c->nsp, c->in, c->k, c->s, c->d, c->pb, o);
    double *acc = test_xmalloc((size_t)ny * sizeof(double));
    test_conv_ref(&g, x, w, b, acc);
    for (int64_t i = 0; i < ny; i++) y[i] = (float)acc[i];
    free(acc);
}

static void conv_attrs(kiln_layer *l, const void *ud) {
    const conv_case *c = ud;
    int64_t pads[6];
    for (int i = 0; i < c->nsp; i++) { pads[i] = c->pb[i]; pads[c->nsp + i] = c->pe[i]; }
    ASSERT_OK(kiln_layer_set_ints(l, "strides", c->s, c->nsp));
    ASSERT_OK(kiln_layer_set_ints(l, "dilations", c->d, c->nsp));
    ASSERT_OK(kiln_layer_set_ints(l, "pads", pads, 2 * c->nsp));
    ASSERT_OK(kiln_layer_set_int(l, "group", c->G));
}

static void conv_one(const conv_case *c) {
    int nd = c->nsp + 2;
    int64_t xd[5] = {c->N, c->C}, wd[5] = {c->M, c->C / c->G}, yd[5] = {c->N, c->M};
    for (int i = 0; i < c->nsp; i++) {
        xd[2 + i] = c->in[i];
        wd[2 + i] = c->k[i];
        yd[2 + i] = conv_out(c, i);
    }
    tio in[3] = {{"X", KILN_DTYPE_F32, nd}, {"W", KILN_DTYPE_F32, nd, {0}, NULL, 1},
                 {"B", KILN_DTYPE_F32, 1, {c->M}, NULL, 1}};
    tio out = {"Y", KILN_DTYPE_F32, nd};
    memcpy(in[0].dims, xd, sizeof xd);
    memcpy(in[1].dims, wd, sizeof wd);
    memcpy(out.dims, yd, sizeof yd);
    in[0].data = rnd(tio_numel(&in[0]), -1, 1);
    in[1].data = rnd(tio_numel(&in[1]), -1, 1);
    in[2].data = rnd(c->M, -1, 1);
    int64_t ny = tio_numel(&out);
    float *ref = malloc((size_t)ny * sizeof(float));
    out.data = malloc((size_t)ny * sizeof(float));
    conv_ref(c, in[0].data, in[1].data, c->bias ? in[2].data : NULL, ref);
    int64_t K = (c->C / c->G) * c->k[0] * (c->nsp > 1 ? c->k[1] : 1) * (c->nsp > 2 ? c->k[2] : 1);
    double atol = 2e-5 * (double)K;
    /* through the builder (timed tactic choice) */
    run_net("ai.onnx::Conv", 1, c->bias ? 3 : 2, in, 1, &out, conv_attrs, c, 0);
    check_close("Conv (built)", out.data, ref, ny, atol, 1e-4);
    /* every tactic directly */
    int64_t pads[6];
    for (int i = 0; i < c->nsp; i++) { pads[i] = c->pb[i]; pads[c->nsp + i] = c->pe[i]; }
    attr_kv kv[] = {{"strides", KILN_ATTR_ARRAY, 0, c->nsp, c->s},
                    {"dilations", KILN_ATTR_ARRAY, 0, c->nsp, c->d},
                    {"pads", KILN_ATTR_ARRAY, 0, 2 * c->nsp, pads},
                    {"group", KILN_ATTR_INT, c->G}};
    for (int tactic = 0; tactic <= 5; tactic++) { /* 5: depthwise (falls back to direct otherwise) */
        kiln_tensor ti[3] = {test_tensor_f32(in[0].data, nd, xd), test_tensor_f32(in[1].data, nd, wd),
                             test_tensor_f32(in[2].data, 1, &c->M)};
        kiln_tensor to = test_tensor_f32(out.data, nd, yd);
        run_tactic("Conv", 1, tactic, c->bias ? 3 : 2, ti, &to, kv, 4);
        char what[64];
        snprintf(what, sizeof what, "Conv tactic %d", tactic);
        check_close(what, out.data, ref, ny, atol, 1e-4);
    }
    free(in[0].data); free(in[1].data); free(in[2].data); free(out.data); free(ref);
}

TEST_IMPL(conv) {
    static const conv_case cases[] = {
        /* nsp  N  C   M   G   in             k          s          d          pb         pe    bias */
        {2, 1, 3, 16, 1, {37, 41}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1},   /* stem conv */
        {2, 2, 8, 12, 1, {9, 11}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 0},
        {2, 1, 16, 16, 16, {19, 21}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1}, /* depthwise */
        {2, 1, 8, 8, 8, {20, 23}, {5, 5}, {2, 2}, {1, 1}, {2, 2}, {2, 2}, 1},   /* dw 5x5 s2 */
        {2, 1, 6, 12, 3, {10, 9}, {3, 2}, {1, 2}, {2, 1}, {2, 0}, {1, 1}, 1},   /* groups, dil */
        {2, 1, 32, 24, 1, {12, 12}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, 1}, /* pointwise */
        {2, 1, 4, 5, 1, {7, 30}, {3, 3}, {3, 2}, {1, 3}, {0, 1}, {2, 0}, 1},    /* asym pads */
        {1, 2, 4, 6, 2, {50}, {5}, {2}, {2}, {3}, {1}, 1},                       /* 1-D */
        {3, 1, 3, 4, 1, {5, 6, 7}, {3, 3, 2}, {1, 2, 1}, {1, 1, 2}, {1, 0, 1}, {1, 1, 0}, 1}, /* 3-D */
        {2, 1, 4, 8, 4, {6, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1},     /* dw multiplier 2 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) conv_one(&cases[i]);
}

/* ---- ConvTranspose ---------------------------------------------------------------- */

typedef struct ct_case {
    int64_t C, M, G, H, W, k, s, p, op;
} ct_case;

static void ct_attrs(kiln_layer *l, const void *ud) {
    const ct_case *c = ud;
    int64_t s[2] = {c->s, c->s}, p[4] = {c->p, c->p, c->p, c->p}, op[2] = {c->op, c->op};
    ASSERT_OK(kiln_layer_set_ints(l, "strides", s, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "pads", p, 4));
    ASSERT_OK(kiln_layer_set_ints(l, "output_padding", op, 2));
    ASSERT_OK(kiln_layer_set_int(l, "group", c->G));
}

TEST_IMPL(conv_transpose) {
    /* the last: 2x2 stride 2 (each output once, tiled col2im) on 40 x 37
     * inputs, so that at 2 threads each of the 4 output channels' rows are
     * split between the threads (kiln__ops_par_planes) */
    static const ct_case cases[] = {{4, 6, 1, 5, 7, 3, 2, 1, 1}, {8, 8, 1, 10, 10, 2, 2, 0, 0},
                                    {4, 4, 2, 6, 5, 3, 1, 1, 0}, {5, 4, 1, 40, 37, 2, 2, 0, 0}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const ct_case *c = &cases[ci];
        int64_t Mg = c->M / c->G, Cg = c->C / c->G;
        int64_t OH = (c->H - 1) * c->s + c->k - 2 * c->p + c->op;
        int64_t OW = (c->W - 1) * c->s + c->k - 2 * c->p + c->op;
        tio in[3] = {{"X", KILN_DTYPE_F32, 4, {1, c->C, c->H, c->W}},
                     {"W", KILN_DTYPE_F32, 4, {c->C, Mg, c->k, c->k}, NULL, 1},
                     {"B", KILN_DTYPE_F32, 1, {c->M}, NULL, 1}};
        for (int i = 0; i < 3; i++) in[i].data = rnd(tio_numel(&in[i]), -1, 1);
        tio out = {"Y", KILN_DTYPE_F32, 4, {1, c->M, OH, OW}};
        int64_t ny = tio_numel(&out);
        out.data = malloc((size_t)ny * sizeof(float));
        double *acc = calloc((size_t)ny, sizeof(double));
        const float *x = in[0].data, *w = in[1].data, *b = in[2].data;
        /* scatter definition */
        for (int64_t ch = 0; ch < c->C; ch++)
            for (int64_t iy = 0; iy < c->H; iy++)
                for (int64_t ix = 0; ix < c->W; ix++)
                    for (int64_t mo = 0; mo < Mg; mo++)
                        for (int64_t ky = 0; ky < c->k; ky++)
                            for (int64_t kx = 0; kx < c->k; kx++) {
                                int64_t oy = iy * c->s - c->p + ky, ox = ix * c->s - c->p + kx;
                                if (oy < 0 || oy >= OH || ox < 0 || ox >= OW) continue;
                                int64_t m = (ch / Cg) * Mg + mo;
                                acc[(m * OH + oy) * OW + ox] +=
                                    (double)x[(ch * c->H + iy) * c->W + ix] *
                                    w[((ch * Mg + mo) * c->k + ky) * c->k + kx];
                            }
        float *ref = malloc((size_t)ny * sizeof(float));
        for (int64_t i = 0; i < ny; i++) ref[i] = (float)(acc[i] + b[i / (OH * OW)]);
        run_net("ai.onnx::ConvTranspose", 1, 3, in, 1, &out, ct_attrs, c, 0);
        check_close("ConvTranspose", out.data, ref, ny, 1e-4, 1e-4);
        for (int i = 0; i < 3; i++) free(in[i].data);
        free(out.data); free(acc); free(ref);
    }
}

/* ---- pooling ------------------------------------------------------------------------ */

typedef struct pool_case {
    int max, ceil, count_pad;
    int64_t H, W, k, s, p;
} pool_case;

static void pool_attrs(kiln_layer *l, const void *ud) {
    const pool_case *c = ud;
    int64_t k[2] = {c->k, c->k}, s[2] = {c->s, c->s}, p[4] = {c->p, c->p, c->p, c->p};
    ASSERT_OK(kiln_layer_set_ints(l, "kernel_shape", k, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "strides", s, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "pads", p, 4));
    ASSERT_OK(kiln_layer_set_int(l, "ceil_mode", c->ceil));
    if (!c->max) ASSERT_OK(kiln_layer_set_int(l, "count_include_pad", c->count_pad));
}

TEST_IMPL(pool) {
    static const pool_case cases[] = {{1, 0, 0, 11, 12, 3, 2, 1}, {1, 1, 0, 8, 9, 3, 2, 0},
                                      {0, 0, 0, 10, 7, 3, 2, 1}, {0, 0, 1, 10, 7, 3, 2, 1},
                                      {0, 1, 1, 9, 9, 2, 2, 0}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const pool_case *c = &cases[ci];
        int64_t N = 2, C = 3;
        int64_t num_h = c->H + 2 * c->p - c->k, num_w = c->W + 2 * c->p - c->k;
        int64_t OH = (c->ceil ? (num_h + c->s - 1) / c->s : num_h / c->s) + 1;
        int64_t OW = (c->ceil ? (num_w + c->s - 1) / c->s : num_w / c->s) + 1;
        if (c->ceil && (OH - 1) * c->s >= c->H + c->p) OH--;
        if (c->ceil && (OW - 1) * c->s >= c->W + c->p) OW--;
        tio in = {"X", KILN_DTYPE_F32, 4, {N, C, c->H, c->W}};
        in.data = rnd(tio_numel(&in), -2, 2);
        tio out[2] = {{"Y", KILN_DTYPE_F32, 4, {N, C, OH, OW}}, {"I", KILN_DTYPE_I64, 4, {N, C, OH, OW}}};
        int64_t ny = tio_numel(&out[0]);
        out[0].data = malloc((size_t)ny * sizeof(float));
        out[1].data = malloc((size_t)ny * sizeof(int64_t));
        float *ref = malloc((size_t)ny * sizeof(float));
        int64_t *iref = malloc((size_t)ny * sizeof(int64_t));
        const float *x = in.data;
        for (int64_t pl = 0; pl < N * C; pl++)
            for (int64_t oy = 0; oy < OH; oy++)
                for (int64_t ox = 0; ox < OW; ox++) {
                    double best = -INFINITY, sum = 0;
                    int64_t bi = 0, cnt = 0, cntp = 0;
                    for (int64_t ky = 0; ky < c->k; ky++)
                        for (int64_t kx = 0; kx < c->k; kx++) {
                            int64_t iy = oy * c->s - c->p + ky, ix = ox * c->s - c->p + kx;
                            if (iy < c->H + c->p && ix < c->W + c->p) cntp++;
                            if (iy < 0 || iy >= c->H || ix < 0 || ix >= c->W) continue;
                            double v = x[(pl * c->H + iy) * c->W + ix];
                            cnt++;
                            sum += v;
                            if (v > best) { best = v; bi = (pl * c->H + iy) * c->W + ix; }
                        }
                    int64_t o = (pl * OH + oy) * OW + ox;
                    ref[o] = c->max ? (float)best : (float)(sum / (double)(c->count_pad ? cntp : cnt));
                    iref[o] = bi;
                }
        if (c->max) {
            run_net("ai.onnx::MaxPool", 8, 1, &in, 2, out, pool_attrs, c, 0);
            for (int64_t i = 0; i < ny; i++) ASSERT_EQ(((int64_t *)out[1].data)[i], iref[i]);
        } else {
            run_net("ai.onnx::AveragePool", 1, 1, &in, 1, out, pool_attrs, c, 0);
        }
        check_close("pool", out[0].data, ref, ny, 1e-5, 1e-5);
        free(in.data); free(out[0].data); free(out[1].data); free(ref); free(iref);
    }
    /* GlobalAveragePool */
    tio in = {"X", KILN_DTYPE_F32, 4, {2, 5, 7, 9}};
    in.data = rnd(tio_numel(&in), -1, 1);
    tio out = {"Y", KILN_DTYPE_F32, 4, {2, 5, 1, 1}};
    float y[10], ref[10];
    out.data = y;
    run_net("ai.onnx::GlobalAveragePool", 1, 1, &in, 1, &out, NULL, NULL, 0);
    for (int p = 0; p < 10; p++) {
        double s = 0;
        for (int i = 0; i < 63; i++) s += ((float *)in.data)[p * 63 + i];
        ref[p] = (float)(s / 63);
    }
    check_close("GlobalAveragePool", y, ref, 10, 1e-5, 1e-5);
    free(in.data);
}

/* ---- Softmax family ---------------------------------------------------------------------- */

static void axis_attr(kiln_layer *l, const void *ud) {
    ASSERT_OK(kiln_layer_set_int(l, "axis", *(const int64_t *)ud));
}

TEST_IMPL(softmax) {
    int64_t dims[3] = {3, 4, 5};
    for (int ver = 1; ver <= 13; ver += 12)
        for (int64_t axis = -1; axis < 3; axis++)
            for (int kind = 0; kind < 3; kind++) {
                static const char *const ops[] = {"ai.onnx::Softmax", "ai.onnx::LogSoftmax",
                                                  "ai.onnx::Hardmax"};
                tio in = {"X", KILN_DTYPE_F32, 3, {3, 4, 5}};
                in.data = rnd(60, -3, 3);
                float y[60], ref[60];
                tio out = {"Y", KILN_DTYPE_F32, 3, {3, 4, 5}, y};
                run_net(ops[kind], ver, 1, &in, 1, &out, axis_attr, &axis, 1);
                int64_t ax = axis < 0 ? axis + 3 : axis, outer = 1, L = 1, inner = 1;
                for (int i = 0; i < 3; i++) {
                    if (i < ax) outer *= dims[i];
                    else if (i == ax || ver == 1) L *= dims[i];
                    else inner *= dims[i];
                }
                const float *x = in.data;
                for (int64_t o = 0; o < outer; o++)
                    for (int64_t i = 0; i < inner; i++) {
                        double mx = -INFINITY, s = 0;
                        int64_t am = 0;
                        for (int64_t k = 0; k < L; k++) {
                            double v = x[(o * L + k) * inner + i];
                            if (v > mx) { mx = v; am = k; }
                        }
                        for (int64_t k = 0; k < L; k++) s += exp(x[(o * L + k) * inner + i] - mx);
                        for (int64_t k = 0; k < L; k++) {
                            double v = x[(o * L + k) * inner + i];
                            ref[(o * L + k) * inner + i] =
                                kind == 0 ? (float)(exp(v - mx) / s)
                                          : kind == 1 ? (float)(v - mx - log(s)) : (float)(k == am);
                        }
                    }
                check_close(ops[kind], y, ref, 60, 1e-5, 1e-5);
                free(in.data);
            }
}

/* Softmax and LogSoftmax along axis 1 of [3, 7, 300] on 2 threads: the
 * strided path takes rows 128 at a time (blocks of 128, 128, 44 per outer
 * index; the threads' ranges cut through them), 16 per vector with a
 * partial last one; rows holding NaN, +inf or only -inf give NaN rows, as
 * numpy's exp(x - max) / sum does.  Against double references. */
TEST_IMPL(softmax_strided_blocks) {
    enum { O = 3, L = 7, I = 300 };
    for (int lg = 0; lg < 2; lg++) {
        tio in = {"X", KILN_DTYPE_F32, 3, {O, L, I}};
        float *x = in.data = rnd(O * L * I, -6, 6);
        x[(0 * L + 2) * I + 5] = NAN;
        x[(1 * L + 0) * I + 130] = INFINITY;
        for (int k = 0; k < L; k++) x[(2 * L + k) * I + 299] = -INFINITY;
        static float y[O * L * I], ref[O * L * I];
        tio out = {"Y", KILN_DTYPE_F32, 3, {O, L, I}, y};
        const int64_t axis = 1;
        const char *op = lg ? "ai.onnx::LogSoftmax" : "ai.onnx::Softmax";
        run_net(op, 13, 1, &in, 1, &out, axis_attr, &axis, 1);
        for (int o = 0; o < O; o++)
            for (int i = 0; i < I; i++) {
                double m = -INFINITY, sum = 0;
                for (int k = 0; k < L; k++) {
                    double v = x[(o * L + k) * I + i];
                    m = isnan(v) || v > m ? v : m;
                }
                for (int k = 0; k < L; k++) sum += exp(x[(o * L + k) * I + i] - m);
                for (int k = 0; k < L; k++) {
                    double v = x[(o * L + k) * I + i];
                    ref[(o * L + k) * I + i] = (float)(lg ? v - m - log(sum) : exp(v - m) / sum);
                }
            }
        for (int n = 0; n < O * L * I; n++) {
            const int nan_ref = isnan(ref[n]);
            if (nan_ref != !!isnan(y[n]) || (!nan_ref && !(fabs((double)y[n] - ref[n]) <= 1e-6 + 2e-6 * fabs(ref[n]))))
                TEST__FAIL("%s: element %d: got %.9g, expected %.9g", op, n, y[n], ref[n]);
        }
        free(in.data);
    }
}

/* ---- normalization -------------------------------------------------------------------------- */

TEST_IMPL(batchnorm) {
    int64_t N = 2, C = 5, H = 6, W = 7, n = N * C * H * W;
    tio in[5] = {{"X", KILN_DTYPE_F32, 4, {N, C, H, W}}, {"s", KILN_DTYPE_F32, 1, {C}, NULL, 1},
                 {"b", KILN_DTYPE_F32, 1, {C}, NULL, 1}, {"m", KILN_DTYPE_F32, 1, {C}, NULL, 1},
                 {"v", KILN_DTYPE_F32, 1, {C}, NULL, 1}};
    for (int i = 0; i < 5; i++) in[i].data = rnd(tio_numel(&in[i]), i == 4 ? 0.1f : -1, 2);
    tio out = {"Y", KILN_DTYPE_F32, 4, {N, C, H, W}};
    out.data = malloc((size_t)n * sizeof(float));
    float *ref = malloc((size_t)n * sizeof(float));
    run_net("ai.onnx::BatchNormalization", 1, 5, in, 1, &out, NULL, NULL, 0);
    const float *x = in[0].data, *s = in[1].data, *b = in[2].data, *m = in[3].data, *v = in[4].data;
    for (int64_t i = 0; i < n; i++) {
        int64_t c = (i / (H * W)) % C;
        ref[i] = (float)((x[i] - m[c]) / sqrt(v[c] + 1e-5) * s[c] + b[c]);
    }
    check_close("BatchNormalization", out.data, ref, n, 1e-5, 1e-5);
    for (int i = 0; i < 5; i++) free(in[i].data);
    free(out.data); free(ref);
}

TEST_IMPL(layernorm) {
    int64_t axis = 1;
    tio in[3] = {{"X", KILN_DTYPE_F32, 3, {3, 4, 10}}, {"S", KILN_DTYPE_F32, 2, {4, 10}, NULL, 1},
                 {"B", KILN_DTYPE_F32, 2, {4, 10}, NULL, 1}};
    for (int i = 0; i < 3; i++) in[i].data = rnd(tio_numel(&in[i]), -2, 2);
    float y[120], mean[3], rstd[3], ref[120];
    tio out[3] = {{"Y", KILN_DTYPE_F32, 3, {3, 4, 10}, y}, {"M", KILN_DTYPE_F32, 3, {3, 1, 1}, mean},
                  {"R", KILN_DTYPE_F32, 3, {3, 1, 1}, rstd}};
    run_net("ai.onnx::LayerNormalization", 17, 3, in, 3, out, axis_attr, &axis, 0);
    const float *x = in[0].data, *s = in[1].data, *b = in[2].data;
    for (int r = 0; r < 3; r++) {
        double mu = 0, var = 0;
        for (int i = 0; i < 40; i++) mu += x[r * 40 + i];
        mu /= 40;
        for (int i = 0; i < 40; i++) var += (x[r * 40 + i] - mu) * (x[r * 40 + i] - mu);
        var /= 40;
        double rs = 1 / sqrt(var + 1e-5);
        ASSERT_NEAR(mean[r], mu, 1e-5);
        ASSERT_NEAR(rstd[r], rs, 1e-4 * rs);
        for (int i = 0; i < 40; i++) ref[r * 40 + i] = (float)((x[r * 40 + i] - mu) * rs * s[i] + b[i]);
    }
    check_close("LayerNormalization", y, ref, 120, 1e-5, 1e-4);
    for (int i = 0; i < 3; i++) free(in[i].data);
}

TEST_IMPL(instancenorm) {
    tio in[3] = {{"X", KILN_DTYPE_F32, 4, {2, 3, 5, 4}}, {"S", KILN_DTYPE_F32, 1, {3}, NULL, 1},
                 {"B", KILN_DTYPE_F32, 1, {3}, NULL, 1}};
    for (int i = 0; i < 3; i++) in[i].data = rnd(tio_numel(&in[i]), -2, 2);
    float y[120], ref[120];
    tio out = {"Y", KILN_DTYPE_F32, 4, {2, 3, 5, 4}, y};
    run_net("ai.onnx::InstanceNormalization", 1, 3, in, 1, &out, NULL, NULL, 0);
    const float *x = in[0].data, *s = in[1].data, *b = in[2].data;
    for (int p = 0; p < 6; p++) {
        double mu = 0, var = 0;
        for (int i = 0; i < 20; i++) mu += x[p * 20 + i];
        mu /= 20;
        for (int i = 0; i < 20; i++) var += (x[p * 20 + i] - mu) * (x[p * 20 + i] - mu);
        var /= 20;
        for (int i = 0; i < 20; i++)
            ref[p * 20 + i] = (float)((x[p * 20 + i] - mu) / sqrt(var + 1e-5) * s[p % 3] + b[p % 3]);
    }
    check_close("InstanceNormalization", y, ref, 120, 1e-5, 1e-4);
    for (int i = 0; i < 3; i++) free(in[i].data);
}

/* ---- Pad ------------------------------------------------------------------------------------------ */

static void mode_attr(kiln_layer *l, const void *ud) {
    ASSERT_OK(kiln_layer_set_string(l, "mode", (const char *)ud));
}

TEST_IMPL(pad) {
    static const char *const modes[] = {"constant", "reflect", "edge", "wrap"};
    const int64_t H = 5, W = 6;
    int64_t pads[4] = {2, -1, 1, 3}; /* H begin 2, W begin -1 (crop), H end 1, W end 3 */
    int64_t OH = H + 3, OW = W + 2;
    for (int mi = 0; mi < 4; mi++) {
        tio in[3] = {{"X", KILN_DTYPE_F32, 2, {H, W}}, {"P", KILN_DTYPE_I64, 1, {4}, pads, 1},
                     {"V", KILN_DTYPE_F32, 0, {0}, NULL, 1}};
        float cv = 1.5f;
        in[2].data = &cv;
        in[0].data = rnd(H * W, -1, 1);
        float y[64], ref[64];
        tio out = {"Y", KILN_DTYPE_F32, 2, {OH, OW}, y};
        run_net("ai.onnx::Pad", 18, 3, in, 1, &out, mode_attr, modes[mi], 0);
        const float *x = in[0].data;
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++) {
                int64_t iy = oy - 2, ix = ox + 1;
                float v;
                if (mi == 0) {
                    v = (iy < 0 || iy >= H || ix < 0 || ix >= W) ? cv : x[iy * W + ix];
                } else {
                    int64_t a = iy, b = ix;
                    if (mi == 1) {
                        if (a < 0) a = -a;
                        if (a >= H) a = 2 * (H - 1) - a;
                        if (b < 0) b = -b;
                        if (b >= W) b = 2 * (W - 1) - b;
                    } else if (mi == 2) {
                        a = a < 0 ? 0 : a >= H ? H - 1 : a;
                        b = b < 0 ? 0 : b >= W ? W - 1 : b;
                    } else {
                        a = (a + H) % H;
                        b = (b + W) % W;
                    }
                    v = x[a * W + b];
                }
                ref[oy * OW + ox] = v;
            }
        check_close(modes[mi], y, ref, OH * OW, 0, 0);
        free(in[0].data);
    }
}

/* ---- Resize ---------------------------------------------------------------------------------------- */

typedef struct rz_case {
    const char *mode, *ct, *nm;
} rz_case;

static void rz_attrs(kiln_layer *l, const void *ud) {
    const rz_case *r = ud;
    ASSERT_OK(kiln_layer_set_string(l, "mode", r->mode));
    ASSERT_OK(kiln_layer_set_string(l, "coordinate_transformation_mode", r->ct));
    ASSERT_OK(kiln_layer_set_string(l, "nearest_mode", r->nm));
}

/* Resize r of C planes H x W to OH x OW against a naive reference. */
static void resize_check(const rz_case *r, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW) {
    int64_t sizes[4] = {1, C, OH, OW};
    tio in[4] = {{"X", KILN_DTYPE_F32, 4, {1, C, H, W}}, {"", 0}, {"", 0}, {"S", KILN_DTYPE_I64, 1, {4}, sizes, 1}};
    in[0].data = rnd(C * H * W, -1, 1);
    float *y = malloc(sizeof(float) * C * OH * OW), *ref = malloc(sizeof(float) * C * OH * OW);
    ASSERT(y && ref);
    tio out = {"Y", KILN_DTYPE_F32, 4, {1, C, OH, OW}, y};
    run_net("ai.onnx::Resize", 11, 4, in, 1, &out, rz_attrs, r, 0);
    const float *x = in[0].data;
    int lin = !strcmp(r->mode, "linear");
    for (int64_t c = 0; c < C; c++)
        for (int64_t oy = 0; oy < OH; oy++)
            for (int64_t ox = 0; ox < OW; ox++) {
                double src[2];
                int64_t o[2] = {oy, ox}, in_[2] = {H, W}, out_[2] = {OH, OW};
                for (int a = 0; a < 2; a++) {
                    double s = (double)out_[a] / in_[a], v = (double)o[a];
                    if (!strcmp(r->ct, "asymmetric")) src[a] = v / s;
                    else if (!strcmp(r->ct, "align_corners"))
                        src[a] = v * (in_[a] - 1) / (double)(out_[a] - 1);
                    else if (!strcmp(r->ct, "pytorch_half_pixel"))
                        src[a] = out_[a] > 1 ? (v + 0.5) / s - 0.5 : 0;
                    else src[a] = (v + 0.5) / s - 0.5;
                }
                double val;
                if (!lin) {
                    int64_t iy, ix;
                    if (!strcmp(r->nm, "floor")) { iy = (int64_t)floor(src[0]); ix = (int64_t)floor(src[1]); }
                    else { iy = (int64_t)ceil(src[0] - 0.5); ix = (int64_t)ceil(src[1] - 0.5); }
                    iy = iy < 0 ? 0 : iy >= H ? H - 1 : iy;
                    ix = ix < 0 ? 0 : ix >= W ? W - 1 : ix;
                    val = x[(c * H + iy) * W + ix];
                } else {
                    double yy = fmin(fmax(src[0], 0), H - 1), xx = fmin(fmax(src[1], 0), W - 1);
                    int64_t y0 = (int64_t)floor(yy), x0 = (int64_t)floor(xx);
                    int64_t y1 = y0 + 1 < H ? y0 + 1 : H - 1, x1 = x0 + 1 < W ? x0 + 1 : W - 1;
                    double fy = yy - y0, fx = xx - x0;
                    const float *p = x + c * H * W;
                    val = (1 - fy) * ((1 - fx) * p[y0 * W + x0] + fx * p[y0 * W + x1]) +
                          fy * ((1 - fx) * p[y1 * W + x0] + fx * p[y1 * W + x1]);
                }
                ref[(c * OH + oy) * OW + ox] = (float)val;
            }
    check_close(r->ct, y, ref, C * OH * OW, 1e-5, 1e-5);
    free(in[0].data);
    free(y);
    free(ref);
}

TEST_IMPL(resize) {
    static const rz_case cases[] = {{"nearest", "asymmetric", "floor"},
                                    {"nearest", "half_pixel", "round_prefer_floor"},
                                    {"linear", "half_pixel", "floor"},
                                    {"linear", "align_corners", "floor"},
                                    {"linear", "pytorch_half_pixel", "floor"}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        resize_check(&cases[ci], 2, 5, 7, 10, 4); /* up x2 in H, down in W (sizes) */
        /* planes of 74 x 90 (>= 4096 outputs): at 2 threads each plane's
         * rows split between the threads (kiln__ops_par_planes) */
        resize_check(&cases[ci], 3, 37, 45, 74, 90);
    }
}

/* ---- LSTM ------------------------------------------------------------------------------------------- */

typedef struct lstm_case {
    int64_t H, D;
    float clip; /* 0: none */
    int input_forget;
} lstm_case;

static void lstm_attrs(kiln_layer *l, const void *ud) {
    const lstm_case *lc = ud;
    ASSERT_OK(kiln_layer_set_string(l, "direction", lc->D == 2 ? "bidirectional" : "forward"));
    ASSERT_OK(kiln_layer_set_int(l, "hidden_size", lc->H));
    if (lc->clip > 0) ASSERT_OK(kiln_layer_set_float(l, "clip", lc->clip));
    if (lc->input_forget) ASSERT_OK(kiln_layer_set_int(l, "input_forget", 1));
}

static double sigm(double x) { return 1 / (1 + exp(-x)); }

/* Bidirectional with peepholes and sequence lengths (H = 5: the scalar
 * tails of the vectorized gates); forward with H = 37 (16-wide vectors and
 * a tail), clip and input_forget. */
TEST_IMPL(lstm) {
    static const lstm_case cases[] = {{5, 2, 0, 0}, {37, 1, 0.9f, 1}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const lstm_case *lc = &cases[ci];
        const int64_t S = 4, B = 2, I = 3, H = lc->H, D = lc->D;
        tio in[8] = {{"X", KILN_DTYPE_F32, 3, {S, B, I}},
                     {"W", KILN_DTYPE_F32, 3, {D, 4 * H, I}, NULL, 1},
                     {"R", KILN_DTYPE_F32, 3, {D, 4 * H, H}, NULL, 1},
                     {"Bi", KILN_DTYPE_F32, 2, {D, 8 * H}, NULL, 1},
                     {"L", KILN_DTYPE_I32, 1, {B}, NULL, 1},
                     {"h0", KILN_DTYPE_F32, 3, {D, B, H}},
                     {"c0", KILN_DTYPE_F32, 3, {D, B, H}},
                     {"P", KILN_DTYPE_F32, 2, {D, 3 * H}, NULL, 1}};
        int32_t lens[2] = {4, 3};
        for (int i = 0; i < 8; i++) in[i].data = i == 4 ? (void *)lens : rnd(tio_numel(&in[i]), -0.8f, 0.8f);
        const int64_t ny = S * D * B * H, nh = D * B * H;
        float *y = malloc(sizeof(float) * ny), *yh = malloc(sizeof(float) * nh), *yc = malloc(sizeof(float) * nh);
        float *ref = calloc((size_t)ny, sizeof(float)), *rh = malloc(sizeof(float) * nh), *rc = malloc(sizeof(float) * nh);
        double *h = malloc(sizeof(double) * H), *c = malloc(sizeof(double) * H), *hn = malloc(sizeof(double) * H);
        double *g = malloc(sizeof(double) * 4 * H);
        tio out[3] = {{"Y", KILN_DTYPE_F32, 4, {S, D, B, H}, y}, {"Yh", KILN_DTYPE_F32, 3, {D, B, H}, yh},
                      {"Yc", KILN_DTYPE_F32, 3, {D, B, H}, yc}};
        run_net("ai.onnx::LSTM", 14, 8, in, 3, out, lstm_attrs, lc, 0);
        const float *x = in[0].data, *w = in[1].data, *r = in[2].data, *bi = in[3].data;
        const float *h0 = in[5].data, *c0 = in[6].data, *p = in[7].data;
#define CLIPD(v) (lc->clip > 0 ? fmin(fmax((v), -lc->clip), lc->clip) : (v))
        for (int64_t d = 0; d < D; d++)
            for (int64_t b = 0; b < B; b++) {
                for (int k = 0; k < H; k++) { h[k] = h0[(d * B + b) * H + k]; c[k] = c0[(d * B + b) * H + k]; }
                for (int64_t step = 0; step < lens[b]; step++) {
                    int64_t t = d ? lens[b] - 1 - step : step;
                    for (int64_t j = 0; j < 4 * H; j++) {
                        double s = bi[d * 8 * H + j] + bi[d * 8 * H + 4 * H + j];
                        for (int64_t q = 0; q < I; q++) s += x[(t * B + b) * I + q] * w[(d * 4 * H + j) * I + q];
                        for (int64_t q = 0; q < H; q++) s += h[q] * r[(d * 4 * H + j) * H + q];
                        g[j] = s;
                    }
                    for (int k = 0; k < H; k++) {
                        const float *pp = p + d * 3 * H;
                        double iv = sigm(CLIPD(g[k] + pp[k] * c[k]));
                        double fv = lc->input_forget ? 1 - iv : sigm(CLIPD(g[2 * H + k] + pp[2 * H + k] * c[k]));
                        double cn = fv * c[k] + iv * tanh(CLIPD(g[3 * H + k]));
                        double ov = sigm(CLIPD(g[H + k] + pp[H + k] * cn));
                        c[k] = cn;
                        hn[k] = ov * tanh(cn);
                    }
                    for (int k = 0; k < H; k++) {
                        h[k] = hn[k];
                        ref[((t * D + d) * B + b) * H + k] = (float)hn[k];
                    }
                }
                for (int k = 0; k < H; k++) { rh[(d * B + b) * H + k] = (float)h[k]; rc[(d * B + b) * H + k] = (float)c[k]; }
            }
#undef CLIPD
        check_close("LSTM Y", y, ref, ny, 1e-5, 1e-4);
        check_close("LSTM Y_h", yh, rh, nh, 1e-5, 1e-4);
        check_close("LSTM Y_c", yc, rc, nh, 1e-5, 1e-4);
        for (int i = 0; i < 8; i++) if (i != 4) free(in[i].data);
        free(y), free(yh), free(yc), free(ref), free(rh), free(rc), free(h), free(c), free(hn), free(g);
    }
}

/* ---- GRU ---------------------------------------------------------------------------------------------- */

static void gru_attrs(kiln_layer *l, const void *ud) {
    ASSERT_OK(kiln_layer_set_string(l, "direction", "reverse"));
    ASSERT_OK(kiln_layer_set_int(l, "hidden_size", 4));
    ASSERT_OK(kiln_layer_set_int(l, "linear_before_reset", *(const int *)ud));
}

TEST_IMPL(gru) {
    const int64_t S = 3, B = 2, I = 5, H = 4;
    for (int lbr = 0; lbr <= 1; lbr++) {
        tio in[6] = {{"X", KILN_DTYPE_F32, 3, {S, B, I}},
                     {"W", KILN_DTYPE_F32, 3, {1, 3 * H, I}, NULL, 1},
                     {"R", KILN_DTYPE_F32, 3, {1, 3 * H, H}, NULL, 1},
                     {"Bi", KILN_DTYPE_F32, 2, {1, 6 * H}, NULL, 1},
                     {"", 0},
                     {"h0", KILN_DTYPE_F32, 3, {1, B, H}}};
        for (int i = 0; i < 6; i++) if (i != 4) in[i].data = rnd(tio_numel(&in[i]), -1, 1);
        float y[24], yh[8], ref[24], rh[8];
        tio out[2] = {{"Y", KILN_DTYPE_F32, 4, {S, 1, B, H}, y}, {"Yh", KILN_DTYPE_F32, 3, {1, B, H}, yh}};
        run_net("ai.onnx::GRU", 7, 6, in, 2, out, gru_attrs, &lbr, 0);
        const float *x = in[0].data, *w = in[1].data, *r = in[2].data, *bi = in[3].data, *h0 = in[5].data;
        for (int64_t b = 0; b < B; b++) {
            double h[4];
            for (int k = 0; k < H; k++) h[k] = h0[b * H + k];
            for (int64_t t = S - 1; t >= 0; t--) {
                double xw[12], hr[12];
                for (int64_t j = 0; j < 3 * H; j++) {
                    double s1 = bi[j], s2 = bi[3 * H + j];
                    for (int64_t q = 0; q < I; q++) s1 += x[(t * B + b) * I + q] * w[j * I + q];
                    for (int64_t q = 0; q < H; q++) s2 += h[q] * r[j * H + q];
                    xw[j] = s1;
                    hr[j] = s2;
                }
                double hn[4];
                for (int k = 0; k < H; k++) {
                    double z = sigm(xw[k] + hr[k]), rr = sigm(xw[H + k] + hr[H + k]), cand;
                    if (lbr) {
                        cand = tanh(xw[2 * H + k] + rr * hr[2 * H + k]);
                    } else {
                        double acc = bi[3 * H + 2 * H + k];
                        for (int64_t q = 0; q < H; q++) {
                            double rq = sigm(xw[H + q] + hr[H + q]);
                            acc += rq * h[q] * r[(2 * H + k) * H + q];
                        }
                        cand = tanh(xw[2 * H + k] + acc);
                    }
                    hn[k] = (1 - z) * cand + z * h[k];
                }
                for (int k = 0; k < H; k++) {
                    h[k] = hn[k];
                    ref[(t * B + b) * H + k] = (float)hn[k];
                }
            }
            for (int k = 0; k < H; k++) rh[b * H + k] = (float)h[k];
        }
        check_close("GRU Y", y, ref, S * B * H, 1e-5, 1e-4);
        check_close("GRU Y_h", yh, rh, B * H, 1e-5, 1e-4);
        for (int i = 0; i < 6; i++) if (i != 4) free(in[i].data);
    }
}

/* ---- MatMulInteger, LRN, f64/f16 through the conversion wrapper --------------------------------- */

TEST_IMPL(matmul_integer) {
    uint8_t a[4 * 6], b[6 * 3];
    for (int i = 0; i < 24; i++) a[i] = (uint8_t)(test_rand_u64(&g_seed) % 256);
    for (int i = 0; i < 18; i++) b[i] = (uint8_t)(test_rand_u64(&g_seed) % 256);
    uint8_t za = 12, zb[3] = {3, 200, 128};
    tio in[4] = {{"A", KILN_DTYPE_U8, 2, {4, 6}, a}, {"B", KILN_DTYPE_U8, 2, {6, 3}, b, 1},
                 {"za", KILN_DTYPE_U8, 0, {0}, &za, 1}, {"zb", KILN_DTYPE_U8, 1, {3}, zb, 1}};
    int32_t y[12];
    tio out = {"Y", KILN_DTYPE_I32, 2, {4, 3}, y};
    run_net("ai.onnx::MatMulInteger", 10, 4, in, 1, &out, NULL, NULL, 0);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) {
            int32_t s = 0;
            for (int k = 0; k < 6; k++) s += (a[i * 6 + k] - za) * (b[k * 3 + j] - zb[j]);
            ASSERT_EQ(y[i * 3 + j], s);
        }
}

static void lrn_attrs(kiln_layer *l, const void *ud) {
    (void)ud;
    ASSERT_OK(kiln_layer_set_int(l, "size", 3));
    ASSERT_OK(kiln_layer_set_float(l, "alpha", 0.02));
    ASSERT_OK(kiln_layer_set_float(l, "beta", 0.6));
    ASSERT_OK(kiln_layer_set_float(l, "bias", 1.5));
}

TEST_IMPL(lrn) {
    tio in = {"X", KILN_DTYPE_F32, 4, {1, 5, 3, 2}};
    in.data = rnd(30, -2, 2);
    float y[30], ref[30];
    tio out = {"Y", KILN_DTYPE_F32, 4, {1, 5, 3, 2}, y};
    run_net("ai.onnx::LRN", 1, 1, &in, 1, &out, lrn_attrs, NULL, 0);
    const float *x = in.data;
    for (int c = 0; c < 5; c++)
        for (int i = 0; i < 6; i++) {
            double s = 0;
            for (int k = c - 1; k <= c + 1; k++)
                if (k >= 0 && k < 5) s += (double)x[k * 6 + i] * x[k * 6 + i];
            ref[c * 6 + i] = (float)(x[c * 6 + i] / pow(1.5 + 0.02 / 3 * s, 0.6));
        }
    check_close("LRN", y, ref, 30, 1e-6, 1e-5);
    free(in.data);
}

TEST_IMPL(other_dtypes) {
    /* Gemm in f64 and Softmax in f16 run the f32 kernels through conversion */
    double a[6 * 4], b[4 * 5], y[30], ref[30];
    for (int i = 0; i < 24; i++) a[i] = test_randf(&g_seed, -1, 1);
    for (int i = 0; i < 20; i++) b[i] = test_randf(&g_seed, -1, 1);
    gemm_case g = {6, 5, 4, 0, 0, 1.0f, 1.0f, 0};
    tio in[2] = {{"A", KILN_DTYPE_F64, 2, {6, 4}, a}, {"B", KILN_DTYPE_F64, 2, {4, 5}, b, 1}};
    tio out = {"Y", KILN_DTYPE_F64, 2, {6, 5}, y};
    run_net("ai.onnx::Gemm", 11, 2, in, 1, &out, gemm_attrs, &g, 0);
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 5; j++) {
            double s = 0;
            for (int k = 0; k < 4; k++) s += a[i * 4 + k] * b[k * 5 + j];
            ref[i * 5 + j] = s;
        }
    for (int i = 0; i < 30; i++) ASSERT_NEAR(y[i], ref[i], 1e-5);
    uint16_t h[16], hy[16];
    float xf[16];
    for (int i = 0; i < 16; i++) {
        h[i] = kiln_f32_to_f16(test_randf(&g_seed, -3, 3));
        xf[i] = kiln_f16_to_f32(h[i]);
    }
    tio hin = {"X", KILN_DTYPE_F16, 2, {2, 8}, h};
    tio hout = {"Y", KILN_DTYPE_F16, 2, {2, 8}, hy};
    int64_t axis = -1;
    run_net("ai.onnx::Softmax", 13, 1, &hin, 1, &hout, axis_attr, &axis, 0);
    /* Conv in f16 (its own format combination) */
    {
        uint16_t cx[2 * 6 * 6], cw[3 * 2 * 3 * 3], cy[3 * 6 * 6];
        float fx[72], fw[54], ref2[108];
        for (int i = 0; i < 72; i++) { cx[i] = kiln_f32_to_f16(test_randf(&g_seed, -1, 1)); fx[i] = kiln_f16_to_f32(cx[i]); }
        for (int i = 0; i < 54; i++) { cw[i] = kiln_f32_to_f16(test_randf(&g_seed, -1, 1)); fw[i] = kiln_f16_to_f32(cw[i]); }
        conv_case cc = {2, 1, 2, 3, 1, {6, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 0};
        tio cin[2] = {{"X", KILN_DTYPE_F16, 4, {1, 2, 6, 6}, cx}, {"W", KILN_DTYPE_F16, 4, {3, 2, 3, 3}, cw, 1}};
        tio cout_ = {"Y", KILN_DTYPE_F16, 4, {1, 3, 6, 6}, cy};
        run_net("ai.onnx::Conv", 1, 2, cin, 1, &cout_, conv_attrs, &cc, 0);
        conv_ref(&cc, fx, fw, NULL, ref2);
        for (int i = 0; i < 108; i++) ASSERT_NEAR(kiln_f16_to_f32(cy[i]), ref2[i], 1e-2 + 1e-3 * fabs(ref2[i]));
    }
    for (int r = 0; r < 2; r++) {
        double mx = -INFINITY, s = 0;
        for (int i = 0; i < 8; i++) mx = fmax(mx, xf[r * 8 + i]);
        for (int i = 0; i < 8; i++) s += exp(xf[r * 8 + i] - mx);
        for (int i = 0; i < 8; i++)
            ASSERT_NEAR(kiln_f16_to_f32(hy[r * 8 + i]), exp(xf[r * 8 + i] - mx) / s, 2e-3);
    }
}

/* ---- errors ---------------------------------------------------------------------------------------- */

TEST_IMPL(errors) {
    /* Conv with mismatched channels must fail at build with a message */
    kiln_network *net = kiln_network_create();
    int64_t xd[4] = {1, 3, 8, 8}, wd[4] = {4, 2, 3, 3};
    float w[72] = {0};
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "W", KILN_DTYPE_F32, 4, wd, w));
    const char *ins[2] = {"X", "W"}, *outs[1] = {"Y"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Conv", 1, "badconv", 2, ins, 1, outs));
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_engine *e = NULL;
    int rc = kiln_build(net, cfg, &e, NULL);
    ASSERT(rc < 0);
    ASSERT_CONTAINS(kiln_errmsg(), "channels");
    kiln_build_config_free(cfg);
    kiln_network_free(net);

    /* Pad with pads of the wrong length; Gemm with mismatched inner dims */
    net = kiln_network_create();
    int64_t xd2[2] = {3, 4}, pd[1] = {3}, pads[3] = {1, 1, 1}, bd[2] = {5, 2};
    float bw[10] = {0};
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 2, xd2, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "P", KILN_DTYPE_I64, 1, pd, pads));
    ASSERT_OK(kiln_network_add_constant(net, "Bm", KILN_DTYPE_F32, 2, bd, bw));
    const char *pin[2] = {"X", "P"}, *pout[1] = {"Y"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Pad", 11, "badpad", 2, pin, 1, pout));
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    cfg = kiln_build_config_create();
    rc = kiln_build(net, cfg, &e, NULL);
    ASSERT(rc < 0);
    ASSERT_CONTAINS(kiln_errmsg(), "pads");
    kiln_network_free(net);

    net = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 2, xd2, NULL));
    ASSERT_OK(kiln_network_add_constant(net, "Bm", KILN_DTYPE_F32, 2, bd, bw));
    const char *gin[2] = {"X", "Bm"}, *gout[1] = {"Y"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Gemm", 11, "badgemm", 2, gin, 1, gout));
    ASSERT_OK(kiln_network_mark_output(net, "Y"));
    rc = kiln_build(net, cfg, &e, NULL);
    ASSERT(rc < 0);
    ASSERT_CONTAINS(kiln_errmsg(), "K=4");
    kiln_build_config_free(cfg);
    kiln_network_free(net);
}

/* Window attributes beyond 2^30 (or below their minimum) are refused by the
 * shape functions of Conv, ConvTranspose and the pools with one message
 * form (kiln__ops_check_geom) naming op, attribute, axis and value. */
TEST_IMPL(window_geometry_bounds) {
    const int64_t big = ((int64_t)1 << 30) + 1;
    const struct {
        const char *op;
        int ver;
        const char *attr;
        int64_t v[4];
        int n;
        const char *want;
    } cases[] = {
        {"ai.onnx::Conv", 11, "strides", {1, big}, 2, "Conv: strides[1] = 1073741825 is out of range [1, 2^30]"},
        {"ai.onnx::Conv", 11, "pads", {0, -1, 0, 0}, 4, "Conv: pads (begin)[1] = -1 is out of range [0, 2^30]"},
        {"ai.onnx::Conv", 11, "group", {0}, 1, "Conv: group[0] = 0 is out of range [1, 2^30]"},
        {"ai.onnx::ConvTranspose", 11, "dilations", {0, 1}, 2, "ConvTranspose: dilations[0] = 0 is out of range"},
        {"ai.onnx::ConvTranspose", 11, "pads", {0, 0, -big, 0}, 4, "pads[2] = -1073741825 is out of range [-2^30, 2^30]"},
        {"ai.onnx::MaxPool", 12, "kernel_shape", {3, big}, 2, "pooling: kernel_shape[1] = 1073741825 is out of range"},
        {"ai.onnx::AveragePool", 11, "pads", {0, 0, 0, big}, 4, "pooling: pads (end)[1] = 1073741825"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        kiln_network *net = kiln_network_create();
        int64_t xd[4] = {1, 2, 6, 6}, wd[4] = {2, 2, 3, 3};
        float w[36] = {0};
        ASSERT_OK(kiln_network_add_input(net, "X", KILN_DTYPE_F32, 4, xd, NULL));
        ASSERT_OK(kiln_network_add_constant(net, "W", KILN_DTYPE_F32, 4, wd, w));
        int pool = strstr(cases[k].op, "Pool") != NULL;
        const char *ins[2] = {"X", "W"}, *outs[1] = {"Y"};
        kiln_layer *L = kiln_network_add_layer(net, cases[k].op, cases[k].ver, "L", pool ? 1 : 2, ins, 1, outs);
        ASSERT(L);
        if (pool && strcmp(cases[k].attr, "kernel_shape")) {
            int64_t ks[2] = {3, 3};
            ASSERT_OK(kiln_layer_set_ints(L, "kernel_shape", ks, 2));
        }
        if (!strcmp(cases[k].attr, "group"))
            ASSERT_OK(kiln_layer_set_int(L, "group", cases[k].v[0]));
        else
            ASSERT_OK(kiln_layer_set_ints(L, cases[k].attr, cases[k].v, cases[k].n));
        ASSERT_OK(kiln_network_mark_output(net, "Y"));
        kiln_build_config *cfg = kiln_build_config_create();
        kiln_engine *e = NULL;
        ASSERT_EQ(kiln_build(net, cfg, &e, NULL), KILN_EATTR);
        ASSERT_CONTAINS(kiln_errmsg(), cases[k].want);
        kiln_build_config_free(cfg);
        kiln_network_free(net);
    }
}

TEST_LIST(TEST_ENTRY(gemm), TEST_ENTRY(matmul), TEST_ENTRY(conv), TEST_ENTRY(conv_transpose),
          TEST_ENTRY(pool), TEST_ENTRY(softmax), TEST_ENTRY(softmax_strided_blocks), TEST_ENTRY(batchnorm), TEST_ENTRY(layernorm),
          TEST_ENTRY(instancenorm), TEST_ENTRY(pad), TEST_ENTRY(resize), TEST_ENTRY(lstm),
          TEST_ENTRY(gru), TEST_ENTRY(matmul_integer), TEST_ENTRY(lrn), TEST_ENTRY(other_dtypes),
          TEST_ENTRY(errors), TEST_ENTRY(window_geometry_bounds))
