/*
 * softmax.c — ONNX Softmax, LogSoftmax, Hardmax.
 *
 * Opset 1-12: the input is coerced to 2-D [prod(dims < axis), prod(dims >=
 * axis)] (axis default 1) and the op runs over the second dim.  Opset 13:
 * the op runs along `axis` only (default -1).  Both reduce to rows of length
 * L with element stride `inner`; rows are split over the thread pool.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"
#include "device/cpu/fastmath.h"


#include <math.h>

enum { K_SOFTMAX, K_LOGSOFTMAX, K_HARDMAX };

static const kiln_attr_def sm1_attrs[] = {
    {"axis", KILN_ATTR_INT, 0, "1", 0, "inputs coerced to 2-D at this axis"},
    {NULL, 0, 0, NULL, 0, NULL},
};
static const kiln_attr_def sm13_attrs[] = {
    {"axis", KILN_ATTR_INT, 0, "-1", 0, "axis the op runs along"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int sm_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    if (!kiln__ops_is_float(x->dtype))
        return kiln_set_error(KILN_ETYPE, "expected a float tensor, found %s",
                              kiln_dtype_name(x->dtype));
    int64_t axis = kiln_attrs_int(c->attrs, "axis");
    int r = x->ndim;
    if (axis < -r || axis > (r ? r - 1 : 0))
        return kiln_set_error(KILN_EATTR, "axis %lld out of range for rank %d", (long long)axis, r);
    c->out[0] = *x;
    c->out[0].data = NULL;
    c->out[0].nvalues = -1;
    return 0;
}

typedef struct sm_task {
    int kind;
    const float *x;
    float *y;
    int64_t L, inner;
} sm_task;

/* One contiguous row (the common last-axis case): Softmax by
 * fsoftmax_row_f32 (fastmath.h), LogSoftmax in lane arrays the compiler
 * maps to vector registers (max, then exp with the sum: fexp_f32x16 on
 * AVX-512, else fexp_f32). */
enum { SM_LANES = 16 };
static void sm_row_contig(const float *x, float *y, int64_t L, int kind) {
    if (kind == K_SOFTMAX) {
        fsoftmax_row_f32(x, y, L, 0);
        return;
    }
    float m[SM_LANES];
    for (int j = 0; j < SM_LANES; j++) m[j] = -INFINITY;
    int64_t k = 0;
    for (; k + SM_LANES <= L; k += SM_LANES)
        for (int j = 0; j < SM_LANES; j++) m[j] = x[k + j] > m[j] ? x[k + j] : m[j];
    float mx = -INFINITY;
    for (int j = 0; j < SM_LANES; j++) mx = m[j] > mx ? m[j] : mx;
    for (; k < L; k++) mx = x[k] > mx ? x[k] : mx;
    float acc[SM_LANES] = {0};
#if defined(__AVX512F__)
    /* the same lanes with the 16-lane exp (GCC's vectorization of fexp_f32
     * costs ~2x) */
    __m512 va = _mm512_setzero_ps(), vm = _mm512_set1_ps(mx);
    for (k = 0; k + SM_LANES <= L; k += SM_LANES)
        va = _mm512_add_ps(va, fexp_f32x16(_mm512_sub_ps(_mm512_loadu_ps(x + k), vm)));
    _mm512_storeu_ps(acc, va);
#else
    for (k = 0; k + SM_LANES <= L; k += SM_LANES)
        for (int j = 0; j < SM_LANES; j++) acc[j] += fexp_f32(x[k + j] - mx);
#endif
    double sum = 0;
    for (; k < L; k++) sum += fexp_f32(x[k] - mx);
    for (int j = 0; j < SM_LANES; j++) sum += acc[j];
    float ls = (float)log(sum);
    for (k = 0; k < L; k++) y[k] = x[k] - mx - ls;
}

/* Rows along a strided axis (inner > 1), SM_BLOCK of them side by side:
 * for rows (o, i0 .. i0 + n) each pass over k reads n contiguous floats,
 * so the loops over j vectorize (the row-at-a-time form read one float
 * per cache line: ~6.9 ns/element for a [1, 21, 64, 64] channel softmax).
 * Same arithmetic per row: max ignoring NaN, fexp_f32, a double sum. */
enum { SM_BLOCK = 128 };
static void sm_block(const sm_task *t, int64_t o, int64_t i0, int64_t n) {
    const int64_t L = t->L, in = t->inner;
    const float *x = t->x + o * L * in + i0;
    float *y = t->y + o * L * in + i0;
    float mx[SM_BLOCK];
    double sum[SM_BLOCK];
    for (int64_t j = 0; j < n; j++) mx[j] = -INFINITY, sum[j] = 0;
    for (int64_t k = 0; k < L; k++)
        for (int64_t j = 0; j < n; j++) mx[j] = x[k * in + j] > mx[j] ? x[k * in + j] : mx[j];
    const int store = t->kind == K_SOFTMAX; /* Softmax keeps the exps in y */
#if defined(__AVX512F__)
    /* GCC leaves fexp_f32 scalar in these loops (its branches): 16 rows at
     * a time with fexp_f32x16, each row's double sum in the same order */
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
        const __mmask16 m = n - j0 >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j0)) - 1);
        const __m512 vm = _mm512_maskz_loadu_ps(m, mx + j0);
        __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
        for (int64_t k = 0; k < L; k++) {
            const __m512 v = fexp_f32x16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + k * in + j0), vm));
            if (store) _mm512_mask_storeu_ps(y + k * in + j0, m, v);
            lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
            hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
        }
        double s16[16];
        _mm512_storeu_pd(s16, lo);
        _mm512_storeu_pd(s16 + 8, hi);
        for (int64_t j = j0; j < n && j < j0 + 16; j++) sum[j] = s16[j - j0];
    }
#else
    for (int64_t k = 0; k < L; k++)
        for (int64_t j = 0; j < n; j++) {
            float v = fexp_f32(x[k * in + j] - mx[j]);
            if (store) y[k * in + j] = v;
            sum[j] += v;
        }
#endif
    if (t->kind == K_SOFTMAX) {
        for (int64_t j = 0; j < n; j++) mx[j] = (float)(1.0 / sum[j]); /* mx now holds 1 / sum */
        for (int64_t k = 0; k < L; k++)
            for (int64_t j = 0; j < n; j++) y[k * in + j] *= mx[j];
    } else {
        for (int64_t j = 0; j < n; j++) mx[j] += (float)log(sum[j]); /* max + log sum */
        for (int64_t k = 0; k < L; k++)
            for (int64_t j = 0; j < n; j++) y[k * in + j] = x[k * in + j] - mx[j];
    }
}

static void sm_rows(void *ud, int64_t b, int64_t e) {
    const sm_task *t = ud;
    const int64_t L = t->L, in = t->inner;
    if (in == 1 && t->kind != K_HARDMAX && L > 0) {
        for (int64_t r = b; r < e; r++) sm_row_contig(t->x + r * L, t->y + r * L, L, t->kind);
        return;
    }
    if (t->kind != K_HARDMAX && L > 0) {
        for (int64_t r = b; r < e;) {
            const int64_t o = r / in, i0 = r % in, left = in - i0 < e - r ? in - i0 : e - r;
            const int64_t n = left < SM_BLOCK ? left : SM_BLOCK;
            sm_block(t, o, i0, n);
            r += n;
        }
        return;
    }
    for (int64_t r = b; r < e; r++) {
        int64_t o = r / in, i = r % in;
        const float *x = t->x + o * L * in + i;
        float *y = t->y + o * L * in + i;
        float mx = -INFINITY;
        int64_t am = 0;
        for (int64_t k = 0; k < L; k++) {
            if (x[k * in] > mx) {
                mx = x[k * in];
                am = k;
            } else if (t->kind == K_HARDMAX && isnan(x[k * in])) {
                am = k; /* np.argmax, the ONNX reference: the first NaN wins */
                break;
            }
        }
        if (t->kind == K_HARDMAX) {
            for (int64_t k = 0; k < L; k++) y[k * in] = k == am ? 1.0f : 0.0f;
            continue;
        }
        double sum = 0;
        if (t->kind == K_SOFTMAX) {
            for (int64_t k = 0; k < L; k++) {
                float v = expf(x[k * in] - mx);
                y[k * in] = v;
                sum += v;
            }
            float inv = (float)(1.0 / sum);
            for (int64_t k = 0; k < L; k++) y[k * in] *= inv;
        } else {
            for (int64_t k = 0; k < L; k++) sum += expf(x[k * in] - mx);
            float ls = (float)log(sum);
            for (int64_t k = 0; k < L; k++) y[k * in] = x[k * in] - mx - ls;
        }
    }
}

static int sm_run(const kiln_call *c, int kind, int coerce) {
    const kiln_tensor *X = &c->in[0];
    if (!kiln__ops_dense(X) || !kiln__ops_dense(&c->out[0]))
        return kiln_set_error(KILN_EUNSUPPORTED, "strided tensors not supported");
    int r = X->ndim;
    int64_t axis = kiln_attrs_int(c->attrs, "axis");
    if (axis < 0) axis += r;
    int64_t outer = 1, L = 1, inner = 1;
    for (int i = 0; i < r; i++) {
        if (i < axis) outer *= X->dims[i];
        else if (coerce || i == axis) L *= X->dims[i];
        else inner *= X->dims[i];
    }
    if (r == 0) L = 1;
    sm_task t = {.kind = kind, .x = X->data, .y = c->out[0].data, .L = L, .inner = inner};
    if (outer * inner * L == 0) return 0;
    kiln_exec_parallel_for(c->exec, outer * inner, 1 + 4096 / (L ? L : 1), sm_rows, &t);
    return 0;
}

#define SM_IMPL(fname, kind, coerce)                                           \
    static int fname##_f32(const kiln_call *c) { return sm_run(c, kind, coerce); } \
    static int fname(const kiln_call *c) { return kiln__ops_as_f32(c, fname##_f32); }
SM_IMPL(softmax1, K_SOFTMAX, 1)
SM_IMPL(softmax13, K_SOFTMAX, 0)
SM_IMPL(logsoftmax1, K_LOGSOFTMAX, 1)
SM_IMPL(logsoftmax13, K_LOGSOFTMAX, 0)
SM_IMPL(hardmax1, K_HARDMAX, 1)
SM_IMPL(hardmax13, K_HARDMAX, 0)

static const kiln_combo cu_float[] = {{.types = KILN_CU_T_FLOAT}, {0}};

#define SM_OP(var, nm, ver, at, fn, cu, cuf, dc)                               \
    static const kiln_quick_op var = {                                         \
        .ns = "ai.onnx", .name = nm, .version = ver,                           \
        .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,                    \
        .attrs = at, .shape = sm_shape, .impl = fn, .doc = dc,                 \
        .cuda_impl = cu, .cuda_formats = cuf,                                  \
    };                                                                         \
    KILN_OP(var)

SM_OP(softmax_1, "Softmax", 1, sm1_attrs, softmax1, kiln__cu_softmax1, cu_float, "softmax over dims >= axis (2-D coercion)")
SM_OP(softmax_13, "Softmax", 13, sm13_attrs, softmax13, kiln__cu_softmax13, cu_float, "softmax along axis")
SM_OP(logsoftmax_1, "LogSoftmax", 1, sm1_attrs, logsoftmax1, kiln__cu_logsoftmax1, cu_float, "log-softmax over dims >= axis")
SM_OP(logsoftmax_13, "LogSoftmax", 13, sm13_attrs, logsoftmax13, kiln__cu_logsoftmax13, cu_float, "log-softmax along axis")
SM_OP(hardmax_1, "Hardmax", 1, sm1_attrs, hardmax1, kiln__cu_hardmax1, cu_float, "one-hot of the first max over dims >= axis")
SM_OP(hardmax_13, "Hardmax", 13, sm13_attrs, hardmax13, kiln__cu_hardmax13, cu_float, "one-hot of the first max along axis")
