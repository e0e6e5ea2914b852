/*
 * unique.c — Unique: the unique elements (or slices along an axis), sorted
 * or in order of first occurrence, with indices, inverse indices and counts;
 * the count U is data-dependent (a size tensor, output 4).
 */
#include "ops/common/ops_util.h"

#include <stdlib.h>

static const kiln_attr_def unique_attrs[] = {
    {.name = "axis", .type = KILN_ATTR_INT, .doc = "default: the flattened input"},
    {.name = "sorted", .type = KILN_ATTR_INT, .def = "1"},
    {NULL}};

static int unique_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    if (!kiln__ops_is_any(x->dtype))
        return kiln_set_error(KILN_ETYPE, "Unique: type %s is not supported", kiln_dtype_name(x->dtype));
    const kiln_attr_value *av = kiln_attrs_get(c->attrs, "axis");
    const kiln_expr *len;
    int ax = -1;
    if (av && av->present) {
        int r = kiln__ops_axis("Unique", "axis", av->i, x->ndim, &ax);
        if (r) return r;
        len = x->dims[ax];
    } else {
        len = kiln_expr_const(c->x, 1);
        for (int i = 0; i < x->ndim; i++) len = kiln_expr_mul(c->x, len, x->dims[i]);
    }
    c->out[4].dtype = KILN_DTYPE_I64;
    c->out[4].ndim = 0;
    const kiln_expr *u = kiln_shape_size_tensor(c, 4, kiln_expr_ceildiv(c->x, len, kiln_expr_const(c->x, 2)), len);
    if (ax < 0) kiln__ops_set_dims(&c->out[0], x->dtype, 1, &u);
    else {
        kiln__ops_set_dims(&c->out[0], x->dtype, x->ndim, x->dims);
        c->out[0].dims[ax] = u;
    }
    kiln__ops_set_dims(&c->out[1], KILN_DTYPE_I64, 1, &u);
    kiln__ops_set_dims(&c->out[2], KILN_DTYPE_I64, 1, &len);
    kiln__ops_set_dims(&c->out[3], KILN_DTYPE_I64, 1, &u);
    return 0;
}

typedef struct uq_ctx { const double *v; int64_t A, outer, inner; } uq_ctx;
static _Thread_local const uq_ctx *uq_cur;

static int uq_cmp_items(const uq_ctx *q, int64_t a, int64_t b) {
    for (int64_t o = 0; o < q->outer; o++)
        for (int64_t i = 0; i < q->inner; i++) {
            double x = q->v[(o * q->A + a) * q->inner + i], y = q->v[(o * q->A + b) * q->inner + i];
            if (x != y) return x < y ? -1 : 1;
        }
    return 0;
}
static int uq_cmp(const void *pa, const void *pb) {
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    int r = uq_cmp_items(uq_cur, a, b);
    return r ? r : (a < b ? -1 : a > b);
}
static int uq_cmp_first(const void *pa, const void *pb) { /* groups by first occurrence */
    const int64_t *a = pa, *b = pb;
    return a[0] < b[0] ? -1 : a[0] > b[0];
}

static int unique_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    const kiln_attr_value *av = kiln_attrs_get(c->attrs, "axis");
    int sorted = (int)kiln_attrs_int(c->attrs, "sorted");
    uq_ctx q = {NULL, kiln_tensor_numel(x), 1, 1};
    if (av && av->present) {
        int ax = (int)(av->i < 0 ? av->i + x->ndim : av->i);
        q.A = x->dims[ax];
        q.outer = q.inner = 1;
        for (int i = 0; i < ax; i++) q.outer *= x->dims[i];
        for (int i = ax + 1; i < x->ndim; i++) q.inner *= x->dims[i];
    }
    int64_t n = kiln_tensor_numel(x), A = q.A;
    double *v = kiln__malloc((size_t)(n ? n : 1) * sizeof *v);
    int64_t *ord = kiln__malloc((size_t)(A ? A : 1) * sizeof *ord);
    int64_t *grp = kiln__malloc((size_t)(A ? A : 1) * 3 * sizeof *grp); /* first, count, rank */
    if (!v || !ord || !grp) {
        kiln__free(v), kiln__free(ord), kiln__free(grp);
        return kiln_set_error(KILN_ENOMEM, "Unique: out of memory");
    }
    kiln__ops_to_f64(x->data, x->dtype, v, n);
    q.v = v;
    for (int64_t i = 0; i < A; i++) ord[i] = i;
    uq_cur = &q;
    qsort(ord, (size_t)A, sizeof *ord, uq_cmp);
    /* groups in sorted order: (first index, count, sorted group id); inv
     * first holds each item's sorted group id */
    int64_t U = 0;
    int64_t *inv = c->out[2].data;
    for (int64_t i = 0; i < A; i++) {
        if (i == 0 || uq_cmp_items(&q, ord[i - 1], ord[i]) != 0) {
            grp[3 * U] = ord[i];
            grp[3 * U + 1] = 0;
            grp[3 * U + 2] = U;
            U++;
        }
        grp[3 * (U - 1) + 1]++;
        inv[ord[i]] = U - 1;
    }
    if (!sorted) qsort(grp, (size_t)U, 3 * sizeof *grp, uq_cmp_first);
    int64_t *pos = ord; /* ord is done: pos[sorted group id] = output position */
    for (int64_t u = 0; u < U; u++) pos[grp[3 * u + 2]] = u;
    for (int64_t i = 0; i < A; i++) inv[i] = pos[inv[i]];
    size_t es = kiln_dtype_size(x->dtype), row = (size_t)q.inner * es;
    char *y = c->out[0].data;
    int64_t *yi = c->out[1].data, *yc = c->out[3].data;
    for (int64_t u = 0; u < U; u++) {
        yi[u] = grp[3 * u];
        yc[u] = grp[3 * u + 1];
        for (int64_t o = 0; o < q.outer; o++)
            memcpy(y + (o * U + u) * row, (const char *)x->data + (o * A + grp[3 * u]) * row, row);
    }
    *(int64_t *)c->out[4].data = U;
    kiln__free(v), kiln__free(ord), kiln__free(grp);
    return 0;
}
static const kiln_quick_op unique_op = {
    .ns = OPS_NS, .name = "Unique", .version = 11, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 5, .attrs = unique_attrs, .shape = unique_shape, .impl = unique_impl,
    .doc = "unique elements or slices (output 4: their count, a size tensor)",
};
KILN_OP(unique_op)
