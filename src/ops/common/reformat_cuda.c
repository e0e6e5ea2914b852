/*
 * reformat_cuda.c — kiln::reformat on the CUDA device.  The builder puts a
 * reformat on the GPU for two jobs: a copy between memory spaces (host <->
 * device, or device <-> device for in-place safety), and a dtype
 * conversion between two GPU tensors (F32/F16/BF16, LINEAR; a float cast
 * across a move is split by the builder into a copy and a GPU cast).
 * Other conversions with a host side and layout changes are done on the
 * CPU by the builder's choice, so anything else here is an internal error,
 * said clearly.
 */
#include "device/cuda/cuda_int.h"
#include "device/device.h"

int kiln__reformat_host(const kiln_call *c); /* reformat.c */

static const char *cast_name(kiln_dtype s, kiln_dtype d) {
    static const char *names[3][3] = {
        {NULL, "kiln_cast_f32_f16", "kiln_cast_f32_bf16"},
        {"kiln_cast_f16_f32", NULL, "kiln_cast_f16_bf16"},
        {"kiln_cast_bf16_f32", "kiln_cast_bf16_f16", NULL},
    };
    int a = s == KILN_DTYPE_F32 ? 0 : s == KILN_DTYPE_F16 ? 1 : s == KILN_DTYPE_BF16 ? 2 : -1;
    int b = d == KILN_DTYPE_F32 ? 0 : d == KILN_DTYPE_F16 ? 1 : d == KILN_DTYPE_BF16 ? 2 : -1;
    return a < 0 || b < 0 ? NULL : names[a][b];
}

int kiln__reformat_cuda(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    int64_t n = kiln_tensor_numel(x);
    if (kiln_tensor_numel(y) != n)
        return kiln_set_error(KILN_ESHAPE, "reformat: input has %lld elements, output %lld", (long long)n,
                              (long long)kiln_tensor_numel(y));
    if (x->format != KILN_FORMAT_LINEAR || y->format != KILN_FORMAT_LINEAR)
        return kiln_set_error(KILN_EUNSUPPORTED, "reformat on the GPU: %s -> %s layout (only LINEAR)",
                              kiln_format_name(x->format), kiln_format_name(y->format));
    if (x->dtype == y->dtype) {
        const kiln__device *d = kiln__device_get(KILN_DEVICE_CUDA);
        if (!d) return KILN_EDEVICE;
        return d->copy(y->data, x->data, (size_t)n * kiln_dtype_size(x->dtype), kiln_exec_stream(c->exec));
    }
    /* the stand-in device of GPU-less tests (fake.c) holds host memory */
    if (kiln__cuda_fake_owns(x->data) && kiln__cuda_fake_owns(y->data)) return kiln__cuda_fake_kernel(kiln__reformat_host, c);
    const char *k = cast_name(x->dtype, y->dtype);
    if (!k || x->device != KILN_DEVICE_CUDA || y->device != KILN_DEVICE_CUDA)
        return kiln_set_error(KILN_EUNSUPPORTED, "reformat on the GPU: %s (%s) -> %s (%s) is not supported",
                              kiln_dtype_name(x->dtype), x->device ? "device" : "host", kiln_dtype_name(y->dtype),
                              y->device ? "device" : "host");
    uint64_t nn = (uint64_t)n;
    const void *xp = x->data;
    void *yp = y->data;
    void *args[] = {&xp, &yp, &nn};
    uint64_t blocks = (nn + 255) / 256;
    unsigned grid[3] = {(unsigned)(blocks < 65535 * 8 ? blocks : 65535 * 8), 1, 1}, block[3] = {256, 1, 1};
    return kiln__cuda_launch(c, k, grid, block, 0, args);
}
