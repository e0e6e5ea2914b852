/*
 * cuda_impls.h — the CUDA implementations of the built-in ops, as the CPU
 * op files reference them (kiln_quick_op.cuda_impl / cuda_formats).  The
 * launchers live in src/ops/<family>/<family>_cuda.c; this header needs
 * only the public plugin API, so the CPU files stay free of CUDA.
 *
 * Launchers that serve several ops take the ONNX op name and map it to
 * their kernel's op code.  Types the GPU kernels take are listed in the
 * KILN_CU_T_* combination strings; FP16/BF16 compute in float.
 */
#ifndef KILN_CUDA_IMPLS_H
#define KILN_CUDA_IMPLS_H

#include "device/cuda/cuda_kernel_args.h"
#include "kiln/plugin.h"

#define KILN_CU_T_FLOAT "FP32|FP16|BF16"
/* The types of the NHWC rows (docs/CUDA.md "NHWC"): the 16-bit floats,
 * where the convs' NHWC tactics are; FP32 networks stay LINEAR. */
#define KILN_CU_T_NHWC "FP16|BF16"
#define KILN_CU_T_NUM "FP32|FP16|BF16|INT32|INT64"
#define KILN_CU_T_ANY "FP32|FP16|BF16|INT32|INT64|INT8|UINT8|BOOL"
/* every numeric type (the broadcasting binary kernels) and the integers */
#define KILN_CU_T_NUM_ALL KILN_CU_T_NUM "|FP64|INT8|INT16|UINT8|UINT16|UINT32|UINT64"
#define KILN_CU_T_INT_ALL "INT8|INT16|INT32|INT64|UINT8|UINT16|UINT32|UINT64"
/* every type a tensor can have on the GPU (ops that read only dims: Shape, Size) */
#define KILN_CU_T_ALL KILN_CU_T_NUM_ALL "|BOOL"

/* math/elementwise_cuda.c */
int kiln__cu_binary(const kiln_call *c, const char *op); /* Add ... Xor, PRelu, Bitwise* */
int kiln__cu_mod(const kiln_call *c);
int kiln__cu_bitshift(const kiln_call *c); /* unsigned integers */
int kiln__cu_variadic(const kiln_call *c, const char *op); /* Sum Mean Max Min */
int kiln__cu_where(const kiln_call *c);
int kiln__cu_not(const kiln_call *c);

/* math/topk_cuda.c: FP32 FP16 BF16 FP64 INT32 INT64 (K input on the host) */
int kiln__cu_topk(const kiln_call *c);

/* math/cumsum_cuda.c: FP32 FP16 BF16 FP64 INT32 INT64 (axis on the host) */
int kiln__cu_cumsum(const kiln_call *c);

/* activation/activation_cuda.c */
int kiln__cu_unary(const kiln_call *c, const char *op); /* Relu ... Atanh, Gelu, Shrink, IsNaN, IsInf */
int kiln__cu_clip(const kiln_call *c);                  /* Clip-6 and Clip-11+ (inputs 1, 2 on the host) */

/* activation/softmax_cuda.c (opset 1 coerces to 2-D, 13 takes one axis) */
int kiln__cu_softmax1(const kiln_call *c);
int kiln__cu_softmax13(const kiln_call *c);
int kiln__cu_logsoftmax1(const kiln_call *c);
int kiln__cu_logsoftmax13(const kiln_call *c);
int kiln__cu_hardmax1(const kiln_call *c);
int kiln__cu_hardmax13(const kiln_call *c);

/* nn/norm_cuda.c */
int kiln__cu_batchnorm(const kiln_call *c); /* inference; training_mode=1 is EUNSUPPORTED */
int kiln__cu_layernorm(const kiln_call *c);
int kiln__cu_instancenorm(const kiln_call *c);
int kiln__cu_groupnorm18(const kiln_call *c); /* scale/bias per group */
int kiln__cu_groupnorm21(const kiln_call *c); /* scale/bias per channel */

/* nn/attention_cuda.c: kiln::attention, one flash-style kernel (FP32 FP16 BF16; head dims <= 128) */
int kiln__cu_attention(const kiln_call *c);
/* nn/add_norm_cuda.c: kiln::add_layernorm, one pass per row (FP32 FP16 BF16; rows <= 8192) */
int kiln__cu_add_layernorm(const kiln_call *c);

/* nn/loss_cuda.c: any float type; targets out of range reported at the next sync */
int kiln__cu_nll_loss(const kiln_call *c);
int kiln__cu_sce_loss(const kiln_call *c);
size_t kiln__cu_loss_workspace(const kiln_call *c);

/* nn/conv_cuda.c: Conv tactics 0 auto, 1 direct, 2 im2col + cuBLASLt GEMM */
int kiln__cu_conv(const kiln_call *c);
size_t kiln__cu_conv_workspace(const kiln_call *c);
int kiln__cu_conv_transpose(const kiln_call *c);
/* nn/conv3d_cuda.c: 3-D Conv / ConvTranspose, direct (conv.c and
 * conv_transpose.c resolve the geometry) */
int kiln__cu_conv3d(const kiln_call *c, const kiln_cu_conv3d *geo);
/* Its geometry from the CPU ops' (3 spatial dims: id, od, k, s, d, pb). */
static inline kiln_cu_conv3d kiln__cu_conv3d_geo(int64_t n, int64_t c, int64_t m, int64_t group, const int64_t *id,
                                                 const int64_t *od, const int64_t *k, const int64_t *s,
                                                 const int64_t *d, const int64_t *pb, int transpose) {
    kiln_cu_conv3d p = {.n = n, .c = c, .m = m, .group = group, .transpose = transpose};
    for (int i = 0; i < 3; i++) {
        p.id[i] = id[i], p.od[i] = od[i];
        p.k[i] = (int32_t)k[i], p.s[i] = (int32_t)s[i], p.d[i] = (int32_t)d[i], p.pb[i] = (int32_t)pb[i];
    }
    return p;
}

/* math/gemm_cuda.c: tactic t > 0 = cuBLASLt heuristic algorithm t - 1 */
int kiln__cu_matmul(const kiln_call *c);
int kiln__cu_gemm(const kiln_call *c);
size_t kiln__cu_gemm_workspace(const kiln_call *c);

/* nn/pool_cuda.c */
int kiln__cu_maxpool(const kiln_call *c);
int kiln__cu_avgpool(const kiln_call *c);
int kiln__cu_lppool(const kiln_call *c);
int kiln__cu_gmaxpool(const kiln_call *c);
int kiln__cu_gavgpool(const kiln_call *c);
int kiln__cu_glppool(const kiln_call *c);

/* tensor/copy_cuda.c: data movement by element size */
int kiln__cu_copy_input(const kiln_call *c); /* Reshape Flatten Squeeze Unsqueeze Identity */
int kiln__cu_transpose(const kiln_call *c);
int kiln__cu_concat(const kiln_call *c);
int kiln__cu_split(const kiln_call *c);
int kiln__cu_slice(const kiln_call *c);      /* Slice-10+: inputs 1..4 on the host */
int kiln__cu_expand(const kiln_call *c);
int kiln__cu_tile(const kiln_call *c);
int kiln__cu_pad(const kiln_call *c);        /* Pad-11+: inputs 1..3 on the host */
int kiln__cu_gather(const kiln_call *c);
int kiln__cu_gather_elements(const kiln_call *c);
int kiln__cu_depth_to_space(const kiln_call *c);
int kiln__cu_space_to_depth(const kiln_call *c);
int kiln__cu_dropout(const kiln_call *c);     /* inference: copy, mask all true */
/* n (<= KILN_CU_MAX_DIMS) int64 values the host knows into output 0 (Shape,
 * Size: shape_ops.c computes them; the input's data is never read) */
int kiln__cu_put_i64(const kiln_call *c, int n, const int64_t *v);

/* reduction/reduce_cuda.c (axes input 1 on the host) */
int kiln__cu_reduce(const kiln_call *c, const char *op);
int kiln__cu_argmax(const kiln_call *c);
int kiln__cu_argmin(const kiln_call *c);

/* tensor/scatter_cuda.c: int64 indices, every numeric type and bool;
 * indices out of range reported at the next sync */
int kiln__cu_gather_nd(const kiln_call *c);
int kiln__cu_scatter_nd(const kiln_call *c);
int kiln__cu_scatter_elements(const kiln_call *c);

/* tensor/trilu_cuda.c: fills by position, any type (Trilu's k and
 * ConstantOfShape's shape on the host) */
int kiln__cu_trilu(const kiln_call *c);
int kiln__cu_eye_like(const kiln_call *c);
int kiln__cu_constant_of_shape(const kiln_call *c);

/* rnn/rnn_cuda.c: LSTM/GRU/RNN in FP32 without sequence_lens; rnn.c
 * resolves the attributes into a kiln_cu_rnn (cell, directions,
 * activations, clip, layout, ...) and hands them over */
int kiln__cu_rnn(const kiln_call *c, const kiln_cu_rnn *p);

/* tensor/resize_cuda.c: resize.c resolves the parameters (its rparams)
 * into a kiln_cu_resize and hands them over */
int kiln__cu_resize(const kiln_call *c, const kiln_cu_resize *a);
/* quantization/quant_cuda.c: Quantize-/DequantizeLinear (quant.c resolves
 * the per-axis geometry: scale index (i / inner) % nax; lo..hi the integer
 * type's range) and DynamicQuantizeLinear (FP32 -> u8) */
int kiln__cu_qdq(const kiln_call *c, int quantize, int64_t inner, int64_t nax, double lo, double hi);
int kiln__cu_dql(const kiln_call *c);
/* tensor/grid_sample_cuda.c: GridSample-16, FP32 (grid_sample.c resolves
 * the geometry; the arithmetic is grid_sample_math.h on both devices) */
int kiln__cu_grid_sample(const kiln_call *c, const kiln_cu_grid_sample *geo);
/* tensor/cast_cuda.c: Cast and CastLike */
int kiln__cu_cast(const kiln_call *c);

#endif /* KILN_CUDA_IMPLS_H */
