/*
 * test_nan.c — NaN and ±Inf through every activation, pooling, reduction
 * and comparison op, against references written here in double precision
 * from the ONNX formulas with numpy's semantics (NaN propagates through
 * arithmetic, np.maximum/np.max/np.argmax treat NaN as the extreme), and
 * ONNX Runtime's where it decides otherwise: MaxPool skips NaN (a window
 * [NaN, Inf] gives Inf; only an all-NaN window gives NaN), ThresholdedRelu
 * and Shrink map NaN to 0 (their formulas compare).  Issue 12: Relu(NaN)
 * gave 0 and MaxPool over [NaN, Inf] gave NaN; later Sign(NaN) gave 0 and
 * Hardmax skipped NaN.
 *
 * Every input mixes the special values with fresh random ones; outputs are
 * poisoned before the run.
 */
#include <math.h>
#include <stdlib.h>

#include <kiln/kiln.h>

#include "test.h"
#include "test_ops_util.h"

static uint64_t g_seed = 0x5eed1234u;

/* A constant input of the layer (axes, slopes, pool pads...). */
typedef struct cin {
    kiln_dtype t;
    int nd;
    int64_t dims[2];
    const void *data;
} cin;

typedef void (*set_attrs)(kiln_layer *l);

/* Runs op (highest registered version) over x[dims] (+ constants); the
 * first output, poisoned, is copied to y (ybytes); its dims to ydims. */
static void run_op(const char *op, set_attrs attrs, int nd, const int64_t *dims, const float *x, int nconst,
                   const cin *c, int nout, void *y, size_t ybytes, int64_t *ydims) {
    kiln_network *net = kiln_network_create();
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, nd, dims, NULL));
    const char *in[4] = {"x", "c1", "c2", "c3"}, *out[2] = {"y", "y2"};
    for (int i = 0; i < nconst; i++)
        ASSERT_OK(kiln_network_add_constant(net, in[1 + i], c[i].t, c[i].nd, c[i].dims, c[i].data));
    kiln_layer *l = kiln_network_add_layer(net, op, 99, "L", 1 + nconst, in, nout, out);
    if (!l) TEST__FAIL("%s: %s", op, kiln_errmsg());
    if (attrs) attrs(l);
    for (int k = 0; k < nout; k++) ASSERT_OK(kiln_network_mark_output(net, out[k]));
    kiln_engine *e = test_build_ok(net, 0, 2, NULL);
    kiln_network_free(net);
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, 2, &ctx));
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= dims[i];
    ASSERT_OK(kiln_context_bind(ctx, "x", (void *)x, (size_t)n * sizeof *x));
    memset(y, 0xA5, ybytes);
    ASSERT_OK(kiln_context_bind(ctx, "y", y, ybytes));
    if (kiln_context_run(ctx)) TEST__FAIL("%s: %s", op, kiln_errmsg());
    int ynd;
    ASSERT_OK(kiln_context_shape(ctx, "y", &ynd, ydims));
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

static int same(double got, double ref, double rtol, double atol) {
    if (isnan(ref)) return isnan(got);
    if (isinf(ref)) return got == ref;
    return isfinite(got) && fabs(got - ref) <= atol + rtol * fabs(ref);
}

static void check(const char *op, const float *x, const float *y, const double *ref, int64_t n, double rtol,
                  double atol) {
    for (int64_t i = 0; i < n; i++)
        if (!same(y[i], ref[i], rtol, atol))
            TEST__FAIL("%s: element %lld (input %g): got %.9g, expected %.9g", op, (long long)i,
                       x ? x[i] : 0.0, y[i], ref[i]);
}

/* ---------------------------------------------------------------- activations */

#define NSPEC 6
#define NX (NSPEC + 10)
static void unary_input(float *x) {
    const float spec[NSPEC] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, -NAN};
    for (int i = 0; i < NSPEC; i++) x[i] = spec[i];
    test_fill_f32(&g_seed, x + NSPEC, NX - NSPEC, -6, 6);
}

static double sigm(double v) { return 1 / (1 + exp(-v)); }
static double clamp01(double v) { return isnan(v) ? v : v < 0 ? 0 : v > 1 ? 1 : v; }
static double softplus(double v) { return log1p(exp(v)); }
static double r_relu(double v) { return isnan(v) ? v : v < 0 ? 0 : v; }
static double r_leaky(double v) { return v >= 0 ? v : 0.01 * v; }
static double r_sigmoid(double v) { return isinf(v) ? (v > 0) : sigm(v); }
static double r_hsigmoid(double v) { return clamp01(0.2 * v + 0.5); }
static double r_hswish(double v) { return v * clamp01(v / 6 + 0.5); }
static double r_tanh(double v) { return tanh(v); }
static double r_gelu(double v) { return 0.5 * v * (1 + erf(v / sqrt(2.0))); }
static double r_elu(double v) { return v >= 0 ? v : exp(v) - 1; }
static double r_selu(double v) {
    const double a = 1.67326319217681884765625, g = 1.05070102214813232421875;
    return v > 0 ? g * v : g * (a * exp(v) - a);
}
static double r_celu(double v) { return (v > 0 ? v : 0) + (v > 0 ? 0 : exp(v) - 1); }
static double r_softplus(double v) { return v > 30 ? v : softplus(v); }
static double r_softsign(double v) { return v / (1 + fabs(v)); }
static double r_mish(double v) { return v * tanh(r_softplus(v)); }
static double r_threlu(double v) { return v > 1 ? v : 0; }        /* NaN -> 0, as ORT's formula */
static double r_shrink(double v) { return v < -0.5 ? v : v > 0.5 ? v : 0; } /* bias 0; NaN -> 0 */
static double r_prelu(double v) { return v < 0 ? 0.25 * v : v; }   /* slope 0.25; NaN stays */
static double r_abs(double v) { return fabs(v); }
static double r_sign(double v) { return isnan(v) ? v : (v > 0) - (v < 0); } /* np.sign; ORT too */

TEST_IMPL(activations) {
    static const struct {
        const char *op;
        double (*ref)(double);
    } ops[] = {
        {"ai.onnx::Relu", r_relu},         {"ai.onnx::LeakyRelu", r_leaky},
        {"ai.onnx::Sigmoid", r_sigmoid},   {"ai.onnx::HardSigmoid", r_hsigmoid},
        {"ai.onnx::HardSwish", r_hswish},  {"ai.onnx::Tanh", r_tanh},
        {"ai.onnx::Gelu", r_gelu},         {"ai.onnx::Elu", r_elu},
        {"ai.onnx::Selu", r_selu},         {"ai.onnx::Celu", r_celu},
        {"ai.onnx::Softplus", r_softplus}, {"ai.onnx::Softsign", r_softsign},
        {"ai.onnx::Mish", r_mish},         {"ai.onnx::ThresholdedRelu", r_threlu},
        {"ai.onnx::Shrink", r_shrink},     {"ai.onnx::Abs", r_abs},
        {"ai.onnx::PRelu", r_prelu},       {"ai.onnx::Clip", r_relu}, /* Clip(x, 0): max(x, 0) */
        {"ai.onnx::Sign", r_sign},
    };
    float x[NX], y[NX];
    double ref[NX];
    int64_t dims[1] = {NX}, yd[KILN_MAX_DIMS];
    const float slope = 0.25f, lo = 0.0f;
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        unary_input(x);
        int prelu = !strcmp(ops[k].op, "ai.onnx::PRelu"), clip = !strcmp(ops[k].op, "ai.onnx::Clip");
        cin c = {KILN_DTYPE_F32, 0, {0}, prelu ? &slope : &lo};
        run_op(ops[k].op, NULL, 1, dims, x, prelu || clip, &c, 1, y, sizeof y, yd);
        for (int i = 0; i < NX; i++) ref[i] = ops[k].ref(x[i]);
        check(ops[k].op, x, y, ref, NX, 2e-5, 2e-6);
    }
}

/* Softmax family over rows holding NaN, +Inf, -Inf: what numpy's
 * exp(x - max(x)) / sum gives (a NaN or a +Inf in a row makes it NaN). */
TEST_IMPL(softmax_rows) {
    enum { R = 6, L = 4 };
    float x[R * L], y[R * L];
    double ref[R * L];
    int64_t dims[2] = {R, L}, yd[KILN_MAX_DIMS];
    for (int lg = 0; lg < 2; lg++) {
        test_fill_f32(&g_seed, x, R * L, -4, 4);
        x[0 * L + 1] = NAN;
        x[1 * L + 2] = INFINITY;
        x[2 * L + 0] = -INFINITY;
        for (int j = 0; j < L; j++) x[3 * L + j] = -INFINITY;
        x[4 * L + 3] = -INFINITY, x[4 * L + 1] = -INFINITY;
        const char *op = lg ? "ai.onnx::LogSoftmax" : "ai.onnx::Softmax";
        run_op(op, NULL, 2, dims, x, 0, NULL, 1, y, sizeof y, yd);
        for (int r = 0; r < R; r++) {
            double m = -INFINITY;
            for (int j = 0; j < L; j++) m = isnan(x[r * L + j]) || x[r * L + j] > m ? x[r * L + j] : m;
            double s = 0;
            for (int j = 0; j < L; j++) s += exp(x[r * L + j] - m);
            for (int j = 0; j < L; j++)
                ref[r * L + j] = lg ? x[r * L + j] - m - log(s) : exp(x[r * L + j] - m) / s;
        }
        check(op, x, y, ref, R * L, 2e-5, 2e-6);
    }
}

/* Hardmax: the one-hot of np.argmax, as the ONNX reference computes it:
 * the first NaN of a row wins, else the first maximum (+Inf included;
 * an all -Inf row: index 0).  ORT 1.32 differs by accident of Eigen: a
 * NaN in the first column gives an all-zero row, elsewhere it is skipped. */
TEST_IMPL(hardmax_rows) {
    enum { R = 7, L = 4 };
    float x[R * L], y[R * L];
    double ref[R * L];
    int64_t dims[2] = {R, L}, yd[KILN_MAX_DIMS];
    test_fill_f32(&g_seed, x, R * L, -4, 4);
    x[0 * L + 2] = NAN;                             /* NaN in the middle */
    x[1 * L + 0] = NAN;                             /* NaN first */
    x[2 * L + 1] = INFINITY, x[2 * L + 3] = NAN;    /* +Inf, then NaN: NaN wins */
    x[3 * L + 1] = INFINITY, x[3 * L + 2] = INFINITY; /* the first +Inf */
    for (int j = 0; j < L; j++) x[4 * L + j] = -INFINITY;
    x[5 * L + 3] = NAN, x[5 * L + 1] = NAN;         /* the first of two NaN */
    for (int r = 0; r < R; r++) {
        int am = 0;
        for (int j = 1; j < L && !isnan(x[r * L + am]); j++)
            if (isnan(x[r * L + j]) || x[r * L + j] > x[r * L + am]) am = j;
        for (int j = 0; j < L; j++) ref[r * L + j] = j == am;
    }
    run_op("ai.onnx::Hardmax", NULL, 2, dims, x, 0, NULL, 1, y, sizeof y, yd);
    check("ai.onnx::Hardmax", NULL, y, ref, R * L, 0, 0);
}

/* ---------------------------------------------------------------- pooling */

/* Pairs of a window of 2: the specials against each other and numbers. */
#define NPAIR 12
static void pair_input(float *x) {
    const float s[][2] = {{NAN, INFINITY}, {INFINITY, NAN}, {NAN, NAN},          {-INFINITY, 1.5f},
                          {-INFINITY, -INFINITY}, {NAN, -3}, {-3, NAN},          {INFINITY, -INFINITY},
                          {-INFINITY, NAN}};
    int ns = (int)(sizeof s / sizeof s[0]);
    for (int i = 0; i < ns; i++) x[2 * i] = s[i][0], x[2 * i + 1] = s[i][1];
    test_fill_f32(&g_seed, x + 2 * ns, 2 * (NPAIR - ns), -5, 5);
}

/* MaxPool as ORT: NaN skipped, NaN only when the whole window is. */
static double w_max(const float *w, int n) {
    double m = NAN;
    for (int i = 0; i < n; i++) m = isnan(m) || w[i] > m ? w[i] : m;
    return m;
}
static double w_avg(const float *w, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += w[i];
    return s / n;
}
static double w_lp2(const float *w, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)w[i] * w[i];
    return sqrt(s);
}

static void k2s2(kiln_layer *l) {
    int64_t k[1] = {2};
    ASSERT_OK(kiln_layer_set_ints(l, "kernel_shape", k, 1));
    ASSERT_OK(kiln_layer_set_ints(l, "strides", k, 1));
}
static void k22s22(kiln_layer *l) {
    int64_t k[2] = {2, 2};
    ASSERT_OK(kiln_layer_set_ints(l, "kernel_shape", k, 2));
    ASSERT_OK(kiln_layer_set_ints(l, "strides", k, 2));
}

TEST_IMPL(pooling) {
    static const struct {
        const char *op;
        double (*ref)(const float *, int);
    } ops[] = {{"ai.onnx::MaxPool", w_max}, {"ai.onnx::AveragePool", w_avg}, {"ai.onnx::LpPool", w_lp2}};
    float x[2 * NPAIR], y[2 * NPAIR];
    double ref[2 * NPAIR];
    int64_t yd[KILN_MAX_DIMS];
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        /* 1-D: windows are the pairs */
        pair_input(x);
        int64_t d1[3] = {1, 1, 2 * NPAIR};
        run_op(ops[k].op, k2s2, 3, d1, x, 0, NULL, 1, y, sizeof y, yd);
        ASSERT_EQ(yd[2], NPAIR);
        for (int i = 0; i < NPAIR; i++) ref[i] = ops[k].ref(x + 2 * i, 2);
        check(ops[k].op, NULL, y, ref, NPAIR, 1e-6, 1e-6);
        /* 2-D 2x2 windows (MaxPool's row-reduce path): rows 0 and 1 hold
         * the pairs' first and second elements */
        float x2[2 * NPAIR];
        for (int i = 0; i < NPAIR; i++) x2[i] = x[2 * i], x2[NPAIR + i] = x[2 * i + 1];
        int64_t d2[4] = {1, 1, 2, NPAIR};
        run_op(ops[k].op, k22s22, 4, d2, x2, 0, NULL, 1, y, sizeof y, yd);
        for (int i = 0; i < NPAIR / 2; i++) {
            float w[4] = {x2[2 * i], x2[2 * i + 1], x2[NPAIR + 2 * i], x2[NPAIR + 2 * i + 1]};
            ref[i] = ops[k].ref(w, 4);
        }
        check(ops[k].op, NULL, y, ref, NPAIR / 2, 1e-6, 1e-6);
    }
    /* MaxPool with Indices: the index of the value taken */
    pair_input(x);
    kiln_network *net = kiln_network_create();
    int64_t d1[3] = {1, 1, 2 * NPAIR};
    ASSERT_OK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 3, d1, NULL));
    const char *in[1] = {"x"}, *out[2] = {"y", "i"};
    kiln_layer *l = kiln_network_add_layer(net, "ai.onnx::MaxPool", 99, "L", 1, in, 2, out);
    k2s2(l);
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    ASSERT_OK(kiln_network_mark_output(net, "i"));
    kiln_engine *e = test_build_ok(net, 0, 1, NULL);
    kiln_network_free(net);
    kiln_context *ctx;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    int64_t ind[NPAIR];
    memset(ind, 0xA5, sizeof ind);
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, NPAIR * sizeof *y));
    ASSERT_OK(kiln_context_bind(ctx, "i", ind, sizeof ind));
    ASSERT_OK(kiln_context_run(ctx));
    for (int i = 0; i < NPAIR; i++) {
        ref[i] = w_max(x + 2 * i, 2);
        ASSERT(same(y[i], ref[i], 0, 0));
        if (!isnan(ref[i])) ASSERT(x[ind[i]] == y[i]);
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
}

TEST_IMPL(global_pooling) {
    static const struct {
        const char *op;
        double (*ref)(const float *, int);
    } ops[] = {{"ai.onnx::GlobalMaxPool", w_max},
               {"ai.onnx::GlobalAveragePool", w_avg},
               {"ai.onnx::GlobalLpPool", w_lp2}};
    /* channel c holds pair c, padded with random numbers to 40 positions
     * (past one vector) */
    enum { C = NPAIR, S = 40 };
    float p[2 * NPAIR], x[C * S], y[C];
    double ref[C];
    int64_t d[3] = {1, C, S}, yd[KILN_MAX_DIMS];
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        pair_input(p);
        test_fill_f32(&g_seed, x, C * S, -5, 5);
        for (int c = 0; c < C; c++) x[c * S + 3] = p[2 * c], x[c * S + 37] = p[2 * c + 1];
        x[2 * S + 0] = NAN; /* an all-NaN window only if every element is */
        run_op(ops[k].op, NULL, 3, d, x, 0, NULL, 1, y, sizeof y, yd);
        for (int c = 0; c < C; c++) ref[c] = ops[k].ref(x + c * S, S);
        check(ops[k].op, NULL, y, ref, C, 1e-5, 1e-5);
    }
}

/* ---------------------------------------------------------------- reductions */

static double v_max(const float *w, int n) { /* np.max: NaN wins */
    double m = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (isnan(w[i])) return NAN;
        if (w[i] > m) m = w[i];
    }
    return m;
}
static double v_min(const float *w, int n) {
    double m = INFINITY;
    for (int i = 0; i < n; i++) {
        if (isnan(w[i])) return NAN;
        if (w[i] < m) m = w[i];
    }
    return m;
}
static double v_sum(const float *w, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += w[i];
    return s;
}
static double v_mean(const float *w, int n) { return v_sum(w, n) / n; }
static double v_prod(const float *w, int n) {
    double s = 1;
    for (int i = 0; i < n; i++) s *= w[i];
    return s;
}
static double v_l1(const float *w, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += fabs(w[i]);
    return s;
}
static double v_sumsq(const float *w, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)w[i] * w[i];
    return s;
}
static double v_l2(const float *w, int n) { return sqrt(v_sumsq(w, n)); }
static double v_logsum(const float *w, int n) { return log(v_sum(w, n)); }
static double v_lse(const float *w, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += exp(w[i]);
    return log(s);
}
static double v_argmax(const float *w, int n) { /* np.argmax: the first NaN, else the first max */
    int b = 0;
    for (int i = 1; i < n; i++)
        if (!isnan(w[b]) && (isnan(w[i]) || w[i] > w[b])) b = i;
    return b;
}
static double v_argmin(const float *w, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (!isnan(w[b]) && (isnan(w[i]) || w[i] < w[b])) b = i;
    return b;
}

static void axis_last(kiln_layer *l) { ASSERT_OK(kiln_layer_set_int(l, "axis", 1)); }

TEST_IMPL(reductions) {
    static const struct {
        const char *op;
        double (*ref)(const float *, int);
    } ops[] = {{"ai.onnx::ReduceMax", v_max},     {"ai.onnx::ReduceMin", v_min},
               {"ai.onnx::ReduceSum", v_sum},     {"ai.onnx::ReduceMean", v_mean},
               {"ai.onnx::ReduceProd", v_prod},   {"ai.onnx::ReduceL1", v_l1},
               {"ai.onnx::ReduceL2", v_l2},       {"ai.onnx::ReduceSumSquare", v_sumsq},
               {"ai.onnx::ReduceLogSum", v_logsum}, {"ai.onnx::ReduceLogSumExp", v_lse}};
    /* rows of 3: a pair and a random number (rows of specials only too) */
    float p[2 * NPAIR], x[NPAIR * 3], y[NPAIR];
    double ref[NPAIR];
    int64_t d[2] = {NPAIR, 3}, yd[KILN_MAX_DIMS];
    const int64_t axes[1] = {-1};
    cin ax = {KILN_DTYPE_I64, 1, {1}, axes};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        pair_input(p);
        test_fill_f32(&g_seed, x, NPAIR * 3, 0.5f, 3);
        for (int r = 0; r < NPAIR; r++) x[r * 3] = p[2 * r], x[r * 3 + 2] = p[2 * r + 1];
        for (int j = 0; j < 3; j++) x[4 * 3 + j] = -INFINITY;
        run_op(ops[k].op, NULL, 2, d, x, 1, &ax, 1, y, sizeof y, yd);
        for (int r = 0; r < NPAIR; r++) ref[r] = ops[k].ref(x + r * 3, 3);
        check(ops[k].op, NULL, y, ref, NPAIR, 1e-5, 1e-6);
    }
    /* ArgMax / ArgMin (int64 output), also with select_last_index */
    static const struct {
        const char *op;
        double (*ref)(const float *, int);
    } args[] = {{"ai.onnx::ArgMax", v_argmax}, {"ai.onnx::ArgMin", v_argmin}};
    for (size_t k = 0; k < 2; k++) {
        pair_input(p);
        test_fill_f32(&g_seed, x, NPAIR * 3, -3, 3);
        for (int r = 0; r < NPAIR; r++) x[r * 3] = p[2 * r], x[r * 3 + 2] = p[2 * r + 1];
        x[5 * 3 + 1] = NAN; /* NaN in the middle */
        int64_t yi[NPAIR];
        run_op(args[k].op, axis_last, 2, d, x, 0, NULL, 1, yi, sizeof yi, yd);
        for (int r = 0; r < NPAIR; r++)
            if (yi[r] != (int64_t)args[k].ref(x + r * 3, 3))
                TEST__FAIL("%s row %d [%g, %g, %g]: got %lld, expected %d", args[k].op, r, x[r * 3],
                           x[r * 3 + 1], x[r * 3 + 2], (long long)yi[r], (int)args[k].ref(x + r * 3, 3));
    }
}

/* ---------------------------------------------------------------- comparisons */

TEST_IMPL(comparisons_and_minmax) {
    const float spec[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1.5f, -2.0f};
    enum { S = sizeof spec / sizeof spec[0], N = S * S };
    float a[N], b[N];
    for (int i = 0; i < S; i++)
        for (int j = 0; j < S; j++) a[i * S + j] = spec[i], b[i * S + j] = spec[j];
    /* b is a constant input: comparisons of every pair */
    static const struct {
        const char *op;
        int cmp; /* 0 = Min/Max (float out), else a comparison (bool out) */
    } ops[] = {{"ai.onnx::Equal", 1}, {"ai.onnx::Less", 2},          {"ai.onnx::Greater", 3},
               {"ai.onnx::LessOrEqual", 4}, {"ai.onnx::GreaterOrEqual", 5}, {"ai.onnx::Min", 6},
               {"ai.onnx::Max", 7}};
    int64_t d[1] = {N}, yd[KILN_MAX_DIMS];
    cin cb = {KILN_DTYPE_F32, 1, {N}, b};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        union {
            uint8_t b8[N];
            float f[N];
        } y;
        int isbool = ops[k].cmp <= 5;
        run_op(ops[k].op, NULL, 1, d, a, 1, &cb, 1, &y, isbool ? N : sizeof y.f, yd);
        for (int i = 0; i < N; i++) {
            double x = a[i], z = b[i];
            switch (ops[k].cmp) {
            case 1: ASSERT_EQ(y.b8[i], x == z); break;
            case 2: ASSERT_EQ(y.b8[i], x < z); break;
            case 3: ASSERT_EQ(y.b8[i], x > z); break;
            case 4: ASSERT_EQ(y.b8[i], x <= z); break;
            case 5: ASSERT_EQ(y.b8[i], x >= z); break;
            default: { /* np.minimum / np.maximum: NaN propagates */
                double r = isnan(x) || isnan(z) ? NAN : ops[k].cmp == 6 ? fmin(x, z) : fmax(x, z);
                if (!same(y.f[i], r, 0, 0))
                    TEST__FAIL("%s(%g, %g) = %g, expected %g", ops[k].op, x, z, y.f[i], r);
            }
            }
        }
    }
}

TEST_LIST(TEST_ENTRY(activations), TEST_ENTRY(softmax_rows), TEST_ENTRY(hardmax_rows), TEST_ENTRY(pooling),
          TEST_ENTRY(global_pooling),
          TEST_ENTRY(reductions), TEST_ENTRY(comparisons_and_minmax))
