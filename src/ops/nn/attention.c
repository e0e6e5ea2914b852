/*
 * attention.c — kiln::attention, scaled dot-product attention as one op:
 *
 *   Y = softmax(scale * Q K^T) V      (softmax over the key axis)
 *
 * Q [..., Sq, D], V [..., Sk, Dv], and K [..., Sk, D] (k_trans = 0) or
 * K^T [..., D, Sk] (k_trans = 1); the leading (batch, head) dims are the
 * same for all three (no broadcasting); Y [..., Sq, Dv].
 *
 * The builder makes it from the ONNX chain MatMul(Q, K^T) [-> Mul/Div by a
 * scalar] -> Softmax(last axis) -> MatMul(., V), with scalar Muls on Q or
 * K^T and a Transpose of K folded in (builder/transformer.c).  The GPU
 * runs it as one flash-style kernel (attention.cu: scores never leave the
 * chip; FP32 accumulation, FP16/BF16 I/O); the CPU as blocks of query rows
 * whose scores stay in cache (attn_cpu below).
 *
 * Input 3, optional: an additive mask broadcast to the scores [.., Sq, Sk]
 * (rank <= 4), added after the scale.
 *
 * With `views` (attention.h) Q, K and V are strided views of the inputs
 * (heads of a packed QKV projection: no Gather / Transpose / Reshape copies
 * in front) and `y_perm` transposes the output into the layout its reader
 * wants (builder/attn_views.c sets both).
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"
#include "ops/nn/attention.h"
#include "ops/nn/attention_avx512.h"
#include "device/cpu/fastmath.h"
#include "device/cpu/sgemm.h"

#include <math.h>
#include <string.h>

static const kiln_attr_def attn_attrs[] = {
    {"scale", KILN_ATTR_FLOAT, 0, "1", 0, "multiplies Q K^T before the softmax"},
    {"k_trans", KILN_ATTR_INT, 0, "0", 0, "1: input 1 is K^T [..., D, Sk]; 0: K [..., Sk, D]"},
    {"views", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "Q, K, V as 4-D strided views of the inputs (attention.h)"},
    {"y_perm", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "with views: output [B, H, Sq, Dv] transposed by this perm"},
    {NULL, 0, 0, NULL, 0, NULL},
};

/* `views` (3 x KILN_ATTN_VIEW_INTS) and `y_perm` (4, a permutation), or
 * NULL where absent; an error for a malformed one. */
static int view_attrs(const kiln_attrs *a, const int64_t **vw, const int64_t **perm) {
    int64_t n = kiln_attrs_ints(a, "views", vw), np = kiln_attrs_ints(a, "y_perm", perm);
    if (n <= 0 || !*vw) *vw = NULL;
    if (np <= 0 || !*perm) *perm = NULL;
    if (*vw && n != 3 * KILN_ATTN_VIEW_INTS)
        return kiln_set_error(KILN_EINVAL, "attention: views has %lld ints, expected %d", (long long)n,
                              3 * KILN_ATTN_VIEW_INTS);
    if (*perm && (np != 4 || !*vw))
        return kiln_set_error(KILN_EINVAL, "attention: y_perm needs views and 4 ints (found %lld)", (long long)np);
    for (int j = 0, seen = 0; *perm && j < 4; j++) {
        int64_t e = (*perm)[j];
        if (e < 0 || e > 3 || (seen >> e & 1))
            return kiln_set_error(KILN_EINVAL, "attention: y_perm is not a permutation of 0..3");
        seen |= 1 << e;
    }
    return 0;
}

/* Dim a of input o's view as an expression, or NULL (an axis past its rank). */
static const kiln_expr *view_dim_expr(kiln_shape_ctx *c, int o, const int64_t *vw, int a) {
    int64_t e = vw[o * KILN_ATTN_VIEW_INTS + 2 + 3 * a];
    if (e < 0) return kiln_expr_const(c->x, -1 - e);
    return e < c->in[o].ndim ? c->in[o].dims[e] : NULL;
}

/* The mask (input 3, if any) against the scores' dims sd[sr]. */
static int mask_shape(const kiln_shape_ctx *c, const kiln_expr *const *sd, int sr) {
    if (c->nin < 4 || c->in[3].dtype == KILN_DTYPE_UNDEFINED) return 0;
    const kiln_desc *m = &c->in[3];
    if (m->dtype != c->in[0].dtype)
        return kiln_set_error(KILN_ETYPE, "attention: the mask is %s, expected %s like Q", kiln_dtype_name(m->dtype),
                              kiln_dtype_name(c->in[0].dtype));
    if (m->ndim > sr || m->ndim > 4)
        return kiln_set_error(KILN_ESHAPE, "attention: the mask has rank %d, the scores %d (at most 4)", m->ndim, sr);
    for (int i = 0; i < m->ndim; i++) {
        int64_t one;
        const kiln_expr *e = m->dims[i];
        if (e != sd[sr - m->ndim + i] && !(kiln_expr_is_const(e, &one) && one == 1))
            return kiln_set_error(KILN_ESHAPE, "attention: mask dim %d neither 1 nor the scores' dim %d", i,
                                  sr - m->ndim + i);
    }
    return 0;
}

static int views_shape(kiln_shape_ctx *c, const int64_t *vw, const int64_t *perm) {
    static const char *const names[3] = {"Q", "K", "V"};
    const kiln_expr *d[3][4];
    for (int o = 0; o < 3; o++)
        for (int a = 0; a < 4; a++)
            if (!(d[o][a] = view_dim_expr(c, o, vw, a)))
                return kiln_set_error(KILN_ESHAPE, "attention: %s's view names an axis past its input's rank %d",
                                      names[o], c->in[o].ndim);
    for (int o = 1; o < 3; o++)
        if (d[o][0] != d[0][0] || d[o][1] != d[0][1])
            return kiln_set_error(KILN_ESHAPE, "attention: %s's view differs from Q's in batch or heads", names[o]);
    if (d[1][3] != d[0][3] || d[2][2] != d[1][2])
        return kiln_set_error(KILN_ESHAPE, "attention: K's view does not match Q's head dim and V's key count");
    const kiln_expr *sd[4] = {d[0][0], d[0][1], d[0][2], d[1][2]};
    int rc = mask_shape(c, sd, 4);
    if (rc) return rc;
    const kiln_expr *y[4] = {d[0][0], d[0][1], d[0][2], d[2][3]}, *out[4];
    for (int j = 0; j < 4; j++) out[j] = y[perm ? perm[j] : j];
    kiln__ops_set_dims(&c->out[0], c->in[0].dtype, 4, out);
    return 0;
}

static int attn_shape(kiln_shape_ctx *c) {
    const kiln_desc *q = &c->in[0], *k = &c->in[1], *v = &c->in[2];
    int r = q->ndim, kt = kiln_attrs_int(c->attrs, "k_trans") != 0;
    for (int i = 0; i < 3; i++)
        if (!kiln__ops_is_float(c->in[i].dtype) || c->in[i].dtype != q->dtype)
            return kiln_set_error(KILN_ETYPE, "attention: input %d is %s, expected float like Q (%s)", i,
                                  kiln_dtype_name(c->in[i].dtype), kiln_dtype_name(q->dtype));
    const int64_t *vw, *perm;
    int rc = view_attrs(c->attrs, &vw, &perm);
    if (rc) return rc;
    if (vw) return kt ? kiln_set_error(KILN_EINVAL, "attention: views take K, not K^T (k_trans 0)") :
                        views_shape(c, vw, perm);
    if (r < 2 || k->ndim != r || v->ndim != r)
        return kiln_set_error(KILN_ESHAPE, "attention: Q, K, V must have the same rank >= 2 (found %d, %d, %d)", r,
                              k->ndim, v->ndim);
    for (int d = 0; d + 2 < r; d++)
        if (q->dims[d] != k->dims[d] || q->dims[d] != v->dims[d]) /* hash-consed */
            return kiln_set_error(KILN_ESHAPE, "attention: Q, K, V differ in leading dim %d", d);
    const kiln_expr *kd = k->dims[kt ? r - 2 : r - 1], *ks = k->dims[kt ? r - 1 : r - 2];
    if (kd != q->dims[r - 1] || ks != v->dims[r - 2])
        return kiln_set_error(KILN_ESHAPE, "attention: K's dims do not match Q's last dim and V's key dim");
    const kiln_expr *d[KILN_MAX_DIMS];
    for (int i = 0; i < r - 1; i++) d[i] = q->dims[i];
    d[r - 1] = ks; /* the scores' dims */
    if ((rc = mask_shape(c, d, r))) return rc;
    d[r - 1] = v->dims[r - 1];
    kiln__ops_set_dims(&c->out[0], q->dtype, r, d);
    return 0;
}

/* Strides of tensor t [lead..., rows, cols]: st[0] one batch (the leading
 * dims but the last, which must collapse into one), st[1] one head (the
 * last leading dim), st[2] one row; *cs one column; *nb, *nh the counts. */
static int lead_strides(const char *what, const kiln_tensor *t, int64_t *st, int64_t *cs, int64_t *nb,
                        int64_t *nh) {
    int r = t->ndim;
    st[2] = t->strides[r - 2];
    *cs = t->strides[r - 1];
    *nh = r >= 3 ? t->dims[r - 3] : 1;
    st[1] = r >= 3 ? t->strides[r - 3] : 0;
    *nb = 1;
    st[0] = 0;
    for (int i = r - 4; i >= 0; i--) {
        if (t->dims[i] == 1) continue;
        if (*nb > 1 && t->strides[i] != st[0] * *nb)
            return kiln_set_error(KILN_EUNSUPPORTED,
                                  "attention: %s's leading dims do not collapse into one batch dim (dim %d: stride "
                                  "%lld, expected %lld)",
                                  what, i, (long long)t->strides[i], (long long)(st[0] * *nb));
        if (*nb == 1) st[0] = t->strides[i];
        *nb *= t->dims[i];
    }
    return 0;
}

static int plain_geometry(const kiln_call *c, kiln_cu_flash *p) {
    const kiln_tensor *q = &c->in[0], *k = &c->in[1], *v = &c->in[2], *y = &c->out[0];
    int r = q->ndim, kt = kiln_attrs_int(c->attrs, "k_trans") != 0;
    if (r < 2 || k->ndim != r || v->ndim != r || y->ndim != r)
        return kiln_set_error(KILN_ESHAPE, "attention: Q, K, V, Y must have the same rank >= 2");
    for (int i = 0; i + 2 < r; i++)
        if (k->dims[i] != q->dims[i] || v->dims[i] != q->dims[i] || y->dims[i] != q->dims[i])
            return kiln_set_error(KILN_ESHAPE, "attention: Q, K, V, Y differ in leading dim %d", i);
    p->sq = q->dims[r - 2];
    p->sk = v->dims[r - 2];
    int64_t d = q->dims[r - 1], dv = v->dims[r - 1];
    if (k->dims[kt ? r - 2 : r - 1] != d || k->dims[kt ? r - 1 : r - 2] != p->sk || y->dims[r - 2] != p->sq ||
        y->dims[r - 1] != dv || d > INT32_MAX || dv > INT32_MAX)
        return kiln_set_error(KILN_ESHAPE, "attention: K or Y dims do not match Q [.., %lld, %lld] and V [.., %lld, %lld]",
                              (long long)p->sq, (long long)d, (long long)p->sk, (long long)dv);
    p->d = (int32_t)d;
    p->dv = (int32_t)dv;
    static const char *const names[4] = {"Q", "K", "V", "Y"};
    const kiln_tensor *ts[4] = {q, k, v, y};
    int64_t kst[3], cs[4], nb, nh;
    int64_t *st[4] = {p->qs, kst, p->vs, p->ys};
    for (int i = 0; i < 4; i++) {
        int rc = lead_strides(names[i], ts[i], st[i], &cs[i], &nb, &nh);
        if (rc) return rc;
    }
    p->nb = nb;
    p->nh = nh;
    p->ks[0] = kst[0];
    p->ks[1] = kst[1];
    p->ks[2] = kt ? cs[1] : kst[2]; /* K^T [.., D, Sk]: a key is a column */
    p->kd = kt ? kst[2] : cs[1];
    if ((d > 1 && cs[0] != 1) || (dv > 1 && (cs[2] != 1 || cs[3] != 1)))
        return kiln_set_error(KILN_EUNSUPPORTED, "attention: the head dim of Q, V and Y must be contiguous");
    return 0;
}

static int views_geometry(const kiln_call *c, const int64_t *vw, const int64_t *perm, kiln_cu_flash *p,
                          int64_t off[3]) {
    static const char *const names[3] = {"Q", "K", "V"};
    int64_t dim[3][4], st[3][4];
    for (int o = 0; o < 3; o++) {
        const kiln_tensor *t = &c->in[o];
        const int64_t *w = vw + o * KILN_ATTN_VIEW_INTS;
        if (!kiln__ops_contig(t))
            return kiln_set_error(KILN_EUNSUPPORTED, "attention: input %d (%s's view) must be contiguous", o, names[o]);
        for (int a = -1; a < 4; a++) {
            int64_t e = a < 0 ? 0 : w[2 + 3 * a], ax = a < 0 ? w[0] : w[3 + 3 * a], mul = a < 0 ? w[1] : w[4 + 3 * a];
            if (e >= t->ndim || ax < 0 || ax >= t->ndim || mul < 0)
                return kiln_set_error(KILN_EINVAL, "attention: %s's view names axis %lld or %lld of a rank-%d input",
                                      names[o], (long long)e, (long long)ax, t->ndim);
            if (a < 0) {
                off[o] = mul * t->strides[ax];
                continue;
            }
            dim[o][a] = e >= 0 ? t->dims[e] : -1 - e;
            st[o][a] = mul * t->strides[ax];
        }
        int64_t last = off[o], n = kiln_tensor_numel(t); /* the view must stay inside the input */
        for (int a = 0; a < 4; a++) last += dim[o][a] > 0 ? (dim[o][a] - 1) * st[o][a] : 0;
        if (n > 0 && last >= n)
            return kiln_set_error(KILN_ESHAPE, "attention: %s's view reaches element %lld of a %lld-element input",
                                  names[o], (long long)last, (long long)n);
    }
    for (int o = 1; o < 3; o++)
        if (dim[o][0] != dim[0][0] || dim[o][1] != dim[0][1])
            return kiln_set_error(KILN_ESHAPE, "attention: %s's view differs from Q's in batch or heads", names[o]);
    if (dim[1][3] != dim[0][3] || dim[2][2] != dim[1][2] || dim[0][3] > INT32_MAX || dim[2][3] > INT32_MAX)
        return kiln_set_error(KILN_ESHAPE, "attention: K's view does not match Q's head dim and V's key count");
    if ((dim[0][3] > 1 && st[0][3] != 1) || (dim[2][3] > 1 && st[2][3] != 1))
        return kiln_set_error(KILN_EUNSUPPORTED, "attention: the head dim of Q's and V's views must be contiguous");
    p->nb = dim[0][0];
    p->nh = dim[0][1];
    p->sq = dim[0][2];
    p->sk = dim[1][2];
    p->d = (int32_t)dim[0][3];
    p->dv = (int32_t)dim[2][3];
    p->kd = st[1][3];
    memcpy(p->qs, st[0], sizeof p->qs);
    memcpy(p->ks, st[1], sizeof p->ks);
    memcpy(p->vs, st[2], sizeof p->vs);
    const kiln_tensor *y = &c->out[0];
    const int64_t yd[4] = {p->nb, p->nh, p->sq, p->dv};
    if (y->ndim != 4) return kiln_set_error(KILN_ESHAPE, "attention: output has rank %d, expected 4", y->ndim);
    for (int j = 0; j < 4; j++) {
        int a = perm ? (int)perm[j] : j;
        if (y->dims[j] != yd[a])
            return kiln_set_error(KILN_ESHAPE, "attention: output dim %d is %lld, expected %lld", j,
                                  (long long)y->dims[j], (long long)yd[a]);
        if (a < 3) p->ys[a] = y->strides[j];
        else if (yd[3] > 1 && y->strides[j] != 1)
            return kiln_set_error(KILN_EUNSUPPORTED, "attention: the output's head dim must be contiguous");
    }
    return 0;
}

/* The mask's strides over the scores [nb, nh, sq, sk] (0: broadcast). */
static int mask_geometry(const kiln_call *c, kiln_cu_flash *p) {
    if (c->nin < 4 || c->in[3].dtype == KILN_DTYPE_UNDEFINED || !c->in[3].data) return 0;
    const kiln_tensor *m = &c->in[3];
    const int64_t sd[4] = {p->nb, p->nh, p->sq, p->sk};
    if (m->ndim > 4 || (kiln_attrs_ints(c->attrs, "views", NULL) <= 0 && c->in[0].ndim > 4))
        return kiln_set_error(KILN_EUNSUPPORTED, "attention: a mask needs scores of rank <= 4 (mask rank %d)", m->ndim);
    p->has_mask = 1;
    for (int i = 0; i < m->ndim; i++) {
        int a = 4 - m->ndim + i;
        if (m->dims[i] != 1 && m->dims[i] != sd[a])
            return kiln_set_error(KILN_ESHAPE, "attention: mask dim %d is %lld, the scores' is %lld (or 1)", i,
                                  (long long)m->dims[i], (long long)sd[a]);
        p->ms[a] = m->dims[i] == 1 ? 0 : m->strides[i];
    }
    return 0;
}

int kiln__attn_geometry(const kiln_call *c, kiln_cu_flash *p, int64_t off[3]) {
    memset(p, 0, sizeof *p);
    off[0] = off[1] = off[2] = 0;
    const int64_t *vw, *perm;
    int rc = view_attrs(c->attrs, &vw, &perm);
    if (rc) return rc;
    rc = vw ? views_geometry(c, vw, perm, p, off) : plain_geometry(c, p);
    return rc ? rc : mask_geometry(c, p);
}

/* The CPU kernel: per (batch, head), K^T and V packed once into the
 * SGEMM's panel layout (per-thread scratch), then per block of `rows`
 * query rows the scores S = scale Q K^T (+ mask) [rows, Sk] (scratch, in
 * cache), softmax over each row in place (a row with every score -inf
 * gives zeros), and Y rows = P V written through Y's strides.  The SGEMM
 * runs serially: heads (or, with fewer heads than threads, row ranges of
 * one head) are what is split over the threads.  Tactic = rows per
 * block: 1 -> 32 (S in L1 for Sk <= 128), 2 -> 128 (fewer calls); 3 runs
 * the same blocks (ATTN_TILE_ROWS) through attention_avx512.c's
 * register tiles instead of the SGEMM (BERT-base's heads ~1.4x faster);
 * the builder times all three. */
enum { ATTN_TILE_ROWS = 24 }; /* 4 of its 6-row tiles: 24 x 128 scores (12 KB) beside K^T / V in L1-L2 */
typedef struct attn_task {
    kiln_cu_flash p;
    const float *q, *k, *v, *mask;
    float *y;
    float scale;
    int64_t rows, parts; /* rows per block; parts per head */
    int tiled, err;
} attn_task;

/* Y rows [i0, i1) of head h through the SGEMM (tactics 1, 2); s and pk
 * the scratch. */
static void attn_head_sgemm(const attn_task *t, const kiln__attn_head *h, int64_t i0, int64_t i1, float *s,
                            float *pk) {
    const kiln_cu_flash *p = &t->p;
    const float *q = h->q, *mask = h->mask;
    float *y = h->y;
    const size_t kf = kiln__sgemm_pack_b_floats(p->d, p->sk);
    kiln__gemm g1 = {.N = p->sk, .K = p->d, .alpha = t->scale, .b = h->k, .b_rs = p->kd, .b_cs = p->ks[2],
                     .b_packed = pk, .c = s, .ldc = p->sk, .a_cs = 1, .a_rs = p->qs[2]};
    kiln__gemm g2 = {.N = p->dv, .K = p->sk, .alpha = 1, .b = h->v, .b_rs = p->vs[2], .b_cs = 1, .b_packed = pk + kf,
                     .a = s, .a_rs = p->sk, .a_cs = 1, .ldc = p->ys[2]};
    if (p->d > 0) kiln__sgemm_pack_b(&g1, pk);
    kiln__sgemm_pack_b(&g2, pk + kf);
    for (int64_t r0 = i0; r0 < i1; r0 += t->rows) {
        int64_t m = i1 - r0 < t->rows ? i1 - r0 : t->rows;
        g1.M = g2.M = m;
        g1.a = q + r0 * p->qs[2];
        if (p->d > 0) kiln__sgemm_serial(&g1);
        else memset(s, 0, (size_t)(m * p->sk) * sizeof *s); /* Q K^T of empty rows */
        for (int64_t i = 0; i < m; i++) {
            float *si = s + i * p->sk;
            if (mask) {
                const float *mi = mask + (r0 + i) * p->ms[2];
                for (int64_t j = 0; j < p->sk; j++) si[j] += mi[j * p->ms[3]];
            }
            fsoftmax_row_f32(si, si, p->sk, 1);
        }
        g2.c = y + r0 * p->ys[2];
        kiln__sgemm_serial(&g2);
    }
}

/* Work item `it` of heads x parts: its head's operands and its rows
 * [*i0, *i1) (whole blocks). */
static void attn_item(const attn_task *t, int64_t it, kiln__attn_head *hd, int64_t *i0, int64_t *i1) {
    const kiln_cu_flash *p = &t->p;
    const int64_t nblk = (p->sq + t->rows - 1) / t->rows, bh = it / t->parts, b = bh / p->nh, h = bh % p->nh;
    int64_t blk0, blk1;
    kiln_split_range(nblk, (int)(it % t->parts), (int)t->parts, &blk0, &blk1);
    *i0 = blk0 * t->rows;
    *i1 = blk1 * t->rows < p->sq ? blk1 * t->rows : p->sq;
    hd->q = t->q + b * p->qs[0] + h * p->qs[1];
    hd->k = t->k + b * p->ks[0] + h * p->ks[1];
    hd->v = t->v + b * p->vs[0] + h * p->vs[1];
    hd->mask = t->mask ? t->mask + b * p->ms[0] + h * p->ms[1] : NULL;
    hd->y = t->y + b * p->ys[0] + h * p->ys[1];
}

/* Work items [begin, end) of heads x parts. */
static void attn_heads(void *ud, int64_t begin, int64_t end) {
    attn_task *t = ud;
    const kiln_cu_flash *p = &t->p;
    const size_t kf = kiln__sgemm_pack_b_floats(p->d, p->sk), vf = kiln__sgemm_pack_b_floats(p->sk, p->dv);
    float *s = kiln__cpu_scratch(1, t->tiled ? kiln__attn_tile_scratch(p, t->rows) : (size_t)(t->rows * p->sk)),
          *pk = t->tiled ? NULL : kiln__cpu_scratch(2, kf + vf);
    if (!s || (!t->tiled && !pk)) {
        t->err = 1;
        return;
    }
    for (int64_t it = begin; it < end; it++) {
        kiln__attn_head hd;
        int64_t i0, i1;
        attn_item(t, it, &hd, &i0, &i1);
        if (i0 >= i1) continue;
        if (t->tiled) kiln__attn_tile_head(p, &hd, t->scale, i0, i1, t->rows, s);
        else attn_head_sgemm(t, &hd, i0, i1, s, pk);
    }
}

static int attn_cpu(const kiln_call *c) {
    const int tiled = c->tactic >= 3 && kiln__attn_tile_available();
    attn_task t = {.rows = tiled ? ATTN_TILE_ROWS : c->tactic == 2 ? 128 : 32, .tiled = tiled};
    int64_t off[3];
    int rc = kiln__attn_geometry(c, &t.p, off);
    if (rc) return rc;
    const kiln_cu_flash *p = &t.p;
    t.q = (const float *)c->in[0].data + off[0];
    t.k = (const float *)c->in[1].data + off[1];
    t.v = (const float *)c->in[2].data + off[2];
    t.mask = p->has_mask ? c->in[3].data : NULL;
    t.y = c->out[0].data;
    t.scale = (float)kiln_attrs_float(c->attrs, "scale");
    if (p->sk == 0) { /* no keys: zeros, as an empty softmax */
        for (int64_t bh = 0; bh < p->nb * p->nh; bh++)
            for (int64_t i = 0; i < p->sq; i++)
                memset(t.y + bh / p->nh * p->ys[0] + bh % p->nh * p->ys[1] + i * p->ys[2], 0,
                       (size_t)p->dv * sizeof *t.y);
        return 0;
    }
    const int64_t heads = p->nb * p->nh, nth = kiln_exec_threads(c->exec), nblk = (p->sq + t.rows - 1) / t.rows;
    t.parts = heads >= nth ? 1 : (nth + heads - 1) / heads < nblk ? (nth + heads - 1) / heads : nblk;
    if (t.parts < 1) t.parts = 1;
    kiln_exec_parallel_for(c->exec, heads * t.parts, 1, attn_heads, &t);
    return t.err ? kiln_set_error(KILN_ENOMEM, "attention: out of memory (%lld x %lld scores)", (long long)t.rows,
                                  (long long)p->sk)
                 : 0;
}
static int attn_impl(const kiln_call *c) { return kiln__ops_as_f32(c, attn_cpu); }

static const kiln_combo attn_formats[] = {{.types = "FP32", .tactics = {1, 2, 3}}, {0}};
static const kiln_combo attn_cuda_formats[] = {{.types = "FP32|FP16|BF16", .tactics = {1, 2, 3, 4, 5}}, {0}};
static const kiln_quick_op attention_op = {
    .ns = "kiln", .name = "attention", .version = 1, .min_inputs = 3, .max_inputs = 4, .num_outputs = 1,
    .attrs = attn_attrs, .shape = attn_shape, .impl = attn_impl, .formats = attn_formats,
    .doc = "softmax(scale Q K^T) V over the last two dims (the builder's fused attention)",
    .cuda_impl = kiln__cu_attention, .cuda_formats = attn_cuda_formats,
};
KILN_OP(attention_op)
