/*
 * attention_cuda.c — CUDA launchers of kiln::attention, two tactics the
 * builder times:
 *
 *   1 (T_TILED): the tiled kernels — FP16/BF16 on tensor cores
 *     (attention_tc.cu, head dims up to 128, 4 warps per 64 query rows),
 *     FP32 on CUDA cores (attention_f32.cu, head dims up to 64; larger ones
 *     take tactic 2's kernel).  They read Q, K, V and write Y through
 *     their strides and views (kiln__attn_geometry), so the heads of a
 *     packed projection need no copy.
 *   2 (T_ROWS): the first kernel (attention.cu: a warp per 4 query rows,
 *     float math, contiguous tensors, no views, no mask), kept as a tactic for
 *     shapes where it may still win (very short sequences).
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"
#include "ops/common/ops_util.h"
#include "ops/nn/attention.h"

enum { T_TILED = 1, T_ROWS = 2 };

#define F32_SMEM (3 * 64 * 68 * 4) /* attention_f32.cu: Q^T, K^T (then P^T) and V tiles */

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

static int launch_tiled(const kiln_call *c, kiln_cu_flash *p, const int64_t off[3], const char *suf) {
    const size_t es = kiln_dtype_size(c->in[0].dtype);
    const void *q = (const char *)c->in[0].data + off[0] * es, *k = (const char *)c->in[1].data + off[1] * es,
               *v = (const char *)c->in[2].data + off[2] * es;
    p->scale_log2 = (float)(kiln__cu_attr_float(c, "scale", 1.0) * 1.4426950408889634);
    p->vec = p->d % 8 == 0 && p->dv % 8 == 0 && p->kd == 1 && aligned16(k) && aligned16(v);
    for (int i = 0; i < 3; i++) p->vec = p->vec && p->ks[i] % 8 == 0 && p->vs[i] % 8 == 0;
    const void *mask = p->has_mask ? c->in[3].data : NULL;
    void *args[] = {p, &q, &k, &v, &mask, (void *)&c->out[0].data};
    const int64_t blocks = p->nb * p->nh * ((p->sq + 63) / 64);
    if (c->in[0].dtype == KILN_DTYPE_F32) {
        if (blocks <= 0) return 0;
        if (blocks > INT32_MAX)
            return kiln_set_error(KILN_EUNSUPPORTED, "attention: %lld blocks exceed the CUDA grid", (long long)blocks);
        const unsigned grid[3] = {(unsigned)blocks, 1, 1}, block[3] = {256, 1, 1};
        return kiln__cuda_launch(c, "flash_f32", grid, block, F32_SMEM, args);
    }
    int dk = p->d > p->dv ? p->d : p->dv;
    return kiln__cu_launch_blocks(c, dk <= 32 ? "flash32" : dk <= 64 ? "flash64" : "flash128", suf, blocks, 128, args);
}

int kiln__cu_attention(const kiln_call *c) {
    const kiln_tensor *q = &c->in[0], *k = &c->in[1], *v = &c->in[2];
    kiln_tensor *y = &c->out[0];
    const char *suf = kiln__cu_suffix(q->dtype);
    if (!suf || k->dtype != q->dtype || v->dtype != q->dtype || y->dtype != q->dtype ||
        (kiln__cu_has_in(c, 3) && c->in[3].dtype != q->dtype))
        return kiln__cu_type_err("attention", q->dtype);
    kiln_cu_flash p;
    int64_t off[3];
    int rc = kiln__attn_geometry(c, &p, off);
    if (rc) return rc;
    if (p.d > KILN_CU_ATTN_DMAX || p.dv > KILN_CU_ATTN_DMAX || p.d < 1 || p.dv < 1)
        return kiln_set_error(KILN_EUNSUPPORTED, "attention: head dims %d and %d, the CUDA kernels take 1..%d", p.d,
                              p.dv, KILN_CU_ATTN_DMAX);
    const int64_t *vw = NULL;
    int views = kiln__cu_attr_ints(c, "views", &vw) > 0;
    /* FP32 head dims past 64: the tiled FP32 kernel does not hold them */
    int f32_wide = q->dtype == KILN_DTYPE_F32 && (p.d > 64 || p.dv > 64);
    if (c->tactic != T_ROWS && (!f32_wide || views || p.has_mask)) {
        if (f32_wide)
            return kiln_set_error(KILN_EUNSUPPORTED, "attention: FP32 views or mask with head dims %d, %d (at most 64)",
                                  p.d, p.dv);
        return launch_tiled(c, &p, off, suf);
    }
    if (views || p.has_mask) return kiln_set_error(KILN_EUNSUPPORTED, "attention: tactic 2 takes no views or mask");
    for (int i = 0; i < 3; i++)
        if (!kiln__cu_contig(&c->in[i]))
            return kiln_set_error(KILN_EUNSUPPORTED, "attention: tactic 2 needs contiguous inputs");
    if (!kiln__cu_contig(y)) return kiln_set_error(KILN_EUNSUPPORTED, "attention: tactic 2 needs a contiguous output");
    kiln_cu_attn a = {.bh = p.nb * p.nh, .sq = p.sq, .sk = p.sk, .d = p.d, .dv = p.dv,
                      .k_trans = kiln__cu_attr_int(c, "k_trans", 0) != 0,
                      .scale = (float)kiln__cu_attr_float(c, "scale", 1.0)};
    void *args[] = {&a, (void *)&q->data, (void *)&k->data, (void *)&v->data, &y->data};
    return kiln__cu_launch_blocks(c, "attention", suf, a.bh * ((a.sq + 15) / 16), 128, args);
}
