/*
 * cuda_mma.cuh — the tensor-core step the FP16/BF16 kernels share
 * (attention_tc.cu, conv_igemm.cu): tc_ops<T>::mma, c += a b with
 * mma.sync m16n8k16 and FP32 accumulators, and tc_ops<T>::pack, two floats
 * as the .b32 of an element pair (lo in the low half).
 *
 * mma.sync m16n8k16 (FP16 and BF16) needs sm_80 or newer, the oldest GPU
 * kiln's fatbin targets.  Fragment layouts (PTX ISA, "Matrix fragments for
 * mma.m16n8k16"), g = lane / 4, t = lane % 4:
 *   A (16 x 16, row): a0 = (g, 2t..2t+1), a1 = (g + 8, 2t..), a2 = (g, 2t + 8..), a3 = (g + 8, 2t + 8..)
 *   B (16 x 8, col):  b0 = (k 2t..2t+1, n g), b1 = (k 2t + 8.., n g)
 *   C (16 x 8 f32):   c0, c1 = (g, 2t), (g, 2t + 1); c2, c3 = (g + 8, 2t), (g + 8, 2t + 1)
 */
#ifndef KILN_CUDA_MMA_CUH
#define KILN_CUDA_MMA_CUH

#include "ops/common/cuda_common.cuh"

template <typename T> struct tc_ops;
#define TC_OPS(T, T2, CVT, PTXT)                                                                          \
    template <> struct tc_ops<T> {                                                                      \
        static __device__ __forceinline__ uint32_t pack(float lo, float hi) {                           \
            T2 h = CVT(lo, hi);                                                                         \
            return *reinterpret_cast<uint32_t *>(&h);                                                   \
        }                                                                                               \
        static __device__ __forceinline__ void mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) { \
            asm("mma.sync.aligned.m16n8k16.row.col.f32." PTXT "." PTXT                                   \
                ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                          \
                : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                        \
                : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));                        \
        }                                                                                               \
    };
TC_OPS(kc_f16, __half2, __floats2half2_rn, "f16")
TC_OPS(kc_bf16, __nv_bfloat162, __floats2bfloat162_rn, "bf16")
#undef TC_OPS

#endif
