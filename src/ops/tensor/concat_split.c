/*
 * concat_split.c — Concat and Split (opsets 2 and 13+) along an axis.
 *
 * These ops carry shape computations: their shape functions propagate the
 * symbolic values of small integer tensors (Shape -> Gather -> Concat ->
 * Reshape stays static, or symbolic in the input dims), and read the values
 * of shape-like inputs (Reshape shape, Slice starts ...) at build time.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

static const kiln_attr_def concat_attrs[] = {
    {.name = "axis", .type = KILN_ATTR_INT, .required = 1}, {NULL}};
static int concat_shape(kiln_shape_ctx *c) {
    const kiln_desc *x0 = &c->in[0];
    int ax, r = kiln__ops_axis("Concat", "axis", kiln_attrs_int(c->attrs, "axis"), x0->ndim, &ax);
    if (r) return r;
    if (x0->ndim == 0) return kiln_set_error(KILN_ESHAPE, "Concat: inputs must have rank >= 1");
    const kiln_expr *d[KILN_MAX_DIMS];
    for (int i = 0; i < x0->ndim; i++) d[i] = x0->dims[i];
    for (int k = 1; k < c->nin; k++) {
        const kiln_desc *xk = &c->in[k];
        if ((r = kiln__ops_check_same(c, "Concat", 0, k))) return r;
        if (xk->ndim != x0->ndim)
            return kiln_set_error(KILN_ESHAPE, "Concat: input %d has rank %d, input 0 has rank %d", k,
                                  xk->ndim, x0->ndim);
        for (int i = 0; i < x0->ndim; i++) {
            if (i == ax) continue;
            int64_t a, b;
            if (kiln_expr_is_const(d[i], &a) && kiln_expr_is_const(xk->dims[i], &b) && a != b)
                return kiln_set_error(KILN_ESHAPE, "Concat: input %d has dim %d = %lld, expected %lld",
                                      k, i, (long long)b, (long long)a);
            if (!kiln_expr_is_const(d[i], &a) && kiln_expr_is_const(xk->dims[i], &b)) d[i] = xk->dims[i];
        }
        d[ax] = kiln_expr_add(c->x, d[ax], xk->dims[ax]);
    }
    kiln__ops_set_dims(&c->out[0], x0->dtype, x0->ndim, d);
    /* values: 1-D concatenation of small integer tensors */
    if (x0->ndim == 1) {
        const kiln_expr *vals[KILN_MAX_VALUES], *v[KILN_MAX_VALUES];
        int tot = 0;
        for (int k = 0; k < c->nin; k++) {
            int n = kiln__ops_value_exprs(c->x, &c->in[k], v);
            if (n < 0 || tot + n > KILN_MAX_VALUES) return 0;
            for (int i = 0; i < n; i++) vals[tot++] = v[i];
        }
        for (int i = 0; i < tot; i++) c->out[0].values[i] = vals[i];
        c->out[0].nvalues = tot;
    }
    return 0;
}
/* The copy in slices: slice s of `slices` is the s-th equal part of each
 * input's own elements (its outer rows one after another), copied to where
 * it goes in Y.  Over threads (kiln__ops_par: thread t takes the
 * t-th contiguous share of the slices first) each thread copies the part of
 * every input that a producer splitting its output the same way wrote on
 * its core: PP-OCRv4 det's 9.8 MB Concat of four Resize/Add outputs took
 * 0.26 ms serially at 1 thread and 1.05 ms at 2 with the vCPUs on two dies,
 * where half of every input came from the other die's cache.  An image's
 * channels (planes of KILN__OPS_PLANE_MIN elements or more) are copied
 * plane by plane instead, thread t the t-th share of every plane
 * (kiln__ops_par_planes: the split of the convs, Resize and broadcast ops
 * that write and read such planes). */
typedef struct concat_job {
    const kiln_call *c;
    int64_t outer, inner, yrow, slices, es;
    int ax;
} concat_job;

static void concat_slices(void *ud, int64_t b, int64_t e) {
    const concat_job *j = ud;
    const kiln_call *c = j->c;
    char *dst = c->out[0].data;
    int64_t pos = 0;
    for (int k = 0; k < c->nin; k++) {
        const kiln_tensor *x = &c->in[k];
        const int64_t xrow = x->dims[j->ax] * j->inner, total = j->outer * xrow;
        const char *src = x->data;
        for (int64_t i = b * total / j->slices, i1 = e * total / j->slices; i < i1;) {
            const int64_t o = i / xrow, r = i % xrow, n = xrow - r < i1 - i ? xrow - r : i1 - i;
            memcpy(dst + (o * j->yrow + pos + r) * j->es, src + i * j->es, (size_t)(n * j->es));
            i += n;
        }
        pos += xrow;
    }
}

/* Y's flat elements [i, i1), each run from the input it comes from. */
static void concat_elems(void *ud, int64_t i, int64_t i1) {
    const concat_job *j = ud;
    const kiln_call *c = j->c;
    char *dst = c->out[0].data;
    while (i < i1) {
        const int64_t o = i / j->yrow, r = i % j->yrow;
        int64_t pos = 0, xrow = 0;
        int k = 0;
        for (; k < c->nin; k++, pos += xrow)
            if (r < pos + (xrow = c->in[k].dims[j->ax] * j->inner)) break;
        if (k == c->nin) return; /* (inputs shorter than Y: concat_impl refuses them) */
        const int64_t n = pos + xrow - r < i1 - i ? pos + xrow - r : i1 - i;
        memcpy(dst + i * j->es, (const char *)c->in[k].data + (o * xrow + r - pos) * j->es, (size_t)(n * j->es));
        i += n;
    }
}

#define CONCAT_SLICE_BYTES (32 << 10) /* a slice of Y, at least (up to 64 slices) */
static int concat_impl(const kiln_call *c) {
    kiln_tensor *y = &c->out[0];
    int ax = (int)kiln_attrs_int(c->attrs, "axis");
    if (ax < 0) ax += y->ndim;
    size_t es = kiln_dtype_size(y->dtype);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < ax; i++) outer *= y->dims[i];
    for (int i = ax + 1; i < y->ndim; i++) inner *= y->dims[i];
    int64_t yrow = y->dims[ax] * inner, pos = 0;
    for (int k = 0; k < c->nin; k++) { /* symbolic dims may disagree at run time */
        const kiln_tensor *x = &c->in[k];
        int bad = x->ndim != y->ndim;
        for (int i = 0; !bad && i < y->ndim; i++) bad = i != ax && x->dims[i] != y->dims[i];
        pos += bad ? 0 : x->dims[ax];
        if (bad || pos > y->dims[ax] || (k == c->nin - 1 && pos != y->dims[ax]))
            return kiln_set_error(KILN_ESHAPE, "Concat: input %d's dims do not fit the output at run time", k);
    }
    if (outer * yrow == 0) return 0;
    const int64_t slices = outer * yrow * (int64_t)es / CONCAT_SLICE_BYTES;
    concat_job j = {.c = c, .outer = outer, .inner = inner, .yrow = yrow, .ax = ax, .es = (int64_t)es,
                    .slices = slices < 1 ? 1 : slices > 64 ? 64 : slices};
    if (ax <= y->ndim - 3 && y->dims[y->ndim - 1] * y->dims[y->ndim - 2] >= KILN__OPS_PLANE_MIN &&
        j.slices > 1) /* an image's channels: each plane split, as its producers split theirs */
        kiln__ops_par_image(c->exec, y->ndim, y->dims, CONCAT_SLICE_BYTES / (int64_t)es, concat_elems, &j);
    else
        kiln__ops_par(c->exec, j.slices, 1, concat_slices, &j); /* (one slice, or no threads: on the caller) */
    return 0;
}
static const kiln_combo cu_any[] = {{.types = KILN_CU_T_ANY}, {0}};

static const kiln_quick_op concat_op = {
    .ns = OPS_NS, .name = "Concat", .version = 4, .min_inputs = 1, .max_inputs = KILN_MAX_IO - 1,
    .num_outputs = 1, .attrs = concat_attrs, .shape = concat_shape, .impl = concat_impl,
    .doc = "join along axis",
    .cuda_impl = kiln__cu_concat, .cuda_formats = cu_any,
};
KILN_OP(concat_op)

/* ---- Split ------------------------------------------------------------------------------------ */

/* Layers have num_outputs (SPLIT_MAX) outputs; the parts beyond the count
 * (split's length or num_outputs) are empty. */
#define SPLIT_MAX 32

static const kiln_attr_def split2_attrs[] = {
    {.name = "axis", .type = KILN_ATTR_INT, .def = "0"},
    {.name = "split", .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64},
    {.name = "num_outputs", .type = KILN_ATTR_INT, .doc = "number of parts (equal split)"},
    {NULL}};
static const kiln_attr_def split13_attrs[] = {
    {.name = "axis", .type = KILN_ATTR_INT, .def = "0"},
    {.name = "num_outputs", .type = KILN_ATTR_INT, .doc = "number of parts (equal split)"},
    {NULL}};

/* Part sizes as expressions; returns the count or a negative error. */
static int split_parts(kiln_shape_ctx *c, int input_form, const kiln_expr *d, const kiln_expr **parts) {
    const kiln_expr *v[KILN_MAX_VALUES];
    int n = -1;
    if (input_form && kiln__ops_has_in(c, 1)) {
        n = kiln__ops_value_exprs(c->x, &c->in[1], v);
        if (n < 0)
            return kiln_set_error(KILN_EUNSUPPORTED,
                                  "Split: input 1 'split' must be known at build time (at most %d parts)",
                                  KILN_MAX_VALUES);
    } else if (!input_form) {
        const int64_t *sv;
        int64_t m = kiln_attrs_ints(c->attrs, "split", &sv);
        if (m > SPLIT_MAX) return kiln_set_error(KILN_EATTR, "Split: more than %d parts", SPLIT_MAX);
        if (m >= 0) {
            for (int64_t i = 0; i < m; i++) parts[i] = kiln_expr_const(c->x, sv[i]);
            return (int)m;
        }
    }
    if (n >= 0) {
        for (int i = 0; i < n; i++) parts[i] = v[i];
        return n;
    }
    const kiln_attr_value *no = kiln_attrs_get(c->attrs, "num_outputs");
    if (!no || !no->present)
        return kiln_set_error(KILN_EATTR, "Split: neither 'split' nor 'num_outputs' is given, so the "
                              "number of parts is unknown (the ONNX importer sets num_outputs to the "
                              "node's output count)");
    if (no->i < 1 || no->i > SPLIT_MAX)
        return kiln_set_error(KILN_EATTR, "Split: num_outputs = %lld is out of range [1, %d]",
                              (long long)no->i, SPLIT_MAX);
    int k = (int)no->i;
    const kiln_expr *chunk = kiln_expr_ceildiv(c->x, d, kiln_expr_const(c->x, k));
    for (int i = 0; i < k - 1; i++) parts[i] = chunk;
    parts[k - 1] = kiln_expr_max(c->x, kiln_expr_const(c->x, 0),
                                 kiln_expr_sub(c->x, d, kiln_expr_mul(c->x, chunk, kiln_expr_const(c->x, k - 1))));
    return k;
}

static int split_shape_(kiln_shape_ctx *c, int input_form) {
    const kiln_desc *x = &c->in[0];
    int ax, r = kiln__ops_axis("Split", "axis", kiln_attrs_int(c->attrs, "axis"), x->ndim, &ax);
    if (r) return r;
    const kiln_expr *parts[SPLIT_MAX];
    int n = split_parts(c, input_form, x->dims[ax], parts);
    if (n < 0) return n;
    if (n > c->nout) return kiln_set_error(KILN_EINVAL, "Split: %d parts, at most %d outputs", n, c->nout);
    const kiln_expr *tot = kiln_expr_const(c->x, 0);
    for (int i = 0; i < n; i++) tot = kiln_expr_add(c->x, tot, parts[i]);
    int64_t a, b;
    if (kiln_expr_is_const(tot, &a) && kiln_expr_is_const(x->dims[ax], &b) && a != b)
        return kiln_set_error(KILN_ESHAPE, "Split: parts sum to %lld, but dim %d has size %lld",
                              (long long)a, ax, (long long)b);
    const kiln_expr *xv[KILN_MAX_VALUES];
    int nxv = x->ndim == 1 ? kiln__ops_value_exprs(c->x, x, xv) : -1;
    int off = 0;
    for (int k = 0; k < c->nout; k++) {
        kiln_desc *o = &c->out[k];
        kiln__ops_set_dims(o, x->dtype, x->ndim, x->dims);
        o->dims[ax] = k < n ? parts[k] : kiln_expr_const(c->x, 0);
        int64_t pk;
        if (k < n && nxv >= 0 && off >= 0 && kiln_expr_is_const(parts[k], &pk) && off + pk <= nxv) {
            for (int64_t i = 0; i < pk; i++) o->values[i] = xv[off + i];
            o->nvalues = (int)pk;
            off += (int)pk;
        } else {
            off = -1;
        }
    }
    return 0;
}
static int split_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    int ax = (int)kiln_attrs_int(c->attrs, "axis");
    if (ax < 0) ax += x->ndim;
    size_t es = kiln_dtype_size(x->dtype);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < ax; i++) outer *= x->dims[i];
    for (int i = ax + 1; i < x->ndim; i++) inner *= x->dims[i];
    int64_t xrow = x->dims[ax] * inner, pos = 0;
    for (int k = 0; k < c->nout; k++) {
        kiln_tensor *y = &c->out[k];
        if (!y->data || y->ndim != x->ndim) continue;
        int64_t yrow = y->dims[ax] * inner;
        if (yrow == 0) continue;
        if (pos + yrow > xrow)
            return kiln_set_error(KILN_ESHAPE, "Split: parts exceed the input along axis %d", ax);
        for (int64_t o = 0; o < outer; o++)
            memcpy((char *)y->data + o * yrow * es, (const char *)x->data + (o * xrow + pos) * es,
                   (size_t)yrow * es);
        pos += yrow;
    }
    return 0;
}
static int split2_shape(kiln_shape_ctx *c) { return split_shape_(c, 0); }
static int split13_shape(kiln_shape_ctx *c) { return split_shape_(c, 1); }
static const kiln_quick_op split2_op = {
    .ns = OPS_NS, .name = "Split", .version = 2, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = SPLIT_MAX, .attrs = split2_attrs, .shape = split2_shape, .impl = split_impl,
    .doc = "split along axis (split attribute)",
    .cuda_impl = kiln__cu_split, .cuda_formats = cu_any,
};
/* Split-13 (outputs variadic, a split input of another type): any type */
static int split_cuda_check(const kiln_shape_ctx *c) { return kiln__ops_cuda_types(c, "Split", KILN_CU_T_ALL); }
static const kiln_quick_op split13_op = {
    .ns = OPS_NS, .name = "Split", .version = 13, .min_inputs = 1, .max_inputs = 2,
    .num_outputs = SPLIT_MAX, .attrs = split13_attrs, .shape = split13_shape, .impl = split_impl,
    .doc = "split along axis (split input or num_outputs)",
    .cuda_impl = kiln__cu_split, .cuda_check = split_cuda_check,
};
KILN_OP(split2_op)
KILN_OP(split13_op)
