/*
 * cuda_kernel_args.h — the by-value arguments of kiln's built-in CUDA
 * kernels, shared by the kernels (src/ops/<family>/<family>.cu, compiled by nvcc)
 * and their host launchers (src/ops/<family>/<family>_cuda.c, plain C, no CUDA
 * headers).  Plain C with fixed-width fields only, so both compilers lay
 * the structs out the same way; every struct is passed to cuLaunchKernel
 * by value (a pointer to it in the args array).
 *
 * Conventions: sizes and strides are in elements; a stride of 0 broadcasts
 * and a negative stride walks backwards (Slice with negative steps: the
 * launcher points the base at the first element read).  Launchers coalesce
 * dims before filling an iterator, so most kernels see ndim <= 3.
 */
#ifndef KILN_CUDA_KERNEL_ARGS_H
#define KILN_CUDA_KERNEL_ARGS_H

#include <stdint.h>

#define KILN_CU_MAX_DIMS 8

/* An n-d iteration space (row-major over dims) and the element strides of
 * up to three operands in it.  Element i of the space sits at
 * sum_d idx_d(i) * st[k][d] in operand k.  small = 1: the launcher checked
 * that numel and every operand offset fit in int32, so kernels may index in
 * 32 bits. */
typedef struct kiln_cu_iter {
    int32_t ndim;
    int32_t small;
    int64_t numel;
    int64_t dims[KILN_CU_MAX_DIMS];
    int64_t st[3][KILN_CU_MAX_DIMS];
} kiln_cu_iter;

/* The tiled transpose of copy.cu (transpose_<size>): per point of `batch`
 * (st[0]: source offsets, st[1]: destination offsets), a P x Q block where
 * P is contiguous in the source (destination stride dp) and Q contiguous in
 * the destination (source stride sq), moved through 32 x 32 shared-memory
 * tiles (tp x tq of them per batch point, nblocks in all) so that reads
 * and writes are both coalesced.  Filled by kiln__cu_copy_plan. */
typedef struct kiln_cu_transpose {
    kiln_cu_iter batch;
    int64_t P, Q, sq, dp;
    int64_t tp, tq, nblocks;
} kiln_cu_transpose;

/* Fused attention (kiln::attention, src/ops/nn/attention.cu): per batch-head
 * (bh of them) Y [sq, dv] = softmax(scale Q K^T) V with Q [sq, d], V [sk,
 * dv] and K [sk, d] (k_trans 0) or K^T [d, sk] (k_trans 1), all contiguous;
 * d, dv <= KILN_CU_ATTN_DMAX. */
#define KILN_CU_ATTN_DMAX 128
typedef struct kiln_cu_attn {
    int64_t bh, sq, sk;
    int32_t d, dv, k_trans;
    float scale;
} kiln_cu_attn;

/* The tiled attention kernels (attention_tc.cu: FP16/BF16 on tensor cores;
 * attention_f32.cu: FP32): the same Y = softmax(scale Q K^T) V over nb x nh
 * batch-heads, any element strides: q/k/v/ys[0..2] step one batch, one
 * head, one row (query or key); the head dim is contiguous (stride 1)
 * except K's, which steps kd (1, or Sk for K^T).  scale_log2 = scale *
 * log2(e).  vec: every row stride a multiple of 8 elements, d and dv too,
 * pointers 16-byte aligned (the kernels then move 16 bytes at a time).
 * has_mask: an additive mask (added to the scaled scores) with element
 * strides ms[0..3] per batch, head, query, key (0 where it broadcasts). */
typedef struct kiln_cu_flash {
    int64_t nb, nh, sq, sk;
    int64_t qs[3], ks[3], vs[3], ys[3], ms[4];
    int64_t kd;
    int32_t d, dv, vec, has_mask;
    float scale_log2;
} kiln_cu_flash;

/* Residual Add + LayerNormalization (kiln::add_layernorm,
 * src/ops/nn/add_norm.cu): rows of `inner` <= KILN_CU_ADDNORM_MAX elements,
 * y = (x - mean) * rstd * scale[i % se] + bias[i % be] with x = a + b. */
#define KILN_CU_ADDNORM_MAX 8192
typedef struct kiln_cu_addnorm {
    int64_t rows, inner, se, be;
    float eps;
} kiln_cu_addnorm;

/* Elementwise functions, shared by the unary kernels and the epilogues of
 * Conv / BatchNormalization / bias kernels (a, b: the op's float
 * parameters, e.g. Clip min/max, LeakyRelu alpha, HardSigmoid alpha/beta). */
typedef enum kiln_cu_act {
    KILN_CU_ACT_NONE = 0,   /* identity */
    KILN_CU_ACT_RELU,
    KILN_CU_ACT_CLIP,       /* min(max(x, a), b) */
    KILN_CU_ACT_SIGMOID,
    KILN_CU_ACT_HARDSIGMOID, /* max(0, min(1, a x + b)) */
    KILN_CU_ACT_HARDSWISH,
    KILN_CU_ACT_TANH,
    KILN_CU_ACT_LEAKYRELU,  /* x < 0 ? a x : x */
    KILN_CU_ACT_ELU,        /* x < 0 ? a (exp(x) - 1) : x */
    KILN_CU_ACT_SELU,       /* b (x < 0 ? a (exp(x) - 1) : x) */
    KILN_CU_ACT_GELU,       /* x Phi(x) (erf form) */
    KILN_CU_ACT_GELU_TANH,  /* tanh approximation */
    KILN_CU_ACT_SOFTPLUS,
    KILN_CU_ACT_SOFTSIGN,
    KILN_CU_ACT_MISH,
    KILN_CU_ACT_SILU,       /* x sigmoid(x) */
    KILN_CU_ACT_THRESHOLDEDRELU, /* x > a ? x : 0 */
    KILN_CU_ACT_CELU,       /* max(0,x) + min(0, a (exp(x/a) - 1)) */
    KILN_CU_ACT_EXP,
    KILN_CU_ACT_LOG,
    KILN_CU_ACT_SQRT,
    KILN_CU_ACT_RSQRT_,     /* internal */
    KILN_CU_ACT_RECIPROCAL,
    KILN_CU_ACT_ABS,
    KILN_CU_ACT_NEG,
    KILN_CU_ACT_FLOOR,
    KILN_CU_ACT_CEIL,
    KILN_CU_ACT_ROUND,      /* half to even */
    KILN_CU_ACT_SIGN,
    KILN_CU_ACT_ERF,
    KILN_CU_ACT_SIN,
    KILN_CU_ACT_COS,
    KILN_CU_ACT_TAN,
    KILN_CU_ACT_ASIN,
    KILN_CU_ACT_ACOS,
    KILN_CU_ACT_ATAN,
    KILN_CU_ACT_SINH,
    KILN_CU_ACT_COSH,
    KILN_CU_ACT_ASINH,
    KILN_CU_ACT_ACOSH,
    KILN_CU_ACT_ATANH,
    KILN_CU_ACT_AFFINE,     /* a x + b (Mean's 1/n, Scale) */
    KILN_CU_ACT_SHRINK,     /* x < -a ? x + b : x > a ? x - b : 0 (a = lambd, b = bias) */
    KILN_CU_ACT_COUNT_
} kiln_cu_act;
/* code + KILN_CU_ACT_THEN_AFFINE: the parameterless activation `code`, then
 * a y + b (a fused chain "HardSwish + Mul + Add": PP-LCNet's learnable
 * affine after each activation; engine/epilogue.c). */
#define KILN_CU_ACT_THEN_AFFINE 256

/* Binary ops of the broadcasting kernels (binary_<T>, compare_<T>). */
typedef enum kiln_cu_binop {
    KILN_CU_ADD = 0,
    KILN_CU_SUB,
    KILN_CU_MUL,
    KILN_CU_DIV,     /* integers: truncate, x / 0 = 0 (as the CPU op) */
    KILN_CU_POW,
    KILN_CU_MAX,     /* NaN propagates */
    KILN_CU_MIN,
    KILN_CU_FMOD,    /* sign of the dividend (C fmod) */
    KILN_CU_MOD,     /* sign of the divisor (Python) */
    KILN_CU_PRELU,   /* x < 0 ? y x : x */
    KILN_CU_BAND,
    KILN_CU_BOR,
    KILN_CU_BXOR,
    KILN_CU_SHL,
    KILN_CU_SHR,
    /* compare_<T> / logic_bool: bool (uint8) output */
    KILN_CU_EQ,
    KILN_CU_LT,
    KILN_CU_GT,
    KILN_CU_LE,
    KILN_CU_GE,
    KILN_CU_AND,
    KILN_CU_OR,
    KILN_CU_XOR,
    KILN_CU_BINOP_COUNT_
} kiln_cu_binop;

/* 2-D convolution / pooling geometry (1-D: h = kh = 1).  Input [n, c, h, w],
 * output [n, k, oh, ow]; out (y, x) reads in (y*sh - ph + i*dh,
 * x*sw - pw + j*dw). */
typedef struct kiln_cu_conv {
    int64_t n, c, h, w;
    int64_t k, oh, ow;
    int32_t kh, kw, sh, sw, ph, pw, dh, dw;
    int32_t group;
    int32_t act;         /* kiln_cu_act applied after the bias */
    float act_a, act_b;
} kiln_cu_conv;

/* 3-D Conv / ConvTranspose (conv3d_<T>: conv.c / conv_transpose.c resolve
 * the geometry, the same as their CPU kernels').  Input [n, c, id...],
 * output [n, m, od...]; Conv weights [m, c/group, k...]: out z reads in
 * z*s - pb + a*d; ConvTranspose weights [c, m/group, k...]: out z gathers
 * in (z + pb - a*d) / s where that divides exactly. */
typedef struct kiln_cu_conv3d {
    int64_t n, c, m, group;
    int64_t id[3], od[3];
    int32_t k[3], s[3], d[3], pb[3];
    int32_t transpose;
    int32_t act;         /* kiln_cu_act applied after the bias */
    float act_a, act_b;
} kiln_cu_conv3d;

/* Pooling over up to 3 spatial dims (pool.c's geometry; 1-D/2-D pools put
 * 1 in the leading dims): planes = N * C, input [planes, id[0..2]], output
 * [planes, o[0..2]]; pb/pe: pads at begin/end.  chans > 0: x, y and
 * Indices are NHWC with that many channels (innermost). */
typedef struct kiln_cu_pool {
    int64_t planes;
    int64_t id[3], o[3];
    int32_t k[3], s[3], d[3], pb[3], pe[3];
    int32_t kind;        /* 0 max, 1 average, 2 Lp */
    int32_t count_pad;   /* AveragePool count_include_pad */
    int32_t order;       /* MaxPool storage_order (indices column-major) */
    float p;             /* LpPool p */
    int64_t chans;       /* NHWC: channels; 0: NCHW planes */
} kiln_cu_pool;

/* Resize (resize.c semantics): per dim, output index o maps to a source
 * coordinate by the coordinate mode (in double, with the float32 scale as
 * the ONNX reference), then to 1 (nearest), 2 (linear) or 4 (cubic) taps;
 * dims with in == out and scale 1 are copied. */
typedef struct kiln_cu_resize {
    int32_t ndim;
    int32_t mode;        /* 0 nearest, 1 linear, 2 cubic */
    int32_t nearest;     /* 0 round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil, 4 legacy (opset 10) */
    int32_t coord;       /* 0 half_pixel, 1 pytorch_half_pixel, 2 align_corners, 3 asymmetric,
                          * 4 tf_half_pixel_for_nn, 5 tf_crop_and_resize, 6 half_pixel_symmetric */
    int32_t have_sizes;  /* output lengths came from `sizes` (not scale * in) */
    int32_t exclude_outside;
    double cubic_a;
    double extrapolation;
    int64_t in_dims[KILN_CU_MAX_DIMS];
    int64_t out_dims[KILN_CU_MAX_DIMS];
    double scale[KILN_CU_MAX_DIMS];   /* ONNX scale (out / in) per dim */
    float roi_start[KILN_CU_MAX_DIMS], roi_end[KILN_CU_MAX_DIMS]; /* tf_crop_and_resize */
} kiln_cu_resize;

/* Normalization over planes of `inner` contiguous elements (Layer-, Instance-
 * and GroupNormalization; norm.c's norm_task): y = (x - mean) * rstd * s + b
 * with s/b chosen by `affine`:
 *   0 per element: scale[i % se], bias[i % be] (LayerNormalization),
 *   1 per plane: scale[(p / div) % mod] (InstanceNormalization),
 *   2 per channel inside a plane of `groups` groups: (p % groups) * cpg + i / sub. */
typedef struct kiln_cu_norm {
    int64_t planes, inner;
    int32_t affine;
    float eps;
    int64_t se, be, div, mod, sub, cpg, groups;
    int32_t act;
    float act_a, act_b;
} kiln_cu_norm;

/* Reductions (reduce_<T>): one output per element of `out` (dims of the kept
 * axes; st[0] = input strides, st[1] = output strides), each reducing the
 * elements of `red` (dims of the reduced axes, st[0] = input strides). */
typedef enum kiln_cu_reduce_op {
    KILN_CU_RSUM = 0,
    KILN_CU_RMEAN,
    KILN_CU_RMAX,
    KILN_CU_RMIN,
    KILN_CU_RPROD,
    KILN_CU_RL1,
    KILN_CU_RL2,
    KILN_CU_RLOGSUM,
    KILN_CU_RLOGSUMEXP,
    KILN_CU_RSUMSQUARE,
    KILN_CU_RARGMAX,     /* int64 output: first (or last, see reduce_arg_) index */
    KILN_CU_RARGMIN,
    KILN_CU_REDUCE_COUNT_
} kiln_cu_reduce_op;

/* Pad (pad_<bytes>): output element o reads input o - begin per dim;
 * outside the input: mode 0 constant (value's bytes), 1 reflect, 2 edge,
 * 3 wrap. */
typedef struct kiln_cu_pad {
    int32_t ndim;
    int32_t mode;
    uint64_t value;      /* the constant's bit pattern, in the element type */
    int64_t out_dims[KILN_CU_MAX_DIMS];
    int64_t in_dims[KILN_CU_MAX_DIMS];
    int64_t begin[KILN_CU_MAX_DIMS];
} kiln_cu_pad;

/* LSTM / GRU / RNN (rnn.c semantics, FP32): one block per (batch, direction)
 * walks the time steps.  act/alpha/beta: the activations of each direction
 * (rnn.c's kinds: 0 sigmoid, 1 tanh, 2 relu, 3 affine, 4 leakyrelu,
 * 5 thresholdedrelu, 6 scaledtanh, 7 hardsigmoid, 8 elu, 9 softsign,
 * 10 softplus), nacts per direction. */
typedef struct kiln_cu_rnn {
    int64_t S, B, I, H;
    int32_t cell;        /* 0 RNN, 1 GRU, 2 LSTM */
    int32_t ndir, rev_only, layout, lbr, input_forget;
    int32_t nacts;
    float clip;          /* 0: none */
    int32_t act[6];
    float alpha[6], beta[6];
} kiln_cu_rnn;

/* Index tuples of GatherND / ScatterND (gather_scatter.c's nd_walk): per
 * indexed dim its length and data stride (elements). */
typedef struct kiln_cu_nd {
    int64_t dd[KILN_CU_MAX_DIMS];
    int64_t st[KILN_CU_MAX_DIMS];
} kiln_cu_nd;

/* GridSample (src/ops/tensor/grid_sample_math.h, shared by both devices): X planes
 * [H, W]; mode 0 bilinear, 1 nearest, 2 bicubic; pad 0 zeros, 1 border,
 * 2 reflection; align: align_corners. */
typedef struct kiln_cu_grid_sample {
    int64_t H, W;
    int32_t mode, pad, align;
} kiln_cu_grid_sample;

/* A few int64 values passed by value (Shape's dims): v[0..n). */
typedef struct kiln_cu_vals {
    int64_t n;
    int64_t v[KILN_CU_MAX_DIMS];
} kiln_cu_vals;

/* Errors found by a kernel (an index out of range): the context's fault
 * record lives in page-locked host memory, mapped into the device's
 * address space; a kernel that finds bad data fills it (the first report
 * wins, best effort under races) and the host reads it at its next sync
 * of the run and turns it into an error naming the layer.  code 0: none. */
typedef struct kiln_cu_fault {
    uint64_t tag;        /* the launch's kiln_call.layer pointer (which layer) */
    int64_t value;       /* the offending value */
    int64_t lo, hi;      /* the valid range [lo, hi) */
    int64_t pos;         /* flat position of the element that holds it */
    int32_t code;        /* kiln_cu_fault_code */
    int32_t input;       /* input number of that tensor */
} kiln_cu_fault;

enum kiln_cu_fault_code { KILN_CU_FAULT_NONE = 0, KILN_CU_FAULT_INDEX = 1 };

/* What a checking kernel gets by value: where to report (NULL: no record,
 * e.g. while the builder times tactics; the kernel then writes zeros for
 * a bad index) and its launch's tag. */
typedef struct kiln_cu_check {
    kiln_cu_fault *fault;
    uint64_t tag;
} kiln_cu_check;

#endif /* KILN_CUDA_KERNEL_ARGS_H */
