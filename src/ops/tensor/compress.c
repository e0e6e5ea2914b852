/*
 * compress.c — Compress: the slices along an axis (or of the flattened
 * input) whose condition is true; the output length N is data-dependent (a
 * size tensor, the hidden output 1).
 */
#include "ops/common/ops_util.h"

static const kiln_attr_def compress_attrs[] = {
    {.name = "axis", .type = KILN_ATTR_INT, .doc = "default: the flattened input"}, {NULL}};

static int compress_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0], *cd = &c->in[1];
    if (cd->dtype != KILN_DTYPE_BOOL || cd->ndim != 1)
        return kiln_set_error(KILN_ETYPE, "Compress: condition must be a 1-D bool tensor, found %s rank %d",
                              kiln_dtype_name(cd->dtype), cd->ndim);
    const kiln_attr_value *av = kiln_attrs_get(c->attrs, "axis");
    const kiln_expr *len;
    int ax = -1;
    if (av && av->present) {
        int r = kiln__ops_axis("Compress", "axis", av->i, x->ndim, &ax);
        if (r) return r;
        len = x->dims[ax];
    } else {
        len = kiln_expr_const(c->x, 1);
        for (int i = 0; i < x->ndim; i++) len = kiln_expr_mul(c->x, len, x->dims[i]);
    }
    const kiln_expr *upper = kiln_expr_min(c->x, len, cd->dims[0]);
    c->out[1].dtype = KILN_DTYPE_I64;
    c->out[1].ndim = 0;
    const kiln_expr *n = kiln_shape_size_tensor(
        c, 1, kiln_expr_ceildiv(c->x, upper, kiln_expr_const(c->x, 2)), upper);
    if (ax < 0) {
        kiln__ops_set_dims(&c->out[0], x->dtype, 1, &n);
    } else {
        kiln__ops_set_dims(&c->out[0], x->dtype, x->ndim, x->dims);
        c->out[0].dims[ax] = n;
    }
    return 0;
}
static int compress_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0], *cd = &c->in[1];
    const kiln_attr_value *av = kiln_attrs_get(c->attrs, "axis");
    int64_t outer = 1, inner = 1, A;
    if (av && av->present) {
        int ax = (int)(av->i < 0 ? av->i + x->ndim : av->i);
        A = x->dims[ax];
        for (int i = 0; i < ax; i++) outer *= x->dims[i];
        for (int i = ax + 1; i < x->ndim; i++) inner *= x->dims[i];
    } else {
        A = kiln_tensor_numel(x);
    }
    int64_t L = kiln_tensor_numel(cd);
    if (L > A)
        return kiln_set_error(KILN_ESHAPE, "Compress: condition has %lld elements, the axis only %lld",
                              (long long)L, (long long)A);
    const uint8_t *m = cd->data;
    int64_t cnt = 0;
    for (int64_t i = 0; i < L; i++) cnt += m[i] != 0;
    size_t es = kiln_dtype_size(x->dtype), row = (size_t)inner * es;
    char *y = c->out[0].data;
    const char *xp = x->data;
    for (int64_t o = 0; o < outer; o++) {
        int64_t k = 0;
        for (int64_t i = 0; i < L; i++)
            if (m[i]) memcpy(y + (o * cnt + k++) * row, xp + (o * A + i) * row, row);
    }
    *(int64_t *)c->out[1].data = cnt;
    return 0;
}
static const kiln_quick_op compress_op = {
    .ns = OPS_NS, .name = "Compress", .version = 9, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 2, .attrs = compress_attrs, .shape = compress_shape, .impl = compress_impl,
    .doc = "slices where condition is true (output 1: their count, a size tensor)",
};
KILN_OP(compress_op)
