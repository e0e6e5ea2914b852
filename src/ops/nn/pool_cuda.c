/*
 * pool_cuda.c — CUDA launchers of pool.c's ops: MaxPool (with Indices),
 * AveragePool, LpPool over 1 to 3 spatial dims (pool_<T> of pool.cu, the
 * geometry of pool.c: the output dims are given, pads come from the
 * attributes or auto_pad), and the global pools (GlobalAveragePool and
 * GlobalMaxPool as one block-reduction per plane, reduce_<T>; GlobalLpPool
 * as a window over the whole plane).  NHWC (4-D, pool.c's rows): pool_<T>
 * with kiln_cu_pool.chans, the global pools as a window over the plane.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

#include <string.h>

enum { P_MAX = 0, P_AVG = 1, P_LP = 2 };

static int pool(const kiln_call *c, const char *op, int kind, int global) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    if (x->dtype != KILN_DTYPE_F32 && x->dtype != KILN_DTYPE_F16 && x->dtype != KILN_DTYPE_BF16)
        return kiln__cu_type_err(op, x->dtype);
    /* NHWC x (pool.c's NHWC rows): y NHWC, or LINEAR where it has one
     * position per plane (global pools: the same memory) */
    const int nhwc = x->format == KILN_FORMAT_NHWC;
    if (nhwc ? x->ndim != 4 || (y->format != KILN_FORMAT_NHWC && !global)
             : !kiln__cu_contig(x) || !kiln__cu_contig(y))
        return kiln_set_error(KILN_EUNSUPPORTED, "%s: CUDA kernels need contiguous tensors (or 4-D NHWC)", op);
    int nsp = x->ndim - 2;
    if (nsp < 1 || nsp > 3) return kiln_set_error(KILN_EUNSUPPORTED, "%s: %d spatial dims on CUDA", op, nsp);
    const char *suf = kiln__cu_suffix(x->dtype);
    kiln_cu_pool g;
    memset(&g, 0, sizeof g);
    g.planes = x->dims[0] * x->dims[1];
    g.kind = kind;
    int off = 3 - nsp;
    for (int i = 0; i < 3; i++) {
        g.id[i] = g.o[i] = 1;
        g.k[i] = g.s[i] = g.d[i] = 1;
    }
    int64_t sp = 1;
    for (int i = 0; i < nsp; i++) {
        g.id[off + i] = x->dims[2 + i];
        g.o[off + i] = y->dims[2 + i];
        sp *= x->dims[2 + i];
    }
    g.chans = nhwc ? x->dims[1] : 0;
    if (global && kind != P_LP && !nhwc) { /* a reduction per plane */
        kiln_cu_iter out, red;
        int64_t pst[1] = {sp}, ost[1] = {1}, one[1] = {1};
        const int64_t *so[2] = {pst, ost}, *sr[1] = {one};
        kiln__cu_iter_init(&out, 1, &g.planes, 2, so);
        kiln__cu_iter_init(&red, 1, &sp, 1, sr);
        int rop = kind == P_MAX ? KILN_CU_RMAX : KILN_CU_RMEAN;
        void *args[] = {&out, &red, (void *)&x->data, &y->data, &rop};
        return kiln__cu_launch_blocks(c, "reduce", suf, g.planes, kiln__cu_block_for(sp), args);
    }
    g.p = (float)kiln__cu_attr_int(c, "p", 2);
    if (global) { /* (NHWC: one thread per channel walks the plane, coalesced across threads) */
        for (int i = 0; i < nsp; i++) g.k[off + i] = (int32_t)x->dims[2 + i];
    } else {
        const int64_t *k = NULL, *s = NULL, *d = NULL, *pads = NULL;
        if (kiln__cu_attr_ints(c, "kernel_shape", &k) != nsp)
            return kiln_set_error(KILN_EATTR, "%s: kernel_shape must have %d values", op, nsp);
        int64_t ns = kiln__cu_attr_ints(c, "strides", &s), nd = kiln__cu_attr_ints(c, "dilations", &d);
        int64_t np = kiln__cu_attr_ints(c, "pads", &pads);
        const char *ap = kiln__cu_attr_str(c, "auto_pad", "NOTSET");
        for (int i = 0; i < nsp; i++) {
            int j = off + i;
            g.k[j] = (int32_t)k[i];
            g.s[j] = (int32_t)(ns == nsp ? s[i] : 1);
            g.d[j] = (int32_t)(nd == nsp ? d[i] : 1);
            if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) {
                int64_t tot = (g.o[j] - 1) * g.s[j] + (int64_t)(g.k[j] - 1) * g.d[j] + 1 - g.id[j];
                if (tot < 0) tot = 0;
                g.pb[j] = (int32_t)(!strcmp(ap, "SAME_UPPER") ? tot / 2 : tot - tot / 2);
                g.pe[j] = (int32_t)(tot - g.pb[j]);
            } else if (strcmp(ap, "VALID") != 0 && np == 2 * nsp) {
                g.pb[j] = (int32_t)pads[i];
                g.pe[j] = (int32_t)pads[nsp + i];
            }
        }
        if (kind == P_AVG) g.count_pad = (int)kiln__cu_attr_int(c, "count_include_pad", 0);
        if (kind == P_MAX) g.order = (int)kiln__cu_attr_int(c, "storage_order", 0);
    }
    void *ind = kind == P_MAX && c->nout > 1 ? c->out[1].data : NULL;
    if (ind && c->out[1].format != y->format)
        return kiln_set_error(KILN_EUNSUPPORTED, "%s: Indices in %s with y in %s (the kernel writes both alike)", op,
                              kiln_format_name(c->out[1].format), kiln_format_name(y->format));
    void *args[] = {&g, (void *)&x->data, &y->data, &ind};
    return kiln__cu_launch_n(c, "pool", suf, kiln_tensor_numel(y), args);
}

int kiln__cu_maxpool(const kiln_call *c) { return pool(c, "MaxPool", P_MAX, 0); }
int kiln__cu_avgpool(const kiln_call *c) { return pool(c, "AveragePool", P_AVG, 0); }
int kiln__cu_lppool(const kiln_call *c) { return pool(c, "LpPool", P_LP, 0); }
int kiln__cu_gmaxpool(const kiln_call *c) { return pool(c, "GlobalMaxPool", P_MAX, 1); }
int kiln__cu_gavgpool(const kiln_call *c) { return pool(c, "GlobalAveragePool", P_AVG, 1); }
int kiln__cu_glppool(const kiln_call *c) { return pool(c, "GlobalLpPool", P_LP, 1); }
