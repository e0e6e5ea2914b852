/*
 * attention_cuda.c — CUDA launchers of kiln::attention, two tactics the
 * builder times:
 *
 *   1 (T_TILED): the tiled kernels — FP16/BF16 on tensor cores
 *     (attention_tc.cu, head dims up to 128, 4 warps per 64 query rows),
 *     FP32 on CUDA cores (attention_f32.cu, head dims up to 64; larger ones
 *     take tactic 2's kernel).  They read Q, K, V and write Y through
 *     their strides (kiln_cu_flash), so strided views need no copy.
 *   2 (T_ROWS): the first kernel (attention.cu: a warp per 4 query rows,
 *     float math, contiguous tensors only), kept as a tactic for shapes
 *     where it may still win (very short sequences).
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

#include <string.h>

enum { T_TILED = 1, T_ROWS = 2 };

#define F32_SMEM (3 * 64 * 68 * 4) /* attention_f32.cu: Q^T, K^T (then P^T) and V tiles */

/* Strides of tensor t [lead..., rows, cols] as kiln_cu_flash wants them:
 * st[0] one batch (the leading dims but the last, which must collapse),
 * st[1] one head (the last leading dim), st[2] one row; *cs one column.
 * *nb, *nh: the batch and head counts. */
static int flash_strides(const char *what, const kiln_tensor *t, int64_t *st, int64_t *cs, int64_t *nb,
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
        if (*nb > 1 && t->strides[i] != st[0] * (*nb))
            return kiln_set_error(KILN_EUNSUPPORTED,
                                  "attention: %s's leading dims do not collapse into one batch dim (dim %d: stride "
                                  "%lld, expected %lld)",
                                  what, i, (long long)t->strides[i], (long long)(st[0] * (*nb)));
        if (*nb == 1) st[0] = t->strides[i];
        *nb *= t->dims[i];
    }
    return 0;
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

static int launch_tiled(const kiln_call *c, const kiln_cu_attn *a, const char *suf) {
    const kiln_tensor *q = &c->in[0], *k = &c->in[1], *v = &c->in[2];
    kiln_tensor *y = &c->out[0];
    kiln_cu_flash p;
    memset(&p, 0, sizeof p);
    int64_t cs[4], nb[4], nh[4], kst[3], kcs;
    const kiln_tensor *ts[4] = {q, k, v, y};
    int64_t *st[4] = {p.qs, kst, p.vs, p.ys};
    static const char *const names[4] = {"Q", "K", "V", "Y"};
    for (int i = 0; i < 4; i++) {
        int rc = flash_strides(names[i], ts[i], st[i], &cs[i], &nb[i], &nh[i]);
        if (rc) return rc;
        if (nb[i] != nb[0] || nh[i] != nh[0]) /* same product; the split differs only in odd layouts */
            return kiln_set_error(KILN_EUNSUPPORTED, "attention: %s's leading dims split unlike Q's", names[i]);
    }
    kcs = cs[1];
    p.ks[0] = kst[0];
    p.ks[1] = kst[1];
    if (a->k_trans) { /* K^T [.., D, Sk]: a key is a column */
        p.ks[2] = kcs;
        p.kd = kst[2];
    } else {
        p.ks[2] = kst[2];
        p.kd = kcs;
    }
    if ((a->d > 1 && cs[0] != 1) || (a->dv > 1 && (cs[2] != 1 || cs[3] != 1)))
        return kiln_set_error(KILN_EUNSUPPORTED, "attention: the head dim of Q, V and Y must be contiguous");
    p.nb = nb[0];
    p.nh = nh[0];
    p.sq = a->sq;
    p.sk = a->sk;
    p.d = a->d;
    p.dv = a->dv;
    p.scale_log2 = (float)(a->scale * 1.4426950408889634);
    p.vec = a->d % 8 == 0 && a->dv % 8 == 0 && p.kd == 1 && aligned16(k->data) && aligned16(v->data);
    for (int i = 0; i < 3; i++) p.vec = p.vec && p.ks[i] % 8 == 0 && p.vs[i] % 8 == 0;
    void *args[] = {&p, (void *)&q->data, (void *)&k->data, (void *)&v->data, &y->data};
    const int64_t blocks = p.nb * p.nh * ((p.sq + 63) / 64);
    if (blocks <= 0) return 0;
    if (blocks > INT32_MAX)
        return kiln_set_error(KILN_EUNSUPPORTED, "attention: %lld blocks exceed the CUDA grid", (long long)blocks);
    if (q->dtype == KILN_DTYPE_F32) {
        const unsigned grid[3] = {(unsigned)blocks, 1, 1}, block[3] = {256, 1, 1};
        return kiln__cuda_launch(c, "flash_f32", grid, block, F32_SMEM, args);
    }
    int dk = a->d > a->dv ? a->d : a->dv;
    const char *base = dk <= 32 ? "flash32" : dk <= 64 ? "flash64" : "flash128";
    return kiln__cu_launch_blocks(c, base, suf, blocks, 128, args);
}

int kiln__cu_attention(const kiln_call *c) {
    const kiln_tensor *q = &c->in[0], *k = &c->in[1], *v = &c->in[2];
    kiln_tensor *y = &c->out[0];
    const char *suf = kiln__cu_suffix(q->dtype);
    if (!suf || k->dtype != q->dtype || v->dtype != q->dtype || y->dtype != q->dtype)
        return kiln__cu_type_err("attention", q->dtype);
    int r = q->ndim;
    if (r < 2 || k->ndim != r || v->ndim != r || y->ndim != r)
        return kiln_set_error(KILN_ESHAPE, "attention: Q, K, V, Y must have the same rank >= 2");
    kiln_cu_attn p = {.k_trans = kiln__cu_attr_int(c, "k_trans", 0) != 0,
                      .scale = (float)kiln__cu_attr_float(c, "scale", 1.0)};
    p.sq = q->dims[r - 2];
    p.sk = v->dims[r - 2];
    p.bh = 1;
    for (int i = 0; i + 2 < r; i++) p.bh *= q->dims[i];
    int64_t d = q->dims[r - 1], dv = v->dims[r - 1];
    if (d > KILN_CU_ATTN_DMAX || dv > KILN_CU_ATTN_DMAX || d < 1 || dv < 1)
        return kiln_set_error(KILN_EUNSUPPORTED, "attention: head dims %lld and %lld, the CUDA kernel takes 1..%d",
                              (long long)d, (long long)dv, KILN_CU_ATTN_DMAX);
    if (k->dims[p.k_trans ? r - 2 : r - 1] != d || k->dims[p.k_trans ? r - 1 : r - 2] != p.sk ||
        y->dims[r - 2] != p.sq || y->dims[r - 1] != dv)
        return kiln_set_error(KILN_ESHAPE, "attention: K or Y dims do not match Q [.., %lld, %lld] and V [.., %lld, %lld]",
                              (long long)p.sq, (long long)d, (long long)p.sk, (long long)dv);
    for (int i = 0; i + 2 < r; i++)
        if (k->dims[i] != q->dims[i] || v->dims[i] != q->dims[i] || y->dims[i] != q->dims[i])
            return kiln_set_error(KILN_ESHAPE, "attention: Q, K, V, Y differ in leading dim %d", i);
    p.d = (int32_t)d;
    p.dv = (int32_t)dv;
    /* FP32 head dims past 64: the tiled FP32 kernel does not hold them */
    if (c->tactic != T_ROWS && !(q->dtype == KILN_DTYPE_F32 && (d > 64 || dv > 64)))
        return launch_tiled(c, &p, suf);
    for (int i = 0; i < 3; i++)
        if (!kiln__cu_contig(&c->in[i]))
            return kiln_set_error(KILN_EUNSUPPORTED, "attention: CUDA kernel needs contiguous inputs");
    if (!kiln__cu_contig(y)) return kiln_set_error(KILN_EUNSUPPORTED, "attention: CUDA kernel needs a contiguous output");
    int64_t blocks = p.bh * ((p.sq + 15) / 16);
    void *args[] = {&p, (void *)&q->data, (void *)&k->data, (void *)&v->data, &y->data};
    return kiln__cu_launch_blocks(c, "attention", suf, blocks, 128, args);
}
