/*
 * activation.c — unary elementwise ONNX operators: activations (Relu,
 * LeakyRelu, Sigmoid, HardSigmoid, HardSwish, Tanh, Gelu, Elu, Selu, Celu,
 * Softplus, Softsign, Mish, ThresholdedRelu, Shrink, Clip) and math
 * (Abs, Neg, Sign, Reciprocal, Floor, Ceil, Round, Sqrt, Exp, Log, Erf,
 * trigonometric and hyperbolic functions, IsNaN, IsInf).
 *
 * Every op is one expression U_<OP>(v) over the compute type; <tgmath.h>
 * makes exp/log/... resolve to the float or double function by type, so
 * the same body serves float32, float64 and float16/bfloat16 (computed in
 * float).  For float32 the hot functions (exp, log, tanh, erf) are kiln's
 * own branch-free polynomials, so the loops vectorize; float64 keeps libm.
 * Tables indexed by dtype hold the variants; the shape function accepts
 * exactly the dtypes present.
 */
#include "device/cpu/fastmath.h"
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

#include <tgmath.h>

/* Transcendental kernels are compute-bound: use the full AVX-512 width
 * where the target has it (GCC defaults to 256-bit vectors). */
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("prefer-vector-width=512")
#endif

#pragma GCC diagnostic ignored "-Wtype-limits"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-local-typedefs"

typedef struct uparam {
    double alpha, beta, gamma;
    double lo, hi;      /* Clip */
    int has_lo, has_hi; /* Clip */
    int neg, pos;       /* IsInf */
} uparam;

typedef void (*un_fn)(const void *x, void *y, int64_t n, const uparam *p);

/* (unused: the float32 form of a VEC_OPS op on AVX-512 targets) */
#define UN_DEF(SUF, T, CT, LD, ST, OP)                                        \
    __attribute__((unused)) static void un_##OP##_##SUF(const void *x_, void *y_, int64_t n, const uparam *p) { \
        const T *x = x_;                                                      \
        T *y = y_;                                                            \
        typedef CT ct_t;                                                      \
        const CT A = (CT)p->alpha, B = (CT)p->beta, G = (CT)p->gamma;         \
        (void)A, (void)B, (void)G;                                            \
        for (int64_t i = 0; i < n; i++) {                                     \
            CT v = LD(x[i]);                                                  \
            y[i] = (T)ST(U_##OP(v));                                          \
        }                                                                     \
    }
/* bool output */
#define UNB_DEF(SUF, T, CT, LD, ST, OP)                                       \
    static void un_##OP##_##SUF(const void *x_, void *y_, int64_t n, const uparam *p) { \
        const T *x = x_;                                                      \
        uint8_t *y = y_;                                                      \
        (void)p;                                                              \
        for (int64_t i = 0; i < n; i++) {                                     \
            CT v = LD(x[i]);                                                  \
            y[i] = (uint8_t)(U_##OP(v));                                      \
        }                                                                     \
    }
/* Clip: bounds in the compute type, only when given */
#define CLIP_DEF(SUF, T, CT, LD, ST, OP)                                      \
    static void un_CLIP_##SUF(const void *x_, void *y_, int64_t n, const uparam *p) { \
        const T *x = x_;                                                      \
        T *y = y_;                                                            \
        const CT lo = p->has_lo ? (CT)p->lo : 0, hi = p->has_hi ? (CT)p->hi : 0; \
        for (int64_t i = 0; i < n; i++) {                                     \
            CT v = LD(x[i]);                                                  \
            if (p->has_lo && v < lo) v = lo;                                  \
            if (p->has_hi && v > hi) v = hi;                                  \
            y[i] = (T)ST(v);                                                  \
        }                                                                     \
    }
#define UN_TAB(SUF, T, CT, LD, ST, OP) [KILN_DTYPE_##SUF] = un_##OP##_##SUF,

/* erf: Taylor series below 0.5, else Abramowitz & Stegun 7.1.26 (abs error
 * < 3e-7) */
static inline float ferf_f32(float x) {
    float ax = fabsf(x);
    float t = 1.0f / (1.0f + 0.3275911f * ax);
    float p = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
    float r = 1.0f - p * fexp_f32(-ax * ax);
    r = x < 0 ? -r : r;
    /* near 0 the series keeps the relative error small */
    float z = x * x;
    float sm = x * (1.12837917f + z * (-0.376126389f + z * (0.112837917f + z * (-0.0268661706f +
               z * (0.00522397762f + z * -0.000854832702f)))));
    return ax < 0.5f ? sm : x != x ? x : r;
}
/* natural log, Cephes logf: mantissa in [sqrt(1/2), sqrt(2)) and a
 * polynomial; within 2 ulp for normal positive inputs */
static inline float flog_f32(float x) {
    int den = x < 1.17549435e-38f;       /* denormal: scale by 2^23 first */
    float xs = den ? x * 8388608.0f : x;
    int32_t b;
    memcpy(&b, &xs, sizeof b);
    int32_t e = ((b >> 23) & 0xff) - 126;
    int32_t mb = (b & 0x807fffff) | 0x3f000000;
    float m;
    memcpy(&m, &mb, sizeof m);              /* x = m * 2^e, m in [0.5, 1) */
    int lo = m < 0.707106781186547524f;
    float fe = (float)(e - lo);
    m = lo ? m + m - 1.0f : m - 1.0f;
    float z = m * m;
    float p = 7.0376836292E-2f;
    p = p * m - 1.1514610310E-1f;
    p = p * m + 1.1676998740E-1f;
    p = p * m - 1.2420140846E-1f;
    p = p * m + 1.4249322787E-1f;
    p = p * m - 1.6668057665E-1f;
    p = p * m + 2.0000714765E-1f;
    p = p * m - 2.4999993993E-1f;
    p = p * m + 3.3333331174E-1f;
    float y = m * z * p - 2.12194440e-4f * fe - 0.5f * z;
    float r = m + y + 0.693359375f * fe - (den ? 15.9423851528f : 0.0f); /* 23 ln 2 */
    /* specials: x < 0 or NaN -> NaN, 0 -> -inf, inf -> inf, denormals via libm-free scaling */
    r = x == 0 ? -INFINITY : r;
    r = x == INFINITY ? INFINITY : r;
    return (x < 0) | (x != x) ? NAN : r;
}
#define EXPF(v) _Generic((v), float: fexp_f32, default: exp)(v)
#define LOGF(v) _Generic((v), float: flog_f32, default: log)(v)
#define ERFF(v) _Generic((v), float: ferf_f32, default: erf)(v)
/* clamp to [0, 1] in the compute type (tgmath's fmax(0, x) would widen to double) */
#define CLAMP01(v) ((v) < (ct_t)0 ? (ct_t)0 : (v) > (ct_t)1 ? (ct_t)1 : (v))
#define TANHF(v) _Generic((v), float: ftanh_f32, default: tanh)(v)

#define U_RELU(v) ((v) < 0 ? 0 : (v)) /* NaN stays NaN, as in ONNX Runtime */
#define U_LEAKY(v) ((v) >= 0 ? (v) : A * (v))
#define U_SIGMOID(v) (1 / (1 + EXPF(-(v))))
#define U_HSIGMOID(v) CLAMP01(A * (v) + B)
#define U_HSWISH(v) ((v) * CLAMP01((v) * (ct_t)(1.0 / 6.0) + (ct_t)0.5))
#define U_TANH(v) TANHF(v)
#define U_GELU(v) ((ct_t)0.5 * (v) * (1 + ERFF((v) * (ct_t)0.70710678118654752440)))
#define U_GELUT(v)                                                            \
    ((ct_t)0.5 * (v) * (1 + TANHF((ct_t)0.79788456080286535588 * ((v) + (ct_t)0.044715 * (v) * (v) * (v)))))
#define U_ERF(v) ERFF(v)
#define U_ELU(v) ((v) >= 0 ? (v) : A * (EXPF(v) - 1))
#define U_SELU(v) ((v) > 0 ? G * (v) : G * (A * EXPF(v) - A))
#define U_CELU(v) (((v) > 0 ? (v) : (ct_t)0) + ((v) > 0 ? (ct_t)0 : A * (EXPF((v) / A) - 1)))
#define U_SOFTPLUS(v) ((v) > 0 ? (v) + log1p(exp(-(v))) : log1p(exp(v)))
#define U_SOFTSIGN(v) ((v) / (1 + fabs(v)))
#define U_MISH(v) ((v) * TANHF(U_SOFTPLUS(v)))
#define U_THRELU(v) ((v) > A ? (v) : 0)
#define U_SHRINK(v) ((v) < -A ? (v) + B : (v) > A ? (v) - B : 0)
#define U_SIGN(v) ((v) != (v) ? (v) : ((v) > 0) - ((v) < 0)) /* NaN stays NaN (numpy, ORT) */
#define U_ABS(v) ((v) < 0 ? -(v) : (v))
#define U_NEG(v) (-(v))
#define U_RECIP(v) (1 / (v))
#define U_FLOOR(v) floor(v)
#define U_CEIL(v) ceil(v)
#define U_ROUND(v) nearbyint(v) /* half to even in the default rounding mode */
#define U_SQRT(v) sqrt(v)
#define U_EXP(v) EXPF(v)
#define U_LOG(v) LOGF(v)
#define U_SIN(v) sin(v)
#define U_COS(v) cos(v)
#define U_TAN(v) tan(v)
#define U_ASIN(v) asin(v)
#define U_ACOS(v) acos(v)
#define U_ATAN(v) atan(v)
#define U_SINH(v) sinh(v)
#define U_COSH(v) cosh(v)
#define U_ASINH(v) asinh(v)
#define U_ACOSH(v) acosh(v)
#define U_ATANH(v) atanh(v)
#define U_ISNAN(v) isnan(v)
#define U_ISINF(v) (isinf(v) && (((v) > 0 && p->pos) || ((v) < 0 && p->neg)))

/* Ops whose float32 kernel has a 16-lane AVX-512 form (V_<OP> below). */
#define VEC_OPS(X) X(SIGMOID) X(GELU) X(ERF) X(ELU) X(SELU) X(CELU) X(SOFTPLUS) X(MISH) X(EXP)
/* The other float ops: no transcendental call, libm's (rare ops), or one
 * GCC vectorizes as well as intrinsics did (Tanh and Gelu's tanh form: a
 * rational function, 0.24 ns/element either way). */
#define SCALAR_OPS(X)                                                         \
    X(TANH) X(GELUT) X(LEAKY) X(HSIGMOID) X(HSWISH) X(SOFTSIGN) X(THRELU)     \
    X(SHRINK) X(RECIP) X(FLOOR) X(CEIL) X(ROUND) X(SQRT) X(LOG) X(SIN) X(COS) \
    X(TAN) X(ASIN) X(ACOS) X(ATAN) X(SINH) X(COSH) X(ASINH) X(ACOSH) X(ATANH)
#define FLOAT_OPS(X) VEC_OPS(X) SCALAR_OPS(X)

#define DEF_FLOAT(OP) OPS_TYPES_FLOAT(UN_DEF, OP)
FLOAT_OPS(DEF_FLOAT)

/* float32 on AVX-512: the ops that call exp or erf, one expression each
 * over 16 lanes (fastmath.h), the last partial vector masked, so every
 * element takes the same path wherever the thread split falls.  Against
 * GCC's vectorization of the scalar forms, 65536 elements in L2, one
 * thread: Sigmoid 0.54 -> 0.33 ns/element, Erf 0.77 -> 0.26, Elu/Selu
 * 0.6 -> 0.29, Celu 0.80 -> 0.36, Exp 0.45 -> 0.24 (from memory, 1.6M
 * elements, all ~0.35-0.45); Softplus and Mish called libm: 12.3 -> 0.74,
 * 17.2 -> 0.38.  Same NaN and infinity behaviour as the
 * scalar forms (the comparisons are ordered: a NaN takes the exp side). */
#if defined(__AVX512F__)
#define V_SEL(m, a, b) _mm512_mask_blend_ps(m, b, a) /* m ? a : b, per lane */
#define V_GT0(v) _mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ)
#define V_SIGMOID(v) _mm512_div_ps(one, _mm512_add_ps(one, fexp_f32x16(_mm512_sub_ps(zero, v))))
#define V_GELU(v) _mm512_mul_ps(_mm512_mul_ps(half, v), \
                                _mm512_add_ps(one, ferf_f32x16(_mm512_mul_ps(v, _mm512_set1_ps(0.70710678118654752440f)))))
#define V_ERF(v) ferf_f32x16(v)
#define V_ELU(v) V_SEL(_mm512_cmp_ps_mask(v, zero, _CMP_GE_OQ), v, _mm512_mul_ps(A, _mm512_sub_ps(fexp_f32x16(v), one)))
#define V_SELU(v) V_SEL(V_GT0(v), _mm512_mul_ps(G, v), _mm512_mul_ps(G, _mm512_fmsub_ps(A, fexp_f32x16(v), A)))
#define V_CELU(v) V_SEL(V_GT0(v), v, _mm512_mul_ps(A, _mm512_sub_ps(fexp_f32x16(_mm512_div_ps(v, A)), one)))
/* max(v, 0) + log1p(exp(-|v|)): the scalar form's two branches in one */
#define V_SOFTPLUS(v) _mm512_add_ps(_mm512_max_ps(zero, v), flog1p01_f32x16(fexp_f32x16(_mm512_sub_ps(zero, _mm512_abs_ps(v)))))
/* x tanh(softplus(x)) = x n / (n + 2), n = e^x (e^x + 2); x itself above 15
 * (tanh is 1 in float there, and e^2x would overflow) */
#define V_MISH(v)                                                             \
    V_SEL(_mm512_cmp_ps_mask(v, _mm512_set1_ps(15.0f), _CMP_GT_OQ), v,       \
          _mm512_mul_ps(v, V_MISH_T(fexp_f32x16(_mm512_min_ps(_mm512_set1_ps(15.0f), v)))))
#define V_MISH_T(e) V_MISH_R(_mm512_mul_ps(e, _mm512_add_ps(e, _mm512_set1_ps(2.0f))))
#define V_MISH_R(n) _mm512_div_ps(n, _mm512_add_ps(n, _mm512_set1_ps(2.0f)))
#define V_EXP(v) fexp_f32x16(v)

#define VEC_DEF(OP)                                                           \
    static void vun_##OP(const void *x_, void *y_, int64_t n, const uparam *p) { \
        const float *x = x_;                                                  \
        float *y = y_;                                                        \
        const __m512 A = _mm512_set1_ps((float)p->alpha), G = _mm512_set1_ps((float)p->gamma); \
        const __m512 one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f), zero = _mm512_setzero_ps(); \
        (void)A, (void)G, (void)one, (void)half, (void)zero;                  \
        for (int64_t i = 0; i < n; i += 16) {                                 \
            const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1); \
            const __m512 v = _mm512_maskz_loadu_ps(m, x + i);                 \
            _mm512_mask_storeu_ps(y + i, m, V_##OP(v));                       \
        }                                                                     \
    }
VEC_OPS(VEC_DEF)
#define VSEL_F32(OP) vun_##OP
#else
#define VSEL_F32(OP) un_##OP##_F32
#endif
#define VSEL_F64(OP) un_##OP##_F64
#define VSEL_F16(OP) un_##OP##_F16
#define VSEL_BF16(OP) un_##OP##_BF16
#define UN_TABV(SUF, T, CT, LD, ST, OP) [KILN_DTYPE_##SUF] = VSEL_##SUF(OP),
OPS_TYPES_FLOAT(UN_DEF, RELU)
OPS_TYPES_SINT(UN_DEF, RELU)
OPS_TYPES_NUM(UN_DEF, SIGN)
OPS_TYPES_NUM(UN_DEF, ABS)
OPS_TYPES_FLOAT(UN_DEF, NEG)
OPS_TYPES_SINT(UN_DEF, NEG)
OPS_TYPES_NUM(CLIP_DEF, CLIP)
OPS_TYPES_FLOAT(UNB_DEF, ISNAN)
OPS_TYPES_FLOAT(UNB_DEF, ISINF)

#define TAB_FLOAT(OP) static const un_fn tab_##OP[KILN_DTYPE_COUNT_] = {OPS_TYPES_FLOAT(UN_TAB, OP)};
#define TAB_VEC(OP) static const un_fn tab_##OP[KILN_DTYPE_COUNT_] = {OPS_TYPES_FLOAT(UN_TABV, OP)};
VEC_OPS(TAB_VEC)
SCALAR_OPS(TAB_FLOAT)
TAB_FLOAT(ISNAN)
TAB_FLOAT(ISINF)
static const un_fn tab_RELU[KILN_DTYPE_COUNT_] = {OPS_TYPES_FLOAT(UN_TAB, RELU)
                                                      OPS_TYPES_SINT(UN_TAB, RELU)};
static const un_fn tab_NEG[KILN_DTYPE_COUNT_] = {OPS_TYPES_FLOAT(UN_TAB, NEG)
                                                     OPS_TYPES_SINT(UN_TAB, NEG)};
static const un_fn tab_SIGN[KILN_DTYPE_COUNT_] = {OPS_TYPES_NUM(UN_TAB, SIGN)};
static const un_fn tab_ABS[KILN_DTYPE_COUNT_] = {OPS_TYPES_NUM(UN_TAB, ABS)};
static const un_fn tab_CLIP[KILN_DTYPE_COUNT_] = {OPS_TYPES_NUM(UN_TAB, CLIP)};

/* ---- driver ------------------------------------------------------------------ */

typedef struct un_job {
    un_fn fn;
    const char *x;
    char *y;
    size_t ex, ey;
    const uparam *p;
} un_job;

static void un_range(void *ud, int64_t i0, int64_t i1) {
    const un_job *j = ud;
    j->fn(j->x + i0 * j->ex, j->y + i0 * j->ey, i1 - i0, j->p);
}

static int un_run(const kiln_call *c, const un_fn *tab, const uparam *p) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    un_fn fn = tab[x->dtype];
    if (!fn)
        return kiln_set_error(KILN_ETYPE, "no kernel for type %s", kiln_dtype_name(x->dtype));
    un_job j = {fn, x->data, y->data, kiln_dtype_size(x->dtype), kiln_dtype_size(y->dtype), p};
    kiln__ops_par_image(c->exec, y->ndim, y->dims, 16384, un_range, &j);
    return 0;
}

static int un_shape(kiln_shape_ctx *c, const char *op, const un_fn *tab, int out_bool) {
    kiln_dtype t = c->in[0].dtype;
    if (t <= 0 || t >= KILN_DTYPE_COUNT_ || !tab[t])
        return kiln_set_error(KILN_ETYPE, "%s: input type %s is not supported", op,
                              kiln_dtype_name(t));
    kiln_desc *o = &c->out[0];
    o->dtype = out_bool ? KILN_DTYPE_BOOL : t;
    o->ndim = c->in[0].ndim;
    for (int i = 0; i < o->ndim; i++) o->dims[i] = c->in[0].dims[i];
    o->nvalues = -1;
    return 0;
}

static uparam params(const kiln_attrs *a) {
    uparam p = {0};
    const kiln_attr_value *v;
    if ((v = kiln_attrs_get(a, "alpha")) && v->present) p.alpha = v->f;
    if ((v = kiln_attrs_get(a, "beta")) && v->present) p.beta = v->f;
    if ((v = kiln_attrs_get(a, "gamma")) && v->present) p.gamma = v->f;
    if ((v = kiln_attrs_get(a, "lambd")) && v->present) p.alpha = v->f;
    if ((v = kiln_attrs_get(a, "bias")) && v->present) p.beta = v->f;
    if ((v = kiln_attrs_get(a, "detect_negative")) && v->present) p.neg = (int)v->i;
    if ((v = kiln_attrs_get(a, "detect_positive")) && v->present) p.pos = (int)v->i;
    return p;
}

/* Epilogue (plugin.h, "epilogue fusion"): a unary float op applies in
 * place to any run of f32 values; channels do not matter. */
/* Types of the CUDA kernels (activation.cu): every function on the float
 * types, the exact ones also on int32/int64. */
/* The elementwise kernels also take NHWC in and out (4-D float tensors:
 * the same layout on both sides is the same element order). */
static const kiln_combo cu_float[] = {{.types = KILN_CU_T_FLOAT}, {.types = KILN_CU_T_NHWC, .layouts = "NHWC"}, {0}};
static const kiln_combo cu_exact[] = {{.types = KILN_CU_T_NUM}, {.types = KILN_CU_T_NHWC, .layouts = "NHWC"}, {0}};
static const kiln_combo cu_clip[] = {{.types = KILN_CU_T_NUM "|INT8|INT16|UINT8|UINT16|UINT32"}, {0}};
static const kiln_combo cu_class[] = {{.types = KILN_CU_T_FLOAT ", BOOL"}, {0}};

/* An F32 activation of 4-D tensors whose channels are a multiple of 16
 * also runs on NCHW16C (kiln__ops_ew16c_formats: no pad lanes, so the
 * flat pass is exact), so it stays inside a chain of NCHW16C convs and
 * fuses into them; not the ops with a BOOL output. */
#define UN_OP(VAR, NAME, VER, TAB, OUTBOOL, ATTRS, CUF, DOC)                  \
    static int VAR##_shape(kiln_shape_ctx *c) { return un_shape(c, NAME, TAB, OUTBOOL); } \
    static int VAR##_impl(const kiln_call *c) {                               \
        uparam p = params(c->attrs);                                          \
        return un_run(c, TAB, &p);                                            \
    }                                                                         \
    static int VAR##_cuda(const kiln_call *c) { return kiln__cu_unary(c, NAME); } \
    static int VAR##_epi(const kiln_epilogue_args *a, float *x, int64_t n,    \
                         int64_t ch, int64_t chan_len) {                      \
        (void)ch, (void)chan_len;                                             \
        uparam p = {.alpha = a->p[0], .beta = a->p[1], .gamma = a->p[2]};     \
        TAB[KILN_DTYPE_F32](x, x, n, &p);                                     \
        return 0;                                                             \
    }                                                                         \
    static int VAR##_epi_check(kiln_epilogue_args *a) {                       \
        uparam p = params(a->attrs);                                          \
        a->p[0] = p.alpha, a->p[1] = p.beta, a->p[2] = p.gamma;               \
        return OUTBOOL || a->x != 0 || !TAB[KILN_DTYPE_F32];                  \
    }                                                                         \
    static const kiln_quick_op VAR##_op = {                                   \
        .ns = OPS_NS, .name = NAME, .version = VER,                           \
        .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,                   \
        .attrs = ATTRS, .shape = VAR##_shape, .impl = VAR##_impl, .doc = DOC, \
        .epilogue = VAR##_epi, .epilogue_check = VAR##_epi_check,            \
        .cuda_impl = VAR##_cuda, .cuda_formats = CUF,                         \
        .formats_fn = OUTBOOL ? NULL : kiln__ops_ew16c_formats,              \
    };                                                                        \
    KILN_OP(VAR##_op)

#define ATTR_F(NAME, DEF) {.name = NAME, .type = KILN_ATTR_FLOAT, .def = DEF}
static const kiln_attr_def a_leaky[] = {ATTR_F("alpha", "0.01"), {NULL}};
static const kiln_attr_def a_hsig[] = {ATTR_F("alpha", "0.2"), ATTR_F("beta", "0.5"), {NULL}};
static const kiln_attr_def a_alpha1[] = {ATTR_F("alpha", "1.0"), {NULL}};
static const kiln_attr_def a_selu[] = {ATTR_F("alpha", "1.67326319217681884765625"),
                                       ATTR_F("gamma", "1.05070102214813232421875"), {NULL}};
static const kiln_attr_def a_shrink[] = {ATTR_F("bias", "0.0"), ATTR_F("lambd", "0.5"), {NULL}};
static const kiln_attr_def a_isinf[] = {
    {.name = "detect_negative", .type = KILN_ATTR_INT, .def = "1"},
    {.name = "detect_positive", .type = KILN_ATTR_INT, .def = "1"},
    {NULL}};

UN_OP(relu, "Relu", 6, tab_RELU, 0, NULL, cu_exact, "max(x, 0)")
UN_OP(leaky, "LeakyRelu", 6, tab_LEAKY, 0, a_leaky, cu_float, "x >= 0 ? x : alpha * x")
UN_OP(sigmoid, "Sigmoid", 6, tab_SIGMOID, 0, NULL, cu_float, "1 / (1 + exp(-x))")
UN_OP(hsigmoid, "HardSigmoid", 6, tab_HSIGMOID, 0, a_hsig, cu_float, "max(0, min(1, alpha * x + beta))")
UN_OP(hswish, "HardSwish", 14, tab_HSWISH, 0, NULL, cu_float, "x * max(0, min(1, x / 6 + 0.5))")
UN_OP(tanh_, "Tanh", 6, tab_TANH, 0, NULL, cu_float, "tanh(x)")
UN_OP(erf_, "Erf", 9, tab_ERF, 0, NULL, cu_float, "erf(x)")
UN_OP(elu, "Elu", 6, tab_ELU, 0, a_alpha1, cu_float, "x >= 0 ? x : alpha * (exp(x) - 1)")
UN_OP(selu, "Selu", 6, tab_SELU, 0, a_selu, cu_float, "scaled exponential linear unit")
UN_OP(celu, "Celu", 12, tab_CELU, 0, a_alpha1, cu_float, "max(0, x) + min(0, alpha * (exp(x / alpha) - 1))")
UN_OP(softplus, "Softplus", 1, tab_SOFTPLUS, 0, NULL, cu_float, "log(exp(x) + 1)")
UN_OP(softsign, "Softsign", 1, tab_SOFTSIGN, 0, NULL, cu_float, "x / (1 + |x|)")
UN_OP(mish, "Mish", 18, tab_MISH, 0, NULL, cu_float, "x * tanh(softplus(x))")
UN_OP(threlu, "ThresholdedRelu", 10, tab_THRELU, 0, a_alpha1, cu_float, "x > alpha ? x : 0")
UN_OP(shrink, "Shrink", 9, tab_SHRINK, 0, a_shrink, cu_float, "soft shrinkage")
UN_OP(sign, "Sign", 9, tab_SIGN, 0, NULL, cu_exact, "-1, 0 or 1")
UN_OP(abs_, "Abs", 6, tab_ABS, 0, NULL, cu_exact, "|x|")
UN_OP(neg, "Neg", 6, tab_NEG, 0, NULL, cu_exact, "-x")
UN_OP(recip, "Reciprocal", 6, tab_RECIP, 0, NULL, cu_float, "1 / x")
UN_OP(floor_, "Floor", 6, tab_FLOOR, 0, NULL, cu_float, "floor(x)")
UN_OP(ceil_, "Ceil", 6, tab_CEIL, 0, NULL, cu_float, "ceil(x)")
UN_OP(round_, "Round", 11, tab_ROUND, 0, NULL, cu_float, "round half to even")
UN_OP(sqrt_, "Sqrt", 6, tab_SQRT, 0, NULL, cu_float, "sqrt(x)")
UN_OP(exp_, "Exp", 6, tab_EXP, 0, NULL, cu_float, "exp(x)")
UN_OP(log_, "Log", 6, tab_LOG, 0, NULL, cu_float, "natural logarithm")
UN_OP(sin_, "Sin", 7, tab_SIN, 0, NULL, cu_float, "sin(x)")
UN_OP(cos_, "Cos", 7, tab_COS, 0, NULL, cu_float, "cos(x)")
UN_OP(tan_, "Tan", 7, tab_TAN, 0, NULL, cu_float, "tan(x)")
UN_OP(asin_, "Asin", 7, tab_ASIN, 0, NULL, cu_float, "asin(x)")
UN_OP(acos_, "Acos", 7, tab_ACOS, 0, NULL, cu_float, "acos(x)")
UN_OP(atan_, "Atan", 7, tab_ATAN, 0, NULL, cu_float, "atan(x)")
UN_OP(sinh_, "Sinh", 9, tab_SINH, 0, NULL, cu_float, "sinh(x)")
UN_OP(cosh_, "Cosh", 9, tab_COSH, 0, NULL, cu_float, "cosh(x)")
UN_OP(asinh_, "Asinh", 9, tab_ASINH, 0, NULL, cu_float, "asinh(x)")
UN_OP(acosh_, "Acosh", 9, tab_ACOSH, 0, NULL, cu_float, "acosh(x)")
UN_OP(atanh_, "Atanh", 9, tab_ATANH, 0, NULL, cu_float, "atanh(x)")
UN_OP(isnan_, "IsNaN", 9, tab_ISNAN, 1, NULL, cu_class, "x is NaN")
UN_OP(isinf_, "IsInf", 10, tab_ISINF, 1, a_isinf, cu_class, "x is +/-infinity (per detect_*)")

/* Gelu (opset 20): approximate = "none" (erf) or "tanh". */
static const kiln_attr_def a_gelu[] = {
    {.name = "approximate", .type = KILN_ATTR_STRING, .def = "none", .doc = "none or tanh"},
    {NULL}};
static int gelu_tanh(const kiln_attrs *a, int *t) {
    const char *s = kiln_attrs_string(a, "approximate");
    if (!s || !strcmp(s, "none")) *t = 0;
    else if (!strcmp(s, "tanh")) *t = 1;
    else return kiln_set_error(KILN_EATTR, "Gelu: approximate must be 'none' or 'tanh', found '%s'", s);
    return 0;
}
static int gelu_shape(kiln_shape_ctx *c) {
    int t = 0, r = gelu_tanh(c->attrs, &t);
    return r ? r : un_shape(c, "Gelu", tab_GELU, 0);
}
static int gelu_impl(const kiln_call *c) {
    int t = 0, r = gelu_tanh(c->attrs, &t);
    uparam p = {0};
    return r ? r : un_run(c, t ? tab_GELUT : tab_GELU, &p);
}
static int gelu_cuda(const kiln_call *c) { return kiln__cu_unary(c, "Gelu"); }
/* Epilogue (e.g. after a MatMul's bias): p[0] is 1 for the tanh form. */
static int gelu_epi(const kiln_epilogue_args *a, float *x, int64_t n, int64_t ch, int64_t chan_len) {
    (void)ch, (void)chan_len;
    uparam p = {0};
    (a->p[0] != 0.0f ? tab_GELUT : tab_GELU)[KILN_DTYPE_F32](x, x, n, &p);
    return 0;
}
static int gelu_epi_check(kiln_epilogue_args *a) {
    int t = 0;
    if (a->x != 0 || gelu_tanh(a->attrs, &t)) return 1;
    a->p[0] = (float)t;
    return 0;
}
static const kiln_quick_op gelu_op = {
    .ns = OPS_NS, .name = "Gelu", .version = 20, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = a_gelu, .shape = gelu_shape, .impl = gelu_impl,
    .epilogue = gelu_epi, .epilogue_check = gelu_epi_check,
    .cuda_impl = gelu_cuda, .cuda_formats = cu_float,
    .doc = "Gaussian error linear unit (exact or tanh approximation)",
};
KILN_OP(gelu_op)

/* ---- Clip --------------------------------------------------------------------- */

/* Clip-6: min/max attributes (float inputs). */
static const kiln_attr_def a_clip6[] = {
    ATTR_F("min", "-3.402823466e+38"), ATTR_F("max", "3.402823466e+38"), {NULL}};
static int clip6_shape(kiln_shape_ctx *c) {
    if (!kiln__ops_is_float(c->in[0].dtype))
        return kiln_set_error(KILN_ETYPE, "Clip-6: input must be a float type, found %s",
                              kiln_dtype_name(c->in[0].dtype));
    return un_shape(c, "Clip", tab_CLIP, 0);
}
static int clip6_impl(const kiln_call *c) {
    uparam p = {0};
    p.lo = kiln_attrs_float(c->attrs, "min");
    p.hi = kiln_attrs_float(c->attrs, "max");
    p.has_lo = p.has_hi = 1;
    return un_run(c, tab_CLIP, &p);
}
/* Epilogue: p[0], p[1] = has min, min; p[2], p[3] = has max, max. */
static int clip_epi(const kiln_epilogue_args *a, float *x, int64_t n, int64_t ch, int64_t chan_len) {
    (void)ch, (void)chan_len;
    uparam p = {.has_lo = a->p[0] != 0, .lo = a->p[1], .has_hi = a->p[2] != 0, .hi = a->p[3]};
    tab_CLIP[KILN_DTYPE_F32](x, x, n, &p);
    return 0;
}
static int clip6_epi_check(kiln_epilogue_args *a) {
    if (a->x != 0) return 1;
    a->p[0] = a->p[2] = 1;
    a->p[1] = kiln_attrs_float(a->attrs, "min");
    a->p[3] = kiln_attrs_float(a->attrs, "max");
    return 0;
}
/* Clip-11+: constant f32 scalar min/max inputs. */
static int clip_epi_check(kiln_epilogue_args *a) {
    if (a->x != 0) return 1;
    for (int i = 1; i < 3; i++) {
        a->p[2 * (i - 1)] = 0;
        if (i >= a->nin || !a->in[i].data) continue;
        if (a->in[i].dtype != KILN_DTYPE_F32 || kiln_tensor_numel(&a->in[i]) != 1) return 1;
        a->p[2 * (i - 1)] = 1;
        a->p[2 * (i - 1) + 1] = *(const float *)a->in[i].data;
    }
    return 0;
}
static const kiln_quick_op clip6_op = {
    .ns = OPS_NS, .name = "Clip", .version = 6, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .attrs = a_clip6, .shape = clip6_shape, .impl = clip6_impl,
    .epilogue = clip_epi, .epilogue_check = clip6_epi_check,
    .cuda_impl = kiln__cu_clip, .cuda_formats = cu_float,
    .doc = "clamp to [min, max] (attributes)",
};
KILN_OP(clip6_op)

/* Clip-11+: optional scalar inputs min and max, same type as x. */
static int clip11_shape(kiln_shape_ctx *c) {
    for (int i = 1; i < 3; i++) {
        if (!kiln__ops_has_in(c, i)) continue;
        int r = kiln__ops_check_same(c, "Clip", 0, i);
        if (r) return r;
        int64_t n = kiln__ops_desc_numel(&c->in[i]);
        if (n != 1)
            return kiln_set_error(KILN_ESHAPE, "Clip: input %d '%s' must be a scalar, found rank %d",
                                  i, i == 1 ? "min" : "max", c->in[i].ndim);
    }
    return un_shape(c, "Clip", tab_CLIP, 0);
}
static int clip11_impl(const kiln_call *c) {
    uparam p = {0};
    if (kiln__ops_call_has_in(c, 1)) {
        p.has_lo = 1;
        p.lo = kiln__ops_get_f64(c->in[1].data, c->in[1].dtype, 0);
    }
    if (kiln__ops_call_has_in(c, 2)) {
        p.has_hi = 1;
        p.hi = kiln__ops_get_f64(c->in[2].data, c->in[2].dtype, 0);
    }
    return un_run(c, tab_CLIP, &p);
}
static const kiln_quick_op clip11_op = {
    .ns = OPS_NS, .name = "Clip", .version = 11, .min_inputs = 1, .max_inputs = 3,
    .num_outputs = 1, .shape = clip11_shape, .impl = clip11_impl,
    .epilogue = clip_epi, .epilogue_check = clip_epi_check,
    .cuda_impl = kiln__cu_clip, .cuda_formats = cu_clip, .cuda_host_inputs = 6,
    .doc = "clamp to [min, max] (optional scalar inputs)",
};
KILN_OP(clip11_op)
