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
 * K^T and a Transpose of K folded in (builder/transformer.c), on CUDA
 * builds: the GPU runs it as one flash-style kernel (attention.cu: scores
 * never leave the chip; FP32 accumulation, FP16/BF16 I/O).  The CPU
 * implementation here is the naive reference (double accumulation).
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

#include <math.h>
#include <stdlib.h>

static const kiln_attr_def attn_attrs[] = {
    {"scale", KILN_ATTR_FLOAT, 0, "1", 0, "multiplies Q K^T before the softmax"},
    {"k_trans", KILN_ATTR_INT, 0, "0", 0, "1: input 1 is K^T [..., D, Sk]; 0: K [..., Sk, D]"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int attn_shape(kiln_shape_ctx *c) {
    const kiln_desc *q = &c->in[0], *k = &c->in[1], *v = &c->in[2];
    int r = q->ndim, kt = kiln_attrs_int(c->attrs, "k_trans") != 0;
    if (r < 2 || k->ndim != r || v->ndim != r)
        return kiln_set_error(KILN_ESHAPE, "attention: Q, K, V must have the same rank >= 2 (found %d, %d, %d)", r,
                              k->ndim, v->ndim);
    for (int i = 0; i < 3; i++)
        if (!kiln__ops_is_float(c->in[i].dtype) || c->in[i].dtype != q->dtype)
            return kiln_set_error(KILN_ETYPE, "attention: input %d is %s, expected float like Q (%s)", i,
                                  kiln_dtype_name(c->in[i].dtype), kiln_dtype_name(q->dtype));
    for (int d = 0; d + 2 < r; d++)
        if (q->dims[d] != k->dims[d] || q->dims[d] != v->dims[d]) /* hash-consed */
            return kiln_set_error(KILN_ESHAPE, "attention: Q, K, V differ in leading dim %d", d);
    const kiln_expr *kd = k->dims[kt ? r - 2 : r - 1], *ks = k->dims[kt ? r - 1 : r - 2];
    if (kd != q->dims[r - 1] || ks != v->dims[r - 2])
        return kiln_set_error(KILN_ESHAPE, "attention: K's dims do not match Q's last dim and V's key dim");
    const kiln_expr *d[KILN_MAX_DIMS];
    for (int i = 0; i < r - 1; i++) d[i] = q->dims[i];
    d[r - 1] = v->dims[r - 1];
    kiln__ops_set_dims(&c->out[0], q->dtype, r, d);
    return 0;
}

/* Geometry of a call: batch-heads and the matrix dims. */
static int attn_geo(const kiln_call *c, kiln_cu_attn *p) {
    const kiln_tensor *q = &c->in[0], *k = &c->in[1], *v = &c->in[2];
    int r = q->ndim;
    p->k_trans = kiln_attrs_int(c->attrs, "k_trans") != 0;
    p->scale = (float)kiln_attrs_float(c->attrs, "scale");
    p->sq = q->dims[r - 2];
    p->sk = v->dims[r - 2];
    p->d = (int32_t)q->dims[r - 1];
    p->dv = (int32_t)v->dims[r - 1];
    p->bh = 1;
    for (int i = 0; i + 2 < r; i++) p->bh *= q->dims[i];
    if (k->dims[p->k_trans ? r - 2 : r - 1] != p->d || k->dims[p->k_trans ? r - 1 : r - 2] != p->sk)
        return kiln_set_error(KILN_ESHAPE, "attention: K's dims do not match Q's last dim and V's key dim");
    return 0;
}

static int attn_cpu(const kiln_call *c) {
    kiln_cu_attn p;
    int rc = attn_geo(c, &p);
    if (rc) return rc;
    const float *q = c->in[0].data, *k = c->in[1].data, *v = c->in[2].data;
    float *y = c->out[0].data;
    double *s = malloc((size_t)(p.sk ? p.sk : 1) * sizeof *s);
    if (!s) return kiln_set_error(KILN_ENOMEM, "attention: out of memory");
    for (int64_t b = 0; b < p.bh; b++) {
        const float *qb = q + b * p.sq * p.d, *kb = k + b * p.sk * p.d, *vb = v + b * p.sk * p.dv;
        for (int64_t i = 0; i < p.sq; i++) {
            double m = -INFINITY, sum = 0;
            for (int64_t j = 0; j < p.sk; j++) {
                double a = 0;
                for (int d = 0; d < p.d; d++)
                    a += (double)qb[i * p.d + d] * kb[p.k_trans ? d * p.sk + j : j * p.d + d];
                s[j] = a * p.scale;
                m = s[j] > m ? s[j] : m;
            }
            for (int64_t j = 0; j < p.sk; j++) sum += s[j] = exp(s[j] - m);
            for (int e = 0; e < p.dv; e++) {
                double a = 0;
                for (int64_t j = 0; j < p.sk; j++) a += s[j] * vb[j * p.dv + e];
                y[(b * p.sq + i) * p.dv + e] = (float)(sum > 0 ? a / sum : 0);
            }
        }
    }
    free(s);
    return 0;
}
static int attn_impl(const kiln_call *c) { return kiln__ops_as_f32(c, attn_cpu); }

static const kiln_combo attn_formats[] = {{.types = "FP32"}, {0}};
static const kiln_combo attn_cuda_formats[] = {{.types = "FP32|FP16|BF16", .tactics = {1, 2}}, {0}};
static const kiln_quick_op attention_op = {
    .ns = "kiln", .name = "attention", .version = 1, .min_inputs = 3, .max_inputs = 3, .num_outputs = 1,
    .attrs = attn_attrs, .shape = attn_shape, .impl = attn_impl, .formats = attn_formats,
    .doc = "softmax(scale Q K^T) V over the last two dims (the builder's fused attention)",
    .cuda_impl = kiln__cu_attention, .cuda_formats = attn_cuda_formats,
};
KILN_OP(attention_op)
