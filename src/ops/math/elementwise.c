/*
 * elementwise.c — binary and n-ary elementwise ONNX operators with numpy
 * broadcasting: Add Sub Mul Div Pow Mod, Equal Less Greater LessOrEqual
 * GreaterOrEqual, And Or Xor Not, BitShift, BitwiseAnd/Or/Xor/Not, Where,
 * Max Min Sum Mean.
 *
 * One kernel body per op generates a variant per dtype (OPS_TYPES_*); a
 * table indexed by dtype holds them, and the shape function accepts exactly
 * the dtypes the table has.  The inner loop has fast paths for the common
 * stride patterns (same shape, scalar on either side); the broadcast
 * iterator coalesces dims so channel broadcasts become long inner runs.
 * Large outputs are split over the thread pool by rows or by range.
 *
 * Shape functions propagate symbolic values of small integer tensors
 * (shape arithmetic such as Shape -> Mul -> Reshape stays static).
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

#include <math.h>

#pragma GCC diagnostic ignored "-Wtype-limits"
#pragma GCC diagnostic ignored "-Wsign-compare"

/* ---- kernels --------------------------------------------------------------- */

typedef void (*bin_fn)(const void *a, int64_t sa, const void *b, int64_t sb, void *y, int64_t n);

/* y[i] = E(a[i*sa], b[i*sb]) with the output in type OT (store OST). */
#define BIN_BODY(T, CT, LD, OT, OST, E)                                       \
    const T *a = a_, *b = b_;                                                 \
    OT *y = y_;                                                               \
    if (sa == 1 && sb == 1) {                                                 \
        for (int64_t i = 0; i < n; i++) {                                     \
            CT x = LD(a[i]), z = LD(b[i]);                                    \
            y[i] = (OT)OST(E(x, z));                                          \
        }                                                                     \
    } else if (sa == 0 && sb == 1) {                                          \
        CT x = LD(a[0]);                                                      \
        for (int64_t i = 0; i < n; i++) {                                     \
            CT z = LD(b[i]);                                                  \
            y[i] = (OT)OST(E(x, z));                                          \
        }                                                                     \
    } else if (sa == 1 && sb == 0) {                                          \
        CT z = LD(b[0]);                                                      \
        for (int64_t i = 0; i < n; i++) {                                     \
            CT x = LD(a[i]);                                                  \
            y[i] = (OT)OST(E(x, z));                                          \
        }                                                                     \
    } else {                                                                  \
        for (int64_t i = 0; i < n; i++) {                                     \
            CT x = LD(a[i * sa]), z = LD(b[i * sb]);                          \
            y[i] = (OT)OST(E(x, z));                                          \
        }                                                                     \
    }

#define BIN_DEF(SUF, T, CT, LD, ST, OP)                                       \
    static void bin_##OP##_##SUF(const void *a_, int64_t sa, const void *b_,  \
                                 int64_t sb, void *y_, int64_t n) {           \
        BIN_BODY(T, CT, LD, T, ST, E_##OP)                                    \
    }
#define CMP_DEF(SUF, T, CT, LD, ST, OP)                                       \
    static void bin_##OP##_##SUF(const void *a_, int64_t sa, const void *b_,  \
                                 int64_t sb, void *y_, int64_t n) {           \
        BIN_BODY(T, CT, LD, uint8_t, OPS_ST_ID, E_##OP)                       \
    }
#define BIN_TAB(SUF, T, CT, LD, ST, OP) [KILN_DTYPE_##SUF] = bin_##OP##_##SUF,

#define E_ADD(x, z) ((x) + (z))
#define E_SUB(x, z) ((x) - (z))
#define E_MUL(x, z) ((x) * (z))
#define E_DIV(x, z) ((x) / (z))
/* integer division truncates (as C and ONNX Runtime); x / 0 gives 0
 * instead of a trap, INT_MIN / -1 wraps */
#define E_IDIVS(x, z) ((z) == 0 ? 0 : (z) == -1 ? (int64_t)(0 - (uint64_t)(x)) : (x) / (z))
#define E_IDIVU(x, z) ((z) == 0 ? 0 : (x) / (z))
#define E_MAX(x, z) ((x) > (z) || (x) != (x) ? (x) : (z))
#define E_MIN(x, z) ((x) < (z) || (x) != (x) ? (x) : (z))
#define E_EQ(x, z) ((x) == (z))
#define E_LT(x, z) ((x) < (z))
#define E_GT(x, z) ((x) > (z))
#define E_LE(x, z) ((x) <= (z))
#define E_GE(x, z) ((x) >= (z))
#define E_AND(x, z) ((x) && (z))
#define E_OR(x, z) ((x) || (z))
#define E_XOR(x, z) (!(x) != !(z))
#define E_BAND(x, z) ((x) & (z))
#define E_BOR(x, z) ((x) | (z))
#define E_BXOR(x, z) ((x) ^ (z))
#define E_SHL(x, z) ((z) >= 8 * sizeof(x) ? 0 : (x) << (z))
#define E_SHR(x, z) ((z) >= 8 * sizeof(x) ? 0 : (x) >> (z))
#define E_POW(x, z) pow((double)(x), (double)(z))
#define E_IPOW(x, z) ipow((int64_t)(x), (int64_t)(z))
/* fmod = 1: C fmod (sign of the dividend) */
#define E_FMOD(x, z) fmod((double)(x), (double)(z))
#define E_IFMODS(x, z) ((z) == 0 || (z) == -1 ? 0 : (x) % (z))
#define E_IFMODU(x, z) ((z) == 0 ? 0 : (x) % (z))
/* fmod = 0: Python's mod (sign of the divisor) */
#define E_MOD(x, z) pymod_f((double)(x), (double)(z))
#define E_IMODS(x, z) pymod_i((int64_t)(x), (int64_t)(z))
#define E_IMODU(x, z) ((z) == 0 ? 0 : (x) % (z))

static inline int64_t ipow(int64_t b, int64_t e) {
    if (e < 0) return b == 1 ? 1 : b == -1 ? (e % 2 ? -1 : 1) : 0;
    uint64_t r = 1, ub = (uint64_t)b; /* wrap like C integer overflow would */
    while (e) {
        if (e & 1) r *= ub;
        ub *= ub;
        e >>= 1;
    }
    return (int64_t)r;
}
static inline double pymod_f(double x, double z) {
    double r = fmod(x, z);
    if (r != 0 && ((r < 0) != (z < 0))) r += z;
    return r;
}
static inline int64_t pymod_i(int64_t x, int64_t z) {
    if (z == 0 || z == -1) return 0;
    int64_t r = x % z;
    if (r != 0 && ((r < 0) != (z < 0))) r += z;
    return r;
}

OPS_TYPES_NUM(BIN_DEF, ADD)
OPS_TYPES_NUM(BIN_DEF, SUB)
OPS_TYPES_NUM(BIN_DEF, MUL)
OPS_TYPES_FLOAT(BIN_DEF, DIV)
OPS_TYPES_SINT(BIN_DEF, IDIVS)
OPS_TYPES_UINT(BIN_DEF, IDIVU)
OPS_TYPES_NUM(BIN_DEF, MAX)
OPS_TYPES_NUM(BIN_DEF, MIN)
OPS_TYPES_FLOAT(BIN_DEF, POW)
OPS_TYPES_INT(BIN_DEF, IPOW)
OPS_TYPES_FLOAT(BIN_DEF, FMOD)
OPS_TYPES_SINT(BIN_DEF, IFMODS)
OPS_TYPES_UINT(BIN_DEF, IFMODU)
OPS_TYPES_FLOAT(BIN_DEF, MOD)
OPS_TYPES_SINT(BIN_DEF, IMODS)
OPS_TYPES_UINT(BIN_DEF, IMODU)
OPS_TYPES_NUM(CMP_DEF, EQ)
OPS_TYPES_BOOL(CMP_DEF, EQ)
OPS_TYPES_NUM(CMP_DEF, LT)
OPS_TYPES_NUM(CMP_DEF, GT)
OPS_TYPES_NUM(CMP_DEF, LE)
OPS_TYPES_NUM(CMP_DEF, GE)
OPS_TYPES_BOOL(CMP_DEF, AND)
OPS_TYPES_BOOL(CMP_DEF, OR)
OPS_TYPES_BOOL(CMP_DEF, XOR)
OPS_TYPES_INT(BIN_DEF, BAND)
OPS_TYPES_INT(BIN_DEF, BOR)
OPS_TYPES_INT(BIN_DEF, BXOR)
OPS_TYPES_UINT(BIN_DEF, SHL)
OPS_TYPES_UINT(BIN_DEF, SHR)

static const bin_fn tab_add[KILN_DTYPE_COUNT_] = {OPS_TYPES_NUM(BIN_TAB, ADD)};
static const bin_fn tab_sub[KILN_DTYPE_COUNT_] = {OPS_TYPES_NUM(BIN_TAB, SUB)};
static const bin_fn tab_mul[KILN_DTYPE_COUNT_] = {OPS_TYPES_NUM(BIN_TAB, MUL)};
static const bin_fn tab_div[KILN_DTYPE_COUNT_] = {
    OPS_TYPES_FLOAT(BIN_TAB, DIV) OPS_TYPES_SINT(BIN_TAB, IDIVS) OPS_TYPES_UINT(BIN_TAB, IDIVU)};
static const bin_fn tab_max[KILN_DTYPE_COUNT_] = {OPS_TYPES_NUM(BIN_TAB, MAX)};
static const bin_fn tab_min[KILN_DTYPE_COUNT_] = {OPS_TYPES_NUM(BIN_TAB, MIN)};
static const bin_fn tab_pow[KILN_DTYPE_COUNT_] = {
    OPS_TYPES_FLOAT(BIN_TAB, POW) OPS_TYPES_INT(BIN_TAB, IPOW)};
static const bin_fn tab_fmod[KILN_DTYPE_COUNT_] = {
    OPS_TYPES_FLOAT(BIN_TAB, FMOD) OPS_TYPES_SINT(BIN_TAB, IFMODS)
        OPS_TYPES_UINT(BIN_TAB, IFMODU)};
static const bin_fn tab_mod[KILN_DTYPE_COUNT_] = {
    OPS_TYPES_FLOAT(BIN_TAB, MOD) OPS_TYPES_SINT(BIN_TAB, IMODS) OPS_TYPES_UINT(BIN_TAB, IMODU)};
static const bin_fn tab_eq[KILN_DTYPE_COUNT_] = {OPS_TYPES_NUM(BIN_TAB, EQ)
                                                     OPS_TYPES_BOOL(BIN_TAB, EQ)};
static const bin_fn tab_lt[KILN_DTYPE_COUNT_] = {OPS_TYPES_NUM(BIN_TAB, LT)};
static const bin_fn tab_gt[KILN_DTYPE_COUNT_] = {OPS_TYPES_NUM(BIN_TAB, GT)};
static const bin_fn tab_le[KILN_DTYPE_COUNT_] = {OPS_TYPES_NUM(BIN_TAB, LE)};
static const bin_fn tab_ge[KILN_DTYPE_COUNT_] = {OPS_TYPES_NUM(BIN_TAB, GE)};
static const bin_fn tab_and[KILN_DTYPE_COUNT_] = {OPS_TYPES_BOOL(BIN_TAB, AND)};
static const bin_fn tab_or[KILN_DTYPE_COUNT_] = {OPS_TYPES_BOOL(BIN_TAB, OR)};
static const bin_fn tab_xor[KILN_DTYPE_COUNT_] = {OPS_TYPES_BOOL(BIN_TAB, XOR)};
static const bin_fn tab_band[KILN_DTYPE_COUNT_] = {OPS_TYPES_INT(BIN_TAB, BAND)};
static const bin_fn tab_bor[KILN_DTYPE_COUNT_] = {OPS_TYPES_INT(BIN_TAB, BOR)};
static const bin_fn tab_bxor[KILN_DTYPE_COUNT_] = {OPS_TYPES_INT(BIN_TAB, BXOR)};
static const bin_fn tab_shl[KILN_DTYPE_COUNT_] = {OPS_TYPES_UINT(BIN_TAB, SHL)};
static const bin_fn tab_shr[KILN_DTYPE_COUNT_] = {OPS_TYPES_UINT(BIN_TAB, SHR)};

/* ---- broadcast driver -------------------------------------------------------- */

typedef struct bin_job {
    bin_fn fn;
    const char *a, *b;
    char *y;
    size_t ea, eb, ey;
    kiln__ops_bc bc;
} bin_job;

static void bin_rows(void *ud, int64_t r0, int64_t r1) {
    const bin_job *j = ud;
    int nd = j->bc.nd;
    int64_t n = j->bc.dims[nd - 1], sa = j->bc.st[0][nd - 1], sb = j->bc.st[1][nd - 1];
    int64_t off[3];
    for (int64_t r = r0; r < r1; r++) {
        kiln__ops_bc_row(&j->bc, r, off);
        j->fn(j->a + off[0] * j->ea, sa, j->b + off[1] * j->eb, sb, j->y + r * n * j->ey, n);
    }
}

static void bin_flat(void *ud, int64_t i0, int64_t i1) {
    const bin_job *j = ud;
    int64_t sa = j->bc.st[0][0], sb = j->bc.st[1][0];
    j->fn(j->a + i0 * sa * j->ea, sa, j->b + i0 * sb * j->eb, sb, j->y + i0 * j->ey, i1 - i0);
}

/* Flat elements [i0, i1) of y, a run of each bc row they touch. */
static void bin_elems(void *ud, int64_t i0, int64_t i1) {
    const bin_job *j = ud;
    const int nd = j->bc.nd;
    const int64_t n = j->bc.dims[nd - 1], sa = j->bc.st[0][nd - 1], sb = j->bc.st[1][nd - 1];
    int64_t off[3];
    while (i0 < i1) {
        const int64_t r = i0 / n, col = i0 % n, len = n - col < i1 - i0 ? n - col : i1 - i0;
        kiln__ops_bc_row(&j->bc, r, off);
        j->fn(j->a + (off[0] + col * sa) * j->ea, sa, j->b + (off[1] + col * sb) * j->eb, sb,
              j->y + i0 * j->ey, len);
        i0 += len;
    }
}

#define PAR_MIN 32768 /* elements below which a kernel runs on the caller only */

/* y = fn(a, b) broadcast, y contiguous with dims yd (rank ny). */
static int bin_run(kiln_exec *e, bin_fn fn, const kiln_tensor *a, const kiln_tensor *b,
                   void *y, kiln_dtype yt, int ny, const int64_t *yd) {
    int rc = kiln__ops_bc_check("elementwise op", 0, ny, yd, a->ndim, a->dims);
    if (rc || (rc = kiln__ops_bc_check("elementwise op", 1, ny, yd, b->ndim, b->dims))) return rc;
    bin_job j;
    j.fn = fn;
    j.a = a->data;
    j.b = b->data;
    j.y = y;
    j.ea = kiln_dtype_size(a->dtype);
    j.eb = kiln_dtype_size(b->dtype);
    j.ey = kiln_dtype_size(yt);
    int nds[2] = {a->ndim, b->ndim};
    const int64_t *dks[2] = {a->dims, b->dims};
    int64_t total = 1;
    for (int i = 0; i < ny; i++) total *= yd[i];
    if (total == 0) return 0;
    kiln__ops_bc_init(&j.bc, ny, yd, 2, nds, dks);
    int64_t n = j.bc.dims[j.bc.nd - 1];
    if (total < PAR_MIN) {
        bin_rows(&j, 0, j.bc.rows);
    } else if (j.bc.nd > 1 && ny >= 3 && yd[ny - 1] * yd[ny - 2] >= KILN__OPS_PLANE_MIN) {
        /* an image broadcast (a channel's gate, a per-row value): each
         * plane split over the threads as the convs around it split theirs.
         * Not two images of one shape: split flat, PP-OCRv4 det's residual
         * Adds ran 0.04-0.1 ms faster across dies than split per plane */
        kiln__ops_par_image(e, ny, yd, 8192, bin_elems, &j);
    } else if (j.bc.nd == 1) {
        kiln__ops_par(e, n, 8192, bin_flat, &j);
    } else {
        int64_t grain = n >= 8192 ? 1 : 8192 / n;
        kiln__ops_par(e, j.bc.rows, grain, bin_rows, &j);
    }
    return 0;
}

/* ---- build-time values ---------------------------------------------------------- */

typedef enum vop {
    V_NONE = 0, V_ADD, V_SUB, V_MUL, V_DIV, V_MOD, V_MAX, V_MIN, V_EQ, V_LT, V_GT,
    V_LE, V_GE, V_WHERE
} vop;

static const kiln_expr *v_apply(kiln_exprs *x, vop op, const kiln_expr *const *v) {
    switch (op) {
    case V_ADD: return kiln_expr_add(x, v[0], v[1]);
    case V_SUB: return kiln_expr_sub(x, v[0], v[1]);
    case V_MUL: return kiln_expr_mul(x, v[0], v[1]);
    case V_DIV: {
        int64_t d;
        if (kiln_expr_is_const(v[1], &d) && d == 0) return NULL;
        return kiln_expr_floordiv(x, v[0], v[1]);
    }
    case V_MOD: {
        int64_t d;
        if (kiln_expr_is_const(v[1], &d) && d == 0) return NULL;
        return kiln_expr_bin(x, KILN_EXPR_MOD, v[0], v[1]);
    }
    case V_MAX: return kiln_expr_max(x, v[0], v[1]);
    case V_MIN: return kiln_expr_min(x, v[0], v[1]);
    case V_EQ: return kiln_expr_eq(x, v[0], v[1]);
    case V_LT: return kiln_expr_lt(x, v[0], v[1]);
    case V_GT: return kiln_expr_lt(x, v[1], v[0]);
    case V_LE: return kiln_expr_sub(x, kiln_expr_const(x, 1), kiln_expr_lt(x, v[1], v[0]));
    case V_GE: return kiln_expr_sub(x, kiln_expr_const(x, 1), kiln_expr_lt(x, v[0], v[1]));
    case V_WHERE: return kiln_expr_select(x, v[0], v[1], v[2]);
    default: return NULL;
    }
}

/* Out values = op over the broadcast values of inputs idx[0..nop). */
static void v_propagate(kiln_shape_ctx *c, vop op, int nop, const int *idx) {
    kiln_desc *o = &c->out[0];
    o->nvalues = -1;
    if (op == V_NONE || !(kiln__ops_is_int(o->dtype) || o->dtype == KILN_DTYPE_BOOL)) return;
    int64_t od[KILN_MAX_DIMS], n = kiln__ops_desc_numel(o);
    if (n < 0 || n > KILN_MAX_VALUES || !kiln__ops_const_dims(o, od)) return;
    const kiln_expr *vals[3][KILN_MAX_VALUES];
    int64_t dk[3][KILN_MAX_DIMS];
    for (int k = 0; k < nop; k++) {
        const kiln_desc *d = &c->in[idx[k]];
        if (kiln__ops_value_exprs(c->x, d, vals[k]) < 0) return;
        if (!kiln__ops_const_dims(d, dk[k])) return;
    }
    const kiln_expr *res[KILN_MAX_VALUES];
    for (int64_t i = 0; i < n; i++) {
        const kiln_expr *args[3];
        for (int k = 0; k < nop; k++) {
            const kiln_desc *d = &c->in[idx[k]];
            int64_t rem = i, off = 0, s = 1;
            for (int ax = o->ndim - 1; ax >= 0; ax--) {
                int64_t ix = rem % od[ax];
                rem /= od[ax];
                int j = ax - (o->ndim - d->ndim);
                if (j < 0) continue;
                off += (dk[k][j] == 1 ? 0 : ix) * s;
                s *= dk[k][j];
            }
            args[k] = vals[k][off];
        }
        res[i] = v_apply(c->x, op, args);
        if (!res[i]) return;
    }
    for (int64_t i = 0; i < n; i++) o->values[i] = res[i];
    o->nvalues = (int)n;
}

/* ---- binary ops --------------------------------------------------------------------- */

static int type_err(const char *op, int i, kiln_dtype t) {
    return kiln_set_error(KILN_ETYPE, "%s: input %d has type %s, which this op does not support",
                          op, i, kiln_dtype_name(t));
}

/* Shape of a broadcasting op over inputs idx[0..n). */
static int bc_shape(kiln_shape_ctx *c, int n, const int *idx) {
    const kiln_expr *cur[KILN_MAX_DIMS], *nxt[KILN_MAX_DIMS];
    int nd = c->in[idx[0]].ndim;
    for (int i = 0; i < nd; i++) cur[i] = c->in[idx[0]].dims[i];
    for (int k = 1; k < n; k++) {
        const kiln_desc *d = &c->in[idx[k]];
        int r = kiln_shape_broadcast(c, cur, nd, d->dims, d->ndim, nxt);
        if (r < 0) return r;
        nd = r;
        for (int i = 0; i < nd; i++) cur[i] = nxt[i];
    }
    c->out[0].ndim = nd;
    for (int i = 0; i < nd; i++) c->out[0].dims[i] = cur[i];
    return 0;
}

static int bin_shape(kiln_shape_ctx *c, const char *op, const bin_fn *tab, int out_bool,
                     vop v, int same_type) {
    kiln_dtype t = c->in[0].dtype;
    if (t <= 0 || t >= KILN_DTYPE_COUNT_ || !tab[t]) return type_err(op, 0, t);
    if (same_type && c->in[1].dtype != t) {
        int r = kiln__ops_check_same(c, op, 0, 1);
        if (r) return r;
    }
    if (!kiln__ops_is_any(c->in[1].dtype)) return type_err(op, 1, c->in[1].dtype);
    static const int idx[2] = {0, 1};
    int r = bc_shape(c, 2, idx);
    if (r) return r;
    c->out[0].dtype = out_bool ? KILN_DTYPE_BOOL : t;
    v_propagate(c, v, 2, idx);
    return 0;
}

static int bin_impl(const kiln_call *c, const bin_fn *tab) {
    const kiln_tensor *a = &c->in[0], *b = &c->in[1];
    bin_fn fn = tab[a->dtype];
    if (!fn)
        return kiln_set_error(KILN_ETYPE, "elementwise op: no kernel for type %s",
                              kiln_dtype_name(a->dtype));
    /* Pow by 2 (silero's |STFT|^2) is a product: the multiply kernel is
     * vectorized, pow() is a libm call per element (6 us for 516 floats).
     * x * x rounds the exact square once, as pow does. */
    if (tab == tab_pow && tab_mul[a->dtype] && kiln_tensor_numel(b) == 1 && b->data &&
        kiln__ops_get_f64(b->data, b->dtype, 0) == 2.0)
        return bin_run(c->exec, tab_mul[a->dtype], a, a, c->out[0].data, c->out[0].dtype, c->out[0].ndim,
                       c->out[0].dims);
    void *tmp = NULL;
    kiln_tensor bc;
    if (b->dtype != a->dtype) { /* Pow with another exponent type */
        int64_t n = kiln_tensor_numel(b);
        tmp = kiln__malloc((size_t)(n ? n : 1) * kiln_dtype_size(a->dtype));
        if (!tmp) return kiln_set_error(KILN_ENOMEM, "out of memory converting the exponent");
        kiln__ops_cast(b->data, b->dtype, tmp, a->dtype, n);
        bc = *b;
        bc.data = tmp;
        bc.dtype = a->dtype;
        b = &bc;
    }
    int rc = bin_run(c->exec, fn, a, b, c->out[0].data, c->out[0].dtype, c->out[0].ndim, c->out[0].dims);
    kiln__free(tmp);
    return rc;
}

/* Types of the CUDA kernels (elementwise.cu) per op class.  The
 * arithmetic ops also take NHWC on every position (4-D float tensors): the
 * binary kernels walk each operand by its own strides, so any layout of
 * any broadcast is exact; a chain of NHWC convs keeps its layout through
 * them. */
static const kiln_combo cu_num[] = {{.types = KILN_CU_T_NUM_ALL}, {.types = KILN_CU_T_NHWC, .layouts = "NHWC"}, {0}};
static const kiln_combo cu_float[] = {{.types = KILN_CU_T_FLOAT}, {0}};
static const kiln_combo cu_int[] = {{.types = KILN_CU_T_INT_ALL}, {0}};
static const kiln_combo cu_uint[] = {{.types = "UINT8|UINT16|UINT32|UINT64"}, {0}};
static const kiln_combo cu_bool[] = {{.types = "BOOL"}, {0}};
static const kiln_combo cu_cmp[] = {{.types = KILN_CU_T_NUM_ALL ", " KILN_CU_T_NUM_ALL ", BOOL"}, {0}};
static const kiln_combo cu_eq[] = {{.types = KILN_CU_T_NUM_ALL ", " KILN_CU_T_NUM_ALL ", BOOL"}, {.types = "BOOL"}, {0}};

#define BIN_OP(VAR, NAME, VER, TAB, OUTBOOL, VOP, SAME, ATTRS, CUF, DOC)           \
    static int VAR##_shape(kiln_shape_ctx *c) {                               \
        return bin_shape(c, NAME, TAB, OUTBOOL, VOP, SAME);                   \
    }                                                                         \
    static int VAR##_impl(const kiln_call *c) { return bin_impl(c, TAB); }   \
    static int VAR##_cuda(const kiln_call *c) { return kiln__cu_binary(c, NAME); } \
    static const kiln_quick_op VAR##_op = {                                   \
        .ns = OPS_NS, .name = NAME, .version = VER,                           \
        .min_inputs = 2, .max_inputs = 2, .num_outputs = 1,                   \
        .attrs = ATTRS, .shape = VAR##_shape, .impl = VAR##_impl,             \
        .doc = DOC, .cuda_impl = VAR##_cuda, .cuda_formats = CUF,             \
    };                                                                        \
    KILN_OP(VAR##_op)

/* Arithmetic ops also fuse as epilogues (plugin.h) when the other operand
 * is an f32 constant holding one value or one per channel: p[0] = 1 for a
 * scalar, p[1] = 1 when the activation is B (z OP x). */
#define ARITH_OP(VAR, NAME, VER, TAB, VOP, E, CUF, DOC) ARITH_OP_F(VAR, NAME, VER, TAB, VOP, E, CUF, NULL, DOC)
/* FMT: the CPU formats_fn (NULL: LINEAR) */
#define ARITH_OP_F(VAR, NAME, VER, TAB, VOP, E, CUF, FMT, DOC)                     \
    static int VAR##_shape(kiln_shape_ctx *c) {                               \
        return bin_shape(c, NAME, TAB, 0, VOP, 1);                            \
    }                                                                         \
    static int VAR##_impl(const kiln_call *c) { return bin_impl(c, TAB); }   \
    static int VAR##_cuda(const kiln_call *c) { return kiln__cu_binary(c, NAME); } \
    static int VAR##_epi(const kiln_epilogue_args *a, float *x, int64_t n,    \
                         int64_t ch, int64_t chan_len) {                      \
        const float *zc = a->in[1 - a->x].data;                               \
        int scalar = a->p[0] != 0, rev = a->p[1] != 0;                        \
        for (int64_t i = 0; i < n;) {                                         \
            int64_t cc = chan_len ? ch + i / chan_len : ch;                   \
            int64_t run = chan_len && !scalar ? chan_len - i % chan_len : n - i; \
            if (run > n - i) run = n - i;                                     \
            float z = scalar ? zc[0] : zc[cc];                                \
            if (rev)                                                          \
                for (int64_t k = i; k < i + run; k++) x[k] = E(z, x[k]);      \
            else                                                              \
                for (int64_t k = i; k < i + run; k++) x[k] = E(x[k], z);      \
            i += run;                                                         \
        }                                                                     \
        return 0;                                                             \
    }                                                                         \
    static int VAR##_epi_check(kiln_epilogue_args *a) {                       \
        if (a->nin != 2 || a->x < 0 || a->x > 1) return 1;                    \
        int o = 1 - a->x;                                                     \
        if (!a->in[o].data || a->in[o].dtype != KILN_DTYPE_F32) return 1;     \
        int kind = kiln_epilogue_param_kind(a, o);                            \
        if (!kind) return 1;                                                  \
        a->p[0] = kind == 1;                                                  \
        a->p[1] = a->x == 1;                                                  \
        return 0;                                                             \
    }                                                                         \
    static const kiln_quick_op VAR##_op = {                                   \
        .ns = OPS_NS, .name = NAME, .version = VER,                           \
        .min_inputs = 2, .max_inputs = 2, .num_outputs = 1,                   \
        .shape = VAR##_shape, .impl = VAR##_impl, .doc = DOC,                 \
        .epilogue = VAR##_epi, .epilogue_check = VAR##_epi_check,            \
        .cuda_impl = VAR##_cuda, .cuda_formats = CUF, .formats_fn = FMT,      \
    };                                                                        \
    KILN_OP(VAR##_op)

ARITH_OP_F(add, "Add", 7, tab_add, V_ADD, E_ADD, cu_num, kiln__ops_ew16c_formats, "A + B (numpy broadcasting)")
ARITH_OP(sub, "Sub", 7, tab_sub, V_SUB, E_SUB, cu_num, "A - B (numpy broadcasting)")
ARITH_OP(mul, "Mul", 7, tab_mul, V_MUL, E_MUL, cu_num, "A * B (numpy broadcasting)")
ARITH_OP(div, "Div", 7, tab_div, V_DIV, E_DIV, cu_num, "A / B (integers truncate)")
BIN_OP(pow, "Pow", 7, tab_pow, 0, V_NONE, 0, NULL, cu_num, "A ^ B (numpy broadcasting)")
BIN_OP(equal, "Equal", 7, tab_eq, 1, V_EQ, 1, NULL, cu_eq, "A == B")
BIN_OP(less, "Less", 7, tab_lt, 1, V_LT, 1, NULL, cu_cmp, "A < B")
BIN_OP(greater, "Greater", 7, tab_gt, 1, V_GT, 1, NULL, cu_cmp, "A > B")
BIN_OP(lesseq, "LessOrEqual", 12, tab_le, 1, V_LE, 1, NULL, cu_cmp, "A <= B")
BIN_OP(greatereq, "GreaterOrEqual", 12, tab_ge, 1, V_GE, 1, NULL, cu_cmp, "A >= B")
BIN_OP(and, "And", 7, tab_and, 1, V_NONE, 1, NULL, cu_bool, "logical and")
BIN_OP(or, "Or", 7, tab_or, 1, V_NONE, 1, NULL, cu_bool, "logical or")
BIN_OP(xor, "Xor", 7, tab_xor, 1, V_NONE, 1, NULL, cu_bool, "logical xor")
BIN_OP(bitand, "BitwiseAnd", 18, tab_band, 0, V_NONE, 1, NULL, cu_int, "bitwise and")
BIN_OP(bitor, "BitwiseOr", 18, tab_bor, 0, V_NONE, 1, NULL, cu_int, "bitwise or")
BIN_OP(bitxor, "BitwiseXor", 18, tab_bxor, 0, V_NONE, 1, NULL, cu_int, "bitwise xor")

/* Mod: fmod selects C fmod (1) or Python's modulo (0, integers only in ONNX). */
static const kiln_attr_def mod_attrs[] = {
    {.name = "fmod", .type = KILN_ATTR_INT, .def = "0",
     .doc = "1: sign of the dividend (C fmod); 0: sign of the divisor"},
    {NULL}};
static int mod_shape(kiln_shape_ctx *c) {
    int f = (int)kiln_attrs_int(c->attrs, "fmod");
    if (!f && kiln__ops_is_float(c->in[0].dtype))
        return kiln_set_error(KILN_EATTR, "Mod: fmod must be 1 for floating-point input (%s)",
                              kiln_dtype_name(c->in[0].dtype));
    return bin_shape(c, "Mod", f ? tab_fmod : tab_mod, 0, f ? V_NONE : V_MOD, 1);
}
static int mod_impl(const kiln_call *c) {
    return bin_impl(c, kiln_attrs_int(c->attrs, "fmod") ? tab_fmod : tab_mod);
}
static const kiln_quick_op mod_op = {
    .ns = OPS_NS, .name = "Mod", .version = 10, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .attrs = mod_attrs, .shape = mod_shape, .impl = mod_impl,
    .cuda_impl = kiln__cu_mod, .cuda_formats = cu_num,
    .doc = "remainder (fmod attribute picks C or Python semantics)",
};
KILN_OP(mod_op)

static const kiln_attr_def shift_attrs[] = {
    {.name = "direction", .type = KILN_ATTR_STRING, .required = 1, .doc = "LEFT or RIGHT"},
    {NULL}};
static int shift_dir(const kiln_attrs *a, int *left) {
    const char *d = kiln_attrs_string(a, "direction");
    if (d && !strcmp(d, "LEFT")) *left = 1;
    else if (d && !strcmp(d, "RIGHT")) *left = 0;
    else
        return kiln_set_error(KILN_EATTR, "BitShift: direction must be LEFT or RIGHT, found '%s'",
                              d ? d : "");
    return 0;
}
static int shift_shape(kiln_shape_ctx *c) {
    int left = 0, r = shift_dir(c->attrs, &left);
    return r ? r : bin_shape(c, "BitShift", left ? tab_shl : tab_shr, 0, V_NONE, 1);
}
static int shift_impl(const kiln_call *c) {
    int left = 0, r = shift_dir(c->attrs, &left);
    return r ? r : bin_impl(c, left ? tab_shl : tab_shr);
}
static const kiln_quick_op shift_op = {
    .ns = OPS_NS, .name = "BitShift", .version = 11, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .attrs = shift_attrs, .shape = shift_shape, .impl = shift_impl,
    .cuda_impl = kiln__cu_bitshift, .cuda_formats = cu_uint,
    .doc = "bitwise shift of unsigned integers",
};
KILN_OP(shift_op)

/* ---- variadic Max / Min / Sum / Mean ------------------------------------------------- */

static int var_shape(kiln_shape_ctx *c, const char *op, const bin_fn *tab, vop v) {
    int idx[KILN_MAX_IO] = {0};
    kiln_dtype t = c->in[0].dtype;
    if (t <= 0 || t >= KILN_DTYPE_COUNT_ || !tab[t]) return type_err(op, 0, t);
    for (int i = 0; i < c->nin; i++) {
        idx[i] = i;
        int r = kiln__ops_check_same(c, op, 0, i);
        if (r) return r;
    }
    int r = bc_shape(c, c->nin, idx);
    if (r) return r;
    c->out[0].dtype = t;
    if (c->nin == 1) {
        c->out[0].nvalues = -1;
        const kiln_expr *vals[KILN_MAX_VALUES];
        int n = kiln__ops_value_exprs(c->x, &c->in[0], vals);
        if (n >= 0) {
            for (int i = 0; i < n; i++) c->out[0].values[i] = vals[i];
            c->out[0].nvalues = n;
        }
    } else if (c->nin == 2) {
        v_propagate(c, v, 2, idx);
    }
    return 0;
}

static int var_impl(const kiln_call *c, const bin_fn *tab, int mean) {
    kiln_tensor *y = &c->out[0];
    bin_fn fn = tab[y->dtype];
    if (!fn) return kiln_set_error(KILN_ETYPE, "no kernel for type %s", kiln_dtype_name(y->dtype));
    if (c->nin == 1) {
        size_t bytes = (size_t)kiln_tensor_numel(y) * kiln_dtype_size(y->dtype);
        if (y->data != c->in[0].data) memcpy(y->data, c->in[0].data, bytes);
    } else {
        int rc = bin_run(c->exec, fn, &c->in[0], &c->in[1], y->data, y->dtype, y->ndim, y->dims);
        for (int k = 2; k < c->nin && !rc; k++)
            rc = bin_run(c->exec, fn, y, &c->in[k], y->data, y->dtype, y->ndim, y->dims);
        if (rc) return rc;
    }
    if (mean && c->nin > 1) {
        uint64_t sbuf;
        double inv = 1.0 / c->nin;
        kiln__ops_from_f64(&inv, y->dtype, &sbuf, 1);
        kiln_tensor s = {.data = &sbuf, .dtype = y->dtype, .ndim = 0};
        return bin_run(c->exec, tab_mul[y->dtype], y, &s, y->data, y->dtype, y->ndim, y->dims);
    }
    return 0;
}

#define VAR_OP(VAR, NAME, TAB, MEAN, VOP, CUF, DOC)                           \
    static int VAR##_shape(kiln_shape_ctx *c) { return var_shape(c, NAME, TAB, VOP); } \
    static int VAR##_impl(const kiln_call *c) { return var_impl(c, TAB, MEAN); } \
    static int VAR##_cuda(const kiln_call *c) { return kiln__cu_variadic(c, NAME); } \
    static const kiln_quick_op VAR##_op = {                                   \
        .ns = OPS_NS, .name = NAME, .version = 8,                             \
        .min_inputs = 1, .max_inputs = KILN_MAX_IO - 1, .num_outputs = 1,     \
        .shape = VAR##_shape, .impl = VAR##_impl, .doc = DOC,                 \
        .cuda_impl = VAR##_cuda, .cuda_formats = CUF,                         \
    };                                                                        \
    KILN_OP(VAR##_op)

static const bin_fn tab_sum_f[KILN_DTYPE_COUNT_] = {OPS_TYPES_FLOAT(BIN_TAB, ADD)};
VAR_OP(vmax, "Max", tab_max, 0, V_MAX, cu_num, "elementwise maximum of the inputs (broadcast)")
VAR_OP(vmin, "Min", tab_min, 0, V_MIN, cu_num, "elementwise minimum of the inputs (broadcast)")
VAR_OP(vsum, "Sum", tab_add, 0, V_ADD, cu_num, "elementwise sum of the inputs (broadcast)")
VAR_OP(vmean, "Mean", tab_sum_f, 1, V_NONE, cu_float, "elementwise mean of the inputs (broadcast)")

/* ---- Where ------------------------------------------------------------------------------ */

typedef void (*where_fn)(const uint8_t *cnd, int64_t sc, const void *x, int64_t sx,
                         const void *y, int64_t sy, void *o, int64_t n);
#define WHERE_DEF(T)                                                          \
    static void where_##T(const uint8_t *cnd, int64_t sc, const void *x_, int64_t sx, \
                          const void *y_, int64_t sy, void *o_, int64_t n) {  \
        const T *x = x_, *y = y_;                                             \
        T *o = o_;                                                            \
        /* both sides loaded unconditionally so the select vectorizes */    \
        if (sc == 1 && sx == 1 && sy == 1) {                                  \
            for (int64_t i = 0; i < n; i++) {                                 \
                T a = x[i], b = y[i];                                         \
                o[i] = cnd[i] ? a : b;                                        \
            }                                                                 \
        } else if (sc == 1 && sx == 1 && sy == 0) {                           \
            const T b = y[0];                                                 \
            for (int64_t i = 0; i < n; i++) {                                 \
                T a = x[i];                                                   \
                o[i] = cnd[i] ? a : b;                                        \
            }                                                                 \
        } else if (sc == 1 && sx == 0 && sy == 1) {                           \
            const T a = x[0];                                                 \
            for (int64_t i = 0; i < n; i++) {                                 \
                T b = y[i];                                                   \
                o[i] = cnd[i] ? a : b;                                        \
            }                                                                 \
        } else {                                                              \
            for (int64_t i = 0; i < n; i++) {                                 \
                T a = x[i * sx], b = y[i * sy];                               \
                o[i] = cnd[i * sc] ? a : b;                                   \
            }                                                                 \
        }                                                                     \
    }
WHERE_DEF(uint8_t)
WHERE_DEF(uint16_t)
WHERE_DEF(uint32_t)
WHERE_DEF(uint64_t)

typedef struct where_job {
    where_fn fn;
    const char *cnd, *x, *y;
    char *o;
    size_t es;
    kiln__ops_bc bc;
} where_job;

static void where_rows(void *ud, int64_t r0, int64_t r1) {
    const where_job *j = ud;
    int nd = j->bc.nd;
    int64_t n = j->bc.dims[nd - 1], off[3];
    for (int64_t r = r0; r < r1; r++) {
        kiln__ops_bc_row(&j->bc, r, off);
        j->fn((const uint8_t *)j->cnd + off[0], j->bc.st[0][nd - 1], j->x + off[1] * j->es,
              j->bc.st[1][nd - 1], j->y + off[2] * j->es, j->bc.st[2][nd - 1],
              j->o + r * n * j->es, n);
    }
}

static int where_shape(kiln_shape_ctx *c) {
    if (c->in[0].dtype != KILN_DTYPE_BOOL)
        return kiln_set_error(KILN_ETYPE, "Where: condition must be bool, found %s",
                              kiln_dtype_name(c->in[0].dtype));
    int r = kiln__ops_check_same(c, "Where", 1, 2);
    if (r) return r;
    if (!kiln__ops_is_any(c->in[1].dtype)) return type_err("Where", 1, c->in[1].dtype);
    static const int idx[3] = {0, 1, 2};
    r = bc_shape(c, 3, idx);
    if (r) return r;
    c->out[0].dtype = c->in[1].dtype;
    v_propagate(c, V_WHERE, 3, idx);
    return 0;
}

static int where_impl(const kiln_call *c) {
    const kiln_tensor *y = &c->out[0];
    where_job j;
    j.es = kiln_dtype_size(y->dtype);
    j.fn = j.es == 1 ? where_uint8_t : j.es == 2 ? where_uint16_t
         : j.es == 4 ? where_uint32_t : where_uint64_t;
    j.cnd = c->in[0].data;
    j.x = c->in[1].data;
    j.y = c->in[2].data;
    j.o = y->data;
    int nds[3] = {c->in[0].ndim, c->in[1].ndim, c->in[2].ndim};
    const int64_t *dks[3] = {c->in[0].dims, c->in[1].dims, c->in[2].dims};
    int64_t total = kiln_tensor_numel(y);
    if (total == 0) return 0;
    for (int k = 0; k < 3; k++) {
        int rc = kiln__ops_bc_check("Where", k, y->ndim, y->dims, nds[k], dks[k]);
        if (rc) return rc;
    }
    kiln__ops_bc_init(&j.bc, y->ndim, y->dims, 3, nds, dks);
    int64_t n = j.bc.dims[j.bc.nd - 1];
    kiln__ops_par(c->exec, j.bc.rows, total < PAR_MIN ? j.bc.rows : (n >= 8192 ? 1 : 8192 / n),
                   where_rows, &j);
    return 0;
}

static const kiln_combo cu_where[] = {{.types = "BOOL, " KILN_CU_T_ANY ", " KILN_CU_T_ANY ", " KILN_CU_T_ANY}, {0}};
static const kiln_quick_op where_op = {
    .ns = OPS_NS, .name = "Where", .version = 9, .min_inputs = 3, .max_inputs = 3,
    .num_outputs = 1, .shape = where_shape, .impl = where_impl,
    .cuda_impl = kiln__cu_where, .cuda_formats = cu_where,
    .doc = "condition ? X : Y (numpy broadcasting)",
};
KILN_OP(where_op)

/* ---- Not / BitwiseNot ------------------------------------------------------------------ */

static int not_shape(kiln_shape_ctx *c) {
    if (c->in[0].dtype != KILN_DTYPE_BOOL)
        return kiln_set_error(KILN_ETYPE, "Not: input must be bool, found %s",
                              kiln_dtype_name(c->in[0].dtype));
    c->out[0] = c->in[0];
    c->out[0].data = NULL;
    c->out[0].nvalues = -1;
    return 0;
}
static int not_impl(const kiln_call *c) {
    const uint8_t *x = c->in[0].data;
    uint8_t *y = c->out[0].data;
    for (int64_t i = 0, n = kiln_tensor_numel(&c->out[0]); i < n; i++) y[i] = !x[i];
    return 0;
}
static const kiln_quick_op not_op = {
    .ns = OPS_NS, .name = "Not", .version = 1, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .shape = not_shape, .impl = not_impl, .doc = "logical not",
    .cuda_impl = kiln__cu_not, .cuda_formats = cu_bool,
};
KILN_OP(not_op)

typedef void (*un_fn)(const void *x, void *y, int64_t n);
#define BNOT_DEF(SUF, T, CT, LD, ST, A)                                       \
    static void bnot_##SUF(const void *x_, void *y_, int64_t n) {             \
        const T *x = x_;                                                      \
        T *y = y_;                                                            \
        for (int64_t i = 0; i < n; i++) y[i] = (T)~x[i];                      \
    }
#define BNOT_TAB(SUF, T, CT, LD, ST, A) [KILN_DTYPE_##SUF] = bnot_##SUF,
OPS_TYPES_INT(BNOT_DEF, 0)
static const un_fn tab_bnot[KILN_DTYPE_COUNT_] = {OPS_TYPES_INT(BNOT_TAB, 0)};

static int bnot_shape(kiln_shape_ctx *c) {
    kiln_dtype t = c->in[0].dtype;
    if (t <= 0 || t >= KILN_DTYPE_COUNT_ || !tab_bnot[t]) return type_err("BitwiseNot", 0, t);
    c->out[0] = c->in[0];
    c->out[0].data = NULL;
    c->out[0].nvalues = -1;
    return 0;
}
static int bnot_impl(const kiln_call *c) {
    tab_bnot[c->in[0].dtype](c->in[0].data, c->out[0].data, kiln_tensor_numel(&c->out[0]));
    return 0;
}
static const kiln_quick_op bnot_op = {
    .ns = OPS_NS, .name = "BitwiseNot", .version = 18, .min_inputs = 1, .max_inputs = 1,
    .num_outputs = 1, .shape = bnot_shape, .impl = bnot_impl, .doc = "bitwise not",
};
KILN_OP(bnot_op)

/* ---- PRelu: x < 0 ? slope * x : x, slope broadcast to x (unidirectional) ----------- */

#define E_PRELU(x, z) ((x) < 0 ? (z) * (x) : (x))
OPS_TYPES_FLOAT(BIN_DEF, PRELU)
OPS_TYPES_SINT(BIN_DEF, PRELU)
static const bin_fn tab_prelu[KILN_DTYPE_COUNT_] = {OPS_TYPES_FLOAT(BIN_TAB, PRELU)
                                                        OPS_TYPES_SINT(BIN_TAB, PRELU)};

static int prelu_shape(kiln_shape_ctx *c) {
    int r = bin_shape(c, "PRelu", tab_prelu, 0, V_NONE, 1);
    if (r) return r;
    const kiln_desc *x = &c->in[0];
    int same = c->out[0].ndim == x->ndim;
    for (int i = 0; same && i < x->ndim; i++) same = c->out[0].dims[i] == x->dims[i];
    if (!same)
        return kiln_set_error(KILN_ESHAPE, "PRelu: slope (rank %d) must broadcast to X (rank %d) "
                              "without growing it", c->in[1].ndim, x->ndim);
    return 0;
}
static int prelu_impl(const kiln_call *c) { return bin_impl(c, tab_prelu); }
/* Epilogue with a constant f32 slope: one value, or one per channel. */
static int prelu_epi(const kiln_epilogue_args *a, float *x, int64_t n, int64_t ch, int64_t chan_len) {
    const float *sl = a->in[1].data;
    int scalar = a->p[0] != 0;
    for (int64_t i = 0; i < n;) {
        int64_t c = chan_len ? ch + i / chan_len : ch;
        int64_t run = chan_len && !scalar ? chan_len - i % chan_len : n - i;
        if (run > n - i) run = n - i;
        float z = scalar ? sl[0] : sl[c];
        for (int64_t k = i; k < i + run; k++) x[k] = E_PRELU(x[k], z);
        i += run;
    }
    return 0;
}
static int prelu_epi_check(kiln_epilogue_args *a) {
    a->p[0] = kiln_epilogue_param_kind(a, 1) == 1;
    if (a->x != 0 || a->nin != 2 || a->in[1].dtype != KILN_DTYPE_F32) return 1;
    return kiln_epilogue_param_kind(a, 1) == 0;
}
static int prelu_cuda(const kiln_call *c) { return kiln__cu_binary(c, "PRelu"); }
static const kiln_quick_op prelu_op = {
    .ns = OPS_NS, .name = "PRelu", .version = 7, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .shape = prelu_shape, .impl = prelu_impl,
    .epilogue = prelu_epi, .epilogue_check = prelu_epi_check,
    .doc = "x < 0 ? slope * x : x (slope broadcast to x)",
    .cuda_impl = prelu_cuda, .cuda_formats = cu_num,
};
KILN_OP(prelu_op)

/* ---- legacy forms (opset 1 and 6): broadcast/axis attributes ------------------------ */

/* Before opset 7, B broadcast to A only with broadcast = 1, aligned at
 * `axis` (default: trailing, as numpy).  Appending the size-1 dims after B
 * turns that into numpy broadcasting. */
static const kiln_attr_def legacy_attrs[] = {
    {.name = "broadcast", .type = KILN_ATTR_INT, .def = "0"},
    {.name = "axis", .type = KILN_ATTR_INT, .doc = "where B aligns in A (broadcast = 1)"},
    {.name = "consumed_inputs", .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .doc = "ignored (opset 1)"},
    {NULL}};

static int legacy_pad(const kiln_attrs *a, const char *op, int ra, int rb, int *pad) {
    *pad = 0;
    const kiln_attr_value *bc = kiln_attrs_get(a, "broadcast"), *ax = kiln_attrs_get(a, "axis");
    if (!bc || !bc->present || !bc->i || !ax || !ax->present) return 0;
    int64_t axis = ax->i < 0 ? ax->i + ra : ax->i;
    if (axis < 0 || axis + rb > ra)
        return kiln_set_error(KILN_EATTR, "%s: axis %lld does not place B (rank %d) inside A (rank %d)",
                              op, (long long)ax->i, rb, ra);
    *pad = (int)(ra - axis - rb);
    return 0;
}

static int legacy_shape(kiln_shape_ctx *c, const char *op, const bin_fn *tab, vop v) {
    int pad, r = legacy_pad(c->attrs, op, c->in[0].ndim, c->in[1].ndim, &pad);
    if (r) return r;
    if (!pad) return bin_shape(c, op, tab, 0, v, 0);
    kiln_desc in[2] = {c->in[0], c->in[1]};
    for (int i = 0; i < pad; i++) in[1].dims[in[1].ndim++] = kiln_expr_const(c->x, 1);
    kiln_shape_ctx c2 = *c;
    c2.in = in;
    return bin_shape(&c2, op, tab, 0, v, 0);
}

static int legacy_impl(const kiln_call *c, const bin_fn *tab) {
    int pad = 0;
    int r = legacy_pad(c->attrs, "legacy broadcast", c->in[0].ndim, c->in[1].ndim, &pad);
    if (r) return r;
    if (!pad) return bin_impl(c, tab);
    kiln_tensor in[2] = {c->in[0], c->in[1]};
    for (int i = 0; i < pad; i++) {
        in[1].dims[in[1].ndim] = 1;
        in[1].strides[in[1].ndim++] = 1;
    }
    kiln_call c2 = *c;
    c2.in = in;
    return bin_impl(&c2, tab);
}

#define LEGACY_OP(VAR, NAME, TAB, VOP)                                        \
    static int VAR##_lshape(kiln_shape_ctx *c) { return legacy_shape(c, NAME, TAB, VOP); } \
    static int VAR##_limpl(const kiln_call *c) { return legacy_impl(c, TAB); } \
    static const kiln_quick_op VAR##1_op = {                                  \
        .ns = OPS_NS, .name = NAME, .version = 1, .min_inputs = 2, .max_inputs = 2, \
        .num_outputs = 1, .attrs = legacy_attrs, .shape = VAR##_lshape,       \
        .impl = VAR##_limpl, .doc = "legacy form (broadcast/axis attributes)", \
    };                                                                        \
    static const kiln_quick_op VAR##6_op = {                                  \
        .ns = OPS_NS, .name = NAME, .version = 6, .min_inputs = 2, .max_inputs = 2, \
        .num_outputs = 1, .attrs = legacy_attrs, .shape = VAR##_lshape,   \
        .impl = VAR##_limpl, .doc = "legacy form (broadcast/axis attributes)", \
    };                                                                        \
    KILN_OP(VAR##1_op)                                                        \
    KILN_OP(VAR##6_op)

LEGACY_OP(ladd, "Add", tab_add, V_ADD)
LEGACY_OP(lsub, "Sub", tab_sub, V_SUB)
LEGACY_OP(lmul, "Mul", tab_mul, V_MUL)
LEGACY_OP(ldiv, "Div", tab_div, V_DIV)

static int lpow_shape(kiln_shape_ctx *c) { return legacy_shape(c, "Pow", tab_pow, V_NONE); }
static int lpow_impl(const kiln_call *c) { return legacy_impl(c, tab_pow); }
static const kiln_quick_op lpow_op = {
    .ns = OPS_NS, .name = "Pow", .version = 1, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .attrs = legacy_attrs, .shape = lpow_shape, .impl = lpow_impl,
    .doc = "legacy form (broadcast/axis attributes)",
};
KILN_OP(lpow_op)

/* Max/Min/Sum/Mean 1 and 6 and PRelu 1 and 6: same shapes (a subset of
 * numpy broadcasting); opset 1 carries an ignored consumed_inputs. */
static const kiln_attr_def consumed_attrs[] = {
    {.name = "consumed_inputs", .type = KILN_ATTR_ARRAY, .elem = KILN_DTYPE_I64, .doc = "ignored (opset 1)"},
    {NULL}};
#define VAR_LEGACY(VAR, NAME, VER, ATTRS)                                     \
    static const kiln_quick_op VAR##_l##VER = {                               \
        .ns = OPS_NS, .name = NAME, .version = VER,                           \
        .min_inputs = 1, .max_inputs = KILN_MAX_IO - 1, .num_outputs = 1,     \
        .attrs = ATTRS, .shape = VAR##_shape, .impl = VAR##_impl,             \
        .doc = "legacy form (same shapes)",                                   \
    };                                                                        \
    KILN_OP(VAR##_l##VER)
VAR_LEGACY(vmax, "Max", 1, consumed_attrs)
VAR_LEGACY(vmax, "Max", 6, NULL)
VAR_LEGACY(vmin, "Min", 1, consumed_attrs)
VAR_LEGACY(vmin, "Min", 6, NULL)
VAR_LEGACY(vsum, "Sum", 1, consumed_attrs)
VAR_LEGACY(vsum, "Sum", 6, NULL)
VAR_LEGACY(vmean, "Mean", 1, consumed_attrs)
VAR_LEGACY(vmean, "Mean", 6, NULL)

/* PRelu before opset 7: a 1-D slope of C values applies along the channel
 * axis 1 (append the size-1 dims after it). */
static int lprelu_pad(int rx, int rs, int64_t ns) { return rs == 1 && ns != 1 && rx > 2 ? rx - 2 : 0; }
static int lprelu_shape(kiln_shape_ctx *c) {
    int64_t ns = kiln__ops_desc_numel(&c->in[1]);
    int pad = lprelu_pad(c->in[0].ndim, c->in[1].ndim, ns);
    if (!pad) return prelu_shape(c);
    kiln_desc in[2] = {c->in[0], c->in[1]};
    for (int i = 0; i < pad; i++) in[1].dims[in[1].ndim++] = kiln_expr_const(c->x, 1);
    kiln_shape_ctx c2 = *c;
    c2.in = in;
    return prelu_shape(&c2);
}
static int lprelu_impl(const kiln_call *c) {
    int pad = lprelu_pad(c->in[0].ndim, c->in[1].ndim, kiln_tensor_numel(&c->in[1]));
    if (!pad) return prelu_impl(c);
    kiln_tensor in[2] = {c->in[0], c->in[1]};
    for (int i = 0; i < pad; i++) {
        in[1].dims[in[1].ndim] = 1;
        in[1].strides[in[1].ndim++] = 1;
    }
    kiln_call c2 = *c;
    c2.in = in;
    return prelu_impl(&c2);
}
static const kiln_quick_op prelu1_op = {
    .ns = OPS_NS, .name = "PRelu", .version = 1, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .attrs = consumed_attrs, .shape = lprelu_shape, .impl = lprelu_impl,
    .doc = "legacy form (1-D slope along channels)",
};
static const kiln_quick_op prelu6_op = {
    .ns = OPS_NS, .name = "PRelu", .version = 6, .min_inputs = 2, .max_inputs = 2,
    .num_outputs = 1, .shape = lprelu_shape, .impl = lprelu_impl,
    .doc = "legacy form (1-D slope along channels)",
};
KILN_OP(prelu1_op)
KILN_OP(prelu6_op)
