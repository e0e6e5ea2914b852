/*
 * add_norm_cuda.c — CUDA launcher of kiln::add_layernorm (add_norm.cu):
 * one block per row, the fewest threads (a multiple of 32, up to 1024)
 * that hold the row at 8 elements each.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

int kiln__cu_add_layernorm(const kiln_call *c) {
    const kiln_tensor *a = &c->in[0];
    const char *suf = kiln__cu_suffix(a->dtype);
    int hb = c->nin > 3 && kiln__cu_has_in(c, 3);
    for (int i = 0; i < c->nin; i++)
        if (kiln__cu_has_in(c, i) && (c->in[i].dtype != a->dtype || !kiln__cu_contig(&c->in[i])))
            return kiln_set_error(KILN_EUNSUPPORTED, "add_layernorm: input %d must be contiguous %s", i,
                                  kiln_dtype_name(a->dtype));
    if (!suf) return kiln__cu_type_err("add_layernorm", a->dtype);
    if (!kiln__cu_contig(&c->out[0])) return kiln_set_error(KILN_EUNSUPPORTED, "add_layernorm: output not contiguous");
    int64_t axis = kiln__cu_attr_int(c, "axis", -1);
    if (axis < 0) axis += a->ndim;
    kiln_cu_addnorm p = {.rows = 1, .inner = 1, .eps = (float)kiln__cu_attr_float(c, "epsilon", 1e-5)};
    for (int d = 0; d < a->ndim; d++) *(d < axis ? &p.rows : &p.inner) *= a->dims[d];
    p.se = kiln_tensor_numel(&c->in[2]);
    p.be = hb ? kiln_tensor_numel(&c->in[3]) : 1;
    if (kiln_tensor_numel(&c->in[1]) != p.rows * p.inner || p.se < 1 || p.be < 1 || p.inner % p.se ||
        p.inner % p.be || p.inner > KILN_CU_ADDNORM_MAX)
        return kiln_set_error(KILN_ESHAPE, "add_layernorm: B must match A, Scale (%lld) and Bias (%lld) must divide "
                              "the normalized size %lld (at most %d on the GPU)", (long long)p.se, (long long)p.be,
                              (long long)p.inner, KILN_CU_ADDNORM_MAX);
    if (p.rows == 0 || p.inner == 0) return 0;
    unsigned threads = (unsigned)((p.inner + 8 * 32 - 1) / (8 * 32) * 32);
    const void *bias = hb ? c->in[3].data : NULL;
    void *args[] = {&p, (void *)&a->data, (void *)&c->in[1].data, (void *)&c->in[2].data, (void *)&bias,
                    &c->out[0].data};
    return kiln__cu_launch_blocks(c, "add_layernorm", suf, p.rows, threads, args);
}
