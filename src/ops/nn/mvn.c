/*
 * mvn.c — ONNX MeanVarianceNormalization (9, 13).
 *
 *   y = (x - mean) / (sqrt(var) + 1e-9)
 *
 * mean and var (population variance) are taken over `axes` (default
 * [0, 2, 3]: one mean and variance per channel of an NCHW tensor).  The
 * epsilon is added to the standard deviation, as in the ONNX function
 * body of the op (Div(X - EX, Sqrt(E(X^2) - EX^2) + 1e-9)).  Statistics are
 * accumulated in double in two passes (mean, then squared deviations),
 * which is exact where E(X^2) - EX^2 would cancel.
 *
 * Elements of one group (equal indices along the kept axes) are found by
 * an odometer over the tensor in memory order: each dim has a stride in
 * "group space" (0 for reduced axes), so the three passes stream the input
 * once each, whatever the axes.
 */
#include "ops/common/ops_util.h"

#include <math.h>
#include <string.h>

#define MVN_EPS 1e-9

static const kiln_attr_def mvn_attrs[] = {
    {"axes", KILN_ATTR_ARRAY, KILN_DTYPE_I64, "[0, 2, 3]", 0,
     "axes to take mean and variance over (negative counts from the end)"},
    {NULL, 0, 0, NULL, 0, NULL},
};

/* Reduced-axis mask from the attribute; message names the bad axis. */
static int mvn_axes(const kiln_attrs *a, int ndim, int *reduced) {
    const int64_t *v;
    int64_t n = kiln_attrs_ints(a, "axes", &v);
    for (int d = 0; d < ndim; d++) reduced[d] = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t ax = v[i] < 0 ? v[i] + ndim : v[i];
        if (ax < 0 || ax >= ndim)
            return kiln_set_error(KILN_EATTR,
                                  "MeanVarianceNormalization: axes[%lld] = %lld is out of range "
                                  "for an input of rank %d (default axes are [0, 2, 3])",
                                  (long long)i, (long long)v[i], ndim);
        if (reduced[ax])
            return kiln_set_error(KILN_EATTR,
                                  "MeanVarianceNormalization: axis %lld appears twice in axes",
                                  (long long)ax);
        reduced[ax] = 1;
    }
    return 0;
}

static int mvn_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    if (!kiln__ops_is_float(x->dtype))
        return kiln_set_error(KILN_ETYPE,
                              "MeanVarianceNormalization: X must be f16, bf16, f32 or f64, found %s",
                              kiln_dtype_name(x->dtype));
    int reduced[KILN_MAX_DIMS];
    int rc = mvn_axes(c->attrs, x->ndim, reduced);
    if (rc) return rc;
    c->out[0] = *x;
    c->out[0].data = NULL;
    c->out[0].nvalues = -1;
    return 0;
}

/* Group geometry: number of groups and each dim's stride in group space. */
typedef struct mvn_geo {
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    int64_t gstride[KILN_MAX_DIMS];
    int64_t ngroups;
} mvn_geo;

static void mvn_geometry(const kiln_tensor *x, const int *reduced, mvn_geo *g) {
    g->ndim = x->ndim;
    g->ngroups = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        g->dims[d] = x->dims[d];
        g->gstride[d] = reduced[d] ? 0 : g->ngroups;
        if (!reduced[d]) g->ngroups *= x->dims[d];
    }
}

/* Odometer step: advance idx (memory order) and return the new group. */
static inline int64_t mvn_next(const mvn_geo *g, int64_t *idx, int64_t grp) {
    for (int d = g->ndim - 1; d >= 0; d--) {
        if (++idx[d] < g->dims[d]) return grp + g->gstride[d];
        grp -= g->gstride[d] * (idx[d] - 1);
        idx[d] = 0;
    }
    return 0;
}

static int mvn_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    if (!kiln__ops_dense(x) || !kiln__ops_dense(y))
        return kiln_set_error(KILN_EUNSUPPORTED,
                              "MeanVarianceNormalization: strided tensors are not supported");
    int reduced[KILN_MAX_DIMS];
    int rc = mvn_axes(c->attrs, x->ndim, reduced);
    if (rc) return rc;
    mvn_geo g;
    mvn_geometry(x, reduced, &g);
    int64_t n = kiln_tensor_numel(x);
    if (n == 0) return 0;
    double *mean = c->workspace, *dev = mean + g.ngroups;
    memset(mean, 0, (size_t)(2 * g.ngroups) * sizeof *mean);
    const double count = (double)(n / g.ngroups);
    int64_t idx[KILN_MAX_DIMS] = {0}, grp = 0;
    for (int64_t i = 0; i < n; i++, grp = mvn_next(&g, idx, grp))
        mean[grp] += kiln__ops_get_f64(x->data, x->dtype, i);
    for (int64_t k = 0; k < g.ngroups; k++) mean[k] /= count;
    grp = 0;
    for (int64_t i = 0; i < n; i++, grp = mvn_next(&g, idx, grp)) {
        double d = kiln__ops_get_f64(x->data, x->dtype, i) - mean[grp];
        dev[grp] += d * d;
    }
    /* dev becomes the reciprocal of the denominator */
    for (int64_t k = 0; k < g.ngroups; k++) dev[k] = 1.0 / (sqrt(dev[k] / count) + MVN_EPS);
    grp = 0;
    if (y->dtype == KILN_DTYPE_F32) {
        float *yf = y->data;
        for (int64_t i = 0; i < n; i++, grp = mvn_next(&g, idx, grp))
            yf[i] = (float)((kiln__ops_get_f64(x->data, x->dtype, i) - mean[grp]) * dev[grp]);
    } else {
        for (int64_t i = 0; i < n; i++, grp = mvn_next(&g, idx, grp))
            kiln__ops_set_f64(y->data, y->dtype, i,
                            (kiln__ops_get_f64(x->data, x->dtype, i) - mean[grp]) * dev[grp]);
    }
    return 0;
}

static size_t mvn_ws(const kiln_call *c) {
    int reduced[KILN_MAX_DIMS];
    if (mvn_axes(c->attrs, c->in[0].ndim, reduced)) return 0;
    mvn_geo g;
    mvn_geometry(&c->in[0], reduced, &g);
    return (size_t)(2 * g.ngroups) * sizeof(double);
}

static const kiln_quick_op mvn_9 = {
    .ns = "ai.onnx", .name = "MeanVarianceNormalization", .version = 9,
    .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
    .attrs = mvn_attrs, .shape = mvn_shape, .impl = mvn_impl, .workspace = mvn_ws,
    .doc = "(x - mean) / (std + 1e-9) over axes (default [0, 2, 3])",
};
KILN_OP(mvn_9)

/* 13: bfloat16 added to the types (already accepted above). */
static const kiln_quick_op mvn_13 = {
    .ns = "ai.onnx", .name = "MeanVarianceNormalization", .version = 13,
    .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
    .attrs = mvn_attrs, .shape = mvn_shape, .impl = mvn_impl, .workspace = mvn_ws,
    .doc = "(x - mean) / (std + 1e-9) over axes (default [0, 2, 3])",
};
KILN_OP(mvn_13)
