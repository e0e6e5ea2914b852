/*
 * slice.c — Slice (opset 1: attributes; 10+: inputs) with ONNX clamping
 * rules for starts/ends and negative steps; starts/ends may be symbolic
 * (e.g. computed from Shape).
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

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
        int r = kiln__ops_axis("Slice", "axes", p->axes[i], rank, &a);
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
    int r = kiln__ops_check_any(c, "Slice", 0);
    if (r) return r;
    slice_p p;
    const kiln_expr *sx[KILN_MAX_VALUES] = {0}, *ex[KILN_MAX_VALUES] = {0};
    int sym = 0;
    if (!v10) {
        if ((r = slice1_params(c->attrs, x->ndim, &p))) return r;
    } else {
        int64_t v[4][KILN_MAX_DIMS], n[4] = {-1, -1, -1, -1};
        for (int i = 1; i < 5; i++) {
            if (!kiln__ops_has_in(c, i)) {
                if (i <= 2)
                    return kiln_set_error(KILN_EINVAL, "Slice: input %d '%s' is required", i,
                                          slice_in_names[i]);
                continue;
            }
            if (i <= 2) { /* starts/ends may be symbolic (e.g. computed from Shape) */
                int k = kiln__ops_value_exprs(c->x, &c->in[i], i == 1 ? sx : ex);
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
            if ((r = kiln__ops_need_ints(c, "Slice", i, slice_in_names[i], v[i - 1], KILN_MAX_DIMS,
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
    kiln__ops_set_dims(&c->out[0], x->dtype, x->ndim, d);
    /* values: slicing a small 1-D integer tensor with constant parameters */
    const kiln_expr *xv[KILN_MAX_VALUES];
    int nxv;
    if (x->ndim == 1 && (nxv = kiln__ops_value_exprs(c->x, x, xv)) >= 0) {
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
            if (!kiln__ops_call_has_in(c, i)) continue;
            n[i - 1] = kiln_tensor_numel(&c->in[i]);
            if (n[i - 1] > KILN_MAX_DIMS)
                return kiln_set_error(KILN_EINVAL, "Slice: input %d has too many elements", i);
            kiln__ops_to_i64(c->in[i].data, c->in[i].dtype, v[i - 1], n[i - 1]);
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
    kiln__ops_strided_copy(c->exec, y->data, (const char *)x->data + base * (int64_t)kiln_dtype_size(x->dtype),
                            kiln_dtype_size(x->dtype), y->ndim, y->dims, st);
    return 0;
}
static int slice1_shape(kiln_shape_ctx *c) { return slice_shape_(c, 0); }
static int slice10_shape(kiln_shape_ctx *c) { return slice_shape_(c, 1); }
static int slice1_impl(const kiln_call *c) { return slice_impl_(c, 0); }
static int slice10_impl(const kiln_call *c) { return slice_impl_(c, 1); }
static const kiln_combo cu_any[] = {{.types = KILN_CU_T_ANY}, {0}};
/* Slice-10+ (index inputs of another type): any type, moved by size */
static int slice_cuda_check(const kiln_shape_ctx *c) { return kiln__ops_cuda_types(c, "Slice", KILN_CU_T_ALL); }

static const kiln_quick_op slice1_op = {
    .ns = OPS_NS, .name = "Slice", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = slice1_attrs, .shape = slice1_shape, .impl = slice1_impl,
    .doc = "sub-tensor (starts/ends/axes attributes)",
    .cuda_impl = kiln__cu_slice, .cuda_formats = cu_any,
};
static const kiln_quick_op slice10_op = {
    .ns = OPS_NS, .name = "Slice", .version = 10, .min_inputs = 3, .max_inputs = 5,
    .num_outputs = 1, .shape = slice10_shape, .impl = slice10_impl,
    .doc = "sub-tensor (starts/ends/axes/steps inputs, negative steps)",
    .cuda_impl = kiln__cu_slice, .cuda_host_inputs = 0x1e, /* starts ends axes steps */
    .cuda_check = slice_cuda_check,
};
KILN_OP(slice1_op)
KILN_OP(slice10_op)
