/*
 * shape_ops.c — ops that change only the shape, not the data: Shape, Size,
 * Reshape, Flatten, Squeeze, Unsqueeze, Identity.
 *
 * These ops carry shape computations: their shape functions propagate the
 * symbolic values of small integer tensors (Shape -> Gather -> Concat ->
 * Reshape stays static, or symbolic in the input dims), and read the values
 * of shape-like inputs (Reshape shape, Slice starts ...) at build time.
 * Each declares its output in place of its input (no copy when aliased).
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

static const kiln_expr *numel_expr(kiln_exprs *x, const kiln_desc *d) {
    const kiln_expr *n = kiln_expr_const(x, 1);
    for (int i = 0; i < d->ndim; i++) n = kiln_expr_mul(x, n, d->dims[i]);
    return n;
}

/* ---- Shape / Size ---------------------------------------------------------------- */

static const kiln_attr_def shape_attrs[] = {
    {.name = "start", .type = KILN_ATTR_INT, .def = "0"},
    {.name = "end", .type = KILN_ATTR_INT, .doc = "default: rank"},
    {NULL}};

static void shape_range(const kiln_attrs *a, int r, int *s, int *e) {
    int64_t st = kiln_attrs_int(a, "start");
    const kiln_attr_value *ev = kiln_attrs_get(a, "end");
    int64_t en = ev && ev->present ? ev->i : r;
    if (st < 0) st += r;
    if (en < 0) en += r;
    st = st < 0 ? 0 : st > r ? r : st;
    en = en < 0 ? 0 : en > r ? r : en;
    *s = (int)st;
    *e = (int)(en > st ? en : st);
}

static int shape_shape(kiln_shape_ctx *c) {
    int s, e;
    shape_range(c->attrs, c->in[0].ndim, &s, &e);
    kiln_desc *o = &c->out[0];
    const kiln_expr *d = kiln_expr_const(c->x, e - s);
    kiln__ops_set_dims(o, KILN_DTYPE_I64, 1, &d);
    for (int i = s; i < e; i++) o->values[i - s] = c->in[0].dims[i];
    o->nvalues = e - s;
    return 0;
}
static int shape_impl(const kiln_call *c) {
    int s, e;
    shape_range(c->attrs, c->in[0].ndim, &s, &e);
    int64_t *y = c->out[0].data;
    for (int i = s; i < e; i++) y[i - s] = c->in[0].dims[i];
    return 0;
}
/* CUDA: the dims are the host's; a kernel writes them (copy_cuda.c), so a
 * shape-only layer needs neither a copy of its input to the host nor a
 * CPU layer between GPU layers. */
static int shape_cuda(const kiln_call *c) {
    int s, e;
    shape_range(c->attrs, c->in[0].ndim, &s, &e);
    return kiln__cu_put_i64(c, e - s, c->in[0].dims + s);
}
static int size_cuda(const kiln_call *c) {
    int64_t n = kiln_tensor_numel(&c->in[0]);
    return kiln__cu_put_i64(c, 1, &n);
}
static const kiln_combo cu_dims[] = {{.types = KILN_CU_T_ALL ", INT64"}, {0}};
static const kiln_quick_op shape_op = {
    .ns = OPS_NS, .name = "Shape", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = shape_attrs, .shape = shape_shape, .impl = shape_impl,
    .doc = "the input's dims (start/end select a range)",
    .cuda_impl = shape_cuda, .cuda_formats = cu_dims,
};
KILN_OP(shape_op)

static int size_shape(kiln_shape_ctx *c) {
    kiln_desc *o = &c->out[0];
    kiln__ops_set_dims(o, KILN_DTYPE_I64, 0, NULL);
    o->values[0] = numel_expr(c->x, &c->in[0]);
    o->nvalues = 1;
    return 0;
}
static int size_impl(const kiln_call *c) {
    *(int64_t *)c->out[0].data = kiln_tensor_numel(&c->in[0]);
    return 0;
}
static const kiln_quick_op size_op = {
    .ns = OPS_NS, .name = "Size", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .shape = size_shape, .impl = size_impl, .doc = "number of elements",
    .cuda_impl = size_cuda, .cuda_formats = cu_dims,
};
KILN_OP(size_op)

/* ---- Reshape ------------------------------------------------------------------------ */

static const kiln_attr_def reshape_attrs[] = {
    {.name = "allowzero", .type = KILN_ATTR_INT, .def = "0",
     .doc = "1: a 0 in shape is a zero dim, not 'copy the input dim'"},
    {NULL}};

static int reshape_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    int r = kiln__ops_check_any(c, "Reshape", 0);
    if (r) return r;
    const kiln_expr *v[KILN_MAX_VALUES];
    int n = kiln__ops_value_exprs(c->x, &c->in[1], v);
    if (n < 0) {
        if (kiln__ops_desc_numel(&c->in[1]) > KILN_MAX_DIMS)
            return kiln_set_error(KILN_ESHAPE, "Reshape: input 1 'shape' has more than %d elements",
                                  KILN_MAX_DIMS);
        return kiln_set_error(KILN_EUNSUPPORTED,
                              "Reshape: input 1 'shape' must be known at build time (a constant or "
                              "computed from shapes); its value is data-dependent here");
    }
    if (n > KILN_MAX_DIMS)
        return kiln_set_error(KILN_ESHAPE, "Reshape: shape has %d elements, at most %d supported", n,
                              KILN_MAX_DIMS);
    int allowzero = (int)kiln_attrs_int(c->attrs, "allowzero");
    kiln_exprs *X = c->x;
    const kiln_expr *d[KILN_MAX_DIMS], *neg[KILN_MAX_DIMS];
    int infer = -1, nsym = 0;
    const kiln_expr *known = kiln_expr_const(X, 1);
    for (int i = 0; i < n; i++) {
        int64_t k;
        neg[i] = NULL;
        if (kiln_expr_is_const(v[i], &k)) {
            if (k == -1) {
                if (infer >= 0)
                    return kiln_set_error(KILN_ESHAPE, "Reshape: shape has more than one -1 (at %d and %d)",
                                          infer, i);
                infer = i;
                d[i] = NULL;
                continue;
            }
            if (k < -1)
                return kiln_set_error(KILN_ESHAPE, "Reshape: shape[%d] = %lld is invalid", i, (long long)k);
            if (k == 0 && !allowzero) {
                if (i >= x->ndim)
                    return kiln_set_error(KILN_ESHAPE,
                                          "Reshape: shape[%d] = 0 copies input dim %d, but the input has rank %d",
                                          i, i, x->ndim);
                d[i] = x->dims[i];
            } else {
                d[i] = v[i];
            }
            known = kiln_expr_mul(X, known, d[i]);
        } else {
            /* a value known only at run time (e.g. a shape input): it may
             * still be 0 (copy) or -1 (infer), so select on it */
            d[i] = v[i];
            if (!allowzero && i < x->ndim)
                d[i] = kiln_expr_select(X, kiln_expr_eq(X, v[i], kiln_expr_const(X, 0)), x->dims[i], v[i]);
            neg[i] = kiln_expr_eq(X, v[i], kiln_expr_const(X, -1));
            known = kiln_expr_mul(X, known, kiln_expr_select(X, neg[i], kiln_expr_const(X, 1), d[i]));
            nsym++;
        }
    }
    const kiln_expr *total = numel_expr(X, x);
    if (infer >= 0) {
        int64_t kv;
        if (kiln_expr_is_const(known, &kv) && kv == 0)
            return kiln_set_error(KILN_ESHAPE, "Reshape: cannot infer -1 with a zero dim in shape");
        d[infer] = kiln_expr_floordiv(X, total, kiln_expr_max(X, known, kiln_expr_const(X, 1)));
    } else {
        int64_t a, b;
        if (kiln_expr_is_const(total, &a) && kiln_expr_is_const(known, &b) && a != b) {
            char dims[8 * 24] = "";
            for (int i = 0, off = 0; i < n && off < (int)sizeof dims; i++) {
                int64_t di;
                off += kiln_expr_is_const(d[i], &di)
                           ? snprintf(dims + off, sizeof dims - (size_t)off, "%s%lld", i ? ", " : "", (long long)di)
                           : snprintf(dims + off, sizeof dims - (size_t)off, "%s?", i ? ", " : "");
            }
            return kiln_set_error(KILN_ESHAPE, "Reshape: input has %lld elements, shape [%s] asks for %lld",
                                  (long long)a, dims, (long long)b);
        }
    }
    if (nsym) {
        const kiln_expr *inf = kiln_expr_floordiv(X, total, kiln_expr_max(X, known, kiln_expr_const(X, 1)));
        for (int i = 0; i < n; i++)
            if (neg[i]) d[i] = kiln_expr_select(X, neg[i], inf, d[i]);
    }
    kiln__ops_set_dims(&c->out[0], x->dtype, n, d);
    kiln__ops_copy_values(c, 0, 0);
    return kiln_shape_alias(c, 0, 0);
}
/* A shape known only at run time (a shape input, not a constant) is checked
 * here, where its values are: the shape function's dims then hold selects
 * on them that no build-time check can judge.  Before this, [5, 7],
 * [1000, 1000] or [-1, -1] on 6 elements returned rc 0 with the output
 * padded from stale memory. */
static int reshape_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0], *s = &c->in[1];
    int64_t n = kiln_tensor_numel(s), v[KILN_MAX_DIMS];
    if (s->data && n >= 0 && n <= KILN_MAX_DIMS && kiln__ops_is_int(s->dtype)) {
        kiln__ops_to_i64(s->data, s->dtype, v, n);
        for (int64_t i = 0, infer = -1; i < n; i++) {
            if (v[i] < -1)
                return kiln_set_error(KILN_ESHAPE, "Reshape: shape[%lld] = %lld is invalid (expected >= -1)",
                                      (long long)i, (long long)v[i]);
            if (v[i] == -1 && infer >= 0)
                return kiln_set_error(KILN_ESHAPE, "Reshape: shape has more than one -1 (at %lld and %lld)",
                                      (long long)infer, (long long)i);
            if (v[i] == -1) infer = i;
        }
    }
    int64_t nx = kiln_tensor_numel(x), ny = kiln_tensor_numel(&c->out[0]);
    if (nx != ny) {
        char dims[8 * 24] = "";
        for (int i = 0, off = 0; i < c->out[0].ndim && off < (int)sizeof dims; i++)
            off += snprintf(dims + off, sizeof dims - (size_t)off, "%s%lld", i ? ", " : "",
                            (long long)c->out[0].dims[i]);
        return kiln_set_error(KILN_ESHAPE, "Reshape: input has %lld elements, shape [%s] asks for %lld",
                              (long long)nx, dims, (long long)ny);
    }
    return kiln__ops_copy_input(c);
}

/* CUDA: a device copy (copy_cuda.c) of any fixed-size type. */
static const kiln_combo cu_any[] = {{.types = KILN_CU_T_ANY}, {0}};
static const kiln_combo cu_shaped[] = {{.types = KILN_CU_T_ANY ", INT64, " KILN_CU_T_ANY}, {0}};
static const kiln_quick_op reshape_op = {
    .ns = OPS_NS, .name = "Reshape", .version = 5, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .attrs = reshape_attrs, .shape = reshape_shape, .impl = reshape_impl,
    .doc = "same data, new dims (0 copies, -1 infers)",
    .cuda_impl = kiln__cu_copy_input, .cuda_formats = cu_shaped,
};
KILN_OP(reshape_op)

/* ---- Flatten -------------------------------------------------------------------------- */

static const kiln_attr_def flatten_attrs[] = {{.name = "axis", .type = KILN_ATTR_INT, .def = "1"},
                                              {NULL}};
static int flatten_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    int64_t ax = kiln_attrs_int(c->attrs, "axis");
    if (ax < -x->ndim || ax > x->ndim)
        return kiln_set_error(KILN_EATTR, "Flatten: axis = %lld is out of range [%d, %d]",
                              (long long)ax, -x->ndim, x->ndim);
    if (ax < 0) ax += x->ndim;
    const kiln_expr *d[2] = {kiln_expr_const(c->x, 1), kiln_expr_const(c->x, 1)};
    for (int i = 0; i < x->ndim; i++) d[i >= ax] = kiln_expr_mul(c->x, d[i >= ax], x->dims[i]);
    kiln__ops_set_dims(&c->out[0], x->dtype, 2, d);
    kiln__ops_copy_values(c, 0, 0);
    return kiln_shape_alias(c, 0, 0);
}
static const kiln_quick_op flatten_op = {
    .ns = OPS_NS, .name = "Flatten", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = flatten_attrs, .shape = flatten_shape, .impl = kiln__ops_copy_input,
    .doc = "reshape to 2-D at axis",
    .cuda_impl = kiln__cu_copy_input, .cuda_formats = cu_any,
};
KILN_OP(flatten_op)

/* ---- Squeeze / Unsqueeze ---------------------------------------------------------------- */

static const kiln_attr_def axes_attr[] = {
    {.name = "axes", .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64}, {NULL}};

/* axes from the attribute (input_form 0) or input 1; *n = -1: none given */
static int get_axes(kiln_shape_ctx *c, const char *op, int input_form, int64_t *axes, int64_t *n) {
    if (input_form) {
        if (!kiln__ops_has_in(c, 1)) {
            *n = -1;
            return 0;
        }
        return kiln__ops_need_ints(c, op, 1, "axes", axes, KILN_MAX_DIMS, n);
    }
    const int64_t *v;
    *n = kiln_attrs_ints(c->attrs, "axes", &v);
    if (*n > KILN_MAX_DIMS) return kiln_set_error(KILN_EATTR, "%s: too many axes", op);
    for (int64_t i = 0; i < *n; i++) axes[i] = v[i];
    return 0;
}

static int squeeze_shape_(kiln_shape_ctx *c, int input_form) {
    const kiln_desc *x = &c->in[0];
    int64_t axes[KILN_MAX_DIMS], n;
    int r = get_axes(c, "Squeeze", input_form, axes, &n);
    if (r) return r;
    int drop[KILN_MAX_DIMS] = {0};
    if (n <= 0) {
        for (int i = 0; i < x->ndim; i++) {
            int64_t v;
            drop[i] = kiln_expr_is_const(x->dims[i], &v) && v == 1;
        }
    } else {
        for (int64_t k = 0; k < n; k++) {
            int a;
            if ((r = kiln__ops_axis("Squeeze", "axes", axes[k], x->ndim, &a))) return r;
            int64_t v;
            if (kiln_expr_is_const(x->dims[a], &v) && v != 1)
                return kiln_set_error(KILN_ESHAPE, "Squeeze: dim %d has size %lld, expected 1", a,
                                      (long long)v);
            drop[a] = 1;
        }
    }
    const kiln_expr *d[KILN_MAX_DIMS];
    int nd = 0;
    for (int i = 0; i < x->ndim; i++)
        if (!drop[i]) d[nd++] = x->dims[i];
    kiln__ops_set_dims(&c->out[0], x->dtype, nd, d);
    kiln__ops_copy_values(c, 0, 0);
    return kiln_shape_alias(c, 0, 0);
}

static int unsqueeze_shape_(kiln_shape_ctx *c, int input_form) {
    const kiln_desc *x = &c->in[0];
    int64_t axes[KILN_MAX_DIMS], n;
    int r = get_axes(c, "Unsqueeze", input_form, axes, &n);
    if (r) return r;
    if (n < 0) return kiln_set_error(KILN_EINVAL, "Unsqueeze: axes are required");
    int on = x->ndim + (int)n;
    if (on > KILN_MAX_DIMS)
        return kiln_set_error(KILN_ESHAPE, "Unsqueeze: output rank %d exceeds %d", on, KILN_MAX_DIMS);
    int ins[KILN_MAX_DIMS] = {0};
    for (int64_t k = 0; k < n; k++) {
        int a;
        if ((r = kiln__ops_axis("Unsqueeze", "axes", axes[k], on, &a))) return r;
        if (ins[a]) return kiln_set_error(KILN_EATTR, "Unsqueeze: axis %d given twice", a);
        ins[a] = 1;
    }
    const kiln_expr *d[KILN_MAX_DIMS];
    for (int i = 0, j = 0; i < on; i++) d[i] = ins[i] ? kiln_expr_const(c->x, 1) : x->dims[j++];
    kiln__ops_set_dims(&c->out[0], x->dtype, on, d);
    kiln__ops_copy_values(c, 0, 0);
    return kiln_shape_alias(c, 0, 0);
}

static int squeeze1_shape(kiln_shape_ctx *c) { return squeeze_shape_(c, 0); }
static int squeeze13_shape(kiln_shape_ctx *c) { return squeeze_shape_(c, 1); }
static int unsqueeze1_shape(kiln_shape_ctx *c) { return unsqueeze_shape_(c, 0); }
static int unsqueeze13_shape(kiln_shape_ctx *c) { return unsqueeze_shape_(c, 1); }
static const kiln_quick_op squeeze1_op = {
    .ns = OPS_NS, .name = "Squeeze", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = axes_attr, .shape = squeeze1_shape, .impl = kiln__ops_copy_input,
    .doc = "remove size-1 dims (axes attribute)",
    .cuda_impl = kiln__cu_copy_input, .cuda_formats = cu_any,
};
/* Squeeze-13 / Unsqueeze-13 (an axes input of another type): any type.
 * Their formats let an --fp16 build keep the data in FP16 (the logical
 * types alone put a cast before and after each one: BERT's QKV split);
 * the one-slot row serves Squeeze-13 without axes. */
static int squeeze_cuda_check(const kiln_shape_ctx *c) { return kiln__ops_cuda_types(c, "Squeeze", KILN_CU_T_ALL); }
static int unsqueeze_cuda_check(const kiln_shape_ctx *c) {
    return kiln__ops_cuda_types(c, "Unsqueeze", KILN_CU_T_ALL);
}
static const kiln_combo cu_axes_any[] = {{.types = KILN_CU_T_ALL ", INT64, " KILN_CU_T_ALL}, {.types = KILN_CU_T_ALL},
                                         {0}};
static const kiln_quick_op squeeze13_op = {
    .ns = OPS_NS, .name = "Squeeze", .version = 13, .min_inputs = 1, .max_inputs = 2,
    .num_outputs = 1, .shape = squeeze13_shape, .impl = kiln__ops_copy_input,
    .doc = "remove size-1 dims (axes input)",
    .cuda_impl = kiln__cu_copy_input, .cuda_check = squeeze_cuda_check, .cuda_formats = cu_axes_any,
};
static const kiln_quick_op unsqueeze1_op = {
    .ns = OPS_NS, .name = "Unsqueeze", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = axes_attr, .shape = unsqueeze1_shape, .impl = kiln__ops_copy_input,
    .doc = "insert size-1 dims (axes attribute)",
    .cuda_impl = kiln__cu_copy_input, .cuda_formats = cu_any,
};
static const kiln_quick_op unsqueeze13_op = {
    .ns = OPS_NS, .name = "Unsqueeze", .version = 13, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .shape = unsqueeze13_shape, .impl = kiln__ops_copy_input,
    .doc = "insert size-1 dims (axes input)",
    .cuda_impl = kiln__cu_copy_input, .cuda_check = unsqueeze_cuda_check, .cuda_formats = cu_axes_any,
};
KILN_OP(squeeze1_op)
KILN_OP(squeeze13_op)
KILN_OP(unsqueeze1_op)
KILN_OP(unsqueeze13_op)

/* ---- Identity / Dropout ---------------------------------------------------------------- */

static int identity_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    kiln__ops_set_dims(&c->out[0], x->dtype, x->ndim, x->dims);
    kiln__ops_copy_values(c, 0, 0);
    return kiln_shape_alias(c, 0, 0);
}
static const kiln_quick_op identity_op = {
    .ns = OPS_NS, .name = "Identity", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .shape = identity_shape, .impl = kiln__ops_copy_input, .doc = "y = x",
    .cuda_impl = kiln__cu_copy_input, .cuda_formats = cu_any,
};
KILN_OP(identity_op)
