/*
 * gather_scatter.c — Gather, GatherElements, GatherND, ScatterElements (and
 * the deprecated Scatter), ScatterND.
 *
 * Indices are checked at run time: an index out of range is an error that
 * names the op, the position and the bound, never a wild read or write.
 * Copies are element-size generic; scatter reductions go through double, or
 * int64 for integer types.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

#include <math.h>
#include <stdlib.h>

/* Indices as int64 (a borrowed pointer for I64, else a converted copy in *tmp). */
static const int64_t *idx64(const kiln_tensor *t, int64_t **tmp) {
    *tmp = NULL;
    if (t->dtype == KILN_DTYPE_I64) return t->data;
    int64_t n = kiln_tensor_numel(t);
    *tmp = kiln__malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!*tmp) return NULL;
    kiln__ops_to_i64(t->data, t->dtype, *tmp, n);
    return *tmp;
}

static int idx_type(const kiln_shape_ctx *c, const char *op, int i) {
    kiln_dtype t = c->in[i].dtype;
    if (t != KILN_DTYPE_I32 && t != KILN_DTYPE_I64)
        return kiln_set_error(KILN_ETYPE, "%s: input %d (indices) must be int32 or int64, found %s", op,
                              i, kiln_dtype_name(t));
    return 0;
}

static int oob(const char *op, int64_t at, int64_t v, int64_t bound) {
    return kiln_set_error(KILN_EINVAL, "%s: index %lld at position %lld is out of range [%lld, %lld)",
                          op, (long long)v, (long long)at, (long long)-bound, (long long)bound);
}

static const kiln_attr_def axis0_attrs[] = {{.name = "axis", .type = KILN_ATTR_INT, .def = "0"}, {NULL}};

/* ---- Gather ----------------------------------------------------------------------- */

static int gather_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0], *ix = &c->in[1];
    int ax, r = kiln__ops_axis("Gather", "axis", kiln_attrs_int(c->attrs, "axis"), x->ndim, &ax);
    if (r || (r = idx_type(c, "Gather", 1))) return r;
    if (x->ndim == 0) return kiln_set_error(KILN_ESHAPE, "Gather: data must have rank >= 1");
    int nd = x->ndim - 1 + ix->ndim;
    if (nd > KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "Gather: output rank %d exceeds %d", nd, KILN_MAX_DIMS);
    const kiln_expr *d[KILN_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < ax; i++) d[k++] = x->dims[i];
    for (int i = 0; i < ix->ndim; i++) d[k++] = ix->dims[i];
    for (int i = ax + 1; i < x->ndim; i++) d[k++] = x->dims[i];
    kiln__ops_set_dims(&c->out[0], x->dtype, nd, d);
    /* values: picking elements of a small 1-D integer tensor (Shape -> Gather) */
    const kiln_expr *xv[KILN_MAX_VALUES];
    int64_t iv[KILN_MAX_VALUES];
    int nx, ni;
    if (x->ndim == 1 && (nx = kiln__ops_value_exprs(c->x, x, xv)) >= 0 &&
        (ni = (int)kiln__ops_const_ints(ix, iv, KILN_MAX_VALUES)) >= 0) {
        for (int i = 0; i < ni; i++) {
            int64_t j = iv[i] < 0 ? iv[i] + nx : iv[i];
            if (j < 0 || j >= nx) return oob("Gather", i, iv[i], nx);
            c->out[0].values[i] = xv[j];
        }
        c->out[0].nvalues = ni;
    }
    return 0;
}

static int gather_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0], *ix = &c->in[1];
    int ax = (int)kiln_attrs_int(c->attrs, "axis");
    if (ax < 0) ax += x->ndim;
    int64_t outer = 1, inner = 1, A = x->dims[ax], ni = kiln_tensor_numel(ix);
    for (int i = 0; i < ax; i++) outer *= x->dims[i];
    for (int i = ax + 1; i < x->ndim; i++) inner *= x->dims[i];
    size_t es = kiln_dtype_size(x->dtype), row = (size_t)inner * es;
    int64_t *tmp;
    const int64_t *idx = idx64(ix, &tmp);
    if (!idx) return kiln_set_error(KILN_ENOMEM, "Gather: out of memory");
    int rc = 0;
    for (int64_t i = 0; i < ni; i++)
        if (idx[i] < -A || idx[i] >= A) { rc = oob("Gather", i, idx[i], A); break; }
    if (!rc) {
        const char *src = x->data;
        char *dst = c->out[0].data;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < ni; i++) {
                int64_t j = idx[i] < 0 ? idx[i] + A : idx[i];
                memcpy(dst + (o * ni + i) * row, src + (o * A + j) * row, row);
            }
    }
    kiln__free(tmp);
    return rc;
}
static const kiln_combo cu_gather[] = {{.types = KILN_CU_T_ANY ", INT32*INT64, " KILN_CU_T_ANY}, {0}};

static const kiln_quick_op gather_op = {
    .ns = OPS_NS, .name = "Gather", .version = 1, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .attrs = axis0_attrs, .shape = gather_shape, .impl = gather_impl,
    .doc = "take slices along axis by index",
    .cuda_impl = kiln__cu_gather, .cuda_formats = cu_gather,
};
KILN_OP(gather_op)

/* ---- GatherElements / ScatterElements ------------------------------------------------- */

static int gel_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0], *ix = &c->in[1];
    int ax, r = kiln__ops_axis("GatherElements", "axis", kiln_attrs_int(c->attrs, "axis"), x->ndim, &ax);
    if (r || (r = idx_type(c, "GatherElements", 1))) return r;
    if (ix->ndim != x->ndim)
        return kiln_set_error(KILN_ESHAPE, "GatherElements: indices rank %d differs from data rank %d",
                              ix->ndim, x->ndim);
    kiln__ops_set_dims(&c->out[0], x->dtype, ix->ndim, ix->dims);
    return 0;
}

/* Walk over the positions of an indices tensor (dims id) in row-major
 * order, keeping the data offset of the same coordinates with the axis
 * coordinate left out (base); the element is at base + j * xs[ax]. */
typedef struct el_walk {
    int nd, ax;
    int64_t id[KILN_MAX_DIMS], xs[KILN_MAX_DIMS], co[KILN_MAX_DIMS], base;
} el_walk;
static void el_init(el_walk *w, const kiln_tensor *x, const kiln_tensor *ix, int ax) {
    w->nd = ix->ndim;
    w->ax = ax;
    w->base = 0;
    int64_t s = 1;
    for (int i = x->ndim - 1; i >= 0; i--) {
        w->xs[i] = s;
        s *= x->dims[i];
    }
    for (int i = 0; i < w->nd; i++) {
        w->id[i] = ix->dims[i];
        w->co[i] = 0;
    }
}
static void el_next(el_walk *w) {
    for (int i = w->nd - 1; i >= 0; i--) {
        int64_t st = i == w->ax ? 0 : w->xs[i];
        w->base += st;
        if (++w->co[i] < w->id[i]) return;
        w->base -= st * w->id[i];
        w->co[i] = 0;
    }
}

static int gel_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0], *ix = &c->in[1];
    int ax = (int)kiln_attrs_int(c->attrs, "axis");
    if (ax < 0) ax += x->ndim;
    int64_t n = kiln_tensor_numel(ix), A = x->dims[ax];
    size_t es = kiln_dtype_size(x->dtype);
    int64_t *tmp;
    const int64_t *idx = idx64(ix, &tmp);
    if (!idx) return kiln_set_error(KILN_ENOMEM, "GatherElements: out of memory");
    int rc = 0;
    el_walk w;
    el_init(&w, x, ix, ax);
    for (int64_t p = 0; p < n; p++, el_next(&w)) {
        int64_t j = idx[p];
        if (j < -A || j >= A) { rc = oob("GatherElements", p, j, A); break; }
        if (j < 0) j += A;
        memcpy((char *)c->out[0].data + p * es, (const char *)x->data + (w.base + j * w.xs[ax]) * es, es);
    }
    kiln__free(tmp);
    return rc;
}
static const kiln_quick_op gel_op = {
    .ns = OPS_NS, .name = "GatherElements", .version = 11, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .attrs = axis0_attrs, .shape = gel_shape, .impl = gel_impl,
    .doc = "element-wise gather along axis",
    .cuda_impl = kiln__cu_gather_elements, .cuda_formats = cu_gather,
};
KILN_OP(gel_op)

typedef enum sred { S_NONE, S_ADD, S_MUL, S_MAX, S_MIN } sred;
static int get_red(const kiln_attrs *a, const char *op, sred *r) {
    const kiln_attr_value *v = kiln_attrs_get(a, "reduction");
    const char *s = v && v->present ? v->s : "none";
    if (!strcmp(s, "none")) *r = S_NONE;
    else if (!strcmp(s, "add")) *r = S_ADD;
    else if (!strcmp(s, "mul")) *r = S_MUL;
    else if (!strcmp(s, "max")) *r = S_MAX;
    else if (!strcmp(s, "min")) *r = S_MIN;
    else return kiln_set_error(KILN_EATTR, "%s: reduction must be none/add/mul/max/min, found '%s'", op, s);
    return 0;
}
/* dst element = reduce(dst, src) for one element of type t */
static void red_elem(sred r, kiln_dtype t, void *dst, const void *src) {
    size_t es = kiln_dtype_size(t);
    if (r == S_NONE) {
        memcpy(dst, src, es);
        return;
    }
    if (kiln__ops_is_int(t)) {
        int64_t a, b;
        kiln__ops_to_i64(dst, t, &a, 1);
        kiln__ops_to_i64(src, t, &b, 1);
        a = r == S_ADD ? (int64_t)((uint64_t)a + (uint64_t)b) : r == S_MUL ? (int64_t)((uint64_t)a * (uint64_t)b)
          : r == S_MAX ? (a > b ? a : b) : (a < b ? a : b);
        kiln__ops_from_i64(&a, t, dst, 1);
    } else {
        double a, b;
        kiln__ops_to_f64(dst, t, &a, 1);
        kiln__ops_to_f64(src, t, &b, 1);
        a = r == S_ADD ? a + b : r == S_MUL ? a * b : r == S_MAX ? fmax(a, b) : fmin(a, b);
        kiln__ops_from_f64(&a, t, dst, 1);
    }
}

static const kiln_attr_def scel_attrs[] = {
    {.name = "axis", .type = KILN_ATTR_INT, .def = "0"},
    {.name = "reduction", .type = KILN_ATTR_STRING, .def = "none", .doc = "none, add, mul, max, min"},
    {NULL}};

static int scel_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0], *ix = &c->in[1], *u = &c->in[2];
    int ax, r = kiln__ops_axis("ScatterElements", "axis", kiln_attrs_int(c->attrs, "axis"), x->ndim, &ax);
    sred red;
    if (r || (r = idx_type(c, "ScatterElements", 1)) || (r = kiln__ops_check_same(c, "ScatterElements", 0, 2)))
        return r;
    if ((r = get_red(c->attrs, "ScatterElements", &red))) return r;
    if (ix->ndim != x->ndim || u->ndim != x->ndim)
        return kiln_set_error(KILN_ESHAPE, "ScatterElements: data, indices and updates must have the "
                              "same rank (%d, %d, %d)", x->ndim, ix->ndim, u->ndim);
    kiln__ops_set_dims(&c->out[0], x->dtype, x->ndim, x->dims);
    return 0;
}
static int scel_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0], *ix = &c->in[1], *u = &c->in[2];
    kiln_tensor *y = &c->out[0];
    int ax = (int)kiln_attrs_int(c->attrs, "axis");
    if (ax < 0) ax += x->ndim;
    sred red = S_NONE;
    const kiln_attr_value *rv = kiln_attrs_get(c->attrs, "reduction");
    if (rv) {
        int r = get_red(c->attrs, "ScatterElements", &red);
        if (r) return r;
    }
    size_t es = kiln_dtype_size(x->dtype);
    int64_t n = kiln_tensor_numel(ix), A = x->dims[ax];
    if (y->data != x->data) memcpy(y->data, x->data, (size_t)kiln_tensor_numel(x) * es);
    int64_t *tmp;
    const int64_t *idx = idx64(ix, &tmp);
    if (!idx) return kiln_set_error(KILN_ENOMEM, "ScatterElements: out of memory");
    int rc = 0;
    el_walk w;
    el_init(&w, x, ix, ax);
    for (int64_t p = 0; p < n; p++, el_next(&w)) {
        int64_t j = idx[p];
        if (j < -A || j >= A) { rc = oob("ScatterElements", p, j, A); break; }
        if (j < 0) j += A;
        int64_t off = w.base + j * w.xs[ax];
        /* updates has the dims of indices */
        red_elem(red, x->dtype, (char *)y->data + off * es, (const char *)u->data + p * es);
    }
    kiln__free(tmp);
    return rc;
}
/* CUDA (scatter_cuda.c): int64 indices, every numeric type and bool. */
#define CU_SC_T KILN_CU_T_NUM_ALL "|BOOL"
static const kiln_combo cu_scatter[] = {{.types = CU_SC_T ", INT64, " CU_SC_T ", " CU_SC_T}, {0}};
static const kiln_combo cu_gather_nd[] = {{.types = CU_SC_T ", INT64, " CU_SC_T}, {0}};

static const kiln_quick_op scel_op = {
    .ns = OPS_NS, .name = "ScatterElements", .version = 11, .min_inputs = 3, .max_inputs = 3,
    .num_outputs = 1, .attrs = scel_attrs, .shape = scel_shape, .impl = scel_impl,
    .doc = "copy of data with updates written at indices along axis",
    .cuda_impl = kiln__cu_scatter_elements, .cuda_formats = cu_scatter,
};
static const kiln_quick_op scatter_op = {
    .ns = OPS_NS, .name = "Scatter", .version = 9, .min_inputs = 3, .max_inputs = 3,
    .num_outputs = 1, .attrs = axis0_attrs, .shape = scel_shape, .impl = scel_impl,
    .doc = "deprecated alias of ScatterElements",
    .cuda_impl = kiln__cu_scatter_elements, .cuda_formats = cu_scatter,
};
KILN_OP(scel_op)
KILN_OP(scatter_op)

/* ---- GatherND / ScatterND ---------------------------------------------------------------- */

static const kiln_attr_def gnd_attrs[] = {{.name = "batch_dims", .type = KILN_ATTR_INT, .def = "0"}, {NULL}};

static int gnd_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0], *ix = &c->in[1];
    int r = kiln__ops_check_type(c, "GatherND", 1, kiln__ops_is_int, "int64");
    if (r) return r;
    int64_t b = kiln_attrs_int(c->attrs, "batch_dims"), last;
    if (ix->ndim < 1 || !kiln_expr_is_const(ix->dims[ix->ndim - 1], &last))
        return kiln_set_error(KILN_ESHAPE, "GatherND: the last dim of indices must be known at build time");
    if (b < 0 || b >= ix->ndim || b >= x->ndim || last < 1 || b + last > x->ndim)
        return kiln_set_error(KILN_ESHAPE, "GatherND: batch_dims %lld and index depth %lld do not fit "
                              "data rank %d / indices rank %d", (long long)b, (long long)last, x->ndim, ix->ndim);
    const kiln_expr *d[KILN_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < ix->ndim - 1; i++) d[k++] = ix->dims[i];
    for (int64_t i = b + last; i < x->ndim; i++) {
        if (k >= KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "GatherND: output rank too large");
        d[k++] = x->dims[i];
    }
    kiln__ops_set_dims(&c->out[0], x->dtype, k, d);
    return 0;
}

/* Shared walk: for each index tuple, the data offset of the addressed slice. */
typedef struct nd_walk {
    int64_t nb, ntup, last, slice, batch_stride;
    int64_t st[KILN_MAX_DIMS]; /* data strides of the indexed dims */
    int64_t dd[KILN_MAX_DIMS];
} nd_walk;

static void nd_init(nd_walk *w, const kiln_tensor *x, const kiln_tensor *ix, int64_t b) {
    w->last = ix->dims[ix->ndim - 1];
    w->nb = 1;
    for (int64_t i = 0; i < b; i++) w->nb *= ix->dims[i];
    w->ntup = 1;
    for (int i = (int)b; i < ix->ndim - 1; i++) w->ntup *= ix->dims[i];
    w->slice = 1;
    for (int64_t i = b + w->last; i < x->ndim; i++) w->slice *= x->dims[i];
    int64_t s = w->slice;
    for (int64_t i = b + w->last - 1; i >= b; i--) {
        w->st[i - b] = s;
        w->dd[i - b] = x->dims[i];
        s *= x->dims[i];
    }
    w->batch_stride = s;
}

static int nd_off(const nd_walk *w, const char *op, const int64_t *t, int64_t at, int64_t *off) {
    int64_t o = 0;
    for (int64_t k = 0; k < w->last; k++) {
        int64_t j = t[k], D = w->dd[k];
        if (j < -D || j >= D) return oob(op, at * w->last + k, j, D);
        o += (j < 0 ? j + D : j) * w->st[k];
    }
    *off = o;
    return 0;
}

static int gnd_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0], *ix = &c->in[1];
    nd_walk w;
    nd_init(&w, x, ix, kiln_attrs_int(c->attrs, "batch_dims"));
    size_t es = kiln_dtype_size(x->dtype);
    int64_t *tmp;
    const int64_t *idx = idx64(ix, &tmp);
    if (!idx) return kiln_set_error(KILN_ENOMEM, "GatherND: out of memory");
    int rc = 0;
    char *dst = c->out[0].data;
    for (int64_t bi = 0; bi < w.nb && !rc; bi++)
        for (int64_t t = 0; t < w.ntup; t++) {
            int64_t at = bi * w.ntup + t, off = 0;
            if ((rc = nd_off(&w, "GatherND", idx + at * w.last, at, &off))) break;
            memcpy(dst + at * w.slice * es, (const char *)x->data + (bi * w.batch_stride + off) * es,
                   (size_t)w.slice * es);
        }
    kiln__free(tmp);
    return rc;
}
static const kiln_quick_op gnd_op = {
    .ns = OPS_NS, .name = "GatherND", .version = 11, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .attrs = gnd_attrs, .shape = gnd_shape, .impl = gnd_impl,
    .doc = "gather slices by index tuples",
    .cuda_impl = kiln__cu_gather_nd, .cuda_formats = cu_gather_nd,
};
KILN_OP(gnd_op)

static const kiln_attr_def snd_attrs[] = {
    {.name = "reduction", .type = KILN_ATTR_STRING, .def = "none", .doc = "none, add, mul, max, min"},
    {NULL}};
static int snd_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0], *ix = &c->in[1];
    sred red;
    int r = kiln__ops_check_type(c, "ScatterND", 1, kiln__ops_is_int, "int64");
    if (r || (r = kiln__ops_check_same(c, "ScatterND", 0, 2)) || (r = get_red(c->attrs, "ScatterND", &red)))
        return r;
    int64_t last;
    if (ix->ndim < 1 || !kiln_expr_is_const(ix->dims[ix->ndim - 1], &last) || last < 1 || last > x->ndim)
        return kiln_set_error(KILN_ESHAPE, "ScatterND: the last dim of indices must be known and in [1, %d]",
                              x->ndim);
    kiln__ops_set_dims(&c->out[0], x->dtype, x->ndim, x->dims);
    return 0;
}
static int snd_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0], *ix = &c->in[1], *u = &c->in[2];
    kiln_tensor *y = &c->out[0];
    sred red;
    int rc = get_red(c->attrs, "ScatterND", &red);
    if (rc) return rc;
    size_t es = kiln_dtype_size(x->dtype);
    if (y->data != x->data) memcpy(y->data, x->data, (size_t)kiln_tensor_numel(x) * es);
    nd_walk w;
    nd_init(&w, x, ix, 0);
    int64_t *tmp;
    const int64_t *idx = idx64(ix, &tmp);
    if (!idx) return kiln_set_error(KILN_ENOMEM, "ScatterND: out of memory");
    for (int64_t t = 0; t < w.ntup && !rc; t++) {
        int64_t off = 0;
        if ((rc = nd_off(&w, "ScatterND", idx + t * w.last, t, &off))) break;
        char *d = (char *)y->data + off * es;
        const char *s = (const char *)u->data + t * w.slice * es;
        if (red == S_NONE) memcpy(d, s, (size_t)w.slice * es);
        else
            for (int64_t i = 0; i < w.slice; i++) red_elem(red, x->dtype, d + i * es, s + i * es);
    }
    kiln__free(tmp);
    return rc;
}
static const kiln_quick_op snd_op = {
    .ns = OPS_NS, .name = "ScatterND", .version = 11, .min_inputs = 3, .max_inputs = 3,
    .num_outputs = 1, .attrs = snd_attrs, .shape = snd_shape, .impl = snd_impl,
    .doc = "copy of data with update slices written at index tuples",
    .cuda_impl = kiln__cu_scatter_nd, .cuda_formats = cu_scatter,
};
KILN_OP(snd_op)
