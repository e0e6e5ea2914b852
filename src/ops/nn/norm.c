/*
 * norm.c — ONNX BatchNormalization (inference and training_mode),
 * LayerNormalization, InstanceNormalization, GroupNormalization,
 * LpNormalization.
 *
 * Every op reduces to "normalize groups of contiguous elements and apply a
 * per-element or per-channel affine": statistics are accumulated in double
 * for accuracy, the affine is fused into one pass.
 */
#include "device/cpu/sgemm.h"
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"


#include <math.h>
#include <string.h>

/* Every op here has one type T for all its inputs (scale, bias, mean, ...:
 * the kernels read them as X's type). */
static int same_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    if (!kiln__ops_is_float(x->dtype))
        return kiln_set_error(KILN_ETYPE, "expected a float tensor, found %s",
                              kiln_dtype_name(x->dtype));
    int rc = kiln__ops_check_same_mask(c, "normalization", ~0u);
    if (rc) return rc;
    c->out[0] = *x;
    c->out[0].data = NULL;
    c->out[0].nvalues = -1;
    return 0;
}

static int check_dense(const kiln_call *c) {
    for (int i = 0; i < c->nin; i++)
        if (c->in[i].data && !kiln__ops_dense(&c->in[i]))
            return kiln_set_error(KILN_EUNSUPPORTED, "input %d is not dense LINEAR", i);
    for (int i = 0; i < c->nout; i++)
        if (c->out[i].data && !kiln__ops_dense(&c->out[i]))
            return kiln_set_error(KILN_EUNSUPPORTED, "output %d is not dense LINEAR", i);
    return 0;
}

/* y[p, i] = x[p, i] * a[p % C] + b[p % C] for planes p of `inner` elements. */
typedef struct affine_task {
    const float *x;
    float *y;
    const float *a, *b;
    int64_t C, inner;
} affine_task;

static void affine_planes(void *ud, int64_t lo, int64_t hi) {
    const affine_task *t = ud;
    for (int64_t p = lo; p < hi; p++) {
        float a = t->a[p % t->C], b = t->b[p % t->C];
        const float *x = t->x + p * t->inner;
        float *y = t->y + p * t->inner;
        for (int64_t i = 0; i < t->inner; i++) y[i] = x[i] * a + b;
    }
}

/* ------------------------------------------------------------ BatchNormalization */

static const kiln_attr_def bn_attrs[] = {
    {"epsilon", KILN_ATTR_FLOAT, 0, "1e-5", 0, "added to the variance"},
    {"momentum", KILN_ATTR_FLOAT, 0, "0.9", 0, "running statistics factor (training_mode)"},
    {"spatial", KILN_ATTR_INT, 0, "1", 0, "opset < 9: statistics per channel (1 only)"},
    {"is_test", KILN_ATTR_INT, 0, "0", 0, "opset < 7 (ignored)"},
    {"consumed_inputs", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "opset 1 (ignored)"},
    {"training_mode", KILN_ATTR_INT, 0, "0", 0, "1: normalize with batch statistics"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int bn_shape(kiln_shape_ctx *c) {
    int rc = same_shape(c);
    if (rc) return rc;
    if (c->in[0].ndim < 2)
        return kiln_set_error(KILN_ESHAPE, "BatchNormalization: X must have rank >= 2, found %d",
                              c->in[0].ndim);
    if (kiln_attrs_int(c->attrs, "spatial") == 0)
        return kiln_set_error(KILN_EUNSUPPORTED, "BatchNormalization: spatial=0 is not supported");
    for (int i = 1; i < c->nin && i < 5; i++) /* the kernel reads them as X's type */
        if (c->in[i].dtype != c->in[0].dtype)
            return kiln_set_error(KILN_ETYPE, "BatchNormalization: input %d is %s, X is %s", i,
                                  kiln_dtype_name(c->in[i].dtype), kiln_dtype_name(c->in[0].dtype));
    for (int i = 1; i < c->nout; i++) {
        c->out[i].dtype = c->in[0].dtype;
        c->out[i].ndim = 1;
        c->out[i].dims[0] = c->in[0].dims[1];
    }
    return 0;
}

static int bn_impl_f32(const kiln_call *c) {
    int rc = check_dense(c);
    if (rc) return rc;
    const kiln_tensor *X = &c->in[0];
    int64_t N = X->dims[0], C = X->dims[1], inner = 1;
    for (int i = 2; i < X->ndim; i++) inner *= X->dims[i];
    for (int i = 1; i < 5; i++)
        if (kiln_tensor_numel(&c->in[i]) != C)
            return kiln_set_error(KILN_ESHAPE, "BatchNormalization: input %d has %lld elements, "
                                  "expected %lld (channels)", i,
                                  (long long)kiln_tensor_numel(&c->in[i]), (long long)C);
    const float *sc = c->in[1].data, *bb = c->in[2].data, *mean = c->in[3].data,
                *var = c->in[4].data;
    double eps = kiln_attrs_float(c->attrs, "epsilon");
    int training = kiln_attrs_int(c->attrs, "training_mode") != 0;
    /* per-thread scratch (no GEMM runs inside this op, slot 1 is free) */
    float *ab = kiln__cpu_scratch(1, (size_t)(2 * C + 1));
    if (!ab) return kiln_set_error(KILN_ENOMEM, "BatchNormalization: %lld channels", (long long)C);
    const float *x = X->data;
    for (int64_t ch = 0; ch < C; ch++) {
        double m = mean[ch], v = var[ch];
        if (training) {
            double s = 0, s2 = 0;
            for (int64_t n = 0; n < N; n++) {
                const float *p = x + (n * C + ch) * inner;
                for (int64_t i = 0; i < inner; i++) s += p[i];
            }
            double cnt = (double)(N * inner);
            double bm = cnt > 0 ? s / cnt : 0;
            for (int64_t n = 0; n < N; n++) {
                const float *p = x + (n * C + ch) * inner;
                for (int64_t i = 0; i < inner; i++) s2 += (p[i] - bm) * (p[i] - bm);
            }
            double bv = cnt > 0 ? s2 / cnt : 0;
            double mom = kiln_attrs_float(c->attrs, "momentum");
            if (c->nout > 1 && c->out[1].data)
                ((float *)c->out[1].data)[ch] = (float)(m * mom + bm * (1 - mom));
            if (c->nout > 2 && c->out[2].data)
                ((float *)c->out[2].data)[ch] = (float)(v * mom + bv * (1 - mom));
            m = bm;
            v = bv;
        }
        double a = sc[ch] / sqrt(v + eps);
        ab[ch] = (float)a;
        ab[C + ch] = (float)(bb[ch] - m * a);
    }
    affine_task t = {.x = x, .y = c->out[0].data, .a = ab, .b = ab + C, .C = C, .inner = inner};
    kiln_exec_parallel_for(c->exec, N * C, 1 + 16384 / (inner ? inner : 1), affine_planes, &t);
    return 0;
}
static int bn_impl(const kiln_call *c) { return kiln__ops_as_f32(c, bn_impl_f32); }

/* Epilogue (inference): y = x * a + b with a = scale / sqrt(var + eps),
 * b = B - mean * a per channel, as bn_impl_f32 computes them. */
static int bn_epi(const kiln_epilogue_args *ea, float *x, int64_t n, int64_t ch, int64_t chan_len) {
    const float *sc = ea->in[1].data, *bb = ea->in[2].data, *mean = ea->in[3].data,
                *var = ea->in[4].data;
    double eps = ea->p[0];
    for (int64_t i = 0; i < n;) {
        int64_t c = chan_len ? ch + i / chan_len : ch;
        int64_t run = chan_len ? chan_len - i % chan_len : n - i;
        if (run > n - i) run = n - i;
        double a = sc[c] / sqrt(var[c] + eps);
        float fa = (float)a, fb = (float)(bb[c] - mean[c] * a);
        for (int64_t k = i; k < i + run; k++) x[k] = x[k] * fa + fb;
        i += run;
    }
    return 0;
}
/* Fusable when not training and the four parameters are f32 per channel. */
static int bn_epi_check(kiln_epilogue_args *ea) {
    if (ea->x != 0 || ea->nin != 5 || ea->in[0].ndim < 2 ||
        kiln_attrs_int(ea->attrs, "training_mode") != 0)
        return 1;
    ea->p[0] = kiln_attrs_float(ea->attrs, "epsilon");
    for (int i = 1; i < 5; i++)
        if (!ea->in[i].data || ea->in[i].dtype != KILN_DTYPE_F32 ||
            kiln_tensor_numel(&ea->in[i]) != ea->channels)
            return 1;
    return 0;
}

/* ------------------------------------------------------------ InstanceNormalization */

static const kiln_attr_def in_attrs[] = {
    {"epsilon", KILN_ATTR_FLOAT, 0, "1e-5", 0, "added to the variance"},
    {NULL, 0, 0, NULL, 0, NULL},
};

/* Normalize planes of `inner` elements: y = (x - mean) * rstd * a + b where
 * a/b come per plane (scale_of_plane) or per element (elem_scale). */
typedef struct norm_task {
    const float *x;
    float *y;
    int64_t inner;
    double eps;
    /* per-plane affine: scale[(p / div) % mod] */
    const float *scale, *bias;
    int64_t div, mod;
    /* per-element affine (LayerNormalization): scale[i % se] */
    int elem;
    int64_t se, be;
    /* sub-groups of a plane sharing affine params (GroupNormalization v21):
     * channel = (p % groups) * cpg + i / sub */
    int64_t sub, cpg, groups;
    float *mean_out, *rstd_out;
} norm_task;

/* Sum of x and of (x - m)^2 in double, over 8 independent lanes: the
 * compiler keeps them in vector registers (one ordered accumulator would
 * be a scalar loop). */
enum { NORM_LANES = 8 };
static double norm_sum(const float *x, int64_t n) {
    double a[NORM_LANES] = {0}, s = 0;
    int64_t i = 0;
    for (; i + NORM_LANES <= n; i += NORM_LANES)
        for (int j = 0; j < NORM_LANES; j++) a[j] += x[i + j];
    for (; i < n; i++) s += x[i];
    for (int j = 0; j < NORM_LANES; j++) s += a[j];
    return s;
}
static double norm_sqdev(const float *x, int64_t n, double m) {
    double a[NORM_LANES] = {0}, s = 0;
    int64_t i = 0;
    for (; i + NORM_LANES <= n; i += NORM_LANES)
        for (int j = 0; j < NORM_LANES; j++) a[j] += (x[i + j] - m) * (x[i + j] - m);
    for (; i < n; i++) s += (x[i] - m) * (x[i] - m);
    for (int j = 0; j < NORM_LANES; j++) s += a[j];
    return s;
}

static void norm_planes(void *ud, int64_t lo, int64_t hi) {
    const norm_task *t = ud;
    const int64_t n = t->inner;
    for (int64_t p = lo; p < hi; p++) {
        const float *x = t->x + p * n;
        float *y = t->y + p * n;
        double m = n ? norm_sum(x, n) / (double)n : 0;
        double var = n ? norm_sqdev(x, n, m) / (double)n : 0;
        double rstd = 1.0 / sqrt(var + t->eps);
        if (t->mean_out) t->mean_out[p] = (float)m;
        if (t->rstd_out) t->rstd_out[p] = (float)rstd;
        const float fm = (float)m, fr = (float)rstd;
        if (t->elem && t->se == n && (!t->bias || t->be == n)) { /* LayerNormalization's usual case */
            const float *sc = t->scale, *bi = t->bias;
            if (bi)
                for (int64_t i = 0; i < n; i++) y[i] = (x[i] - fm) * fr * sc[i] + bi[i];
            else
                for (int64_t i = 0; i < n; i++) y[i] = (x[i] - fm) * fr * sc[i];
        } else if (t->elem) {
            for (int64_t i = 0; i < n; i++) {
                float v = (x[i] - fm) * fr * t->scale[t->se == 1 ? 0 : i % t->se];
                if (t->bias) v += t->bias[t->be == 1 ? 0 : i % t->be];
                y[i] = v;
            }
        } else if (t->sub) {
            for (int64_t i = 0; i < n; i++) {
                int64_t ch = (p % t->groups) * t->cpg + i / t->sub;
                y[i] = (x[i] - fm) * fr * t->scale[ch] + t->bias[ch];
            }
        } else {
            int64_t k = (p / t->div) % t->mod;
            float a = fr * t->scale[k], b = t->bias[k] - fm * fr * t->scale[k];
            for (int64_t i = 0; i < n; i++) y[i] = x[i] * a + b;
        }
    }
}

static int in_impl_f32(const kiln_call *c) {
    int rc = check_dense(c);
    if (rc) return rc;
    const kiln_tensor *X = &c->in[0];
    if (X->ndim < 2)
        return kiln_set_error(KILN_ESHAPE, "InstanceNormalization: X must have rank >= 2");
    int64_t N = X->dims[0], C = X->dims[1], inner = 1;
    for (int i = 2; i < X->ndim; i++) inner *= X->dims[i];
    if (kiln_tensor_numel(&c->in[1]) != C || kiln_tensor_numel(&c->in[2]) != C)
        return kiln_set_error(KILN_ESHAPE, "InstanceNormalization: scale and B must have %lld "
                              "elements", (long long)C);
    norm_task t = {.x = X->data, .y = c->out[0].data, .inner = inner,
                   .eps = kiln_attrs_float(c->attrs, "epsilon"), .scale = c->in[1].data,
                   .bias = c->in[2].data, .div = 1, .mod = C};
    kiln_exec_parallel_for(c->exec, N * C, 1, norm_planes, &t);
    return 0;
}
static int in_impl(const kiln_call *c) { return kiln__ops_as_f32(c, in_impl_f32); }

/* ------------------------------------------------------------ GroupNormalization */

static const kiln_attr_def gn_attrs[] = {
    {"epsilon", KILN_ATTR_FLOAT, 0, "1e-5", 0, "added to the variance"},
    {"num_groups", KILN_ATTR_INT, 0, NULL, 1, "number of channel groups"},
    {"stash_type", KILN_ATTR_INT, 0, "1", 0, "precision of statistics (always >= f32)"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int gn_run(const kiln_call *c, int per_channel) {
    int rc = check_dense(c);
    if (rc) return rc;
    const kiln_tensor *X = &c->in[0];
    int64_t G = kiln_attrs_int(c->attrs, "num_groups");
    if (X->ndim < 2) return kiln_set_error(KILN_ESHAPE, "GroupNormalization: X must have rank >= 2");
    int64_t N = X->dims[0], C = X->dims[1], sp = 1;
    for (int i = 2; i < X->ndim; i++) sp *= X->dims[i];
    if (G < 1 || C % G)
        return kiln_set_error(KILN_EATTR, "GroupNormalization: %lld channels not divisible into "
                              "num_groups=%lld", (long long)C, (long long)G);
    int64_t want = per_channel ? C : G;
    if (kiln_tensor_numel(&c->in[1]) != want || kiln_tensor_numel(&c->in[2]) != want)
        return kiln_set_error(KILN_ESHAPE, "GroupNormalization: scale and bias must have %lld "
                              "elements, found %lld and %lld", (long long)want,
                              (long long)kiln_tensor_numel(&c->in[1]),
                              (long long)kiln_tensor_numel(&c->in[2]));
    norm_task t = {.x = X->data, .y = c->out[0].data, .inner = C / G * sp,
                   .eps = kiln_attrs_float(c->attrs, "epsilon"), .scale = c->in[1].data,
                   .bias = c->in[2].data, .div = 1, .mod = G};
    if (per_channel) {
        t.sub = sp;
        t.cpg = C / G;
        t.groups = G;
    }
    kiln_exec_parallel_for(c->exec, N * G, 1, norm_planes, &t);
    return 0;
}
static int gn18_f32(const kiln_call *c) { return gn_run(c, 0); }
static int gn21_f32(const kiln_call *c) { return gn_run(c, 1); }
static int gn18_impl(const kiln_call *c) { return kiln__ops_as_f32(c, gn18_f32); }
static int gn21_impl(const kiln_call *c) { return kiln__ops_as_f32(c, gn21_f32); }

/* ------------------------------------------------------------ LayerNormalization */

static const kiln_attr_def ln_attrs[] = {
    {"axis", KILN_ATTR_INT, 0, "-1", 0, "first normalized axis"},
    {"epsilon", KILN_ATTR_FLOAT, 0, "1e-5", 0, "added to the variance"},
    {"stash_type", KILN_ATTR_INT, 0, "1", 0, "precision of statistics (always >= f32)"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int ln_shape(kiln_shape_ctx *c) {
    int rc = same_shape(c);
    if (rc) return rc;
    const kiln_desc *x = &c->in[0];
    int64_t axis = kiln_attrs_int(c->attrs, "axis");
    if (axis < -x->ndim || axis >= x->ndim)
        return kiln_set_error(KILN_EATTR, "LayerNormalization: axis %lld out of range for rank %d",
                              (long long)axis, x->ndim);
    if (axis < 0) axis += x->ndim;
    for (int o = 1; o < c->nout; o++) {
        kiln_desc *d = &c->out[o];
        d->dtype = KILN_DTYPE_F32;
        if (x->dtype == KILN_DTYPE_F64) d->dtype = KILN_DTYPE_F64;
        d->ndim = x->ndim;
        for (int i = 0; i < x->ndim; i++) d->dims[i] = i < axis ? x->dims[i] : kiln_expr_const(c->x, 1);
    }
    return 0;
}

static int ln_impl_f32(const kiln_call *c) {
    int rc = check_dense(c);
    if (rc) return rc;
    const kiln_tensor *X = &c->in[0];
    int64_t axis = kiln_attrs_int(c->attrs, "axis");
    if (axis < 0) axis += X->ndim;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < X->ndim; i++) {
        if (i < axis) outer *= X->dims[i];
        else inner *= X->dims[i];
    }
    int64_t se = kiln_tensor_numel(&c->in[1]);
    int64_t be = c->nin > 2 && c->in[2].data ? kiln_tensor_numel(&c->in[2]) : 0;
    if ((se != inner && se != 1) || (be && be != inner && be != 1))
        return kiln_set_error(KILN_ESHAPE, "LayerNormalization: Scale (%lld elements) and B (%lld) "
                              "must match the %lld normalized elements", (long long)se,
                              (long long)be, (long long)inner);
    norm_task t = {.x = X->data, .y = c->out[0].data, .inner = inner,
                   .eps = kiln_attrs_float(c->attrs, "epsilon"), .scale = c->in[1].data,
                   .bias = be ? c->in[2].data : NULL, .elem = 1, .se = se, .be = be ? be : 1};
    if (c->nout > 1) t.mean_out = c->out[1].data;
    if (c->nout > 2) t.rstd_out = c->out[2].data;
    kiln_exec_parallel_for(c->exec, outer, 1 + 4096 / (inner ? inner : 1), norm_planes, &t);
    return 0;
}
static int ln_impl(const kiln_call *c) { return kiln__ops_as_f32(c, ln_impl_f32); }

/* ------------------------------------------------------------ LpNormalization */

static const kiln_attr_def lpn_attrs[] = {
    {"axis", KILN_ATTR_INT, 0, "-1", 0, "axis to normalize along"},
    {"p", KILN_ATTR_INT, 0, "2", 0, "1 or 2"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int lpn_impl_f32(const kiln_call *c) {
    int rc = check_dense(c);
    if (rc) return rc;
    const kiln_tensor *X = &c->in[0];
    int64_t axis = kiln_attrs_int(c->attrs, "axis"), p = kiln_attrs_int(c->attrs, "p");
    if (axis < 0) axis += X->ndim;
    if (axis < 0 || axis >= X->ndim)
        return kiln_set_error(KILN_EATTR, "LpNormalization: axis out of range for rank %d", X->ndim);
    if (p != 1 && p != 2)
        return kiln_set_error(KILN_EATTR, "LpNormalization: p must be 1 or 2, found %lld",
                              (long long)p);
    int64_t outer = 1, L = X->dims[axis], inner = 1;
    for (int i = 0; i < axis; i++) outer *= X->dims[i];
    for (int i = (int)axis + 1; i < X->ndim; i++) inner *= X->dims[i];
    const float *x = X->data;
    float *y = c->out[0].data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const float *xs = x + o * L * inner + i;
            float *ys = y + o * L * inner + i;
            double s = 0;
            for (int64_t k = 0; k < L; k++) s += p == 1 ? fabs(xs[k * inner]) : xs[k * inner] * (double)xs[k * inner];
            double nrm = p == 1 ? s : sqrt(s);
            for (int64_t k = 0; k < L; k++) ys[k * inner] = nrm > 0 ? (float)(xs[k * inner] / nrm) : 0.0f;
        }
    return 0;
}
static int lpn_impl(const kiln_call *c) { return kiln__ops_as_f32(c, lpn_impl_f32); }

/* ------------------------------------------------------------ LRN */

static const kiln_attr_def lrn_attrs[] = {
    {"alpha", KILN_ATTR_FLOAT, 0, "0.0001", 0, "scale of the squared sum"},
    {"beta", KILN_ATTR_FLOAT, 0, "0.75", 0, "exponent"},
    {"bias", KILN_ATTR_FLOAT, 0, "1.0", 0, "added before the power"},
    {"size", KILN_ATTR_INT, 0, NULL, 1, "number of channels summed over"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int lrn_impl_f32(const kiln_call *c) {
    int rc = check_dense(c);
    if (rc) return rc;
    const kiln_tensor *X = &c->in[0];
    if (X->ndim < 2) return kiln_set_error(KILN_ESHAPE, "LRN: X must have rank >= 2");
    int64_t size = kiln_attrs_int(c->attrs, "size");
    if (size < 1) return kiln_set_error(KILN_EATTR, "LRN: size must be >= 1, found %lld", (long long)size);
    double alpha = kiln_attrs_float(c->attrs, "alpha"), beta = kiln_attrs_float(c->attrs, "beta");
    double bias = kiln_attrs_float(c->attrs, "bias");
    int64_t N = X->dims[0], C = X->dims[1], sp = 1;
    for (int i = 2; i < X->ndim; i++) sp *= X->dims[i];
    const int64_t lo = (size - 1) / 2, hi = size - 1 - lo; /* floor / ceil of (size-1)/2 */
    const float *x = X->data;
    float *y = c->out[0].data;
    for (int64_t n = 0; n < N; n++)
        for (int64_t ch = 0; ch < C; ch++)
            for (int64_t i = 0; i < sp; i++) {
                double s = 0;
                int64_t c0 = ch - lo < 0 ? 0 : ch - lo, c1 = ch + hi >= C ? C - 1 : ch + hi;
                for (int64_t k = c0; k <= c1; k++) {
                    double v = x[(n * C + k) * sp + i];
                    s += v * v;
                }
                y[(n * C + ch) * sp + i] =
                    (float)(x[(n * C + ch) * sp + i] / pow(bias + alpha / (double)size * s, beta));
            }
    return 0;
}
static int lrn_impl(const kiln_call *c) { return kiln__ops_as_f32(c, lrn_impl_f32); }

static const kiln_quick_op lrn_1 = {
    .ns = "ai.onnx", .name = "LRN", .version = 1,
    .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
    .attrs = lrn_attrs, .shape = same_shape, .impl = lrn_impl,
    .doc = "local response normalization across channels",
};

/* ------------------------------------------------------------ registration */

/* CUDA kernels (norm.cu) take the float types; LayerNormalization keeps
 * the shape function's types (its optional B and f32 statistics change
 * the slot count). */
static const kiln_combo cu_float[] = {{.types = KILN_CU_T_FLOAT}, {0}};
/* The CUDA kernel normalizes with the running statistics only. */
static int bn_cuda_check(const kiln_shape_ctx *c) {
    return kiln_attrs_int(c->attrs, "training_mode") == 0
               ? 0
               : kiln_set_error(KILN_EUNSUPPORTED, "BatchNormalization: training_mode=1 has no CUDA kernel");
}
static int ln_cuda_check(const kiln_shape_ctx *c) {
    return kiln__ops_cuda_types(c, "LayerNormalization", KILN_CU_T_FLOAT);
}

static const kiln_quick_op bn_1 = {
    .ns = "ai.onnx", .name = "BatchNormalization", .version = 1,
    .min_inputs = 5, .max_inputs = 5, .num_outputs = 1,
    .attrs = bn_attrs, .shape = bn_shape, .impl = bn_impl,
    .epilogue = bn_epi, .epilogue_check = bn_epi_check,
    .doc = "batch normalization with running statistics (inference)",
    .cuda_impl = kiln__cu_batchnorm, .cuda_formats = cu_float, .cuda_check = bn_cuda_check,
};
static const kiln_quick_op bn_14 = {
    .ns = "ai.onnx", .name = "BatchNormalization", .version = 14,
    .min_inputs = 5, .max_inputs = 5, .num_outputs = 3,
    .attrs = bn_attrs, .shape = bn_shape, .impl = bn_impl,
    .epilogue = bn_epi, .epilogue_check = bn_epi_check,
    .doc = "batch normalization; training_mode=1 uses batch statistics and updates running ones",
    .cuda_impl = kiln__cu_batchnorm, .cuda_formats = cu_float, .cuda_check = bn_cuda_check,
};
static const kiln_quick_op in_1 = {
    .ns = "ai.onnx", .name = "InstanceNormalization", .version = 1,
    .min_inputs = 3, .max_inputs = 3, .num_outputs = 1,
    .attrs = in_attrs, .shape = same_shape, .impl = in_impl,
    .doc = "per-instance, per-channel normalization",
    .cuda_impl = kiln__cu_instancenorm, .cuda_formats = cu_float,
};
static const kiln_quick_op gn_18 = {
    .ns = "ai.onnx", .name = "GroupNormalization", .version = 18,
    .min_inputs = 3, .max_inputs = 3, .num_outputs = 1,
    .attrs = gn_attrs, .shape = same_shape, .impl = gn18_impl,
    .doc = "group normalization, scale/bias per group",
    .cuda_impl = kiln__cu_groupnorm18, .cuda_formats = cu_float,
};
static const kiln_quick_op gn_21 = {
    .ns = "ai.onnx", .name = "GroupNormalization", .version = 21,
    .min_inputs = 3, .max_inputs = 3, .num_outputs = 1,
    .attrs = gn_attrs, .shape = same_shape, .impl = gn21_impl,
    .doc = "group normalization, scale/bias per channel",
    .cuda_impl = kiln__cu_groupnorm21, .cuda_formats = cu_float,
};
static const kiln_quick_op ln_17 = {
    .ns = "ai.onnx", .name = "LayerNormalization", .version = 17,
    .min_inputs = 2, .max_inputs = 3, .num_outputs = 3,
    .attrs = ln_attrs, .shape = ln_shape, .impl = ln_impl,
    .doc = "layer normalization over dims >= axis (optional Mean, InvStdDev outputs)",
    .cuda_impl = kiln__cu_layernorm, .cuda_formats = NULL, .cuda_check = ln_cuda_check,
};
static const kiln_quick_op lpn_1 = {
    .ns = "ai.onnx", .name = "LpNormalization", .version = 1,
    .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
    .attrs = lpn_attrs, .shape = same_shape, .impl = lpn_impl,
    .doc = "x / ||x||_p along axis",
};

__attribute__((constructor)) static void norm_register(void) {
    /* opsets 1-9 differ only in attributes, covered by the superset schema;
     * 14 adds training_mode and the running-statistics outputs */
    kiln_register_quick_op(&bn_1);
    kiln_register_quick_op(&bn_14);
    kiln_register_quick_op(&in_1);
    kiln_register_quick_op(&gn_18);
    kiln_register_quick_op(&gn_21);
    kiln_register_quick_op(&ln_17);
    kiln_register_quick_op(&lpn_1);
    kiln_register_quick_op(&lrn_1);
}
