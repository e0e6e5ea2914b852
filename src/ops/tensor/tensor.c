/*
 * tensor.c — shape and data-movement ONNX operators: Shape, Size, Reshape,
 * Flatten, Squeeze, Unsqueeze, Identity, Dropout (inference), Cast,
 * CastLike, ConstantOfShape, Range, EyeLike, Expand, Tile, Transpose,
 * Concat, Split, Slice.
 *
 * These ops carry shape computations: their shape functions propagate the
 * symbolic values of small integer tensors (Shape -> Gather -> Concat ->
 * Reshape stays static, or symbolic in the input dims), and read the
 * values of shape-like inputs (Reshape shape, Slice starts ...) at build
 * time.  Data movement is element-size generic (no per-dtype code).
 * Reshape-like ops declare their output in place of their input.
 */
#include "ops/common/ops1.h"

#include <math.h>

static void copy_values(kiln_shape_ctx *c, int in, int out) {
    const kiln_expr *v[KILN_MAX_VALUES];
    int n = kiln__ops1_value_exprs(c->x, &c->in[in], v);
    c->out[out].nvalues = -1;
    if (n < 0) return;
    for (int i = 0; i < n; i++) c->out[out].values[i] = v[i];
    c->out[out].nvalues = n;
}

static void set_dims(kiln_desc *o, kiln_dtype t, int nd, const kiln_expr *const *d) {
    o->dtype = t;
    o->ndim = nd;
    for (int i = 0; i < nd; i++) o->dims[i] = d[i];
}

static const kiln_expr *numel_expr(kiln_exprs *x, const kiln_desc *d) {
    const kiln_expr *n = kiln_expr_const(x, 1);
    for (int i = 0; i < d->ndim; i++) n = kiln_expr_mul(x, n, d->dims[i]);
    return n;
}

/* Output 0 = input 0, same buffer. */
static int copy_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    if (y->data != x->data && x->data)
        memcpy(y->data, x->data, (size_t)kiln_tensor_numel(y) * kiln_dtype_size(y->dtype));
    return 0;
}

static int check_any(const kiln_shape_ctx *c, const char *op, int i) {
    return kiln__ops1_check_type(c, op, i, kiln__ops1_is_any, "a numeric or bool type");
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
    set_dims(o, KILN_DTYPE_I64, 1, &d);
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
static const kiln_quick_op shape_op = {
    .ns = OPS1_NS, .name = "Shape", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = shape_attrs, .shape = shape_shape, .impl = shape_impl,
    .doc = "the input's dims (start/end select a range)",
};
KILN_OP(shape_op)

static int size_shape(kiln_shape_ctx *c) {
    kiln_desc *o = &c->out[0];
    set_dims(o, KILN_DTYPE_I64, 0, NULL);
    o->values[0] = numel_expr(c->x, &c->in[0]);
    o->nvalues = 1;
    return 0;
}
static int size_impl(const kiln_call *c) {
    *(int64_t *)c->out[0].data = kiln_tensor_numel(&c->in[0]);
    return 0;
}
static const kiln_quick_op size_op = {
    .ns = OPS1_NS, .name = "Size", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .shape = size_shape, .impl = size_impl, .doc = "number of elements",
};
KILN_OP(size_op)

/* ---- Reshape ------------------------------------------------------------------------ */

static const kiln_attr_def reshape_attrs[] = {
    {.name = "allowzero", .type = KILN_ATTR_INT, .def = "0",
     .doc = "1: a 0 in shape is a zero dim, not 'copy the input dim'"},
    {NULL}};

static int reshape_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    int r = check_any(c, "Reshape", 0);
    if (r) return r;
    const kiln_expr *v[KILN_MAX_VALUES];
    int n = kiln__ops1_value_exprs(c->x, &c->in[1], v);
    if (n < 0) {
        if (kiln__ops1_desc_numel(&c->in[1]) > KILN_MAX_DIMS)
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
        if (kiln_expr_is_const(total, &a) && kiln_expr_is_const(known, &b) && a != b)
            return kiln_set_error(KILN_ESHAPE, "Reshape: input has %lld elements, shape asks for %lld",
                                  (long long)a, (long long)b);
    }
    if (nsym) {
        const kiln_expr *inf = kiln_expr_floordiv(X, total, kiln_expr_max(X, known, kiln_expr_const(X, 1)));
        for (int i = 0; i < n; i++)
            if (neg[i]) d[i] = kiln_expr_select(X, neg[i], inf, d[i]);
    }
    set_dims(&c->out[0], x->dtype, n, d);
    copy_values(c, 0, 0);
    return kiln_shape_alias(c, 0, 0);
}
static const kiln_quick_op reshape_op = {
    .ns = OPS1_NS, .name = "Reshape", .version = 5, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .attrs = reshape_attrs, .shape = reshape_shape, .impl = copy_impl,
    .doc = "same data, new dims (0 copies, -1 infers)",
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
    set_dims(&c->out[0], x->dtype, 2, d);
    copy_values(c, 0, 0);
    return kiln_shape_alias(c, 0, 0);
}
static const kiln_quick_op flatten_op = {
    .ns = OPS1_NS, .name = "Flatten", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = flatten_attrs, .shape = flatten_shape, .impl = copy_impl,
    .doc = "reshape to 2-D at axis",
};
KILN_OP(flatten_op)

/* ---- Squeeze / Unsqueeze ---------------------------------------------------------------- */

static const kiln_attr_def axes_attr[] = {
    {.name = "axes", .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64}, {NULL}};

/* axes from the attribute (input_form 0) or input 1; *n = -1: none given */
static int get_axes(kiln_shape_ctx *c, const char *op, int input_form, int64_t *axes, int64_t *n) {
    if (input_form) {
        if (!kiln__ops1_has_in(c, 1)) {
            *n = -1;
            return 0;
        }
        return kiln__ops1_need_ints(c, op, 1, "axes", axes, KILN_MAX_DIMS, n);
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
            if ((r = kiln__ops1_axis("Squeeze", "axes", axes[k], x->ndim, &a))) return r;
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
    set_dims(&c->out[0], x->dtype, nd, d);
    copy_values(c, 0, 0);
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
        if ((r = kiln__ops1_axis("Unsqueeze", "axes", axes[k], on, &a))) return r;
        if (ins[a]) return kiln_set_error(KILN_EATTR, "Unsqueeze: axis %d given twice", a);
        ins[a] = 1;
    }
    const kiln_expr *d[KILN_MAX_DIMS];
    for (int i = 0, j = 0; i < on; i++) d[i] = ins[i] ? kiln_expr_const(c->x, 1) : x->dims[j++];
    set_dims(&c->out[0], x->dtype, on, d);
    copy_values(c, 0, 0);
    return kiln_shape_alias(c, 0, 0);
}

static int squeeze1_shape(kiln_shape_ctx *c) { return squeeze_shape_(c, 0); }
static int squeeze13_shape(kiln_shape_ctx *c) { return squeeze_shape_(c, 1); }
static int unsqueeze1_shape(kiln_shape_ctx *c) { return unsqueeze_shape_(c, 0); }
static int unsqueeze13_shape(kiln_shape_ctx *c) { return unsqueeze_shape_(c, 1); }
static const kiln_quick_op squeeze1_op = {
    .ns = OPS1_NS, .name = "Squeeze", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = axes_attr, .shape = squeeze1_shape, .impl = copy_impl,
    .doc = "remove size-1 dims (axes attribute)",
};
static const kiln_quick_op squeeze13_op = {
    .ns = OPS1_NS, .name = "Squeeze", .version = 13, .min_inputs = 1, .max_inputs = 2,
    .num_outputs = 1, .shape = squeeze13_shape, .impl = copy_impl,
    .doc = "remove size-1 dims (axes input)",
};
static const kiln_quick_op unsqueeze1_op = {
    .ns = OPS1_NS, .name = "Unsqueeze", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = axes_attr, .shape = unsqueeze1_shape, .impl = copy_impl,
    .doc = "insert size-1 dims (axes attribute)",
};
static const kiln_quick_op unsqueeze13_op = {
    .ns = OPS1_NS, .name = "Unsqueeze", .version = 13, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .shape = unsqueeze13_shape, .impl = copy_impl,
    .doc = "insert size-1 dims (axes input)",
};
KILN_OP(squeeze1_op)
KILN_OP(squeeze13_op)
KILN_OP(unsqueeze1_op)
KILN_OP(unsqueeze13_op)

/* ---- Identity / Dropout ---------------------------------------------------------------- */

static int identity_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    set_dims(&c->out[0], x->dtype, x->ndim, x->dims);
    copy_values(c, 0, 0);
    return kiln_shape_alias(c, 0, 0);
}
static const kiln_quick_op identity_op = {
    .ns = OPS1_NS, .name = "Identity", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .shape = identity_shape, .impl = copy_impl, .doc = "y = x",
};
KILN_OP(identity_op)

/* Inference-mode Dropout: y = x, mask all true.  (training_mode = true is
 * not supported: kiln is an inference engine.) */
static int dropout_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    if (!kiln__ops1_is_float(x->dtype))
        return kiln_set_error(KILN_ETYPE, "Dropout: input must be a float type, found %s",
                              kiln_dtype_name(x->dtype));
    if (kiln__ops1_has_in(c, 2)) {
        int64_t t[1];
        int64_t n = kiln__ops1_const_ints(&c->in[2], t, 1);
        int zero_ratio = kiln__ops1_has_in(c, 1) && c->in[1].data &&
                         kiln__ops1_get_f64(c->in[1].data, c->in[1].dtype, 0) == 0;
        if (n == 1 && t[0] && !zero_ratio)
            return kiln_set_error(KILN_EUNSUPPORTED,
                                  "Dropout: training_mode = true is not supported (inference only)");
    }
    set_dims(&c->out[0], x->dtype, x->ndim, x->dims);
    if (c->nout > 1) set_dims(&c->out[1], KILN_DTYPE_BOOL, x->ndim, x->dims);
    return kiln_shape_alias(c, 0, 0);
}
static int dropout_impl(const kiln_call *c) {
    /* training mode is deterministic only with ratio 0 (then it is the identity) */
    if (kiln__ops1_call_has_in(c, 2) && kiln__ops1_get_i64(c->in[2].data, c->in[2].dtype, 0) &&
        !(kiln__ops1_call_has_in(c, 1) && kiln__ops1_get_f64(c->in[1].data, c->in[1].dtype, 0) == 0))
        return kiln_set_error(KILN_EUNSUPPORTED,
                              "Dropout: training_mode = true with ratio > 0 is not supported (inference only)");
    copy_impl(c);
    if (c->nout > 1 && c->out[1].data) memset(c->out[1].data, 1, (size_t)kiln_tensor_numel(&c->out[1]));
    return 0;
}
static const kiln_attr_def dropout7_attrs[] = {
    {.name = "ratio", .type = KILN_ATTR_FLOAT, .def = "0.5"}, {NULL}};
static const kiln_attr_def dropout12_attrs[] = {{.name = "seed", .type = KILN_ATTR_INT}, {NULL}};
static const kiln_quick_op dropout7_op = {
    .ns = OPS1_NS, .name = "Dropout", .version = 7, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 2, .attrs = dropout7_attrs, .shape = dropout_shape, .impl = dropout_impl,
    .doc = "inference: identity (mask all true)",
};
static const kiln_quick_op dropout12_op = {
    .ns = OPS1_NS, .name = "Dropout", .version = 12, .min_inputs = 1, .max_inputs = 3,
    .num_outputs = 2, .attrs = dropout12_attrs, .shape = dropout_shape, .impl = dropout_impl,
    .doc = "inference: identity (mask all true)",
};
KILN_OP(dropout7_op)
KILN_OP(dropout12_op)

/* ---- Cast / CastLike ------------------------------------------------------------------- */

static int cast_common(kiln_shape_ctx *c, kiln_dtype to, const char *op) {
    const kiln_desc *x = &c->in[0];
    int r = check_any(c, op, 0);
    if (r) return r;
    if (!kiln__ops1_is_any(to))
        return kiln_set_error(KILN_ETYPE, "%s: target type %s (%d) is not supported", op,
                              kiln_dtype_name(to), (int)to);
    set_dims(&c->out[0], to, x->ndim, x->dims);
    c->out[0].nvalues = -1;
    int src_int = kiln__ops1_is_int(x->dtype) || x->dtype == KILN_DTYPE_BOOL;
    if (kiln__ops1_is_int(to) && src_int) {
        copy_values(c, 0, 0);
    } else if (to == KILN_DTYPE_BOOL && src_int) { /* v != 0 */
        copy_values(c, 0, 0);
        kiln_desc *o = &c->out[0];
        for (int i = 0; i < o->nvalues; i++)
            o->values[i] = kiln_expr_sub(c->x, kiln_expr_const(c->x, 1),
                                         kiln_expr_eq(c->x, o->values[i], kiln_expr_const(c->x, 0)));
    }
    return 0;
}
static const kiln_attr_def cast_attrs[] = {
    {.name = "to", .type = KILN_ATTR_INT, .required = 1, .doc = "target ONNX data type"},
    {.name = "saturate", .type = KILN_ATTR_INT, .def = "1", .doc = "float8 only (ignored)"},
    {NULL}};
static int cast_shape(kiln_shape_ctx *c) {
    return cast_common(c, (kiln_dtype)kiln_attrs_int(c->attrs, "to"), "Cast");
}
static int cast_impl(const kiln_call *c) {
    kiln__ops1_cast(c->in[0].data, c->in[0].dtype, c->out[0].data, c->out[0].dtype,
                    kiln_tensor_numel(&c->out[0]));
    return 0;
}
static int castlike_shape(kiln_shape_ctx *c) { return cast_common(c, c->in[1].dtype, "CastLike"); }
static const kiln_quick_op cast_op = {
    .ns = OPS1_NS, .name = "Cast", .version = 6, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = cast_attrs, .shape = cast_shape, .impl = cast_impl,
    .doc = "convert to the type 'to'",
};
static const kiln_quick_op castlike_op = {
    .ns = OPS1_NS, .name = "CastLike", .version = 15, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .attrs = cast_attrs + 1, .shape = castlike_shape, .impl = cast_impl,
    .doc = "convert to the type of input 1",
};
KILN_OP(cast_op)
KILN_OP(castlike_op)

/* ---- ConstantOfShape -------------------------------------------------------------------- */

static const kiln_attr_def cos_attrs[] = {
    {.name = "value", .type = KILN_ATTR_TENSOR, .doc = "one-element tensor (default float 0)"},
    {NULL}};
static int cos_shape(kiln_shape_ctx *c) {
    const kiln_attr_value *v = kiln_attrs_get(c->attrs, "value");
    kiln_dtype t = KILN_DTYPE_F32;
    if (v && v->present) {
        if (v->count != 1)
            return kiln_set_error(KILN_EATTR, "ConstantOfShape: value must have one element, found %lld",
                                  (long long)v->count);
        t = v->elem;
        if (!kiln__ops1_is_any(t))
            return kiln_set_error(KILN_ETYPE, "ConstantOfShape: value type %s is not supported",
                                  kiln_dtype_name(t));
    }
    const kiln_expr *vals[KILN_MAX_VALUES];
    int n = kiln__ops1_value_exprs(c->x, &c->in[0], vals);
    if (n < 0)
        return kiln_set_error(KILN_EUNSUPPORTED,
                              "ConstantOfShape: input 0 'input' (the shape) must be known at build "
                              "time; its value is data-dependent here");
    if (n > KILN_MAX_DIMS)
        return kiln_set_error(KILN_ESHAPE, "ConstantOfShape: rank %d exceeds %d", n, KILN_MAX_DIMS);
    set_dims(&c->out[0], t, n, vals);
    kiln_desc *o = &c->out[0];
    int64_t numel = kiln__ops1_desc_numel(o);
    if (kiln__ops1_is_int(t) && numel >= 0 && numel <= KILN_MAX_VALUES) {
        int64_t k = v && v->present ? kiln__ops1_get_i64(v->data, t, 0) : 0;
        for (int64_t i = 0; i < numel; i++) o->values[i] = kiln_expr_const(c->x, k);
        o->nvalues = (int)numel;
    }
    return 0;
}
static int cos_impl(const kiln_call *c) {
    const kiln_attr_value *v = kiln_attrs_get(c->attrs, "value");
    kiln_tensor *y = &c->out[0];
    int64_t n = kiln_tensor_numel(y);
    size_t es = kiln_dtype_size(y->dtype);
    if (!v || !v->present) {
        memset(y->data, 0, (size_t)n * es);
        return 0;
    }
    char *d = y->data;
    for (int64_t i = 0; i < n; i++) memcpy(d + i * es, v->data, es);
    return 0;
}
static const kiln_quick_op cos_op = {
    .ns = OPS1_NS, .name = "ConstantOfShape", .version = 9, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = cos_attrs, .shape = cos_shape, .impl = cos_impl,
    .doc = "tensor of the given shape filled with value",
};
KILN_OP(cos_op)

/* ---- Range --------------------------------------------------------------------------------- */

static int range_shape(kiln_shape_ctx *c) {
    kiln_dtype t = c->in[0].dtype;
    for (int i = 0; i < 3; i++) {
        int r = kiln__ops1_check_same(c, "Range", 0, i);
        if (r) return r;
    }
    if (!kiln__ops1_is_num(t))
        return kiln_set_error(KILN_ETYPE, "Range: inputs must be numeric, found %s", kiln_dtype_name(t));
    const kiln_expr *len = NULL;
    const kiln_expr *sv[3][KILN_MAX_VALUES];
    int known = 1;
    for (int i = 0; i < 3; i++) known &= kiln__ops1_value_exprs(c->x, &c->in[i], sv[i]) == 1;
    int64_t dlt = 0;
    if (known && kiln__ops1_is_int(t) && kiln_expr_is_const(sv[2][0], &dlt) && dlt != 0) {
        len = kiln_expr_max(c->x, kiln_expr_const(c->x, 0),
                            kiln_expr_ceildiv(c->x, kiln_expr_sub(c->x, sv[1][0], sv[0][0]), sv[2][0]));
    } else if (c->in[0].data && c->in[1].data && c->in[2].data) {
        double s = kiln__ops1_get_f64(c->in[0].data, t, 0), l = kiln__ops1_get_f64(c->in[1].data, t, 0),
               d = kiln__ops1_get_f64(c->in[2].data, t, 0);
        if (d == 0) return kiln_set_error(KILN_EINVAL, "Range: delta is 0");
        double n = ceil((l - s) / d);
        len = kiln_expr_const(c->x, n > 0 ? (int64_t)n : 0);
    } else {
        return kiln_set_error(KILN_EUNSUPPORTED,
                              "Range: start, limit and delta must be known at build time (the "
                              "output length depends on them)");
    }
    set_dims(&c->out[0], t, 1, &len);
    int64_t n;
    if (known && kiln__ops1_is_int(t) && kiln_expr_is_const(len, &n) && n <= KILN_MAX_VALUES) {
        for (int64_t i = 0; i < n; i++)
            c->out[0].values[i] = kiln_expr_add(c->x, sv[0][0],
                                                kiln_expr_mul(c->x, kiln_expr_const(c->x, i), sv[2][0]));
        c->out[0].nvalues = (int)n;
    }
    return 0;
}
static int range_impl(const kiln_call *c) {
    kiln_dtype t = c->in[0].dtype;
    int64_t n = c->out[0].dims[0];
    if (kiln__ops1_is_int(t)) {
        int64_t s = kiln__ops1_get_i64(c->in[0].data, t, 0), d = kiln__ops1_get_i64(c->in[2].data, t, 0);
        int64_t buf[256];
        for (int64_t b = 0; b < n; b += 256) {
            int64_t m = n - b < 256 ? n - b : 256;
            for (int64_t i = 0; i < m; i++) buf[i] = s + (b + i) * d;
            kiln__ops1_from_i64(buf, t, (char *)c->out[0].data + b * kiln_dtype_size(t), m);
        }
    } else {
        double s = kiln__ops1_get_f64(c->in[0].data, t, 0), d = kiln__ops1_get_f64(c->in[2].data, t, 0);
        double buf[256];
        for (int64_t b = 0; b < n; b += 256) {
            int64_t m = n - b < 256 ? n - b : 256;
            /* accumulate like the reference (start + i * delta in the op's type) */
            for (int64_t i = 0; i < m; i++) buf[i] = s + (double)(b + i) * d;
            if (t == KILN_DTYPE_F32)
                for (int64_t i = 0; i < m; i++) buf[i] = (float)((float)s + (float)(b + i) * (float)d);
            kiln__ops1_from_f64(buf, t, (char *)c->out[0].data + b * kiln_dtype_size(t), m);
        }
    }
    return 0;
}
static const kiln_quick_op range_op = {
    .ns = OPS1_NS, .name = "Range", .version = 11, .min_inputs = 3, .max_inputs = 3,
    .num_outputs = 1, .shape = range_shape, .impl = range_impl,
    .doc = "start, start + delta, ... below limit",
};
KILN_OP(range_op)

/* ---- EyeLike ------------------------------------------------------------------------------- */

static const kiln_attr_def eye_attrs[] = {
    {.name = "dtype", .type = KILN_ATTR_INT, .doc = "output type (default: input's)"},
    {.name = "k", .type = KILN_ATTR_INT, .def = "0", .doc = "diagonal offset"},
    {NULL}};
static int eye_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    if (x->ndim != 2) return kiln_set_error(KILN_ESHAPE, "EyeLike: input must be 2-D, found rank %d", x->ndim);
    const kiln_attr_value *v = kiln_attrs_get(c->attrs, "dtype");
    kiln_dtype t = v && v->present ? (kiln_dtype)v->i : x->dtype;
    if (!kiln__ops1_is_any(t))
        return kiln_set_error(KILN_ETYPE, "EyeLike: type %s is not supported", kiln_dtype_name(t));
    set_dims(&c->out[0], t, 2, x->dims);
    return 0;
}
static int eye_impl(const kiln_call *c) {
    kiln_tensor *y = &c->out[0];
    int64_t k = kiln_attrs_int(c->attrs, "k"), R = y->dims[0], C = y->dims[1];
    size_t es = kiln_dtype_size(y->dtype);
    memset(y->data, 0, (size_t)(R * C) * es);
    double one = 1;
    char ob[8];
    kiln__ops1_from_f64(&one, y->dtype, ob, 1);
    for (int64_t i = 0; i < R; i++) {
        int64_t j = i + k;
        if (j >= 0 && j < C) memcpy((char *)y->data + (i * C + j) * es, ob, es);
    }
    return 0;
}
static const kiln_quick_op eye_op = {
    .ns = OPS1_NS, .name = "EyeLike", .version = 9, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = eye_attrs, .shape = eye_shape, .impl = eye_impl,
    .doc = "ones on diagonal k, zeros elsewhere",
};
KILN_OP(eye_op)

/* ---- Expand ---------------------------------------------------------------------------------- */

static int expand_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    int r = check_any(c, "Expand", 0);
    if (r) return r;
    const kiln_expr *v[KILN_MAX_VALUES];
    int n = kiln__ops1_value_exprs(c->x, &c->in[1], v);
    if (n < 0)
        return kiln_set_error(KILN_EUNSUPPORTED,
                              "Expand: input 1 'shape' must be known at build time; its value is "
                              "data-dependent here");
    if (n > KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "Expand: rank %d exceeds %d", n, KILN_MAX_DIMS);
    const kiln_expr *d[KILN_MAX_DIMS];
    int nd = kiln_shape_broadcast(c, x->dims, x->ndim, v, n, d);
    if (nd < 0) return nd;
    set_dims(&c->out[0], x->dtype, nd, d);
    /* values: broadcast of a small integer tensor */
    int64_t on = kiln__ops1_desc_numel(&c->out[0]), xd[KILN_MAX_DIMS], od[KILN_MAX_DIMS];
    const kiln_expr *xv[KILN_MAX_VALUES];
    if (on >= 0 && on <= KILN_MAX_VALUES && kiln__ops1_value_exprs(c->x, x, xv) >= 0 &&
        kiln__ops1_const_dims(x, xd) && kiln__ops1_const_dims(&c->out[0], od)) {
        for (int64_t i = 0; i < on; i++) {
            int64_t rem = i, off = 0, s = 1;
            for (int a = nd - 1; a >= 0; a--) {
                int64_t ix = rem % od[a];
                rem /= od[a];
                int j = a - (nd - x->ndim);
                if (j < 0) continue;
                off += (xd[j] == 1 ? 0 : ix) * s;
                s *= xd[j];
            }
            c->out[0].values[i] = xv[off];
        }
        c->out[0].nvalues = (int)on;
    }
    return 0;
}
/* y = x broadcast to y's dims */
static void bcast_copy(kiln_exec *e, const kiln_tensor *x, kiln_tensor *y) {
    int64_t st[KILN_MAX_DIMS], s = 1;
    for (int i = y->ndim - 1; i >= 0; i--) {
        int j = i - (y->ndim - x->ndim);
        if (j < 0) { st[i] = 0; continue; }
        st[i] = x->dims[j] == 1 ? 0 : s;
        s *= x->dims[j];
    }
    kiln__ops1_strided_copy(e, y->data, x->data, kiln_dtype_size(x->dtype), y->ndim, y->dims, st);
}
static int expand_impl(const kiln_call *c) {
    int rc = kiln__ops1_bc_check("Expand", 0, c->out[0].ndim, c->out[0].dims, c->in[0].ndim, c->in[0].dims);
    if (rc) return rc;
    bcast_copy(c->exec, &c->in[0], &c->out[0]);
    return 0;
}
static const kiln_quick_op expand_op = {
    .ns = OPS1_NS, .name = "Expand", .version = 8, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .shape = expand_shape, .impl = expand_impl,
    .doc = "broadcast to a shape",
};
KILN_OP(expand_op)

/* ---- Tile ------------------------------------------------------------------------------------ */

static int tile_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    int r = check_any(c, "Tile", 0);
    if (r) return r;
    const kiln_expr *v[KILN_MAX_VALUES];
    int n = kiln__ops1_value_exprs(c->x, &c->in[1], v);
    if (n < 0)
        return kiln_set_error(KILN_EUNSUPPORTED,
                              "Tile: input 1 'repeats' must be known at build time; its value is "
                              "data-dependent here");
    if (n != x->ndim)
        return kiln_set_error(KILN_ESHAPE, "Tile: repeats has %d elements, expected the input rank %d",
                              n, x->ndim);
    const kiln_expr *d[KILN_MAX_DIMS];
    for (int i = 0; i < n; i++) d[i] = kiln_expr_mul(c->x, x->dims[i], v[i]);
    set_dims(&c->out[0], x->dtype, n, d);
    return 0;
}
static int tile_impl(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    /* view y as [rep0, d0, rep1, d1, ...]: a strided copy with stride 0 on
     * the repeat axes */
    int64_t dims[2 * KILN_MAX_DIMS], st[2 * KILN_MAX_DIMS], s = 1;
    int nd = 2 * x->ndim;
    for (int i = x->ndim - 1; i >= 0; i--) {
        int64_t rep = x->dims[i] ? y->dims[i] / x->dims[i] : 0;
        dims[2 * i] = rep;
        st[2 * i] = 0;
        dims[2 * i + 1] = x->dims[i];
        st[2 * i + 1] = s;
        s *= x->dims[i];
    }
    if (kiln_tensor_numel(y) == 0) return 0;
    if (nd > KILN_MAX_DIMS) { /* collapse repeat-1 axes to fit the copier */
        int64_t d2[2 * KILN_MAX_DIMS], s2[2 * KILN_MAX_DIMS];
        int m = 0;
        for (int i = 0; i < nd; i++) {
            if (dims[i] == 1) continue;
            d2[m] = dims[i];
            s2[m++] = st[i];
        }
        if (m > KILN_MAX_DIMS) { /* slow fallback: element by element */
            size_t es = kiln_dtype_size(x->dtype);
            int64_t on = kiln_tensor_numel(y);
            for (int64_t o = 0; o < on; o++) {
                int64_t rem = o, off = 0, sx = 1;
                for (int i = y->ndim - 1; i >= 0; i--) {
                    off += ((rem % y->dims[i]) % x->dims[i]) * sx;
                    rem /= y->dims[i];
                    sx *= x->dims[i];
                }
                memcpy((char *)y->data + o * es, (const char *)x->data + off * es, es);
            }
            return 0;
        }
        if (m == 0) { d2[0] = 1; s2[0] = 0; m = 1; }
        kiln__ops1_strided_copy(c->exec, y->data, x->data, kiln_dtype_size(x->dtype), m, d2, s2);
        return 0;
    }
    kiln__ops1_strided_copy(c->exec, y->data, x->data, kiln_dtype_size(x->dtype), nd, dims, st);
    return 0;
}
static const kiln_quick_op tile_op = {
    .ns = OPS1_NS, .name = "Tile", .version = 6, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .shape = tile_shape, .impl = tile_impl, .doc = "repeat along each axis",
};
KILN_OP(tile_op)

/* ---- Transpose -------------------------------------------------------------------------------- */

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
    int r = check_any(c, "Transpose", 0);
    if (r || (r = get_perm(c->attrs, x->ndim, perm))) return r;
    const kiln_expr *d[KILN_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) d[i] = x->dims[perm[i]];
    set_dims(&c->out[0], x->dtype, x->ndim, d);
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
    kiln__ops1_strided_copy(c->exec, c->out[0].data, x->data, kiln_dtype_size(x->dtype), x->ndim,
                            c->out[0].dims, st);
    return 0;
}
static const kiln_quick_op transpose_op = {
    .ns = OPS1_NS, .name = "Transpose", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = transpose_attrs, .shape = transpose_shape, .impl = transpose_impl,
    .doc = "permute dims",
};
KILN_OP(transpose_op)

/* ---- Concat ---------------------------------------------------------------------------------- */

static const kiln_attr_def concat_attrs[] = {
    {.name = "axis", .type = KILN_ATTR_INT, .required = 1}, {NULL}};
static int concat_shape(kiln_shape_ctx *c) {
    const kiln_desc *x0 = &c->in[0];
    int ax, r = kiln__ops1_axis("Concat", "axis", kiln_attrs_int(c->attrs, "axis"), x0->ndim, &ax);
    if (r) return r;
    if (x0->ndim == 0) return kiln_set_error(KILN_ESHAPE, "Concat: inputs must have rank >= 1");
    const kiln_expr *d[KILN_MAX_DIMS];
    for (int i = 0; i < x0->ndim; i++) d[i] = x0->dims[i];
    for (int k = 1; k < c->nin; k++) {
        const kiln_desc *xk = &c->in[k];
        if ((r = kiln__ops1_check_same(c, "Concat", 0, k))) return r;
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
    set_dims(&c->out[0], x0->dtype, x0->ndim, d);
    /* values: 1-D concatenation of small integer tensors */
    if (x0->ndim == 1) {
        const kiln_expr *vals[KILN_MAX_VALUES], *v[KILN_MAX_VALUES];
        int tot = 0;
        for (int k = 0; k < c->nin; k++) {
            int n = kiln__ops1_value_exprs(c->x, &c->in[k], v);
            if (n < 0 || tot + n > KILN_MAX_VALUES) return 0;
            for (int i = 0; i < n; i++) vals[tot++] = v[i];
        }
        for (int i = 0; i < tot; i++) c->out[0].values[i] = vals[i];
        c->out[0].nvalues = tot;
    }
    return 0;
}
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
        if (bad || pos > y->dims[ax])
            return kiln_set_error(KILN_ESHAPE, "Concat: input %d's dims do not fit the output at run time", k);
    }
    pos = 0;
    for (int k = 0; k < c->nin; k++) {
        const kiln_tensor *x = &c->in[k];
        int64_t xrow = x->dims[ax] * inner;
        if (xrow == 0) continue;
        const char *src = x->data;
        char *dst = (char *)y->data + pos * es;
        if (outer == 1) memcpy(dst, src, (size_t)xrow * es);
        else
            for (int64_t o = 0; o < outer; o++)
                memcpy(dst + o * yrow * es, src + o * xrow * es, (size_t)xrow * es);
        pos += xrow;
    }
    return 0;
}
static const kiln_quick_op concat_op = {
    .ns = OPS1_NS, .name = "Concat", .version = 4, .min_inputs = 1, .max_inputs = KILN_MAX_IO - 1,
    .num_outputs = 1, .attrs = concat_attrs, .shape = concat_shape, .impl = concat_impl,
    .doc = "join along axis",
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
    if (input_form && kiln__ops1_has_in(c, 1)) {
        n = kiln__ops1_value_exprs(c->x, &c->in[1], v);
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
    int ax, r = kiln__ops1_axis("Split", "axis", kiln_attrs_int(c->attrs, "axis"), x->ndim, &ax);
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
    int nxv = x->ndim == 1 ? kiln__ops1_value_exprs(c->x, x, xv) : -1;
    int off = 0;
    for (int k = 0; k < c->nout; k++) {
        kiln_desc *o = &c->out[k];
        set_dims(o, x->dtype, x->ndim, x->dims);
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
    .ns = OPS1_NS, .name = "Split", .version = 2, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = SPLIT_MAX, .attrs = split2_attrs, .shape = split2_shape, .impl = split_impl,
    .doc = "split along axis (split attribute)",
};
static const kiln_quick_op split13_op = {
    .ns = OPS1_NS, .name = "Split", .version = 13, .min_inputs = 1, .max_inputs = 2,
    .num_outputs = SPLIT_MAX, .attrs = split13_attrs, .shape = split13_shape, .impl = split_impl,
    .doc = "split along axis (split input or num_outputs)",
};
KILN_OP(split2_op)
KILN_OP(split13_op)

/* ---- Slice -------------------------------------------------------------------------------------- */

static const kiln_attr_def slice1_attrs[] = {
    {.name = "starts", .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .required = 1},
    {.name = "ends", .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .required = 1},
    {.name = "axes", .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64},
    {NULL}};

typedef struct slice_p {
    int n;
    int64_t starts[KILN_MAX_DIMS], ends[KILN_MAX_DIMS], axes[KILN_MAX_DIMS], steps[KILN_MAX_DIMS];
} slice_p;

static int64_t clampi(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Effective start and length of one axis of size d (ONNX clamping rules). */
static void slice_axis(int64_t d, int64_t s, int64_t e, int64_t step, int64_t *start, int64_t *len) {
    if (s < 0) s += d;
    if (e < 0) e += d;
    if (step > 0) {
        s = clampi(s, 0, d);
        e = clampi(e, 0, d);
        *len = e > s ? (e - s + step - 1) / step : 0;
    } else {
        s = clampi(s, 0, d - 1);
        e = clampi(e, -1, d - 1);
        *len = s > e ? (s - e + (-step) - 1) / (-step) : 0;
    }
    *start = s;
}

static int slice_check(slice_p *p, int rank) {
    int seen[KILN_MAX_DIMS] = {0};
    for (int i = 0; i < p->n; i++) {
        int a;
        int r = kiln__ops1_axis("Slice", "axes", p->axes[i], rank, &a);
        if (r) return r;
        if (seen[a]) return kiln_set_error(KILN_EINVAL, "Slice: axis %d repeated", a);
        seen[a] = 1;
        p->axes[i] = a;
        if (p->steps[i] == 0) return kiln_set_error(KILN_EINVAL, "Slice: step for axis %d is 0", a);
    }
    return 0;
}

static int slice1_params(const kiln_attrs *at, int rank, slice_p *p) {
    const int64_t *s, *e, *a;
    int64_t ns = kiln_attrs_ints(at, "starts", &s), ne = kiln_attrs_ints(at, "ends", &e);
    int64_t na = kiln_attrs_ints(at, "axes", &a);
    if (ns != ne || ns < 0 || ns > rank || (na >= 0 && na != ns))
        return kiln_set_error(KILN_EATTR, "Slice: starts (%lld), ends (%lld) and axes (%lld) must "
                              "have the same length, at most the rank %d",
                              (long long)ns, (long long)ne, (long long)na, rank);
    p->n = (int)ns;
    for (int i = 0; i < p->n; i++) {
        p->starts[i] = s[i];
        p->ends[i] = e[i];
        p->axes[i] = na >= 0 ? a[i] : i;
        p->steps[i] = 1;
    }
    return slice_check(p, rank);
}

static const char *slice_in_names[5] = {"data", "starts", "ends", "axes", "steps"};

/* Slice-10 parameters from constant inputs (shape: desc values; impl: data). */
static int slice10_fill(slice_p *p, int rank, int64_t n, const int64_t *s, const int64_t *e,
                        const int64_t *a, int64_t na, const int64_t *st, int64_t nst) {
    if (n > rank || (na >= 0 && na != n) || (nst >= 0 && nst != n))
        return kiln_set_error(KILN_EINVAL, "Slice: starts, ends, axes and steps must have the same "
                              "length, at most the rank %d", rank);
    p->n = (int)n;
    for (int i = 0; i < p->n; i++) {
        p->starts[i] = s[i];
        p->ends[i] = e[i];
        p->axes[i] = na >= 0 ? a[i] : i;
        p->steps[i] = nst >= 0 ? st[i] : 1;
    }
    return slice_check(p, rank);
}

static int slice_shape_(kiln_shape_ctx *c, int v10) {
    const kiln_desc *x = &c->in[0];
    int r = check_any(c, "Slice", 0);
    if (r) return r;
    slice_p p;
    const kiln_expr *sx[KILN_MAX_VALUES] = {0}, *ex[KILN_MAX_VALUES] = {0};
    int sym = 0;
    if (!v10) {
        if ((r = slice1_params(c->attrs, x->ndim, &p))) return r;
    } else {
        int64_t v[4][KILN_MAX_DIMS], n[4] = {-1, -1, -1, -1};
        for (int i = 1; i < 5; i++) {
            if (!kiln__ops1_has_in(c, i)) {
                if (i <= 2)
                    return kiln_set_error(KILN_EINVAL, "Slice: input %d '%s' is required", i,
                                          slice_in_names[i]);
                continue;
            }
            if (i <= 2) { /* starts/ends may be symbolic (e.g. computed from Shape) */
                int k = kiln__ops1_value_exprs(c->x, &c->in[i], i == 1 ? sx : ex);
                if (k >= 0) {
                    n[i - 1] = k;
                    for (int j = 0; j < k; j++)
                        if (!kiln_expr_is_const((i == 1 ? sx : ex)[j], &v[i - 1][j])) {
                            sym = 1;
                            v[i - 1][j] = 0;
                        }
                    continue;
                }
            }
            if ((r = kiln__ops1_need_ints(c, "Slice", i, slice_in_names[i], v[i - 1], KILN_MAX_DIMS,
                                          &n[i - 1])))
                return r;
        }
        if (n[0] != n[1])
            return kiln_set_error(KILN_EINVAL, "Slice: starts has %lld elements, ends %lld",
                                  (long long)n[0], (long long)n[1]);
        if ((r = slice10_fill(&p, x->ndim, n[0], v[0], v[1], v[2], n[2], v[3], n[3]))) return r;
    }
    const kiln_expr *d[KILN_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) d[i] = x->dims[i];
    int64_t sel_start = 0, sel_len = -1, sel_step = 1;
    for (int i = 0; i < p.n; i++) {
        int a = (int)p.axes[i];
        int64_t dv, st, len;
        int64_t step = p.steps[i];
        int syms = sym && sx[i] && !kiln_expr_is_const(sx[i], &st);
        int syme = sym && ex[i] && !kiln_expr_is_const(ex[i], &st);
        int symi = syms || syme;
        if (!symi && kiln_expr_is_const(x->dims[a], &dv)) {
            slice_axis(dv, p.starts[i], p.ends[i], step, &st, &len);
            d[a] = kiln_expr_const(c->x, len);
            if (x->ndim == 1) { sel_start = st; sel_len = len; sel_step = step; }
            continue;
        }
        /* symbolic: clamp with expressions */
        kiln_exprs *X = c->x;
        const kiln_expr *D = x->dims[a], *S, *E;
        const kiln_expr *zero = kiln_expr_const(X, 0);
        if (syms) S = sx[i];
        else S = p.starts[i] < 0 ? kiln_expr_add(X, D, kiln_expr_const(X, p.starts[i]))
                                 : kiln_expr_const(X, p.starts[i]);
        if (syme) E = ex[i];
        else E = p.ends[i] < 0 ? kiln_expr_add(X, D, kiln_expr_const(X, p.ends[i]))
                               : kiln_expr_const(X, p.ends[i] > ((int64_t)1 << 40) ? ((int64_t)1 << 40)
                                                                                     : p.ends[i]);
        if (step > 0) {
            S = kiln_expr_max(X, zero, kiln_expr_min(X, D, S));
            E = kiln_expr_max(X, zero, kiln_expr_min(X, D, E));
            d[a] = kiln_expr_max(X, zero, kiln_expr_ceildiv(X, kiln_expr_sub(X, E, S),
                                                            kiln_expr_const(X, step)));
        } else {
            const kiln_expr *D1 = kiln_expr_sub(X, D, kiln_expr_const(X, 1));
            S = kiln_expr_max(X, zero, kiln_expr_min(X, D1, S));
            E = kiln_expr_max(X, kiln_expr_const(X, -1), kiln_expr_min(X, D1, E));
            d[a] = kiln_expr_max(X, zero, kiln_expr_ceildiv(X, kiln_expr_sub(X, S, E),
                                                            kiln_expr_const(X, -step)));
        }
    }
    set_dims(&c->out[0], x->dtype, x->ndim, d);
    /* values: slicing a small 1-D integer tensor with constant parameters */
    const kiln_expr *xv[KILN_MAX_VALUES];
    int nxv;
    if (x->ndim == 1 && (nxv = kiln__ops1_value_exprs(c->x, x, xv)) >= 0) {
        if (p.n == 0) { sel_start = 0; sel_len = nxv; sel_step = 1; }
        if (sel_len >= 0 && sel_len <= KILN_MAX_VALUES) {
            for (int64_t i = 0; i < sel_len; i++) c->out[0].values[i] = xv[sel_start + i * sel_step];
            c->out[0].nvalues = (int)sel_len;
        }
    }
    return 0;
}

static int slice_impl_(const kiln_call *c, int v10) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    slice_p p;
    int r;
    if (!v10) {
        r = slice1_params(c->attrs, x->ndim, &p);
    } else {
        int64_t v[4][KILN_MAX_DIMS], n[4] = {-1, -1, -1, -1};
        for (int i = 1; i < 5; i++) {
            if (!kiln__ops1_call_has_in(c, i)) continue;
            n[i - 1] = kiln_tensor_numel(&c->in[i]);
            if (n[i - 1] > KILN_MAX_DIMS)
                return kiln_set_error(KILN_EINVAL, "Slice: input %d has too many elements", i);
            kiln__ops1_to_i64(c->in[i].data, c->in[i].dtype, v[i - 1], n[i - 1]);
        }
        if (n[0] != n[1]) return kiln_set_error(KILN_EINVAL, "Slice: starts and ends differ in length");
        r = slice10_fill(&p, x->ndim, n[0], v[0], v[1], v[2], n[2], v[3], n[3]);
    }
    if (r) return r;
    int64_t xs[KILN_MAX_DIMS], st[KILN_MAX_DIMS], s = 1, base = 0;
    for (int i = x->ndim - 1; i >= 0; i--) {
        xs[i] = s;
        st[i] = s;
        s *= x->dims[i];
    }
    for (int i = 0; i < p.n; i++) {
        int a = (int)p.axes[i];
        int64_t start, len;
        slice_axis(x->dims[a], p.starts[i], p.ends[i], p.steps[i], &start, &len);
        if (len != y->dims[a])
            return kiln_set_error(KILN_ESHAPE, "Slice: axis %d: computed length %lld, output has %lld", a,
                                  (long long)len, (long long)y->dims[a]);
        if (len > 0) base += start * xs[a];
        st[a] = xs[a] * p.steps[i];
    }
    if (kiln_tensor_numel(y) == 0) return 0;
    kiln__ops1_strided_copy(c->exec, y->data, (const char *)x->data + base * (int64_t)kiln_dtype_size(x->dtype),
                            kiln_dtype_size(x->dtype), y->ndim, y->dims, st);
    return 0;
}
static int slice1_shape(kiln_shape_ctx *c) { return slice_shape_(c, 0); }
static int slice10_shape(kiln_shape_ctx *c) { return slice_shape_(c, 1); }
static int slice1_impl(const kiln_call *c) { return slice_impl_(c, 0); }
static int slice10_impl(const kiln_call *c) { return slice_impl_(c, 1); }
static const kiln_quick_op slice1_op = {
    .ns = OPS1_NS, .name = "Slice", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = slice1_attrs, .shape = slice1_shape, .impl = slice1_impl,
    .doc = "sub-tensor (starts/ends/axes attributes)",
};
static const kiln_quick_op slice10_op = {
    .ns = OPS1_NS, .name = "Slice", .version = 10, .min_inputs = 3, .max_inputs = 5,
    .num_outputs = 1, .shape = slice10_shape, .impl = slice10_impl,
    .doc = "sub-tensor (starts/ends/axes/steps inputs, negative steps)",
};
KILN_OP(slice1_op)
KILN_OP(slice10_op)
