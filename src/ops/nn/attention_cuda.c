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
 *   3, 4, 5 (T_ASYNC8, T_ASYNC4, T_ASYNC2): FP16/BF16 only, the
 *     tensor-core kernels with cp.async double-buffered K/V tiles and
 *     ldmatrix fragments (attention_tc_async.cu), 128 (8 warps), 64 (4) or
 *     32 (2) query rows per block: the first for many batch-heads, the
 *     others where few blocks would leave SMs idle (batch 1).  Where an operand does not allow
 *     16-byte copies (head dims not multiples of 8, K^T, odd strides or
 *     offsets) tactic 1's kernel runs instead, so the result never depends
 *     on the tactic the builder timed.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"
#include "ops/common/ops_util.h"
#include "ops/nn/attention.h"

enum { T_TILED = 1, T_ROWS = 2, T_ASYNC8 = 3, T_ASYNC4 = 4, T_ASYNC2 = 5 };

#define F32_SMEM (3 * 64 * 68 * 4) /* attention_f32.cu: Q^T, K^T (then P^T) and V tiles */

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* attention_tc_async.cu's kernels: [dk 32/64/128][warps 2/4/8][FP16/BF16] */
#define ASYNC_NAMES(DK)                                                                                     \
    {{"flasha" #DK "_w2_f16", "flasha" #DK "_w2_bf16"}, {"flasha" #DK "_w4_f16", "flasha" #DK "_w4_bf16"}, \
     {"flasha" #DK "_w8_f16", "flasha" #DK "_w8_bf16"}}
static const char *const async_names[3][3][2] = {
    ASYNC_NAMES(32), ASYNC_NAMES(64),
    {{"flasha128_w2_f16", "flasha128_w2_bf16"}, {"flasha128_w4_f16", "flasha128_w4_bf16"}, {NULL, NULL}}};

/* Tactics 3, 4, 5 where every operand allows 16-byte copies (p->vec covers K
 * and V); returns 1 when it launched (*rc its result), 0 to fall back. */
static int launch_async(const kiln_call *c, kiln_cu_flash *p, const void *qkv[3], const void *mask, int *rc) {
    const void *y = c->out[0].data;
    int ok = p->vec && aligned16(qkv[0]) && aligned16(y);
    for (int i = 0; i < 3; i++) ok = ok && p->qs[i] % 8 == 0 && p->ys[i] % 8 == 0;
    if (!ok) return 0;
    const int nwi = c->tactic == T_ASYNC8 ? 2 : c->tactic == T_ASYNC4 ? 1 : 0, nw = 2 << nwi;
    const int dk = p->d > p->dv ? p->d : p->dv;
    const int di = dk <= 32 ? 0 : dk <= 64 ? 1 : 2, ld = (32 << di) + 8;
    const int64_t bq = 16 * nw, blocks = p->nb * p->nh * ((p->sq + bq - 1) / bq);
    *rc = 0;
    if (blocks <= 0) return 1;
    if (blocks > INT32_MAX) {
        *rc = kiln_set_error(KILN_EUNSUPPORTED, "attention: %lld blocks exceed the CUDA grid", (long long)blocks);
        return 1;
    }
    const char *name = async_names[di][nwi][c->in[0].dtype == KILN_DTYPE_BF16];
    if (!name) return 0; /* head dim 128 with 8 warps: more shared memory than sm_86/89 have */
    /* Q tile + two K and two V tiles of 64 rows, padded rows (attention_tc_async.cu) */
    const unsigned smem = (unsigned)((16 * nw + 4 * 64) * ld * 2);
    const unsigned grid[3] = {(unsigned)blocks, 1, 1}, block[3] = {32u * nw, 1, 1};
    void *args[] = {p, &qkv[0], &qkv[1], &qkv[2], &mask, &y};
    *rc = kiln__cuda_launch(c, name, grid, block, smem, args);
    return 1;
}

static int launch_tiled(const kiln_call *c, kiln_cu_flash *p, const int64_t off[3], const char *suf) {
    const size_t es = kiln_dtype_size(c->in[0].dtype);
    const void *q = (const char *)c->in[0].data + off[0] * es, *k = (const char *)c->in[1].data + off[1] * es,
               *v = (const char *)c->in[2].data + off[2] * es;
    p->scale_log2 = (float)(kiln__cu_attr_float(c, "scale", 1.0) * 1.4426950408889634);
    p->vec = p->d % 8 == 0 && p->dv % 8 == 0 && p->kd == 1 && aligned16(k) && aligned16(v);
    for (int i = 0; i < 3; i++) p->vec = p->vec && p->ks[i] % 8 == 0 && p->vs[i] % 8 == 0;
    const void *mask = p->has_mask ? c->in[3].data : NULL;
    int rc;
    const void *qkv[3] = {q, k, v};
    if (c->tactic >= T_ASYNC8 && launch_async(c, p, qkv, mask, &rc)) return rc;
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
    if (c->tactic >= T_ASYNC8 && q->dtype == KILN_DTYPE_F32)
        return kiln_set_error(KILN_EUNSUPPORTED, "attention: tactic %d is for FP16/BF16 (tensor cores)", c->tactic);
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
