/*
 * topk.c — TopK (opsets 1 and 10+): the k largest or smallest elements
 * along an axis, with their indices.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

#include <stdlib.h>

static const kiln_attr_def topk1_attrs[] = {
    {.name = "axis", .type = KILN_ATTR_INT, .def = "-1"},
    {.name = "k", .type = KILN_ATTR_INT, .required = 1},
    {NULL}};
static const kiln_attr_def topk10_attrs[] = {
    {.name = "axis", .type = KILN_ATTR_INT, .def = "-1"},
    {.name = "largest", .type = KILN_ATTR_INT, .def = "1"},
    {.name = "sorted", .type = KILN_ATTR_INT, .def = "1"},
    {NULL}};

static int topk_shape_(kiln_shape_ctx *c, int v10) {
    const kiln_desc *x = &c->in[0];
    int ax, r = kiln__ops_axis("TopK", "axis", kiln_attrs_int(c->attrs, "axis"), x->ndim, &ax);
    if (r) return r;
    if (!kiln__ops_is_num(x->dtype))
        return kiln_set_error(KILN_ETYPE, "TopK: input must be numeric, found %s", kiln_dtype_name(x->dtype));
    const kiln_expr *k;
    if (v10) {
        const kiln_expr *v[KILN_MAX_VALUES];
        if (kiln__ops_value_exprs(c->x, &c->in[1], v) != 1)
            return kiln_set_error(KILN_EUNSUPPORTED, "TopK: input 1 'K' must be a 1-element tensor known "
                                  "at build time");
        k = v[0];
    } else {
        k = kiln_expr_const(c->x, kiln_attrs_int(c->attrs, "k"));
    }
    int64_t kv, dv;
    if (kiln_expr_is_const(k, &kv) && kiln_expr_is_const(x->dims[ax], &dv) && (kv < 0 || kv > dv))
        return kiln_set_error(KILN_EINVAL, "TopK: k = %lld is out of range [0, %lld]", (long long)kv,
                              (long long)dv);
    kiln__ops_set_dims(&c->out[0], x->dtype, x->ndim, x->dims);
    c->out[0].dims[ax] = k;
    kiln__ops_set_dims(&c->out[1], KILN_DTYPE_I64, x->ndim, x->dims);
    c->out[1].dims[ax] = k;
    return 0;
}

typedef struct tk_item { double v; int64_t i; } tk_item;
static int tk_cmp_large(const void *a, const void *b) {
    const tk_item *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}
static int tk_cmp_small(const void *a, const void *b) {
    const tk_item *x = a, *y = b;
    if (x->v != y->v) return x->v < y->v ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static int topk_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    int ax = (int)kiln_attrs_int(c->attrs, "axis");
    if (ax < 0) ax += x->ndim;
    const kiln_attr_value *lv = kiln_attrs_get(c->attrs, "largest");
    int largest = lv && lv->present ? (int)lv->i : 1;
    int64_t K = c->out[0].dims[ax], A = x->dims[ax], outer = 1, inner = 1;
    for (int i = 0; i < ax; i++) outer *= x->dims[i];
    for (int i = ax + 1; i < x->ndim; i++) inner *= x->dims[i];
    if (K > A) return kiln_set_error(KILN_EINVAL, "TopK: k = %lld exceeds the axis size %lld", (long long)K, (long long)A);
    if (K == 0 || outer * inner == 0) return 0;
    tk_item *it = kiln__malloc((size_t)A * sizeof *it);
    double *vals = kiln__malloc((size_t)A * sizeof *vals);
    if (!it || !vals) {
        kiln__free(it), kiln__free(vals);
        return kiln_set_error(KILN_ENOMEM, "TopK: out of memory");
    }
    size_t es = kiln_dtype_size(x->dtype);
    const char *xp = x->data;
    char *yv = c->out[0].data;
    int64_t *yi = c->out[1].data;
    int (*cmp)(const void *, const void *) = largest ? tk_cmp_large : tk_cmp_small;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            if (inner == 1)
                kiln__ops_to_f64(xp + o * A * es, x->dtype, vals, A);
            else
                for (int64_t a = 0; a < A; a++) vals[a] = kiln__ops_get_f64(xp, x->dtype, (o * A + a) * inner + in);
            if (K * 8 < A) {
                /* the best K in a heap whose root is the worst of them; most
                 * candidates lose against the root's value and cost one compare */
                for (int64_t a = 0; a < K; a++) {
                    tk_item v = {vals[a], a};
                    int64_t h = a;
                    while (h > 0 && cmp(&it[(h - 1) / 2], &v) < 0) {
                        it[h] = it[(h - 1) / 2];
                        h = (h - 1) / 2;
                    }
                    it[h] = v;
                }
                for (int64_t a = K; a < A; a++) {
                    double w = vals[a];
                    if (largest ? !(w > it[0].v) : !(w < it[0].v)) continue;
                    tk_item v = {w, a};
                    int64_t h = 0, n = K - 1;
                    for (;;) {
                        int64_t l = 2 * h + 1, r = l + 1, m = h;
                        const tk_item *wv = &v;
                        if (l <= n && cmp(&it[l], wv) > 0) { m = l; wv = &it[l]; }
                        if (r <= n && cmp(&it[r], wv) > 0) { m = r; wv = &it[r]; }
                        if (m == h) break;
                        it[h] = it[m];
                        h = m;
                    }
                    it[h] = v;
                }
                qsort(it, (size_t)K, sizeof *it, cmp);
            } else {
                for (int64_t a = 0; a < A; a++) {
                    it[a].v = vals[a];
                    it[a].i = a;
                }
                qsort(it, (size_t)A, sizeof *it, cmp);
            }
            for (int64_t k = 0; k < K; k++) {
                int64_t dst = (o * K + k) * inner + in;
                memcpy(yv + dst * es, xp + ((o * A + it[k].i) * inner + in) * es, es);
                yi[dst] = it[k].i;
            }
        }
    kiln__free(vals);
    kiln__free(it);
    return 0;
}
static int topk1_shape(kiln_shape_ctx *c) { return topk_shape_(c, 0); }
static int topk10_shape(kiln_shape_ctx *c) { return topk_shape_(c, 1); }
/* CUDA (topk_cuda.c): the kernel's types; TopK-10's K stays on the host. */
#define CU_TOPK_T "FP32|FP16|BF16|FP64|INT32|INT64"
static const kiln_combo cu_topk1[] = {{.types = CU_TOPK_T ", " CU_TOPK_T ", INT64"}, {0}};
static const kiln_combo cu_topk10[] = {{.types = CU_TOPK_T ", INT64, " CU_TOPK_T ", INT64"}, {0}};
static const kiln_quick_op topk1_op = {
    .ns = OPS_NS, .name = "TopK", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 2, .attrs = topk1_attrs, .shape = topk1_shape, .impl = topk_impl,
    .doc = "k largest values and their indices (k attribute)",
    .cuda_impl = kiln__cu_topk, .cuda_formats = cu_topk1,
};
static const kiln_quick_op topk10_op = {
    .ns = OPS_NS, .name = "TopK", .version = 10, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 2, .attrs = topk10_attrs, .shape = topk10_shape, .impl = topk_impl,
    .doc = "k largest/smallest values and their indices (K input)",
    .cuda_impl = kiln__cu_topk, .cuda_formats = cu_topk10, .cuda_host_inputs = 1u << 1,
};
KILN_OP(topk1_op)
KILN_OP(topk10_op)
