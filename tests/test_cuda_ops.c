/*
 * test_cuda_ops.c — every built-in op's CUDA implementation (cuda_impl:
 * host launcher + kernel) against the same op's CPU implementation, on
 * the GPU (ctest label `cuda`; exits with the skip code 77, saying why,
 * where no CUDA device or kernels are available).
 *
 * Each case calls the op's impl on the host and its cuda_impl on device
 * copies of the same fresh random inputs (outputs poisoned with 0xFF
 * bytes: a NaN for floats), once per CUDA tactic of the op, and compares:
 * exact for integers and bools, |gpu - cpu| <= tol * (1 + |cpu|) for
 * floats (FP16/BF16: both devices compute in float and round once; the
 * tolerance covers float vs double accumulation and the rounding).
 * Small integer inputs the launcher reads on the host (cuda_host_inputs)
 * stay in host memory, as the runtime keeps them.
 *
 * `test_cuda_ops --only OP [--small]` runs OP's cases alone (e.g.
 * kiln::attention), --small those with at most 2^20 output elements: quick
 * enough for compute-sanitizer's racecheck or ncu.
 */
#include "device/cuda/cuda_int.h"
#include "device/cuda/cuda_kernel_args.h"
#include "device/device.h"
#include "ops/common/ops_cuda.h"
#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "kiln_int.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#define F32 KILN_DTYPE_F32
#define F16 KILN_DTYPE_F16
#define BF16 KILN_DTYPE_BF16
#define I32 KILN_DTYPE_I32
#define I64 KILN_DTYPE_I64
#define BOOL KILN_DTYPE_BOOL
#define F64 KILN_DTYPE_F64
#define I8 KILN_DTYPE_I8
#define U8 KILN_DTYPE_U8
#define U16 KILN_DTYPE_U16
#define U32 KILN_DTYPE_U32
#define U64 KILN_DTYPE_U64
#define NONE KILN_DTYPE_UNDEFINED

typedef struct tin {
    kiln_dtype t;
    int nd;
    int64_t dims[6];
    const int64_t *ints;  /* integer data (else random) */
    const float *fl;      /* float data (else random) */
    float lo, hi;         /* random range (0, 0: -2..2) */
} tin;

typedef struct tout {
    kiln_dtype t;
    int nd;
    int64_t dims[6];
} tout;

typedef struct akv {
    const char *name;
    kiln_attr_type type;
    int64_t i;
    double f;
    int64_t n;
    const int64_t *ints;
    const char *s;
} akv;

typedef struct tcase {
    const char *op;
    int ver;
    int nin, nout;
    tin in[8];
    tout out[3];
    akv kv[6];
    double tol;
} tcase;

#define A_INT(N, V) {.name = N, .type = KILN_ATTR_INT, .i = V}
#define A_FLOAT(N, V) {.name = N, .type = KILN_ATTR_FLOAT, .f = V}
#define A_INTS(N, ...)                                                                                  \
    {.name = N, .type = KILN_ATTR_ARRAY, .n = sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t),     \
     .ints = (const int64_t[]){__VA_ARGS__}}
#define A_STR(N, V) {.name = N, .type = KILN_ATTR_STRING, .s = V}
#define INTS(...) .ints = (const int64_t[]){__VA_ARGS__}
#define FLS(...) .fl = (const float[]){__VA_ARGS__}

static const tcase cases[] = {
    /* elementwise, broadcasting, every type class */
    {"Add", 14, 2, 1, {{F32, 3, {2, 3, 4}}, {F32, 2, {3, 1}}}, {{F32, 3, {2, 3, 4}}}},
    {"Add", 14, 2, 1, {{F16, 3, {2, 3, 4}}, {F16, 1, {4}}}, {{F16, 3, {2, 3, 4}}}},
    {"Mul", 14, 2, 1, {{BF16, 2, {4, 5}}, {BF16, 1, {5}}}, {{BF16, 2, {4, 5}}}},
    {"Sub", 14, 2, 1, {{I32, 2, {2, 3}, INTS(1, -2, 3, 4, 5, -6)}, {I32, 2, {1, 3}, INTS(7, 8, -9)}}, {{I32, 2, {2, 3}}}},
    {"Div", 14, 2, 1, {{I64, 1, {4}, INTS(7, -7, 9, 100)}, {I64, 1, {4}, INTS(2, 2, -4, 7)}}, {{I64, 1, {4}}}},
    {"Pow", 15, 2, 1, {{F32, 1, {16}, .lo = 0.5f, .hi = 2}, {F32, 1, {16}}}, {{F32, 1, {16}}}},
    {"Max", 13, 3, 1, {{F32, 2, {2, 3}}, {F32, 1, {3}}, {F32, 2, {2, 1}}}, {{F32, 2, {2, 3}}}},
    {"Mean", 13, 2, 1, {{F32, 1, {9}}, {F32, 1, {9}}}, {{F32, 1, {9}}}},
    {"Less", 13, 2, 1, {{F32, 2, {3, 4}}, {F32, 1, {4}}}, {{BOOL, 2, {3, 4}}}},
    {"Equal", 13, 2, 1, {{I64, 1, {4}, INTS(1, 2, 3, 4)}, {I64, 1, {4}, INTS(1, 0, 3, 5)}}, {{BOOL, 1, {4}}}},
    {"Where", 16, 3, 1, {{BOOL, 2, {2, 1}, INTS(1, 0)}, {F32, 2, {2, 3}}, {F32, 1, {3}}}, {{F32, 2, {2, 3}}}},
    {"PRelu", 16, 2, 1, {{F32, 4, {1, 3, 2, 2}}, {F32, 3, {3, 1, 1}}}, {{F32, 4, {1, 3, 2, 2}}}},
    /* activations */
    {"Relu", 14, 1, 1, {{F32, 1, {100}}}, {{F32, 1, {100}}}},
    {"Sigmoid", 13, 1, 1, {{F16, 1, {64}}}, {{F16, 1, {64}}}},
    {"HardSigmoid", 6, 1, 1, {{F32, 2, {5, 7}}}, {{F32, 2, {5, 7}}}, {A_FLOAT("alpha", 0.25)}},
    {"HardSwish", 14, 1, 1, {{F32, 1, {50}, .lo = -5, .hi = 5}}, {{F32, 1, {50}}}},
    {"Tanh", 13, 1, 1, {{BF16, 1, {33}}}, {{BF16, 1, {33}}}},
    {"Erf", 13, 1, 1, {{F32, 1, {40}}}, {{F32, 1, {40}}}},
    {"Gelu", 20, 1, 1, {{F32, 1, {40}}}, {{F32, 1, {40}}}, {A_STR("approximate", "tanh")}},
    {"LeakyRelu", 16, 1, 1, {{F32, 1, {40}}}, {{F32, 1, {40}}}, {A_FLOAT("alpha", 0.1)}},
    {"Clip", 13, 3, 1, {{F32, 1, {50}}, {F32, 0, {0}, FLS(-0.5f)}, {F32, 0, {0}, FLS(1.25f)}}, {{F32, 1, {50}}}},
    {"Clip", 13, 3, 1, {{I64, 1, {5}, INTS(-9, -1, 0, 4, 12)}, {I64, 0, {0}, INTS(-2)}, {I64, 0, {0}, INTS(5)}}, {{I64, 1, {5}}}},
    {"Abs", 13, 1, 1, {{I32, 1, {4}, INTS(-3, 0, 5, -7)}}, {{I32, 1, {4}}}},
    {"Cast", 13, 1, 1, {{F32, 1, {12}, .lo = -300, .hi = 300}}, {{I64, 1, {12}}}, {A_INT("to", 7)}},
    {"Cast", 13, 1, 1, {{F32, 1, {12}}}, {{F16, 1, {12}}}, {A_INT("to", 10)}},
    {"Cast", 13, 1, 1, {{I64, 1, {3}, INTS(-5, 0, 70000)}}, {{F32, 1, {3}}}, {A_INT("to", 1)}},
    /* softmax and normalizations */
    {"Softmax", 13, 1, 1, {{F32, 2, {3, 40}}}, {{F32, 2, {3, 40}}}, {A_INT("axis", -1)}},
    {"Softmax", 13, 1, 1, {{F16, 3, {2, 5, 7}}}, {{F16, 3, {2, 5, 7}}}, {A_INT("axis", 1)}},
    {"LogSoftmax", 13, 1, 1, {{F32, 2, {4, 9}}}, {{F32, 2, {4, 9}}}, {A_INT("axis", 1)}},
    /* the builder's fused attention (kiln::attention): partial query and key
     * tiles, K^T and K, head dims 64 / 128 / 8 / 40, a single key */
    {"kiln::attention", 1, 3, 1, {{F32, 4, {2, 3, 37, 64}}, {F32, 4, {2, 3, 64, 45}}, {F32, 4, {2, 3, 45, 40}}},
     {{F32, 4, {2, 3, 37, 40}}}, {A_FLOAT("scale", 0.125), A_INT("k_trans", 1)}},
    {"kiln::attention", 1, 3, 1, {{F16, 3, {4, 130, 128}}, {F16, 3, {4, 70, 128}}, {F16, 3, {4, 70, 96}}},
     {{F16, 3, {4, 130, 96}}}, {A_FLOAT("scale", 0.09), A_INT("k_trans", 0)}},
    {"kiln::attention", 1, 3, 1, {{BF16, 2, {5, 8}}, {BF16, 2, {1, 8}}, {BF16, 2, {1, 128}}},
     {{BF16, 2, {5, 128}}}, {A_FLOAT("scale", 0.5), A_INT("k_trans", 0)}},
    /* the tiled kernels (tactic 1: tensor cores for FP16/BF16, 64 x 64 tiles):
     * BERT-base's heads (2 key tiles), K^T with a partial tile, head dim 24
     * (not a multiple of 8: no 16-byte moves, zero padding to 32) with Sk >
     * Sq, scores of a large range over 5 key tiles (the online softmax
     * rescales), FP32 with partial tiles and Dv != D */
    {"kiln::attention", 1, 3, 1, {{F16, 4, {2, 12, 128, 64}}, {F16, 4, {2, 12, 128, 64}}, {F16, 4, {2, 12, 128, 64}}},
     {{F16, 4, {2, 12, 128, 64}}}, {A_FLOAT("scale", 0.125), A_INT("k_trans", 0)}},
    {"kiln::attention", 1, 3, 1, {{BF16, 4, {3, 2, 77, 64}}, {BF16, 4, {3, 2, 64, 77}}, {BF16, 4, {3, 2, 77, 64}}},
     {{BF16, 4, {3, 2, 77, 64}}}, {A_FLOAT("scale", 0.125), A_INT("k_trans", 1)}},
    {"kiln::attention", 1, 3, 1, {{F16, 4, {1, 4, 200, 24}}, {F16, 4, {1, 4, 250, 24}}, {F16, 4, {1, 4, 250, 24}}},
     {{F16, 4, {1, 4, 200, 24}}}, {A_FLOAT("scale", 0.2), A_INT("k_trans", 0)}},
    {"kiln::attention", 1, 3, 1, {{F16, 3, {2, 70, 64}}, {F16, 3, {2, 300, 64}}, {F16, 3, {2, 300, 64}}},
     {{F16, 3, {2, 70, 64}}}, {A_FLOAT("scale", 1.0), A_INT("k_trans", 0)}},
    {"kiln::attention", 1, 3, 1, {{BF16, 4, {1, 3, 65, 128}}, {BF16, 4, {1, 3, 129, 128}}, {BF16, 4, {1, 3, 129, 128}}},
     {{BF16, 4, {1, 3, 65, 128}}}, {A_FLOAT("scale", 0.088), A_INT("k_trans", 0)}},
    {"kiln::attention", 1, 3, 1, {{F32, 4, {2, 4, 100, 64}}, {F32, 4, {2, 4, 130, 64}}, {F32, 4, {2, 4, 130, 64}}},
     {{F32, 4, {2, 4, 100, 64}}}, {A_FLOAT("scale", 0.125), A_INT("k_trans", 0)}},
    {"kiln::attention", 1, 3, 1, {{F32, 3, {3, 65, 17}}, {F32, 3, {3, 17, 66}}, {F32, 3, {3, 66, 33}}},
     {{F32, 3, {3, 65, 33}}}, {A_FLOAT("scale", 0.3), A_INT("k_trans", 1)}},
    /* an additive mask (input 3): padding-style [B, 1, 1, Sk], full [B, H, Sq, Sk], [Sq, Sk] */
    {"kiln::attention", 1, 4, 1, {{F16, 4, {2, 3, 70, 64}}, {F16, 4, {2, 3, 100, 64}}, {F16, 4, {2, 3, 100, 64}},
                                  {F16, 4, {2, 1, 1, 100}, .lo = -4, .hi = 0}},
     {{F16, 4, {2, 3, 70, 64}}}, {A_FLOAT("scale", 0.125)}},
    {"kiln::attention", 1, 4, 1, {{F32, 4, {2, 3, 70, 40}}, {F32, 4, {2, 3, 100, 40}}, {F32, 4, {2, 3, 100, 40}},
                                  {F32, 4, {2, 3, 70, 100}, .lo = -4, .hi = 2}},
     {{F32, 4, {2, 3, 70, 40}}}, {A_FLOAT("scale", 0.15)}},
    {"kiln::attention", 1, 4, 1, {{BF16, 3, {3, 65, 32}}, {BF16, 3, {3, 65, 32}}, {BF16, 3, {3, 65, 32}},
                                  {BF16, 2, {65, 65}, .lo = -4, .hi = 0}},
     {{BF16, 3, {3, 65, 32}}}, {A_FLOAT("scale", 0.2)}},
    /* views (attention.h): Q, K, V of each input [S 37, B 2, 3E], E = 3 heads x 64 (torch's packed
     * projection), y [S, B, H, D] (y_perm); tactic 2 takes no views (skipped) */
#define ATTN_VIEWS A_INTS("views", 2, 0, 1, 1, 1, -4, 2, 64, 0, 0, 1, -65, 2, 1, 2, 192, 1, 1, 1, -4, 2, 64, 0, 0, 1, -65, 2, 1, 2, 384, 1, 1, 1, -4, 2, 64, 0, 0, 1, -65, 2, 1)
    {"kiln::attention", 1, 3, 1, {{F16, 3, {37, 2, 576}}, {F16, 3, {37, 2, 576}}, {F16, 3, {37, 2, 576}}},
     {{F16, 4, {37, 2, 3, 64}}}, {A_FLOAT("scale", 0.125), ATTN_VIEWS, A_INTS("y_perm", 2, 0, 1, 3)}},
    {"kiln::attention", 1, 3, 1, {{F32, 3, {37, 2, 576}}, {F32, 3, {37, 2, 576}}, {F32, 3, {37, 2, 576}}},
     {{F32, 4, {37, 2, 3, 64}}}, {A_FLOAT("scale", 0.125), ATTN_VIEWS, A_INTS("y_perm", 2, 0, 1, 3)}},
    /* tactics 3 and 4 (attention_tc_async.cu: 128 / 64 query rows a block, cp.async K/V tiles) where
     * they differ from the cases above: BERT-base at batch 32 (384 batch-heads, 3 blocks of 128 rows
     * on an SM's worth of work each), a head dim of 40 padded to 64 with Dv % 16 == 8 and S = 200
     * (partial tiles of 128, 64 and the keys), head dim 96 padded to 128 with a full mask and Sk = 190,
     * a single query row against 300 keys (head dim 32), views with S = 150 (BF16), and K^T / head dim
     * 24 above, where tactic 1's kernel must take over */
    {"kiln::attention", 1, 3, 1, {{F16, 4, {32, 12, 128, 64}}, {F16, 4, {32, 12, 128, 64}}, {F16, 4, {32, 12, 128, 64}}},
     {{F16, 4, {32, 12, 128, 64}}}, {A_FLOAT("scale", 0.125)}},
    {"kiln::attention", 1, 3, 1, {{BF16, 4, {2, 5, 200, 40}}, {BF16, 4, {2, 5, 200, 40}}, {BF16, 4, {2, 5, 200, 40}}},
     {{BF16, 4, {2, 5, 200, 40}}}, {A_FLOAT("scale", 0.16)}},
    {"kiln::attention", 1, 4, 1, {{F16, 4, {2, 3, 150, 96}}, {F16, 4, {2, 3, 190, 96}}, {F16, 4, {2, 3, 190, 96}},
                                  {F16, 4, {2, 3, 150, 190}, .lo = -4, .hi = 2}},
     {{F16, 4, {2, 3, 150, 96}}}, {A_FLOAT("scale", 0.1)}},
    {"kiln::attention", 1, 3, 1, {{F16, 3, {3, 1, 32}}, {F16, 3, {3, 300, 32}}, {F16, 3, {3, 300, 32}}},
     {{F16, 3, {3, 1, 32}}}, {A_FLOAT("scale", 0.18)}},
    {"kiln::attention", 1, 3, 1, {{BF16, 3, {150, 2, 576}}, {BF16, 3, {150, 2, 576}}, {BF16, 3, {150, 2, 576}}},
     {{BF16, 4, {150, 2, 3, 64}}}, {A_FLOAT("scale", 0.125), ATTN_VIEWS, A_INTS("y_perm", 2, 0, 1, 3)}},
    /* the layout builder/transformer.c picks when the out-projection's Transpose back to batch-first
     * follows: y [B, S, H, D] */
    {"kiln::attention", 1, 3, 1, {{F16, 3, {150, 2, 576}}, {F16, 3, {150, 2, 576}}, {F16, 3, {150, 2, 576}}},
     {{F16, 4, {2, 150, 3, 64}}}, {A_FLOAT("scale", 0.125), ATTN_VIEWS, A_INTS("y_perm", 0, 2, 1, 3)}},
    /* residual + norm (kiln::add_layernorm): rows of 768, 8192 (1024 threads x 8), 5; broadcast scale */
    {"kiln::add_layernorm", 1, 4, 1, {{F32, 3, {2, 3, 768}}, {F32, 3, {2, 3, 768}}, {F32, 1, {768}}, {F32, 1, {768}}},
     {{F32, 3, {2, 3, 768}}}, {A_INT("axis", -1), A_FLOAT("epsilon", 1e-5)}},
    {"kiln::add_layernorm", 1, 4, 1, {{F16, 2, {3, 8192}}, {F16, 2, {3, 8192}}, {F16, 1, {8192}}, {F16, 1, {8192}}},
     {{F16, 2, {3, 8192}}}, {A_INT("axis", 1)}},
    {"kiln::add_layernorm", 1, 3, 1, {{BF16, 3, {4, 1, 5}}, {BF16, 3, {4, 1, 5}}, {BF16, 1, {1}}},
     {{BF16, 3, {4, 1, 5}}}, {A_INT("axis", 1), A_FLOAT("epsilon", 1e-3)}},
    {"Softmax", 11, 1, 1, {{F32, 3, {2, 3, 4}}}, {{F32, 3, {2, 3, 4}}}, {A_INT("axis", 1)}},
    {"LayerNormalization", 17, 3, 3, {{F32, 2, {4, 32}}, {F32, 1, {32}}, {F32, 1, {32}}},
     {{F32, 2, {4, 32}}, {F32, 2, {4, 1}}, {F32, 2, {4, 1}}}, {A_INT("axis", -1)}},
    {"BatchNormalization", 14, 5, 1,
     {{F32, 4, {2, 3, 4, 5}}, {F32, 1, {3}}, {F32, 1, {3}}, {F32, 1, {3}}, {F32, 1, {3}, .lo = 0.5f, .hi = 2}},
     {{F32, 4, {2, 3, 4, 5}}}},
    {"InstanceNormalization", 6, 3, 1, {{F32, 4, {2, 4, 3, 3}}, {F32, 1, {4}}, {F32, 1, {4}}}, {{F32, 4, {2, 4, 3, 3}}}},
    {"GroupNormalization", 21, 3, 1, {{F32, 4, {2, 4, 3, 3}}, {F32, 1, {4}}, {F32, 1, {4}}}, {{F32, 4, {2, 4, 3, 3}}},
     {A_INT("num_groups", 2)}},
    /* convolution and GEMM */
    {"Conv", 11, 3, 1, {{F32, 4, {1, 4, 9, 9}}, {F32, 4, {8, 4, 3, 3}}, {F32, 1, {8}}}, {{F32, 4, {1, 8, 9, 9}}},
     {A_INTS("pads", 1, 1, 1, 1)}, 1e-4},
    {"Conv", 11, 3, 1, {{F32, 4, {2, 6, 8, 8}}, {F32, 4, {6, 1, 3, 3}}, {F32, 1, {6}}}, {{F32, 4, {2, 6, 4, 4}}},
     {A_INT("group", 6), A_INTS("strides", 2, 2), A_INTS("pads", 1, 1, 1, 1)}, 1e-4},
    {"Conv", 11, 2, 1, {{F32, 4, {1, 16, 5, 5}}, {F32, 4, {8, 16, 1, 1}}}, {{F32, 4, {1, 8, 5, 5}}}, {{0}}, 1e-4},
    /* several images: the GEMM tactic batches them in one cuBLASLt call
     * (im2col of all of them; 1x1 straight from the input) */
    {"Conv", 11, 3, 1, {{F32, 4, {3, 5, 7, 6}}, {F32, 4, {6, 5, 3, 3}}, {F32, 1, {6}}}, {{F32, 4, {3, 6, 4, 3}}},
     {A_INTS("strides", 2, 2), A_INTS("pads", 1, 1, 1, 1)}, 1e-4},
    {"Conv", 11, 2, 1, {{F16, 4, {4, 16, 3, 5}}, {F16, 4, {8, 16, 1, 1}, .lo = -0.5f, .hi = 0.5f}},
     {{F16, 4, {4, 8, 3, 5}}}, {{0}}, 1e-2},
    {"Conv", 11, 2, 1, {{F32, 4, {2, 8, 6, 6}}, {F32, 4, {4, 4, 3, 3}}}, {{F32, 4, {2, 4, 6, 6}}},
     {A_INT("group", 2), A_INTS("pads", 1, 1, 1, 1)}, 1e-4},
    {"Conv", 11, 2, 1, {{F32, 4, {1, 4, 10, 10}}, {F32, 4, {6, 2, 3, 3}}}, {{F32, 4, {1, 6, 10, 10}}},
     {A_INT("group", 2), A_INTS("dilations", 2, 2), A_INTS("pads", 2, 2, 2, 2)}, 1e-4},
    {"Conv", 11, 2, 1, {{F32, 3, {1, 3, 20}}, {F32, 3, {4, 3, 5}}}, {{F32, 3, {1, 4, 10}}},
     {A_INTS("pads", 2, 2), A_INTS("strides", 2)}, 1e-4},
    {"Conv", 11, 3, 1, {{F16, 4, {1, 8, 6, 6}}, {F16, 4, {4, 8, 3, 3}, .lo = -0.5f, .hi = 0.5f}, {F16, 1, {4}}},
     {{F16, 4, {1, 4, 6, 6}}}, {A_STR("auto_pad", "SAME_UPPER")}, 1e-2},
    /* BF16, grouped, strided, 2 images, Cout per group 9: the implicit-GEMM tactics' edges (and the others') */
    {"Conv", 11, 3, 1, {{BF16, 4, {2, 6, 9, 7}}, {BF16, 4, {18, 3, 3, 3}, .lo = -0.5f, .hi = 0.5f}, {BF16, 1, {18}}},
     {{BF16, 4, {2, 18, 5, 4}}}, {A_INT("group", 2), A_INTS("strides", 2, 2), A_INTS("pads", 1, 1, 1, 1)}, 3e-2},
    {"ConvTranspose", 11, 3, 1, {{F32, 4, {1, 4, 5, 5}}, {F32, 4, {4, 3, 3, 3}}, {F32, 1, {3}}},
     {{F32, 4, {1, 3, 9, 9}}}, {A_INTS("strides", 2, 2), A_INTS("pads", 1, 1, 1, 1)}, 1e-4},
    /* kernel == stride (PP-OCR's 2x2/2): the one-tap kernel; grouped, FP16; then padded with output_padding */
    {"ConvTranspose", 11, 3, 1, {{F16, 4, {2, 4, 5, 3}}, {F16, 4, {4, 3, 2, 2}, .lo = -0.5f, .hi = 0.5f}, {F16, 1, {6}}},
     {{F16, 4, {2, 6, 10, 6}}}, {A_INT("group", 2), A_INTS("strides", 2, 2)}, 1e-2},
    /* one tap, 24 input channels (conv_transpose1c, PP-OCR's head); 40 (more than it keeps in registers) */
    {"ConvTranspose", 11, 3, 1, {{F32, 4, {2, 24, 5, 6}}, {F32, 4, {24, 5, 2, 2}, .lo = -0.5f, .hi = 0.5f}, {F32, 1, {5}}},
     {{F32, 4, {2, 5, 10, 12}}}, {A_INTS("strides", 2, 2)}, 1e-4},
    {"ConvTranspose", 11, 2, 1, {{F16, 4, {1, 40, 3, 4}}, {F16, 4, {40, 3, 2, 2}, .lo = -0.5f, .hi = 0.5f}},
     {{F16, 4, {1, 3, 6, 8}}}, {A_INTS("strides", 2, 2)}, 1e-2},
    {"ConvTranspose", 11, 2, 1, {{F32, 4, {1, 3, 4, 5}}, {F32, 4, {3, 2, 3, 2}}}, {{F32, 4, {1, 2, 13, 10}}},
     {A_INTS("strides", 3, 2), A_INTS("pads", 1, 0, 0, 1), A_INTS("output_padding", 2, 1)}, 1e-4},
    /* 3-D (conv3d.cu): grouped, strided, dilated, padded; transposed with output_padding */
    {"Conv", 11, 3, 1, {{F32, 5, {2, 4, 5, 6, 4}}, {F32, 5, {6, 2, 2, 3, 2}}, {F32, 1, {6}}}, {{F32, 5, {2, 6, 3, 2, 3}}},
     {A_INT("group", 2), A_INTS("strides", 2, 1, 2), A_INTS("dilations", 1, 2, 1), A_INTS("pads", 1, 0, 1, 0, 0, 1)}, 1e-4},
    {"ConvTranspose", 11, 3, 1, {{F32, 5, {1, 4, 3, 2, 3}}, {F32, 5, {4, 3, 2, 3, 2}}, {F32, 1, {3}}},
     {{F32, 5, {1, 3, 6, 6, 7}}}, {A_INTS("strides", 2, 2, 2), A_INTS("output_padding", 0, 1, 1)}, 1e-4},
    {"Conv", 11, 2, 1, {{F16, 5, {1, 3, 4, 4, 4}}, {F16, 5, {2, 3, 3, 3, 3}, .lo = -0.5f, .hi = 0.5f}},
     {{F16, 5, {1, 2, 4, 4, 4}}}, {A_STR("auto_pad", "SAME_UPPER")}, 1e-2},
    {"MatMul", 13, 2, 1, {{F32, 4, {2, 3, 8, 16}}, {F32, 2, {16, 5}}}, {{F32, 4, {2, 3, 8, 5}}}, {{0}}, 1e-4},
    {"MatMul", 13, 2, 1, {{F32, 4, {2, 1, 4, 6}}, {F32, 3, {3, 6, 7}}}, {{F32, 4, {2, 3, 4, 7}}}, {{0}}, 1e-4},
    {"MatMul", 13, 2, 1, {{F16, 2, {8, 32}}, {F16, 2, {32, 4}}}, {{F16, 2, {8, 4}}}, {{0}}, 1e-2},
    {"Gemm", 13, 3, 1, {{F32, 2, {4, 6}}, {F32, 2, {5, 6}}, {F32, 1, {5}}}, {{F32, 2, {4, 5}}}, {A_INT("transB", 1)}, 1e-4},
    {"Gemm", 13, 3, 1, {{F32, 2, {6, 4}}, {F32, 2, {6, 5}}, {F32, 2, {4, 1}}}, {{F32, 2, {4, 5}}},
     {A_INT("transA", 1), A_FLOAT("alpha", 0.5), A_FLOAT("beta", 2.0)}, 1e-4},
    /* pooling and reductions */
    {"MaxPool", 12, 1, 2, {{F32, 4, {1, 2, 9, 9}}}, {{F32, 4, {1, 2, 5, 5}}, {I64, 4, {1, 2, 5, 5}}},
     {A_INTS("kernel_shape", 3, 3), A_INTS("strides", 2, 2), A_INTS("pads", 1, 1, 1, 1)}},
    {"AveragePool", 11, 1, 1, {{F32, 4, {1, 2, 9, 9}}}, {{F32, 4, {1, 2, 9, 9}}},
     {A_INTS("kernel_shape", 3, 3), A_INTS("pads", 1, 1, 1, 1), A_INT("count_include_pad", 1)}},
    {"AveragePool", 11, 1, 1, {{F16, 4, {1, 2, 8, 8}}}, {{F16, 4, {1, 2, 4, 4}}},
     {A_INTS("kernel_shape", 2, 2), A_INTS("strides", 2, 2)}, 1e-2},
    {"GlobalAveragePool", 1, 1, 1, {{F32, 4, {2, 3, 7, 7}}}, {{F32, 4, {2, 3, 1, 1}}}},
    {"GlobalMaxPool", 1, 1, 1, {{F32, 4, {2, 3, 7, 7}}}, {{F32, 4, {2, 3, 1, 1}}}},
    {"ReduceMean", 13, 1, 1, {{F32, 3, {3, 5, 7}}}, {{F32, 3, {3, 1, 7}}}, {A_INTS("axes", 1)}},
    {"ReduceSum", 13, 2, 1, {{F32, 3, {3, 5, 7}}, {I64, 1, {1}, INTS(-1)}}, {{F32, 2, {3, 5}}}, {A_INT("keepdims", 0)}},
    {"ReduceMax", 13, 1, 1, {{F32, 3, {3, 5, 7}}}, {{F32, 1, {5}}}, {A_INTS("axes", 0, 2), A_INT("keepdims", 0)}},
    {"ReduceSum", 13, 2, 1, {{I64, 2, {2, 3}, INTS(1, 2, 3, 4, 5, 6)}, {I64, 1, {1}, INTS(1)}}, {{I64, 2, {2, 1}}}},
    {"ArgMax", 13, 1, 1, {{F32, 3, {3, 5, 7}}}, {{I64, 3, {3, 1, 7}}}, {A_INT("axis", 1)}},
    /* FP64 reductions accumulate in double */
    {"ReduceLogSumExp", 13, 1, 1, {{F64, 3, {3, 5, 7}}}, {{F64, 3, {3, 1, 1}}}, {A_INTS("axes", 1, 2)}, 1e-12},
    {"ReduceL2", 13, 1, 1, {{F64, 2, {4, 300}}}, {{F64, 1, {4}}}, {A_INTS("axes", -1), A_INT("keepdims", 0)}, 1e-12},
    {"ReduceMax", 18, 2, 1, {{F64, 3, {3, 5, 7}}, {I64, 1, {1}, INTS(0)}}, {{F64, 3, {1, 5, 7}}}, {{0}}, 1e-12},
    {"ReduceMean", 18, 1, 1, {{F64, 2, {6, 9}}}, {{F64, 2, {1, 1}}}, {{0}}, 1e-12},
    /* data movement */
    {"Transpose", 13, 1, 1, {{F32, 4, {2, 3, 4, 5}}}, {{F32, 4, {2, 4, 5, 3}}}, {A_INTS("perm", 0, 2, 3, 1)}},
    {"Concat", 13, 2, 1, {{F16, 3, {2, 3, 4}}, {F16, 3, {2, 2, 4}}}, {{F16, 3, {2, 5, 4}}}, {A_INT("axis", 1)}},
    {"Split", 11, 1, 2, {{F32, 3, {2, 4, 3}}}, {{F32, 3, {2, 1, 3}}, {F32, 3, {2, 3, 3}}},
     {A_INT("axis", 1), A_INTS("split", 1, 3)}},
    {"Slice", 13, 5, 1,
     {{F32, 2, {5, 6}}, {I64, 1, {2}, INTS(4, 1)}, {I64, 1, {2}, INTS(0, 5)}, {I64, 1, {2}, INTS(0, 1)},
      {I64, 1, {2}, INTS(-2, 2)}},
     {{F32, 2, {2, 2}}}},
    {"Expand", 13, 2, 1, {{F32, 2, {3, 1}}, {I64, 1, {3}, INTS(2, 3, 4)}}, {{F32, 3, {2, 3, 4}}}},
    {"Tile", 13, 2, 1, {{I64, 2, {2, 3}, INTS(1, 2, 3, 4, 5, 6)}, {I64, 1, {2}, INTS(2, 1)}}, {{I64, 2, {4, 3}}}},
    /* the copy's plans (copy_plan.h): tiled transpose, 16/8/4-byte units, plain element copy; odd sizes,
     * unaligned bases, 1/2/4/8-byte elements, negative steps, 0 strides, 4-D/5-D permutations */
    {"Transpose", 13, 1, 1, {{F16, 4, {2, 64, 17, 3}}}, {{F16, 4, {2, 17, 3, 64}}}, {A_INTS("perm", 0, 2, 3, 1)}},
    {"Transpose", 13, 1, 1, {{U8, 4, {2, 17, 33, 40}, .lo = 0, .hi = 250}}, {{U8, 4, {2, 40, 17, 33}}},
     {A_INTS("perm", 0, 3, 1, 2)}},
    {"Transpose", 13, 1, 1, {{I64, 5, {3, 2, 17, 5, 24}, .lo = -1e6, .hi = 1e6}}, {{I64, 5, {2, 3, 24, 5, 17}}},
     {A_INTS("perm", 1, 0, 4, 3, 2)}},
    {"Transpose", 13, 1, 1, {{F32, 3, {3, 1000, 17}}}, {{F32, 3, {17, 3, 1000}}}, {A_INTS("perm", 2, 0, 1)}},
    {"Transpose", 13, 1, 1, {{F32, 2, {1000, 3}}}, {{F32, 2, {3, 1000}}}, {A_INTS("perm", 1, 0)}},
    {"Transpose", 13, 1, 1, {{F32, 4, {2, 5, 3, 16}}}, {{F32, 4, {2, 3, 5, 16}}}, {A_INTS("perm", 0, 2, 1, 3)}},
    {"Transpose", 13, 1, 1, {{F16, 5, {2, 1, 3, 4, 8}}}, {{F16, 5, {3, 1, 2, 4, 8}}}, {A_INTS("perm", 2, 1, 0, 3, 4)}},
    {"Concat", 13, 2, 1, {{F16, 3, {2, 3, 40}}, {F16, 3, {2, 5, 40}}}, {{F16, 3, {2, 8, 40}}}, {A_INT("axis", 1)}},
    {"Concat", 13, 2, 1, {{F16, 3, {2, 3, 40}}, {F16, 3, {2, 3, 17}}}, {{F16, 3, {2, 3, 57}}}, {A_INT("axis", 2)}},
    {"Concat", 13, 2, 1, {{U8, 3, {3, 1, 1000}, .lo = 0, .hi = 250}, {U8, 3, {3, 2, 1000}, .lo = 0, .hi = 250}},
     {{U8, 3, {3, 3, 1000}}}, {A_INT("axis", 1)}},
    {"Split", 11, 1, 2, {{F32, 2, {4, 1000}}}, {{F32, 2, {4, 1}}, {F32, 2, {4, 999}}}, {A_INT("axis", 1), A_INTS("split", 1, 999)}},
    {"Slice", 13, 4, 1, {{F16, 2, {4, 1000}}, {I64, 1, {1}, INTS(1)}, {I64, 1, {1}, INTS(1000)}, {I64, 1, {1}, INTS(1)}},
     {{F16, 2, {4, 999}}}},
    {"Slice", 13, 4, 1, {{F32, 3, {3, 17, 40}}, {I64, 1, {1}, INTS(8)}, {I64, 1, {1}, INTS(40)}, {I64, 1, {1}, INTS(2)}},
     {{F32, 3, {3, 17, 32}}}},
    {"Slice", 13, 5, 1,
     {{F32, 2, {5, 1000}}, {I64, 1, {1}, INTS(-1)}, {I64, 1, {1}, INTS(-2000)}, {I64, 1, {1}, INTS(1)},
      {I64, 1, {1}, INTS(-1)}},
     {{F32, 2, {5, 1000}}}},
    {"Expand", 13, 2, 1, {{F16, 3, {3, 1, 40}}, {I64, 1, {3}, INTS(3, 17, 40)}}, {{F16, 3, {3, 17, 40}}}},
    {"Expand", 13, 2, 1, {{I64, 2, {3, 1}, .lo = -1e6, .hi = 1e6}, {I64, 1, {2}, INTS(3, 1000)}}, {{I64, 2, {3, 1000}}}},
    {"Expand", 13, 2, 1, {{U8, 2, {1, 1}, .lo = 0, .hi = 250}, {I64, 1, {2}, INTS(17, 3)}}, {{U8, 2, {17, 3}}}},
    {"Tile", 13, 2, 1, {{F16, 2, {3, 40}}, {I64, 1, {2}, INTS(2, 3)}}, {{F16, 2, {6, 120}}}},
    {"Identity", 16, 1, 1, {{F16, 2, {1000, 17}}}, {{F16, 2, {1000, 17}}}},
    {"Pad", 13, 2, 1, {{F32, 4, {1, 2, 4, 5}}, {I64, 1, {8}, INTS(0, 0, 1, 2, 0, 0, 2, 1)}}, {{F32, 4, {1, 2, 7, 8}}},
     {A_STR("mode", "reflect")}},
    {"Pad", 13, 3, 1, {{F32, 2, {3, 4}}, {I64, 1, {4}, INTS(0, 1, 0, 2)}, {F32, 0, {0}, FLS(1.5f)}},
     {{F32, 2, {3, 7}}}},
    {"Gather", 13, 2, 1, {{F32, 3, {3, 5, 2}}, {I64, 1, {3}, INTS(4, -1, 0)}}, {{F32, 3, {3, 3, 2}}}, {A_INT("axis", 1)}},
    {"GatherElements", 13, 2, 1, {{F32, 2, {3, 4}}, {I64, 2, {2, 4}, INTS(0, 2, -1, 1, 2, 0, 1, 2)}}, {{F32, 2, {2, 4}}},
     {A_INT("axis", 0)}},
    {"DepthToSpace", 13, 1, 1, {{F32, 4, {1, 8, 2, 3}}}, {{F32, 4, {1, 2, 4, 6}}}, {A_INT("blocksize", 2), A_STR("mode", "CRD")}},
    {"DepthToSpace", 13, 1, 1, {{F16, 4, {2, 8, 2, 2}}}, {{F16, 4, {2, 2, 4, 4}}}, {A_INT("blocksize", 2)}},
    {"SpaceToDepth", 13, 1, 1, {{F32, 4, {1, 2, 4, 6}}}, {{F32, 4, {1, 8, 2, 3}}}, {A_INT("blocksize", 2)}},
    {"Hardmax", 13, 1, 1, {{F32, 3, {2, 5, 3}}}, {{F32, 3, {2, 5, 3}}}, {A_INT("axis", 1)}},
    {"Not", 1, 1, 1, {{BOOL, 1, {4}, INTS(1, 0, 0, 1)}}, {{BOOL, 1, {4}}}},
    {"Dropout", 13, 1, 2, {{F32, 2, {3, 5}}}, {{F32, 2, {3, 5}}, {BOOL, 2, {3, 5}}}},
    {"Reshape", 14, 2, 1, {{F32, 2, {2, 6}}, {I64, 1, {2}, INTS(3, 4)}}, {{F32, 2, {3, 4}}}},
    {"Flatten", 13, 1, 1, {{BF16, 3, {2, 3, 4}}}, {{BF16, 2, {2, 12}}}},
    /* GridSample: grid points beyond [-1, 1] exercise the padding modes */
    {"GridSample", 16, 2, 1, {{F32, 4, {2, 3, 5, 6}}, {F32, 4, {2, 4, 3, 2}, .lo = -1.3f, .hi = 1.3f}},
     {{F32, 4, {2, 3, 4, 3}}}, {A_STR("mode", "bicubic"), A_STR("padding_mode", "reflection")}, 1e-5},
    {"GridSample", 16, 2, 1, {{F32, 4, {1, 2, 4, 4}}, {F32, 4, {1, 5, 5, 2}, .lo = -1.3f, .hi = 1.3f}},
     {{F32, 4, {1, 2, 5, 5}}}, {A_STR("mode", "nearest"), A_INT("align_corners", 1), A_STR("padding_mode", "border")}},
    /* linear quantization: per axis, per tensor, dynamic */
    {"QuantizeLinear", 19, 3, 1,
     {{F32, 2, {3, 4}, .lo = -6, .hi = 6}, {F32, 1, {4}, FLS(0.05f, 0.5f, 0.02f, 1)}, {I8, 1, {4}, INTS(0, -3, 7, 127)}},
     {{I8, 2, {3, 4}}}, {A_INT("axis", 1)}},
    {"QuantizeLinear", 13, 3, 1, {{F16, 1, {20}, .lo = -4, .hi = 4}, {F16, 0, {0}, FLS(0.03125f)}, {U8, 0, {0}, INTS(128)}},
     {{U8, 1, {20}}}},
    {"DequantizeLinear", 19, 3, 1, {{U8, 2, {4, 5}, .lo = 0, .hi = 255}, {F32, 0, {0}, FLS(0.05f)}, {U8, 0, {0}, INTS(128)}}, {{F32, 2, {4, 5}}}},
    {"DequantizeLinear", 13, 3, 1, {{I32, 2, {2, 3}, INTS(-70000, 5, 1 << 30, 0, -1, 12)}, {F64, 1, {3}, .lo = 0.5f, .hi = 2},
     {I32, 1, {3}, INTS(1, -2, 3)}}, {{F64, 2, {2, 3}}}, {A_INT("axis", -1)}, 1e-12},
    {"DynamicQuantizeLinear", 11, 1, 3, {{F32, 2, {5, 70}, .lo = -3, .hi = 5}}, {{U8, 2, {5, 70}}, {F32, 0, {0}}, {U8, 0, {0}}}},
    /* dims only: the input's data is never read */
    {"Shape", 15, 1, 1, {{F32, 3, {2, 3, 4}}}, {{I64, 1, {3}}}},
    {"Shape", 15, 1, 1, {{F64, 5, {2, 3, 4, 5, 1}}}, {{I64, 1, {3}}}, {A_INT("start", 1), A_INT("end", -1)}},
    {"Size", 13, 1, 1, {{BOOL, 2, {3, 5}, INTS(1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0, 1, 0, 0, 1)}}, {{I64, 0, {0}}}},
    {"Resize", 13, 3, 1, {{F32, 4, {1, 1, 4, 5}}, {NONE}, {F32, 1, {4}, FLS(1, 1, 2, 2)}}, {{F32, 4, {1, 1, 8, 10}}}},
    {"Resize", 13, 3, 1, {{F16, 4, {2, 3, 5, 7}}, {NONE}, {F32, 1, {4}, FLS(1, 1, 2, 2)}}, {{F16, 4, {2, 3, 10, 14}}},
     {A_STR("coordinate_transformation_mode", "asymmetric"), A_STR("nearest_mode", "floor")}},
    /* nearest over H and W only runs resize_rows_<T>: downscale and odd
     * scales, rows wider than a block (300 > 256 columns), 3-D; a channel
     * resize takes the general kernel */
    {"Resize", 13, 3, 1, {{F32, 4, {2, 3, 10, 9}}, {NONE}, {F32, 1, {4}, FLS(1, 1, 0.6f, 1.7f)}},
     {{F32, 4, {2, 3, 6, 15}}}, {A_STR("coordinate_transformation_mode", "align_corners"),
                                 A_STR("nearest_mode", "round_prefer_ceil")}},
    {"Resize", 13, 3, 1, {{F16, 4, {1, 2, 3, 150}}, {NONE}, {F32, 1, {4}, FLS(1, 1, 2, 2)}}, {{F16, 4, {1, 2, 6, 300}}}},
    {"Resize", 13, 4, 1, {{F32, 3, {2, 5, 7}}, {NONE}, {NONE}, {I64, 1, {3}, INTS(2, 9, 4)}}, {{F32, 3, {2, 9, 4}}},
     {A_STR("nearest_mode", "ceil")}},
    {"Resize", 13, 3, 1, {{F32, 4, {1, 3, 4, 5}}, {NONE}, {F32, 1, {4}, FLS(1, 2, 1, 1)}}, {{F32, 4, {1, 6, 4, 5}}}},
    {"Resize", 13, 4, 1, {{F32, 4, {1, 2, 4, 5}}, {NONE}, {NONE}, {I64, 1, {4}, INTS(1, 2, 7, 9)}},
     {{F32, 4, {1, 2, 7, 9}}}, {A_STR("mode", "linear"), A_STR("coordinate_transformation_mode", "align_corners")}},
    {"Resize", 13, 3, 1, {{F32, 4, {1, 1, 6, 6}}, {NONE}, {F32, 1, {4}, FLS(1, 1, 0.5f, 1.5f)}},
     {{F32, 4, {1, 1, 3, 9}}}, {A_STR("mode", "cubic")}, 1e-4},
    /* more types of the broadcasting kernels: double, 8/16-bit and unsigned integers */
    {"Add", 14, 2, 1, {{U8, 2, {2, 3}, INTS(250, 1, 7, 0, 128, 255)}, {U8, 1, {3}, INTS(10, 255, 3)}}, {{U8, 2, {2, 3}}}},
    {"Max", 13, 2, 1, {{I8, 1, {5}, INTS(-128, -3, 0, 7, 127)}, {I8, 1, {5}, INTS(5, -4, -1, 9, -128)}}, {{I8, 1, {5}}}},
    {"Mod", 13, 2, 1, {{U16, 1, {4}, INTS(7, 65535, 10, 3)}, {U16, 1, {4}, INTS(3, 7, 0, 5)}}, {{U16, 1, {4}}}},
    {"Mod", 13, 2, 1, {{I8, 1, {4}, INTS(-7, 7, -128, 5)}, {I8, 1, {4}, INTS(3, -3, -1, -2)}}, {{I8, 1, {4}}}},
    {"Div", 14, 2, 1, {{U32, 1, {4}, INTS(7, 4000000000, 9, 1)}, {U32, 1, {4}, INTS(2, 3, 0, 4000000000)}}, {{U32, 1, {4}}}},
    {"Mul", 14, 2, 1, {{F64, 2, {3, 4}}, {F64, 2, {3, 1}}}, {{F64, 2, {3, 4}}}, {{0}}, 1e-12},
    {"Less", 13, 2, 1, {{F64, 1, {8}}, {F64, 1, {8}}}, {{BOOL, 1, {8}}}},
    {"BitShift", 11, 2, 1, {{U64, 1, {4}, INTS(1, 3, 1 << 20, 5)}, {U64, 1, {4}, INTS(0, 63, 5, 64)}}, {{U64, 1, {4}}},
     {A_STR("direction", "LEFT")}},
    {"BitShift", 11, 2, 1, {{U8, 1, {4}, INTS(255, 16, 1, 128)}, {U8, 1, {4}, INTS(1, 4, 8, 7)}}, {{U8, 1, {4}}},
     {A_STR("direction", "RIGHT")}},
    {"Cast", 13, 1, 1, {{F64, 1, {12}, .lo = -70000, .hi = 70000}}, {{F16, 1, {12}}}, {A_INT("to", 10)}},
    {"Cast", 13, 1, 1, {{F32, 1, {12}}}, {{F64, 1, {12}}}, {A_INT("to", 11)}},
    {"Cast", 13, 1, 1, {{F64, 1, {6}, .lo = -1e10, .hi = 1e10}}, {{I32, 1, {6}}}, {A_INT("to", 6)}},
    /* losses (targets valid except where ignore_index takes them) */
    {"NegativeLogLikelihoodLoss", 13, 2, 1, {{F32, 2, {4, 5}}, {I64, 1, {4}, INTS(0, 4, 2, 2)}}, {{F32, 1, {4}}},
     {A_STR("reduction", "none")}},
    {"NegativeLogLikelihoodLoss", 13, 3, 1,
     {{F32, 3, {3, 5, 2}}, {I64, 2, {3, 2}, INTS(1, -1, 4, 0, -1, 3)}, {F32, 1, {5}, .lo = 0.5f, .hi = 2}},
     {{F32, 0, {0}}}, {A_INT("ignore_index", -1)}},
    {"NegativeLogLikelihoodLoss", 13, 2, 1, {{F16, 3, {2, 3, 4}}, {I32, 2, {2, 4}, INTS(0, 1, 2, 0, 2, 2, 1, 0)}},
     {{F16, 0, {0}}}, {A_STR("reduction", "sum")}},
    {"SoftmaxCrossEntropyLoss", 13, 2, 2, {{F32, 2, {4, 6}}, {I64, 1, {4}, INTS(5, 0, 3, 1)}},
     {{F32, 0, {0}}, {F32, 2, {4, 6}}}},
    {"SoftmaxCrossEntropyLoss", 13, 3, 2,
     {{F32, 3, {2, 4, 3}}, {I64, 2, {2, 3}, INTS(3, 0, 2, 2, 1, 2)}, {F32, 1, {4}, .lo = 0.5f, .hi = 2}},
     {{F32, 2, {2, 3}}, {F32, 3, {2, 4, 3}}}, {A_STR("reduction", "none"), A_INT("ignore_index", 2)}},
    {"SoftmaxCrossEntropyLoss", 13, 2, 2, {{F64, 2, {3, 7}}, {I64, 1, {3}, INTS(6, 0, 3)}},
     {{F64, 0, {0}}, {F64, 2, {3, 7}}}, {A_STR("reduction", "sum")}, 1e-12},
    /* fills by position, cumulative sums */
    {"Trilu", 14, 2, 1, {{I64, 3, {2, 3, 4}, INTS(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                                                  22, 23, 24)}, {I64, 0, {0}, INTS(-1)}},
     {{I64, 3, {2, 3, 4}}}, {A_INT("upper", 0)}},
    {"Trilu", 14, 2, 1, {{F32, 2, {4, 5}}, {I64, 0, {0}, INTS(2)}}, {{F32, 2, {4, 5}}}},
    {"EyeLike", 9, 1, 1, {{I32, 2, {3, 5}, INTS(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)}}, {{F32, 2, {3, 5}}},
     {A_INT("k", 1), A_INT("dtype", 1)}},
    {"CumSum", 14, 2, 1, {{F32, 3, {2, 5, 3}}, {I32, 0, {0}, INTS(1)}}, {{F32, 3, {2, 5, 3}}}},
    {"CumSum", 14, 2, 1, {{F64, 2, {3, 6}}, {I64, 0, {0}, INTS(-1)}}, {{F64, 2, {3, 6}}},
     {A_INT("exclusive", 1), A_INT("reverse", 1)}, 1e-12},
    {"CumSum", 14, 2, 1, {{I64, 1, {5}, INTS(1, -2, 3, 1000000, 5)}, {I64, 0, {0}, INTS(0)}}, {{I64, 1, {5}}},
     {A_INT("reverse", 1)}},
    /* scatters (duplicate indices: applied in the CPU's order) and GatherND */
    {"ScatterElements", 18, 3, 1,
     {{F32, 2, {3, 4}}, {I64, 2, {2, 4}, INTS(0, 2, -1, 1, 2, 0, 1, 1)}, {F32, 2, {2, 4}}}, {{F32, 2, {3, 4}}},
     {A_INT("axis", 0)}},
    {"ScatterElements", 18, 3, 1,
     {{F32, 2, {2, 5}}, {I64, 2, {2, 3}, INTS(1, 1, 4, 0, 0, 0)}, {F32, 2, {2, 3}}}, {{F32, 2, {2, 5}}},
     {A_INT("axis", 1), A_STR("reduction", "add")}},
    {"ScatterND", 18, 3, 1,
     {{F32, 3, {4, 2, 3}}, {I64, 2, {3, 1}, INTS(3, 0, 3)}, {F32, 3, {3, 2, 3}}}, {{F32, 3, {4, 2, 3}}},
     {A_STR("reduction", "mul")}},
    {"ScatterND", 18, 3, 1, {{I64, 2, {2, 3}, INTS(1, 2, 3, 4, 5, 6)}, {I64, 2, {2, 2}, INTS(1, 2, 0, -3)}, {I64, 1, {2},
      INTS(70, 80)}}, {{I64, 2, {2, 3}}}},
    {"GatherND", 13, 2, 1, {{F32, 3, {2, 3, 4}}, {I64, 2, {3, 2}, INTS(1, 2, 0, -1, 1, 0)}}, {{F32, 2, {3, 4}}}},
    {"GatherND", 13, 2, 1, {{F32, 3, {2, 3, 4}}, {I64, 3, {2, 1, 1}, INTS(2, 0)}}, {{F32, 3, {2, 1, 4}}},
     {A_INT("batch_dims", 1)}},
    /* TopK (ties by the lower index), Clip on narrow integers */
    {"TopK", 11, 2, 2, {{F32, 2, {3, 9}}, {I64, 1, {1}, INTS(4)}}, {{F32, 2, {3, 4}}, {I64, 2, {3, 4}}}},
    {"TopK", 11, 2, 2, {{I64, 3, {5, 2, 2}, INTS(3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4)},
                        {I64, 1, {1}, INTS(3)}},
     {{I64, 3, {3, 2, 2}}, {I64, 3, {3, 2, 2}}}, {A_INT("axis", 0), A_INT("largest", 0)}},
    {"TopK", 1, 1, 2, {{F16, 2, {2, 6}}}, {{F16, 2, {2, 2}}, {I64, 2, {2, 2}}}, {A_INT("k", 2)}},
    {"Clip", 13, 3, 1, {{I8, 1, {6}, INTS(-128, -5, 0, 3, 90, 127)}, {I8, 0, {0}, INTS(-4)}, {I8, 0, {0}, INTS(80)}},
     {{I8, 1, {6}}}},
    {"Clip", 13, 2, 1, {{U8, 1, {5}, INTS(0, 4, 9, 200, 255)}, {U8, 0, {0}, INTS(5)}}, {{U8, 1, {5}}}},
    /* recurrent cells: bias, initial states, peepholes, both directions, both layouts, clip */
    {"LSTM", 14, 8, 3,
     {{F32, 3, {3, 2, 4}}, {F32, 3, {1, 20, 4}}, {F32, 3, {1, 20, 5}}, {F32, 2, {1, 40}}, {NONE},
      {F32, 3, {1, 2, 5}}, {F32, 3, {1, 2, 5}}, {F32, 2, {1, 15}}},
     {{F32, 4, {3, 1, 2, 5}}, {F32, 3, {1, 2, 5}}, {F32, 3, {1, 2, 5}}}, {A_INT("hidden_size", 5)}, 1e-4},
    {"GRU", 14, 3, 2, {{F32, 3, {4, 1, 3}}, {F32, 3, {2, 12, 3}}, {F32, 3, {2, 12, 4}}},
     {{F32, 4, {4, 2, 1, 4}}, {F32, 3, {2, 1, 4}}}, {A_STR("direction", "bidirectional")}, 1e-4},
    {"GRU", 14, 4, 2, {{F32, 3, {2, 3, 3}}, {F32, 3, {1, 12, 3}}, {F32, 3, {1, 12, 4}}, {F32, 2, {1, 24}}},
     {{F32, 4, {2, 3, 1, 4}}, {F32, 3, {2, 1, 4}}}, {A_INT("linear_before_reset", 1), A_INT("layout", 1)}, 1e-4},
    {"RNN", 14, 3, 2, {{F32, 3, {3, 2, 4}}, {F32, 3, {1, 5, 4}}, {F32, 3, {1, 5, 5}}},
     {{F32, 4, {3, 1, 2, 5}}, {F32, 3, {1, 2, 5}}}, {A_STR("direction", "reverse"), A_FLOAT("clip", 0.5)}, 1e-4},
    /* sequence_lens (int32): a full, a short and an empty sequence; Y zero past each */
    {"LSTM", 14, 5, 3,
     {{F32, 3, {4, 3, 2}}, {F32, 3, {2, 12, 2}}, {F32, 3, {2, 12, 3}}, {F32, 2, {2, 24}}, {KILN_DTYPE_I32, 1, {3}, INTS(4, 1, 0)}},
     {{F32, 4, {4, 2, 3, 3}}, {F32, 3, {2, 3, 3}}, {F32, 3, {2, 3, 3}}}, {A_STR("direction", "bidirectional")}, 1e-4},
    {"GRU", 14, 5, 2,
     {{F32, 3, {3, 4, 2}}, {F32, 3, {1, 9, 2}}, {F32, 3, {1, 9, 3}}, {NONE}, {KILN_DTYPE_I32, 1, {3}, INTS(2, 4, 3)}},
     {{F32, 4, {3, 4, 1, 3}}, {F32, 3, {3, 1, 3}}}, {A_STR("direction", "reverse"), A_INT("layout", 1)}, 1e-4},
};

static uint64_t g_seed = 0x1234567887654321ull;
static const kiln__device *g_dev;
static int g_fail, g_ran;

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

static void set_tensor(kiln_tensor *t, kiln_dtype dt, int nd, const int64_t *dims, void *data) {
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = nd;
    t->data = data;
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        t->dims[d] = dims[d];
        t->strides[d] = s;
        s *= dims[d];
    }
}

static double get_f64(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
    case F32: return ((const float *)p)[i];
    case F16: return kiln_f16_to_f32(((const uint16_t *)p)[i]);
    case BF16: return kiln_bf16_to_f32(((const uint16_t *)p)[i]);
    case F64: return ((const double *)p)[i];
    case I8: return ((const int8_t *)p)[i];
    case KILN_DTYPE_I16: return ((const int16_t *)p)[i];
    case I32: return ((const int32_t *)p)[i];
    case I64: return (double)((const int64_t *)p)[i];
    case U16: return ((const uint16_t *)p)[i];
    case U32: return ((const uint32_t *)p)[i];
    case U64: return (double)((const uint64_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}

/* integers through int64 (exact), floats through double */
static void put(void *p, kiln_dtype t, int64_t i, double v) {
    int64_t k = (int64_t)v;
    switch (t) {
    case F32: ((float *)p)[i] = (float)v; break;
    case F16: ((uint16_t *)p)[i] = kiln_f32_to_f16((float)v); break;
    case BF16: ((uint16_t *)p)[i] = kiln_f32_to_bf16((float)v); break;
    case F64: ((double *)p)[i] = v; break;
    case I8: ((int8_t *)p)[i] = (int8_t)k; break;
    case KILN_DTYPE_I16: ((int16_t *)p)[i] = (int16_t)k; break;
    case I32: ((int32_t *)p)[i] = (int32_t)k; break;
    case I64: ((int64_t *)p)[i] = k; break;
    case U8: ((uint8_t *)p)[i] = (uint8_t)k; break;
    case U16: ((uint16_t *)p)[i] = (uint16_t)k; break;
    case U32: ((uint32_t *)p)[i] = (uint32_t)k; break;
    case U64: ((uint64_t *)p)[i] = (uint64_t)k; break;
    default: ((uint8_t *)p)[i] = v != 0; break;
    }
}

static int64_t numel(int nd, const int64_t *d) {
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= d[i];
    return n;
}

/* One case, one tactic: CPU impl vs cuda_impl.  Returns 0 or 1 (failed). */
static int run_case(const tcase *tc, const kiln__op *op, const kiln_attrs *av, int tactic) {
    const kiln_quick_op *q = op->quick;
    kiln_tensor hin[8], din[8], hout[3], dout[3];
    const int nin = tc->nin, nout = tc->nout;
    void *dbuf[12] = {0};
    int nd = 0;
    for (int i = 0; i < nin; i++) {
        const tin *s = &tc->in[i];
        if (s->t == NONE) {
            memset(&hin[i], 0, sizeof hin[i]);
            din[i] = hin[i];
            continue;
        }
        int64_t n = numel(s->nd, s->dims);
        size_t bytes = (size_t)n * kiln_dtype_size(s->t);
        void *h = xmalloc(bytes);
        float lo = s->lo != s->hi ? s->lo : -2, hi = s->lo != s->hi ? s->hi : 2;
        for (int64_t k = 0; k < n; k++)
            put(h, s->t, k, s->ints ? (double)s->ints[k] : s->fl ? s->fl[k] : test_randf(&g_seed, lo, hi));
        set_tensor(&hin[i], s->t, s->nd, s->dims, h);
        din[i] = hin[i];
        if (q->cuda_host_inputs & (1u << i)) continue; /* the launcher reads it on the host */
        void *d = NULL;
        ASSERT_OK(g_dev->alloc(bytes, &d));
        ASSERT_OK(g_dev->copy(d, h, bytes, NULL));
        din[i].data = d;
        din[i].device = KILN_DEVICE_CUDA;
        dbuf[nd++] = d;
    }
    for (int i = 0; i < nout; i++) {
        const tout *s = &tc->out[i];
        size_t bytes = (size_t)numel(s->nd, s->dims) * kiln_dtype_size(s->t);
        void *h = xmalloc(bytes), *d = NULL;
        memset(h, 0xFF, bytes);
        set_tensor(&hout[i], s->t, s->nd, s->dims, h);
        ASSERT_OK(g_dev->alloc(bytes, &d));
        ASSERT_OK(g_dev->memset(d, 0xFF, bytes, NULL));
        set_tensor(&dout[i], s->t, s->nd, s->dims, d);
        dout[i].device = KILN_DEVICE_CUDA;
        dbuf[nd++] = d;
    }
    /* CPU reference */
    kiln__pool *pool = kiln__pool_create(1);
    ASSERT(pool);
    struct kiln_exec ex = {.device = KILN_DEVICE_CPU, .pool = pool};
    kiln_call hc = {.in = hin, .nin = tc->nin, .out = hout, .nout = tc->nout, .attrs = av, .exec = &ex,
                    .layer = "cpu"};
    size_t ws = q->workspace ? q->workspace(&hc) : 0;
    hc.workspace = ws ? kiln__aligned_alloc(ws) : NULL;
    hc.workspace_size = ws;
    int rc = q->impl(&hc);
    if (rc) TEST__FAIL("%s v%d on the CPU: %s", tc->op, tc->ver, kiln_errmsg());
    kiln__aligned_free(hc.workspace);
    kiln__pool_free(pool);
    /* GPU */
    kiln_call dc = {.in = din, .nin = tc->nin, .out = dout, .nout = tc->nout, .attrs = av, .tactic = tactic,
                    .layer = "gpu"};
    size_t dws = q->cuda_workspace ? q->cuda_workspace(&dc) : 0;
    void *dw = NULL;
    if (dws) ASSERT_OK(g_dev->alloc(dws, &dw));
    dc.workspace = dw;
    dc.workspace_size = dws;
    rc = q->cuda_impl(&dc);
    if (!rc) rc = g_dev->stream_sync(NULL);
    int bad = 0, skipped = 0;
    if (rc == KILN_EUNSUPPORTED && tactic > 1) { /* e.g. cuBLASLt offers fewer algorithms: the builder drops it */
        fprintf(stderr, "skip %s v%d tactic %d: %s\n", tc->op, tc->ver, tactic, kiln_errmsg());
        rc = 0;
        skipped = 1;
    }
    if (rc) {
        fprintf(stderr, "FAIL %s v%d tactic %d: %s\n", tc->op, tc->ver, tactic, kiln_errmsg());
        bad = 1;
    }
    double tol = tc->tol > 0 ? tc->tol : tc->in[0].t == F32 || tc->in[0].t == F64 ? 2e-5 : 8e-3;
    for (int o = 0; o < nout && !bad && !skipped; o++) {
        int64_t n = kiln_tensor_numel(&hout[o]);
        size_t bytes = (size_t)n * kiln_dtype_size(hout[o].dtype);
        void *g = xmalloc(bytes);
        ASSERT_OK(g_dev->copy(g, dout[o].data, bytes, NULL));
        ASSERT_OK(g_dev->stream_sync(NULL));
        int fl = hout[o].dtype == F32 || hout[o].dtype == F16 || hout[o].dtype == BF16 || hout[o].dtype == F64;
        for (int64_t k = 0; k < n && !bad; k++) {
            double a = get_f64(g, hout[o].dtype, k), b = get_f64(hout[o].data, hout[o].dtype, k);
            int ok = fl ? (a == b || fabs(a - b) <= tol * (1 + fabs(b)) || (a != a && b != b)) : a == b; /* inf == inf */
            if (!ok) {
                fprintf(stderr, "FAIL %s v%d tactic %d output %d element %lld: gpu %.9g cpu %.9g\n", tc->op, tc->ver,
                        tactic, o, (long long)k, a, b);
                bad = 1;
            }
        }
        free(g);
    }
    if (dw) g_dev->free(dw);
    for (int i = 0; i < nd; i++) g_dev->free(dbuf[i]);
    for (int i = 0; i < nin; i++) free(hin[i].data);
    for (int i = 0; i < nout; i++) free(hout[i].data);
    if (!bad && !skipped) fprintf(stderr, "ok %s v%d tactic %d\n", tc->op, tc->ver, tactic);
    return bad;
}

static const char *g_only; /* --only OP: that op's cases alone (e.g. under compute-sanitizer) */
static int g_small;         /* --small: cases of at most 2^20 output elements */

static void run_all(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const tcase *tc = &cases[i];
        if ((g_only && strcmp(tc->op, g_only)) || (g_small && numel(tc->out[0].nd, tc->out[0].dims) > (1 << 20)))
            continue;
        const char *sep = strstr(tc->op, "::"); /* "ns::name" (kiln's own ops), else ai.onnx */
        char ns[32] = "ai.onnx";
        if (sep) snprintf(ns, sizeof ns, "%.*s", (int)(sep - tc->op), tc->op);
        const kiln__op *op = kiln__registry_resolve(ns, sep ? sep + 2 : tc->op, tc->ver);
        ASSERT(op && op->quick);
        if (!op->quick->cuda_impl) TEST__FAIL("%s v%d has no cuda_impl", tc->op, tc->ver);
        kiln__attrset s;
        ASSERT_OK(kiln__attrset_init(&s, op));
        for (int k = 0; k < 6 && tc->kv[k].name; k++) {
            const akv *kv = &tc->kv[k];
            kiln_attr_value v;
            memset(&v, 0, sizeof v);
            v.present = 1;
            v.type = kv->type;
            v.i = kv->i;
            v.f = kv->f;
            if (kv->type == KILN_ATTR_ARRAY) {
                v.elem = KILN_DTYPE_I64;
                v.count = kv->n;
                v.data = kv->ints;
            }
            if (kv->type == KILN_ATTR_STRING) {
                v.s = kv->s;
                v.len = strlen(kv->s);
            }
            ASSERT_OK(kiln__attrset_set(&s, kv->name, &v));
        }
        kiln_attrs av = kiln__attrset_view(&s);
        const kiln_combo *f = op->quick->cuda_formats;
        int tactics[KILN_MAX_TACTICS + 1] = {0}, nt = 0;
        for (int k = 0; f && f[0].types && k < KILN_MAX_TACTICS && f[0].tactics[k]; k++) tactics[nt++] = f[0].tactics[k];
        if (!nt) nt = 1;
        for (int t = 0; t < nt; t++) {
            g_fail += run_case(tc, op, &av, tactics[t]);
            g_ran++;
        }
        kiln__attrset_free(&s);
    }
}

/* ---- errors found on the GPU ------------------------------------------------ */

/* A CUDA engine of net (freed), untimed. */
static kiln_engine *build_cuda_engine(kiln_network *net) {
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_device(cfg, KILN_DEVICE_CUDA);
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING);
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    return e;
}

/* Gather's kernel with an index out of range fills the fault record it is
 * given: the layer's tag, the index, the range, where it was. */
static void test_fault_record(void) {
    kiln_cu_fault *f = NULL;
    ASSERT_OK(g_dev->host_alloc(sizeof *f, (void **)&f));
    memset(f, 0, sizeof *f);
    kiln__cuda_exec cx;
    memset(&cx, 0, sizeof cx);
    cx.base.device = KILN_DEVICE_CUDA;
    cx.fault = f;
    const kiln__op *op = kiln__registry_resolve("ai.onnx", "Gather", 13);
    ASSERT(op && op->quick && op->quick->cuda_impl);
    kiln__attrset s;
    ASSERT_OK(kiln__attrset_init(&s, op));
    kiln_attr_value v = {.present = 1, .type = KILN_ATTR_INT, .i = 1};
    ASSERT_OK(kiln__attrset_set(&s, "axis", &v));
    kiln_attrs av = kiln__attrset_view(&s);
    float x[15];
    int64_t idx[3] = {1, 7, -2}, xd[2] = {3, 5}, id = 3, yd[2] = {3, 3};
    for (int i = 0; i < 15; i++) x[i] = test_randf(&g_seed, -2, 2);
    void *dx, *di, *dy;
    ASSERT_OK(g_dev->alloc(sizeof x, &dx));
    ASSERT_OK(g_dev->alloc(sizeof idx, &di));
    ASSERT_OK(g_dev->alloc(9 * sizeof(float), &dy));
    ASSERT_OK(g_dev->copy(dx, x, sizeof x, NULL));
    ASSERT_OK(g_dev->copy(di, idx, sizeof idx, NULL));
    kiln_tensor in[2], out;
    set_tensor(&in[0], F32, 2, xd, dx);
    set_tensor(&in[1], I64, 1, &id, di);
    set_tensor(&out, F32, 2, yd, dy);
    in[0].device = in[1].device = out.device = KILN_DEVICE_CUDA;
    kiln_call c = {.in = in, .nin = 2, .out = &out, .nout = 1, .attrs = &av, .exec = &cx.base, .layer = "gbad"};
    ASSERT_OK(op->quick->cuda_impl(&c));
    ASSERT_OK(g_dev->stream_sync(NULL));
    ASSERT_EQ(f->code, KILN_CU_FAULT_INDEX);
    ASSERT_EQ(f->tag, (uint64_t)(uintptr_t)c.layer);
    ASSERT_EQ(f->value, 7);
    ASSERT_EQ(f->lo, -5);
    ASSERT_EQ(f->hi, 5);
    ASSERT_EQ(f->pos, 1);
    ASSERT_EQ(f->input, 1);
    /* in range: no report */
    memset(f, 0, sizeof *f);
    idx[1] = -5;
    ASSERT_OK(g_dev->copy(di, idx, sizeof idx, NULL));
    ASSERT_OK(op->quick->cuda_impl(&c));
    ASSERT_OK(g_dev->stream_sync(NULL));
    ASSERT_EQ(f->code, 0);
    g_dev->free(dx);
    g_dev->free(di);
    g_dev->free(dy);
    g_dev->host_free(f);
    kiln__attrset_free(&s);
    fprintf(stderr, "ok fault record (Gather index 7 of 5)\n");
}

/* A network whose Gather index comes from the user: a run with an index out
 * of range fails naming the layer; the context stays usable (eager and
 * graph-replayed runs alike). */
static void test_gather_oob_run(void) {
    kiln_network *net = kiln_network_create();
    int64_t xd[2] = {4, 5}, id = 3;
    ASSERT_OK(kiln_network_add_input(net, "x", F32, 2, xd, NULL));
    ASSERT_OK(kiln_network_add_input(net, "i", I64, 1, &id, NULL));
    const char *ins[2] = {"x", "i"}, *outs[1] = {"g"}, *rin[1] = {"g"}, *rout[1] = {"y"};
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Gather", 13, "pick_rows", 2, ins, 1, outs));
    ASSERT(kiln_network_add_layer(net, "ai.onnx::Relu", 14, "relu", 1, rin, 1, rout));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_engine *e = build_cuda_engine(net);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    float x[20], y[15];
    for (int i = 0; i < 20; i++) x[i] = test_randf(&g_seed, -2, 2);
    int64_t idx[3];
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "i", idx, sizeof idx));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    for (int round = 0; round < 4; round++) {
        int bad = round % 2 == 0;
        idx[0] = 2, idx[1] = bad ? (round ? -5 : 4) : -1, idx[2] = 0;
        memset(y, 0xFF, sizeof y);
        int rc = kiln_context_run(ctx);
        if (bad) {
            if (rc != KILN_EINVAL || !strstr(kiln_errmsg(), "'pick_rows'") || !strstr(kiln_errmsg(), "out of range"))
                TEST__FAIL("run %d with index %lld: rc %d, message '%s'", round, (long long)idx[1], rc, kiln_errmsg());
            fprintf(stderr, "ok bad index: %s\n", kiln_errmsg());
            continue;
        }
        ASSERT_OK(rc);
        for (int r = 0; r < 3; r++)
            for (int k = 0; k < 5; k++) {
                float v = x[(idx[r] < 0 ? idx[r] + 4 : idx[r]) * 5 + k];
                ASSERT(y[r * 5 + k] == (v > 0 ? v : 0));
            }
    }
    kiln_context_free(ctx);
    kiln_engine_free(e);
    fprintf(stderr, "ok Gather out of range in a run names the layer, context usable\n");
}

/* An op whose CUDA kernel reads a wild address (a real kernel fault). */
static int boom_cpu(const kiln_call *c) {
    memcpy(c->out[0].data, c->in[0].data, (size_t)kiln_tensor_numel(&c->in[0]) * sizeof(float));
    return 0;
}
static int boom_gpu(const kiln_call *c) {
    int64_t n = kiln_tensor_numel(&c->in[0]), one = 1;
    return kiln__cu_copy(c, F32, 1, &n, (const void *)(uintptr_t)0x10, &one, c->out[0].data, &one);
}
static int boom_shape(kiln_shape_ctx *c) {
    c->out[0] = c->in[0];
    return 0;
}
static const kiln_combo boom_formats[] = {{"FP32", NULL, {0}}, {NULL, NULL, {0}}};
static const kiln_quick_op boom_op = {
    .ns = "cutest", .name = "boom", .version = 1, .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
    .shape = boom_shape, .impl = boom_cpu, .cuda_impl = boom_gpu, .cuda_formats = boom_formats};
KILN_OP(boom_op)

/* In a process of its own (a fault is sticky): the run fails naming the
 * layer and saying the context is dead; the next run says so again. */
static int fault_child(void) {
    kiln_network *net = kiln_network_create();
    int64_t d = 256;
    ASSERT_OK(kiln_network_add_input(net, "x", F32, 1, &d, NULL));
    const char *ins[1] = {"x"}, *outs[1] = {"y"};
    ASSERT(kiln_network_add_layer(net, "cutest::boom", 1, "boom_layer", 1, ins, 1, outs));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_engine *e = build_cuda_engine(net);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    float x[256] = {0}, y[256];
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    int rc = kiln_context_run(ctx);
    fprintf(stderr, "fault run: rc %d: %s\n", rc, kiln_errmsg());
    if (!rc || !strstr(kiln_errmsg(), "'boom_layer'") || !strstr(kiln_errmsg(), "context is dead")) return 1;
    rc = kiln_context_run(ctx);
    fprintf(stderr, "next run: rc %d: %s\n", rc, kiln_errmsg());
    if (rc != KILN_EDEVICE || !strstr(kiln_errmsg(), "context is dead")) return 1;
    kiln_context_free(ctx);
    kiln_engine_free(e);
    return 0;
}

static void test_kernel_fault(void) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    ASSERT(n > 0);
    self[n] = 0;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    ASSERT(pid >= 0);
    if (pid == 0) {
        execl(self, self, "--fault", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    ASSERT(waitpid(pid, &st, 0) == pid);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) TEST__FAIL("kernel fault child: status %d", st);
    fprintf(stderr, "ok kernel fault names the layer, context dead\n");
}

/* The context's side of a fault report, on any machine: on the stand-in
 * device (fake.c, host memory) an op's "kernel" writes the fault record as
 * a GPU kernel would when its index input holds a negative value; the run
 * fails naming the layer, the record is cleared, the next good run works. */
static int fcheck_cpu(const kiln_call *c) {
    memcpy(c->out[0].data, c->in[0].data, (size_t)kiln_tensor_numel(&c->in[0]) * sizeof(float));
    return 0;
}
static int fcheck_body(const kiln_call *c) {
    kiln_cu_check ck = kiln__cu_check(c);
    const float *x = c->in[0].data;
    if (!ck.fault) return kiln_set_error(KILN_EINTERNAL, "fcheck: no fault record in a context run");
    for (int64_t i = 0, n = kiln_tensor_numel(&c->in[0]); i < n; i++)
        if (x[i] < 0 && !ck.fault->code) {
            ck.fault->tag = ck.tag;
            ck.fault->value = (int64_t)x[i], ck.fault->lo = 0, ck.fault->hi = 100, ck.fault->pos = i;
            ck.fault->input = 0;
            ck.fault->code = KILN_CU_FAULT_INDEX;
        }
    return fcheck_cpu(c);
}
/* the fake device's memory is readable only inside its "kernels" */
static int fcheck_fake_gpu(const kiln_call *c) { return kiln__cuda_fake_kernel(fcheck_body, c); }
static const kiln_quick_op fcheck_op = {
    .ns = "cutest", .name = "fcheck", .version = 1, .min_inputs = 1, .max_inputs = 1, .num_outputs = 1,
    .shape = boom_shape, .impl = fcheck_cpu, .cuda_impl = fcheck_fake_gpu, .cuda_formats = boom_formats};
KILN_OP(fcheck_op)

static void test_fault_context_fake(void) {
    kiln__cuda_fake(1);
    kiln_network *net = kiln_network_create();
    int64_t d = 5;
    ASSERT_OK(kiln_network_add_input(net, "x", F32, 1, &d, NULL));
    const char *ins[1] = {"x"}, *mid[1] = {"m"}, *outs[1] = {"y"};
    ASSERT(kiln_network_add_layer(net, "cutest::fcheck", 1, "first", 1, ins, 1, mid));
    ASSERT(kiln_network_add_layer(net, "cutest::fcheck", 1, "second", 1, mid, 1, outs));
    ASSERT_OK(kiln_network_mark_output(net, "y"));
    kiln_engine *e = build_cuda_engine(net);
    kiln_context *ctx = NULL;
    ASSERT_OK(kiln_context_create(e, 1, &ctx));
    float x[5] = {1, 2, 3, 4, 5}, y[5];
    ASSERT_OK(kiln_context_bind(ctx, "x", x, sizeof x));
    ASSERT_OK(kiln_context_bind(ctx, "y", y, sizeof y));
    ASSERT_OK(kiln_context_run(ctx));
    ASSERT(y[4] == 5);
    x[3] = -7;
    int rc = kiln_context_run(ctx);
    if (rc != KILN_EINVAL || !strstr(kiln_errmsg(), "layer 'first'") || !strstr(kiln_errmsg(), "element 3 is -7"))
        TEST__FAIL("bad value: rc %d, message '%s'", rc, kiln_errmsg());
    x[3] = 4;
    ASSERT_OK(kiln_context_run(ctx)); /* cleared: the context is usable */
    ASSERT(y[3] == 4);
    kiln_context_free(ctx);
    kiln_engine_free(e);
    kiln__cuda_fake(0);
    fprintf(stderr, "ok fault record turned into an error naming the layer (fake device)\n");
}

/* --tf32 reaches the GEMMs: the compute type kiln__cuda_gemm picks for an
 * FP32 GEMM of a call whose engine allows TF32 (no GPU needed). */
static void test_tf32_compute(void) {
    kiln__cuda_exec cx;
    memset(&cx, 0, sizeof cx);
    cx.base.device = KILN_DEVICE_CUDA;
    kiln_call c = {.exec = &cx.base, .layer = "mm"};
    kiln_cuda_gemm g = {.m = 4, .n = 4, .k = 4, .dtype = F32};
    ASSERT_EQ(kiln__cuda_gemm_compute(&c, &g), KILN_CUDA_COMPUTE_32F);
    ASSERT_EQ(kiln__cuda_gemm_compute(NULL, &g), KILN_CUDA_COMPUTE_32F);
    cx.allow_tf32 = 1;
    ASSERT_EQ(kiln__cuda_gemm_compute(&c, &g), KILN_CUDA_COMPUTE_32F_FAST_TF32);
    g.dtype = F16; /* 16-bit GEMMs accumulate in FP32 either way */
    ASSERT_EQ(kiln__cuda_gemm_compute(&c, &g), KILN_CUDA_COMPUTE_32F);
    cx.base.device = KILN_DEVICE_CPU; /* not a CUDA exec: never */
    g.dtype = F32;
    ASSERT_EQ(kiln__cuda_gemm_compute(&c, &g), KILN_CUDA_COMPUTE_32F);
    fprintf(stderr, "ok --tf32 selects CUBLAS_COMPUTE_32F_FAST_TF32 for FP32 GEMMs\n");
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--fault")) return fault_child();
    if (argc > 2 && !strcmp(argv[1], "--only")) g_only = argv[2];
    g_small = g_only && argc > 3 && !strcmp(argv[3], "--small");
    if (!g_only) {
        test_tf32_compute();
        test_fault_context_fake();
    }
    g_dev = kiln__device_cuda();
    if (!g_dev) {
        printf("SKIP: %s\n", kiln_errmsg());
        return 77;
    }
    /* the kernels: one probe launch says whether libkiln has them */
    const kiln__op *relu = kiln__registry_resolve("ai.onnx", "Relu", 14);
    float one = 1;
    void *d = NULL;
    ASSERT_OK(g_dev->alloc(4, &d));
    ASSERT_OK(g_dev->copy(d, &one, 4, NULL));
    kiln_tensor t;
    int64_t dim = 1;
    set_tensor(&t, F32, 1, &dim, d);
    t.device = KILN_DEVICE_CUDA;
    kiln_call c = {.in = &t, .nin = 1, .out = &t, .nout = 1, .layer = "probe"};
    kiln__attrset s;
    ASSERT_OK(kiln__attrset_init(&s, relu));
    kiln_attrs av = kiln__attrset_view(&s);
    c.attrs = &av;
    if (relu->quick->cuda_impl(&c)) {
        printf("SKIP: %s\n", kiln_errmsg());
        return 77;
    }
    kiln__attrset_free(&s);
    g_dev->free(d);
    run_all();
    if (!g_only) {
        test_fault_record();
        test_gather_oob_run();
        test_kernel_fault();
    }
    fprintf(stderr, "test_cuda_ops: %d of %d case runs failed\n", g_fail, g_ran);
    return g_fail ? 1 : 0;
}
