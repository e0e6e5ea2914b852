/*
 * reduce.c — ONNX reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/
 * LogSumExp/SumSquare (axes as an attribute up to opset 17, as an input
 * from opset 13 for ReduceSum and 18 for the others, keepdims,
 * noop_with_empty_axes) and ArgMax/ArgMin (keepdims, select_last_index).
 *
 * Kernels read the input in memory order, converted block-wise to double,
 * and accumulate into one double per output element; dims are coalesced
 * into alternating kept/reduced groups so a reduction over the last axes
 * is a sum over contiguous runs and one over leading axes is a vector
 * accumulate.  Independent output slices run on the thread pool.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

#include <math.h>

typedef enum rop {
    R_SUM, R_MEAN, R_MAX, R_MIN, R_PROD, R_L1, R_L2, R_LOGSUM, R_LOGSUMEXP, R_SUMSQ
} rop;

/* ---- axes ------------------------------------------------------------------- */

/* Fills mask[rank] (1 = reduced).  Returns 0, or 1 for "identity" (empty
 * axes with noop_with_empty_axes), or a negative error. */
static int red_mask(const char *op, int rank, const int64_t *axes, int64_t naxes, int noop,
                    int *mask) {
    for (int i = 0; i < rank; i++) mask[i] = naxes == 0 && !noop;
    if (naxes == 0) return noop ? 1 : 0;
    for (int64_t k = 0; k < naxes; k++) {
        int a;
        int r = kiln__ops_axis(op, "axes", axes[k], rank, &a);
        if (r) return r;
        if (rank == 0) continue;
        mask[a] = 1;
    }
    return 0;
}

static int attr_noop(const kiln_attrs *a) {
    const kiln_attr_value *v = kiln_attrs_get(a, "noop_with_empty_axes");
    return v && v->present ? (int)v->i : 0;
}

/* Axes at build time: the attribute (input_axes = 0) or input 1. */
static int red_axes_shape(const kiln_shape_ctx *c, const char *op, int input_axes,
                          int64_t *axes, int64_t *n) {
    *n = 0;
    if (input_axes) {
        if (!kiln__ops_has_in(c, 1)) return 0;
        if (kiln__ops_desc_numel(&c->in[1]) == 0) return 0;
        return kiln__ops_need_ints(c, op, 1, "axes", axes, KILN_MAX_DIMS * 2, n);
    }
    const int64_t *v;
    int64_t cnt = kiln_attrs_ints(c->attrs, "axes", &v);
    if (cnt > KILN_MAX_DIMS * 2)
        return kiln_set_error(KILN_EATTR, "%s: too many axes (%lld)", op, (long long)cnt);
    for (int64_t i = 0; i < cnt; i++) axes[i] = v[i];
    *n = cnt < 0 ? 0 : cnt;
    return 0;
}

static int red_axes_call(const kiln_call *c, int input_axes, int64_t *axes, int64_t *n) {
    *n = 0;
    if (input_axes) {
        if (!kiln__ops_call_has_in(c, 1)) return 0;
        int64_t m = kiln_tensor_numel(&c->in[1]);
        if (m > KILN_MAX_DIMS * 2) return kiln_set_error(KILN_EINVAL, "too many axes (%lld)", (long long)m);
        kiln__ops_to_i64(c->in[1].data, c->in[1].dtype, axes, m);
        *n = m;
        return 0;
    }
    const int64_t *v;
    int64_t cnt = kiln_attrs_ints(c->attrs, "axes", &v);
    for (int64_t i = 0; i < cnt && i < KILN_MAX_DIMS * 2; i++) axes[i] = v[i];
    *n = cnt < 0 ? 0 : cnt;
    return 0;
}

static int red_shape(kiln_shape_ctx *c, const char *op, rop o, int input_axes) {
    const kiln_desc *x = &c->in[0];
    if (!kiln__ops_is_num(x->dtype))
        return kiln_set_error(KILN_ETYPE, "%s: input must be numeric, found %s", op,
                              kiln_dtype_name(x->dtype));
    int64_t axes[KILN_MAX_DIMS * 2], n;
    int r = red_axes_shape(c, op, input_axes, axes, &n);
    if (r) return r;
    int mask[KILN_MAX_DIMS];
    int ident = red_mask(op, x->ndim, axes, n, attr_noop(c->attrs), mask);
    if (ident < 0) return ident;
    int keep = (int)kiln_attrs_int(c->attrs, "keepdims");
    kiln_desc *y = &c->out[0];
    y->dtype = x->dtype;
    y->ndim = 0;
    y->nvalues = -1;
    for (int i = 0; i < x->ndim; i++) {
        if (!mask[i]) y->dims[y->ndim++] = x->dims[i];
        else if (keep) y->dims[y->ndim++] = kiln_expr_const(c->x, 1);
    }
    /* values: Sum/Prod/Max/Min over a whole small 1-D integer tensor */
    const kiln_expr *v[KILN_MAX_VALUES];
    int nv;
    if (ident == 1) {
        if ((nv = kiln__ops_value_exprs(c->x, x, v)) >= 0) {
            for (int i = 0; i < nv; i++) y->values[i] = v[i];
            y->nvalues = nv;
        }
    } else if (x->ndim == 1 && mask[0] && kiln__ops_is_int(x->dtype) &&
               (o == R_SUM || o == R_PROD || o == R_MAX || o == R_MIN) &&
               (nv = kiln__ops_value_exprs(c->x, x, v)) > 0) {
        const kiln_expr *acc = v[0];
        for (int i = 1; i < nv; i++)
            acc = o == R_SUM ? kiln_expr_add(c->x, acc, v[i])
                : o == R_PROD ? kiln_expr_mul(c->x, acc, v[i])
                : o == R_MAX ? kiln_expr_max(c->x, acc, v[i]) : kiln_expr_min(c->x, acc, v[i]);
        y->values[0] = acc;
        y->nvalues = 1;
    }
    return 0;
}

/* ---- kernel ------------------------------------------------------------------ */

typedef struct red_job {
    rop op;
    const char *x;
    kiln_dtype t;
    size_t es;
    int ng;
    int64_t g[KILN_MAX_DIMS];   /* coalesced dims */
    int red[KILN_MAX_DIMS];     /* 1 = reduced group */
    int64_t sx[KILN_MAX_DIMS];  /* input strides (elements) */
    int64_t so[KILN_MAX_DIMS];  /* accumulator strides (0 for reduced) */
    double *acc;
} red_job;

#define RBLK 1024

/* Sum of f(v[i]) with 8 independent partial sums (breaks the add latency
 * chain and lets the compiler use vector registers). */
#define PSUM(F)                                                               \
    do {                                                                      \
        double p_[8] = {0, 0, 0, 0, 0, 0, 0, 0};                              \
        int64_t i_ = 0;                                                       \
        for (; i_ + 8 <= n; i_ += 8)                                          \
            for (int j_ = 0; j_ < 8; j_++) p_[j_] += F(v[i_ + j_]);           \
        double s_ = ((p_[0] + p_[1]) + (p_[2] + p_[3])) + ((p_[4] + p_[5]) + (p_[6] + p_[7])); \
        for (; i_ < n; i_++) s_ += F(v[i_]);                                  \
        acc[0] += s_;                                                         \
    } while (0)
#define F_ID(x) (x)
#define F_SQ(x) ((x) * (x))

#define RED_RUN_DEF(NAME, VT)                                                 \
static inline void NAME(rop op, double *acc, const VT *v, int64_t n, int vec) {       \
    /* vec: acc[i] op= v[i]; else acc[0] op= all v */                                 \
    switch (op) {                                                                     \
    case R_SUM: case R_MEAN: case R_LOGSUM:                                           \
        if (vec) for (int64_t i = 0; i < n; i++) acc[i] += v[i];                      \
        else PSUM(F_ID);                                                              \
        break;                                                                        \
    case R_SUMSQ: case R_L2:                                                          \
        if (vec) for (int64_t i = 0; i < n; i++) acc[i] += v[i] * v[i];               \
        else PSUM(F_SQ);                                                              \
        break;                                                                        \
    case R_L1:                                                                        \
        if (vec) for (int64_t i = 0; i < n; i++) acc[i] += fabs(v[i]);                \
        else { double s = 0; for (int64_t i = 0; i < n; i++) s += fabs(v[i]); acc[0] += s; }\
        break;                                                                        \
    case R_LOGSUMEXP:                                                                 \
        if (vec) for (int64_t i = 0; i < n; i++) acc[i] += exp(v[i]);                 \
        else { double s = 0; for (int64_t i = 0; i < n; i++) s += exp(v[i]); acc[0] += s; }\
        break;                                                                        \
    case R_PROD:                                                                      \
        if (vec) for (int64_t i = 0; i < n; i++) acc[i] *= v[i];                      \
        else { double s = 1; for (int64_t i = 0; i < n; i++) s *= v[i]; acc[0] *= s; }\
        break;                                                                        \
    case R_MAX:                                                                       \
        if (vec) { for (int64_t i = 0; i < n; i++) if (v[i] > acc[i] || v[i] != v[i]) acc[i] = v[i]; }\
        else for (int64_t i = 0; i < n; i++) if (v[i] > acc[0] || v[i] != v[i]) acc[0] = v[i];\
        break;                                                                        \
    case R_MIN:                                                                       \
        if (vec) { for (int64_t i = 0; i < n; i++) if (v[i] < acc[i] || v[i] != v[i]) acc[i] = v[i]; }\
        else for (int64_t i = 0; i < n; i++) if (v[i] < acc[0] || v[i] != v[i]) acc[0] = v[i];\
        break;                                                                        \
    }                                                                                 \
}
RED_RUN_DEF(red_run, double)
/* float32 input accumulates in double directly (no conversion pass) */
RED_RUN_DEF(red_run_f32, float)

/* Process dims 1..ng-1 below a fixed index of dim 0 (x and acc offset). */
static void red_sub(const red_job *j, const char *x, double *acc) {
    int ng = j->ng;
    int64_t idx[KILN_MAX_DIMS] = {0};
    int64_t n = j->g[ng - 1];
    int vec = !j->red[ng - 1];
    double buf[RBLK];
    for (;;) {
        int64_t xo = 0, ao = 0;
        for (int i = 1; i < ng - 1; i++) {
            xo += idx[i] * j->sx[i];
            ao += idx[i] * j->so[i];
        }
        if (j->t == KILN_DTYPE_F32) {
            red_run_f32(j->op, acc + ao, (const float *)x + xo, n, vec);
        } else {
            for (int64_t b = 0; b < n; b += RBLK) {
                int64_t m = n - b < RBLK ? n - b : RBLK;
                kiln__ops_to_f64(x + (xo + b) * j->es, j->t, buf, m);
                red_run(j->op, acc + ao + (vec ? b : 0), buf, m, vec);
            }
        }
        int i = ng - 2;
        for (; i >= 1; i--) {
            if (++idx[i] < j->g[i]) break;
            idx[i] = 0;
        }
        if (i < 1) break;
    }
}

static void red_range(void *ud, int64_t i0, int64_t i1) {
    const red_job *j = ud;
    if (j->ng == 1) { /* a single group: vector or full reduce of [i0, i1) */
        if (j->t == KILN_DTYPE_F32) {
            red_run_f32(j->op, j->acc + (j->red[0] ? 0 : i0), (const float *)j->x + i0, i1 - i0, !j->red[0]);
            return;
        }
        double buf[RBLK];
        for (int64_t b = i0; b < i1; b += RBLK) {
            int64_t m = i1 - b < RBLK ? i1 - b : RBLK;
            kiln__ops_to_f64(j->x + b * j->es, j->t, buf, m);
            red_run(j->op, j->acc + (j->red[0] ? 0 : b), buf, m, !j->red[0]);
        }
        return;
    }
    for (int64_t i = i0; i < i1; i++)
        red_sub(j, j->x + i * j->sx[0] * j->es, j->acc + i * j->so[0]);
}

static int red_impl(const kiln_call *c, const char *op, rop o, int input_axes) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    int64_t axes[KILN_MAX_DIMS * 2], na;
    int r = red_axes_call(c, input_axes, axes, &na);
    if (r) return r;
    int mask[KILN_MAX_DIMS];
    int ident = red_mask(op, x->ndim, axes, na, attr_noop(c->attrs), mask);
    if (ident < 0) return ident;
    int64_t on = kiln_tensor_numel(y), xn = kiln_tensor_numel(x);
    if (ident == 1) {
        if (y->data != x->data) memcpy(y->data, x->data, (size_t)xn * kiln_dtype_size(x->dtype));
        return 0;
    }
    if (on == 0) return 0;
    double stackacc[256];
    double *acc = on <= 256 ? stackacc : kiln__malloc((size_t)on * sizeof(double));
    if (!acc) return kiln_set_error(KILN_ENOMEM, "%s: out of memory (%lld accumulators)", op, (long long)on);
    double init = o == R_PROD ? 1 : o == R_MAX ? -INFINITY : o == R_MIN ? INFINITY : 0;
    for (int64_t i = 0; i < on; i++) acc[i] = init;
    int64_t count = 1;
    if (xn > 0) {
        red_job j;
        j.op = o;
        j.x = x->data;
        j.t = x->dtype;
        j.es = kiln_dtype_size(x->dtype);
        j.acc = acc;
        /* coalesce: drop size-1 dims, merge neighbours of the same kind */
        int ng = 0;
        int64_t g[KILN_MAX_DIMS];
        int red[KILN_MAX_DIMS];
        for (int i = 0; i < x->ndim; i++) {
            if (mask[i]) count *= x->dims[i];
            if (x->dims[i] == 1) continue;
            if (ng > 0 && red[ng - 1] == mask[i]) g[ng - 1] *= x->dims[i];
            else { g[ng] = x->dims[i]; red[ng] = mask[i]; ng++; }
        }
        if (ng == 0) { g[0] = 1; red[0] = 1; ng = 1; }
        int64_t sx = 1, so = 1;
        for (int i = ng - 1; i >= 0; i--) {
            j.g[i] = g[i];
            j.red[i] = red[i];
            j.sx[i] = sx;
            j.so[i] = red[i] ? 0 : so;
            sx *= g[i];
            if (!red[i]) so *= g[i];
        }
        j.ng = ng;
        if (ng == 1) {
            if (red[0]) red_range(&j, 0, g[0]);
            else kiln__ops_par(c->exec, g[0], 16384, red_range, &j);
        } else if (!red[0] && xn >= 65536) {
            int64_t per = xn / g[0];
            kiln__ops_par(c->exec, g[0], per >= 16384 ? 1 : 16384 / per, red_range, &j);
        } else {
            red_range(&j, 0, g[0]);
        }
    } else {
        for (int i = 0; i < x->ndim; i++) if (mask[i]) count *= x->dims[i];
    }
    for (int64_t i = 0; i < on; i++) {
        switch (o) {
        case R_MEAN: acc[i] = count ? acc[i] / (double)count : NAN; break;
        case R_L2: acc[i] = sqrt(acc[i]); break;
        case R_LOGSUM: case R_LOGSUMEXP: acc[i] = log(acc[i]); break;
        default: break;
        }
    }
    kiln__ops_from_f64(acc, y->dtype, y->data, on);
    if (acc != stackacc) kiln__free(acc);
    return 0;
}

static const kiln_attr_def red_attrs_v1[] = {
    {.name = "axes", .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64,
     .doc = "axes to reduce (default: all)"},
    {.name = "keepdims", .type = KILN_ATTR_INT, .def = "1", .doc = "keep reduced dims as 1"},
    {NULL}};
static const kiln_attr_def red_attrs_in[] = {
    {.name = "keepdims", .type = KILN_ATTR_INT, .def = "1", .doc = "keep reduced dims as 1"},
    {.name = "noop_with_empty_axes", .type = KILN_ATTR_INT, .def = "0",
     .doc = "empty axes: 1 = identity, 0 = reduce all"},
    {NULL}};

/* CUDA (reduce_cuda.c): float types (FP64 too), and int32/int64 for the
 * exact ops (Sum Mean Max Min Prod); the check (also for the versions with
 * an axes input, whose slots cuda_formats cannot state) keeps the others'
 * integer layers on the CPU. */
static const kiln_combo cu_num[] = {{.types = KILN_CU_T_NUM "|FP64"}, {0}};
static const kiln_combo cu_arg[] = {{.types = KILN_CU_T_FLOAT ", INT64"}, {0}};
static int red_cuda_check(const kiln_shape_ctx *c, const char *op, rop r) {
    int exact = r == R_SUM || r == R_MEAN || r == R_MAX || r == R_MIN || r == R_PROD;
    return kiln__ops_cuda_types(c, op, exact ? KILN_CU_T_NUM "|FP64" : KILN_CU_T_FLOAT "|FP64");
}

#define RED_OP(VAR, NAME, OP, VIN, DOC)                                       \
    static int VAR##1_shape(kiln_shape_ctx *c) { return red_shape(c, NAME, OP, 0); } \
    static int VAR##1_impl(const kiln_call *c) { return red_impl(c, NAME, OP, 0); } \
    static int VAR##N_shape(kiln_shape_ctx *c) { return red_shape(c, NAME, OP, 1); } \
    static int VAR##N_impl(const kiln_call *c) { return red_impl(c, NAME, OP, 1); } \
    static int VAR##_cuda(const kiln_call *c) { return kiln__cu_reduce(c, NAME); } \
    static int VAR##_cuda_check(const kiln_shape_ctx *c) { return red_cuda_check(c, NAME, OP); } \
    static const kiln_quick_op VAR##1_op = {                                  \
        .ns = OPS_NS, .name = NAME, .version = 1, .min_inputs = 1, .max_inputs = 1, \
        .num_outputs = 1, .attrs = red_attrs_v1, .shape = VAR##1_shape,       \
        .impl = VAR##1_impl, .doc = DOC " (axes attribute)",                  \
        .cuda_impl = VAR##_cuda, .cuda_formats = cu_num, .cuda_check = VAR##_cuda_check, \
    };                                                                        \
    static const kiln_quick_op VAR##N_op = {                                  \
        .ns = OPS_NS, .name = NAME, .version = VIN, .min_inputs = 1, .max_inputs = 2, \
        .num_outputs = 1, .attrs = red_attrs_in, .shape = VAR##N_shape,       \
        .impl = VAR##N_impl, .doc = DOC " (axes input)",                      \
        .cuda_impl = VAR##_cuda, .cuda_host_inputs = 2, /* axes */            \
        .cuda_check = VAR##_cuda_check,                                       \
    };                                                                        \
    KILN_OP(VAR##1_op)                                                        \
    KILN_OP(VAR##N_op)

RED_OP(rsum, "ReduceSum", R_SUM, 13, "sum over axes")
RED_OP(rmean, "ReduceMean", R_MEAN, 18, "mean over axes")
RED_OP(rmax, "ReduceMax", R_MAX, 18, "maximum over axes")
RED_OP(rmin, "ReduceMin", R_MIN, 18, "minimum over axes")
RED_OP(rprod, "ReduceProd", R_PROD, 18, "product over axes")
RED_OP(rl1, "ReduceL1", R_L1, 18, "sum of absolute values over axes")
RED_OP(rl2, "ReduceL2", R_L2, 18, "Euclidean norm over axes")
RED_OP(rlogsum, "ReduceLogSum", R_LOGSUM, 18, "log of the sum over axes")
RED_OP(rlse, "ReduceLogSumExp", R_LOGSUMEXP, 18, "log of the sum of exponentials over axes")
RED_OP(rsumsq, "ReduceSumSquare", R_SUMSQ, 18, "sum of squares over axes")

/* ---- ArgMax / ArgMin ----------------------------------------------------------- */

static const kiln_attr_def arg_attrs[] = {
    {.name = "axis", .type = KILN_ATTR_INT, .def = "0"},
    {.name = "keepdims", .type = KILN_ATTR_INT, .def = "1"},
    {.name = "select_last_index", .type = KILN_ATTR_INT, .def = "0"},
    {NULL}};

static int arg_shape(kiln_shape_ctx *c, const char *op) {
    const kiln_desc *x = &c->in[0];
    if (!kiln__ops_is_num(x->dtype))
        return kiln_set_error(KILN_ETYPE, "%s: input must be numeric, found %s", op,
                              kiln_dtype_name(x->dtype));
    int ax;
    int r = kiln__ops_axis(op, "axis", kiln_attrs_int(c->attrs, "axis"), x->ndim, &ax);
    if (r) return r;
    if (x->ndim == 0) return kiln_set_error(KILN_ESHAPE, "%s: input must have rank >= 1", op);
    int keep = (int)kiln_attrs_int(c->attrs, "keepdims");
    kiln_desc *y = &c->out[0];
    y->dtype = KILN_DTYPE_I64;
    y->ndim = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (i != ax) y->dims[y->ndim++] = x->dims[i];
        else if (keep) y->dims[y->ndim++] = kiln_expr_const(c->x, 1);
    }
    return 0;
}

static int arg_impl(const kiln_call *c, int is_max) {
    const kiln_tensor *x = &c->in[0];
    int ax = (int)kiln_attrs_int(c->attrs, "axis");
    if (ax < 0) ax += x->ndim;
    int last = (int)kiln_attrs_int(c->attrs, "select_last_index");
    int64_t outer = 1, inner = 1, A = x->dims[ax];
    for (int i = 0; i < ax; i++) outer *= x->dims[i];
    for (int i = ax + 1; i < x->ndim; i++) inner *= x->dims[i];
    int64_t *y = c->out[0].data;
    if (outer * inner == 0) return 0;
    double *buf = kiln__malloc((size_t)(A * inner > 0 ? A * inner : 1) * sizeof(double));
    if (!buf) return kiln_set_error(KILN_ENOMEM, "out of memory");
    size_t es = kiln_dtype_size(x->dtype);
    for (int64_t o = 0; o < outer; o++) {
        kiln__ops_to_f64((const char *)x->data + o * A * inner * es, x->dtype, buf, A * inner);
        for (int64_t i = 0; i < inner; i++) {
            int64_t best = 0;
            double bv = buf[i];
            for (int64_t a = 1; a < A; a++) {
                double v = buf[a * inner + i];
                /* NaN is the extreme, as numpy's argmax/argmin: the first
                 * NaN (the last with select_last_index) */
                int vn = v != v, bn = bv != bv;
                int better = bn ? last && vn
                           : vn ? 1
                           : is_max ? (last ? v >= bv : v > bv) : (last ? v <= bv : v < bv);
                if (better) { bv = v; best = a; }
            }
            y[o * inner + i] = best;
        }
    }
    kiln__free(buf);
    return 0;
}

static int argmax_shape(kiln_shape_ctx *c) { return arg_shape(c, "ArgMax"); }
static int argmin_shape(kiln_shape_ctx *c) { return arg_shape(c, "ArgMin"); }
static int argmax_impl(const kiln_call *c) { return arg_impl(c, 1); }
static int argmin_impl(const kiln_call *c) { return arg_impl(c, 0); }
static const kiln_quick_op argmax_op = {
    .ns = OPS_NS, .name = "ArgMax", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = arg_attrs, .shape = argmax_shape, .impl = argmax_impl,
    .doc = "index of the maximum along axis",
    .cuda_impl = kiln__cu_argmax, .cuda_formats = cu_arg,
};
static const kiln_quick_op argmin_op = {
    .ns = OPS_NS, .name = "ArgMin", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = arg_attrs, .shape = argmin_shape, .impl = argmin_impl,
    .doc = "index of the minimum along axis",
    .cuda_impl = kiln__cu_argmin, .cuda_formats = cu_arg,
};
KILN_OP(argmax_op)
KILN_OP(argmin_op)
