/*
 * reformat.c — the internal op kiln::reformat v1: converts a tensor between
 * dtypes (F32/F16/BF16/F64/I32/I64/I8/U8/BOOL and the other integer types)
 * and layouts (LINEAR, NHWC, NCHW8C, NCHW16C).  The builder inserts it where
 * a producer's chosen type/format differs from a consumer's, and as the
 * copy in front of an in-place layer.
 *
 * The kernel reads the formats from the tensors it is given (the engine
 * passes the chosen ones); the attributes only record the target for
 * inspection and shape inference.  One type-generic core: every element is
 * loaded as int64 (integer -> integer, exact) or double (anything with a
 * float side) and stored converted.  Same dtype + same layout is a memcpy.
 */
#include "ops/common/ops_util.h"
#include "device/cpu/transpose16.h"

#include <math.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

/* Layout view: dim 0 = N, dim 1 = C, the rest flattened to S (rank >= 3
 * for NHWC/blocked; smaller ranks are always plain row-major). */
typedef struct rf_layout {
    kiln_format fmt;
    int64_t N, C, S, CB, B; /* CB = blocks of B channels */
} rf_layout;

static rf_layout layout_of(const kiln_tensor *t) {
    rf_layout l = {KILN_FORMAT_LINEAR, 1, 1, 1, 1, 1};
    int64_t n = kiln_tensor_numel(t);
    if (t->ndim < 3) {
        l.S = n;
        return l;
    }
    l.fmt = t->format;
    l.N = t->dims[0];
    l.C = t->dims[1];
    for (int d = 2; d < t->ndim; d++) l.S *= t->dims[d];
    l.B = t->format == KILN_FORMAT_NCHW8C ? 8 : t->format == KILN_FORMAT_NCHW16C ? 16 : 1;
    l.CB = (l.C + l.B - 1) / l.B;
    return l;
}

/* Physical element offset of logical (n, c, s). */
static inline int64_t rf_off(const rf_layout *l, int64_t n, int64_t c, int64_t s) {
    switch (l->fmt) {
    case KILN_FORMAT_NHWC: return (n * l->S + s) * l->C + c;
    case KILN_FORMAT_NCHW8C:
    case KILN_FORMAT_NCHW16C: return ((n * l->CB + c / l->B) * l->S + s) * l->B + c % l->B;
    default: return (n * l->C + c) * l->S + s;
    }
}

static int is_int(kiln_dtype t) {
    return t == KILN_DTYPE_BOOL || t == KILN_DTYPE_U8 || t == KILN_DTYPE_I8 || t == KILN_DTYPE_U16 ||
           t == KILN_DTYPE_I16 || t == KILN_DTYPE_I32 || t == KILN_DTYPE_I64 ||
           t == KILN_DTYPE_U32 || t == KILN_DTYPE_U64;
}

#define RF_INT_TYPES(X)                                                        \
    X(KILN_DTYPE_U8, uint8_t) X(KILN_DTYPE_I8, int8_t) X(KILN_DTYPE_U16, uint16_t) \
    X(KILN_DTYPE_I16, int16_t) X(KILN_DTYPE_I32, int32_t) X(KILN_DTYPE_I64, int64_t) \
    X(KILN_DTYPE_U32, uint32_t) X(KILN_DTYPE_U64, uint64_t)

static inline double load_f(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
    case KILN_DTYPE_F32: return ((const float *)p)[i];
    case KILN_DTYPE_F64: return ((const double *)p)[i];
    case KILN_DTYPE_F16: return kiln_f16_to_f32(((const uint16_t *)p)[i]);
    case KILN_DTYPE_BF16: return kiln_bf16_to_f32(((const uint16_t *)p)[i]);
    case KILN_DTYPE_BOOL: return ((const uint8_t *)p)[i] ? 1.0 : 0.0;
#define RF_LOADF(e, ct) case e: return (double)((const ct *)p)[i];
        RF_INT_TYPES(RF_LOADF)
#undef RF_LOADF
    default: return 0;
    }
}

static inline int64_t load_i(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
    case KILN_DTYPE_BOOL: return ((const uint8_t *)p)[i] ? 1 : 0;
#define RF_LOADI(e, ct) case e: return (int64_t)((const ct *)p)[i];
        RF_INT_TYPES(RF_LOADI)
#undef RF_LOADI
    default: return 0;
    }
}

/* Float -> integer: truncation toward zero (ONNX Cast), NaN -> 0, saturated
 * to the target range so the conversion is always defined. */
static inline int64_t f_to_i(double v) {
    if (v != v) return 0;
    if (v >= 9.2233720368547758e18) return INT64_MAX;
    if (v <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)v;
}

static inline void store_f(void *p, kiln_dtype t, int64_t i, double v) {
    switch (t) {
    case KILN_DTYPE_F32: ((float *)p)[i] = (float)v; return;
    case KILN_DTYPE_F64: ((double *)p)[i] = v; return;
    case KILN_DTYPE_F16: ((uint16_t *)p)[i] = kiln_f32_to_f16((float)v); return;
    case KILN_DTYPE_BF16: ((uint16_t *)p)[i] = kiln_f32_to_bf16((float)v); return;
    case KILN_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; return;
#define RF_STOREF(e, ct, lo, hi)                                               \
    case e: ((ct *)p)[i] = v != v ? 0 : v <= (double)(lo) ? (ct)(lo) : v >= (double)(hi) ? (ct)(hi) : (ct)v; return;
        RF_STOREF(KILN_DTYPE_U8, uint8_t, 0, UINT8_MAX)
        RF_STOREF(KILN_DTYPE_I8, int8_t, INT8_MIN, INT8_MAX)
        RF_STOREF(KILN_DTYPE_U16, uint16_t, 0, UINT16_MAX)
        RF_STOREF(KILN_DTYPE_I16, int16_t, INT16_MIN, INT16_MAX)
        RF_STOREF(KILN_DTYPE_I32, int32_t, INT32_MIN, INT32_MAX)
        RF_STOREF(KILN_DTYPE_U32, uint32_t, 0, UINT32_MAX)
        case KILN_DTYPE_I64: ((int64_t *)p)[i] = f_to_i(v); return;
        case KILN_DTYPE_U64: ((uint64_t *)p)[i] = v <= 0 || v != v ? 0 : v >= 1.8446744073709552e19 ? UINT64_MAX : (uint64_t)v; return;
#undef RF_STOREF
    default: return;
    }
}

static inline void store_i(void *p, kiln_dtype t, int64_t i, int64_t v) {
    switch (t) {
    case KILN_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; return;
#define RF_STOREI(e, ct) case e: ((ct *)p)[i] = (ct)v; return;
        RF_INT_TYPES(RF_STOREI)
#undef RF_STOREI
    default: return;
    }
}

typedef struct rf_job {
    const kiln_tensor *x;
    kiln_tensor *y;
    rf_layout lx, ly;
    int same_layout, ints;
} rf_job;

/* Range over logical elements (n, c, s) flattened row-major as (n*C + c)*S + s. */
/* Same dtype, layout change: move elements of `es` bytes (no conversion). */
#define RF_MOVE(ct)                                                            \
    do {                                                                       \
        const ct *xs = xp;                                                     \
        ct *ys = yp;                                                           \
        for (int64_t i = b; i < e; i++) {                                      \
            ys[rf_off(&j->ly, n, c, s)] = xs[rf_off(&j->lx, n, c, s)];         \
            if (++s == S) { s = 0; if (++c == C) { c = 0; n++; } }             \
        }                                                                      \
    } while (0)

static void rf_range(void *ud, int64_t b, int64_t e) {
    const rf_job *j = ud;
    const void *xp = j->x->data;
    void *yp = j->y->data;
    kiln_dtype xt = j->x->dtype, yt = j->y->dtype;
    if (j->same_layout) {
        if (xt == KILN_DTYPE_F32 && yt == KILN_DTYPE_F16)
            for (int64_t i = b; i < e; i++) ((uint16_t *)yp)[i] = kiln_f32_to_f16(((const float *)xp)[i]);
        else if (xt == KILN_DTYPE_F16 && yt == KILN_DTYPE_F32)
            for (int64_t i = b; i < e; i++) ((float *)yp)[i] = kiln_f16_to_f32(((const uint16_t *)xp)[i]);
        else if (j->ints)
            for (int64_t i = b; i < e; i++) store_i(yp, yt, i, load_i(xp, xt, i));
        else
            for (int64_t i = b; i < e; i++) store_f(yp, yt, i, load_f(xp, xt, i));
        return;
    }
    /* Logical index i = (n*C + c)*S + s, advanced incrementally. */
    const int64_t C = j->lx.C, S = j->lx.S;
    int64_t s = b % S, c = (b / S) % C, n = b / S / C;
    if (xt == yt) {
        switch (kiln_dtype_size(xt)) {
        case 1: RF_MOVE(uint8_t); return;
        case 2: RF_MOVE(uint16_t); return;
        case 4: RF_MOVE(uint32_t); return;
        case 8: RF_MOVE(uint64_t); return;
        default: break;
        }
    }
    for (int64_t i = b; i < e; i++) {
        int64_t io = rf_off(&j->lx, n, c, s), oo = rf_off(&j->ly, n, c, s);
        if (j->ints)
            store_i(yp, yt, oo, load_i(xp, xt, io));
        else
            store_f(yp, yt, oo, load_f(xp, xt, io));
        if (++s == S) { s = 0; if (++c == C) { c = 0; n++; } }
    }
}

/* 4-byte elements between LINEAR and NCHW16C/NCHW8C (the CPU's blocked
 * convs, ops/nn/conv_pw16c.c): per (image, channel block, run of RF_RUN
 * pixels) a plain copy whose B channel rows are read (or written) RF_RUN
 * elements at a time, the blocked side contiguous (on AVX-512 a whole
 * 16-channel block 16 pixels at a time as a 16 x 16 transpose of vectors);
 * the padding lanes of a last partial block get zeros.  The element-wise
 * path above (a division and a switch per element) ran ResNet-50's
 * 56x56x64 activation in 0.85 ms, about 1 GB/s. */
#define RF_RUN 64

typedef struct rf_blk {
    const uint32_t *x;
    uint32_t *y;
    const rf_layout *l; /* the blocked side */
    int to_blocked;
    int64_t runs; /* runs of RF_RUN pixels per channel block */
} rf_blk;

#if defined(__AVX512F__)
#endif

static void rf_blocked_range(void *ud, int64_t b, int64_t e) {
    const rf_blk *j = ud;
    const rf_layout *l = j->l;
    const int64_t S = l->S, B = l->B;
    for (int64_t u = b; u < e; u++) {
        const int64_t nb = u / j->runs, s0 = u % j->runs * RF_RUN, n = nb / l->CB, cb = nb % l->CB;
        const int64_t s1 = s0 + RF_RUN < S ? s0 + RF_RUN : S;
        uint32_t *blk = (j->to_blocked ? j->y : (uint32_t *)j->x) + (nb * S + s0) * B;
        int64_t sv = s0; /* pixels before sv moved by 16 x 16 transposes */
#if defined(__AVX512F__)
        if (B == 16 && (cb + 1) * 16 <= l->C) /* a whole block: 16 channel rows <-> 16 pixels */
            for (; sv + 16 <= s1; sv += 16) {
                float *lin = (float *)(j->to_blocked ? j->x : j->y) + (n * l->C + cb * 16) * S + sv;
                float *bl = (float *)blk + (sv - s0) * 16;
                __m512 r[16];
                for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(j->to_blocked ? lin + i * S : bl + i * 16);
                kiln__tr16(r);
                for (int i = 0; i < 16; i++) _mm512_storeu_ps(j->to_blocked ? bl + i * 16 : lin + i * S, r[i]);
            }
#endif
        for (int64_t i = 0; i < B && sv < s1; i++) {
            const int64_t c = cb * B + i;
            if (c >= l->C) { /* padding lanes: zero when writing the blocked side */
                for (int64_t s = sv; j->to_blocked && s < s1; s++) blk[(s - s0) * B + i] = 0;
                continue;
            }
            const int64_t lin = (n * l->C + c) * S;
            if (j->to_blocked)
                for (int64_t s = sv; s < s1; s++) blk[(s - s0) * B + i] = j->x[lin + s];
            else
                for (int64_t s = sv; s < s1; s++) j->y[lin + s] = blk[(s - s0) * B + i];
        }
    }
}

/* LINEAR <-> NCHW16C/8C of one 4-byte type: 1 when done. */
static int rf_blocked(const kiln_call *c, const rf_job *j) {
    const int to_blocked = j->lx.fmt == KILN_FORMAT_LINEAR;
    const rf_layout *l = to_blocked ? &j->ly : &j->lx;
    if (j->x->dtype != j->y->dtype || kiln_dtype_size(j->x->dtype) != 4 ||
        j->ly.fmt == j->lx.fmt || (j->lx.fmt != KILN_FORMAT_LINEAR && j->ly.fmt != KILN_FORMAT_LINEAR) ||
        (l->fmt != KILN_FORMAT_NCHW16C && l->fmt != KILN_FORMAT_NCHW8C) || l->S < 1)
        return 0;
    rf_blk b = {.x = j->x->data, .y = j->y->data, .l = l, .to_blocked = to_blocked, .runs = (l->S + RF_RUN - 1) / RF_RUN};
    kiln_exec_parallel_for(c->exec, l->N * l->CB * b.runs, 4, rf_blocked_range, &b);
    return 1;
}

static uint64_t phys_numel(const rf_layout *l, int64_t numel) {
    if (l->fmt == KILN_FORMAT_NCHW8C || l->fmt == KILN_FORMAT_NCHW16C)
        return (uint64_t)(l->N * l->CB * l->B * l->S);
    return (uint64_t)numel;
}

int kiln__reformat_host(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    int64_t n = kiln_tensor_numel(x);
    if (kiln_tensor_numel(y) != n)
        return kiln_set_error(KILN_ESHAPE, "reformat: input has %lld elements, output %lld",
                              (long long)n, (long long)kiln_tensor_numel(y));
    rf_job j = {.x = x, .y = y, .lx = layout_of(x), .ly = layout_of(y)};
    /* Layout-free ranks or identical layouts: element order is the same. */
    j.same_layout = j.lx.fmt == j.ly.fmt;
    j.ints = is_int(x->dtype) && is_int(y->dtype);
    if (j.same_layout && x->dtype == y->dtype) {
        if (x->data != y->data)
            memcpy(y->data, x->data, phys_numel(&j.lx, n) * kiln_dtype_size(x->dtype));
        return 0;
    }
    if (x->data == y->data)
        return kiln_set_error(KILN_EINVAL, "reformat: input and output share a buffer");
    if (n > 0 && rf_blocked(c, &j)) return 0;
    if (!j.same_layout && (j.ly.fmt == KILN_FORMAT_NCHW8C || j.ly.fmt == KILN_FORMAT_NCHW16C))
        memset(y->data, 0, phys_numel(&j.ly, n) * kiln_dtype_size(y->dtype)); /* channel padding */
    int64_t total = j.same_layout ? (int64_t)phys_numel(&j.lx, n) : n;
    if (total > 0) kiln_exec_parallel_for(c->exec, total, 16384, rf_range, &j);
    return 0;
}

static int rf_shape(kiln_shape_ctx *c) {
    int64_t to = kiln_attrs_int(c->attrs, "to_dtype");
    int64_t fmt = kiln_attrs_int(c->attrs, "to_format");
    if (to < 0 || to >= KILN_DTYPE_COUNT_ || (to != 0 && kiln_dtype_size((kiln_dtype)to) == 0))
        return kiln_set_error(KILN_EATTR, "attribute 'to_dtype': %lld is not a numeric dtype",
                              (long long)to);
    if (fmt < 0 || fmt >= KILN_FORMAT_COUNT_)
        return kiln_set_error(KILN_EATTR, "attribute 'to_format': %lld is not a format",
                              (long long)fmt);
    c->out[0] = c->in[0];
    c->out[0].data = NULL;
    c->out[0].nvalues = -1;
    if (to) c->out[0].dtype = (kiln_dtype)to;
    if (c->out[0].dtype == c->in[0].dtype && c->in[0].nvalues >= 0) {
        c->out[0].nvalues = c->in[0].nvalues;
        for (int i = 0; i < c->in[0].nvalues; i++) c->out[0].values[i] = c->in[0].values[i];
    }
    return 0;
}

static const kiln_attr_def rf_attrs[] = {
    {.name = "to_dtype", .type = KILN_ATTR_INT, .def = "0",
     .doc = "target kiln_dtype value (0: same as the input)"},
    {.name = "to_format", .type = KILN_ATTR_INT, .def = "0", .doc = "target kiln_format value"},
    {NULL},
};

int kiln__reformat_cuda(const kiln_call *c); /* reformat_cuda.c */

static const kiln_quick_op kiln_reformat_op = {
    .ns = "kiln", .name = "reformat", .version = 1,
    .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
    .attrs = rf_attrs, .shape = rf_shape, .impl = kiln__reformat_host,
    .timing_id = "",
    .doc = "dtype/layout conversion inserted by the builder (identity = copy)",
    /* memory-space copies and F32/F16/BF16 casts between GPU tensors */
    .cuda_impl = kiln__reformat_cuda,
};
KILN_OP(kiln_reformat_op)
