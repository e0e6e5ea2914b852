/*
 * qlinear.c — ONNX QLinearMatMul (10, 21) and QLinearConv (10).
 *
 * Both compute, for quantized u8/i8 operands with scales s and zero points z,
 *   acc[m, n] = sum_k (a[m, k] - za) * (b[k, n] - zb)         (int32)
 *   y[m, n]   = saturate(round_half_even(acc * (sa * sb / sy)) + zy)
 * where the multiplier sa * sb / sy is formed in float and applied in
 * double, as the ONNX reference does.
 *
 * Integer GEMM.  Both operands are first packed as int16 with their zero
 * points already subtracted (u8 - z and i8 - z lie in [-255, 255], so a
 * product and the sum of two fit int32), B with pairs of k interleaved.
 * The micro-kernel multiplies a pair of A values (one 32-bit broadcast)
 * with 16 columns x 2 k of B in one AVX-512 VNNI vpdpwssd (vpmaddwd + add
 * without VNNI; AVX2 8 columns; plain C elsewhere), keeping a 4 x 64 tile of
 * int32 accumulators in registers.  Accumulation wraps in 32 bits (the spec
 * lets it overflow only there).  Tasks of 16 rows x 64 columns (one B panel
 * read from L2 for 4 micro-tiles) are spread over the thread pool; each
 * finished micro-tile is requantized straight into the u8/i8 output.
 *
 * QLinearMatMul: numpy matmul with broadcast batch dims.  Scale/zero point
 * of a are per tensor (one element) or per row: shape [M] or [..., M, 1]
 * (leading dims broadcast against a's batch dims); those of b per tensor or
 * per column: [N] or [..., 1, N].
 *
 * QLinearConv: im2col of (x - zx) per (image, group) into an int16 matrix
 * [Cg * kernel, output pixels] (padding becomes 0 = the zero point), then
 * the GEMM with W[g] - zw[m] as A; optional int32 bias added to the
 * accumulator; w_scale/w_zero_point per tensor or per output channel.
 */
#include "ops/common/ops_util.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------------ integer GEMM */

/* Packed operands (zero points already subtracted, padding 0):
 *   A: row m at a + m * lda, lda >= Kp = K rounded up to even; the int16
 *      pair (a[m, 2p], a[m, 2p + 1]) is read as one int32.
 *   B: k-pairs interleaved: element (k, j) at b[((k / 2) * Np + j) * 2 +
 *      k % 2], Np = N rounded up to QG_NV (columns N..Np are 0).
 * A micro-tile is QG_MR rows x up to QG_NB columns; a task takes up to
 * QG_MT rows (several micro-tiles reusing one B panel from L2).  Engine
 * files store packed B/W (section PACKED): a change of this layout must
 * bump the "qgemm" tag of kiln__prepack_layout (device/cpu/sgemm.c). */
enum { QG_MR = 4, QG_NV = 16, QG_NB = 64, QG_MT = 16 };

static int64_t qg_kp(int64_t K) { return (K + 1) & ~(int64_t)1; }
static int64_t qg_np(int64_t N) { return (N + QG_NV - 1) / QG_NV * QG_NV; }

typedef struct qgemm {
    int64_t M, N, K;
    const int16_t *a;      /* packed A */
    int64_t lda;
    const int16_t *b;      /* packed B, Np = qg_np(N) */
    void *y;               /* Y[m * ldy + n], U8 or I8 */
    kiln_dtype yt;
    int64_t ldy;
    const int32_t *bias;   /* per row, or NULL */
    const float *rs;       /* row scales rs[m * rs_inc] (rs_inc 0 or 1) */
    int64_t rs_inc;
    const float *cs;       /* column scales cs[n * cs_inc] (cs_inc 0 or 1) */
    int64_t cs_inc;
    float ys;              /* output scale */
    int32_t yz;            /* output zero point */
} qgemm;

static void q_range(kiln_dtype t, int32_t *lo, int32_t *hi) {
    *lo = t == KILN_DTYPE_I8 ? -128 : 0;
    *hi = t == KILN_DTYPE_I8 ? 127 : 255;
}

/* Requantize acc[0..n) into row m, columns [n0, n0 + n). */
static void qg_store(const qgemm *g, int64_t m, int64_t n0, int64_t n, const int32_t *acc) {
    int32_t lo, hi;
    q_range(g->yt, &lo, &hi);
    const uint32_t bias = g->bias ? (uint32_t)g->bias[m] : 0;
    const float rs = g->rs[m * g->rs_inc];
    const double yz = g->yz;
    const float mul0 = rs * g->cs[0] / g->ys; /* per-tensor column scale */
    int32_t q[QG_NB];
    for (int64_t j = 0; j < n; j++) {
        /* the bias wraps like the int32 accumulator */
        int32_t v = (int32_t)((uint32_t)acc[j] + bias);
        float mul = g->cs_inc ? rs * g->cs[n0 + j] / g->ys : mul0;
        double r = nearbyint((double)v * (double)mul) + yz;
        /* NaN (a zero or NaN scale) saturates low instead of converting */
        q[j] = r >= lo ? (r <= hi ? (int32_t)r : hi) : lo;
    }
    if (g->yt == KILN_DTYPE_I8) {
        int8_t *y = (int8_t *)g->y + m * g->ldy + n0;
        for (int64_t j = 0; j < n; j++) y[j] = (int8_t)q[j];
    } else {
        uint8_t *y = (uint8_t *)g->y + m * g->ldy + n0;
        for (int64_t j = 0; j < n; j++) y[j] = (uint8_t)q[j];
    }
}

/* acc[r][j] = sum_k A[row r][k] * B[k][j] for 4 rows (ar) and columns
 * [0, nt), nt <= QG_NB, rounded up to whole vectors (packed B is 0 there).
 * A product of two int16 in [-255, 255] and the sum of two fit int32; the
 * running sum wraps (SIMD lanes, or unsigned arithmetic in plain C). */
#if defined(__AVX512BW__) || defined(__AVX2__)
#include <immintrin.h>

/* One SIMD vector of int32 lanes; QV_DOT(c, a, b): c += the pairwise
 * int16 products of a and b summed per lane (VNNI: one instruction). */
#if defined(__AVX512BW__)
enum { QV_LANES = 16, QV_PASS = 4 };   /* 4 rows x 4 vectors: 16 accumulators */
typedef __m512i qv;
#define QV_ZERO() _mm512_setzero_si512()
#define QV_LOAD(p) _mm512_loadu_si512((const void *)(p))
#define QV_SET1(x) _mm512_set1_epi32(x)
#define QV_STORE(p, v) _mm512_storeu_si512((void *)(p), v)
#if defined(__AVX512VNNI__)
#define QV_DOT(c, a, b) _mm512_dpwssd_epi32(c, a, b)
#else
#define QV_DOT(c, a, b) _mm512_add_epi32(c, _mm512_madd_epi16(a, b))
#endif
#else
enum { QV_LANES = 8, QV_PASS = 2 };    /* 4 rows x 2 vectors: 8 of 16 registers */
typedef __m256i qv;
#define QV_ZERO() _mm256_setzero_si256()
#define QV_LOAD(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define QV_SET1(x) _mm256_set1_epi32(x)
#define QV_STORE(p, v) _mm256_storeu_si256((__m256i *)(void *)(p), v)
#if defined(__AVXVNNI__)
#define QV_DOT(c, a, b) _mm256_dpwssd_avx_epi32(c, a, b)
#else
#define QV_DOT(c, a, b) _mm256_add_epi32(c, _mm256_madd_epi16(a, b))
#endif
#endif

/* Columns [j0, j0 + nv * QV_LANES) of the tile; nv is a constant after
 * inlining, so the accumulators live in registers. */
static inline __attribute__((always_inline)) void
qg_pass(const int16_t *const ar[QG_MR], const int16_t *b, int64_t np, int64_t kp, int nv, int j0,
        int32_t acc[QG_MR][QG_NB]) {
    qv c[QG_MR][4];
    for (int r = 0; r < QG_MR; r++)
        for (int v = 0; v < nv; v++) c[r][v] = QV_ZERO();
    b += 2 * j0;
    for (int64_t p = 0; p < kp; p++) {
        const int16_t *bp = b + p * np * 2;
        qv bv[4];
        for (int v = 0; v < nv; v++) bv[v] = QV_LOAD(bp + v * 2 * QV_LANES);
        for (int r = 0; r < QG_MR; r++) {
            int32_t pair; /* (a[2p], a[2p + 1]) as one lane */
            memcpy(&pair, ar[r] + 2 * p, sizeof pair);
            qv a = QV_SET1(pair);
            for (int v = 0; v < nv; v++) c[r][v] = QV_DOT(c[r][v], a, bv[v]);
        }
    }
    for (int r = 0; r < QG_MR; r++)
        for (int v = 0; v < nv; v++) QV_STORE(acc[r] + j0 + v * QV_LANES, c[r][v]);
}

static void qg_kernel(const int16_t *const ar[QG_MR], const int16_t *b, int64_t np, int64_t kp,
                      int64_t nt, int32_t acc[QG_MR][QG_NB]) {
    const int nv = (int)((nt + QV_LANES - 1) / QV_LANES);
    for (int v0 = 0; v0 < nv; v0 += QV_PASS) {
        int n = nv - v0 < QV_PASS ? nv - v0 : QV_PASS, j0 = v0 * QV_LANES;
        switch (n) { /* one specialization per width */
        case 1: qg_pass(ar, b, np, kp, 1, j0, acc); break;
        case 2: qg_pass(ar, b, np, kp, 2, j0, acc); break;
        case 3: qg_pass(ar, b, np, kp, 3, j0, acc); break;
        default: qg_pass(ar, b, np, kp, 4, j0, acc); break;
        }
    }
}
#else
static void qg_kernel(const int16_t *const ar[QG_MR], const int16_t *b, int64_t np, int64_t kp,
                      int64_t nt, int32_t acc[QG_MR][QG_NB]) {
    uint32_t c[QG_MR][QG_NB];
    memset(c, 0, sizeof c);
    for (int64_t p = 0; p < kp; p++) {
        const int16_t *bp = b + p * np * 2;
        for (int r = 0; r < QG_MR; r++) {
            const int32_t a0 = ar[r][2 * p], a1 = ar[r][2 * p + 1];
            for (int64_t j = 0; j < nt; j++)
                c[r][j] += (uint32_t)(a0 * bp[2 * j] + a1 * bp[2 * j + 1]);
        }
    }
    for (int r = 0; r < QG_MR; r++)
        for (int64_t j = 0; j < nt; j++) acc[r][j] = (int32_t)c[r][j];
}
#endif

static int64_t qg_tiles(const qgemm *g) {
    return ((g->M + QG_MT - 1) / QG_MT) * ((g->N + QG_NB - 1) / QG_NB);
}

/* Task t: rows [m0, m0 + QG_MT) x columns [n0, n0 + QG_NB). */
static void qg_run_tile(const qgemm *g, int64_t t) {
    const int64_t ncb = (g->N + QG_NB - 1) / QG_NB, np = qg_np(g->N), pairs = qg_kp(g->K) / 2;
    const int64_t mt0 = (t / ncb) * QG_MT, n0 = (t % ncb) * QG_NB;
    const int64_t mt1 = g->M - mt0 < QG_MT ? g->M : mt0 + QG_MT;
    const int64_t nt = g->N - n0 < QG_NB ? g->N - n0 : QG_NB;
    int32_t acc[QG_MR][QG_NB];
    for (int64_t m0 = mt0; m0 < mt1; m0 += QG_MR) {
        int64_t mr = mt1 - m0 < QG_MR ? mt1 - m0 : QG_MR;
        const int16_t *ar[QG_MR];
        for (int r = 0; r < QG_MR; r++) /* missing rows repeat the first (dropped) */
            ar[r] = g->a + (m0 + (r < mr ? r : 0)) * g->lda;
        qg_kernel(ar, g->b + n0 * 2, np, pairs, nt, acc);
        for (int r = 0; r < mr; r++) qg_store(g, m0 + r, n0, nt, acc[r]);
    }
}

static void qg_range(void *ud, int64_t b, int64_t e) {
    const qgemm *g = ud;
    for (int64_t t = b; t < e; t++) qg_run_tile(g, t);
}

static void qg_run(const qgemm *g, kiln_exec *e) {
    if (g->M <= 0 || g->N <= 0) return;
    kiln_exec_parallel_for(e, qg_tiles(g), 1, qg_range, (void *)g);
}

/* Packed B index of element (k, j). */
static inline int64_t qg_bidx(int64_t k, int64_t j, int64_t np) {
    return ((k >> 1) * np + j) * 2 + (k & 1);
}

/* ------------------------------------------------------------ shared checks */

static int is_q8(kiln_dtype t) { return t == KILN_DTYPE_U8 || t == KILN_DTYPE_I8; }

static int present(const kiln_desc *d) { return d->dtype != KILN_DTYPE_UNDEFINED; }

/* Scales are f32 (opset 10) or f32/f16/bf16 (opset 21). */
static int check_scale(const kiln_desc *d, const char *op, const char *name) {
    kiln_dtype t = d->dtype;
    if (t != KILN_DTYPE_F32 && t != KILN_DTYPE_F16 && t != KILN_DTYPE_BF16)
        return kiln_set_error(KILN_ETYPE, "%s: %s must be f32 (or f16/bf16), found %s", op, name,
                              kiln_dtype_name(t));
    return 0;
}

/* A zero point is absent or has the type of its tensor. */
static int check_zp(const kiln_desc *zp, kiln_dtype want, const char *op, const char *name) {
    if (present(zp) && zp->dtype != want)
        return kiln_set_error(KILN_ETYPE, "%s: %s must have type %s like its tensor, found %s", op,
                              name, kiln_dtype_name(want), kiln_dtype_name(zp->dtype));
    return 0;
}

static int64_t numel_desc_static(const kiln_desc *d) {
    int64_t n = 1, v;
    for (int i = 0; i < d->ndim; i++) {
        if (!kiln_expr_is_const(d->dims[i], &v)) return -1;
        n *= v;
    }
    return n;
}

/* Scalar check of a per-tensor parameter (when its dims are static). */
static int check_scalar(const kiln_desc *d, const char *op, const char *name) {
    int64_t n = numel_desc_static(d);
    if (present(d) && n >= 0 && n != 1)
        return kiln_set_error(KILN_ESHAPE, "%s: %s must have one element (per tensor), found %lld",
                              op, name, (long long)n);
    return 0;
}

static float ld_scale(const kiln_tensor *t, int64_t i) {
    return (float)kiln__ops_get_f64(t->data, t->dtype, i);
}

static int32_t ld_zp(const kiln_tensor *t, int64_t i) {
    if (!t || !t->data) return 0;
    return t->dtype == KILN_DTYPE_I8 ? ((const int8_t *)t->data)[i] : ((const uint8_t *)t->data)[i];
}

static const kiln_tensor *opt_in(const kiln_call *c, int i) {
    return i < c->nin && c->in[i].data ? &c->in[i] : NULL;
}

/* prepack: input i is absent, or a constant whose values are known. */
static int known_or_absent(const kiln_call *c, int i) {
    return i >= c->nin || c->in[i].dtype == KILN_DTYPE_UNDEFINED || c->in[i].data != NULL;
}

static int dims_static(const kiln_tensor *t) {
    for (int d = 0; d < t->ndim; d++)
        if (t->dims[d] < 0) return 0;
    return 1;
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

static int all_dense(const kiln_call *c, const char *op) {
    for (int i = 0; i < c->nin; i++)
        if (c->in[i].data && !kiln__ops_dense(&c->in[i]))
            return kiln_set_error(KILN_EUNSUPPORTED, "%s: input %d is not dense LINEAR", op, i);
    if (!kiln__ops_dense(&c->out[0]))
        return kiln_set_error(KILN_EUNSUPPORTED, "%s: output is not dense LINEAR", op);
    return 0;
}

/* ------------------------------------------------------------ QLinearMatMul */

#define QMM "QLinearMatMul"

enum { A_X = 0, A_S, A_Z, B_X, B_S, B_Z, Y_S, Y_Z };

static int qmm_shape(kiln_shape_ctx *c) {
    const kiln_desc *a = &c->in[A_X], *b = &c->in[B_X];
    if (!is_q8(a->dtype) || !is_q8(b->dtype))
        return kiln_set_error(KILN_ETYPE, QMM ": a and b must be u8 or i8, found %s and %s",
                              kiln_dtype_name(a->dtype), kiln_dtype_name(b->dtype));
    int rc;
    if ((rc = check_scale(&c->in[A_S], QMM, "a_scale")) ||
        (rc = check_scale(&c->in[B_S], QMM, "b_scale")) ||
        (rc = check_scale(&c->in[Y_S], QMM, "y_scale")) ||
        (rc = check_zp(&c->in[A_Z], a->dtype, QMM, "a_zero_point")) ||
        (rc = check_zp(&c->in[B_Z], b->dtype, QMM, "b_zero_point")) ||
        (rc = check_scalar(&c->in[Y_S], QMM, "y_scale")) ||
        (rc = check_scalar(&c->in[Y_Z], QMM, "y_zero_point")))
        return rc;
    kiln_dtype yt = present(&c->in[Y_Z]) ? c->in[Y_Z].dtype : a->dtype;
    if (!is_q8(yt))
        return kiln_set_error(KILN_ETYPE, QMM ": y_zero_point must be u8 or i8, found %s",
                              kiln_dtype_name(yt));
    return kiln__ops_matmul_shape(c, QMM, A_X, B_X, yt);
}

/* The matrix view of a or b: rank >= 2 dims (a rank-1 a is [1, K], a
 * rank-1 b is [K, 1]); `lax` is the axis along which parameters vary (the
 * rows of a, the columns of b); the other matrix axis is K. */
typedef struct qmat {
    int nd;
    int64_t dims[KILN_MAX_DIMS];
    int lax, kax;
    int64_t nbatch, L;       /* batches, length along lax */
} qmat;

static void qmat_init(const kiln_tensor *t, int is_b, qmat *m) {
    memset(m, 0, sizeof *m);
    m->nd = 0;
    if (t->ndim == 1 && !is_b) m->dims[m->nd++] = 1;
    for (int i = 0; i < t->ndim; i++) m->dims[m->nd++] = t->dims[i];
    if (t->ndim == 1 && is_b) m->dims[m->nd++] = 1;
    m->lax = is_b ? m->nd - 1 : m->nd - 2;
    m->kax = is_b ? m->nd - 2 : m->nd - 1;
    m->nbatch = 1;
    for (int i = 0; i < m->nd - 2; i++) m->nbatch *= m->dims[i];
    m->L = m->dims[m->lax];
}

/* Expand a scale (f32 out) or zero point (i32 out) of matrix m to one value
 * per (batch, lax index): out[batch * L + l].  p == NULL: zero point 0.
 * Accepted shapes: one element; [L] (1-D); or dims right-aligned to m's
 * that are 1 or equal to m's, 1 along K. */
static int qparam_expand(const kiln_tensor *p, const qmat *m, const char *name, float *fout,
                         int32_t *iout) {
    int64_t total = m->nbatch * m->L;
    if (!p) {
        for (int64_t i = 0; i < total; i++) iout[i] = 0;
        return 0;
    }
    int64_t pn = kiln_tensor_numel(p);
    int64_t e[KILN_MAX_DIMS];
    for (int d = 0; d < m->nd; d++) e[d] = 1;
    if (pn == 1) {
        /* per tensor: every e[d] = 1 */
    } else if (p->ndim == 1) {
        e[m->lax] = p->dims[0];
    } else {
        if (p->ndim > m->nd)
            return kiln_set_error(KILN_ESHAPE, QMM ": %s has rank %d, more than its matrix (%d)",
                                  name, p->ndim, m->nd);
        for (int i = 0; i < p->ndim; i++) e[m->nd - p->ndim + i] = p->dims[i];
    }
    int64_t st[KILN_MAX_DIMS], s = 1;
    for (int d = m->nd - 1; d >= 0; d--) {
        if (e[d] != 1 && (e[d] != m->dims[d] || d == m->kax))
            return kiln_set_error(KILN_ESHAPE,
                                  QMM ": %s has %lld values along axis %d where %s is expected "
                                  "(1 along K = %lld, else %lld): expected one element, per-%s "
                                  "[%lld] or the matrix shape with 1 along K",
                                  name, (long long)e[d], d, d == m->kax ? "1" : "1 or the matrix dim",
                                  (long long)m->dims[m->kax], (long long)m->dims[d],
                                  m->lax == m->nd - 2 ? "row" : "column", (long long)m->L);
        st[d] = e[d] == 1 ? 0 : s;
        s *= e[d];
    }
    /* odometer over the matrix dims with K collapsed to 1 */
    int64_t idx[KILN_MAX_DIMS] = {0}, off = 0;
    for (int64_t i = 0; i < total; i++) {
        if (fout) fout[i] = ld_scale(p, off);
        else iout[i] = ld_zp(p, off);
        for (int d = m->nd - 1; d >= 0; d--) {
            if (d == m->kax) continue;
            if (++idx[d] < m->dims[d]) { off += st[d]; break; }
            off -= st[d] * (idx[d] - 1);
            idx[d] = 0;
        }
    }
    return 0;
}

/* Workspace layout of QLinearMatMul. */
typedef struct qmm_ws {
    size_t a16, b16, sa, za, sb, zb, total;
} qmm_ws;

static qmm_ws qmm_layout(const qmat *ma, const qmat *mb) {
    qmm_ws w;
    size_t o = 0;
    const int64_t M = ma->dims[ma->nd - 2], K = ma->dims[ma->nd - 1], N = mb->dims[mb->nd - 1];
#define QMM_PUT(f, bytes) do { w.f = o; o += ((size_t)(bytes) + 63) & ~(size_t)63; } while (0)
    QMM_PUT(a16, (size_t)(ma->nbatch * M * qg_kp(K)) * sizeof(int16_t));
    QMM_PUT(b16, (size_t)(mb->nbatch * qg_kp(K) * qg_np(N)) * sizeof(int16_t));
    QMM_PUT(sa, (size_t)(ma->nbatch * ma->L) * sizeof(float));
    QMM_PUT(za, (size_t)(ma->nbatch * ma->L) * sizeof(int32_t));
    QMM_PUT(sb, (size_t)(mb->nbatch * mb->L) * sizeof(float));
    QMM_PUT(zb, (size_t)(mb->nbatch * mb->L) * sizeof(int32_t));
#undef QMM_PUT
    w.total = o;
    return w;
}

static size_t qmm_ws_size(const kiln_call *c) {
    qmat ma, mb;
    qmat_init(&c->in[A_X], 0, &ma);
    qmat_init(&c->in[B_X], 1, &mb);
    return qmm_layout(&ma, &mb).total;
}

/* u8/i8 element i of t as int32 */
static inline int32_t ld_q8(const kiln_tensor *t, int64_t i) {
    return t->dtype == KILN_DTYPE_I8 ? ((const int8_t *)t->data)[i] : ((const uint8_t *)t->data)[i];
}

/* Pack t - z into int16 (see "integer GEMM"): a (is_b 0) row-major with
 * rows of qg_kp(K), z per row; b in k-pairs, z per column. */
typedef struct qpack_task {
    const kiln_tensor *t;
    const qmat *m;
    const int32_t *z;
    int16_t *dst;
    int is_b;
} qpack_task;

static void qpack_rows(void *ud, int64_t lo, int64_t hi) {
    const qpack_task *p = ud;
    const qmat *m = p->m;
    /* row r of the [batch * rows, cols] matrix */
    const int64_t rows = m->dims[m->nd - 2], cols = m->dims[m->nd - 1];
    for (int64_t r = lo; r < hi; r++) {
        const int64_t bt = r / rows, i = r % rows;
        if (p->is_b) {
            /* row i = k of batch bt; an odd K's last pair gets a zero row */
            const int64_t np = qg_np(cols), kp = qg_kp(rows);
            int16_t *d = p->dst + bt * kp * np;
            const int32_t *z = p->z + bt * cols;
            for (int64_t j = 0; j < cols; j++)
                d[qg_bidx(i, j, np)] = (int16_t)(ld_q8(p->t, r * cols + j) - z[j]);
            for (int64_t j = cols; j < np; j++) d[qg_bidx(i, j, np)] = 0;
            if (i == rows - 1 && kp > rows)
                for (int64_t j = 0; j < np; j++) d[qg_bidx(rows, j, np)] = 0;
        } else {
            const int64_t kp = qg_kp(cols);
            int16_t *d = p->dst + r * kp;
            const int32_t z = p->z[bt * rows + i];
            for (int64_t j = 0; j < cols; j++) d[j] = (int16_t)(ld_q8(p->t, r * cols + j) - z);
            for (int64_t j = cols; j < kp; j++) d[j] = 0;
        }
    }
}

typedef struct qmm_task {
    qgemm proto;               /* everything but per-batch pointers */
    int64_t nbatch, tiles;
    int nb;                    /* output batch rank */
    int64_t bd[KILN_MAX_DIMS]; /* output batch dims */
    const qmat *ma, *mb;
    const int16_t *a16, *b16;
    const float *sa, *sb;
    uint8_t *y;
    int64_t ysz;               /* bytes per output batch */
} qmm_task;

/* Batch index of a (or b) for output batch t (broadcast). */
static int64_t qmm_src_batch(const qmm_task *t, const qmat *m, int64_t ob) {
    int mb = m->nd - 2;
    int64_t idx = 0, stride = 1;
    for (int i = t->nb - 1, j = mb - 1; i >= 0 && j >= 0; i--, j--) {
        int64_t ix = ob % t->bd[i];
        ob /= t->bd[i];
        idx += (m->dims[j] == 1 ? 0 : ix) * stride;
        stride *= m->dims[j];
    }
    return idx;
}

static void qmm_range(void *ud, int64_t lo, int64_t hi) {
    const qmm_task *t = ud;
    for (int64_t w = lo; w < hi; w++) {
        int64_t ob = w / t->tiles;
        int64_t ia = qmm_src_batch(t, t->ma, ob), ib = qmm_src_batch(t, t->mb, ob);
        qgemm g = t->proto;
        g.a = t->a16 + ia * g.M * g.lda;
        g.b = t->b16 + ib * g.lda * qg_np(g.N);
        g.rs = t->sa + ia * t->ma->L;
        g.cs = t->sb + ib * t->mb->L;
        g.y = t->y + ob * t->ysz;
        qg_run_tile(&g, w % t->tiles);
    }
}

static int qmm_impl(const kiln_call *c) {
    int rc = all_dense(c, QMM);
    if (rc) return rc;
    const kiln_tensor *A = &c->in[A_X], *B = &c->in[B_X], *Y = &c->out[0];
    qmat ma, mb;
    qmat_init(A, 0, &ma);
    qmat_init(B, 1, &mb);
    int64_t M = ma.dims[ma.nd - 2], K = ma.dims[ma.nd - 1], N = mb.dims[mb.nd - 1];
    if (mb.dims[mb.nd - 2] != K)
        return kiln_set_error(KILN_ESHAPE, QMM ": a has K=%lld but b has K=%lld", (long long)K,
                              (long long)mb.dims[mb.nd - 2]);
    if (kiln_tensor_numel(&c->in[Y_S]) != 1 ||
        (opt_in(c, Y_Z) && kiln_tensor_numel(&c->in[Y_Z]) != 1))
        return kiln_set_error(KILN_ESHAPE, QMM ": y_scale and y_zero_point must have one element");
    qmm_ws L = qmm_layout(&ma, &mb);
    uint8_t *ws = c->workspace;
    float *sa = (float *)(ws + L.sa), *sb = (float *)(ws + L.sb);
    int32_t *za = (int32_t *)(ws + L.za), *zb = (int32_t *)(ws + L.zb);
    if ((rc = qparam_expand(&c->in[A_S], &ma, "a_scale", sa, NULL)) ||
        (rc = qparam_expand(opt_in(c, A_Z), &ma, "a_zero_point", NULL, za)) ||
        (rc = qparam_expand(&c->in[B_S], &mb, "b_scale", sb, NULL)) ||
        (rc = qparam_expand(opt_in(c, B_Z), &mb, "b_zero_point", NULL, zb)))
        return rc;
    qmm_task t;
    memset(&t, 0, sizeof t);
    t.nb = Y->ndim - (A->ndim >= 2) - (B->ndim >= 2);
    t.nbatch = 1;
    for (int i = 0; i < t.nb; i++) {
        t.bd[i] = Y->dims[i];
        t.nbatch *= Y->dims[i];
    }
    int16_t *a16 = (int16_t *)(ws + L.a16);
    const int16_t *b16 = c->prepacked ? c->prepacked[B_X] : NULL;
    qpack_task pa = {A, &ma, za, a16, 0};
    kiln_exec_parallel_for(c->exec, ma.nbatch * M, 16, qpack_rows, &pa);
    if (!b16) { /* not a constant: pack per call */
        qpack_task pb = {B, &mb, zb, (int16_t *)(ws + L.b16), 1};
        kiln_exec_parallel_for(c->exec, mb.nbatch * K, 16, qpack_rows, &pb);
        b16 = pb.dst;
    }
    qgemm *g = &t.proto;
    g->M = M; g->N = N; g->K = K;
    g->lda = qg_kp(K); g->ldy = N;
    g->yt = Y->dtype;
    g->rs_inc = ma.L == 1 ? 0 : 1;
    g->cs_inc = mb.L == 1 ? 0 : 1;
    g->ys = ld_scale(&c->in[Y_S], 0);
    g->yz = ld_zp(opt_in(c, Y_Z), 0);
    if (M <= 0 || N <= 0) return 0;
    t.tiles = qg_tiles(g);
    t.ma = &ma; t.mb = &mb;
    t.a16 = a16; t.b16 = b16; t.sa = sa; t.sb = sb;
    t.y = Y->data;
    t.ysz = M * N;
    kiln_exec_parallel_for(c->exec, t.nbatch * t.tiles, 1, qmm_range, &t);
    return 0;
}

/* kiln_quick_op.prepack: a constant b whose zero point is constant (or
 * absent) is packed once per engine, as qmm_impl would per call; the
 * expanded zero points follow it (scratch for the packing). */
static int qmm_prepack(const kiln_call *c, int input, void *dst, size_t *size) {
    const kiln_tensor *B = &c->in[B_X];
    if (input != B_X || !known_or_absent(c, B_Z) || !dims_static(B) || B->ndim < 1) {
        if (!dst) *size = 0;
        return 0;
    }
    qmat mb;
    qmat_init(B, 1, &mb);
    const int64_t K = mb.dims[mb.nd - 2], N = mb.dims[mb.nd - 1];
    const size_t b16 = align64((size_t)(mb.nbatch * qg_kp(K) * qg_np(N)) * sizeof(int16_t));
    if (!dst) {
        *size = b16 + (size_t)(mb.nbatch * N) * sizeof(int32_t);
        return 0;
    }
    int32_t *zb = (int32_t *)(void *)((uint8_t *)dst + b16);
    int rc = qparam_expand(opt_in(c, B_Z), &mb, "b_zero_point", NULL, zb);
    if (rc) return rc;
    qpack_task pb = {B, &mb, zb, dst, 1};
    qpack_rows(&pb, 0, mb.nbatch * K);
    return 0;
}

static const kiln_quick_op qmm_10 = {
    .ns = "ai.onnx", .name = "QLinearMatMul", .version = 10,
    .min_inputs = 8, .max_inputs = 8, .num_outputs = 1,
    .shape = qmm_shape, .impl = qmm_impl, .workspace = qmm_ws_size, .prepack = qmm_prepack,
    .doc = "u8/i8 matmul, per-tensor/row/column scales, int32 accumulation, requantized",
};
KILN_OP(qmm_10)

/* 21: f16/bf16 scales and float8 operands; float8 is not supported (the
 * shape function says so), the rest is the same op. */
static const kiln_quick_op qmm_21 = {
    .ns = "ai.onnx", .name = "QLinearMatMul", .version = 21,
    .min_inputs = 8, .max_inputs = 8, .num_outputs = 1,
    .shape = qmm_shape, .impl = qmm_impl, .workspace = qmm_ws_size, .prepack = qmm_prepack,
    .doc = "u8/i8 matmul, per-tensor/row/column scales, int32 accumulation, requantized",
};
KILN_OP(qmm_21)

/* ------------------------------------------------------------ QLinearConv */

#define QCV "QLinearConv"

enum { X_X = 0, X_S, X_Z, W_X, W_S, W_Z, O_S, O_Z, O_B };

static const kiln_attr_def qconv_attrs[] = {
    {"auto_pad", KILN_ATTR_STRING, 0, "NOTSET", 0, "NOTSET, SAME_UPPER, SAME_LOWER or VALID"},
    {"dilations", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "dilation per spatial axis"},
    {"group", KILN_ATTR_INT, 0, "1", 0, "number of groups"},
    {"kernel_shape", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "kernel dims (else from w)"},
    {"pads", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "begin pads then end pads"},
    {"strides", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "stride per spatial axis"},
    {NULL, 0, 0, NULL, 0, NULL},
};

enum { QAP_NOTSET, QAP_SAME_UPPER, QAP_SAME_LOWER, QAP_VALID };

/* Convolution attributes for nsp spatial axes, validated; wk: kernel dims
 * of w. */
typedef struct qconv_attr {
    int nsp, autopad;
    int64_t group;
    int64_t k[3], s[3], d[3], pb[3], pe[3];
} qconv_attr;

static int qconv_read_ints(const kiln_attrs *a, const char *name, int want, int64_t *dst) {
    const int64_t *v;
    int64_t n = kiln_attrs_ints(a, name, &v);
    if (n < 0) return 0;
    if (n != want)
        return kiln_set_error(KILN_EATTR, QCV ": %s has %lld values, expected %d", name,
                              (long long)n, want);
    for (int i = 0; i < want; i++) dst[i] = v[i];
    return 1;
}

static int qconv_attrs_read(const kiln_attrs *a, int nsp, const int64_t *wk, qconv_attr *q) {
    q->nsp = nsp;
    int64_t pads[6];
    for (int i = 0; i < nsp; i++) {
        q->k[i] = wk[i];
        q->s[i] = q->d[i] = 1;
        q->pb[i] = q->pe[i] = 0;
    }
    int64_t ks[3];
    int rc;
    if ((rc = qconv_read_ints(a, "kernel_shape", nsp, ks)) < 0) return rc;
    if (rc)
        for (int i = 0; i < nsp; i++)
            if (ks[i] != wk[i])
                return kiln_set_error(KILN_EATTR, QCV ": kernel_shape[%d] = %lld but w has %lld",
                                      i, (long long)ks[i], (long long)wk[i]);
    if ((rc = qconv_read_ints(a, "strides", nsp, q->s)) < 0) return rc;
    if ((rc = qconv_read_ints(a, "dilations", nsp, q->d)) < 0) return rc;
    if ((rc = qconv_read_ints(a, "pads", 2 * nsp, pads)) < 0) return rc;
    if (rc)
        for (int i = 0; i < nsp; i++) {
            q->pb[i] = pads[i];
            q->pe[i] = pads[nsp + i];
        }
    for (int i = 0; i < nsp; i++) {
        if (q->s[i] < 1 || q->d[i] < 1)
            return kiln_set_error(KILN_EATTR,
                                  QCV ": strides and dilations must be >= 1, found %lld and %lld "
                                  "on spatial axis %d", (long long)q->s[i], (long long)q->d[i], i);
        if (q->pb[i] < 0 || q->pe[i] < 0)
            return kiln_set_error(KILN_EATTR, QCV ": pads must be >= 0, found %lld and %lld on "
                                  "spatial axis %d", (long long)q->pb[i], (long long)q->pe[i], i);
        if (wk[i] < 1)
            return kiln_set_error(KILN_ESHAPE, QCV ": kernel dim %d of w is %lld, expected >= 1", i,
                                  (long long)wk[i]);
    }
    const char *ap = kiln_attrs_string(a, "auto_pad");
    if (!ap || !*ap || !strcmp(ap, "NOTSET")) q->autopad = QAP_NOTSET;
    else if (!strcmp(ap, "SAME_UPPER")) q->autopad = QAP_SAME_UPPER;
    else if (!strcmp(ap, "SAME_LOWER")) q->autopad = QAP_SAME_LOWER;
    else if (!strcmp(ap, "VALID")) q->autopad = QAP_VALID;
    else
        return kiln_set_error(KILN_EATTR, QCV ": auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER "
                              "or VALID, found '%s'", ap);
    q->group = kiln_attrs_int(a, "group");
    if (q->group < 1)
        return kiln_set_error(KILN_EATTR, QCV ": group must be >= 1, found %lld",
                              (long long)q->group);
    return 0;
}

static int qconv_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[X_X], *w = &c->in[W_X];
    if (!is_q8(x->dtype) || !is_q8(w->dtype))
        return kiln_set_error(KILN_ETYPE, QCV ": x and w must be u8 or i8, found %s and %s",
                              kiln_dtype_name(x->dtype), kiln_dtype_name(w->dtype));
    int rc;
    if ((rc = check_scale(&c->in[X_S], QCV, "x_scale")) ||
        (rc = check_scale(&c->in[W_S], QCV, "w_scale")) ||
        (rc = check_scale(&c->in[O_S], QCV, "y_scale")) ||
        (rc = check_zp(&c->in[X_Z], x->dtype, QCV, "x_zero_point")) ||
        (rc = check_zp(&c->in[W_Z], w->dtype, QCV, "w_zero_point")) ||
        (rc = check_scalar(&c->in[X_S], QCV, "x_scale")) ||
        (rc = check_scalar(&c->in[X_Z], QCV, "x_zero_point")) ||
        (rc = check_scalar(&c->in[O_S], QCV, "y_scale")) ||
        (rc = check_scalar(&c->in[O_Z], QCV, "y_zero_point")))
        return rc;
    kiln_dtype yt = present(&c->in[O_Z]) ? c->in[O_Z].dtype : x->dtype;
    if (!is_q8(yt))
        return kiln_set_error(KILN_ETYPE, QCV ": y_zero_point must be u8 or i8, found %s",
                              kiln_dtype_name(yt));
    if (c->nin > O_B && present(&c->in[O_B]) &&
        (c->in[O_B].dtype != KILN_DTYPE_I32 || c->in[O_B].ndim != 1))
        return kiln_set_error(KILN_ETYPE, QCV ": B must be a 1-D i32 tensor, found %s of rank %d",
                              kiln_dtype_name(c->in[O_B].dtype), c->in[O_B].ndim);
    if (x->ndim < 3 || x->ndim > 5)
        return kiln_set_error(KILN_ESHAPE, QCV ": x must have rank 3..5 (N, C, spatial...), "
                              "found %d", x->ndim);
    if (w->ndim != x->ndim)
        return kiln_set_error(KILN_ESHAPE, QCV ": w must have rank %d like x, found %d", x->ndim,
                              w->ndim);
    int nsp = x->ndim - 2;
    int64_t wk[3];
    for (int i = 0; i < nsp; i++)
        if (!kiln_expr_is_const(w->dims[2 + i], &wk[i]))
            return kiln_set_error(KILN_ESHAPE, QCV ": kernel dims of w must be static");
    qconv_attr q;
    if ((rc = qconv_attrs_read(c->attrs, nsp, wk, &q))) return rc;
    int64_t C, Wc, M;
    if (kiln_expr_is_const(x->dims[1], &C) && kiln_expr_is_const(w->dims[1], &Wc) &&
        C != Wc * q.group)
        return kiln_set_error(KILN_ESHAPE, QCV ": x has %lld channels but w expects %lld x group "
                              "%lld", (long long)C, (long long)Wc, (long long)q.group);
    if (kiln_expr_is_const(w->dims[0], &M) && M % q.group != 0)
        return kiln_set_error(KILN_ESHAPE, QCV ": %lld output channels are not divisible by "
                              "group %lld", (long long)M, (long long)q.group);
    kiln_desc *y = &c->out[0];
    y->dtype = yt;
    y->ndim = x->ndim;
    y->dims[0] = x->dims[0];
    y->dims[1] = w->dims[0];
    for (int i = 0; i < nsp; i++) {
        const kiln_expr *in = x->dims[2 + i];
        if (q.autopad == QAP_SAME_UPPER || q.autopad == QAP_SAME_LOWER)
            y->dims[2 + i] = kiln_expr_ceildiv(c->x, in, kiln_expr_const(c->x, q.s[i]));
        else
            y->dims[2 + i] = kiln__ops_pool_dim(c->x, in, q.k[i], q.s[i],
                                                 q.autopad == QAP_VALID ? 0 : q.pb[i] + q.pe[i],
                                                 q.d[i], 0);
    }
    return 0;
}

/* One call's geometry, spatial dims normalized to 3 (leading 1s). */
typedef struct qconv_geo {
    int64_t N, C, M, G, Cg, Mg;
    int64_t id[3], k[3], o[3], s[3], d[3], pb[3];
    int64_t ks, P, Kg;     /* kernel size, output pixels, GEMM K = Cg * ks */
} qconv_geo;

static int qconv_geometry(const kiln_call *c, qconv_geo *g) {
    const kiln_tensor *x = &c->in[X_X], *w = &c->in[W_X], *y = &c->out[0];
    int nsp = x->ndim - 2;
    int64_t wk[3];
    for (int i = 0; i < nsp; i++) wk[i] = w->dims[2 + i];
    qconv_attr q;
    int rc = qconv_attrs_read(c->attrs, nsp, wk, &q);
    if (rc) return rc;
    memset(g, 0, sizeof *g);
    g->N = x->dims[0];
    g->C = x->dims[1];
    g->M = w->dims[0];
    g->G = q.group;
    if (g->C % g->G || g->M % g->G || w->dims[1] * g->G != g->C)
        return kiln_set_error(KILN_ESHAPE, QCV ": x has %lld channels, w is [%lld, %lld, ...], "
                              "group %lld", (long long)g->C, (long long)g->M,
                              (long long)w->dims[1], (long long)g->G);
    g->Cg = g->C / g->G;
    g->Mg = g->M / g->G;
    int off = 3 - nsp;
    for (int i = 0; i < 3; i++) {
        g->id[i] = g->k[i] = g->o[i] = g->s[i] = g->d[i] = 1;
        g->pb[i] = 0;
    }
    for (int i = 0; i < nsp; i++) {
        int j = off + i;
        g->id[j] = x->dims[2 + i];
        g->k[j] = q.k[i];
        g->s[j] = q.s[i];
        g->d[j] = q.d[i];
        g->o[j] = y->dims[2 + i];
        if (q.autopad == QAP_SAME_UPPER || q.autopad == QAP_SAME_LOWER) {
            int64_t tot = (g->o[j] - 1) * q.s[i] + (q.k[i] - 1) * q.d[i] + 1 - g->id[j];
            if (tot < 0) tot = 0;
            g->pb[j] = q.autopad == QAP_SAME_UPPER ? tot / 2 : tot - tot / 2;
        } else if (q.autopad == QAP_NOTSET) {
            g->pb[j] = q.pb[i];
        }
    }
    g->ks = g->k[0] * g->k[1] * g->k[2];
    g->P = g->o[0] * g->o[1] * g->o[2];
    g->Kg = g->Cg * g->ks;
    return 0;
}

typedef struct qconv_ws {
    size_t w16, col, ws, total;
} qconv_ws;

static qconv_ws qconv_layout(const qconv_geo *g) {
    qconv_ws w;
    size_t o = 0;
#define QCV_PUT(f, bytes) do { w.f = o; o += ((size_t)(bytes) + 63) & ~(size_t)63; } while (0)
    QCV_PUT(w16, (size_t)(g->M * qg_kp(g->Kg)) * sizeof(int16_t));
    QCV_PUT(col, (size_t)(qg_kp(g->Kg) * qg_np(g->P)) * sizeof(int16_t));
    QCV_PUT(ws, (size_t)g->M * sizeof(float));
#undef QCV_PUT
    w.total = o;
    return w;
}

static size_t qconv_ws_size(const kiln_call *c) {
    qconv_geo g;
    if (qconv_geometry(c, &g)) return 0;
    return qconv_layout(&g).total;
}

/* im2col of one (image, group): row (ci, kz, ky, kx), column (oz, oy, ox),
 * value x - zx (0 in the padding). */
typedef struct qcol_task {
    const qconv_geo *g;
    const kiln_tensor *x;
    int64_t xoff;          /* first element of the group's first channel */
    int32_t zx;
    int16_t *col;          /* packed B (k-pairs, see "integer GEMM") */
} qcol_task;

/* Row r of the im2col matrix into dst[2 * j] (every second int16: the
 * k-pair layout of packed B); columns P..Np and rows past Kg are 0.  One
 * copy per input type (T), so the inner loop is a plain widening copy over
 * the output columns whose input lies inside the row. */
#define QCOL_ROW(NAME, T)                                                               \
    static void NAME(const qcol_task *t, int64_t r, int16_t *dst, int64_t np) {         \
        const qconv_geo *g = t->g;                                                      \
        if (r >= g->Kg) {                                                               \
            for (int64_t j = 0; j < np; j++) dst[2 * j] = 0;                            \
            return;                                                                     \
        }                                                                               \
        const int64_t IW = g->id[2], IH = g->id[1], ID = g->id[0], OW = g->o[2];        \
        const int64_t sx = g->s[2];                                                     \
        const int32_t zx = t->zx;                                                       \
        int64_t kx = r % g->k[2], q = r / g->k[2], ky = q % g->k[1], q2 = q / g->k[1];  \
        int64_t kz = q2 % g->k[0], ci = q2 / g->k[0];                                   \
        const T *xc = (const T *)t->x->data + t->xoff + ci * ID * IH * IW;              \
        /* output columns [lo, hi) read inside the input row */                         \
        int64_t x0 = kx * g->d[2] - g->pb[2], lo = 0, hi = OW;                          \
        if (x0 < 0) lo = (-x0 + sx - 1) / sx;                                           \
        if (x0 + (OW - 1) * sx >= IW) hi = IW - x0 <= 0 ? 0 : (IW - x0 + sx - 1) / sx;  \
        if (hi < lo) hi = lo;                                                           \
        for (int64_t oz = 0; oz < g->o[0]; oz++) {                                      \
            int64_t iz = oz * g->s[0] - g->pb[0] + kz * g->d[0];                        \
            for (int64_t oy = 0; oy < g->o[1]; oy++) {                                  \
                int64_t iy = oy * g->s[1] - g->pb[1] + ky * g->d[1];                    \
                int16_t *o = dst + 2 * (oz * g->o[1] + oy) * OW;                        \
                if (iz < 0 || iz >= ID || iy < 0 || iy >= IH) {                         \
                    for (int64_t ox = 0; ox < OW; ox++) o[2 * ox] = 0;                  \
                    continue;                                                           \
                }                                                                       \
                const T *xr = xc + (iz * IH + iy) * IW;                                 \
                for (int64_t ox = 0; ox < lo; ox++) o[2 * ox] = 0;                      \
                if (sx == 1)                                                            \
                    for (int64_t ox = lo; ox < hi; ox++)                                \
                        o[2 * ox] = (int16_t)(xr[x0 + ox] - zx);                        \
                else                                                                    \
                    for (int64_t ox = lo; ox < hi; ox++)                                \
                        o[2 * ox] = (int16_t)(xr[x0 + ox * sx] - zx);                   \
                for (int64_t ox = hi; ox < OW; ox++) o[2 * ox] = 0;                     \
            }                                                                           \
        }                                                                               \
        for (int64_t j = g->P; j < np; j++) dst[2 * j] = 0;                             \
    }
QCOL_ROW(qcol_row_u8, uint8_t)
QCOL_ROW(qcol_row_i8, int8_t)
#undef QCOL_ROW

/* k-pairs [lo, hi) of the packed im2col matrix. */
static void qcol_pairs(void *ud, int64_t lo, int64_t hi) {
    const qcol_task *t = ud;
    const int64_t np = qg_np(t->g->P);
    for (int64_t p = lo; p < hi; p++) {
        int16_t *d = t->col + p * np * 2;
        if (t->x->dtype == KILN_DTYPE_I8) {
            qcol_row_i8(t, 2 * p, d, np);
            qcol_row_i8(t, 2 * p + 1, d + 1, np);
        } else {
            qcol_row_u8(t, 2 * p, d, np);
            qcol_row_u8(t, 2 * p + 1, d + 1, np);
        }
    }
}

/* W - zw as packed A: M rows of qg_kp(Kg) int16 (the pad column 0). */
static void qconv_pack_w(const kiln_tensor *W, const kiln_tensor *wz, int64_t M, int64_t Kg,
                         int16_t *dst) {
    const int64_t kp = qg_kp(Kg), nwz = wz ? kiln_tensor_numel(wz) : 1;
    for (int64_t m = 0; m < M; m++) {
        int32_t z = wz ? ld_zp(wz, nwz == 1 ? 0 : m) : 0;
        for (int64_t k = 0; k < Kg; k++) dst[m * kp + k] = (int16_t)(ld_q8(W, m * Kg + k) - z);
        if (kp > Kg) dst[m * kp + Kg] = 0;
    }
}

/* kiln_quick_op.prepack: a constant w whose zero point is constant (or
 * absent) is packed once per engine. */
static int qconv_prepack(const kiln_call *c, int input, void *dst, size_t *size) {
    const kiln_tensor *W = &c->in[W_X];
    if (input != W_X || !known_or_absent(c, W_Z) || !dims_static(W) || W->ndim < 3 ||
        W->dims[0] < 1) {
        if (!dst) *size = 0;
        return 0;
    }
    const int64_t M = W->dims[0], Kg = kiln_tensor_numel(W) / M;
    const kiln_tensor *wz = opt_in(c, W_Z);
    if (wz && kiln_tensor_numel(wz) != 1 && kiln_tensor_numel(wz) != M)
        return kiln_set_error(KILN_ESHAPE, QCV ": w_zero_point must have 1 or %lld (output "
                              "channels) elements, found %lld", (long long)M,
                              (long long)kiln_tensor_numel(wz));
    if (!dst) {
        *size = (size_t)(M * qg_kp(Kg)) * sizeof(int16_t);
        return 0;
    }
    qconv_pack_w(W, wz, M, Kg, dst);
    return 0;
}

static int qconv_impl(const kiln_call *c) {
    int rc = all_dense(c, QCV);
    if (rc) return rc;
    qconv_geo g;
    if ((rc = qconv_geometry(c, &g))) return rc;
    const kiln_tensor *X = &c->in[X_X], *W = &c->in[W_X], *Y = &c->out[0];
    const kiln_tensor *wz = opt_in(c, W_Z), *bias = opt_in(c, O_B);
    int64_t nws = kiln_tensor_numel(&c->in[W_S]), nwz = wz ? kiln_tensor_numel(wz) : 1;
    if ((nws != 1 && nws != g.M) || (nwz != 1 && nwz != g.M))
        return kiln_set_error(KILN_ESHAPE, QCV ": w_scale and w_zero_point must have 1 or %lld "
                              "(output channels) elements, found %lld and %lld", (long long)g.M,
                              (long long)nws, (long long)nwz);
    if (bias && kiln_tensor_numel(bias) != g.M)
        return kiln_set_error(KILN_ESHAPE, QCV ": B has %lld elements, expected %lld (output "
                              "channels)", (long long)kiln_tensor_numel(bias), (long long)g.M);
    qconv_ws L = qconv_layout(&g);
    uint8_t *ws = c->workspace;
    int16_t *w16 = (int16_t *)(ws + L.w16), *col = (int16_t *)(ws + L.col);
    float *wsc = (float *)(ws + L.ws);
    const int64_t kp = qg_kp(g.Kg);
    for (int64_t m = 0; m < g.M; m++) wsc[m] = ld_scale(&c->in[W_S], nws == 1 ? 0 : m);
    const int16_t *wp = c->prepacked ? c->prepacked[W_X] : NULL;
    if (!wp) { /* not a constant: pack per call */
        qconv_pack_w(W, wz, g.M, g.Kg, w16);
        wp = w16;
    }
    if (g.P == 0 || g.M == 0) return 0;
    const float xs = ld_scale(&c->in[X_S], 0);
    qgemm q;
    memset(&q, 0, sizeof q);
    q.M = g.Mg;
    q.N = g.P;
    q.K = g.Kg;
    q.lda = kp;
    q.b = col;
    q.yt = Y->dtype;
    q.ldy = g.P;
    q.rs_inc = 1;
    q.cs = &xs;
    q.cs_inc = 0;
    q.ys = ld_scale(&c->in[O_S], 0);
    q.yz = ld_zp(opt_in(c, O_Z), 0);
    qcol_task ct = {&g, X, 0, ld_zp(opt_in(c, X_Z), 0), col};
    const int64_t xplane = g.id[0] * g.id[1] * g.id[2];
    for (int64_t n = 0; n < g.N; n++)
        for (int64_t gi = 0; gi < g.G; gi++) {
            ct.xoff = (n * g.C + gi * g.Cg) * xplane;
            kiln_exec_parallel_for(c->exec, kp / 2, 2, qcol_pairs, &ct);
            q.a = wp + gi * g.Mg * q.lda;
            q.rs = wsc + gi * g.Mg;
            q.bias = bias ? (const int32_t *)bias->data + gi * g.Mg : NULL;
            q.y = (uint8_t *)Y->data + (n * g.M + gi * g.Mg) * g.P;
            qg_run(&q, c->exec);
        }
    return 0;
}

static const kiln_quick_op qconv_10 = {
    .ns = "ai.onnx", .name = "QLinearConv", .version = 10,
    .min_inputs = 8, .max_inputs = 9, .num_outputs = 1,
    .attrs = qconv_attrs, .shape = qconv_shape, .impl = qconv_impl, .workspace = qconv_ws_size,
    .prepack = qconv_prepack,
    .timing_id = "auto_pad,dilations,group,kernel_shape,pads,strides",
    .doc = "u8/i8 convolution (im2col + int32 GEMM), per-tensor or per-channel w scale",
};
KILN_OP(qconv_10)
