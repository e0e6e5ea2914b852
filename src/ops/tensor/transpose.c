/*
 * transpose.c — Transpose: a permutation of the axes (default: reversed),
 * as one strided copy.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

static const kiln_attr_def transpose_attrs[] = {
    {.name = "perm", .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .doc = "default: reversed"},
    {NULL}};
static int get_perm(const kiln_attrs *a, int r, int *perm) {
    const int64_t *v;
    int64_t n = kiln_attrs_ints(a, "perm", &v);
    if (n < 0) {
        for (int i = 0; i < r; i++) perm[i] = r - 1 - i;
        return 0;
    }
    if (n != r)
        return kiln_set_error(KILN_EATTR, "Transpose: perm has %lld entries, expected the rank %d",
                              (long long)n, r);
    int seen[KILN_MAX_DIMS] = {0};
    for (int i = 0; i < r; i++) {
        int64_t p = v[i] < 0 ? v[i] + r : v[i];
        if (p < 0 || p >= r || seen[p])
            return kiln_set_error(KILN_EATTR, "Transpose: perm is not a permutation of 0..%d", r - 1);
        seen[p] = 1;
        perm[i] = (int)p;
    }
    return 0;
}
static int transpose_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    int perm[KILN_MAX_DIMS];
    int r = kiln__ops_check_any(c, "Transpose", 0);
    if (r || (r = get_perm(c->attrs, x->ndim, perm))) return r;
    const kiln_expr *d[KILN_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) d[i] = x->dims[perm[i]];
    kiln__ops_set_dims(&c->out[0], x->dtype, x->ndim, d);
    return 0;
}
static int transpose_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    int perm[KILN_MAX_DIMS];
    int r = get_perm(c->attrs, x->ndim, perm);
    if (r) return r;
    int64_t xs[KILN_MAX_DIMS], st[KILN_MAX_DIMS], s = 1;
    for (int i = x->ndim - 1; i >= 0; i--) {
        xs[i] = s;
        s *= x->dims[i];
    }
    for (int i = 0; i < x->ndim; i++) st[i] = xs[perm[i]];
    kiln__ops_strided_copy(c->exec, c->out[0].data, x->data, kiln_dtype_size(x->dtype), x->ndim,
                            c->out[0].dims, st);
    return 0;
}
static const kiln_combo cu_any[] = {{.types = KILN_CU_T_ANY}, {0}};

static const kiln_quick_op transpose_op = {
    .ns = OPS_NS, .name = "Transpose", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = transpose_attrs, .shape = transpose_shape, .impl = transpose_impl,
    .doc = "permute dims",
    .cuda_impl = kiln__cu_transpose, .cuda_formats = cu_any,
};
KILN_OP(transpose_op)
