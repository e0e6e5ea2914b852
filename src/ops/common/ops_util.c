/*
 * ops_util.c — helpers shared by the built-in operators (see ops_util.h).
 */
#include "ops/common/ops_util.h"
#include "core/tensor_view.h"
#include "kiln_int.h"

#include <math.h>
#include <stdio.h>

/* ---- type checks --------------------------------------------------------- */

static int type_listed(kiln_dtype t, const char *types) {
    for (const char *p = types; *p;) {
        size_t n = strcspn(p, "|");
        char tok[16];
        if (n < sizeof tok) {
            memcpy(tok, p, n);
            tok[n] = 0;
            if (kiln_dtype_parse(tok) == t) return 1;
        }
        p += n + (p[n] == '|');
    }
    return 0;
}

int kiln__ops_check_geom(const char *op, const char *name, const int64_t *v, int n, int64_t lo) {
    for (int i = 0; i < n; i++)
        if (v[i] < lo || v[i] > KILN_OPS_MAX_GEOM)
            return lo < 0 ? kiln_set_error(KILN_EATTR, "%s: %s[%d] = %lld is out of range [-2^30, 2^30]", op, name,
                                           i, (long long)v[i])
                          : kiln_set_error(KILN_EATTR, "%s: %s[%d] = %lld is out of range [%lld, 2^30]", op, name, i,
                                           (long long)v[i], (long long)lo);
    return 0;
}

int kiln__ops_geom_attrs(const kiln_attrs *a, const char *op, const kiln__ops_geom_attr *f, int nf) {
    for (int k = 0; k < nf; k++) {
        const int64_t *v;
        int64_t n = kiln_attrs_ints(a, f[k].name, &v);
        if (n != f[k].n)
            return kiln_set_error(KILN_EATTR, "%s: %s: expected %d values, found %lld", op, f[k].name, f[k].n,
                                  (long long)n);
        int rc = kiln__ops_check_geom(op, f[k].name, v, f[k].n, f[k].lo);
        if (rc) return rc;
        memcpy(f[k].dst, v, (size_t)f[k].n * sizeof *v);
    }
    return 0;
}

int kiln__ops_cuda_spatial(const kiln_shape_ctx *c, const char *op, int lo, int hi) {
    int nsp = c->in[0].ndim - 2;
    if (nsp >= lo && nsp <= hi) return 0;
    return kiln_set_error(KILN_EUNSUPPORTED, "%s: the CUDA kernels take %d-D to %d-D windows, this one is %d-D", op,
                          lo, hi, nsp);
}

int kiln__ops_cuda_types(const kiln_shape_ctx *c, const char *op, const char *types) {
    const kiln_desc *d[2] = {&c->in[0], &c->out[0]};
    for (int k = 0; k < 2; k++)
        if (!type_listed(d[k]->dtype, types))
            return kiln_set_error(KILN_EUNSUPPORTED, "%s: the CUDA kernels take %s %s, found %s", op,
                                  k ? "output 0 in" : "input 0 in", types, kiln_dtype_name(d[k]->dtype));
    return 0;
}

int kiln__ops_check_type(const kiln_shape_ctx *c, const char *op, int i,
                          int (*cls)(kiln_dtype), const char *what) {
    kiln_dtype t = c->in[i].dtype;
    if (!cls(t))
        return kiln_set_error(KILN_ETYPE, "%s: input %d must be %s, found %s", op, i,
                              what, kiln_dtype_name(t));
    return 0;
}

int kiln__ops_check_same(const kiln_shape_ctx *c, const char *op, int i, int j) {
    if (c->in[i].dtype != c->in[j].dtype)
        return kiln_set_error(KILN_ETYPE,
                              "%s: inputs %d and %d must have the same type, found %s and %s",
                              op, i, j, kiln_dtype_name(c->in[i].dtype),
                              kiln_dtype_name(c->in[j].dtype));
    return 0;
}

int kiln__ops_check_same_mask(const kiln_shape_ctx *c, const char *op, unsigned mask) {
    for (int i = 1; i < c->nin && i < 32; i++) {
        if (!(mask >> i & 1u) || c->in[i].dtype == KILN_DTYPE_UNDEFINED) continue;
        int rc = kiln__ops_check_same(c, op, i, 0);
        if (rc) return rc;
    }
    return 0;
}

/* ---- conversions ----------------------------------------------------------- */

/* double -> integer without undefined behaviour: NaN -> 0, saturate at the
 * int64 range, then the (defined) modular conversion to the target. */
static inline int64_t f64_to_i64_sat(double d) {
    if (isnan(d)) return 0;
    if (d >= 9.2233720368547758e18) return INT64_MAX;
    if (d <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)d;
}

#define OPS_CASE_TO(SUF, T, CT, LD, ST, DST)                                  \
    case KILN_DTYPE_##SUF: {                                                  \
        const T *s = src;                                                     \
        for (int64_t i = 0; i < n; i++) dst[i] = (DST)LD(s[i]);               \
        break;                                                                \
    }

void kiln__ops_to_f64(const void *src, kiln_dtype t, double *dst, int64_t n) {
    switch (t) {
        OPS_TYPES_NUM(OPS_CASE_TO, double)
        OPS_TYPES_BOOL(OPS_CASE_TO, double)
    default: for (int64_t i = 0; i < n; i++) dst[i] = 0; break;
    }
}

void kiln__ops_to_i64(const void *src, kiln_dtype t, int64_t *dst, int64_t n) {
    switch (t) {
        OPS_TYPES_INT(OPS_CASE_TO, int64_t)
        OPS_TYPES_BOOL(OPS_CASE_TO, int64_t)
    case KILN_DTYPE_F32: case KILN_DTYPE_F64: case KILN_DTYPE_F16: case KILN_DTYPE_BF16: {
        /* rare: go through double with saturation */
        for (int64_t i = 0; i < n; i++) dst[i] = f64_to_i64_sat(kiln__ops_get_f64(src, t, i));
        break;
    }
    default: for (int64_t i = 0; i < n; i++) dst[i] = 0; break;
    }
}

#define OPS_CASE_FROM(SUF, T, CT, LD, ST, SRC)                                \
    case KILN_DTYPE_##SUF: {                                                  \
        T *d = dst;                                                           \
        for (int64_t i = 0; i < n; i++) d[i] = (T)ST((CT)src[i]);             \
        break;                                                                \
    }

void kiln__ops_from_f64(const double *src, kiln_dtype t, void *dst, int64_t n) {
    switch (t) {
        OPS_TYPES_FLOAT(OPS_CASE_FROM, double)
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
        if (kiln__ops_is_int(t)) {
            int64_t tmp[256];
            for (int64_t b = 0; b < n; b += 256) {
                int64_t m = n - b < 256 ? n - b : 256;
                for (int64_t i = 0; i < m; i++) tmp[i] = f64_to_i64_sat(src[b + i]);
                kiln__ops_from_i64(tmp, t, (char *)dst + b * kiln_dtype_size(t), m);
            }
        }
        break;
    }
}

void kiln__ops_from_i64(const int64_t *src, kiln_dtype t, void *dst, int64_t n) {
    switch (t) {
        OPS_TYPES_INT(OPS_CASE_FROM, int64_t)
        OPS_TYPES_FLOAT(OPS_CASE_FROM, int64_t)
    case KILN_DTYPE_BOOL: {
        uint8_t *d = dst;
        for (int64_t i = 0; i < n; i++) d[i] = src[i] != 0;
        break;
    }
    default: break;
    }
}

void kiln__ops_cast(const void *src, kiln_dtype st, void *dst, kiln_dtype dt, int64_t n) {
    size_t ss = kiln_dtype_size(st), ds = kiln_dtype_size(dt);
    if (st == dt) {
        memcpy(dst, src, (size_t)n * ss);
        return;
    }
    int src_f = kiln__ops_is_float(st);
    int dst_f = kiln__ops_is_float(dt);
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
            kiln__ops_to_f64(s, st, tmp.f, m);
            kiln__ops_from_f64(tmp.f, dt, d, m);
        } else {
            kiln__ops_to_i64(s, st, tmp.i, m);
            kiln__ops_from_i64(tmp.i, dt, d, m);
        }
    }
}

#define OPS_CASE_GET(SUF, T, CT, LD, ST, R)                                   \
    case KILN_DTYPE_##SUF: return (R)LD(((const T *)p)[i]);

double kiln__ops_get_f64(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
        OPS_TYPES_NUM(OPS_CASE_GET, double)
        OPS_TYPES_BOOL(OPS_CASE_GET, double)
    default: return 0;
    }
}

int64_t kiln__ops_get_i64(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
        OPS_TYPES_INT(OPS_CASE_GET, int64_t)
        OPS_TYPES_BOOL(OPS_CASE_GET, int64_t)
    default: return f64_to_i64_sat(kiln__ops_get_f64(p, t, i));
    }
}

void kiln__ops_set_f64(void *p, kiln_dtype t, int64_t i, double v) {
    if (t == KILN_DTYPE_F32) ((float *)p)[i] = (float)v; /* the common case, inline */
    else kiln__ops_from_f64(&v, t, (char *)p + i * (int64_t)kiln_dtype_size(t), 1);
}

/* ---- build-time values ------------------------------------------------------ */

int64_t kiln__ops_desc_numel(const kiln_desc *d) {
    int64_t n = 1, v;
    for (int i = 0; i < d->ndim; i++) {
        if (!d->dims[i] || !kiln_expr_is_const(d->dims[i], &v)) return -1;
        n *= v;
    }
    return n;
}

int kiln__ops_const_dims(const kiln_desc *d, int64_t *v) {
    for (int i = 0; i < d->ndim; i++)
        if (!d->dims[i] || !kiln_expr_is_const(d->dims[i], &v[i])) return 0;
    return 1;
}

void kiln__ops_copy_values(kiln_shape_ctx *c, int in, int out) {
    const kiln_expr *v[KILN_MAX_VALUES];
    int n = kiln__ops_value_exprs(c->x, &c->in[in], v);
    c->out[out].nvalues = -1;
    if (n < 0) return;
    for (int i = 0; i < n; i++) c->out[out].values[i] = v[i];
    c->out[out].nvalues = n;
}

int kiln__ops_copy_input(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    if (y->data != x->data && x->data)
        memcpy(y->data, x->data, (size_t)kiln_tensor_numel(y) * kiln_dtype_size(y->dtype));
    return 0;
}

int64_t kiln__ops_const_ints(const kiln_desc *d, int64_t *v, int64_t max) {
    if (d->dtype == KILN_DTYPE_UNDEFINED) return -1;
    if (d->data && (kiln__ops_is_int(d->dtype) || d->dtype == KILN_DTYPE_BOOL)) {
        int64_t n = kiln__ops_desc_numel(d);
        if (n < 0 || n > max) return -1;
        kiln__ops_to_i64(d->data, d->dtype, v, n);
        return n;
    }
    if (d->nvalues >= 0 && d->nvalues <= max) {
        for (int i = 0; i < d->nvalues; i++)
            if (!d->values[i] || !kiln_expr_is_const(d->values[i], &v[i])) return -1;
        return d->nvalues;
    }
    return -1;
}

int kiln__ops_value_exprs(kiln_exprs *x, const kiln_desc *d, const kiln_expr **v) {
    if (d->dtype == KILN_DTYPE_UNDEFINED) return -1;
    if (d->nvalues >= 0 && d->nvalues <= KILN_MAX_VALUES) {
        for (int i = 0; i < d->nvalues; i++) {
            if (!d->values[i]) return -1;
            v[i] = d->values[i];
        }
        return d->nvalues;
    }
    if (d->data && (kiln__ops_is_int(d->dtype) || d->dtype == KILN_DTYPE_BOOL)) {
        int64_t n = kiln__ops_desc_numel(d);
        if (n < 0 || n > KILN_MAX_VALUES) return -1;
        for (int64_t i = 0; i < n; i++)
            v[i] = kiln_expr_const(x, kiln__ops_get_i64(d->data, d->dtype, i));
        return (int)n;
    }
    return -1;
}

int kiln__ops_need_ints(const kiln_shape_ctx *c, const char *op, int i,
                         const char *iname, int64_t *v, int64_t max, int64_t *n) {
    if (!kiln__ops_has_in(c, i))
        return kiln_set_error(KILN_EINVAL, "%s: input %d '%s' is required", op, i, iname);
    if (!kiln__ops_is_int(c->in[i].dtype))
        return kiln_set_error(KILN_ETYPE, "%s: input %d '%s' must be an integer tensor, found %s",
                              op, i, iname, kiln_dtype_name(c->in[i].dtype));
    if (c->in[i].ndim > 1)
        return kiln_set_error(KILN_ESHAPE, "%s: input %d '%s' must be 0-D or 1-D, found rank %d",
                              op, i, iname, c->in[i].ndim);
    *n = kiln__ops_const_ints(&c->in[i], v, max);
    if (*n < 0)
        return kiln_set_error(KILN_EUNSUPPORTED,
                              "%s: input %d '%s' must be known at build time (a constant or "
                              "computed from shapes); its value is data-dependent here",
                              op, i, iname);
    return 0;
}

int kiln__ops_axis(const char *op, const char *what, int64_t axis, int rank, int *out) {
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

void kiln__ops_bc_init(kiln__ops_bc *b, int ndo, const int64_t *dout, int nop,
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

int kiln__ops_bc_check(const char *op, int k, int ndo, const int64_t *dout, int nd, const int64_t *d) {
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

void kiln__ops_bc_row(const kiln__ops_bc *b, int64_t r, int64_t *off) {
    for (int k = 0; k < b->nop; k++) off[k] = 0;
    for (int i = b->nd - 2; i >= 0 && r > 0; i--) {
        int64_t idx = r % b->dims[i];
        r /= b->dims[i];
        for (int k = 0; k < b->nop; k++) off[k] += idx * b->st[k][i];
    }
}

void kiln__ops_par(kiln_exec *e, int64_t n, int64_t grain, kiln_range_fn fn, void *ud) {
    if (n <= 0) return;
    if (!e || n <= grain || kiln_exec_threads(e) <= 1) {
        fn(ud, 0, n);
        return;
    }
    kiln_exec_parallel_for(e, n, grain, fn, ud);
}

typedef struct planes_job {
    kiln_range_fn fn;
    void *ud;
    int64_t outer, plane;
} planes_job;

/* Task ith: its share of every plane, plane after plane (one stream each;
 * a share cut in smaller chunks for balance made 4x the streams, each a
 * quarter as long, and ran slower). */
static void planes_task(void *ud, int ith, int nth) {
    const planes_job *j = ud;
    int64_t b, e;
    kiln_split_range(j->plane, ith, nth, &b, &e);
    if (e > b)
        for (int64_t o = 0; o < j->outer; o++) j->fn(j->ud, o * j->plane + b, o * j->plane + e);
}

void kiln__ops_par_planes(kiln_exec *e, int64_t outer, int64_t plane, int64_t item, int64_t grain,
                          kiln_range_fn fn, void *ud) {
    if (outer < 2 || plane * item < KILN__OPS_PLANE_MIN || !e || kiln_exec_threads(e) <= 1 ||
        outer * plane <= grain) {
        kiln__ops_par(e, outer * plane, grain, fn, ud);
        return;
    }
    planes_job j = {.fn = fn, .ud = ud, .outer = outer, .plane = plane};
    int64_t tasks = outer * plane / grain, threads = kiln_exec_threads(e);
    kiln_exec_parallel(e, (int)(tasks < threads ? tasks : threads), planes_task, &j);
}

void kiln__ops_par_image(kiln_exec *e, int nd, const int64_t *d, int64_t grain, kiln_range_fn fn, void *ud) {
    int64_t total = 1;
    for (int i = 0; i < nd; i++) total *= d[i];
    const int64_t plane = nd >= 3 ? d[nd - 1] * d[nd - 2] : total;
    if (total == 0) return;
    kiln__ops_par_planes(e, total / plane, plane, 1, grain, fn, ud);
}

int kiln__ops_contig(const kiln_tensor *t) {
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

void kiln__ops_strided_copy(kiln_exec *e, void *dst, const void *src, size_t es, int nd,
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
            else kiln__ops_par(e, items, 1, tile_items, &t);
            return;
        }
    }
    if (total < 65536) scopy_rows(&j, 0, rows);
    else kiln__ops_par(e, rows, inner >= 16384 ? 1 : 16384 / inner, scopy_rows, &j);
}

/* ---- float kernels ------------------------------------------------------------- */

static _Thread_local int g_conv_ints;

static int needs_conv(kiln_dtype t) {
    if (g_conv_ints && (t == KILN_DTYPE_I8 || t == KILN_DTYPE_U8 || t == KILN_DTYPE_I16 ||
                        t == KILN_DTYPE_U16 || t == KILN_DTYPE_I32))
        return 1;
    return t == KILN_DTYPE_F16 || t == KILN_DTYPE_F64 || t == KILN_DTYPE_BF16;
}

int kiln__ops_as_f32_ints(const kiln_call *c, int (*fn)(const kiln_call *c)) {
    g_conv_ints = 1;
    int rc = kiln__ops_as_f32(c, fn);
    g_conv_ints = 0;
    return rc;
}

int kiln__ops_as_f32(const kiln_call *c, int (*fn)(const kiln_call *c)) {
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
        kiln__ops_cast(in[i].data, in[i].dtype, p, KILN_DTYPE_F32, n);
        in[i].data = p;
        in[i].dtype = KILN_DTYPE_F32;
        kiln__tensor_strides(&in[i]);
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
        kiln__tensor_strides(&out[i]);
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
                kiln__ops_cast(out[i].data, KILN_DTYPE_F32, c->out[i].data, c->out[i].dtype, n);
            }
        }
    }
done:
    for (int i = 0; i < nbufs; i++) kiln__free(bufs[i]);
    return rc;
}

const kiln_expr *kiln__ops_pool_dim(kiln_exprs *x, const kiln_expr *in, int64_t k,
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

void kiln__ops_register_versions(const kiln_quick_op *op, const int *versions, int n) {
    for (int i = 0; i < n; i++) {
        if (g_nops >= MAX_VERSIONED) {
            kiln__log(KILN_LOG_ERROR, "ops: version table full registering %s::%s", op->ns,
                      op->name);
            return;
        }
        kiln_quick_op *q = &g_ops[g_nops++];
        *q = *op;
        q->version = versions[i];
        kiln_register_quick_op(q);
    }
}

void kiln__ops_epilogue_span(const kiln_call *c, float *base, int64_t plane, int64_t b,
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

void kiln__ops_epi_rows_done(void *ud, int64_t i0, int64_t i1, int64_t j0, int64_t n) {
    const kiln__ops_epi_rows *r = ud;
    if (j0 == 0 && n == r->plane) {
        kiln__ops_epilogue_span(r->c, r->y, r->plane, i0 * r->plane, i1 * r->plane, r->chan0);
        return;
    }
    for (int64_t i = i0; i < i1; i++) kiln_call_epilogue(r->c, 0, r->y + i * r->plane + j0, n, r->chan0 + i, 0);
}

void kiln__ops_epilogue_all(const kiln_call *c) {
    if (!c->epilogue || c->nout < 1) return;
    const kiln_tensor *y = &c->out[0];
    float *p = y->data;
    if (!p || y->dtype != KILN_DTYPE_F32) return;
    if (y->ndim >= 3) {
        int64_t inner = 1;
        for (int i = 2; i < y->ndim; i++) inner *= y->dims[i];
        for (int64_t n = 0; n < y->dims[0]; n++)
            kiln__ops_epilogue_span(c, p + n * y->dims[1] * inner, inner, 0, y->dims[1] * inner, 0);
    } else if (y->ndim == 2) {
        for (int64_t r = 0; r < y->dims[0]; r++)
            kiln_call_epilogue(c, 0, p + r * y->dims[1], y->dims[1], 0, 1);
    } else {
        kiln_call_epilogue(c, 0, p, kiln_tensor_numel(y), 0, 0);
    }
}

/* ---- shape inference shared by op families ---------------------------------- */

int kiln__ops_matmul_shape(kiln_shape_ctx *c, const char *op, int ia, int ib, kiln_dtype out_type) {
    const kiln_desc *a = &c->in[ia], *b = &c->in[ib];
    if (a->ndim < 1 || b->ndim < 1)
        return kiln_set_error(KILN_ESHAPE, "%s: A and B must have rank >= 1, found %d and %d", op, a->ndim,
                              b->ndim);
    const kiln_expr *Ka = a->dims[a->ndim - 1];
    const kiln_expr *Kb = b->ndim == 1 ? b->dims[0] : b->dims[b->ndim - 2];
    int64_t v1, v2;
    if (Ka != Kb && kiln_expr_is_const(Ka, &v1) && kiln_expr_is_const(Kb, &v2) && v1 != v2)
        return kiln_set_error(KILN_ESHAPE, "%s: inner dims differ: A has K=%lld, B has K=%lld", op,
                              (long long)v1, (long long)v2);
    const kiln_expr *out[KILN_MAX_DIMS];
    int nb = 0;
    int ba = a->ndim > 2 ? a->ndim - 2 : 0, bb = b->ndim > 2 ? b->ndim - 2 : 0;
    if (ba || bb) {
        nb = kiln_shape_broadcast(c, a->dims, ba, b->dims, bb, out);
        if (nb < 0) return nb;
    }
    int n = nb;
    if (a->ndim >= 2) out[n++] = a->dims[a->ndim - 2];
    if (b->ndim >= 2) out[n++] = b->dims[b->ndim - 1];
    if (n > KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "%s: result rank %d too large", op, n);
    kiln__ops_set_dims(&c->out[0], out_type, n, out);
    return 0;
}

/* ---- padding outputs ---------------------------------------------------------- */

void kiln__ops_fill_unused(kiln_shape_ctx *c, int from) {
    for (int k = from; k < c->nout; k++) {
        memset(&c->out[k], 0, sizeof c->out[k]);
        c->out[k].dtype = KILN_DTYPE_F32;
        c->out[k].nvalues = -1;
    }
}

void kiln__ops_zero_unused(const kiln_call *c, int from) {
    for (int k = from; k < c->nout; k++)
        if (c->out[k].data)
            memset(c->out[k].data, 0, (size_t)kiln_tensor_numel(&c->out[k]) * kiln_dtype_size(c->out[k].dtype));
}

const char *kiln__ops_types_row(const kiln_shape_ctx *c) {
    static _Thread_local char types[8 * KILN_MAX_IO];
    if (c->nin + c->nout > KILN_MAX_IO) return NULL;
    size_t n = 0;
    types[0] = 0;
    for (int p = 0; p < c->nin + c->nout; p++) {
        const kiln_desc *d = p < c->nin ? &c->in[p] : &c->out[p - c->nin];
        n += (size_t)snprintf(types + n, sizeof types - n, "%s%s", p ? ", " : "", kiln_dtype_name(d->dtype));
    }
    return types;
}

int kiln__ops_ew16c_formats(const kiln_shape_ctx *c, kiln_combo *out, int max) {
    const char *types = max < 2 || !kiln__shape_ctx_cpu_blocked(c) ? NULL : kiln__ops_types_row(c);
    if (!types) return 0; /* the default */
    memset(out, 0, 2 * sizeof *out);
    out[0].types = types;
    const kiln_desc *y = &c->out[0];
    int64_t C;
    int ok = c->nout == 1 && y->dtype == KILN_DTYPE_F32 && y->ndim == 4 && kiln_expr_is_const(y->dims[1], &C) &&
             C % 16 == 0 && C > 0;
    for (int i = 0; i < c->nin && ok; i++) {
        ok = !c->in[i].data && c->in[i].dtype == KILN_DTYPE_F32 && c->in[i].ndim == 4;
        for (int d = 0; d < 4 && ok; d++) ok = c->in[i].dims[d] == y->dims[d]; /* (hash-consed) */
    }
    if (!ok) return 1;
    out[1].types = "FP32";
    out[1].layouts = "NCHW16C";
    return 2;
}
