/*
 * activation_cuda.c — CUDA launchers of activation.c's unary ops
 * (unary_<T>, classify_<T> of activation.cu) and Clip.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

#include <math.h>
#include <string.h>

static int is_float(kiln_dtype t) {
    return t == KILN_DTYPE_F32 || t == KILN_DTYPE_F16 || t == KILN_DTYPE_BF16;
}

/* The range of the integer types the unary_<T> kernels take (u64 not:
 * its range does not fit the kernel's int64 bounds); 0 for the others. */
static int int_range(kiln_dtype t, int64_t *lo, int64_t *hi) {
    switch (t) {
    case KILN_DTYPE_I8: *lo = INT8_MIN, *hi = INT8_MAX; return 1;
    case KILN_DTYPE_I16: *lo = INT16_MIN, *hi = INT16_MAX; return 1;
    case KILN_DTYPE_I32: *lo = INT32_MIN, *hi = INT32_MAX; return 1;
    case KILN_DTYPE_I64: *lo = INT64_MIN, *hi = INT64_MAX; return 1;
    case KILN_DTYPE_U8: *lo = 0, *hi = UINT8_MAX; return 1;
    case KILN_DTYPE_U16: *lo = 0, *hi = UINT16_MAX; return 1;
    case KILN_DTYPE_U32: *lo = 0, *hi = UINT32_MAX; return 1;
    default: return 0;
    }
}

/* y = f(x) elementwise; float types run every function, integer types the
 * exact ones (Abs Neg Relu Sign Clip). */
static int unary_launch(const kiln_call *c, const char *op, int act, double a, double b) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    int64_t n = kiln_tensor_numel(y);
    /* one element order on both sides: both contiguous, or both NHWC (dense) */
    if (x->format != y->format || (x->format != KILN_FORMAT_NHWC && (!kiln__cu_contig(x) || !kiln__cu_contig(y))))
        return kiln_set_error(KILN_EUNSUPPORTED, "%s: CUDA kernel needs contiguous tensors of one layout", op);
    if (is_float(x->dtype)) {
        float fa = (float)a, fb = (float)b;
        void *args[] = {&n, (void *)&x->data, &y->data, &act, &fa, &fb};
        return kiln__cu_launch_n(c, "unary", kiln__cu_suffix(x->dtype), n, args);
    }
    int exact = act == KILN_CU_ACT_ABS || act == KILN_CU_ACT_NEG || act == KILN_CU_ACT_RELU ||
                act == KILN_CU_ACT_SIGN || act == KILN_CU_ACT_CLIP;
    int64_t lo, hi;
    if (!exact || !int_range(x->dtype, &lo, &hi)) return kiln__cu_type_err(op, x->dtype);
    /* integer bounds: the float bounds clamped into the type's range (infinite = none) */
    int64_t ia = a <= (double)lo ? lo : (int64_t)ceil(a), ib = b >= (double)hi ? hi : (int64_t)floor(b);
    void *args[] = {&n, (void *)&x->data, &y->data, &act, &ia, &ib};
    return kiln__cu_launch_n(c, "unary", kiln__cu_suffix(x->dtype), n, args);
}

int kiln__cu_unary(const kiln_call *c, const char *op) {
    const kiln_tensor *x = &c->in[0];
    if (strcmp(op, "IsNaN") == 0 || strcmp(op, "IsInf") == 0) {
        if (!is_float(x->dtype)) return kiln__cu_type_err(op, x->dtype);
        int64_t n = kiln_tensor_numel(&c->out[0]);
        int what = op[2] == 'I', neg = 1, pos = 1;
        const kiln_attr_value *v;
        if (what && (v = kiln_attrs_get(c->attrs, "detect_negative")) && v->present) neg = (int)v->i;
        if (what && (v = kiln_attrs_get(c->attrs, "detect_positive")) && v->present) pos = (int)v->i;
        void *args[] = {&n, (void *)&x->data, &c->out[0].data, &what, &neg, &pos};
        return kiln__cu_launch_n(c, "classify", kiln__cu_suffix(x->dtype), n, args);
    }
    float a, b;
    int act = kiln__cu_act_of(op, c->attrs, &a, &b);
    if (act < 0) return kiln_set_error(KILN_EINTERNAL, "%s: no CUDA activation of that name", op);
    return unary_launch(c, op, act, a, b);
}

/* Clip-6 (attributes) and Clip-11+ (optional scalar inputs 1 and 2, kept
 * on the host: cuda_host_inputs). */
int kiln__cu_clip(const kiln_call *c) {
    double lo = -INFINITY, hi = INFINITY;
    const kiln_attr_value *v;
    if ((v = kiln_attrs_get(c->attrs, "min")) && v->present) lo = v->f;
    if ((v = kiln_attrs_get(c->attrs, "max")) && v->present) hi = v->f;
    for (int i = 1; i < 3; i++) {
        if (!kiln__cu_has_in(c, i)) continue;
        if (c->in[i].device != KILN_DEVICE_CPU)
            return kiln_set_error(KILN_EINTERNAL, "Clip: bound input %d is not in host memory", i);
        double b = kiln__cu_host_f64(&c->in[i], 0);
        if (i == 1) lo = b;
        else hi = b;
    }
    return unary_launch(c, "Clip", KILN_CU_ACT_CLIP, lo, hi);
}
