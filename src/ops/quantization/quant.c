/*
 * quant.c — ONNX linear quantization: QuantizeLinear (10, 13, 19),
 * DequantizeLinear (10, 13, 19) and DynamicQuantizeLinear (11).
 *
 *   Q:   y = saturate(round_half_even(x / scale) + zero_point)
 *   DQ:  y = (x - zero_point) * scale
 *   DQL: scale = (max(0, max x) - min(0, min x)) / 255,
 *        zero_point = saturate(round_half_even(-min(0, min x) / scale)), u8
 * scale and zero_point are scalars (per tensor) or 1-D along `axis` (per
 * axis).  Integer types: u8, i8, u16, i16, i32 (zero point decides the
 * output type of Q; u8 when absent).  Computed in double; float8 types and
 * blocked quantization (opset 21) are not supported.  CUDA: quant_cuda.c
 * (the same arithmetic; this file resolves the per-axis geometry and the
 * saturation range for both devices).
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static int q_range(kiln_dtype t, double *lo, double *hi) {
    switch (t) {
    case KILN_DTYPE_U8: *lo = 0; *hi = 255; return 1;
    case KILN_DTYPE_I8: *lo = -128; *hi = 127; return 1;
    case KILN_DTYPE_U16: *lo = 0; *hi = 65535; return 1;
    case KILN_DTYPE_I16: *lo = -32768; *hi = 32767; return 1;
    case KILN_DTYPE_I32: *lo = -2147483648.0; *hi = 2147483647.0; return 1;
    default: return 0;
    }
}

static double q_sat(double v, kiln_dtype t) {
    double lo = 0, hi = 0;
    q_range(t, &lo, &hi);
    if (isnan(v)) return 0; /* NaN has no integer value: 0 rather than undefined */
    v = nearbyint(v); /* round half to even (default rounding mode) */
    return v < lo ? lo : v > hi ? hi : v;
}

static const kiln_attr_def q_attrs[] = {
    {"axis", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "1", 0, "axis of per-axis scale / zero point"},
    {"saturate", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "1", 0, "float8 only (ignored)"},
    {NULL, 0, 0, NULL, 0, NULL},
};
static const kiln_attr_def dq_attrs[] = {
    {"axis", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "1", 0, "axis of per-axis scale / zero point"},
    {NULL, 0, 0, NULL, 0, NULL},
};

/* Check scale/zero point shapes; *axis normalized (-1: per tensor). */
static int q_check(kiln_shape_ctx *c, const char *op, int *axis) {
    const kiln_desc *x = &c->in[0], *s = &c->in[1];
    int64_t a = kiln_attrs_int(c->attrs, "axis");
    if (s->ndim > 1)
        return kiln_set_error(KILN_ESHAPE, "%s: scale must be a scalar or 1-D, found rank %d", op, s->ndim);
    if (!kiln__ops_is_float(s->dtype))
        return kiln_set_error(KILN_ETYPE, "%s: scale must be float, found %s", op, kiln_dtype_name(s->dtype));
    int64_t n1 = 1;
    if (s->ndim == 1 && !(kiln_expr_is_const(s->dims[0], &n1) && n1 == 1)) {
        if (a < 0) a += x->ndim;
        if (a < 0 || a >= x->ndim)
            return kiln_set_error(KILN_EATTR, "%s: axis %lld out of range for rank %d", op,
                                  (long long)kiln_attrs_int(c->attrs, "axis"), x->ndim);
        *axis = (int)a;
    } else {
        *axis = -1;
    }
    if (c->nin > 2 && c->in[2].dtype != KILN_DTYPE_UNDEFINED && c->in[2].ndim != s->ndim)
        return kiln_set_error(KILN_ESHAPE, "%s: zero point must have the shape of scale", op);
    return 0;
}

static int q_shape(kiln_shape_ctx *c) {
    int axis;
    int rc = q_check(c, "QuantizeLinear", &axis);
    if (rc) return rc;
    if (!kiln__ops_is_float(c->in[0].dtype))
        return kiln_set_error(KILN_ETYPE, "QuantizeLinear: x must be float, found %s",
                              kiln_dtype_name(c->in[0].dtype));
    kiln_dtype out = KILN_DTYPE_U8;
    if (c->nin > 2 && c->in[2].dtype != KILN_DTYPE_UNDEFINED) out = c->in[2].dtype;
    double lo = 0, hi = 0;
    if (!q_range(out, &lo, &hi))
        return kiln_set_error(KILN_EUNSUPPORTED, "QuantizeLinear: output type %s is not supported "
                              "(u8, i8, u16, i16, i32)", kiln_dtype_name(out));
    c->out[0] = c->in[0];
    c->out[0].data = NULL;
    c->out[0].nvalues = -1;
    c->out[0].dtype = out;
    return 0;
}

static int dq_shape(kiln_shape_ctx *c) {
    int axis;
    int rc = q_check(c, "DequantizeLinear", &axis);
    if (rc) return rc;
    double lo = 0, hi = 0;
    if (!q_range(c->in[0].dtype, &lo, &hi))
        return kiln_set_error(KILN_EUNSUPPORTED, "DequantizeLinear: x type %s is not supported "
                              "(u8, i8, u16, i16, i32)", kiln_dtype_name(c->in[0].dtype));
    c->out[0] = c->in[0];
    c->out[0].data = NULL;
    c->out[0].nvalues = -1;
    c->out[0].dtype = c->in[1].dtype;
    return 0;
}

/* Per-element scale/zero-point index for x element i. */
typedef struct q_geo {
    int64_t inner, nax; /* per axis: index = (i / inner) % nax */
} q_geo;

static q_geo q_geometry(const kiln_call *c) {
    q_geo g = {1, 1};
    const kiln_tensor *x = &c->in[0], *s = &c->in[1];
    if (s->ndim == 1 && s->dims[0] > 1) {
        int64_t a = kiln_attrs_int(c->attrs, "axis");
        if (a < 0) a += x->ndim;
        g.nax = x->dims[a];
        for (int d = (int)a + 1; d < x->ndim; d++) g.inner *= x->dims[d];
    }
    return g;
}

/* y = quantize(x) or dequantize(x), per tensor or per axis (q_geometry). */
static int qdq_run(const kiln_call *c, int quantize) {
    const kiln_tensor *x = &c->in[0], *s = &c->in[1];
    const kiln_tensor *z = c->nin > 2 && c->in[2].data ? &c->in[2] : NULL;
    kiln_tensor *y = &c->out[0];
    q_geo g = q_geometry(c);
    for (int64_t i = 0, n = kiln_tensor_numel(x); i < n; i++) {
        int64_t k = g.nax > 1 ? (i / g.inner) % g.nax : 0;
        double sc = kiln__ops_get_f64(s->data, s->dtype, k);
        double zp = z ? kiln__ops_get_f64(z->data, z->dtype, k) : 0;
        double xv = kiln__ops_get_f64(x->data, x->dtype, i);
        if (!quantize) {
            kiln__ops_set_f64(y->data, y->dtype, i, (xv - zp) * sc);
            continue;
        }
        /* Divide in the input's precision, as the ONNX reference does. */
        double q = x->dtype == KILN_DTYPE_F64 ? xv / sc : (double)((float)xv / (float)sc);
        kiln__ops_set_f64(y->data, y->dtype, i, q_sat(nearbyint(q) + zp, y->dtype));
    }
    return 0;
}
static int q_impl(const kiln_call *c) { return qdq_run(c, 1); }
static int dq_impl(const kiln_call *c) { return qdq_run(c, 0); }

static int qdq_cuda(const kiln_call *c, int quantize) {
    q_geo g = q_geometry(c);
    double lo = 0, hi = 0;
    q_range(quantize ? c->out[0].dtype : c->in[0].dtype, &lo, &hi);
    return kiln__cu_qdq(c, quantize, g.inner, g.nax, lo, hi);
}
static int q_cuda(const kiln_call *c) { return qdq_cuda(c, 1); }
static int dq_cuda(const kiln_call *c) { return qdq_cuda(c, 0); }

/* What the CUDA kernels take (the slots' types are tied in pairs, which
 * cuda_formats cannot state): the float side FP32/FP16/BF16/FP64 (x or y,
 * and scale, of one type), the integer side u8 i8 u16 i16 i32 (y or x, and
 * the zero point, of one type). */
static int qdq_cuda_check(const kiln_shape_ctx *c, int quantize) {
    const char *op = quantize ? "QuantizeLinear" : "DequantizeLinear";
    kiln_dtype ft = quantize ? c->in[0].dtype : c->out[0].dtype, it = quantize ? c->out[0].dtype : c->in[0].dtype;
    double lo, hi;
    if (!kiln__ops_is_float(ft) || !q_range(it, &lo, &hi) || c->in[1].dtype != ft ||
        (c->nin > 2 && c->in[2].dtype != KILN_DTYPE_UNDEFINED && c->in[2].dtype != it))
        return kiln_set_error(KILN_EUNSUPPORTED, "%s: no CUDA kernel for %s with scale %s", op,
                              kiln_dtype_name(c->in[0].dtype), kiln_dtype_name(c->in[1].dtype));
    return 0;
}
static int q_cuda_check(const kiln_shape_ctx *c) { return qdq_cuda_check(c, 1); }
static int dq_cuda_check(const kiln_shape_ctx *c) { return qdq_cuda_check(c, 0); }

static int dql_shape(kiln_shape_ctx *c) {
    if (c->in[0].dtype != KILN_DTYPE_F32)
        return kiln_set_error(KILN_ETYPE, "DynamicQuantizeLinear: x must be f32, found %s",
                              kiln_dtype_name(c->in[0].dtype));
    c->out[0] = c->in[0];
    c->out[0].data = NULL;
    c->out[0].nvalues = -1;
    c->out[0].dtype = KILN_DTYPE_U8;
    c->out[1].dtype = KILN_DTYPE_F32;
    c->out[1].ndim = 0;
    c->out[2].dtype = KILN_DTYPE_U8;
    c->out[2].ndim = 0;
    return 0;
}

static int dql_impl(const kiln_call *c) {
    const float *x = c->in[0].data;
    int64_t n = kiln_tensor_numel(&c->in[0]);
    double mn = 0, mx = 0;
    for (int64_t i = 0; i < n; i++) {
        if (x[i] < mn) mn = x[i];
        if (x[i] > mx) mx = x[i];
    }
    float scale = (float)((mx - mn) / 255.0);
    /* float arithmetic, as the ONNX reference */
    double zp = scale != 0 ? q_sat((double)((float)-mn / scale), KILN_DTYPE_U8) : 0;
    uint8_t *y = c->out[0].data;
    for (int64_t i = 0; i < n; i++)
        y[i] = scale != 0 ? (uint8_t)q_sat(nearbyint((double)(x[i] / scale)) + zp, KILN_DTYPE_U8)
                          : (uint8_t)zp;
    *(float *)c->out[1].data = scale;
    *(uint8_t *)c->out[2].data = (uint8_t)zp;
    return 0;
}

#define Q_OP(var, nm, ver, at, shp, fn, cu, dc)                                              \
    static const kiln_quick_op var = {                                                       \
        .ns = "ai.onnx", .name = nm, .version = ver,                                         \
        .min_inputs = 2, .max_inputs = 3, .num_outputs = 1,                                  \
        .attrs = at, .shape = shp, .impl = fn, .doc = dc,                                    \
        .cuda_impl = cu, .cuda_check = cu##_check,                                           \
    };                                                                                       \
    KILN_OP(var)

Q_OP(q_10, "QuantizeLinear", 10, dq_attrs, q_shape, q_impl, q_cuda, "linear quantization (per tensor / axis)")
Q_OP(q_13, "QuantizeLinear", 13, dq_attrs, q_shape, q_impl, q_cuda, "linear quantization (per tensor / axis)")
Q_OP(q_19, "QuantizeLinear", 19, q_attrs, q_shape, q_impl, q_cuda, "linear quantization (per tensor / axis)")
Q_OP(dq_10, "DequantizeLinear", 10, dq_attrs, dq_shape, dq_impl, dq_cuda, "linear dequantization")
Q_OP(dq_13, "DequantizeLinear", 13, dq_attrs, dq_shape, dq_impl, dq_cuda, "linear dequantization")
Q_OP(dq_19, "DequantizeLinear", 19, dq_attrs, dq_shape, dq_impl, dq_cuda, "linear dequantization")

static const kiln_combo dql_cuda_formats[] = {{.types = "FP32, UINT8, FP32, UINT8"}, {0}};
static const kiln_quick_op dql_11 = {
    .ns = "ai.onnx", .name = "DynamicQuantizeLinear", .version = 11,
    .min_inputs = 1, .max_inputs = 1, .num_outputs = 3,
    .shape = dql_shape, .impl = dql_impl,
    .cuda_impl = kiln__cu_dql, .cuda_formats = dql_cuda_formats,
    .doc = "u8 quantization with scale and zero point computed from the data",
};
KILN_OP(dql_11)
