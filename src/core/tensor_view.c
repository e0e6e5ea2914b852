/*
 * tensor_view.c — the one place that turns (data, dtype, format, device,
 * dims) into a kiln_tensor view, and a tensor's dims into its byte size.
 *
 * The builder (folding, timing, fusion checks), the engine (prepack views,
 * epilogue constants) and contexts (every layer's inputs and outputs) all
 * build views; they used to do it each in their own way and had drifted
 * (one padded blocked channels only from rank 3, another at any rank; one
 * computed channels-last strides, the others row-major for every format).
 * A CUDA backend adds device memory: the location travels in the view, so
 * a kernel can refuse a pointer it cannot read.
 */
#include "kiln_int.h"

/* Largest tensor kiln will size (256 TiB): far above any real tensor, far
 * below where uint64 products of dims could wrap. */
#define MAX_TENSOR_BYTES ((uint64_t)1 << 48)

/* Channel block of a blocked layout, or 1. */
static int64_t channel_block(kiln_format fmt, int ndim) {
    if (ndim < 3) return 1; /* blocked layouts are defined for N, C, spatial... */
    if (fmt == KILN_FORMAT_NCHW8C) return 8;
    if (fmt == KILN_FORMAT_NCHW16C) return 16;
    return 1;
}

void kiln__tensor_strides(kiln_tensor *t) {
    /* A dim not known yet (< 0) counts as 1, so the strides of the known
     * inner dims stay right. */
#define DIM(d) (t->dims[d] > 0 ? t->dims[d] : 1)
    int64_t s = 1;
    if (t->format == KILN_FORMAT_NHWC && t->ndim >= 3) {
        /* channels last: C innermost, then the spatial dims, then N */
        t->strides[1] = 1;
        s = DIM(1);
        for (int d = t->ndim - 1; d >= 2; d--) {
            t->strides[d] = s;
            s *= DIM(d);
        }
        t->strides[0] = s;
        return;
    }
    /* LINEAR, and blocked layouts whose kernels index the padded blocks
     * themselves: row-major over the logical dims */
    for (int d = t->ndim - 1; d >= 0; d--) {
        t->strides[d] = s;
        s *= DIM(d);
    }
#undef DIM
}

void kiln__tensor_view(kiln_tensor *v, void *data, kiln_dtype dtype, kiln_format format,
                       kiln_device_kind device, int ndim, const int64_t *dims) {
    memset(v, 0, sizeof *v);
    v->data = data;
    v->dtype = dtype;
    v->format = format;
    v->device = device;
    v->ndim = ndim;
    for (int d = 0; d < ndim; d++) v->dims[d] = dims[d];
    kiln__tensor_strides(v);
}

int kiln__tensor_bytes(kiln_dtype dtype, kiln_format format, int ndim, const int64_t *dims,
                       uint64_t *bytes) {
    uint64_t n = kiln_dtype_size(dtype), m = n;
    int64_t blk = channel_block(format, ndim);
    for (int d = 0; d < ndim; d++) {
        int64_t k = dims[d];
        if (k < 0) return kiln__err(KILN_ESHAPE, "dim %d = %lld (negative)", d, (long long)k);
        if (d == 1) k = (k + blk - 1) / blk * blk;
        /* m: the same product with zero dims as 1, so the strides of an
         * empty tensor fit too (a 0 must not hide [0, 2^60, 2^60]) */
        if (__builtin_mul_overflow(n, (uint64_t)k, &n) || n > MAX_TENSOR_BYTES ||
            __builtin_mul_overflow(m, (uint64_t)(k ? k : 1), &m) || m > MAX_TENSOR_BYTES)
            return kiln__err(KILN_ESHAPE, "too large (dim %d = %lld, more than %llu bytes)", d,
                             (long long)dims[d], (unsigned long long)MAX_TENSOR_BYTES);
    }
    *bytes = n;
    return 0;
}
