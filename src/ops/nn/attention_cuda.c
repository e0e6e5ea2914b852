/*
 * attention_cuda.c — CUDA launcher of kiln::attention (attention.cu): one
 * block of 128 threads per 16 query rows of each batch-head.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

int kiln__cu_attention(const kiln_call *c) {
    const kiln_tensor *q = &c->in[0], *k = &c->in[1], *v = &c->in[2];
    kiln_tensor *y = &c->out[0];
    const char *suf = kiln__cu_suffix(q->dtype);
    if (!suf || k->dtype != q->dtype || v->dtype != q->dtype || y->dtype != q->dtype)
        return kiln__cu_type_err("attention", q->dtype);
    for (int i = 0; i < 3; i++)
        if (!kiln__cu_contig(&c->in[i]))
            return kiln_set_error(KILN_EUNSUPPORTED, "attention: CUDA kernel needs contiguous inputs");
    if (!kiln__cu_contig(y)) return kiln_set_error(KILN_EUNSUPPORTED, "attention: CUDA kernel needs a contiguous output");
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
    p.d = (int32_t)d;
    p.dv = (int32_t)dv;
    int64_t blocks = p.bh * ((p.sq + 15) / 16);
    void *args[] = {&p, (void *)&q->data, (void *)&k->data, (void *)&v->data, &y->data};
    return kiln__cu_launch_blocks(c, "attention", suf, blocks, 128, args);
}
