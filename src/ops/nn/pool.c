/*
 * pool.c — ONNX MaxPool (with Indices), AveragePool, LpPool,
 * GlobalAveragePool, GlobalMaxPool, GlobalLpPool.
 *
 * 1-D/2-D/3-D windows are normalized to (D, H, W).  Kernels loop over
 * (n, c) planes split across the thread pool; the window bounds are clipped
 * once per output row so the inner loops carry no padding tests.
 */
#include "device/cpu/sgemm.h"
#include "kiln_int.h"
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"
#include "ops/nn/pool16c.h"


#include <float.h>
#include <math.h>
#include <string.h>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

enum { P_MAX, P_AVG, P_LP };

/* Max over a window as ONNX Runtime gives it: NaN inputs are skipped (max
 * over [NaN, Inf] is Inf), a window of NaNs only is NaN (C's fmax).  m is
 * the running max, v the next value. */
#define PMAX_TAKES(v, m) ((v) > (m) || (m) != (m))
#define PMAX(v, m) (PMAX_TAKES(v, m) ? (v) : (m))

#define POOL_ATTRS_COMMON                                                                \
    {"auto_pad", KILN_ATTR_STRING, 0, "NOTSET", 0, "NOTSET, SAME_UPPER, SAME_LOWER, VALID"}, \
    {"kernel_shape", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 1, "window size per spatial axis"}, \
    {"pads", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "begin pads then end pads"},         \
    {"strides", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "stride per spatial axis"},       \
    {"dilations", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "dilation per spatial axis"},   \
    {"ceil_mode", KILN_ATTR_INT, 0, "0", 0, "ceil instead of floor for output dims"}

static const kiln_attr_def maxpool_attrs[] = {
    POOL_ATTRS_COMMON,
    {"storage_order", KILN_ATTR_INT, 0, "0", 0, "Indices: 0 row major, 1 column major"},
    {NULL, 0, 0, NULL, 0, NULL},
};
static const kiln_attr_def avgpool_attrs[] = {
    POOL_ATTRS_COMMON,
    {"count_include_pad", KILN_ATTR_INT, 0, "0", 0, "count pad elements in the divisor"},
    {NULL, 0, 0, NULL, 0, NULL},
};
static const kiln_attr_def lppool_attrs[] = {
    POOL_ATTRS_COMMON,
    {"p", KILN_ATTR_INT, 0, "2", 0, "order of the norm"},
    {NULL, 0, 0, NULL, 0, NULL},
};
static const kiln_attr_def glp_attrs[] = {
    {"p", KILN_ATTR_INT, 0, "2", 0, "order of the norm"},
    {NULL, 0, 0, NULL, 0, NULL},
};

typedef struct pgeom {
    int nsp;
    int64_t N, C;
    int64_t id[3], k[3], s[3], d[3], pb[3], pe[3], o[3];
} pgeom;

/* Window attributes for nsp axes; in[i] < 0 when unknown (shape time). */
static int pool_geom(const kiln_attrs *a, int nsp, const int64_t *in, pgeom *g, int *autopad) {
    const int64_t *v;
    int64_t n;
    for (int i = 0; i < 3; i++) {
        g->k[i] = g->s[i] = g->d[i] = 1;
        g->pb[i] = g->pe[i] = 0;
    }
    n = kiln_attrs_ints(a, "kernel_shape", &v);
    if (n != nsp)
        return kiln_set_error(KILN_EATTR, "kernel_shape: expected %d values, found %lld", nsp,
                              (long long)n);
    for (int i = 0; i < nsp; i++) g->k[i] = v[i];
    if ((n = kiln_attrs_ints(a, "strides", &v)) >= 0) {
        if (n != nsp)
            return kiln_set_error(KILN_EATTR, "strides: expected %d values, found %lld", nsp,
                                  (long long)n);
        for (int i = 0; i < nsp; i++) g->s[i] = v[i];
    }
    if ((n = kiln_attrs_ints(a, "dilations", &v)) >= 0) {
        if (n != nsp)
            return kiln_set_error(KILN_EATTR, "dilations: expected %d values, found %lld", nsp,
                                  (long long)n);
        for (int i = 0; i < nsp; i++) g->d[i] = v[i];
    }
    if ((n = kiln_attrs_ints(a, "pads", &v)) >= 0) {
        if (n != 2 * nsp)
            return kiln_set_error(KILN_EATTR, "pads: expected %d values, found %lld", 2 * nsp,
                                  (long long)n);
        for (int i = 0; i < nsp; i++) { g->pb[i] = v[i]; g->pe[i] = v[nsp + i]; }
    }
    int rc;
    if ((rc = kiln__ops_check_geom("pooling", "kernel_shape", g->k, nsp, 1)) ||
        (rc = kiln__ops_check_geom("pooling", "strides", g->s, nsp, 1)) ||
        (rc = kiln__ops_check_geom("pooling", "dilations", g->d, nsp, 1)) ||
        (rc = kiln__ops_check_geom("pooling", "pads (begin)", g->pb, nsp, 0)) ||
        (rc = kiln__ops_check_geom("pooling", "pads (end)", g->pe, nsp, 0)))
        return rc;
    const char *ap = kiln_attrs_string(a, "auto_pad");
    *autopad = 0;
    if (ap && !strcmp(ap, "SAME_UPPER")) *autopad = 1;
    else if (ap && !strcmp(ap, "SAME_LOWER")) *autopad = 2;
    else if (ap && !strcmp(ap, "VALID")) *autopad = 3;
    else if (ap && *ap && strcmp(ap, "NOTSET"))
        return kiln_set_error(KILN_EATTR, "auto_pad: expected NOTSET, SAME_UPPER, SAME_LOWER or "
                              "VALID, found '%s'", ap);
    int ceil_mode = kiln_attrs_int(a, "ceil_mode") != 0;
    for (int i = 0; i < nsp; i++) {
        if (*autopad == 3) g->pb[i] = g->pe[i] = 0;
        if (in[i] < 0) continue;
        int64_t ek = (g->k[i] - 1) * g->d[i] + 1;
        if (*autopad == 1 || *autopad == 2) {
            g->o[i] = (in[i] + g->s[i] - 1) / g->s[i];
            int64_t tot = (g->o[i] - 1) * g->s[i] + ek - in[i];
            if (tot < 0) tot = 0;
            g->pb[i] = *autopad == 1 ? tot / 2 : tot - tot / 2;
            g->pe[i] = tot - g->pb[i];
        } else {
            int64_t num = in[i] + g->pb[i] + g->pe[i] - ek;
            if (num < 0)
                return kiln_set_error(KILN_ESHAPE, "window %lld larger than padded input %lld (axis %d)",
                                      (long long)ek, (long long)(in[i] + g->pb[i] + g->pe[i]), i);
            g->o[i] = (ceil_mode ? (num + g->s[i] - 1) / g->s[i] : num / g->s[i]) + 1;
            /* the last window must start inside the input or left pad */
            if (ceil_mode && (g->o[i] - 1) * g->s[i] >= in[i] + g->pb[i]) g->o[i]--;
        }
    }
    return 0;
}

static int pool_shape_common(kiln_shape_ctx *c, int global) {
    const kiln_desc *x = &c->in[0];
    if (x->ndim < 3 || x->ndim > 5)
        return kiln_set_error(KILN_ESHAPE, "expected X of rank 3..5 (N, C, spatial...), found %d",
                              x->ndim);
    int is_int8 = x->dtype == KILN_DTYPE_I8 || x->dtype == KILN_DTYPE_U8;
    if (!kiln__ops_is_float(x->dtype) && !(is_int8 && c->nout > 1))
        return kiln_set_error(KILN_ETYPE, "expected a float tensor%s, found %s",
                              c->nout > 1 ? " or i8/u8" : "", kiln_dtype_name(x->dtype));
    int nsp = x->ndim - 2;
    kiln_desc *y = &c->out[0];
    y->dtype = x->dtype;
    y->ndim = x->ndim;
    y->dims[0] = x->dims[0];
    y->dims[1] = x->dims[1];
    if (global) {
        for (int i = 0; i < nsp; i++) y->dims[2 + i] = kiln_expr_const(c->x, 1);
        return 0;
    }
    int64_t in[3] = {0, 0, 0};
    int all_const = 1;
    for (int i = 0; i < nsp; i++)
        if (!kiln_expr_is_const(x->dims[2 + i], &in[i])) { in[i] = -1; all_const = 0; }
    pgeom g;
    memset(&g, 0, sizeof g);
    int ap;
    int rc = pool_geom(c->attrs, nsp, in, &g, &ap);
    if (rc) return rc;
    int ceil_mode = kiln_attrs_int(c->attrs, "ceil_mode") != 0;
    for (int i = 0; i < nsp; i++) {
        if (in[i] >= 0) {
            y->dims[2 + i] = kiln_expr_const(c->x, g.o[i]);
        } else if (ap == 1 || ap == 2) {
            y->dims[2 + i] = kiln_expr_ceildiv(c->x, x->dims[2 + i], kiln_expr_const(c->x, g.s[i]));
        } else {
            y->dims[2 + i] = kiln__ops_pool_dim(c->x, x->dims[2 + i], g.k[i], g.s[i],
                                                 g.pb[i] + g.pe[i], g.d[i], ceil_mode);
        }
    }
    (void)all_const;
    if (c->nout > 1) {
        c->out[1] = *y;
        c->out[1].dtype = KILN_DTYPE_I64;
    }
    return 0;
}

static int pool_shape(kiln_shape_ctx *c) { return pool_shape_common(c, 0); }
static int gpool_shape(kiln_shape_ctx *c) { return pool_shape_common(c, 1); }

typedef struct ptask {
    pgeom g;
    int kind, count_pad, order, p;
    const float *x;
    float *y;
    int64_t *ind;
} ptask;

#if defined(__AVX512F__)
/* PMAX on 16 lanes: v where it is greater or m is NaN, else m. */
static inline __m512 pmax16(__m512 v, __m512 m) {
    __m512 t = _mm512_max_ps(v, m); /* v > m ? v : m, so NaN only where m is */
    return _mm512_mask_mov_ps(t, _mm512_cmp_ps_mask(t, t, _CMP_UNORD_Q), v);
}

/* Max over a window that lies wholly inside the plane (no padding taps),
 * column stride sx 1 or 2, no dilation: 16 outputs of row r0 (the first of
 * the window's kh rows, row pitch IW) at a time, output i's window
 * starting at column xs + i * sx.  Tap kx of the 16 outputs is one vector:
 * sx 1 a load at xs + kx; sx 2 the even (kx even) or odd lanes of the 32
 * floats from xs + kx - kx % 2.  Each column is reduced over the rows,
 * then the columns in kx order, PMAX as the scalar path: the same order
 * of comparisons, so NaNs and signed zeros come out the same.  n <= 16
 * outputs; loads are masked to the row's IW - xs columns. */
static inline __attribute__((always_inline)) void
max_row16(const float *r0, int64_t IW, int64_t kh, int64_t kw, int64_t sx, int64_t xs, int64_t n, float *y) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    __m512 best = _mm512_setzero_ps();
    for (int64_t kx = 0; kx < kw; kx++) {
        int64_t base = xs + (sx == 2 ? kx - kx % 2 : kx), avail = IW - base;
        __mmask16 m0 = avail >= 16 ? 0xFFFF : (__mmask16)((1u << avail) - 1u);
        __mmask16 m1 = avail >= 32 ? 0xFFFF : avail <= 16 ? 0 : (__mmask16)((1u << (avail - 16)) - 1u);
        __m512 col = _mm512_setzero_ps();
        for (int64_t ky = 0; ky < kh; ky++) {
            const float *p = r0 + ky * IW + base;
            __m512 v = _mm512_maskz_loadu_ps(m0, p);
            if (sx == 2) {
                __m512 hi = _mm512_maskz_loadu_ps(m1, p + 16);
                v = _mm512_permutex2var_ps(v, kx % 2 ? odd : even, hi);
            }
            col = ky ? pmax16(v, col) : v;
        }
        best = kx ? pmax16(col, best) : col;
    }
    _mm512_mask_storeu_ps(y, (__mmask16)((1u << n) - 1u), best);
}

/* max_row16 for 3 taps at column stride 2, each of the 33 input columns
 * reduced over the rows once (not once per tap): tap 0 and 1 are the even
 * and odd lanes of columns 0..31, tap 2 the even lanes moved down one,
 * column 32 in the last.  MAX is pmax16 or a plain max_ps: max_ps(v, m)
 * is PMAX(v, m) wherever neither is NaN, and a NaN input leaves a NaN in
 * a column's reduction only where it stays (a NaN m sticks; a NaN v is
 * dropped, as PMAX drops it), so a block whose column reductions hold no
 * NaN (one compare over their sum, which an inf - inf only sends to the
 * slow path) is exactly PMAX's; one with a NaN is redone with pmax16.
 * Checking the result instead is not enough: a column reduced to NaN is
 * dropped as v by the taps' max. */
static inline __attribute__((always_inline)) __m512 max16(__m512 v, __m512 m, int plain) {
    return plain ? _mm512_max_ps(v, m) : pmax16(v, m);
}

/* the 16 outputs of a block from row r0 + xs; plain: max_ps for MAX */
static inline __attribute__((always_inline)) __m512 max3_s2_block(const float *p, int64_t IW, int64_t kh,
                                                                 int64_t avail, int plain, __mmask16 *nan) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    __mmask16 m0 = avail >= 16 ? 0xFFFF : (__mmask16)((1u << avail) - 1u);
    __mmask16 m1 = avail >= 32 ? 0xFFFF : avail <= 16 ? 0 : (__mmask16)((1u << (avail - 16)) - 1u);
    int full = avail > 32; /* plain loads: a masked one costs a vector ALU slot on this CPU */
    __m512 a = _mm512_setzero_ps(), b = a, c = a;
    for (int64_t ky = 0; ky < kh; ky++, p += IW) {
        __m512 va = full ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m0, p);
        __m512 vb = full ? _mm512_loadu_ps(p + 16) : _mm512_maskz_loadu_ps(m1, p + 16);
        __m512 vc = full ? _mm512_zextps128_ps512(_mm_load_ss(p + 32)) : _mm512_setzero_ps();
        a = ky ? max16(va, a, plain) : va;
        b = ky ? max16(vb, b, plain) : vb;
        c = ky ? max16(vc, c, plain) : vc;
    }
    if (plain) {
        __m512 sum = _mm512_add_ps(_mm512_add_ps(a, b), c);
        *nan = _mm512_cmp_ps_mask(sum, sum, _CMP_UNORD_Q);
    }
    __m512 e = _mm512_permutex2var_ps(a, even, b), o = _mm512_permutex2var_ps(a, odd, b);
    __m512 e2 = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(c), _mm512_castps_si512(e), 1));
    return max16(e2, max16(o, e, plain), plain);
}

static void max3_s2_row16(const float *r0, int64_t IW, int64_t kh, int64_t xs, int64_t n, float *y) {
    __mmask16 out = (__mmask16)((1u << n) - 1u);
    __mmask16 nan = 0;
    __m512 r = max3_s2_block(r0 + xs, IW, kh, IW - xs, 1, &nan);
    if (nan) r = max3_s2_block(r0 + xs, IW, kh, IW - xs, 0, &nan);
    _mm512_mask_storeu_ps(y, out, r);
}
#endif

/* 2-D planes: the window is clipped once per output, the inner loops carry
 * no bounds tests. */
static void pool_planes_2d(const ptask *t, int64_t b, int64_t e) {
    const pgeom *g = &t->g;
    const int64_t IH = g->id[1], IW = g->id[2], OH = g->o[1], OW = g->o[2];
    const int64_t KH = g->k[1], KW = g->k[2], sy = g->s[1], sx = g->s[2], dy = g->d[1],
                  dx = g->d[2];
    const int64_t isp = IH * IW, osp = OH * OW;
    /* tap ranges per output column/row, computed once (64-bit divisions
     * are slow enough to dominate small windows) */
    int64_t *tab = (int64_t *)kiln__cpu_scratch_or_fail(1, (size_t)(3 * (OW + OH)) * 2 + 16, "pooling");
    if (!tab) return;
    int64_t *txl = tab, *txh = tab + OW, *txp = tab + 2 * OW;
    int64_t *tyl = tab + 3 * OW, *tyh = tyl + OH, *typ = tyh + OH;
    for (int64_t ox = 0; ox < OW; ox++)
        kiln__pool_taps(ox * sx - g->pb[2], KW, dx, IW, g->pe[2], &txl[ox], &txh[ox], &txp[ox]);
    for (int64_t oy = 0; oy < OH; oy++)
        kiln__pool_taps(oy * sy - g->pb[1], KH, dy, IH, g->pe[1], &tyl[oy], &tyh[oy], &typ[oy]);
    if (t->kind == P_MAX && !t->ind) {
        /* Max without indices: reduce the window's rows into one row
         * first (unit stride, vectorized), then each output takes the max
         * of its columns of that row.  The first tap starts the max and
         * comparisons are PMAX, as below, so NaNs behave the same. */
        float *rm = kiln__cpu_scratch_or_fail(2, 2 * (size_t)IW + 32, "MaxPool");
        if (!rm) return;
        float *hm = rm + IW + 16; /* dx == 1: max of the KW columns from each start */
#if defined(__AVX512F__)
        /* outputs [oxa, oxb) have their whole window inside the row */
        int64_t oxa = 0, oxb = 0;
        if (dx == 1 && (sx == 1 || sx == 2) && KW <= IW) {
            oxa = (g->pb[2] + sx - 1) / sx;
            oxb = (IW - KW + g->pb[2]) / sx + 1;
            if (oxb > OW) oxb = OW;
            if (oxa > oxb) oxa = oxb;
        }
#endif
        for (int64_t pl = b; pl < e; pl++) {
            const float *x = t->x + pl * isp;
            float *y = t->y + pl * osp;
            for (int64_t oy = 0; oy < OH; oy++) {
                int64_t ys = oy * sy - g->pb[1], ylo = tyl[oy], yhi = tyh[oy];
                float *yr = y + oy * OW;
                if (yhi <= ylo) {
                    for (int64_t ox = 0; ox < OW; ox++) yr[ox] = -INFINITY;
                    continue;
                }
#if defined(__AVX512F__)
                if (oxb - oxa >= 16 && dy == 1) {
                    /* AVX-512: the inside columns straight from X's rows,
                     * the edge ones (padding taps) as below */
                    const float *r0 = x + (ys + ylo) * IW;
                    /* the sy input rows two output rows ahead (near the
                     * end, the next plane's), into L1: in a network the
                     * input comes from L3 (ResNet's stem output, 3.2 MB),
                     * 64 rows' streams interleaved; MaxPool 3x3/2 there
                     * 0.38 -> 0.32-0.35 ms */
                    int64_t ra = ys + ylo + 2 * sy;
                    const float *pf = ra + sy <= IH                               ? x + ra * IW
                                      : pl + 1 < e && ra >= IH && ra + sy <= 2 * IH ? x + isp + (ra - IH) * IW
                                                                                    : NULL;
                    for (int64_t q = 0; pf && q < sy * IW; q += 16) _mm_prefetch((const char *)(pf + q), _MM_HINT_T0);
                    for (int64_t ox = oxa; ox < oxb; ox += 16) {
                        int64_t xs = ox * sx - g->pb[2], n = oxb - ox < 16 ? oxb - ox : 16;
                        if (KW == 3 && sx == 2) /* ResNet's stem */
                            max3_s2_row16(r0, IW, yhi - ylo, xs, n, yr + ox);
                        else
                            max_row16(r0, IW, yhi - ylo, KW, sx, xs, n, yr + ox);
                    }
                    for (int64_t ox = 0; ox < OW; ox++) {
                        if (ox == oxa) ox = oxb;
                        if (ox >= OW) break;
                        int64_t xs = ox * sx - g->pb[2], xlo = txl[ox], xhi = txh[ox];
                        float best = -INFINITY; /* columns reduced over the rows first, as below */
                        for (int64_t kx = xlo; kx < xhi; kx++) {
                            float col = r0[xs + kx];
                            for (int64_t ky = 1; ky < yhi - ylo; ky++) col = PMAX(r0[ky * IW + xs + kx], col);
                            best = kx == xlo ? col : PMAX(col, best);
                        }
                        yr[ox] = best;
                    }
                    continue;
                }
#endif
                const float *r0 = x + (ys + ylo * dy) * IW;
                for (int64_t i = 0; i < IW; i++) rm[i] = r0[i];
                for (int64_t ky = ylo + 1; ky < yhi; ky++) {
                    const float *row = x + (ys + ky * dy) * IW;
                    for (int64_t i = 0; i < IW; i++) rm[i] = PMAX(row[i], rm[i]);
                }
                if (dx == 1 && KW > 1 && KW <= IW) {
                    /* window maxima for every start, unit stride (vectorized);
                     * same order of comparisons as the per-output loop */
                    int64_t ns = IW - KW + 1;
                    for (int64_t i = 0; i < ns; i++) hm[i] = rm[i];
                    for (int64_t k = 1; k < KW; k++)
                        for (int64_t i = 0; i < ns; i++) hm[i] = PMAX(rm[i + k], hm[i]);
                }
                for (int64_t ox = 0; ox < OW; ox++) {
                    int64_t xs = ox * sx - g->pb[2], xlo = txl[ox], xhi = txh[ox];
                    if (dx == 1 && KW > 1 && KW <= IW && xlo == 0 && xhi == KW) { /* whole window inside */
                        yr[ox] = hm[xs];
                        continue;
                    }
                    if (xhi <= xlo) {
                        yr[ox] = -INFINITY;
                        continue;
                    }
                    const float *rr = rm + xs;
                    float best = rr[xlo * dx];
                    for (int64_t kx = xlo + 1; kx < xhi; kx++) {
                        float v = rr[kx * dx];
                        best = PMAX(v, best);
                    }
                    yr[ox] = best;
                }
            }
        }
        return;
    }
    for (int64_t pl = b; pl < e; pl++) {
        const float *x = t->x + pl * isp;
        float *y = t->y + pl * osp;
        int64_t *ind = t->ind ? t->ind + pl * osp : NULL;
        for (int64_t oy = 0; oy < OH; oy++) {
            int64_t ys = oy * sy - g->pb[1], ylo = tyl[oy], yhi = tyh[oy], ypad = typ[oy];
            for (int64_t ox = 0; ox < OW; ox++) {
                int64_t xs = ox * sx - g->pb[2], xlo = txl[ox], xhi = txh[ox], xpad = txp[ox];
                int64_t oi = oy * OW + ox;
                if (t->kind == P_MAX) {
                    /* branch-free: on random data a compare-and-branch
                     * mispredicts half the time */
                    float best = -INFINITY;
                    int64_t bi = -1;
                    if (yhi > ylo && xhi > xlo) {
                        bi = (ys + ylo * dy) * IW + xs + xlo * dx;
                        best = x[bi];
                    }
                    for (int64_t ky = ylo; ky < yhi; ky++) {
                        int64_t iy = ys + ky * dy;
                        const float *row = x + iy * IW + xs;
                        for (int64_t kx = xlo; kx < xhi; kx++) {
                            float v = row[kx * dx];
                            int64_t m = -(int64_t)PMAX_TAKES(v, best); /* all ones if taken */
                            best = PMAX(v, best);
                            bi = ((iy * IW + xs + kx * dx) & m) | (bi & ~m);
                        }
                    }
                    y[oi] = best;
                    if (ind) {
                        int64_t r = bi;
                        if (t->order && bi >= 0) r = (bi % IW) * IH + bi / IW; /* rare */
                        ind[oi] = bi < 0 ? -1 : pl * isp + r;
                    }
                } else {
                    double sum = 0;
                    for (int64_t ky = ylo; ky < yhi; ky++) {
                        const float *row = x + (ys + ky * dy) * IW + xs;
                        if (t->kind == P_AVG)
                            for (int64_t kx = xlo; kx < xhi; kx++) sum += row[kx * dx];
                        else
                            for (int64_t kx = xlo; kx < xhi; kx++) {
                                double v = fabs(row[kx * dx]);
                                sum += t->p == 1 ? v : t->p == 2 ? v * v : pow(v, t->p);
                            }
                    }
                    if (t->kind == P_AVG) {
                        int64_t dv = t->count_pad ? ypad * xpad : (yhi - ylo) * (xhi - xlo);
                        y[oi] = dv ? (float)(sum / (double)dv) : 0.0f;
                    } else {
                        y[oi] = (float)(t->p == 1 ? sum : t->p == 2 ? sqrt(sum) : pow(sum, 1.0 / t->p));
                    }
                }
            }
        }
    }
}

static void pool_planes(void *ud, int64_t b, int64_t e) {
    const ptask *t = ud;
    const pgeom *g = &t->g;
    if (g->id[0] == 1 && g->k[0] == 1) {
        pool_planes_2d(t, b, e);
        return;
    }
    const int64_t ID = g->id[0], IH = g->id[1], IW = g->id[2];
    const int64_t OD = g->o[0], OH = g->o[1], OW = g->o[2];
    const int64_t isp = ID * IH * IW, osp = OD * OH * OW;
    for (int64_t pl = b; pl < e; pl++) {
        const float *x = t->x + pl * isp;
        float *y = t->y + pl * osp;
        int64_t *ind = t->ind ? t->ind + pl * osp : NULL;
        for (int64_t oz = 0; oz < OD; oz++)
        for (int64_t oy = 0; oy < OH; oy++)
        for (int64_t ox = 0; ox < OW; ox++) {
            int64_t zs = oz * g->s[0] - g->pb[0], ys = oy * g->s[1] - g->pb[1];
            int64_t xs = ox * g->s[2] - g->pb[2];
            float best = -INFINITY;
            int64_t bi = -1;
            double sum = 0;
            int64_t cnt = 0, cnt_pad = 0;
            for (int64_t kz = 0; kz < g->k[0]; kz++) {
                int64_t iz = zs + kz * g->d[0];
                if (iz >= ID + g->pe[0]) break;
                int zin = iz >= 0 && iz < ID;
                for (int64_t ky = 0; ky < g->k[1]; ky++) {
                    int64_t iy = ys + ky * g->d[1];
                    if (iy >= IH + g->pe[1]) break;
                    int yin = zin && iy >= 0 && iy < IH;
                    for (int64_t kx = 0; kx < g->k[2]; kx++) {
                        int64_t ix = xs + kx * g->d[2];
                        if (ix >= IW + g->pe[2]) break;
                        cnt_pad++;
                        if (!yin || ix < 0 || ix >= IW) continue;
                        float v = x[(iz * IH + iy) * IW + ix];
                        cnt++;
                        if (t->kind == P_MAX) {
                            if (PMAX_TAKES(v, best) || bi < 0) {
                                best = v;
                                bi = t->order ? iz * IH * IW + ix * IH + iy
                                              : (iz * IH + iy) * IW + ix;
                            }
                        } else if (t->kind == P_AVG) {
                            sum += v;
                        } else {
                            sum += t->p == 1 ? fabs(v) : t->p == 2 ? (double)v * v
                                                               : pow(fabs(v), t->p);
                        }
                    }
                }
            }
            int64_t oi = (oz * OH + oy) * OW + ox;
            if (t->kind == P_MAX) {
                y[oi] = best;
                if (ind) ind[oi] = bi < 0 ? -1 : pl * isp + bi;
            } else if (t->kind == P_AVG) {
                int64_t dv = t->count_pad ? cnt_pad : cnt;
                y[oi] = dv ? (float)(sum / (double)dv) : 0.0f;
            } else {
                y[oi] = (float)(t->p == 1 ? sum : t->p == 2 ? sqrt(sum) : pow(sum, 1.0 / t->p));
            }
        }
    }
}

/* Global average/max over contiguous planes: one streaming pass each. */
typedef struct gtask {
    const float *x;
    float *y;
    int64_t sp;
    int kind;
} gtask;

static void global_planes(void *ud, int64_t b, int64_t e) {
    const gtask *t = ud;
    typedef float v16 __attribute__((vector_size(64)));
    for (int64_t p = b; p < e; p++) {
        const float *x = t->x + p * t->sp;
        int64_t i = 0, n = t->sp;
        if (t->kind == P_AVG) {
            v16 acc = {0};
            for (; i + 16 <= n; i += 16) {
                v16 v;
                memcpy(&v, x + i, sizeof v);
                acc += v;
            }
            double s = 0;
            for (int q = 0; q < 16; q++) s += acc[q];
            for (; i < n; i++) s += x[i];
            t->y[p] = n ? (float)(s / (double)n) : 0.0f;
        } else {
            float m = n ? x[0] : -INFINITY;
            for (i = 1; i < n; i++) m = PMAX(x[i], m);
            t->y[p] = m;
        }
    }
}

/* NCHW16C X (pool16c.c), offered by pool_formats: 4-D F32, C % 16 == 0;
 * a global pool's Y either layout (the same bytes). */
static void pool16c_range(void *ud, int64_t b, int64_t e) {
    const kiln__pool16c *p = ud;
    int64_t *tab = (int64_t *)kiln__cpu_scratch_or_fail(1, (size_t)(3 * p->OW) * 2 + 16, "pooling (NCHW16C)");
    if (tab) kiln__pool16c_run(p, b, e, tab);
}

static void gpool16c_range(void *ud, int64_t b, int64_t e) {
    const kiln__pool16c *p = ud;
    kiln__gpool16c_run(p->x, p->H * p->W, p->avg, b, e, p->y);
}

static int pool16c(const kiln_call *c, int kind, int global) {
    const kiln_tensor *X = &c->in[0], *Y = &c->out[0];
    if (X->ndim != 4 || X->dtype != KILN_DTYPE_F32 || Y->dtype != KILN_DTYPE_F32 || X->dims[1] % 16 ||
        kind == P_LP || (!global && Y->format != KILN_FORMAT_NCHW16C) ||
        (c->nout > 1 && c->out[1].data && (c->out[1].dtype != KILN_DTYPE_I64 || !kiln__ops_dense(&c->out[1]))))
        return kiln_set_error(KILN_EUNSUPPORTED, "pooling on NCHW16C: needs a 4-D F32 X of C %% 16 == 0, Y "
                              "NCHW16C (a global pool's either), Indices LINEAR");
    kiln__pool16c p = {.N = X->dims[0], .CB = X->dims[1] / 16, .H = X->dims[2], .W = X->dims[3], .OH = 1, .OW = 1,
                       .avg = kind == P_AVG, .x = X->data, .y = Y->data};
    if (global) {
        kiln_exec_parallel_for(c->exec, p.N * p.CB, 1 + 1024 / (p.H * p.W + 1), gpool16c_range, &p);
        return 0;
    }
    pgeom g;
    memset(&g, 0, sizeof g);
    int ap, rc = pool_geom(c->attrs, 2, X->dims + 2, &g, &ap);
    if (rc) return rc;
    if (g.o[0] != Y->dims[2] || g.o[1] != Y->dims[3])
        return kiln_set_error(KILN_ESHAPE, "output %lldx%lld, expected %lldx%lld", (long long)Y->dims[2],
                              (long long)Y->dims[3], (long long)g.o[0], (long long)g.o[1]);
    p.OH = g.o[0], p.OW = g.o[1], p.kh = g.k[0], p.kw = g.k[1], p.sy = g.s[0], p.sx = g.s[1];
    p.dy = g.d[0], p.dx = g.d[1], p.pt = g.pb[0], p.pl = g.pb[1], p.pb = g.pe[0], p.pr = g.pe[1];
    p.count_pad = kind == P_AVG && kiln_attrs_int(c->attrs, "count_include_pad") != 0;
    if (kind == P_MAX && c->nout > 1 && c->out[1].data) {
        p.ind = c->out[1].data;
        p.order = kiln_attrs_int(c->attrs, "storage_order") != 0;
    }
    kiln_exec_parallel_for(c->exec, kiln__pool16c_units(&p), 1, pool16c_range, &p);
    return 0;
}

static int pool_run(const kiln_call *c, int kind, int global) {
    const kiln_tensor *X = &c->in[0];
    if (X->format == KILN_FORMAT_NCHW16C) return pool16c(c, kind, global);
    if (!kiln__ops_dense(X) || !kiln__ops_dense(&c->out[0]))
        return kiln_set_error(KILN_EUNSUPPORTED, "strided tensors not supported");
    ptask t;
    memset(&t, 0, sizeof t);
    t.kind = kind;
    int nsp = X->ndim - 2, off = 3 - nsp;
    pgeom *g = &t.g;
    for (int i = 0; i < 3; i++) {
        g->id[i] = g->o[i] = g->k[i] = g->s[i] = g->d[i] = 1;
        g->pb[i] = g->pe[i] = 0;
    }
    if (global && kind != P_LP) {
        gtask gt = {.x = X->data, .y = c->out[0].data, .sp = 1, .kind = kind};
        for (int i = 2; i < X->ndim; i++) gt.sp *= X->dims[i];
        kiln_exec_parallel_for(c->exec, X->dims[0] * X->dims[1], 1 + 16384 / (gt.sp ? gt.sp : 1),
                               global_planes, &gt);
        return 0;
    }
    if (global) {
        for (int i = 0; i < nsp; i++) {
            g->id[off + i] = X->dims[2 + i];
            g->k[off + i] = X->dims[2 + i];
        }
        if (kind == P_LP) t.p = (int)kiln_attrs_int(c->attrs, "p");
    } else {
        int64_t in[3] = {0, 0, 0};
        pgeom lg;
        memset(&lg, 0, sizeof lg);
        int ap;
        for (int i = 0; i < nsp; i++) in[i] = X->dims[2 + i];
        int rc = pool_geom(c->attrs, nsp, in, &lg, &ap);
        if (rc) return rc;
        for (int i = 0; i < nsp; i++) {
            g->id[off + i] = in[i];
            g->k[off + i] = lg.k[i];
            g->s[off + i] = lg.s[i];
            g->d[off + i] = lg.d[i];
            g->pb[off + i] = lg.pb[i];
            g->pe[off + i] = lg.pe[i];
            g->o[off + i] = lg.o[i];
            if (lg.o[i] != c->out[0].dims[2 + i])
                return kiln_set_error(KILN_ESHAPE, "output dim %d is %lld, expected %lld", 2 + i,
                                      (long long)c->out[0].dims[2 + i], (long long)lg.o[i]);
        }
        if (kind == P_AVG) t.count_pad = kiln_attrs_int(c->attrs, "count_include_pad") != 0;
        if (kind == P_MAX) t.order = kiln_attrs_int(c->attrs, "storage_order") != 0;
        if (kind == P_LP) t.p = (int)kiln_attrs_int(c->attrs, "p");
    }
    if (kind == P_LP && t.p < 1)
        return kiln_set_error(KILN_EATTR, "p must be >= 1, found %d", t.p);
    t.x = X->data;
    t.y = c->out[0].data;
    if (kind == P_MAX && c->nout > 1 && c->out[1].data) t.ind = c->out[1].data;
    int64_t planes = X->dims[0] * X->dims[1];
    kiln_exec_parallel_for(c->exec, planes, 1, pool_planes, &t);
    return 0;
}

/* ------------------------------------------------------------ MaxUnpool */

static const kiln_attr_def unpool_attrs[] = {
    {"kernel_shape", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 1, "window size per spatial axis"},
    {"pads", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "begin pads then end pads"},
    {"strides", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "stride per spatial axis"},
    {NULL, 0, 0, NULL, 0, NULL},
};

/* kernel, strides and total pads per spatial axis. */
static int unpool_attrs_read(const kiln_attrs *a, int nsp, int64_t *k, int64_t *st, int64_t *pt) {
    const int64_t *v;
    int64_t n = kiln_attrs_ints(a, "kernel_shape", &v);
    if (n != nsp)
        return kiln_set_error(KILN_EATTR, "MaxUnpool: kernel_shape: expected %d values, found %lld",
                              nsp, (long long)n);
    for (int i = 0; i < nsp; i++) { k[i] = v[i]; st[i] = 1; pt[i] = 0; }
    if ((n = kiln_attrs_ints(a, "strides", &v)) >= 0) {
        if (n != nsp) return kiln_set_error(KILN_EATTR, "MaxUnpool: strides: expected %d values", nsp);
        for (int i = 0; i < nsp; i++) st[i] = v[i];
    }
    if ((n = kiln_attrs_ints(a, "pads", &v)) >= 0) {
        if (n != 2 * nsp) return kiln_set_error(KILN_EATTR, "MaxUnpool: pads: expected %d values", 2 * nsp);
        for (int i = 0; i < nsp; i++) pt[i] = v[i] + v[nsp + i];
    }
    return 0;
}

static int unpool_shape(kiln_shape_ctx *c) {
    const kiln_desc *x = &c->in[0];
    if (x->ndim < 3 || x->ndim > 5)
        return kiln_set_error(KILN_ESHAPE, "MaxUnpool: X must have rank 3..5, found %d", x->ndim);
    if (c->in[1].dtype != KILN_DTYPE_I64)
        return kiln_set_error(KILN_ETYPE, "MaxUnpool: I must be i64, found %s",
                              kiln_dtype_name(c->in[1].dtype));
    int nsp = x->ndim - 2;
    kiln_desc *y = &c->out[0];
    *y = *x;
    y->data = NULL;
    y->nvalues = -1;
    if (c->nin > 2 && c->in[2].dtype != KILN_DTYPE_UNDEFINED) {
        const kiln_desc *os = &c->in[2];
        if (!os->data)
            return kiln_set_error(KILN_EUNSUPPORTED, "MaxUnpool: output_shape must be a constant");
        for (int i = 0; i < x->ndim; i++)
            y->dims[i] = kiln_expr_const(c->x, kiln__ops_get_i64(os->data, os->dtype, i));
        return 0;
    }
    int64_t k[3], st[3], pt[3];
    int rc = unpool_attrs_read(c->attrs, nsp, k, st, pt);
    if (rc) return rc;
    for (int i = 0; i < nsp; i++) {
        /* (in - 1) * stride + kernel - pads */
        const kiln_expr *e = kiln_expr_mul(c->x, kiln_expr_add(c->x, x->dims[2 + i], kiln_expr_const(c->x, -1)),
                                           kiln_expr_const(c->x, st[i]));
        y->dims[2 + i] = kiln_expr_add(c->x, e, kiln_expr_const(c->x, k[i] - pt[i]));
    }
    return 0;
}

static int unpool_impl_f32(const kiln_call *c) {
    const kiln_tensor *X = &c->in[0], *I = &c->in[1];
    kiln_tensor *Y = &c->out[0];
    if (!kiln__ops_dense(X) || !kiln__ops_dense(I) || !kiln__ops_dense(Y))
        return kiln_set_error(KILN_EUNSUPPORTED, "MaxUnpool: strided tensors not supported");
    int64_t n = kiln_tensor_numel(X), ny = kiln_tensor_numel(Y);
    if (kiln_tensor_numel(I) != n)
        return kiln_set_error(KILN_ESHAPE, "MaxUnpool: I has %lld elements, X has %lld",
                              (long long)kiln_tensor_numel(I), (long long)n);
    /* Indices refer to the default output shape (the MaxPool input); with
     * a larger output_shape they keep their coordinates. */
    int r = X->ndim, nsp = r - 2;
    int64_t k[3], st[3], pt[3], def[KILN_MAX_DIMS];
    int rc = unpool_attrs_read(c->attrs, nsp, k, st, pt);
    if (rc) return rc;
    def[0] = X->dims[0];
    def[1] = X->dims[1];
    int same = 1;
    for (int i = 0; i < nsp; i++) {
        def[2 + i] = (X->dims[2 + i] - 1) * st[i] + k[i] - pt[i];
        same &= def[2 + i] == Y->dims[2 + i];
    }
    float *y = Y->data;
    const float *x = X->data;
    const int64_t *ind = I->data;
    memset(y, 0, (size_t)ny * sizeof(float));
    int64_t ndef = 1;
    for (int i = 0; i < r; i++) ndef *= def[i];
    for (int64_t i = 0; i < n; i++) {
        int64_t idx = ind[i], out = idx;
        if (idx < 0 || idx >= ndef)
            return kiln_set_error(KILN_EINVAL, "MaxUnpool: index %lld at %lld outside the unpooled "
                                  "tensor of %lld elements", (long long)idx, (long long)i, (long long)ndef);
        if (!same) {
            int64_t co[KILN_MAX_DIMS], rem = idx;
            for (int d = r - 1; d >= 0; d--) { co[d] = rem % def[d]; rem /= def[d]; }
            out = 0;
            for (int d = 0; d < r; d++) {
                if (co[d] >= Y->dims[d])
                    return kiln_set_error(KILN_ESHAPE, "MaxUnpool: output_shape dim %d (%lld) smaller "
                                          "than the unpooled %lld", d, (long long)Y->dims[d], (long long)def[d]);
                out = out * Y->dims[d] + co[d];
            }
        }
        y[out] = x[i];
    }
    return 0;
}
static int unpool_impl(const kiln_call *c) { return kiln__ops_as_f32(c, unpool_impl_f32); }

static const kiln_quick_op maxunpool_9 = {
    .ns = "ai.onnx", .name = "MaxUnpool", .version = 9,
    .min_inputs = 2, .max_inputs = 3, .num_outputs = 1,
    .attrs = unpool_attrs, .shape = unpool_shape, .impl = unpool_impl,
    .doc = "scatter pooled values back to the positions MaxPool's Indices name",
};
KILN_OP(maxunpool_9)

#define POOL_IMPL(fname, kind, global)                                               \
    static int fname##_f32(const kiln_call *c) { return pool_run(c, kind, global); } \
    static int fname(const kiln_call *c) { return kiln__ops_as_f32(c, fname##_f32); }
static int maxpool_impl_f32(const kiln_call *c) { return pool_run(c, P_MAX, 0); }
static int maxpool_impl(const kiln_call *c) { return kiln__ops_as_f32_ints(c, maxpool_impl_f32); }
POOL_IMPL(avgpool_impl, P_AVG, 0)
POOL_IMPL(lppool_impl, P_LP, 0)
POOL_IMPL(gmaxpool_impl, P_MAX, 1)
POOL_IMPL(gavgpool_impl, P_AVG, 1)
POOL_IMPL(glppool_impl, P_LP, 1)

/* CUDA (pool_cuda.c): the float types, Indices int64; also NHWC in and
 * out (4-D; MaxPool's Indices NHWC too, so their writes are coalesced; the
 * values keep ONNX's NCHW numbering), and for the global pools NHWC in
 * with either output layout (one position per plane: the same memory). */
static const kiln_combo cu_pool[] = {{.types = KILN_CU_T_FLOAT}, {.types = KILN_CU_T_NHWC, .layouts = "NHWC"}, {0}};
static const kiln_combo cu_maxpool[] = {
    {.types = KILN_CU_T_FLOAT ", " KILN_CU_T_FLOAT ", INT64"},
    {.types = KILN_CU_T_NHWC ", " KILN_CU_T_NHWC ", INT64", .layouts = "NHWC"}, {0}};
static const kiln_combo cu_gpool[] = {
    {.types = KILN_CU_T_FLOAT}, {.types = KILN_CU_T_NHWC, .layouts = "NHWC, NHWC*LINEAR"}, {0}};
static int pool_cuda_check(const kiln_shape_ctx *c) { return kiln__ops_cuda_spatial(c, "pooling", 1, 3); }

/* kiln_quick_op.formats_fn of MaxPool, AveragePool and the global pools:
 * the default row (the shape function's types, LINEAR) and, under
 * KILN_BUILD_CPU_BLOCKED on a 4-D F32 X with a static C % 16 == 0 and one
 * output (MaxPool's Indices stay NCHW), X and Y NCHW16C (pool16c.c); a
 * global pool also X NCHW16C with Y LINEAR, its 1x1 output being the same
 * bytes, so a Flatten after it needs no reformat.  (The region pass labels
 * a layer by one layout for all its activations: it takes the first.) */
static int pool_formats_common(const kiln_shape_ctx *c, kiln_combo *out, int max, int global) {
    const kiln_desc *x = &c->in[0];
    int64_t C;
    if (max < 3 || !kiln__shape_ctx_cpu_blocked(c) || c->nout > (global ? 1 : 2) || x->dtype != KILN_DTYPE_F32 ||
        x->ndim != 4 || !kiln_expr_is_const(x->dims[1], &C) || C <= 0 || C % 16)
        return 0; /* the default */
    const char *types = kiln__ops_types_row(c);
    if (!types) return 0;
    memset(out, 0, 3 * sizeof *out);
    out[0].types = types;
    out[1] = c->nout == 2 ? (kiln_combo){"FP32, FP32, INT64", "NCHW16C, NCHW16C, LINEAR", {0}}
                          : (kiln_combo){"FP32", "NCHW16C", {0}};
    out[2] = (kiln_combo){"FP32", "NCHW16C, LINEAR", {0}};
    return global ? 3 : 2;
}
static int pool_formats(const kiln_shape_ctx *c, kiln_combo *out, int max) { return pool_formats_common(c, out, max, 0); }
static int gpool_formats(const kiln_shape_ctx *c, kiln_combo *out, int max) { return pool_formats_common(c, out, max, 1); }

#define POOL_OP(var, nm, ver, nout, at, shp, fn, fmt, cu, cuf, dc)                   \
    static const kiln_quick_op var = {                                               \
        .ns = "ai.onnx", .name = nm, .version = ver,                                 \
        .min_inputs = 1, .max_inputs = 1, .num_outputs = nout,                       \
        .attrs = at, .shape = shp, .impl = fn, .doc = dc, .formats_fn = fmt,         \
        .cuda_impl = cu,                                                             \
        .cuda_formats = cuf,                                                         \
        .cuda_check = pool_cuda_check,                                               \
        .optional_outputs = nout > 1 ? 2u : 0u, /* MaxPool's Indices */              \
    };                                                                               \
    KILN_OP(var)

POOL_OP(maxpool_1, "MaxPool", 1, 1, maxpool_attrs, pool_shape, maxpool_impl, pool_formats, kiln__cu_maxpool, cu_pool, "max pooling")
POOL_OP(maxpool_8, "MaxPool", 8, 2, maxpool_attrs, pool_shape, maxpool_impl, pool_formats, kiln__cu_maxpool, cu_maxpool,
        "max pooling with optional Indices output")
POOL_OP(avgpool_1, "AveragePool", 1, 1, avgpool_attrs, pool_shape, avgpool_impl, pool_formats, kiln__cu_avgpool, cu_pool,
        "average pooling (count_include_pad, ceil_mode, dilations)")
POOL_OP(lppool_2, "LpPool", 2, 1, lppool_attrs, pool_shape, lppool_impl, NULL, kiln__cu_lppool, cu_pool, "Lp-norm pooling")
POOL_OP(gmaxpool_1, "GlobalMaxPool", 1, 1, NULL, gpool_shape, gmaxpool_impl, gpool_formats, kiln__cu_gmaxpool, cu_gpool,
        "max over all spatial positions")
POOL_OP(gavgpool_1, "GlobalAveragePool", 1, 1, NULL, gpool_shape, gavgpool_impl, gpool_formats, kiln__cu_gavgpool, cu_gpool,
        "mean over all spatial positions")
POOL_OP(glppool_2, "GlobalLpPool", 2, 1, glp_attrs, gpool_shape, glppool_impl, NULL, kiln__cu_glppool, cu_gpool,
        "Lp norm over all spatial positions")
