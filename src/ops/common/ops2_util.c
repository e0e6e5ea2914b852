/*
 * ops2_util.c — helpers shared by the ops2 operator family: dtype access,
 * the f16/f64 -> f32 conversion wrapper, shape helpers, multi-version
 * registration.
 */
#include "ops/common/ops2.h"

#include "kiln_int.h"

int kiln__ops2_is_float(kiln_dtype t) {
    return t == KILN_DTYPE_F32 || t == KILN_DTYPE_F16 || t == KILN_DTYPE_F64 ||
           t == KILN_DTYPE_BF16;
}

double kiln__ops2_getf(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
    case KILN_DTYPE_F32: return ((const float *)p)[i];
    case KILN_DTYPE_F64: return ((const double *)p)[i];
    case KILN_DTYPE_F16: return kiln_f16_to_f32(((const uint16_t *)p)[i]);
    case KILN_DTYPE_BF16: return kiln_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return (double)kiln__ops2_geti(p, t, i);
    }
}

void kiln__ops2_setf(void *p, kiln_dtype t, int64_t i, double v) {
    switch (t) {
    case KILN_DTYPE_F32: ((float *)p)[i] = (float)v; break;
    case KILN_DTYPE_F64: ((double *)p)[i] = v; break;
    case KILN_DTYPE_F16: ((uint16_t *)p)[i] = kiln_f32_to_f16((float)v); break;
    case KILN_DTYPE_BF16: ((uint16_t *)p)[i] = kiln_f32_to_bf16((float)v); break;
    case KILN_DTYPE_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case KILN_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case KILN_DTYPE_I16: ((int16_t *)p)[i] = (int16_t)v; break;
    case KILN_DTYPE_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    case KILN_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case KILN_DTYPE_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case KILN_DTYPE_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case KILN_DTYPE_U64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    case KILN_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    default: break;
    }
}

int64_t kiln__ops2_geti(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
    case KILN_DTYPE_I64: return ((const int64_t *)p)[i];
    case KILN_DTYPE_I32: return ((const int32_t *)p)[i];
    case KILN_DTYPE_I16: return ((const int16_t *)p)[i];
    case KILN_DTYPE_I8: return ((const int8_t *)p)[i];
    case KILN_DTYPE_U8: return ((const uint8_t *)p)[i];
    case KILN_DTYPE_U16: return ((const uint16_t *)p)[i];
    case KILN_DTYPE_U32: return ((const uint32_t *)p)[i];
    case KILN_DTYPE_U64: return (int64_t)((const uint64_t *)p)[i];
    case KILN_DTYPE_BOOL: return ((const uint8_t *)p)[i] != 0;
    case KILN_DTYPE_F32: return (int64_t)((const float *)p)[i];
    case KILN_DTYPE_F64: return (int64_t)((const double *)p)[i];
    default: return 0;
    }
}

int kiln__ops2_dense(const kiln_tensor *t) {
    if (t->format != KILN_FORMAT_LINEAR) return 0;
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->dims[i] != 1 && t->strides[i] != s) return 0;
        s *= t->dims[i];
    }
    return 1;
}

static _Thread_local int g_conv_ints;

static int needs_conv(kiln_dtype t) {
    if (g_conv_ints && (t == KILN_DTYPE_I8 || t == KILN_DTYPE_U8 || t == KILN_DTYPE_I16 ||
                        t == KILN_DTYPE_U16 || t == KILN_DTYPE_I32))
        return 1;
    return t == KILN_DTYPE_F16 || t == KILN_DTYPE_F64 || t == KILN_DTYPE_BF16;
}

int kiln__ops2_as_f32_ints(const kiln_call *c, int (*fn)(const kiln_call *c)) {
    g_conv_ints = 1;
    int rc = kiln__ops2_as_f32(c, fn);
    g_conv_ints = 0;
    return rc;
}

static void set_dense_strides(kiln_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        t->strides[i] = s;
        s *= t->dims[i];
    }
}

int kiln__ops2_as_f32(const kiln_call *c, int (*fn)(const kiln_call *c)) {
    int any = 0;
    for (int i = 0; i < c->nin; i++) any |= c->in[i].data && needs_conv(c->in[i].dtype);
    for (int i = 0; i < c->nout; i++) any |= needs_conv(c->out[i].dtype);
    if (!any) return fn(c);
    if (c->nin > KILN_MAX_IO || c->nout > KILN_MAX_IO)
        return kiln_set_error(KILN_EINVAL, "too many tensors (%d in, %d out)", c->nin, c->nout);
    kiln_tensor in[KILN_MAX_IO], out[KILN_MAX_IO];
    void *bufs[2 * KILN_MAX_IO];
    int nbufs = 0, rc = 0;
    for (int i = 0; i < c->nin; i++) {
        in[i] = c->in[i];
        if (!in[i].data || !needs_conv(in[i].dtype)) continue;
        int64_t n = kiln_tensor_numel(&in[i]);
        float *p = kiln__malloc((size_t)(n ? n : 1) * sizeof(float));
        if (!p) { rc = kiln_set_error(KILN_ENOMEM, "conversion buffer"); goto done; }
        bufs[nbufs++] = p;
        for (int64_t k = 0; k < n; k++) p[k] = (float)kiln__ops2_getf(in[i].data, in[i].dtype, k);
        in[i].data = p;
        in[i].dtype = KILN_DTYPE_F32;
        set_dense_strides(&in[i]);
    }
    for (int i = 0; i < c->nout; i++) {
        out[i] = c->out[i];
        if (!needs_conv(out[i].dtype)) continue;
        int64_t n = kiln_tensor_numel(&out[i]);
        float *p = kiln__malloc((size_t)(n ? n : 1) * sizeof(float));
        if (!p) { rc = kiln_set_error(KILN_ENOMEM, "conversion buffer"); goto done; }
        bufs[nbufs++] = p;
        out[i].data = p;
        out[i].dtype = KILN_DTYPE_F32;
        set_dense_strides(&out[i]);
    }
    {
        kiln_call c2 = *c;
        c2.in = in;
        c2.out = out;
        rc = fn(&c2);
        if (rc == 0) {
            for (int i = 0; i < c->nout; i++) {
                if (!needs_conv(c->out[i].dtype)) continue;
                /* the f32 impl may have changed nothing about dims */
                int64_t n = kiln_tensor_numel(&c->out[i]);
                const float *p = out[i].data;
                for (int64_t k = 0; k < n; k++)
                    kiln__ops2_setf(c->out[i].data, c->out[i].dtype, k, p[k]);
            }
        }
    }
done:
    for (int i = 0; i < nbufs; i++) kiln__free(bufs[i]);
    return rc;
}

const kiln_expr *kiln__ops2_pool_dim(kiln_exprs *x, const kiln_expr *in, int64_t k,
                                     int64_t stride, int64_t pad_total, int64_t dil,
                                     int ceil_mode) {
    const kiln_expr *num = kiln_expr_add(x, in, kiln_expr_const(x, pad_total - dil * (k - 1) - 1));
    const kiln_expr *s = kiln_expr_const(x, stride);
    const kiln_expr *q = ceil_mode ? kiln_expr_ceildiv(x, num, s) : kiln_expr_floordiv(x, num, s);
    return kiln_expr_add(x, q, kiln_expr_const(x, 1));
}

#define MAX_VERSIONED 96
static kiln_quick_op g_ops[MAX_VERSIONED];
static int g_nops;

void kiln__ops2_register_versions(const kiln_quick_op *op, const int *versions, int n) {
    for (int i = 0; i < n; i++) {
        if (g_nops >= MAX_VERSIONED) {
            kiln__log(KILN_LOG_ERROR, "ops2: version table full registering %s::%s", op->ns,
                      op->name);
            return;
        }
        kiln_quick_op *q = &g_ops[g_nops++];
        *q = *op;
        q->version = versions[i];
        kiln_register_quick_op(q);
    }
}

void kiln__ops2_epilogue_span(const kiln_call *c, float *base, int64_t plane, int64_t b,
                              int64_t e, int64_t chan0) {
    if (!c || !c->epilogue || e <= b || plane <= 0) return;
    if (b % plane) {
        int64_t end = (b / plane + 1) * plane;
        if (end > e) end = e;
        kiln_call_epilogue(c, 0, base + b, end - b, chan0 + b / plane, 0);
        b = end;
    }
    int64_t full = (e - b) / plane;
    if (full > 0) {
        kiln_call_epilogue(c, 0, base + b, full * plane, chan0 + b / plane, plane);
        b += full * plane;
    }
    if (b < e) kiln_call_epilogue(c, 0, base + b, e - b, chan0 + b / plane, 0);
}

void kiln__ops2_epilogue_all(const kiln_call *c) {
    if (!c->epilogue || c->nout < 1) return;
    const kiln_tensor *y = &c->out[0];
    float *p = y->data;
    if (!p || y->dtype != KILN_DTYPE_F32) return;
    if (y->ndim >= 3) {
        int64_t inner = 1;
        for (int i = 2; i < y->ndim; i++) inner *= y->dims[i];
        for (int64_t n = 0; n < y->dims[0]; n++)
            kiln__ops2_epilogue_span(c, p + n * y->dims[1] * inner, inner, 0, y->dims[1] * inner, 0);
    } else if (y->ndim == 2) {
        for (int64_t r = 0; r < y->dims[0]; r++)
            kiln_call_epilogue(c, 0, p + r * y->dims[1], y->dims[1], 0, 1);
    } else {
        kiln_call_epilogue(c, 0, p, kiln_tensor_numel(y), 0, 0);
    }
}
