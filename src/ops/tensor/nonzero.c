/*
 * nonzero.c — NonZero: the indices of the non-zero elements, [rank, N] with
 * N data-dependent (a size tensor, the hidden output 1).
 */
#include "ops/common/ops_util.h"

static int nonzero_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    int r = kiln__ops_check_type(c, "NonZero", 0, kiln__ops_is_any, "a numeric or bool type");
    if (r) return r;
    const kiln_expr *numel = kiln_expr_const(c->x, 1);
    for (int i = 0; i < x->ndim; i++) numel = kiln_expr_mul(c->x, numel, x->dims[i]);
    c->out[1].dtype = KILN_DTYPE_I64;
    c->out[1].ndim = 0;
    const kiln_expr *n = kiln_shape_size_tensor(
        c, 1, kiln_expr_ceildiv(c->x, numel, kiln_expr_const(c->x, 2)), numel);
    const kiln_expr *d[2] = {kiln_expr_const(c->x, x->ndim), n};
    kiln__ops_set_dims(&c->out[0], KILN_DTYPE_I64, 2, d);
    return 0;
}
static int nonzero_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    int64_t n = kiln_tensor_numel(x), cnt = 0;
    size_t es = kiln_dtype_size(x->dtype);
    const unsigned char *p = x->data;
    static const unsigned char zero[16];
    /* a float -0.0 is zero too */
    int is_f = kiln__ops_is_float(x->dtype);
    for (int64_t i = 0; i < n; i++) {
        int nz = is_f ? kiln__ops_get_f64(p, x->dtype, i) != 0 : memcmp(p + i * es, zero, es) != 0;
        cnt += nz;
    }
    int64_t *y = c->out[0].data;
    int r = x->ndim;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        int nz = is_f ? kiln__ops_get_f64(p, x->dtype, i) != 0 : memcmp(p + i * es, zero, es) != 0;
        if (!nz) continue;
        int64_t rem = i;
        for (int a = r - 1; a >= 0; a--) {
            y[a * cnt + k] = rem % x->dims[a];
            rem /= x->dims[a];
        }
        k++;
    }
    *(int64_t *)c->out[1].data = cnt;
    return 0;
}
static const kiln_quick_op nonzero_op = {
    .ns = OPS_NS, .name = "NonZero", .version = 9, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 2, .shape = nonzero_shape, .impl = nonzero_impl,
    .doc = "indices of non-zero elements, [rank, N] (output 1: N, a size tensor)",
};
KILN_OP(nonzero_op)
