/*
 * sample_cuda.c — the shared GPU helpers of the sample ops (sample_cuda.h)
 * and the add kernels of elemwise_add and inplace_add.
 */
#include "sample_cuda.h"

int ks_cuda_module(const char *source, const char *what, kiln_cuda_module **slot, kiln_cuda_module **m) {
    *m = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (*m) return 0;
    int rc = kiln_cuda_module_get(source, KILN_AOT_LANG_CUDA, what, m); /* same text, same module */
    if (!rc) __atomic_store_n(slot, *m, __ATOMIC_RELEASE);
    return rc;
}

int ks_cuda_launch_1d(const kiln_call *c, kiln_cuda_module *m, const char *entry, int64_t n, void **args) {
    if (n <= 0) return 0;
    int64_t blocks = (n + 255) / 256;
    if (blocks > 0x7fffffff) return kiln_set_error(KILN_EUNSUPPORTED, "%s: %lld elements are too many", entry, (long long)n);
    unsigned grid[3] = {(unsigned)blocks, 1, 1}, block[3] = {256, 1, 1};
    return kiln_cuda_launch(c, m, entry, grid, block, 0, args);
}

static const char add_src[] = KS_CUDA_HALF
    "extern \"C\" __global__ void ks_add_f32(const float *a, const float *b, float *y, long long n) {\n"
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (i < n) y[i] = a[i] + b[i];\n"
    "}\n"
    "extern \"C\" __global__ void ks_add_f16(const unsigned short *a, const unsigned short *b, unsigned short *y,\n"
    "                                        long long n) {\n"
    "    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n"
    "    if (i < n) y[i] = ks_f2h(ks_h2f(a[i]) + ks_h2f(b[i]));\n"
    "}\n";

int ks_cuda_add(const kiln_call *c) {
    static kiln_cuda_module *slot;
    kiln_cuda_module *m;
    int rc = ks_cuda_module(add_src, "sample add kernels", &slot, &m);
    if (rc) return rc;
    long long n = kiln_tensor_numel(&c->out[0]);
    void *a = c->in[0].data, *b = c->in[1].data, *y = c->out[0].data;
    void *args[] = {&a, &b, &y, &n};
    return ks_cuda_launch_1d(c, m, c->out[0].dtype == KILN_DTYPE_F16 ? "ks_add_f16" : "ks_add_f32", n, args);
}
