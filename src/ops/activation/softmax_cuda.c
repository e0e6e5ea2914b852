/*
 * softmax_cuda.c — CUDA launchers of Softmax, LogSoftmax and Hardmax (softmax.cu):
 * the tensor is [outer, len, inner] around the axis (opset < 13: len takes
 * every dim from the axis on, inner = 1); rows of contiguous elements go
 * one block per row, strided columns one thread per column.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

/* log: 0 Softmax, 1 LogSoftmax, 2 Hardmax. */
static int softmax(const kiln_call *c, int log, int coerce) {
    const kiln_tensor *x = &c->in[0];
    const char *suf = kiln__cu_suffix(x->dtype);
    if (!suf || !(x->dtype == KILN_DTYPE_F32 || x->dtype == KILN_DTYPE_F16 || x->dtype == KILN_DTYPE_BF16))
        return kiln__cu_type_err(log == 2 ? "Hardmax" : log ? "LogSoftmax" : "Softmax", x->dtype);
    if (!kiln__cu_contig(x) || !kiln__cu_contig(&c->out[0]))
        return kiln_set_error(KILN_EUNSUPPORTED, "Softmax: CUDA kernel needs contiguous tensors");
    int r = x->ndim;
    int64_t axis = kiln__cu_attr_int(c, "axis", 0);
    if (axis < 0) axis += r;
    int64_t outer = 1, len = 1, inner = 1;
    for (int i = 0; i < r; i++) {
        if (i < axis) outer *= x->dims[i];
        else if (coerce || i == axis) len *= x->dims[i];
        else inner *= x->dims[i];
    }
    if (outer * len * inner == 0) return 0;
    if (log == 2) {
        void *args[] = {&outer, &len, &inner, (void *)&x->data, &c->out[0].data};
        return kiln__cu_launch_n(c, "hardmax", suf, outer * inner, args);
    }
    if (inner == 1) {
        void *args[] = {&len, (void *)&x->data, &c->out[0].data, &log};
        return kiln__cu_launch_blocks(c, "softmax_rows", suf, outer, kiln__cu_block_for(len), args);
    }
    void *args[] = {&outer, &len, &inner, (void *)&x->data, &c->out[0].data, &log};
    return kiln__cu_launch_n(c, "softmax_cols", suf, outer * inner, args);
}

int kiln__cu_softmax1(const kiln_call *c) { return softmax(c, 0, 1); }
int kiln__cu_softmax13(const kiln_call *c) { return softmax(c, 0, 0); }
int kiln__cu_logsoftmax1(const kiln_call *c) { return softmax(c, 1, 1); }
int kiln__cu_logsoftmax13(const kiln_call *c) { return softmax(c, 1, 0); }
int kiln__cu_hardmax1(const kiln_call *c) { return softmax(c, 2, 1); }
int kiln__cu_hardmax13(const kiln_call *c) { return softmax(c, 2, 0); }
