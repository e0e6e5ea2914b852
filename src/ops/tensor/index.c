/*
 * index.c — indexing and rearranging ONNX operators: Gather,
 * GatherElements, GatherND, ScatterElements (and the deprecated Scatter),
 * ScatterND, NonZero (data-dependent output through a size tensor), TopK,
 * CumSum, Trilu, OneHot, DepthToSpace, SpaceToDepth, Einsum.
 *
 * Indices are checked at run time: an index out of range is an error that
 * names the op, the position and the bound, never a wild read or write.
 * Copies are element-size generic; arithmetic (scatter reductions, CumSum,
 * Einsum) goes through double, or int64 for integer types.
 */
#include "ops/common/ops1.h"

#include <math.h>
#include <stdlib.h>

/* Indices as int64 (a borrowed pointer for I64, else a converted copy in *tmp). */
static const int64_t *idx64(const kiln_tensor *t, int64_t **tmp) {
    *tmp = NULL;
    if (t->dtype == KILN_DTYPE_I64) return t->data;
    int64_t n = kiln_tensor_numel(t);
    *tmp = kiln__malloc((size_t)(n ? n : 1) * sizeof(int64_t));
    if (!*tmp) return NULL;
    kiln__ops1_to_i64(t->data, t->dtype, *tmp, n);
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

static void set_dims(kiln_desc *o, kiln_dtype t, int nd, const kiln_expr *const *d) {
    o->dtype = t;
    o->ndim = nd;
    for (int i = 0; i < nd; i++) o->dims[i] = d[i];
}

static const kiln_attr_def axis0_attrs[] = {{.name = "axis", .type = KILN_ATTR_INT, .def = "0"}, {NULL}};

/* ---- Gather ----------------------------------------------------------------------- */

static int gather_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0], *ix = &c->in[1];
    int ax, r = kiln__ops1_axis("Gather", "axis", kiln_attrs_int(c->attrs, "axis"), x->ndim, &ax);
    if (r || (r = idx_type(c, "Gather", 1))) return r;
    if (x->ndim == 0) return kiln_set_error(KILN_ESHAPE, "Gather: data must have rank >= 1");
    int nd = x->ndim - 1 + ix->ndim;
    if (nd > KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "Gather: output rank %d exceeds %d", nd, KILN_MAX_DIMS);
    const kiln_expr *d[KILN_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < ax; i++) d[k++] = x->dims[i];
    for (int i = 0; i < ix->ndim; i++) d[k++] = ix->dims[i];
    for (int i = ax + 1; i < x->ndim; i++) d[k++] = x->dims[i];
    set_dims(&c->out[0], x->dtype, nd, d);
    /* values: picking elements of a small 1-D integer tensor (Shape -> Gather) */
    const kiln_expr *xv[KILN_MAX_VALUES];
    int64_t iv[KILN_MAX_VALUES];
    int nx, ni;
    if (x->ndim == 1 && (nx = kiln__ops1_value_exprs(c->x, x, xv)) >= 0 &&
        (ni = (int)kiln__ops1_const_ints(ix, iv, KILN_MAX_VALUES)) >= 0) {
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
static const kiln_quick_op gather_op = {
    .ns = OPS1_NS, .name = "Gather", .version = 1, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .attrs = axis0_attrs, .shape = gather_shape, .impl = gather_impl,
    .doc = "take slices along axis by index",
};
KILN_OP(gather_op)

/* ---- GatherElements / ScatterElements ------------------------------------------------- */

static int gel_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0], *ix = &c->in[1];
    int ax, r = kiln__ops1_axis("GatherElements", "axis", kiln_attrs_int(c->attrs, "axis"), x->ndim, &ax);
    if (r || (r = idx_type(c, "GatherElements", 1))) return r;
    if (ix->ndim != x->ndim)
        return kiln_set_error(KILN_ESHAPE, "GatherElements: indices rank %d differs from data rank %d",
                              ix->ndim, x->ndim);
    set_dims(&c->out[0], x->dtype, ix->ndim, ix->dims);
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
    .ns = OPS1_NS, .name = "GatherElements", .version = 11, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .attrs = axis0_attrs, .shape = gel_shape, .impl = gel_impl,
    .doc = "element-wise gather along axis",
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
    if (kiln__ops1_is_int(t)) {
        int64_t a, b;
        kiln__ops1_to_i64(dst, t, &a, 1);
        kiln__ops1_to_i64(src, t, &b, 1);
        a = r == S_ADD ? (int64_t)((uint64_t)a + (uint64_t)b) : r == S_MUL ? (int64_t)((uint64_t)a * (uint64_t)b)
          : r == S_MAX ? (a > b ? a : b) : (a < b ? a : b);
        kiln__ops1_from_i64(&a, t, dst, 1);
    } else {
        double a, b;
        kiln__ops1_to_f64(dst, t, &a, 1);
        kiln__ops1_to_f64(src, t, &b, 1);
        a = r == S_ADD ? a + b : r == S_MUL ? a * b : r == S_MAX ? fmax(a, b) : fmin(a, b);
        kiln__ops1_from_f64(&a, t, dst, 1);
    }
}

static const kiln_attr_def scel_attrs[] = {
    {.name = "axis", .type = KILN_ATTR_INT, .def = "0"},
    {.name = "reduction", .type = KILN_ATTR_STRING, .def = "none", .doc = "none, add, mul, max, min"},
    {NULL}};

static int scel_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0], *ix = &c->in[1], *u = &c->in[2];
    int ax, r = kiln__ops1_axis("ScatterElements", "axis", kiln_attrs_int(c->attrs, "axis"), x->ndim, &ax);
    sred red;
    if (r || (r = idx_type(c, "ScatterElements", 1)) || (r = kiln__ops1_check_same(c, "ScatterElements", 0, 2)))
        return r;
    if ((r = get_red(c->attrs, "ScatterElements", &red))) return r;
    if (ix->ndim != x->ndim || u->ndim != x->ndim)
        return kiln_set_error(KILN_ESHAPE, "ScatterElements: data, indices and updates must have the "
                              "same rank (%d, %d, %d)", x->ndim, ix->ndim, u->ndim);
    set_dims(&c->out[0], x->dtype, x->ndim, x->dims);
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
static const kiln_quick_op scel_op = {
    .ns = OPS1_NS, .name = "ScatterElements", .version = 11, .min_inputs = 3, .max_inputs = 3,
    .num_outputs = 1, .attrs = scel_attrs, .shape = scel_shape, .impl = scel_impl,
    .doc = "copy of data with updates written at indices along axis",
};
static const kiln_quick_op scatter_op = {
    .ns = OPS1_NS, .name = "Scatter", .version = 9, .min_inputs = 3, .max_inputs = 3,
    .num_outputs = 1, .attrs = axis0_attrs, .shape = scel_shape, .impl = scel_impl,
    .doc = "deprecated alias of ScatterElements",
};
KILN_OP(scel_op)
KILN_OP(scatter_op)

/* ---- GatherND / ScatterND ---------------------------------------------------------------- */

static const kiln_attr_def gnd_attrs[] = {{.name = "batch_dims", .type = KILN_ATTR_INT, .def = "0"}, {NULL}};

static int gnd_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0], *ix = &c->in[1];
    int r = kiln__ops1_check_type(c, "GatherND", 1, kiln__ops1_is_int, "int64");
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
    set_dims(&c->out[0], x->dtype, k, d);
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
    .ns = OPS1_NS, .name = "GatherND", .version = 11, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .attrs = gnd_attrs, .shape = gnd_shape, .impl = gnd_impl,
    .doc = "gather slices by index tuples",
};
KILN_OP(gnd_op)

static const kiln_attr_def snd_attrs[] = {
    {.name = "reduction", .type = KILN_ATTR_STRING, .def = "none", .doc = "none, add, mul, max, min"},
    {NULL}};
static int snd_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0], *ix = &c->in[1];
    sred red;
    int r = kiln__ops1_check_type(c, "ScatterND", 1, kiln__ops1_is_int, "int64");
    if (r || (r = kiln__ops1_check_same(c, "ScatterND", 0, 2)) || (r = get_red(c->attrs, "ScatterND", &red)))
        return r;
    int64_t last;
    if (ix->ndim < 1 || !kiln_expr_is_const(ix->dims[ix->ndim - 1], &last) || last < 1 || last > x->ndim)
        return kiln_set_error(KILN_ESHAPE, "ScatterND: the last dim of indices must be known and in [1, %d]",
                              x->ndim);
    set_dims(&c->out[0], x->dtype, x->ndim, x->dims);
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
    .ns = OPS1_NS, .name = "ScatterND", .version = 11, .min_inputs = 3, .max_inputs = 3,
    .num_outputs = 1, .attrs = snd_attrs, .shape = snd_shape, .impl = snd_impl,
    .doc = "copy of data with update slices written at index tuples",
};
KILN_OP(snd_op)

/* ---- NonZero: [rank, N], N data-dependent (size tensor, the hidden output 1) ------------ */

static int nonzero_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    int r = kiln__ops1_check_type(c, "NonZero", 0, kiln__ops1_is_any, "a numeric or bool type");
    if (r) return r;
    const kiln_expr *numel = kiln_expr_const(c->x, 1);
    for (int i = 0; i < x->ndim; i++) numel = kiln_expr_mul(c->x, numel, x->dims[i]);
    c->out[1].dtype = KILN_DTYPE_I64;
    c->out[1].ndim = 0;
    const kiln_expr *n = kiln_shape_size_tensor(
        c, 1, kiln_expr_ceildiv(c->x, numel, kiln_expr_const(c->x, 2)), numel);
    const kiln_expr *d[2] = {kiln_expr_const(c->x, x->ndim), n};
    set_dims(&c->out[0], KILN_DTYPE_I64, 2, d);
    return 0;
}
static int nonzero_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    int64_t n = kiln_tensor_numel(x), cnt = 0;
    size_t es = kiln_dtype_size(x->dtype);
    const unsigned char *p = x->data;
    static const unsigned char zero[16];
    /* a float -0.0 is zero too */
    int is_f = kiln__ops1_is_float(x->dtype);
    for (int64_t i = 0; i < n; i++) {
        int nz = is_f ? kiln__ops1_get_f64(p, x->dtype, i) != 0 : memcmp(p + i * es, zero, es) != 0;
        cnt += nz;
    }
    int64_t *y = c->out[0].data;
    int r = x->ndim;
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        int nz = is_f ? kiln__ops1_get_f64(p, x->dtype, i) != 0 : memcmp(p + i * es, zero, es) != 0;
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
    .ns = OPS1_NS, .name = "NonZero", .version = 9, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 2, .shape = nonzero_shape, .impl = nonzero_impl,
    .doc = "indices of non-zero elements, [rank, N] (output 1: N, a size tensor)",
};
KILN_OP(nonzero_op)

/* ---- TopK ----------------------------------------------------------------------------------- */

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
    int ax, r = kiln__ops1_axis("TopK", "axis", kiln_attrs_int(c->attrs, "axis"), x->ndim, &ax);
    if (r) return r;
    if (!kiln__ops1_is_num(x->dtype))
        return kiln_set_error(KILN_ETYPE, "TopK: input must be numeric, found %s", kiln_dtype_name(x->dtype));
    const kiln_expr *k;
    if (v10) {
        const kiln_expr *v[KILN_MAX_VALUES];
        if (kiln__ops1_value_exprs(c->x, &c->in[1], v) != 1)
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
    set_dims(&c->out[0], x->dtype, x->ndim, x->dims);
    c->out[0].dims[ax] = k;
    set_dims(&c->out[1], KILN_DTYPE_I64, x->ndim, x->dims);
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
                kiln__ops1_to_f64(xp + o * A * es, x->dtype, vals, A);
            else
                for (int64_t a = 0; a < A; a++) vals[a] = kiln__ops1_get_f64(xp, x->dtype, (o * A + a) * inner + in);
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
static const kiln_quick_op topk1_op = {
    .ns = OPS1_NS, .name = "TopK", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 2, .attrs = topk1_attrs, .shape = topk1_shape, .impl = topk_impl,
    .doc = "k largest values and their indices (k attribute)",
};
static const kiln_quick_op topk10_op = {
    .ns = OPS1_NS, .name = "TopK", .version = 10, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 2, .attrs = topk10_attrs, .shape = topk10_shape, .impl = topk_impl,
    .doc = "k largest/smallest values and their indices (K input)",
};
KILN_OP(topk1_op)
KILN_OP(topk10_op)

/* ---- CumSum ----------------------------------------------------------------------------------- */

static const kiln_attr_def cumsum_attrs[] = {
    {.name = "exclusive", .type = KILN_ATTR_INT, .def = "0"},
    {.name = "reverse", .type = KILN_ATTR_INT, .def = "0"},
    {NULL}};
static int cumsum_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    if (!kiln__ops1_is_num(x->dtype))
        return kiln_set_error(KILN_ETYPE, "CumSum: input must be numeric, found %s", kiln_dtype_name(x->dtype));
    int r = kiln__ops1_check_type(c, "CumSum", 1, kiln__ops1_is_int, "int32 or int64");
    if (r) return r;
    set_dims(&c->out[0], x->dtype, x->ndim, x->dims);
    return 0;
}
static int cumsum_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    int64_t axv = kiln__ops1_get_i64(c->in[1].data, c->in[1].dtype, 0);
    int ax, r = kiln__ops1_axis("CumSum", "axis", axv, x->ndim, &ax);
    if (r) return r;
    int excl = (int)kiln_attrs_int(c->attrs, "exclusive"), rev = (int)kiln_attrs_int(c->attrs, "reverse");
    int64_t A = x->dims[ax], outer = 1, inner = 1, n = kiln_tensor_numel(x);
    for (int i = 0; i < ax; i++) outer *= x->dims[i];
    for (int i = ax + 1; i < x->ndim; i++) inner *= x->dims[i];
    if (n == 0) return 0;
    /* whole tensor through int64 (integers) or double (floats) */
    int isint = kiln__ops1_is_int(x->dtype);
    void *buf = kiln__malloc((size_t)n * 8);
    if (!buf) return kiln_set_error(KILN_ENOMEM, "CumSum: out of memory");
    int64_t *bi = buf;
    double *bf = buf;
    if (isint) kiln__ops1_to_i64(x->data, x->dtype, bi, n);
    else kiln__ops1_to_f64(x->data, x->dtype, bf, n);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            double fs = 0;
            int64_t is = 0;
            for (int64_t t = 0; t < A; t++) {
                int64_t a = rev ? A - 1 - t : t, pos = (o * A + a) * inner + in;
                if (isint) {
                    int64_t v = bi[pos];
                    bi[pos] = excl ? is : (int64_t)((uint64_t)is + (uint64_t)v);
                    is = (int64_t)((uint64_t)is + (uint64_t)v);
                } else {
                    double v = bf[pos];
                    bf[pos] = excl ? fs : fs + v;
                    fs += v;
                }
            }
        }
    if (isint) kiln__ops1_from_i64(bi, x->dtype, c->out[0].data, n);
    else kiln__ops1_from_f64(bf, x->dtype, c->out[0].data, n);
    kiln__free(buf);
    return 0;
}
static const kiln_quick_op cumsum_op = {
    .ns = OPS1_NS, .name = "CumSum", .version = 11, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .attrs = cumsum_attrs, .shape = cumsum_shape, .impl = cumsum_impl,
    .doc = "cumulative sum along axis (exclusive/reverse)",
};
KILN_OP(cumsum_op)

/* ---- Trilu ------------------------------------------------------------------------------------ */

static const kiln_attr_def trilu_attrs[] = {{.name = "upper", .type = KILN_ATTR_INT, .def = "1"}, {NULL}};
static int trilu_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    if (x->ndim < 2) return kiln_set_error(KILN_ESHAPE, "Trilu: input must have rank >= 2, found %d", x->ndim);
    int r = kiln__ops1_check_type(c, "Trilu", 0, kiln__ops1_is_any, "a numeric or bool type");
    if (r) return r;
    if (kiln__ops1_has_in(c, 1) && (r = kiln__ops1_check_type(c, "Trilu", 1, kiln__ops1_is_int, "int64")))
        return r;
    set_dims(&c->out[0], x->dtype, x->ndim, x->dims);
    return 0;
}
static int trilu_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    int64_t k = kiln__ops1_call_has_in(c, 1) ? kiln__ops1_get_i64(c->in[1].data, c->in[1].dtype, 0) : 0;
    int upper = (int)kiln_attrs_int(c->attrs, "upper");
    int64_t R = x->dims[x->ndim - 2], C = x->dims[x->ndim - 1], B = 1;
    for (int i = 0; i < x->ndim - 2; i++) B *= x->dims[i];
    size_t es = kiln_dtype_size(x->dtype);
    char *y = c->out[0].data;
    const char *xp = x->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < R; i++) {
            char *row = y + (b * R + i) * C * (int64_t)es;
            const char *src = xp + (b * R + i) * C * (int64_t)es;
            /* keep j >= i + k (upper) or j <= i + k (lower) */
            int64_t lo = upper ? i + k : 0, hi = upper ? C : i + k + 1;
            lo = lo < 0 ? 0 : lo > C ? C : lo;
            hi = hi < 0 ? 0 : hi > C ? C : hi;
            memset(row, 0, (size_t)C * es);
            if (hi > lo) memcpy(row + lo * (int64_t)es, src + lo * (int64_t)es, (size_t)(hi - lo) * es);
        }
    return 0;
}
static const kiln_quick_op trilu_op = {
    .ns = OPS1_NS, .name = "Trilu", .version = 14, .min_inputs = 1, .max_inputs = 2,
    .num_outputs = 1, .attrs = trilu_attrs, .shape = trilu_shape, .impl = trilu_impl,
    .doc = "upper/lower triangle of the last two dims (diagonal offset k)",
};
KILN_OP(trilu_op)

/* ---- OneHot ------------------------------------------------------------------------------------ */

static const kiln_attr_def onehot_attrs[] = {{.name = "axis", .type = KILN_ATTR_INT, .def = "-1"}, {NULL}};
static int onehot_shape(kiln_shape_ctx *c) {
    const kiln_desc *ix = &c->in[0], *vals = &c->in[2];
    if (!kiln__ops1_is_num(ix->dtype))
        return kiln_set_error(KILN_ETYPE, "OneHot: indices must be numeric, found %s", kiln_dtype_name(ix->dtype));
    if (!kiln__ops1_is_any(vals->dtype))
        return kiln_set_error(KILN_ETYPE, "OneHot: values type %s is not supported", kiln_dtype_name(vals->dtype));
    const kiln_expr *dv[KILN_MAX_VALUES];
    const kiln_expr *depth;
    if (kiln__ops1_value_exprs(c->x, &c->in[1], dv) == 1) {
        depth = dv[0];
    } else if (c->in[1].data && kiln__ops1_desc_numel(&c->in[1]) == 1) {
        depth = kiln_expr_const(c->x, (int64_t)kiln__ops1_get_f64(c->in[1].data, c->in[1].dtype, 0));
    } else {
        return kiln_set_error(KILN_EUNSUPPORTED, "OneHot: input 1 'depth' must be a scalar known at build time");
    }
    int on = ix->ndim + 1, ax;
    if (on > KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "OneHot: output rank too large");
    int r = kiln__ops1_axis("OneHot", "axis", kiln_attrs_int(c->attrs, "axis"), on, &ax);
    if (r) return r;
    const kiln_expr *d[KILN_MAX_DIMS];
    for (int i = 0, j = 0; i < on; i++) d[i] = i == ax ? depth : ix->dims[j++];
    set_dims(&c->out[0], vals->dtype, on, d);
    return 0;
}
static int onehot_impl(const kiln_call *c) {
    const kiln_tensor *ix = &c->in[0], *vals = &c->in[2];
    kiln_tensor *y = &c->out[0];
    int ax = (int)kiln_attrs_int(c->attrs, "axis");
    if (ax < 0) ax += y->ndim;
    int64_t depth = y->dims[ax], outer = 1, inner = 1;
    for (int i = 0; i < ax; i++) outer *= y->dims[i];
    for (int i = ax + 1; i < y->ndim; i++) inner *= y->dims[i];
    size_t es = kiln_dtype_size(y->dtype);
    const char *off = vals->data, *onv = (const char *)vals->data + es;
    int64_t n = kiln_tensor_numel(y);
    char *yp = y->data;
    for (int64_t i = 0; i < n; i++) memcpy(yp + i * es, off, es);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t in = 0; in < inner; in++) {
            double dv = kiln__ops1_get_f64(ix->data, ix->dtype, o * inner + in);
            int64_t v = (int64_t)dv;
            if (v < 0) v += depth;
            if (v < 0 || v >= depth) continue;
            memcpy(yp + ((o * depth + v) * inner + in) * es, onv, es);
        }
    return 0;
}
static const kiln_quick_op onehot_op = {
    .ns = OPS1_NS, .name = "OneHot", .version = 9, .min_inputs = 3, .max_inputs = 3,
    .num_outputs = 1, .attrs = onehot_attrs, .shape = onehot_shape, .impl = onehot_impl,
    .doc = "one-hot encoding along axis",
};
KILN_OP(onehot_op)

/* ---- DepthToSpace / SpaceToDepth ------------------------------------------------------------------ */

static const kiln_attr_def d2s1_attrs[] = {{.name = "blocksize", .type = KILN_ATTR_INT, .required = 1}, {NULL}};
static const kiln_attr_def d2s11_attrs[] = {
    {.name = "blocksize", .type = KILN_ATTR_INT, .required = 1},
    {.name = "mode", .type = KILN_ATTR_STRING, .def = "DCR", .doc = "DCR or CRD"},
    {NULL}};

static int d2s_mode(const kiln_attrs *a, int *crd) {
    const kiln_attr_value *v = kiln_attrs_get(a, "mode");
    const char *m = v && v->present ? v->s : "DCR";
    if (!strcmp(m, "DCR")) *crd = 0;
    else if (!strcmp(m, "CRD")) *crd = 1;
    else return kiln_set_error(KILN_EATTR, "DepthToSpace: mode must be DCR or CRD, found '%s'", m);
    return 0;
}

static int s2d_shape_(kiln_shape_ctx *c, int d2s) {
    const char *op = d2s ? "DepthToSpace" : "SpaceToDepth";
    const kiln_desc *x = &c->in[0];
    if (x->ndim != 4) return kiln_set_error(KILN_ESHAPE, "%s: input must be 4-D, found rank %d", op, x->ndim);
    int64_t b = kiln_attrs_int(c->attrs, "blocksize");
    int crd;
    if (b < 1) return kiln_set_error(KILN_EATTR, "%s: blocksize must be >= 1, found %lld", op, (long long)b);
    if (d2s) {
        int r = d2s_mode(c->attrs, &crd);
        if (r) return r;
    }
    kiln_exprs *X = c->x;
    const kiln_expr *B = kiln_expr_const(X, b), *BB = kiln_expr_const(X, b * b);
    const kiln_expr *d[4] = {x->dims[0], NULL, NULL, NULL};
    int64_t v;
    if (d2s) {
        if (kiln_expr_is_const(x->dims[1], &v) && v % (b * b))
            return kiln_set_error(KILN_ESHAPE, "DepthToSpace: channels %lld not divisible by blocksize^2 %lld",
                                  (long long)v, (long long)(b * b));
        d[1] = kiln_expr_floordiv(X, x->dims[1], BB);
        d[2] = kiln_expr_mul(X, x->dims[2], B);
        d[3] = kiln_expr_mul(X, x->dims[3], B);
    } else {
        for (int i = 2; i < 4; i++)
            if (kiln_expr_is_const(x->dims[i], &v) && v % b)
                return kiln_set_error(KILN_ESHAPE, "SpaceToDepth: dim %d = %lld not divisible by blocksize %lld",
                                      i, (long long)v, (long long)b);
        d[1] = kiln_expr_mul(X, x->dims[1], BB);
        d[2] = kiln_expr_floordiv(X, x->dims[2], B);
        d[3] = kiln_expr_floordiv(X, x->dims[3], B);
    }
    set_dims(&c->out[0], x->dtype, 4, d);
    return 0;
}

static int s2d_impl_(const kiln_call *c, int d2s) {
    const kiln_tensor *x = &c->in[0];
    int64_t b = kiln_attrs_int(c->attrs, "blocksize");
    int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    int64_t dims[6], st[6];
    if (d2s) {
        int crd = 0;
        int r = d2s_mode(c->attrs, &crd);
        if (r) return r;
        int64_t Cp = C / (b * b);
        /* output viewed as [N, C', H, b1, W, b2] */
        int64_t sb1 = crd ? b * H * W : b * Cp * H * W, sb2 = crd ? H * W : Cp * H * W;
        int64_t sc = crd ? b * b * H * W : H * W;
        int64_t d6[6] = {N, Cp, H, b, W, b}, s6[6] = {C * H * W, sc, W, sb1, 1, sb2};
        memcpy(dims, d6, sizeof dims);
        memcpy(st, s6, sizeof st);
    } else {
        int64_t Hp = H / b, Wp = W / b;
        /* output viewed as [N, b1, b2, C, H', W'] */
        int64_t d6[6] = {N, b, b, C, Hp, Wp}, s6[6] = {C * H * W, W, 1, H * W, b * W, b};
        memcpy(dims, d6, sizeof dims);
        memcpy(st, s6, sizeof st);
    }
    kiln__ops1_strided_copy(c->exec, c->out[0].data, x->data, kiln_dtype_size(x->dtype), 6, dims, st);
    return 0;
}
static int d2s_shape(kiln_shape_ctx *c) { return s2d_shape_(c, 1); }
static int s2d_shape(kiln_shape_ctx *c) { return s2d_shape_(c, 0); }
static int d2s_impl(const kiln_call *c) { return s2d_impl_(c, 1); }
static int s2d_impl(const kiln_call *c) { return s2d_impl_(c, 0); }
static const kiln_quick_op d2s1_op = {
    .ns = OPS1_NS, .name = "DepthToSpace", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = d2s1_attrs, .shape = d2s_shape, .impl = d2s_impl,
    .doc = "move channel blocks into spatial blocks (DCR)",
};
static const kiln_quick_op d2s11_op = {
    .ns = OPS1_NS, .name = "DepthToSpace", .version = 11, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = d2s11_attrs, .shape = d2s_shape, .impl = d2s_impl,
    .doc = "move channel blocks into spatial blocks (DCR or CRD)",
};
static const kiln_quick_op s2d_op = {
    .ns = OPS1_NS, .name = "SpaceToDepth", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = d2s1_attrs, .shape = s2d_shape, .impl = s2d_impl,
    .doc = "move spatial blocks into channels",
};
KILN_OP(d2s1_op)
KILN_OP(d2s11_op)
KILN_OP(s2d_op)

/* ---- Einsum ------------------------------------------------------------------------------------------ */

/* Parsed equation: per operand a list of label ids (ellipsis dims become
 * labels 52.. from the right), and the output labels. */
#define EIN_MAXL 64
typedef struct ein {
    int nops;
    int nl[KILN_MAX_IO];
    int lab[KILN_MAX_IO][KILN_MAX_DIMS];
    int nout;
    int out[KILN_MAX_DIMS];
    int used[EIN_MAXL];
} ein;

static int ein_lab(char ch) {
    if (ch >= 'a' && ch <= 'z') return ch - 'a';
    if (ch >= 'A' && ch <= 'Z') return 26 + ch - 'A';
    return -1;
}

/* Parse one term (up to ',' '-' or end) for an operand of rank `rank`
 * (-1: output, ellipsis width = ell). */
static int ein_term(const char **ps, int rank, int *ell, int *labs, int *n) {
    const char *s = *ps;
    int tmp[KILN_MAX_DIMS * 2], k = 0, ellpos = -1;
    while (*s && *s != ',' && *s != '-') {
        if (*s == ' ') { s++; continue; }
        if (s[0] == '.' && s[1] == '.' && s[2] == '.') {
            if (ellpos >= 0) return kiln_set_error(KILN_EATTR, "Einsum: two ellipses in one term");
            ellpos = k;
            s += 3;
            continue;
        }
        int l = ein_lab(*s);
        if (l < 0) return kiln_set_error(KILN_EATTR, "Einsum: bad character '%c' in equation", *s);
        if (k >= KILN_MAX_DIMS) return kiln_set_error(KILN_EATTR, "Einsum: term too long");
        tmp[k++] = l;
        s++;
    }
    *ps = s;
    int w = 0;
    if (ellpos >= 0) {
        w = rank >= 0 ? rank - k : *ell;
        if (w < 0) return kiln_set_error(KILN_ESHAPE, "Einsum: term has more labels than the operand's rank %d", rank);
        if (rank >= 0 && w > *ell) *ell = w;
    } else if (rank >= 0 && k != rank) {
        return kiln_set_error(KILN_ESHAPE, "Einsum: term has %d labels, operand has rank %d", k, rank);
    }
    int m = 0;
    for (int i = 0; i <= k; i++) {
        if (i == ellpos)
            for (int e = 0; e < w; e++) labs[m++] = 52 + (rank >= 0 ? (*ell >= w ? e + (*ell - w) : e) : e);
        if (i < k) labs[m++] = tmp[i];
    }
    *n = m;
    return m > KILN_MAX_DIMS ? kiln_set_error(KILN_ESHAPE, "Einsum: rank too large") : 0;
}

static int ein_parse(const char *eq, int nops, const int *ranks, ein *e) {
    memset(e, 0, sizeof *e);
    const char *s = eq;
    int ell = 0, r;
    /* first pass for the widest ellipsis */
    for (int pass = 0; pass < 2; pass++) {
        s = eq;
        for (int k = 0; k < nops; k++) {
            if ((r = ein_term(&s, ranks[k], &ell, e->lab[k], &e->nl[k]))) return r;
            if (k < nops - 1) {
                if (*s != ',') return kiln_set_error(KILN_EATTR, "Einsum: equation has fewer terms than the %d inputs", nops);
                s++;
            }
        }
    }
    /* ellipsis labels are right-aligned: relabel so that the last ell dims share labels */
    for (int k = 0; k < nops; k++) {
        int w = 0;
        for (int i = 0; i < e->nl[k]; i++) w += e->lab[k][i] >= 52;
        int seen = 0;
        for (int i = 0; i < e->nl[k]; i++)
            if (e->lab[k][i] >= 52) e->lab[k][i] = 52 + (ell - w) + seen++;
    }
    e->nops = nops;
    for (int k = 0; k < nops; k++)
        for (int i = 0; i < e->nl[k]; i++) e->used[e->lab[k][i]]++;
    while (*s == ' ') s++;
    if (*s == ',') return kiln_set_error(KILN_EATTR, "Einsum: equation has more terms than the %d inputs", nops);
    if (s[0] == '-' && s[1] == '>') {
        s += 2;
        if ((r = ein_term(&s, -1, &ell, e->out, &e->nout))) return r;
        if (*s) return kiln_set_error(KILN_EATTR, "Einsum: unexpected '%c' in the output term", *s);
        for (int i = 0; i < e->nout; i++)
            if (!e->used[e->out[i]]) return kiln_set_error(KILN_EATTR, "Einsum: output label not in any input");
    } else {
        /* implicit: ellipsis dims, then labels used once, alphabetically */
        int n = 0;
        for (int l = 52; l < 52 + ell; l++) e->out[n++] = l;
        for (int l = 0; l < 52; l++)
            if (e->used[l] == 1) {
                if (n >= KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "Einsum: output rank too large");
                e->out[n++] = l;
            }
        e->nout = n;
    }
    return 0;
}

static const kiln_attr_def einsum_attrs[] = {{.name = "equation", .type = KILN_ATTR_STRING, .required = 1}, {NULL}};

static int einsum_shape(kiln_shape_ctx *c) {
    int ranks[KILN_MAX_IO];
    for (int k = 0; k < c->nin; k++) {
        ranks[k] = c->in[k].ndim;
        int r = kiln__ops1_check_same(c, "Einsum", 0, k);
        if (r) return r;
    }
    if (!kiln__ops1_is_num(c->in[0].dtype))
        return kiln_set_error(KILN_ETYPE, "Einsum: inputs must be numeric, found %s", kiln_dtype_name(c->in[0].dtype));
    ein e;
    int r = ein_parse(kiln_attrs_string(c->attrs, "equation"), c->nin, ranks, &e);
    if (r) return r;
    const kiln_expr *ld[EIN_MAXL] = {0};
    for (int k = 0; k < c->nin; k++)
        for (int i = 0; i < e.nl[k]; i++) {
            const kiln_expr *d = c->in[k].dims[i];
            int l = e.lab[k][i];
            int64_t a, b;
            if (!ld[l] || (kiln_expr_is_const(ld[l], &a) && a == 1)) ld[l] = d;
            else if (kiln_expr_is_const(ld[l], &a) && kiln_expr_is_const(d, &b) && a != b && b != 1)
                return kiln_set_error(KILN_ESHAPE, "Einsum: label dims disagree (%lld vs %lld)", (long long)a,
                                      (long long)b);
        }
    const kiln_expr *d[KILN_MAX_DIMS];
    for (int i = 0; i < e.nout; i++) d[i] = ld[e.out[i]];
    set_dims(&c->out[0], c->in[0].dtype, e.nout, d);
    return 0;
}

static int einsum_impl(const kiln_call *c) {
    int ranks[KILN_MAX_IO];
    for (int k = 0; k < c->nin; k++) ranks[k] = c->in[k].ndim;
    ein e;
    int r = ein_parse(kiln_attrs_string(c->attrs, "equation"), c->nin, ranks, &e);
    if (r) return r;
    int64_t size[EIN_MAXL];
    for (int l = 0; l < EIN_MAXL; l++) size[l] = 1;
    for (int k = 0; k < c->nin; k++)
        for (int i = 0; i < e.nl[k]; i++)
            if (c->in[k].dims[i] != 1) size[e.lab[k][i]] = c->in[k].dims[i];
    /* loop labels: output labels, then summed labels */
    int loop[EIN_MAXL], nloop = 0, isout[EIN_MAXL] = {0};
    for (int i = 0; i < e.nout; i++) { loop[nloop++] = e.out[i]; isout[e.out[i]] = 1; }
    for (int l = 0; l < EIN_MAXL; l++)
        if (e.used[l] && !isout[l]) loop[nloop++] = l;
    /* per operand: stride of each label (summed over repeated labels = diagonal) */
    int64_t lst[KILN_MAX_IO][EIN_MAXL];
    double *in[KILN_MAX_IO] = {0};
    int rc = 0;
    for (int k = 0; k < c->nin; k++) {
        memset(lst[k], 0, sizeof lst[k]);
        int64_t s = 1;
        for (int i = e.nl[k] - 1; i >= 0; i--) {
            if (c->in[k].dims[i] != 1) lst[k][e.lab[k][i]] += s;
            s *= c->in[k].dims[i];
        }
        int64_t n = kiln_tensor_numel(&c->in[k]);
        in[k] = kiln__malloc((size_t)(n ? n : 1) * sizeof(double));
        if (!in[k]) { rc = kiln_set_error(KILN_ENOMEM, "Einsum: out of memory"); goto done; }
        kiln__ops1_to_f64(c->in[k].data, c->in[k].dtype, in[k], n);
    }
    int64_t on = kiln_tensor_numel(&c->out[0]), inner = 1;
    for (int i = e.nout; i < nloop; i++) inner *= size[loop[i]];
    /* summed labels: sizes and per-operand strides */
    int nsum = nloop - e.nout;
    int64_t ssz[EIN_MAXL], sst[KILN_MAX_IO][EIN_MAXL];
    for (int i = 0; i < nsum; i++) {
        ssz[i] = size[loop[e.nout + i]];
        for (int k = 0; k < c->nin; k++) sst[k][i] = lst[k][loop[e.nout + i]];
    }
    double *acc = kiln__malloc((size_t)(on ? on : 1) * sizeof(double));
    if (!acc) { rc = kiln_set_error(KILN_ENOMEM, "Einsum: out of memory"); goto done; }
    for (int64_t o = 0; o < on; o++) {
        int64_t base[KILN_MAX_IO] = {0}, rem = o;
        for (int i = e.nout - 1; i >= 0; i--) {
            int64_t ix = rem % size[loop[i]];
            rem /= size[loop[i]];
            for (int k = 0; k < c->nin; k++) base[k] += ix * lst[k][loop[i]];
        }
        double sum = 0;
        if (nsum == 1 && c->nin == 2) { /* a dot product: matmul-like equations */
            const double *p0 = in[0] + base[0], *p1 = in[1] + base[1];
            int64_t s0 = sst[0][0], s1 = sst[1][0];
            for (int64_t t = 0; t < inner; t++) sum += p0[t * s0] * p1[t * s1];
        } else if (inner > 0) {
            /* odometer over the summed labels, offsets updated incrementally */
            int64_t idx[EIN_MAXL] = {0}, off[KILN_MAX_IO];
            for (int k = 0; k < c->nin; k++) off[k] = base[k];
            for (;;) {
                double p = 1;
                for (int k = 0; k < c->nin; k++) p *= in[k][off[k]];
                sum += p;
                int i = nsum - 1;
                for (; i >= 0; i--) {
                    for (int k = 0; k < c->nin; k++) off[k] += sst[k][i];
                    if (++idx[i] < ssz[i]) break;
                    for (int k = 0; k < c->nin; k++) off[k] -= sst[k][i] * ssz[i];
                    idx[i] = 0;
                }
                if (i < 0) break;
            }
        }
        acc[o] = sum;
    }
    kiln__ops1_from_f64(acc, c->out[0].dtype, c->out[0].data, on);
    kiln__free(acc);
done:
    for (int k = 0; k < c->nin; k++) kiln__free(in[k]);
    return rc;
}
static const kiln_quick_op einsum_op = {
    .ns = OPS1_NS, .name = "Einsum", .version = 12, .min_inputs = 1, .max_inputs = KILN_MAX_IO - 1,
    .num_outputs = 1, .attrs = einsum_attrs, .shape = einsum_shape, .impl = einsum_impl,
    .doc = "Einstein summation (naive contraction over labels)",
};
KILN_OP(einsum_op)

/* ---- Compress: [.., N, ..] with N data-dependent (size tensor, hidden output 1) ------------ */

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
        int r = kiln__ops1_axis("Compress", "axis", av->i, x->ndim, &ax);
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
        set_dims(&c->out[0], x->dtype, 1, &n);
    } else {
        set_dims(&c->out[0], x->dtype, x->ndim, x->dims);
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
    .ns = OPS1_NS, .name = "Compress", .version = 9, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 2, .attrs = compress_attrs, .shape = compress_shape, .impl = compress_impl,
    .doc = "slices where condition is true (output 1: their count, a size tensor)",
};
KILN_OP(compress_op)

/* ---- ReverseSequence ------------------------------------------------------------------------ */

static const kiln_attr_def revseq_attrs[] = {
    {.name = "batch_axis", .type = KILN_ATTR_INT, .def = "1"},
    {.name = "time_axis", .type = KILN_ATTR_INT, .def = "0"},
    {NULL}};
static int revseq_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    int64_t ba = kiln_attrs_int(c->attrs, "batch_axis"), ta = kiln_attrs_int(c->attrs, "time_axis");
    if (x->ndim < 2 || !((ba == 0 && ta == 1) || (ba == 1 && ta == 0)))
        return kiln_set_error(KILN_EATTR, "ReverseSequence: batch_axis/time_axis must be 0/1 or 1/0 "
                              "(found %lld/%lld) on a tensor of rank >= 2 (rank %d)",
                              (long long)ba, (long long)ta, x->ndim);
    int r = kiln__ops1_check_type(c, "ReverseSequence", 1, kiln__ops1_is_int, "int64");
    if (r) return r;
    set_dims(&c->out[0], x->dtype, x->ndim, x->dims);
    return 0;
}
static int revseq_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    int ba = (int)kiln_attrs_int(c->attrs, "batch_axis");
    int64_t T = x->dims[ba ? 0 : 1], B = x->dims[ba ? 1 : 0], inner = 1;
    for (int i = 2; i < x->ndim; i++) inner *= x->dims[i];
    size_t es = kiln_dtype_size(x->dtype), row = (size_t)inner * es;
    const char *xp = x->data;
    char *y = c->out[0].data;
    for (int64_t b = 0; b < B; b++) {
        int64_t L = kiln__ops1_get_i64(c->in[1].data, c->in[1].dtype, b);
        if (L < 0 || L > T)
            return kiln_set_error(KILN_EINVAL, "ReverseSequence: sequence_lens[%lld] = %lld is out of "
                                  "range [0, %lld]", (long long)b, (long long)L, (long long)T);
        for (int64_t t = 0; t < T; t++) {
            int64_t src = t < L ? L - 1 - t : t;
            int64_t di = ba ? t * B + b : b * T + t, si = ba ? src * B + b : b * T + src;
            memcpy(y + di * row, xp + si * row, row);
        }
    }
    return 0;
}
static const kiln_quick_op revseq_op = {
    .ns = OPS1_NS, .name = "ReverseSequence", .version = 10, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .attrs = revseq_attrs, .shape = revseq_shape, .impl = revseq_impl,
    .doc = "reverse the first sequence_lens[b] steps of each batch entry",
};
KILN_OP(revseq_op)

/* ---- Unique: Y, indices, inverse_indices, counts; U data-dependent (size tensor, output 4) ---- */

static const kiln_attr_def unique_attrs[] = {
    {.name = "axis", .type = KILN_ATTR_INT, .doc = "default: the flattened input"},
    {.name = "sorted", .type = KILN_ATTR_INT, .def = "1"},
    {NULL}};

static int unique_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    if (!kiln__ops1_is_any(x->dtype))
        return kiln_set_error(KILN_ETYPE, "Unique: type %s is not supported", kiln_dtype_name(x->dtype));
    const kiln_attr_value *av = kiln_attrs_get(c->attrs, "axis");
    const kiln_expr *len;
    int ax = -1;
    if (av && av->present) {
        int r = kiln__ops1_axis("Unique", "axis", av->i, x->ndim, &ax);
        if (r) return r;
        len = x->dims[ax];
    } else {
        len = kiln_expr_const(c->x, 1);
        for (int i = 0; i < x->ndim; i++) len = kiln_expr_mul(c->x, len, x->dims[i]);
    }
    c->out[4].dtype = KILN_DTYPE_I64;
    c->out[4].ndim = 0;
    const kiln_expr *u = kiln_shape_size_tensor(c, 4, kiln_expr_ceildiv(c->x, len, kiln_expr_const(c->x, 2)), len);
    if (ax < 0) set_dims(&c->out[0], x->dtype, 1, &u);
    else {
        set_dims(&c->out[0], x->dtype, x->ndim, x->dims);
        c->out[0].dims[ax] = u;
    }
    set_dims(&c->out[1], KILN_DTYPE_I64, 1, &u);
    set_dims(&c->out[2], KILN_DTYPE_I64, 1, &len);
    set_dims(&c->out[3], KILN_DTYPE_I64, 1, &u);
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
    kiln__ops1_to_f64(x->data, x->dtype, v, n);
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
    .ns = OPS1_NS, .name = "Unique", .version = 11, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 5, .attrs = unique_attrs, .shape = unique_shape, .impl = unique_impl,
    .doc = "unique elements or slices (output 4: their count, a size tensor)",
};
KILN_OP(unique_op)
