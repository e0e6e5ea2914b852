/*
 * quant_cuda.c — CUDA launchers of quant.c's ops (kernels of quant.cu):
 * QuantizeLinear / DequantizeLinear per tensor or per axis (quant.c
 * resolves the axis geometry and the saturation range and hands them over)
 * and DynamicQuantizeLinear (statistics in one block, then the elementwise
 * pass, both on the call's stream: the scale never visits the host).
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

#include <stdio.h>

int kiln__cu_qdq(const kiln_call *c, int quantize, int64_t inner, int64_t nax, double lo, double hi) {
    const char *op = quantize ? "QuantizeLinear" : "DequantizeLinear";
    const kiln_tensor *x = &c->in[0], *s = &c->in[1];
    const kiln_tensor *z = kiln__cu_has_in(c, 2) ? &c->in[2] : NULL;
    kiln_tensor *y = &c->out[0];
    const kiln_tensor *fl = quantize ? x : y, *in = quantize ? y : x;
    const char *fs = kiln__cu_suffix(fl->dtype), *qs = kiln__cu_suffix(in->dtype);
    if (!fs) return kiln__cu_type_err(op, fl->dtype);
    if (!qs) return kiln__cu_type_err(op, in->dtype);
    if (s->dtype != fl->dtype) return kiln__cu_type_err("scale", s->dtype);
    if (z && z->dtype != in->dtype) return kiln__cu_type_err("zero point", z->dtype);
    for (int i = 0; i < 3; i++)
        if (kiln__cu_has_in(c, i) && !kiln__cu_contig(&c->in[i]))
            return kiln_set_error(KILN_EUNSUPPORTED, "%s: CUDA kernel needs contiguous tensors", op);
    if (!kiln__cu_contig(y)) return kiln_set_error(KILN_EUNSUPPORTED, "%s: CUDA kernel needs contiguous tensors", op);
    if (kiln_tensor_numel(s) < nax || (z && kiln_tensor_numel(z) < nax))
        return kiln_set_error(KILN_ESHAPE, "%s: scale has %lld elements, the axis %lld", op,
                              (long long)kiln_tensor_numel(s), (long long)nax);
    int64_t n = kiln_tensor_numel(x);
    const void *zd = z ? z->data : NULL;
    char suf[16];
    snprintf(suf, sizeof suf, "%s_%s", quantize ? fs : qs, quantize ? qs : fs);
    if (quantize) {
        void *args[] = {&n, &inner, &nax, (void *)&x->data, (void *)&s->data, (void *)&zd, &y->data, &lo, &hi};
        return kiln__cu_launch_n(c, "quantize", suf, n, args);
    }
    void *args[] = {&n, &inner, &nax, (void *)&x->data, (void *)&s->data, (void *)&zd, &y->data};
    return kiln__cu_launch_n(c, "dequantize", suf, n, args);
}

int kiln__cu_dql(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    if (x->dtype != KILN_DTYPE_F32) return kiln__cu_type_err("DynamicQuantizeLinear", x->dtype);
    for (int i = 0; i < 3; i++)
        if (c->out[i].dtype != (i == 1 ? KILN_DTYPE_F32 : KILN_DTYPE_U8) || !c->out[i].data)
            return kiln_set_error(KILN_EINVAL, "DynamicQuantizeLinear: output %d must be %s", i, i == 1 ? "f32" : "u8");
    if (!kiln__cu_contig(x) || !kiln__cu_contig(&c->out[0]))
        return kiln_set_error(KILN_EUNSUPPORTED, "DynamicQuantizeLinear: CUDA kernel needs contiguous tensors");
    int64_t n = kiln_tensor_numel(x);
    void *a1[] = {&n, (void *)&x->data, &c->out[1].data, &c->out[2].data};
    int rc = kiln__cu_launch_blocks(c, "dql_minmax", NULL, 1, 1024, a1);
    if (rc) return rc;
    void *a2[] = {&n, (void *)&x->data, &c->out[1].data, &c->out[2].data, &c->out[0].data};
    return kiln__cu_launch_n(c, "dql_apply", NULL, n, a2);
}
