/*
 * conv3d_cuda.c — the CUDA launcher of 3-D Conv and ConvTranspose
 * (conv3d_<T> of conv3d.cu); conv.c and conv_transpose.c resolve the
 * geometry (auto_pad, output_shape, output_padding) with their CPU code
 * and hand it over, so both devices read the attributes one way.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

int kiln__cu_conv3d(const kiln_call *c, const kiln_cu_conv3d *geo) {
    const char *op = geo->transpose ? "ConvTranspose" : "Conv";
    const kiln_tensor *x = &c->in[0], *w = &c->in[1];
    kiln_tensor *y = &c->out[0];
    const char *suf = kiln__cu_suffix(x->dtype);
    if (!suf || (x->dtype != KILN_DTYPE_F32 && x->dtype != KILN_DTYPE_F16 && x->dtype != KILN_DTYPE_BF16) ||
        w->dtype != x->dtype || y->dtype != x->dtype)
        return kiln__cu_type_err(op, x->dtype);
    const void *bias = kiln__cu_has_in(c, 2) ? c->in[2].data : NULL;
    if (bias && (c->in[2].dtype != x->dtype || kiln_tensor_numel(&c->in[2]) != geo->m))
        return kiln_set_error(KILN_ESHAPE, "%s: bias must hold %lld values of the input type", op, (long long)geo->m);
    if (!kiln__cu_contig(x) || !kiln__cu_contig(w) || !kiln__cu_contig(y) || (bias && !kiln__cu_contig(&c->in[2])))
        return kiln_set_error(KILN_EUNSUPPORTED, "%s: CUDA kernels need contiguous tensors", op);
    kiln_cu_conv3d p = *geo;
    p.act = kiln__epi_cuda_act(c->epilogue, &p.act_a, &p.act_b); /* a fused activation (builder/fuse.c) */
    void *args[] = {&p, (void *)&x->data, (void *)&w->data, (void *)&bias, &y->data};
    return kiln__cu_launch_n(c, "conv3d", suf, kiln_tensor_numel(y), args);
}
