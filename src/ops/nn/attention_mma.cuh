/*
 * attention_mma.cuh — what the tensor-core flash kernels (attention_tc.cu,
 * attention_tc_async.cu) share: the mma.sync m16n8k16 step for FP16/BF16
 * with FP32 accumulators, ldmatrix, and the online-softmax step of one key
 * tile held in registers.
 *
 * Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"),
 * g = lane / 4, t = lane % 4:
 *   A (16 x 16, row): a0 = (g, 2t..2t+1), a1 = (g + 8, 2t..), a2 = (g, 2t + 8..), a3 = (g + 8, 2t + 8..)
 *   B (16 x 8, col):  b0 = (k 2t..2t+1, n g), b1 = (k 2t + 8.., n g)
 *   C (16 x 8 f32):   c0, c1 = (g, 2t), (g, 2t + 1); c2, c3 = (g + 8, 2t), (g + 8, 2t + 1)
 * A warp's scores for 16 query rows and BK keys are s[BK / 8][4] (C
 * fragments, key group n = keys 8n..8n+7); the m16n8 C layout of two
 * neighbouring key groups is the m16k16 A layout, so the probabilities
 * feed the P V mma from registers (tc_pfrag).
 */
#ifndef KILN_ATTENTION_MMA_CUH
#define KILN_ATTENTION_MMA_CUH

#include "ops/nn/attention_flash.cuh"

#define KC_LOG2E 1.4426950408889634f

/* pack: two floats as the .b32 of an element pair (lo in the low half);
 * mma: c += a b, m16n8k16, FP32 accumulators. */
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

/* Four 8 x 8 b16 matrices from shared memory: lanes 8i..8i+7 give the row
 * addresses of matrix i, r[i] is this lane's pair of it (row lane / 4,
 * columns 2 (lane % 4)..); .trans: of its transpose. */
__device__ __forceinline__ void tc_ldsm4(uint32_t *r, const void *row) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
__device__ __forceinline__ void tc_ldsm4_trans(uint32_t *r, const void *row) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* The probabilities of keys 16kk..16kk+15 (key groups 2kk, 2kk + 1) as an A fragment. */
template <typename T> __device__ __forceinline__ void tc_pfrag(uint32_t *pa, const float (*s)[4], int kk) {
    typedef tc_ops<T> O;
    pa[0] = O::pack(s[2 * kk][0], s[2 * kk][1]);
    pa[1] = O::pack(s[2 * kk][2], s[2 * kk][3]);
    pa[2] = O::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[3] = O::pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

/* The running softmax state of this thread's two query rows r0, r1 = r0 + 8:
 * max m (base 2), this thread's part of the sum l. */
struct tc_rows {
    float m0, m1, l0, l1;
};

/* One key tile (first key j0, nk valid keys of BK) of scores s into
 * probabilities, online: scaled to base 2 (scale * log2 e), keys past nk
 * at -inf, the mask (mb: this batch-head's) added; the running max and
 * sum updated and the output so far o (NO column groups) rescaled by
 * exp2(m_old - m_new).  A row masked out so far (max -inf) subtracts 0,
 * so its terms stay 0. */
template <typename T, int BK, int NO>
__device__ __forceinline__ void tc_softmax_tile(const kiln_cu_flash &p, float (*s)[4], float (*o)[4], tc_rows &st,
                                                int nk, int64_t j0, int64_t r0, const T *mb) {
    const int t = threadIdx.x & 3;
    const int64_t r1 = r0 + 8;
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int n = 0; n < BK / 8; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int j = n * 8 + 2 * t + e;
            const bool in = j < nk;
            float x0 = in ? s[n][e] * p.scale_log2 : -INFINITY, x1 = in ? s[n][2 + e] * p.scale_log2 : -INFINITY;
            if (p.has_mask && in) {
                const T *mc = mb + (j0 + j) * p.ms[3];
                if (r0 < p.sq) x0 += KC_LOG2E * kc_ldf(mc[r0 * p.ms[2]]);
                if (r1 < p.sq) x1 += KC_LOG2E * kc_ldf(mc[r1 * p.ms[2]]);
            }
            s[n][e] = x0;
            s[n][2 + e] = x1;
            mx0 = fmaxf(mx0, x0);
            mx1 = fmaxf(mx1, x1);
        }
#pragma unroll
    for (int sh = 1; sh < 4; sh <<= 1) { /* the 4 threads of a row */
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, sh));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, sh));
    }
    const float mn0 = fmaxf(st.m0, mx0), mn1 = fmaxf(st.m1, mx1);
    const float z0 = mn0 == -INFINITY ? 0.0f : mn0, z1 = mn1 == -INFINITY ? 0.0f : mn1;
    const float a0 = exp2f(st.m0 - z0), a1 = exp2f(st.m1 - z1); /* 0 on the first tile */
    st.m0 = mn0;
    st.m1 = mn1;
    st.l0 *= a0;
    st.l1 *= a1;
#pragma unroll
    for (int n = 0; n < BK / 8; n++) {
        s[n][0] = exp2f(s[n][0] - z0);
        s[n][1] = exp2f(s[n][1] - z0);
        s[n][2] = exp2f(s[n][2] - z1);
        s[n][3] = exp2f(s[n][3] - z1);
        st.l0 += s[n][0] + s[n][1];
        st.l1 += s[n][2] + s[n][3];
    }
#pragma unroll
    for (int n = 0; n < NO; n++) {
        o[n][0] *= a0;
        o[n][1] *= a0;
        o[n][2] *= a1;
        o[n][3] *= a1;
    }
}

/* After the last tile: 1 / the row sums (the 4 threads of a row hold
 * parts; Sk = 0 gives 0, so the output is zeros). */
__device__ __forceinline__ void tc_row_inv(tc_rows &st, float &inv0, float &inv1) {
#pragma unroll
    for (int sh = 1; sh < 4; sh <<= 1) {
        st.l0 += __shfl_xor_sync(0xffffffffu, st.l0, sh);
        st.l1 += __shfl_xor_sync(0xffffffffu, st.l1, sh);
    }
    inv0 = st.l0 > 0.0f ? 1.0f / st.l0 : 0.0f;
    inv1 = st.l1 > 0.0f ? 1.0f / st.l1 : 0.0f;
}

#endif
