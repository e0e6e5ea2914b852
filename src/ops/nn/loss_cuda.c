/*
 * loss_cuda.c — CUDA launchers of NegativeLogLikelihoodLoss and
 * SoftmaxCrossEntropyLoss (loss.cu): input [N, C, d1..dk] seen as
 * [N, C, D], target [N, D].  SCE first writes the log-probabilities (double)
 * into the workspace, then both run the NLL kernel; targets out of range
 * are reported through the context's fault record (kiln__cu_check).
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

#include <string.h>

static int is_float(kiln_dtype t) {
    return t == KILN_DTYPE_F32 || t == KILN_DTYPE_F16 || t == KILN_DTYPE_BF16 || t == KILN_DTYPE_F64;
}

size_t kiln__cu_loss_workspace(const kiln_call *c) {
    return c->nout > 1 ? (size_t)kiln_tensor_numel(&c->in[0]) * sizeof(double) : 0;
}

static int loss(const kiln_call *c, int sce) {
    const char *op = sce ? "SoftmaxCrossEntropyLoss" : "NegativeLogLikelihoodLoss";
    const kiln_tensor *x = &c->in[0], *tg = &c->in[1];
    const kiln_tensor *w = kiln__cu_has_in(c, 2) ? &c->in[2] : NULL;
    kiln_tensor *y = &c->out[0];
    if (!is_float(x->dtype)) return kiln__cu_type_err(op, x->dtype);
    if (tg->dtype != KILN_DTYPE_I32 && tg->dtype != KILN_DTYPE_I64) return kiln__cu_type_err(op, tg->dtype);
    for (int i = 0; i < c->nin; i++)
        if (kiln__cu_has_in(c, i) && !kiln__cu_contig(&c->in[i]))
            return kiln_set_error(KILN_EUNSUPPORTED, "%s: CUDA kernel needs contiguous tensors", op);
    int64_t N = x->dims[0], C = x->ndim > 1 ? x->dims[1] : 1, D = 1;
    for (int i = 2; i < x->ndim; i++) D *= x->dims[i];
    const char *r = kiln__cu_attr_str(c, "reduction", "mean");
    int red = !strcmp(r, "none") ? 0 : !strcmp(r, "sum") ? 1 : 2;
    const kiln_attr_value *iv = kiln_attrs_get(c->attrs, "ignore_index");
    int has_ii = iv && iv->present;
    int64_t ii = has_ii ? iv->i : 0;
    const char *suf = kiln__cu_suffix(x->dtype);
    const void *src = x->data;
    int src_f64 = 0;
    if (sce) {
        if (c->workspace_size < kiln__cu_loss_workspace(c))
            return kiln_set_error(KILN_EINTERNAL, "%s: workspace of %zu bytes, %zu needed", op, c->workspace_size,
                                  kiln__cu_loss_workspace(c));
        void *lp_out = c->nout > 1 ? (void *)c->out[1].data : NULL;
        void *ws = c->workspace;
        void *args[] = {&N, &C, &D, (void *)&x->data, &ws, &lp_out};
        int rc = kiln__cu_launch_n(c, "sce_logp", suf, N * D, args);
        if (rc) return rc;
        src = c->workspace;
        src_f64 = 1;
    }
    kiln_cu_check ck = kiln__cu_check(c);
    const void *wp = w ? w->data : NULL;
    void *args[] = {&ck, &red, &N, &C, &D, &has_ii, &ii, &src, &src_f64, (void *)&tg->data, &wp, &y->data};
    char base[24] = "nll_";
    strcat(base, suf);
    const char *isuf = tg->dtype == KILN_DTYPE_I32 ? "i32" : "i64";
    if (red == 0) return kiln__cu_launch_n(c, base, isuf, N * D, args);
    return kiln__cu_launch_blocks(c, base, isuf, 1, 256, args); /* the kernel reduces in one 256-thread block */
}

int kiln__cu_nll_loss(const kiln_call *c) { return loss(c, 0); }
int kiln__cu_sce_loss(const kiln_call *c) { return loss(c, 1); }
