/*
 * ops1_util.c — helpers shared by the ops1 operator files (see ops1.h).
 */
#include "ops/common/ops1.h"

#include <math.h>

/* ---- type checks --------------------------------------------------------- */

int kiln__ops1_check_type(const kiln_shape_ctx *c, const char *op, int i,
                          int (*cls)(kiln_dtype), const char *what) {
    kiln_dtype t = c->in[i].dtype;
    if (!cls(t))
        return kiln_set_error(KILN_ETYPE, "%s: input %d must be %s, found %s", op, i,
                              what, kiln_dtype_name(t));
    return 0;
}

int kiln__ops1_check_same(const kiln_shape_ctx *c, const char *op, int i, int j) {
    if (c->in[i].dtype != c->in[j].dtype)
        return kiln_set_error(KILN_ETYPE,
                              "%s: inputs %d and %d must have the same type, found %s and %s",
                              op, i, j, kiln_dtype_name(c->in[i].dtype),
                              kiln_dtype_name(c->in[j].dtype));
    return 0;
}

/* ---- conversions ----------------------------------------------------------- */

#define OPS1_CASE_TO(SUF, T, CT, LD, ST, DST)                                 \
    case KILN_DTYPE_##SUF: {                                                  \
        const T *s = src;                                                     \
        for (int64_t i = 0; i < n; i++) dst[i] = (DST)LD(s[i]);               \
        break;                                                                \
    }

void kiln__ops1_to_f64(const void *src, kiln_dtype t, double *dst, int64_t n) {
    switch (t) {
        OPS1_TYPES_NUM(OPS1_CASE_TO, double)
        OPS1_TYPES_BOOL(OPS1_CASE_TO, double)
    default: for (int64_t i = 0; i < n; i++) dst[i] = 0; break;
    }
}

void kiln__ops1_to_i64(const void *src, kiln_dtype t, int64_t *dst, int64_t n) {
    switch (t) {
        OPS1_TYPES_INT(OPS1_CASE_TO, int64_t)
        OPS1_TYPES_BOOL(OPS1_CASE_TO, int64_t)
    case KILN_DTYPE_F32: case KILN_DTYPE_F64: case KILN_DTYPE_F16: case KILN_DTYPE_BF16: {
        /* rare: go through double with saturation */
        for (int64_t i = 0; i < n; i++) {
            double d = kiln__ops1_get_f64(src, t, i);
            dst[i] = isnan(d) ? 0 : d >= 9.2233720368547758e18 ? INT64_MAX
                   : d <= -9.2233720368547758e18 ? INT64_MIN : (int64_t)d;
        }
        break;
    }
    default: for (int64_t i = 0; i < n; i++) dst[i] = 0; break;
    }
}

#define OPS1_CASE_FROM(SUF, T, CT, LD, ST, SRC)                               \
    case KILN_DTYPE_##SUF: {                                                  \
        T *d = dst;                                                           \
        for (int64_t i = 0; i < n; i++) d[i] = (T)ST((CT)src[i]);             \
        break;                                                                \
    }

/* double -> integer without undefined behaviour: NaN -> 0, saturate at the
 * int64 range, then the (defined) modular conversion to the target. */
static inline int64_t f64_to_i64_sat(double d) {
    if (isnan(d)) return 0;
    if (d >= 9.2233720368547758e18) return INT64_MAX;
    if (d <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)d;
}

void kiln__ops1_from_f64(const double *src, kiln_dtype t, void *dst, int64_t n) {
    switch (t) {
        OPS1_TYPES_FLOAT(OPS1_CASE_FROM, double)
    case KILN_DTYPE_BOOL: {
        uint8_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = src[i] != 0;
        break;
    }
    case KILN_DTYPE_U64: {
        uint64_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = src[i] >= 9.2233720368547758e18
                       ? (src[i] >= 1.8446744073709552e19 ? UINT64_MAX : (uint64_t)src[i])
                       : (uint64_t)f64_to_i64_sat(src[i]);
        break;
    }
    default:
        if (kiln__ops1_is_int(t)) {
            int64_t tmp[256];
            for (int64_t b = 0; b < n; b += 256) {
                int64_t m = n - b < 256 ? n - b : 256;
                for (int64_t i = 0; i < m; i++) tmp[i] = f64_to_i64_sat(src[b + i]);
                kiln__ops1_from_i64(tmp, t, (char *)dst + b * kiln_dtype_size(t), m);
            }
        }
        break;
    }
}

void kiln__ops1_from_i64(const int64_t *src, kiln_dtype t, void *dst, int64_t n) {
    switch (t) {
        OPS1_TYPES_INT(OPS1_CASE_FROM, int64_t)
        OPS1_TYPES_FLOAT(OPS1_CASE_FROM, int64_t)
    case KILN_DTYPE_BOOL: {
        uint8_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = src[i] != 0;
        break;
    }
    default: break;
    }
}

void kiln__ops1_cast(const void *src, kiln_dtype st, void *dst, kiln_dtype dt, int64_t n) {
    size_t ss = kiln_dtype_size(st), ds = kiln_dtype_size(dt);
    if (st == dt) {
        memcpy(dst, src, (size_t)n * ss);
        return;
    }
    int src_f = kiln__ops1_is_float(st);
    int dst_f = kiln__ops1_is_float(dt);
    if (st == KILN_DTYPE_F32 && dt == KILN_DTYPE_F16) {
        const float *s = src;
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = kiln_f32_to_f16(s[i]);
        return;
    }
    if (st == KILN_DTYPE_F16 && dt == KILN_DTYPE_F32) {
        const uint16_t *s = src;
        float *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = kiln_f16_to_f32(s[i]);
        return;
    }
    enum { B = 512 };
    union { double f[B]; int64_t i[B]; } tmp;
    for (int64_t b = 0; b < n; b += B) {
        int64_t m = n - b < B ? n - b : B;
        const char *s = (const char *)src + b * ss;
        char *d = (char *)dst + b * ds;
        if (src_f || dst_f) {
            kiln__ops1_to_f64(s, st, tmp.f, m);
            kiln__ops1_from_f64(tmp.f, dt, d, m);
        } else {
            kiln__ops1_to_i64(s, st, tmp.i, m);
            kiln__ops1_from_i64(tmp.i, dt, d, m);
        }
    }
}

double kiln__ops1_get_f64(const void *p, kiln_dtype t, int64_t i) {
    double d;
    kiln__ops1_to_f64((const char *)p + i * kiln_dtype_size(t), t, &d, 1);
    return d;
}

int64_t kiln__ops1_get_i64(const void *p, kiln_dtype t, int64_t i) {
    int64_t v;
    kiln__ops1_to_i64((const char *)p + i * kiln_dtype_size(t), t, &v, 1);
    return v;
}

/* ---- build-time values ------------------------------------------------------ */

int64_t kiln__ops1_desc_numel(const kiln_desc *d) {
    int64_t n = 1, v;
    for (int i = 0; i < d->ndim; i++) {
        if (!d->dims[i] || !kiln_expr_is_const(d->dims[i], &v)) return -1;
        n *= v;
    }
    return n;
}

int kiln__ops1_const_dims(const kiln_desc *d, int64_t *v) {
    for (int i = 0; i < d->ndim; i++)
        if (!d->dims[i] || !kiln_expr_is_const(d->dims[i], &v[i])) return 0;
    return 1;
}

void kiln__ops1_copy_values(kiln_shape_ctx *c, int in, int out) {
    const kiln_expr *v[KILN_MAX_VALUES];
    int n = kiln__ops1_value_exprs(c->x, &c->in[in], v);
    c->out[out].nvalues = -1;
    if (n < 0) return;
    for (int i = 0; i < n; i++) c->out[out].values[i] = v[i];
    c->out[out].nvalues = n;
}

int kiln__ops1_copy_input(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    if (y->data != x->data && x->data)
        memcpy(y->data, x->data, (size_t)kiln_tensor_numel(y) * kiln_dtype_size(y->dtype));
    return 0;
}

int64_t kiln__ops1_const_ints(const kiln_desc *d, int64_t *v, int64_t max) {
    if (d->dtype == KILN_DTYPE_UNDEFINED) return -1;
    if (d->data && (kiln__ops1_is_int(d->dtype) || d->dtype == KILN_DTYPE_BOOL)) {
        int64_t n = kiln__ops1_desc_numel(d);
        if (n < 0 || n > max) return -1;
        kiln__ops1_to_i64(d->data, d->dtype, v, n);
        return n;
    }
    if (d->nvalues >= 0 && d->nvalues <= max) {
        for (int i = 0; i < d->nvalues; i++)
            if (!d->values[i] || !kiln_expr_is_const(d->values[i], &v[i])) return -1;
        return d->nvalues;
    }
    return -1;
}

int kiln__ops1_value_exprs(kiln_exprs *x, const kiln_desc *d, const kiln_expr **v) {
    if (d->dtype == KILN_DTYPE_UNDEFINED) return -1;
    if (d->nvalues >= 0 && d->nvalues <= KILN_MAX_VALUES) {
        for (int i = 0; i < d->nvalues; i++) {
            if (!d->values[i]) return -1;
            v[i] = d->values[i];
        }
        return d->nvalues;
    }
    if (d->data && (kiln__ops1_is_int(d->dtype) || d->dtype == KILN_DTYPE_BOOL)) {
        int64_t n = kiln__ops1_desc_numel(d);
        if (n < 0 || n > KILN_MAX_VALUES) return -1;
        for (int64_t i = 0; i < n; i++)
            v[i] = kiln_expr_const(x, kiln__ops1_get_i64(d->data, d->dtype, i));
        return (int)n;
    }
    return -1;
}

int kiln__ops1_need_ints(const kiln_shape_ctx *c, const char *op, int i,
                         const char *iname, int64_t *v, int64_t max, int64_t *n) {
    if (!kiln__ops1_has_in(c, i))
        return kiln_set_error(KILN_EINVAL, "%s: input %d '%s' is required", op, i, iname);
    if (!kiln__ops1_is_int(c->in[i].dtype))
        return kiln_set_error(KILN_ETYPE, "%s: input %d '%s' must be an integer tensor, found %s",
                              op, i, iname, kiln_dtype_name(c->in[i].dtype));
    if (c->in[i].ndim > 1)
        return kiln_set_error(KILN_ESHAPE, "%s: input %d '%s' must be 0-D or 1-D, found rank %d",
                              op, i, iname, c->in[i].ndim);
    *n = kiln__ops1_const_ints(&c->in[i], v, max);
    if (*n < 0)
        return kiln_set_error(KILN_EUNSUPPORTED,
                              "%s: input %d '%s' must be known at build time (a constant or "
                              "computed from shapes); its value is data-dependent here",
                              op, i, iname);
    return 0;
}

int kiln__ops1_axis(const char *op, const char *what, int64_t axis, int rank, int *out) {
    if (rank <= 0)
        return kiln_set_error(KILN_ESHAPE, "%s: %s = %lld needs an input of rank >= 1, found a scalar",
                              op, what, (long long)axis);
    if (axis < -rank || axis >= rank)
        return kiln_set_error(KILN_EATTR, "%s: %s = %lld is out of range [%d, %d) for rank %d",
                              op, what, (long long)axis, -rank, rank, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return 0;
}

/* ---- broadcasting ------------------------------------------------------------ */

void kiln__ops1_bc_init(kiln__ops1_bc *b, int ndo, const int64_t *dout, int nop,
                        const int *ndk, const int64_t *const *dk) {
    int64_t dims[KILN_MAX_DIMS], st[3][KILN_MAX_DIMS];
    for (int k = 0; k < nop; k++) {
        int64_t s = 1;
        for (int i = ndo - 1; i >= 0; i--) {
            int j = i - (ndo - ndk[k]);
            if (j < 0) {
                st[k][i] = 0;
                continue;
            }
            int64_t d = dk[k][j];
            st[k][i] = (d == 1 && dout[i] != 1) ? 0 : s;
            s *= d;
        }
    }
    /* drop size-1 dims, then coalesce dims contiguous for every operand */
    int nd = 0;
    for (int i = 0; i < ndo; i++) {
        if (dout[i] == 1) continue;
        if (nd > 0) {
            int ok = 1;
            for (int k = 0; k < nop; k++)
                if (st[k][nd - 1] != st[k][i] * dout[i]) ok = 0;
            if (ok) {
                dims[nd - 1] *= dout[i];
                for (int k = 0; k < nop; k++) st[k][nd - 1] = st[k][i];
                continue;
            }
        }
        dims[nd] = dout[i];
        for (int k = 0; k < nop; k++) st[k][nd] = st[k][i];
        nd++;
    }
    if (nd == 0) {
        dims[0] = 1;
        for (int k = 0; k < nop; k++) st[k][0] = 0;
        nd = 1;
    }
    b->nd = nd;
    b->nop = nop;
    b->rows = 1;
    for (int i = 0; i < nd; i++) {
        b->dims[i] = dims[i];
        for (int k = 0; k < nop; k++) b->st[k][i] = st[k][i];
        if (i < nd - 1) b->rows *= dims[i];
    }
}

int kiln__ops1_bc_check(const char *op, int k, int ndo, const int64_t *dout, int nd, const int64_t *d) {
    if (nd > ndo)
        return kiln_set_error(KILN_ESHAPE, "%s: input %d has rank %d, the output only %d", op, k, nd, ndo);
    for (int i = 0; i < nd; i++) {
        int64_t o = dout[ndo - nd + i];
        if (d[i] != 1 && d[i] != o)
            return kiln_set_error(KILN_ESHAPE,
                                  "%s: input %d dim %d is %lld at run time, which does not broadcast to %lld",
                                  op, k, i, (long long)d[i], (long long)o);
    }
    return 0;
}

void kiln__ops1_bc_row(const kiln__ops1_bc *b, int64_t r, int64_t *off) {
    for (int k = 0; k < b->nop; k++) off[k] = 0;
    for (int i = b->nd - 2; i >= 0 && r > 0; i--) {
        int64_t idx = r % b->dims[i];
        r /= b->dims[i];
        for (int k = 0; k < b->nop; k++) off[k] += idx * b->st[k][i];
    }
}

void kiln__ops1_par(kiln_exec *e, int64_t n, int64_t grain, kiln_range_fn fn, void *ud) {
    if (n <= 0) return;
    if (!e || n <= grain || kiln_exec_threads(e) <= 1) {
        fn(ud, 0, n);
        return;
    }
    kiln_exec_parallel_for(e, n, grain, fn, ud);
}

int kiln__ops1_contig(const kiln_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->dims[i] != 1 && t->strides[i] != s) return 0;
        s *= t->dims[i];
    }
    return 1;
}

/* ---- strided copy ------------------------------------------------------------ */

typedef struct scopy_job {
    char *dst;
    const char *src;
    size_t es;
    int nd;
    int64_t dims[KILN_MAX_DIMS], st[KILN_MAX_DIMS];
} scopy_job;

#define SCOPY_LOOP(T)                                                         \
    do {                                                                      \
        T *d_ = (T *)d;                                                       \
        const T *s_ = (const T *)s;                                           \
        for (int64_t i = 0; i < n; i++) d_[i] = s_[i * is];                   \
    } while (0)

static void scopy_rows(void *ud, int64_t r0, int64_t r1) {
    const scopy_job *j = ud;
    int nd = j->nd;
    int64_t n = j->dims[nd - 1], is = j->st[nd - 1];
    for (int64_t r = r0; r < r1; r++) {
        int64_t off = 0, rem = r;
        for (int i = nd - 2; i >= 0 && rem > 0; i--) {
            off += (rem % j->dims[i]) * j->st[i];
            rem /= j->dims[i];
        }
        char *d = j->dst + r * n * j->es;
        const char *s = j->src + off * (int64_t)j->es;
        if (is == 1) {
            memcpy(d, s, (size_t)n * j->es);
            continue;
        }
        switch (j->es) {
        case 1: SCOPY_LOOP(uint8_t); break;
        case 2: SCOPY_LOOP(uint16_t); break;
        case 4: SCOPY_LOOP(uint32_t); break;
        case 8: SCOPY_LOOP(uint64_t); break;
        default:
            for (int64_t i = 0; i < n; i++) memcpy(d + i * j->es, s + i * is * j->es, j->es);
        }
    }
}

/* Tiled copy for transposes that move the source's contiguous dim (k)
 * away from the innermost output dim: work item = (outer index, band of
 * TB rows of dim k); inside, TB x TB tiles keep both sides in cache. */
#define TB 16
typedef struct tile_job {
    char *dst;
    const char *src;
    size_t es;
    int nd, k;
    int64_t dims[KILN_MAX_DIMS], st[KILN_MAX_DIMS], ost[KILN_MAX_DIMS];
    int64_t nbands;
} tile_job;

#define TILE_LOOP(T)                                                          \
    do {                                                                      \
        T *d_ = (T *)d;                                                       \
        const T *s_ = (const T *)s;                                           \
        for (int64_t b0 = 0; b0 < B; b0 += TB) {                              \
            int64_t b1 = b0 + TB < B ? b0 + TB : B;                           \
            for (int64_t a = a0; a < a1; a++)                                 \
                for (int64_t b = b0; b < b1; b++) d_[a * oa + b] = s_[a + b * sb]; \
        }                                                                     \
    } while (0)

#if defined(__AVX2__)
#include <immintrin.h>
/* d[i * oa + j] = s[j * sb + i] for an 8 x 8 block of 4-byte elements */
static inline void tr8x8_32(const uint32_t *s, int64_t sb, uint32_t *d, int64_t oa) {
    __m256 r0 = _mm256_loadu_ps((const float *)(s + 0 * sb)), r1 = _mm256_loadu_ps((const float *)(s + 1 * sb));
    __m256 r2 = _mm256_loadu_ps((const float *)(s + 2 * sb)), r3 = _mm256_loadu_ps((const float *)(s + 3 * sb));
    __m256 r4 = _mm256_loadu_ps((const float *)(s + 4 * sb)), r5 = _mm256_loadu_ps((const float *)(s + 5 * sb));
    __m256 r6 = _mm256_loadu_ps((const float *)(s + 6 * sb)), r7 = _mm256_loadu_ps((const float *)(s + 7 * sb));
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps((float *)(d + 0 * oa), _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_storeu_ps((float *)(d + 1 * oa), _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_storeu_ps((float *)(d + 2 * oa), _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_storeu_ps((float *)(d + 3 * oa), _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_storeu_ps((float *)(d + 4 * oa), _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_storeu_ps((float *)(d + 5 * oa), _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_storeu_ps((float *)(d + 6 * oa), _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_storeu_ps((float *)(d + 7 * oa), _mm256_permute2f128_ps(u3, u7, 0x31));
}
#endif

static void tile_items(void *ud, int64_t w0, int64_t w1) {
    const tile_job *j = ud;
    int nd = j->nd, k = j->k;
    int64_t A = j->dims[k], B = j->dims[nd - 1], sb = j->st[nd - 1], oa = j->ost[k];
    for (int64_t w = w0; w < w1; w++) {
        int64_t band = w % j->nbands, o = w / j->nbands;
        int64_t so = 0, dof = 0;
        for (int i = nd - 2; i >= 0; i--) {
            if (i == k) continue;
            int64_t ix = o % j->dims[i];
            o /= j->dims[i];
            so += ix * j->st[i];
            dof += ix * j->ost[i];
        }
        int64_t a0 = band * TB, a1 = a0 + TB < A ? a0 + TB : A;
        char *d = j->dst + dof * (int64_t)j->es;
        const char *s = j->src + so * (int64_t)j->es;
        switch (j->es) {
        case 1: TILE_LOOP(uint8_t); break;
        case 2: TILE_LOOP(uint16_t); break;
        case 4:
#if defined(__AVX2__)
            if (a1 - a0 == TB) { /* full band: 8 x 8 register transposes, scalar tail in b */
                uint32_t *d_ = (uint32_t *)d;
                const uint32_t *s_ = (const uint32_t *)s;
                int64_t b = 0;
                for (; b + 8 <= B; b += 8)
                    for (int64_t a = a0; a < a1; a += 8) tr8x8_32(s_ + a + b * sb, sb, d_ + a * oa + b, oa);
                for (int64_t a = a0; a < a1; a++)
                    for (int64_t bb = b; bb < B; bb++) d_[a * oa + bb] = s_[a + bb * sb];
                break;
            }
#endif
            TILE_LOOP(uint32_t);
            break;
        default: TILE_LOOP(uint64_t); break;
        }
    }
}

void kiln__ops1_strided_copy(kiln_exec *e, void *dst, const void *src, size_t es, int nd,
                             const int64_t *dims, const int64_t *st) {
    scopy_job j;
    j.dst = dst;
    j.src = src;
    j.es = es;
    int64_t total = 1;
    int n = 0;
    for (int i = 0; i < nd; i++) {
        total *= dims[i];
        if (dims[i] == 1) continue;
        if (n > 0 && j.st[n - 1] == st[i] * dims[i]) {
            j.dims[n - 1] *= dims[i];
            j.st[n - 1] = st[i];
            continue;
        }
        j.dims[n] = dims[i];
        j.st[n] = st[i];
        n++;
    }
    if (total == 0) return;
    if (n == 0) {
        j.dims[0] = 1;
        j.st[0] = 1;
        n = 1;
    }
    j.nd = n;
    int64_t rows = total / j.dims[n - 1], inner = j.dims[n - 1];
    if (n >= 2 && j.st[n - 1] != 1 && inner >= 8 && (es == 1 || es == 2 || es == 4 || es == 8)) {
        int k = -1;
        for (int i = 0; i < n - 1; i++)
            if (j.st[i] == 1 && j.dims[i] >= 8) k = i;
        if (k >= 0) {
            tile_job t;
            t.dst = dst;
            t.src = src;
            t.es = es;
            t.nd = n;
            t.k = k;
            int64_t os = 1;
            for (int i = n - 1; i >= 0; i--) {
                t.dims[i] = j.dims[i];
                t.st[i] = j.st[i];
                t.ost[i] = os;
                os *= j.dims[i];
            }
            t.nbands = (j.dims[k] + TB - 1) / TB;
            int64_t items = total / (j.dims[k] * inner) * t.nbands;
            if (total < 65536) tile_items(&t, 0, items);
            else kiln__ops1_par(e, items, 1, tile_items, &t);
            return;
        }
    }
    if (total < 65536) scopy_rows(&j, 0, rows);
    else kiln__ops1_par(e, rows, inner >= 16384 ? 1 : 16384 / inner, scopy_rows, &j);
}
