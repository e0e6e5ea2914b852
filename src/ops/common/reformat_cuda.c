/*
 * reformat_cuda.c — kiln::reformat on the CUDA device.  The builder puts a
 * reformat on the GPU for three jobs: a copy between memory spaces (host
 * <-> device, or device <-> device for in-place safety), a dtype
 * conversion between two GPU tensors (F32/F16/BF16, LINEAR), and a LINEAR
 * <-> NHWC change of a 4-D tensor, of any one type or with a change between
 * float types (kiln_relayout_b<bits> / kiln_relayout_<S>_<D> of
 * reformat.cu).  A conversion across a move is
 * split by the builder into a copy and a GPU step.  Other conversions with
 * a host side are done on the CPU by the builder's choice, so anything else
 * here is an internal error, said clearly.
 */
#include "device/cuda/cuda_int.h"
#include "device/device.h"

int kiln__reformat_host(const kiln_call *c); /* reformat.c */

static int type_index(kiln_dtype t) {
    return t == KILN_DTYPE_F32 ? 0 : t == KILN_DTYPE_F16 ? 1 : t == KILN_DTYPE_BF16 ? 2 : -1;
}

static const char *cast_name(kiln_dtype s, kiln_dtype d) {
    static const char *names[3][3] = {
        {NULL, "kiln_cast_f32_f16", "kiln_cast_f32_bf16"},
        {"kiln_cast_f16_f32", NULL, "kiln_cast_f16_bf16"},
        {"kiln_cast_bf16_f32", "kiln_cast_bf16_f16", NULL},
    };
    int a = type_index(s), b = type_index(d);
    return a < 0 || b < 0 ? NULL : names[a][b];
}

static unsigned grid_for(uint64_t n) {
    uint64_t blocks = (n + 255) / 256;
    return (unsigned)(blocks < 65535 * 8 ? blocks : 65535 * 8);
}

/* LINEAR <-> NHWC (4-D, both sides on the GPU): any one type (its bits
 * moved), or a conversion between float types. */
static int relayout(const kiln_call *c, const kiln_tensor *x, kiln_tensor *y) {
    static const char *names[3][3] = {
        {NULL, "kiln_relayout_f32_f16", "kiln_relayout_f32_bf16"},
        {"kiln_relayout_f16_f32", NULL, "kiln_relayout_f16_bf16"},
        {"kiln_relayout_bf16_f32", "kiln_relayout_bf16_f16", NULL},
    };
    const int a = type_index(x->dtype), b = type_index(y->dtype);
    const size_t es = kiln_dtype_size(x->dtype);
    const char *k = x->dtype == y->dtype ? (es == 1   ? "kiln_relayout_b8"
                                            : es == 2 ? "kiln_relayout_b16"
                                            : es == 4 ? "kiln_relayout_b32"
                                            : es == 8 ? "kiln_relayout_b64"
                                                      : NULL)
                    : a >= 0 && b >= 0 ? names[a][b]
                                       : NULL;
    const int to_nhwc = y->format == KILN_FORMAT_NHWC;
    const kiln_format other = to_nhwc ? x->format : y->format;
    if (!k || x->ndim != 4 || y->ndim != 4 || other != KILN_FORMAT_LINEAR || x->device != KILN_DEVICE_CUDA ||
        y->device != KILN_DEVICE_CUDA)
        return kiln_set_error(KILN_EUNSUPPORTED, "reformat on the GPU: %s %s %dD (%s) -> %s %s (%s): the GPU converts "
                              "LINEAR <-> NHWC of 4-D tensors in device memory (one type, or between F32/F16/BF16)",
                              kiln_dtype_name(x->dtype), kiln_format_name(x->format), x->ndim,
                              x->device ? "device" : "host", kiln_dtype_name(y->dtype), kiln_format_name(y->format),
                              y->device ? "device" : "host");
    for (int d = 0; d < 4; d++)
        if (x->dims[d] != y->dims[d])
            return kiln_set_error(KILN_ESHAPE, "reformat: dim %d is %lld in the input, %lld in the output", d,
                                  (long long)x->dims[d], (long long)y->dims[d]);
    uint64_t ch = (uint64_t)x->dims[1], hw = (uint64_t)(x->dims[2] * x->dims[3]), total = (uint64_t)kiln_tensor_numel(x);
    if (!total) return 0;
    const void *xp = x->data;
    void *yp = y->data;
    int dir = to_nhwc;
    void *args[] = {&xp, &yp, &ch, &hw, &total, &dir};
    unsigned grid[3] = {grid_for(total), 1, 1}, block[3] = {256, 1, 1};
    return kiln__cuda_launch(c, k, grid, block, 0, args);
}

int kiln__reformat_cuda(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    int64_t n = kiln_tensor_numel(x);
    if (kiln_tensor_numel(y) != n)
        return kiln_set_error(KILN_ESHAPE, "reformat: input has %lld elements, output %lld", (long long)n,
                              (long long)kiln_tensor_numel(y));
    /* the stand-in device of GPU-less tests (fake.c) holds host memory */
    const int fake = kiln__cuda_fake_owns(x->data) && kiln__cuda_fake_owns(y->data);
    if (x->format != y->format) return fake ? kiln__cuda_fake_kernel(kiln__reformat_host, c) : relayout(c, x, y);
    /* one layout on both sides: a copy or an elementwise cast */
    if (x->dtype == y->dtype) {
        const kiln__device *d = kiln__device_get(KILN_DEVICE_CUDA);
        if (!d) return KILN_EDEVICE;
        return d->copy(y->data, x->data, (size_t)n * kiln_dtype_size(x->dtype), kiln_exec_stream(c->exec));
    }
    if (fake) return kiln__cuda_fake_kernel(kiln__reformat_host, c);
    const char *k = cast_name(x->dtype, y->dtype);
    if (!k || x->device != KILN_DEVICE_CUDA || y->device != KILN_DEVICE_CUDA)
        return kiln_set_error(KILN_EUNSUPPORTED, "reformat on the GPU: %s (%s) -> %s (%s) is not supported",
                              kiln_dtype_name(x->dtype), x->device ? "device" : "host", kiln_dtype_name(y->dtype),
                              y->device ? "device" : "host");
    uint64_t nn = (uint64_t)n;
    const void *xp = x->data;
    void *yp = y->data;
    void *args[] = {&xp, &yp, &nn};
    unsigned grid[3] = {grid_for(nn), 1, 1}, block[3] = {256, 1, 1};
    return kiln__cuda_launch(c, k, grid, block, 0, args);
}
