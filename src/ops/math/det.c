/*
 * det.c — ONNX Det (11): determinants of square matrices X [*, M, M] -> [*].
 * LU decomposition with partial pivoting, in double, per matrix; f32, f64,
 * f16, bf16.
 */
#include "ops/common/ops_util.h"

#include <math.h>
#include <stdint.h>

static int det_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    kiln_dtype t = x->dtype;
    if (t != KILN_DTYPE_F32 && t != KILN_DTYPE_F64 && t != KILN_DTYPE_F16 && t != KILN_DTYPE_BF16)
        return kiln_set_error(KILN_ETYPE, "Det: expected a float tensor, found %s", kiln_dtype_name(t));
    if (x->ndim < 2)
        return kiln_set_error(KILN_ESHAPE, "Det: expected [*, M, M], found rank %d", x->ndim);
    int64_t a, b;
    if (kiln_expr_is_const(x->dims[x->ndim - 1], &a) && kiln_expr_is_const(x->dims[x->ndim - 2], &b) && a != b)
        return kiln_set_error(KILN_ESHAPE, "Det: matrices must be square, found %lld x %lld", (long long)b,
                              (long long)a);
    c->out[0].dtype = t;
    c->out[0].ndim = x->ndim - 2;
    for (int i = 0; i < x->ndim - 2; i++) c->out[0].dims[i] = x->dims[i];
    return 0;
}

static size_t det_workspace(const kiln_call *c) {
    int64_t m = c->in[0].dims[c->in[0].ndim - 1];
    return (size_t)(m * m) * sizeof(double);
}

static int det_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    int64_t m = x->dims[x->ndim - 1];
    if (x->dims[x->ndim - 2] != m)
        return kiln_set_error(KILN_ESHAPE, "Det: matrices must be square, found %lld x %lld",
                              (long long)x->dims[x->ndim - 2], (long long)m);
    int64_t batch = 1;
    for (int i = 0; i < x->ndim - 2; i++) batch *= x->dims[i];
    double *a = c->workspace;
    for (int64_t b = 0; b < batch; b++) {
        for (int64_t i = 0; i < m * m; i++) a[i] = kiln__ops_get_f64(x->data, x->dtype, b * m * m + i);
        double det = 1;
        for (int64_t k = 0; k < m && det != 0; k++) {
            int64_t p = k;
            for (int64_t i = k + 1; i < m; i++)
                if (fabs(a[i * m + k]) > fabs(a[p * m + k])) p = i;
            if (a[p * m + k] == 0) {
                det = 0;
                break;
            }
            if (p != k) {
                for (int64_t jj = 0; jj < m; jj++) {
                    double t = a[k * m + jj];
                    a[k * m + jj] = a[p * m + jj];
                    a[p * m + jj] = t;
                }
                det = -det;
            }
            det *= a[k * m + k];
            for (int64_t i = k + 1; i < m; i++) {
                double f = a[i * m + k] / a[k * m + k];
                for (int64_t jj = k + 1; jj < m; jj++) a[i * m + jj] -= f * a[k * m + jj];
            }
        }
        kiln__ops_set_f64(c->out[0].data, c->out[0].dtype, b, det);
    }
    return 0;
}

static const kiln_quick_op det_11 = {
    .ns = "ai.onnx", .name = "Det", .version = 11,
    .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
    .shape = det_shape, .impl = det_impl, .workspace = det_workspace,
    .doc = "determinant of square matrices [*, M, M] (LU, partial pivoting)",
};
KILN_OP(det_11)
