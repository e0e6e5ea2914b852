/*
 * test_ops3.c — MeanVarianceNormalization, QLinearMatMul, QLinearConv and
 * TfIdfVectorizer against naive reference code written here.
 *
 * Each case builds a one-layer network through the public API (timing on,
 * 2 threads), runs it in debug mode (every output element must be written)
 * with poisoned output buffers, and compares with the reference.  Inputs
 * are fresh random values from a xorshift stream; quantized cases include
 * extreme zero points and output scales that saturate, per-row/column/
 * channel parameters, odd shapes (partial GEMM tiles, K not a multiple of
 * 4) and batch broadcasting.  Bad inputs must fail with a message.
 */
#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "test.h"
#include "test_ops_util.h"

#include <stdint.h>

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

static uint64_t g_seed = 0x5EED0003A11CE5ull;

/* Build (timing on, 2 threads) and run a one-layer network; returns 0 or
 * the first error.  1-byte outputs run twice (test_net_opts.bytes_twice). */
static int try_net(const char *op, int ver, int nin, const tio *in, int nout, tio *out,
                   attr_fn attrs, const void *ud) {
    static const test_net_opts o = {0, 2, 1};
    return test_net_try(&o, op, ver, nin, in, nout, out, attrs, ud);
}

static void run_net(const char *op, int ver, int nin, const tio *in, int nout, tio *out,
                    attr_fn attrs, const void *ud) {
    if (try_net(op, ver, nin, in, nout, out, attrs, ud)) TEST__FAIL("%s: %s", op, kiln_errmsg());
}

/* The network must fail (at build or run) with a message containing `what`. */
static void expect_fail(const char *op, int ver, int nin, const tio *in, int nout, tio *out,
                        attr_fn attrs, const void *ud, const char *what) {
    int rc = try_net(op, ver, nin, in, nout, out, attrs, ud);
    if (rc == 0) TEST__FAIL("%s: expected an error containing \"%s\", it ran", op, what);
    ASSERT_CONTAINS(kiln_errmsg(), what);
}

/* ================================================================ MVN */

typedef struct mvn_case {
    int nax;
    int64_t axes[KILN_MAX_DIMS];
    int set;
} mvn_case;

static void mvn_attrs(kiln_layer *l, const void *ud) {
    const mvn_case *m = ud;
    if (m->set) ASSERT_OK(kiln_layer_set_ints(l, "axes", m->axes, m->nax));
}

/* Naive: for element i, average over every element j agreeing with i on the
 * kept axes (O(n^2)); y = (x - mean) / (sqrt(var) + 1e-9). */
static void mvn_ref(const float *x, int nd, const int64_t *dims, const int *red, float *y) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= dims[d];
    for (int64_t i = 0; i < n; i++) {
        double s = 0, s2 = 0, cnt = 0;
        for (int pass = 0; pass < 2; pass++)
            for (int64_t j = 0; j < n; j++) {
                int64_t a = i, b = j;
                int same = 1;
                for (int d = nd - 1; d >= 0; d--) {
                    if (!red[d] && a % dims[d] != b % dims[d]) same = 0;
                    a /= dims[d];
                    b /= dims[d];
                }
                if (!same) continue;
                if (pass == 0) { s += x[j]; cnt++; }
                else { double dv = x[j] - s / cnt; s2 += dv * dv; }
            }
        double mean = s / cnt, sd = sqrt(s2 / cnt);
        y[i] = (float)((x[i] - mean) / (sd + 1e-9));
    }
}

static void mvn_check(int nd, const int64_t *dims, const mvn_case *mc, int version) {
    tio xi = {"x", KILN_DTYPE_F32, nd}, yo = {"y", KILN_DTYPE_F32, nd};
    for (int d = 0; d < nd; d++) xi.dims[d] = yo.dims[d] = dims[d];
    int64_t n = tio_numel(&xi);
    float *x = test_xmalloc((size_t)n * 4), *y = test_xmalloc((size_t)n * 4), *r = test_xmalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) x[i] = test_randf(&g_seed, -3, 5);
    xi.data = x;
    yo.data = y;
    int red[KILN_MAX_DIMS] = {0};
    if (mc->set)
        for (int i = 0; i < mc->nax; i++) red[mc->axes[i] < 0 ? mc->axes[i] + nd : mc->axes[i]] = 1;
    else
        red[0] = red[2] = red[3] = 1;
    run_net("ai.onnx::MeanVarianceNormalization", version, 1, &xi, 1, &yo, mvn_attrs, mc);
    mvn_ref(x, nd, dims, red, r);
    for (int64_t i = 0; i < n; i++) ASSERT_NEAR(y[i], r[i], 2e-5 + 2e-5 * fabs(r[i]));
    free(x);
    free(y);
    free(r);
}

TEST_IMPL(mvn) {
    mvn_case def = {0};
    int64_t d1[4] = {2, 3, 4, 5};
    mvn_check(4, d1, &def, 9);
    mvn_check(4, d1, &def, 13);
    mvn_case c1 = {2, {1, -1}, 1};
    mvn_check(4, d1, &c1, 13);
    int64_t d2[3] = {3, 7, 2};
    mvn_case c2 = {1, {1}, 1};
    mvn_check(3, d2, &c2, 13);
    mvn_case c3 = {3, {0, 1, 2}, 1};
    mvn_check(3, d2, &c3, 13);
    /* a constant group: 0, not NaN */
    float x[4] = {2, 2, 2, 2}, y[4];
    tio xi = {"x", KILN_DTYPE_F32, 2, {2, 2}, x}, yo = {"y", KILN_DTYPE_F32, 2, {2, 2}, y};
    mvn_case c4 = {1, {1}, 1};
    run_net("ai.onnx::MeanVarianceNormalization", 13, 1, &xi, 1, &yo, mvn_attrs, &c4);
    for (int i = 0; i < 4; i++) ASSERT_EQ(y[i], 0);
    /* f64 keeps double precision */
    double xd[60], yd[60];
    float xf[60], rf[60];
    for (int i = 0; i < 60; i++) xf[i] = test_randf(&g_seed, -2, 2), xd[i] = xf[i];
    tio xdi = {"x", KILN_DTYPE_F64, 4, {3, 4, 5, 1}, xd}, ydo = {"y", KILN_DTYPE_F64, 4, {3, 4, 5, 1}, yd};
    int64_t dd[4] = {3, 4, 5, 1};
    int red[4] = {1, 0, 1, 1};
    run_net("ai.onnx::MeanVarianceNormalization", 13, 1, &xdi, 1, &ydo, mvn_attrs, &def);
    mvn_ref(xf, 4, dd, red, rf);
    for (int i = 0; i < 60; i++) ASSERT_NEAR(yd[i], rf[i], 1e-6);
}

TEST_IMPL(mvn_errors) {
    float x[6] = {1, 2, 3, 4, 5, 6}, y[6];
    tio xi = {"x", KILN_DTYPE_F32, 3, {1, 2, 3}, x}, yo = {"y", KILN_DTYPE_F32, 3, {1, 2, 3}, y};
    mvn_case def = {0};
    expect_fail("ai.onnx::MeanVarianceNormalization", 13, 1, &xi, 1, &yo, mvn_attrs, &def,
                "out of range for an input of rank 3");
    mvn_case dup = {2, {1, -2}, 1};
    expect_fail("ai.onnx::MeanVarianceNormalization", 13, 1, &xi, 1, &yo, mvn_attrs, &dup,
                "appears twice");
    int32_t xi32[6] = {0};
    tio ii = {"x", KILN_DTYPE_I32, 3, {1, 2, 3}, xi32};
    mvn_case ax = {1, {1}, 1};
    expect_fail("ai.onnx::MeanVarianceNormalization", 13, 1, &ii, 1, &yo, mvn_attrs, &ax,
                "found i32");
}

/* ================================================================ quantized helpers */

static int32_t q_lo(kiln_dtype t) { return t == KILN_DTYPE_I8 ? -128 : 0; }
static int32_t q_hi(kiln_dtype t) { return t == KILN_DTYPE_I8 ? 127 : 255; }

static int32_t q_get(kiln_dtype t, const void *p, int64_t i) {
    return t == KILN_DTYPE_I8 ? ((const int8_t *)p)[i] : ((const uint8_t *)p)[i];
}
static void q_set(kiln_dtype t, void *p, int64_t i, int32_t v) {
    if (t == KILN_DTYPE_I8) ((int8_t *)p)[i] = (int8_t)v;
    else ((uint8_t *)p)[i] = (uint8_t)v;
}

static void *q_rand(kiln_dtype t, int64_t n) {
    void *p = test_xmalloc((size_t)n);
    for (int64_t i = 0; i < n; i++) q_set(t, p, i, (int32_t)test_rnd_int(&g_seed, q_lo(t), q_hi(t)));
    return p;
}

/* The spec's requantization: float multiplier, double product, ties to even. */
static int32_t q_requant(int32_t acc, float s1, float s2, float sy, int32_t zy, kiln_dtype t) {
    float mul = s1 * s2 / sy;
    double r = nearbyint((double)acc * (double)mul) + zy;
    return r < q_lo(t) ? q_lo(t) : r > q_hi(t) ? q_hi(t) : (int32_t)r;
}

/* ================================================================ QLinearMatMul */

/* Parameter layouts: per tensor ([] or [1]), 1-D per row/column, or the
 * N-D form [batch..., M, 1] / [batch..., 1, N]. */
enum { P_TENSOR, P_TENSOR1, P_VEC, P_ND };

typedef struct qmm_case {
    kiln_dtype ta, tb, ty;
    int nda, ndb;
    int64_t da[4], db[4];
    int pa, pb;              /* parameter layouts */
    float sy;                /* output scale */
    int edge_zp;             /* zero points at the type's extremes */
    int const_b;             /* b and its parameters are constants */
    int pow2;                /* power-of-two scales: exact .5 ties */
} qmm_case;

static float rnd_scale(const qmm_case *c) {
    if (c->pow2) return ldexpf(1.0f, (int)test_rnd_int(&g_seed, -3, 0));
    return test_randf(&g_seed, 0.002f, 0.05f);
}

static int32_t rnd_zp(kiln_dtype t, int edge) {
    if (edge) return test_rand_u64(&g_seed) & 1 ? q_lo(t) : q_hi(t);
    return (int32_t)test_rnd_int(&g_seed, q_lo(t), q_hi(t));
}

static void qmm_check(const qmm_case *c) {
    /* matrix views */
    int64_t M = c->nda >= 2 ? c->da[c->nda - 2] : 1, K = c->da[c->nda - 1];
    int64_t N = c->ndb >= 2 ? c->db[c->ndb - 1] : 1;
    int ba = c->nda - 2 > 0 ? c->nda - 2 : 0, bb = c->ndb - 2 > 0 ? c->ndb - 2 : 0;
    int nb = ba > bb ? ba : bb;
    int64_t bd[4], nbatch = 1;
    for (int i = 0; i < nb; i++) {
        int ia = i - (nb - ba), ib = i - (nb - bb);
        int64_t x = ia >= 0 ? c->da[ia] : 1, y = ib >= 0 ? c->db[ib] : 1;
        bd[i] = x > y ? x : y;
        nbatch *= bd[i];
    }
    tio in[8] = {
        {"a", c->ta, c->nda}, {"as", KILN_DTYPE_F32}, {"az", c->ta},
        {"b", c->tb, c->ndb}, {"bs", KILN_DTYPE_F32}, {"bz", c->tb},
        {"ys", KILN_DTYPE_F32, 0, {0}, NULL, 1}, {"yz", c->ty, 0, {0}, NULL, 1},
    };
    memcpy(in[0].dims, c->da, sizeof c->da);
    memcpy(in[3].dims, c->db, sizeof c->db);
    /* parameter shapes */
    for (int w = 0; w < 2; w++) {
        tio *s = &in[w ? 4 : 1], *z = &in[w ? 5 : 2];
        int kind = w ? c->pb : c->pa;
        const tio *x = &in[w ? 3 : 0];
        if (kind == P_TENSOR) s->nd = 0;
        else if (kind == P_TENSOR1) { s->nd = 1; s->dims[0] = 1; }
        else if (kind == P_VEC) { s->nd = 1; s->dims[0] = w ? N : M; }
        else {
            s->nd = x->nd;
            memcpy(s->dims, x->dims, sizeof s->dims);
            s->dims[x->nd - (w ? 2 : 1)] = 1;
        }
        z->nd = s->nd;
        memcpy(z->dims, s->dims, sizeof z->dims);
        int64_t n = tio_numel(s);
        float *sv = test_xmalloc((size_t)n * 4);
        void *zv = test_xmalloc((size_t)n);
        for (int64_t i = 0; i < n; i++) {
            sv[i] = rnd_scale(c);
            q_set(z->t, zv, i, rnd_zp(z->t, c->edge_zp));
        }
        s->data = sv;
        z->data = zv;
        if (w) s->is_const = z->is_const = c->const_b;
    }
    in[3].is_const = c->const_b;
    in[0].data = q_rand(c->ta, tio_numel(&in[0]));
    in[3].data = q_rand(c->tb, tio_numel(&in[3]));
    float ys = c->sy;
    uint8_t yzv;
    q_set(c->ty, &yzv, 0, rnd_zp(c->ty, c->edge_zp));
    in[6].data = &ys;
    in[7].data = &yzv;
    tio out = {"y", c->ty};
    for (int i = 0; i < nb; i++) out.dims[out.nd++] = bd[i];
    if (c->nda >= 2) out.dims[out.nd++] = M;
    if (c->ndb >= 2) out.dims[out.nd++] = N;
    int64_t ny = tio_numel(&out);
    out.data = test_xmalloc((size_t)ny);
    run_net("ai.onnx::QLinearMatMul", 10, 8, in, 1, &out, NULL, NULL);

    const float *as = in[1].data, *bs = in[4].data;
    int32_t yz = q_get(c->ty, &yzv, 0);
    int64_t nsat = 0;
    for (int64_t t = 0; t < nbatch; t++) {
        /* source batches (broadcast) */
        int64_t rem = t, ia = 0, ib = 0, sa = 1, sb = 1;
        for (int i = nb - 1; i >= 0; i--) {
            int64_t ix = rem % bd[i];
            rem /= bd[i];
            int ka = i - (nb - ba), kb = i - (nb - bb);
            if (ka >= 0) { ia += (c->da[ka] == 1 ? 0 : ix) * sa; sa *= c->da[ka]; }
            if (kb >= 0) { ib += (c->db[kb] == 1 ? 0 : ix) * sb; sb *= c->db[kb]; }
        }
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                int64_t pa = c->pa <= P_TENSOR1 ? 0 : c->pa == P_VEC ? m : ia * M + m;
                int64_t pb = c->pb <= P_TENSOR1 ? 0 : c->pb == P_VEC ? n : ib * N + n;
                int32_t za = q_get(c->ta, in[2].data, pa), zb = q_get(c->tb, in[5].data, pb);
                int32_t acc = 0;
                for (int64_t k = 0; k < K; k++)
                    acc += (q_get(c->ta, in[0].data, (ia * M + m) * K + k) - za) *
                           (q_get(c->tb, in[3].data, (ib * K + k) * N + n) - zb);
                int32_t want = q_requant(acc, as[pa], bs[pb], ys, yz, c->ty);
                int32_t got = q_get(c->ty, out.data, (t * M + m) * N + n);
                if (got != want)
                    TEST__FAIL("QLinearMatMul batch %lld (%lld, %lld): %d, expected %d (acc %d)",
                               (long long)t, (long long)m, (long long)n, got, want, acc);
                nsat += want == q_lo(c->ty) || want == q_hi(c->ty);
            }
    }
    /* the saturating cases must really saturate */
    if (c->sy < 0.001f) ASSERT(nsat > 0);
    for (int i = 0; i < 6; i++) free(in[i].data);
    free(out.data);
}

TEST_IMPL(qlinearmatmul) {
    const kiln_dtype U = KILN_DTYPE_U8, I = KILN_DTYPE_I8;
    qmm_case cases[] = {
        /* the conformance shape, per tensor */
        {U, U, U, 2, 2, {2, 4}, {4, 3}, P_TENSOR1, P_TENSOR1, 0.0107f},
        /* odd sizes: partial row block, K % 4 != 0, N > one column tile */
        {U, I, U, 2, 2, {7, 37}, {37, 300}, P_TENSOR, P_TENSOR, 0.05f},
        {I, U, I, 2, 2, {5, 3}, {3, 19}, P_VEC, P_VEC, 0.01f},
        {I, I, I, 2, 2, {9, 64}, {64, 17}, P_VEC, P_TENSOR, 0.02f, 1},
        /* saturation: tiny output scale, extreme zero points */
        {U, U, U, 2, 2, {6, 40}, {40, 10}, P_TENSOR, P_VEC, 0.0005f, 1},
        {I, U, I, 2, 2, {6, 40}, {40, 10}, P_VEC, P_VEC, 0.0005f, 1},
        /* ties: power-of-two scales make acc * mul land on .5 */
        {U, U, U, 2, 2, {8, 5}, {5, 8}, P_TENSOR, P_TENSOR, 1.0f, 0, 0, 1},
        {I, I, U, 2, 2, {8, 6}, {6, 8}, P_VEC, P_VEC, 0.5f, 0, 1, 1},
        /* batches, broadcast, N-D per row/column parameters */
        {U, U, U, 3, 3, {2, 2, 4}, {2, 4, 3}, P_TENSOR1, P_TENSOR1, 0.0107f},
        {U, I, I, 4, 3, {2, 1, 5, 11}, {3, 11, 6}, P_ND, P_TENSOR, 0.03f},
        {I, U, U, 3, 3, {3, 5, 9}, {3, 9, 7}, P_ND, P_ND, 0.02f, 0, 1},
        {U, U, U, 3, 2, {4, 3, 8}, {8, 5}, P_VEC, P_VEC, 0.02f},
        /* rank-1 operands */
        {U, U, U, 1, 2, {9}, {9, 4}, P_TENSOR, P_VEC, 0.02f},
        {I, I, I, 2, 1, {4, 9}, {9}, P_VEC, P_TENSOR, 0.02f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fprintf(stderr, "   case %zu\n", i);
        qmm_check(&cases[i]);
    }
}

/* Ties round to even: y = (a - 0) * 1 * 0.5 / 1 lands on x.5 for every odd a
 * (expected values by integer arithmetic, not by a rounding function). */
TEST_IMPL(qlinearmatmul_ties) {
    uint8_t a[32], b[3] = {1, 1, 1}, zero = 0, y[32 * 3];
    float half = 0.5f, one = 1.0f;
    for (int i = 0; i < 32; i++) a[i] = (uint8_t)(i < 2 ? 255 - i : test_rnd_int(&g_seed, 0, 255));
    tio in[8] = {
        {"a", KILN_DTYPE_U8, 2, {32, 1}, a}, {"as", KILN_DTYPE_F32, 0, {0}, &half, 1},
        {"az", KILN_DTYPE_U8, 0, {0}, &zero, 1}, {"b", KILN_DTYPE_U8, 2, {1, 3}, b, 1},
        {"bs", KILN_DTYPE_F32, 0, {0}, &one, 1}, {"bz", KILN_DTYPE_U8, 0, {0}, &zero, 1},
        {"ys", KILN_DTYPE_F32, 0, {0}, &one, 1}, {"yz", KILN_DTYPE_U8, 0, {0}, &zero, 1},
    };
    tio out = {"y", KILN_DTYPE_U8, 2, {32, 3}, y};
    /* opset 21 takes f16 scales too: 0.5 and 1 are exact in f16 */
    uint16_t half16 = 0x3800, one16 = 0x3C00;
    for (int v = 0; v < 2; v++) {
        if (v) {
            in[1].t = in[4].t = in[6].t = KILN_DTYPE_F16;
            in[1].data = &half16;
            in[4].data = in[6].data = &one16;
        }
        run_net("ai.onnx::QLinearMatMul", v ? 21 : 10, 8, in, 1, &out, NULL, NULL);
        for (int i = 0; i < 32; i++) {
            int q = a[i] / 2;
            if ((a[i] & 1) && (q & 1)) q++; /* x.5 with x odd goes up, with x even stays */
            for (int j = 0; j < 3; j++) ASSERT_EQ(y[i * 3 + j], q);
        }
    }
}

/* ================================================================ QLinearConv */

typedef struct qconv_case {
    kiln_dtype tx, tw, ty;
    int nsp;
    int64_t N, C, M, G;
    int64_t in[3], k[3], s[3], d[3], pads[6];
    const char *auto_pad;
    int per_channel, bias, edge_zp;
    float ys;
    int w_input;       /* w (and its parameters) a network input, not a constant */
} qconv_case;

static void qconv_attrs(kiln_layer *l, const void *ud) {
    const qconv_case *c = ud;
    int n = c->nsp;
    ASSERT_OK(kiln_layer_set_ints(l, "strides", c->s, n));
    ASSERT_OK(kiln_layer_set_ints(l, "dilations", c->d, n));
    ASSERT_OK(kiln_layer_set_int(l, "group", c->G));
    if (c->auto_pad) ASSERT_OK(kiln_layer_set_string(l, "auto_pad", c->auto_pad));
    else ASSERT_OK(kiln_layer_set_ints(l, "pads", c->pads, 2 * n));
}

static void qconv_check(const qconv_case *c) {
    int n = c->nsp;
    int64_t pb[3], out[3];
    for (int i = 0; i < n; i++) {
        int64_t ext = (c->k[i] - 1) * c->d[i] + 1;
        if (c->auto_pad && strcmp(c->auto_pad, "VALID")) {
            out[i] = (c->in[i] + c->s[i] - 1) / c->s[i];
            int64_t tot = (out[i] - 1) * c->s[i] + ext - c->in[i];
            if (tot < 0) tot = 0;
            pb[i] = !strcmp(c->auto_pad, "SAME_UPPER") ? tot / 2 : tot - tot / 2;
        } else if (c->auto_pad) {
            pb[i] = 0;
            out[i] = (c->in[i] - ext) / c->s[i] + 1;
        } else {
            pb[i] = c->pads[i];
            out[i] = (c->in[i] + c->pads[i] + c->pads[n + i] - ext) / c->s[i] + 1;
        }
    }
    tio in[9] = {
        {"x", c->tx, 2 + n, {c->N, c->C}}, {"xs", KILN_DTYPE_F32, 0}, {"xz", c->tx, 0},
        {"w", c->tw, 2 + n, {c->M, c->C / c->G}, NULL, 1}, {"ws", KILN_DTYPE_F32, 1, {1}, NULL, 1},
        {"wz", c->tw, 1, {1}, NULL, 1}, {"ys", KILN_DTYPE_F32, 0}, {"yz", c->ty, 0},
        {"B", KILN_DTYPE_I32, 1, {c->M}, NULL, 1},
    };
    tio yo = {"y", c->ty, 2 + n, {c->N, c->M}};
    for (int i = 0; i < n; i++) {
        in[0].dims[2 + i] = c->in[i];
        in[3].dims[2 + i] = c->k[i];
        yo.dims[2 + i] = out[i];
    }
    if (c->per_channel) in[4].dims[0] = in[5].dims[0] = c->M;
    if (c->w_input) in[3].is_const = in[4].is_const = in[5].is_const = 0;
    float xs = test_randf(&g_seed, 0.002f, 0.02f), ys = c->ys;
    uint8_t xz, yz;
    q_set(c->tx, &xz, 0, rnd_zp(c->tx, c->edge_zp));
    q_set(c->ty, &yz, 0, rnd_zp(c->ty, c->edge_zp));
    int64_t nws = in[4].dims[0];
    float *ws = test_xmalloc((size_t)nws * 4);
    void *wz = test_xmalloc((size_t)nws);
    for (int64_t i = 0; i < nws; i++) {
        ws[i] = test_randf(&g_seed, 0.002f, 0.02f);
        q_set(c->tw, wz, i, rnd_zp(c->tw, c->edge_zp));
    }
    int32_t *bias = test_xmalloc((size_t)c->M * 4);
    for (int64_t i = 0; i < c->M; i++) bias[i] = (int32_t)test_rnd_int(&g_seed, -20000, 20000);
    in[0].data = q_rand(c->tx, tio_numel(&in[0]));
    in[1].data = &xs;
    in[2].data = &xz;
    in[3].data = q_rand(c->tw, tio_numel(&in[3]));
    in[4].data = ws;
    in[5].data = wz;
    in[6].data = &ys;
    in[7].data = &yz;
    in[8].data = bias;
    int64_t ny = tio_numel(&yo);
    yo.data = test_xmalloc((size_t)ny);
    run_net("ai.onnx::QLinearConv", 10, c->bias ? 9 : 8, in, 1, &yo, qconv_attrs, c);

    /* naive reference: the zero-point-shifted integers as floats (exact),
     * summed in double (exact below 2^53) */
    int32_t x0 = q_get(c->tx, &xz, 0), y0 = q_get(c->ty, &yz, 0);
    int64_t nx = tio_numel(&in[0]), nw = tio_numel(&in[3]), wper = nw / c->M;
    float *xf = test_xmalloc((size_t)nx * sizeof(float)), *wf = test_xmalloc((size_t)nw * sizeof(float));
    float *bf = test_xmalloc((size_t)c->M * sizeof(float));
    double *acc = test_xmalloc((size_t)ny * sizeof(double));
    for (int64_t i = 0; i < nx; i++) xf[i] = (float)(q_get(c->tx, in[0].data, i) - x0);
    for (int64_t i = 0; i < nw; i++)
        wf[i] = (float)(q_get(c->tw, in[3].data, i) - q_get(c->tw, wz, c->per_channel ? i / wper : 0));
    for (int64_t m = 0; m < c->M; m++) bf[m] = (float)bias[m];
    test_conv_geo g = test_conv_geo_make(c->N, c->C, c->M, c->G, n, c->in, c->k, c->s, c->d, pb, out);
    test_conv_ref(&g, xf, wf, c->bias ? bf : NULL, acc);
    int64_t per_m = ny / (c->N * c->M);
    for (int64_t idx = 0; idx < ny; idx++) {
        int64_t m = idx / per_m % c->M, pc = c->per_channel ? m : 0;
        int32_t want = q_requant((int32_t)acc[idx], xs, ws[pc], ys, y0, c->ty);
        int32_t got = q_get(c->ty, yo.data, idx);
        if (got != want)
            TEST__FAIL("QLinearConv n %lld m %lld element %lld: %d, expected %d",
                       (long long)(idx / per_m / c->M), (long long)m, (long long)(idx % per_m), got, want);
    }
    free(xf);
    free(wf);
    free(bf);
    free(acc);
    free(in[0].data);
    free(in[3].data);
    free(ws);
    free(wz);
    free(bias);
    free(yo.data);
}

TEST_IMPL(qlinearconv) {
    const kiln_dtype U = KILN_DTYPE_U8, I = KILN_DTYPE_I8;
    qconv_case cases[] = {
        /* 2-D, padded, per tensor, no bias */
        {U, U, U, 2, 1, 3, 5, 1, {9, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL, 0, 0, 0, 0.05f},
        /* strides, dilations, asymmetric pads, per channel, bias */
        {U, I, U, 2, 2, 4, 6, 1, {11, 10}, {3, 2}, {2, 3}, {2, 1}, {0, 2, 1, 0}, NULL, 1, 1, 0, 0.08f},
        /* groups (2) and depthwise, i8 activations */
        {I, I, I, 2, 1, 6, 4, 2, {7, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL, 1, 1, 0, 0.04f},
        {U, U, U, 2, 2, 5, 5, 5, {8, 9}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, NULL, 1, 1, 0, 0.02f},
        /* auto_pad */
        {U, U, U, 2, 1, 2, 3, 1, {7, 6}, {3, 4}, {2, 1}, {1, 1}, {0}, "SAME_UPPER", 0, 1, 0, 0.05f},
        {U, I, I, 2, 1, 2, 3, 1, {7, 6}, {3, 4}, {2, 1}, {1, 1}, {0}, "SAME_LOWER", 1, 0, 0, 0.05f},
        {I, U, U, 2, 1, 3, 2, 1, {6, 9}, {2, 3}, {1, 2}, {1, 2}, {0}, "VALID", 0, 1, 0, 0.05f},
        /* saturation: small output scale, extreme zero points */
        {U, U, U, 2, 1, 4, 3, 1, {6, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL, 1, 1, 1, 0.003f},
        {I, I, I, 2, 1, 4, 3, 1, {6, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL, 0, 1, 1, 0.003f},
        /* 1-D and 3-D; many output pixels (several column tiles) */
        {U, U, U, 1, 2, 3, 7, 1, {300}, {5}, {1}, {2}, {4, 4}, NULL, 1, 1, 0, 0.05f},
        {U, I, U, 3, 1, 2, 3, 1, {4, 5, 6}, {2, 3, 2}, {1, 2, 1}, {1, 1, 2}, {1, 0, 1, 0, 1, 1},
         NULL, 1, 1, 0, 0.05f},
        /* 1x1 convolution, more output channels than one row block */
        {U, U, U, 2, 1, 16, 10, 1, {5, 5}, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, NULL, 1, 0, 0, 0.1f},
        /* w as a network input: packed per call instead of once per engine */
        {I, I, U, 2, 2, 6, 9, 3, {9, 7}, {3, 2}, {1, 2}, {2, 1}, {2, 1, 0, 1}, NULL, 1, 1, 0, 0.05f, 1},
        {U, U, U, 2, 1, 3, 5, 1, {9, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, NULL, 0, 0, 0, 0.05f, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fprintf(stderr, "   case %zu\n", i);
        qconv_check(&cases[i]);
    }
}

TEST_IMPL(qlinear_errors) {
    uint8_t a[12] = {0}, b[12] = {0}, z[4] = {0}, y[16];
    float s[4] = {0.1f, 0.1f, 0.1f, 0.1f};
    int8_t zi = 0;
    /* zero point type differs from its tensor */
    tio in[8] = {
        {"a", KILN_DTYPE_U8, 2, {3, 4}, a}, {"as", KILN_DTYPE_F32, 0, {0}, s, 1},
        {"az", KILN_DTYPE_I8, 0, {0}, &zi, 1}, {"b", KILN_DTYPE_U8, 2, {4, 3}, b},
        {"bs", KILN_DTYPE_F32, 0, {0}, s, 1}, {"bz", KILN_DTYPE_U8, 0, {0}, z, 1},
        {"ys", KILN_DTYPE_F32, 0, {0}, s, 1}, {"yz", KILN_DTYPE_U8, 0, {0}, z, 1},
    };
    tio out = {"y", KILN_DTYPE_U8, 2, {3, 3}, y};
    expect_fail("ai.onnx::QLinearMatMul", 10, 8, in, 1, &out, NULL, NULL,
                "a_zero_point must have type u8");
    /* inner dims differ */
    in[2].t = KILN_DTYPE_U8;
    in[2].data = z;
    in[3].dims[0] = 3;
    expect_fail("ai.onnx::QLinearMatMul", 10, 8, in, 1, &out, NULL, NULL, "inner dims differ");
    in[3].dims[0] = 4;
    /* per-row scale of the wrong length (found when running) */
    in[1].nd = 1;
    in[1].dims[0] = 2;
    in[2].nd = 1;
    in[2].dims[0] = 2;
    expect_fail("ai.onnx::QLinearMatMul", 10, 8, in, 1, &out, NULL, NULL, "a_scale");
    in[1].nd = in[2].nd = 0;
    /* y_scale must be a scalar */
    in[6].nd = 1;
    in[6].dims[0] = 3;
    expect_fail("ai.onnx::QLinearMatMul", 10, 8, in, 1, &out, NULL, NULL, "y_scale must have one");
    in[6].nd = 0;
    /* f32 operand */
    in[0].t = KILN_DTYPE_F32;
    expect_fail("ai.onnx::QLinearMatMul", 10, 8, in, 1, &out, NULL, NULL, "must be u8 or i8");

    /* QLinearConv: channels, per-channel scale length, bias length */
    uint8_t x[2 * 16] = {0}, w[3 * 2 * 4] = {0};
    int32_t bias[2] = {0};
    qconv_case cc = {KILN_DTYPE_U8, KILN_DTYPE_U8, KILN_DTYPE_U8, 2, 1, 2, 3, 1, {4, 4}, {2, 2},
                     {1, 1}, {1, 1}, {0, 0, 0, 0}};
    tio ci[9] = {
        {"x", KILN_DTYPE_U8, 4, {1, 2, 4, 4}, x}, {"xs", KILN_DTYPE_F32, 0, {0}, s, 1},
        {"xz", KILN_DTYPE_U8, 0, {0}, z, 1}, {"w", KILN_DTYPE_U8, 4, {3, 2, 2, 2}, w, 1},
        {"ws", KILN_DTYPE_F32, 1, {2}, s, 1}, {"wz", KILN_DTYPE_U8, 1, {2}, z, 1},
        {"ys", KILN_DTYPE_F32, 0, {0}, s, 1}, {"yz", KILN_DTYPE_U8, 0, {0}, z, 1},
        {"B", KILN_DTYPE_I32, 1, {2}, bias, 1},
    };
    uint8_t yc[3 * 9];
    tio co = {"y", KILN_DTYPE_U8, 4, {1, 3, 3, 3}, yc};
    expect_fail("ai.onnx::QLinearConv", 10, 8, ci, 1, &co, qconv_attrs, &cc,
                "must have 1 or 3 (output channels) elements");
    ci[4].dims[0] = ci[5].dims[0] = 1;
    expect_fail("ai.onnx::QLinearConv", 10, 9, ci, 1, &co, qconv_attrs, &cc, "B has 2 elements");
    ci[0].dims[1] = 3;
    expect_fail("ai.onnx::QLinearConv", 10, 8, ci, 1, &co, qconv_attrs, &cc, "channels");
    ci[0].dims[1] = 2;
    ci[2].t = KILN_DTYPE_I8;
    expect_fail("ai.onnx::QLinearConv", 10, 8, ci, 1, &co, qconv_attrs, &cc,
                "x_zero_point must have type u8");
}

/* ================================================================ TfIdfVectorizer */

typedef struct tfidf_case {
    int64_t min_n, max_n, skip;
    const char *mode;
    int64_t ncounts;
    int64_t counts[4];
    int64_t npool;
    int64_t pool[64];
    int64_t nidx;
    int64_t idx[32];
    int64_t nweights;
    float weights[32];
    int strings;       /* set pool_strings (unsupported) */
} tfidf_case;

static void tfidf_attrs(kiln_layer *l, const void *ud) {
    const tfidf_case *c = ud;
    ASSERT_OK(kiln_layer_set_int(l, "min_gram_length", c->min_n));
    ASSERT_OK(kiln_layer_set_int(l, "max_gram_length", c->max_n));
    ASSERT_OK(kiln_layer_set_int(l, "max_skip_count", c->skip));
    ASSERT_OK(kiln_layer_set_string(l, "mode", c->mode));
    ASSERT_OK(kiln_layer_set_ints(l, "ngram_counts", c->counts, c->ncounts));
    ASSERT_OK(kiln_layer_set_ints(l, "ngram_indexes", c->idx, c->nidx));
    if (c->strings) ASSERT_OK(kiln_layer_set_string(l, "pool_strings", "a,b"));
    else ASSERT_OK(kiln_layer_set_ints(l, "pool_int64s", c->pool, c->npool));
    if (c->nweights) ASSERT_OK(kiln_layer_set_floats(l, "weights", c->weights, c->nweights));
}

/* Naive: for every pool n-gram j (in the counted lengths, and not repeated
 * later in the pool), count its occurrences with every allowed gap. */
static void tfidf_ref(const tfidf_case *c, const int64_t *x, int64_t rows, int64_t C,
                      int64_t S, float *y) {
    for (int64_t r = 0; r < rows; r++) {
        const int64_t *xr = x + r * C;
        float *yr = y + r * S;
        for (int64_t i = 0; i < S; i++) yr[i] = 0;
        int64_t j = 0;
        for (int64_t sec = 0; sec < c->ncounts; sec++) {
            int64_t n = sec + 1, b = c->counts[sec];
            int64_t e = sec + 1 < c->ncounts ? c->counts[sec + 1] : c->npool;
            for (int64_t p = b; p < e; p += n, j++) {
                if (n < c->min_n || n > c->max_n) continue;
                int later = 0; /* a later identical n-gram takes the counts */
                for (int64_t q = p + n; q + n <= e; q += n)
                    if (!memcmp(&c->pool[p], &c->pool[q], (size_t)n * 8)) later = 1;
                if (later) continue;
                int64_t cnt = 0;
                for (int64_t gap = 1; gap <= (n == 1 ? 1 : c->skip + 1); gap++)
                    for (int64_t s = 0; s + (n - 1) * gap < C; s++) {
                        int ok = 1;
                        for (int64_t k = 0; k < n && ok; k++)
                            ok = xr[s + k * gap] == c->pool[p + k];
                        cnt += ok;
                    }
                yr[c->idx[j]] += (float)cnt;
            }
        }
        for (int64_t i = 0; i < S; i++) {
            float w = c->nweights ? c->weights[i] : 1.0f;
            if (!strcmp(c->mode, "IDF")) yr[i] = yr[i] > 0 ? w : 0;
            else if (!strcmp(c->mode, "TFIDF")) yr[i] *= w;
        }
    }
}

static void tfidf_check(const tfidf_case *c, kiln_dtype xt, int nd, int64_t rows, int64_t C,
                        int alphabet) {
    int64_t S = 0;
    for (int64_t i = 0; i < c->nidx; i++)
        if (c->idx[i] + 1 > S) S = c->idx[i] + 1;
    int64_t n = rows * C;
    int64_t *x64 = test_xmalloc((size_t)n * 8);
    void *xd = test_xmalloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) {
        x64[i] = test_rnd_int(&g_seed, 0, alphabet - 1);
        if (xt == KILN_DTYPE_I32) ((int32_t *)xd)[i] = (int32_t)x64[i];
        else ((int64_t *)xd)[i] = x64[i];
    }
    tio xi = {"x", xt, nd, {0}, xd}, yo = {"y", KILN_DTYPE_F32, nd};
    if (nd == 2) {
        xi.dims[0] = yo.dims[0] = rows;
        xi.dims[1] = C;
        yo.dims[1] = S;
    } else {
        xi.dims[0] = C;
        yo.dims[0] = S;
    }
    float *y = test_xmalloc((size_t)(rows * S) * 4), *r = test_xmalloc((size_t)(rows * S) * 4);
    yo.data = y;
    run_net("ai.onnx::TfIdfVectorizer", 9, 1, &xi, 1, &yo, tfidf_attrs, c);
    tfidf_ref(c, x64, rows, C, S, r);
    for (int64_t i = 0; i < rows * S; i++)
        if (y[i] != r[i])
            TEST__FAIL("TfIdfVectorizer %s: y[%lld] = %g, expected %g", c->mode, (long long)i,
                       y[i], r[i]);
    free(x64);
    free(xd);
    free(y);
    free(r);
}

TEST_IMPL(tfidf) {
    /* the spec's example pool: 1-grams 2,3,5,4; 2-grams (5,6) (7,8) (6,7) */
    tfidf_case base = {1, 2, 2, "TF", 2, {0, 4}, 10, {2, 3, 5, 4, 5, 6, 7, 8, 6, 7}, 7,
                       {0, 1, 2, 3, 4, 5, 6}, 7, {0.5f, 1, 1.5f, 2, 2.5f, 3, 3.5f}};
    const char *modes[3] = {"TF", "IDF", "TFIDF"};
    for (int m = 0; m < 3; m++) {
        tfidf_case c = base;
        c.mode = modes[m];
        tfidf_check(&c, KILN_DTYPE_I32, 1, 1, 12, 10);
        tfidf_check(&c, KILN_DTYPE_I64, 2, 3, 17, 9);
        c.nweights = 0;
        tfidf_check(&c, KILN_DTYPE_I64, 2, 2, 9, 9);
    }
    /* only bigrams, no skip; permuted output columns with gaps */
    tfidf_case c2 = {2, 2, 0, "TF", 2, {0, 4}, 10, {2, 3, 5, 4, 5, 6, 7, 8, 6, 7}, 7,
                     {6, 5, 4, 3, 2, 1, 0}};
    tfidf_check(&c2, KILN_DTYPE_I32, 2, 4, 30, 9);
    c2.idx[0] = 9; /* unigram column (not counted: min 2) */
    tfidf_check(&c2, KILN_DTYPE_I32, 1, 1, 30, 9);
    /* 1..3-grams over a small alphabet (many hits), a repeated 2-gram, gaps up to 3 */
    tfidf_case c3 = {1, 3, 3, "TFIDF", 3, {0, 3, 9}, 15,
                     {0, 1, 2, 0, 1, 1, 0, 0, 1, 0, 1, 2, 2, 2, 1}, 8,
                     {0, 1, 2, 3, 4, 5, 6, 7}, 8, {1, 2, 3, 4, 5, 6, 7, 8}};
    tfidf_check(&c3, KILN_DTYPE_I64, 2, 5, 23, 3);
    c3.min_n = 2;
    c3.mode = "IDF";
    tfidf_check(&c3, KILN_DTYPE_I32, 2, 3, 11, 3);
    /* sequences shorter than the n-grams */
    c3.min_n = 3;
    c3.mode = "TF";
    tfidf_check(&c3, KILN_DTYPE_I32, 2, 2, 2, 3);
}

TEST_IMPL(tfidf_errors) {
    int32_t x[6] = {1, 2, 3, 4, 5, 6};
    float y[8];
    tio xi = {"x", KILN_DTYPE_I32, 1, {6}, x}, yo = {"y", KILN_DTYPE_F32, 1, {7}, y};
    tfidf_case c = {1, 2, 0, "TF", 2, {0, 4}, 10, {2, 3, 5, 4, 5, 6, 7, 8, 6, 7}, 7,
                    {0, 1, 2, 3, 4, 5, 6}};
    /* each case breaks one field of c */
    enum { NBAD = 6 };
    static const char *const want[NBAD] = {
        "pool_strings is not supported", "mode must be TF, IDF or TFIDF",
        "ngram_indexes has 6 entries, the pool holds 7", "not a multiple of 2",
        "min_gram_length <= max_gram_length", "weights has 3 values",
    };
    tfidf_case bad[NBAD];
    for (int i = 0; i < NBAD; i++) bad[i] = c;
    bad[0].strings = 1;
    bad[1].mode = "BM25";
    bad[2].nidx = 6;
    bad[3].counts[1] = 5;
    bad[4].min_n = 3;
    bad[5].mode = "IDF"; bad[5].nweights = 3;
    for (int i = 0; i < NBAD; i++)
        expect_fail("ai.onnx::TfIdfVectorizer", 9, 1, &xi, 1, &yo, tfidf_attrs, &bad[i], want[i]);
    float xf[6] = {0};
    tio xfl = {"x", KILN_DTYPE_F32, 1, {6}, xf};
    expect_fail("ai.onnx::TfIdfVectorizer", 9, 1, &xfl, 1, &yo, tfidf_attrs, &c,
                "X must be i32 or i64");
}

TEST_LIST(TEST_ENTRY(mvn), TEST_ENTRY(mvn_errors), TEST_ENTRY(qlinearmatmul), TEST_ENTRY(qlinearmatmul_ties),
          TEST_ENTRY(qlinearconv), TEST_ENTRY(qlinear_errors), TEST_ENTRY(tfidf),
          TEST_ENTRY(tfidf_errors))
