/*
 * loss.c — ONNX NegativeLogLikelihoodLoss (12, 13, 22) and
 * SoftmaxCrossEntropyLoss (12, 13).
 *
 * Inference-time losses, as exported by training frameworks:
 *   NLL:  loss[n, d] = -input[n, target[n, d], d] * weight[target[n, d]]
 *         (0, with weight 0, where target == ignore_index)
 *   SCE:  log_prob = LogSoftmax(scores, axis 1); loss = NLL(log_prob, ...)
 *         with the optional second output log_prob.
 * reduction "none" keeps [N, d1..dk]; "sum" adds up; "mean" divides the sum
 * by the sum of the weights used (the count of non-ignored targets without
 * weights).  Computed in double for every float type; targets out of range
 * are an error naming the element.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static const kiln_attr_def ls_attrs[] = {
    {"ignore_index", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, NULL, 0, "target value that contributes nothing"},
    {"reduction", KILN_ATTR_STRING, KILN_DTYPE_UNDEFINED, "mean", 0, "none, sum or mean"},
    {NULL, 0, 0, NULL, 0, NULL},
};

/* 0 none, 1 sum, 2 mean, -1 bad. */
static int ls_reduction(const kiln_attrs *a) {
    const char *r = kiln_attrs_string(a, "reduction");
    if (!r || !strcmp(r, "mean")) return 2;
    if (!strcmp(r, "sum")) return 1;
    if (!strcmp(r, "none")) return 0;
    return -1;
}

static int ls_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0], *t = &c->in[1];
    const char *op = c->nout == 2 ? "SoftmaxCrossEntropyLoss" : "NegativeLogLikelihoodLoss";
    int red = ls_reduction(c->attrs);
    if (red < 0)
        return kiln_set_error(KILN_EATTR, "%s: reduction '%s' (expected none, sum or mean)", op,
                              kiln_attrs_string(c->attrs, "reduction"));
    if (!kiln__ops_is_float(x->dtype))
        return kiln_set_error(KILN_ETYPE, "%s: input 0 must be a float tensor, found %s", op,
                              kiln_dtype_name(x->dtype));
    if (t->dtype != KILN_DTYPE_I32 && t->dtype != KILN_DTYPE_I64)
        return kiln_set_error(KILN_ETYPE, "%s: target must be int32 or int64, found %s", op,
                              kiln_dtype_name(t->dtype));
    if (x->ndim < 2 || t->ndim != x->ndim - 1)
        return kiln_set_error(KILN_ESHAPE, "%s: expected input [N, C, d1..dk] and target [N, d1..dk], "
                              "found ranks %d and %d", op, x->ndim, t->ndim);
    if (c->nin > 2 && c->in[2].dtype != KILN_DTYPE_UNDEFINED &&
        (c->in[2].ndim != 1 || c->in[2].dtype != x->dtype))
        return kiln_set_error(KILN_ESHAPE, "%s: weight must be a 1-D %s tensor [C]", op,
                              kiln_dtype_name(x->dtype));
    c->out[0].dtype = x->dtype;
    if (red == 0) {
        c->out[0].ndim = x->ndim - 1;
        c->out[0].dims[0] = x->dims[0];
        for (int i = 2; i < x->ndim; i++) c->out[0].dims[i - 1] = x->dims[i];
    } else {
        c->out[0].ndim = 0;
    }
    if (c->nout == 2) {
        c->out[1].dtype = x->dtype;
        c->out[1].ndim = x->ndim;
        for (int i = 0; i < x->ndim; i++) c->out[1].dims[i] = x->dims[i];
    }
    return 0;
}

static size_t ls_workspace(const kiln_call *c) {
    return (size_t)kiln_tensor_numel(&c->in[0]) * sizeof(double);
}

/* NLL over logp [N, C, D] (double). */
static int ls_nll(const kiln_call *c, const char *op, const double *logp, int64_t N, int64_t C,
                  int64_t D) {
    const kiln_tensor *tg = &c->in[1];
    const kiln_tensor *w = c->nin > 2 && c->in[2].data && c->in[2].dtype != KILN_DTYPE_UNDEFINED ? &c->in[2] : NULL;
    const kiln_attr_value *ii = kiln_attrs_get(c->attrs, "ignore_index");
    int has_ii = ii && ii->present;
    int red = ls_reduction(c->attrs);
    kiln_tensor *out = &c->out[0];
    double sum = 0, wsum = 0;
    for (int64_t n = 0; n < N; n++)
        for (int64_t d = 0; d < D; d++) {
            int64_t t = kiln__ops_get_i64(tg->data, tg->dtype, n * D + d);
            double loss = 0, wt = 0;
            if (!(has_ii && t == ii->i)) {
                if (t < 0 || t >= C)
                    return kiln_set_error(KILN_EINVAL, "%s: target element %lld is %lld, outside [0, %lld)",
                                          op, (long long)(n * D + d), (long long)t, (long long)C);
                wt = w ? kiln__ops_get_f64(w->data, w->dtype, t) : 1.0;
                loss = -logp[(n * C + t) * D + d] * wt;
            }
            if (red == 0) kiln__ops_set_f64(out->data, out->dtype, n * D + d, loss);
            sum += loss;
            wsum += wt;
        }
    if (red == 1) kiln__ops_set_f64(out->data, out->dtype, 0, sum);
    else if (red == 2) kiln__ops_set_f64(out->data, out->dtype, 0, sum / wsum);
    return 0;
}

static void ls_dims(const kiln_tensor *x, int64_t *N, int64_t *C, int64_t *D) {
    *N = x->dims[0];
    *C = x->dims[1];
    *D = 1;
    for (int i = 2; i < x->ndim; i++) *D *= x->dims[i];
}

static int nll_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    int64_t N, C, D, n = kiln_tensor_numel(x);
    ls_dims(x, &N, &C, &D);
    double *lp = c->workspace;
    for (int64_t i = 0; i < n; i++) lp[i] = kiln__ops_get_f64(x->data, x->dtype, i);
    return ls_nll(c, "NegativeLogLikelihoodLoss", lp, N, C, D);
}

static int sce_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    int64_t N, C, D;
    ls_dims(x, &N, &C, &D);
    double *lp = c->workspace;
    for (int64_t n = 0; n < N; n++)
        for (int64_t d = 0; d < D; d++) {
            double mx = -INFINITY, s = 0;
            for (int64_t k = 0; k < C; k++) {
                double v = kiln__ops_get_f64(x->data, x->dtype, (n * C + k) * D + d);
                if (v > mx) mx = v;
            }
            for (int64_t k = 0; k < C; k++) s += exp(kiln__ops_get_f64(x->data, x->dtype, (n * C + k) * D + d) - mx);
            double ls = log(s);
            for (int64_t k = 0; k < C; k++) {
                int64_t i = (n * C + k) * D + d;
                lp[i] = kiln__ops_get_f64(x->data, x->dtype, i) - mx - ls;
            }
        }
    if (c->nout > 1 && c->out[1].data)
        for (int64_t i = 0, m = kiln_tensor_numel(x); i < m; i++) kiln__ops_set_f64(c->out[1].data, c->out[1].dtype, i, lp[i]);
    return ls_nll(c, "SoftmaxCrossEntropyLoss", lp, N, C, D);
}

/* CUDA (loss_cuda.c): every float type (no cuda_formats: the slot count
 * varies; the check names the types the kernels take). */
static int loss_cuda_check(const kiln_shape_ctx *c) {
    return kiln__ops_cuda_types(c, "loss", KILN_CU_T_FLOAT "|FP64");
}
#define LOSS_OP(var, nm, ver, nout, fn, cu, dc)                                             \
    static const kiln_quick_op var = {                                                      \
        .ns = "ai.onnx", .name = nm, .version = ver,                                        \
        .min_inputs = 2, .max_inputs = 3, .num_outputs = nout,                              \
        .attrs = ls_attrs, .shape = ls_shape, .impl = fn, .workspace = ls_workspace,        \
        .doc = dc, .cuda_impl = cu, .cuda_workspace = kiln__cu_loss_workspace,              \
        .cuda_check = loss_cuda_check,                                                      \
    };                                                                                      \
    KILN_OP(var)

LOSS_OP(nll_12, "NegativeLogLikelihoodLoss", 12, 1, nll_impl, kiln__cu_nll_loss, "negative log likelihood loss")
LOSS_OP(nll_13, "NegativeLogLikelihoodLoss", 13, 1, nll_impl, kiln__cu_nll_loss, "negative log likelihood loss")
LOSS_OP(nll_22, "NegativeLogLikelihoodLoss", 22, 1, nll_impl, kiln__cu_nll_loss, "negative log likelihood loss")
LOSS_OP(sce_12, "SoftmaxCrossEntropyLoss", 12, 2, sce_impl, kiln__cu_sce_loss, "softmax cross-entropy loss (+ log_prob)")
LOSS_OP(sce_13, "SoftmaxCrossEntropyLoss", 13, 2, sce_impl, kiln__cu_sce_loss, "softmax cross-entropy loss (+ log_prob)")
