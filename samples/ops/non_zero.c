/*
 * non_zero — a data-dependent output shape.
 *
 * Input: f32 [R, C].  Outputs: 0 = int32 [N, 2], the (row, col) of every
 * nonzero element in row-major order; 1 = N as a size tensor (0-D i64).
 * N is known only after impl ran, so the shape function declares output 1 a
 * size tensor and uses its symbol in output 0's dims.  The builder plans
 * memory for the upper bound (R*C) and times at opt (R*C/2).
 *
 * On the GPU (cuda_impl) one block of 1024 threads walks the input in
 * chunks of 1024 elements; a block-wide prefix sum over "is nonzero" gives
 * each nonzero element its slot, so the indices come out in row-major order
 * as on the CPU, and the last thread's running total is N.  N is written to
 * the size tensor in device memory; the runtime copies those 8 bytes to the
 * host and waits for them (one stream sync per run, the only one in this
 * engine) before it sizes the layers that follow (docs/CUDA.md).
 */
#include <kiln/plugin.h>

#include "sample_cuda.h"

static int non_zero_shape(kiln_shape_ctx *c) {
    if (c->in[0].dtype != KILN_DTYPE_F32 || c->in[0].ndim != 2)
        return kiln_set_error(KILN_ESHAPE, "non_zero: expected an f32 [R, C] input, found rank %d %s",
                              c->in[0].ndim, kiln_dtype_name(c->in[0].dtype));
    const kiln_expr *numel = kiln_expr_mul(c->x, c->in[0].dims[0], c->in[0].dims[1]);
    c->out[1].dtype = KILN_DTYPE_I64;
    c->out[1].ndim = 0;
    const kiln_expr *n = kiln_shape_size_tensor(
        c, 1, kiln_expr_floordiv(c->x, numel, kiln_expr_const(c->x, 2)), numel);
    if (!n) return KILN_EINVAL;
    c->out[0].dtype = KILN_DTYPE_I32;
    c->out[0].ndim = 2;
    c->out[0].dims[0] = n;
    c->out[0].dims[1] = kiln_expr_const(c->x, 2);
    return 0;
}

static int non_zero_impl(const kiln_call *c) {
    const float *x = c->in[0].data;
    int32_t *idx = c->out[0].data;
    int64_t rows = c->in[0].dims[0], cols = c->in[0].dims[1], n = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < cols; k++)
            if (x[r * cols + k] != 0.0f) {
                idx[2 * n] = (int32_t)r;
                idx[2 * n + 1] = (int32_t)k;
                n++;
            }
    *(int64_t *)c->out[1].data = n;
    return 0;
}

static const char non_zero_src[] =
    "extern \"C\" __global__ void ks_non_zero(const float *x, int *idx, long long *count, long long rows,\n"
    "                                         long long cols) {\n"
    "    __shared__ int pos[1024];\n"
    "    __shared__ long long base;\n"
    "    const long long n = rows * cols;\n"
    "    const int t = threadIdx.x;\n"
    "    if (t == 0) base = 0;\n"
    "    __syncthreads();\n"
    "    for (long long start = 0; start < n; start += blockDim.x) {\n"
    "        long long i = start + t;\n"
    "        int f = i < n && x[i] != 0.0f;\n"
    "        pos[t] = f;\n"
    "        __syncthreads();\n"
    "        for (int off = 1; off < blockDim.x; off <<= 1) { /* inclusive scan */\n"
    "            int v = t >= off ? pos[t - off] : 0;\n"
    "            __syncthreads();\n"
    "            pos[t] += v;\n"
    "            __syncthreads();\n"
    "        }\n"
    "        if (f) {\n"
    "            long long k = base + pos[t] - 1;\n"
    "            idx[2 * k] = (int)(i / cols);\n"
    "            idx[2 * k + 1] = (int)(i % cols);\n"
    "        }\n"
    "        __syncthreads();\n"
    "        if (t == blockDim.x - 1) base += pos[t];\n"
    "        __syncthreads();\n"
    "    }\n"
    "    if (t == 0) *count = base;\n"
    "}\n";

static int non_zero_cuda(const kiln_call *c) {
    static kiln_cuda_module *slot;
    kiln_cuda_module *m;
    int rc = ks_cuda_module(non_zero_src, "sample::non_zero kernel", &slot, &m);
    if (rc) return rc;
    void *x = c->in[0].data, *idx = c->out[0].data, *count = c->out[1].data;
    long long rows = c->in[0].dims[0], cols = c->in[0].dims[1];
    void *args[] = {&x, &idx, &count, &rows, &cols};
    unsigned grid[3] = {1, 1, 1}, block[3] = {1024, 1, 1};
    return kiln_cuda_launch(c, m, "ks_non_zero", grid, block, 0, args);
}

static const kiln_quick_op non_zero = {
    .ns = "sample", .name = "non_zero", .version = 1,
    .min_inputs = 1, .max_inputs = 1, .num_outputs = 2,
    .shape = non_zero_shape, .impl = non_zero_impl, .cuda_impl = non_zero_cuda,
    .doc = "indices [N,2] (int32) of the nonzero elements of an f32 [R,C]; N as a size tensor",
};
KILN_OP(non_zero)
