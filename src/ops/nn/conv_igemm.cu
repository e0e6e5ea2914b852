/*
 * conv_igemm.cu — Conv tactics 5 and 6 (conv_cuda.c) for FP16/BF16: an
 * implicit-GEMM convolution on tensor cores that applies the bias, the
 * fused residual and the fused activation before its one store, so a
 * layer is one kernel instead of im2col + cuBLASLt GEMM + bias_act.
 * (cuBLASLt cannot take them: the NCHW output is the column-major
 * [HW x Cout] matrix, its BIAS epilogue runs along D's rows = pixels.)
 *
 *   conv_igemm<BN>_<T>(p, x, w, bias, res, y)     BN = 64 (tactic 5), 32 (tactic 6)
 *
 * Per group (grid z), Y[co][q] = sum_k W[co][k] X'[k][q] with co < Cout /
 * group, q over all images' output pixels (N * OH * OW: the batch is folded
 * into the columns) and k over Cin / group * KH * KW in W's own order
 * (k = (c * KH + r) * KW + s).  X' is the im2col matrix, never stored: the
 * block gathers its slice from the image (zero padding, strides,
 * dilations).  A block of 4 warps (2 x 2) owns a 64 x BN tile of Y; per K
 * step of 32 it stages W's 64 x 32 slice and X''s 32 x BN slice in shared
 * memory, both k-contiguous with rows padded by 8 elements (the fragment
 * loads hit 32 distinct banks), and each warp runs 2 x BN/16 mma.sync
 * m16n8k16 per 16 of K (tc_ops of attention_mma.cuh, the tensor-core step the
 * attention kernels use), FP32 accumulators.  The next step's
 * elements are loaded into registers while the tensor cores work on this
 * one.  A thread gathers a run of consecutive k rows of one column, so the
 * (c, r, s) of its rows are decoded once per step and then stepped; the
 * threads of a warp read neighbouring output pixels.
 */
#include "ops/nn/attention_mma.cuh" /* tc_ops: the mma.sync m16n8k16 step */

#define IG_BM 64
#define IG_BK 32
#define IG_PAD 8
#define IG_THREADS 128

/* The block's next K step into registers, as raw 16-bit pairs (the
 * element type does not matter until the mma; zero is 0 in FP16 and BF16):
 * W's slice (16 elements of row m0 + ar from column k0 + ac; vec: rows are
 * 16-byte aligned, so two 16-byte loads) and this thread's run of X' rows. */
template <int BL>
__device__ __forceinline__ void ig_load(const kiln_cu_conv &p, const uint16_t *wg, const uint16_t *xq, int64_t K,
                                        int64_t kpg, int64_t m0, int64_t k0, int vec, int ar, int ac, int bk,
                                        bool qok, int iy0, int ix0, uint4 *areg, uint32_t *breg) {
    const int64_t row = m0 + ar, kc = k0 + ac;
    if (vec) {
#pragma unroll
        for (int v = 0; v < 2; v++)
            areg[v] = row < kpg && kc + 8 * v < K ? *reinterpret_cast<const uint4 *>(wg + row * K + kc + 8 * v)
                                                  : make_uint4(0, 0, 0, 0);
    } else {
        uint32_t u[8];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t lo = row < kpg && kc + 2 * i < K ? wg[row * K + kc + 2 * i] : 0;
            const uint32_t hi = row < kpg && kc + 2 * i + 1 < K ? wg[row * K + kc + 2 * i + 1] : 0;
            u[i] = lo | hi << 16;
        }
        areg[0] = make_uint4(u[0], u[1], u[2], u[3]);
        areg[1] = make_uint4(u[4], u[5], u[6], u[7]);
    }
    const int kk = p.kh * p.kw;
    const int64_t kg = k0 + bk;
    int c = (int)(kg / kk), rs = (int)(kg - (int64_t)c * kk), r = rs / p.kw, s = rs - r * p.kw;
#pragma unroll
    for (int i = 0; i < BL; i++) {
        const int iy = iy0 + r * p.dh, ix = ix0 + s * p.dw;
        const uint32_t v = qok && kg + i < K && iy >= 0 && iy < p.h && ix >= 0 && ix < p.w
                               ? xq[((int64_t)c * p.h + iy) * p.w + ix]
                               : 0;
        breg[i / 2] = i % 2 ? breg[i / 2] | v << 16 : v;
        if (++s == p.kw) {
            s = 0;
            if (++r == p.kh) r = 0, c++;
        }
    }
}

template <typename T, int BN>
__device__ __forceinline__ void kc_conv_igemm(const kiln_cu_conv &p, const T *x, const T *w, const T *bias,
                                              const T *res, T *y) {
    typedef tc_ops<T> O;
    constexpr int WN = BN / 16;                   /* n8 tiles per warp: a warp owns 32 x BN/2 */
    constexpr int BL = IG_BK * BN / IG_THREADS;   /* X' rows a thread gathers per step (16, 8) */
    __shared__ __align__(16) T As[IG_BM][IG_BK + IG_PAD];
    __shared__ __align__(16) T Bs[BN][IG_BK + IG_PAD];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp >> 1, wn = warp & 1;
    const int g = lane >> 2, t = lane & 3;
    const int64_t G = p.group, cpg = p.c / G, kpg = p.k / G, grp = blockIdx.z;
    const int64_t K = cpg * p.kh * p.kw, osp = p.oh * p.ow, cols = p.n * osp;
    const int64_t m0 = (int64_t)blockIdx.y * IG_BM, q0 = (int64_t)blockIdx.x * BN;
    const uint16_t *wg = reinterpret_cast<const uint16_t *>(w) + grp * kpg * K;
    const int vec = K % 8 == 0 && ((uintptr_t)w & 15) == 0;
    const int ar = tid >> 1, ac = (tid & 1) * 16; /* W: 16 elements of row ar from column ac */
    const int bj = tid % BN, bk = tid / BN * BL;  /* X': rows bk .. bk + BL of column bj */
    const int64_t q = q0 + bj;
    const bool qok = q < cols;
    const int64_t img = qok ? q / osp : 0, pix = qok ? q - img * osp : 0;
    const int oy = (int)(pix / p.ow), ox = (int)(pix - (int64_t)oy * p.ow);
    const int iy0 = oy * p.sh - p.ph, ix0 = ox * p.sw - p.pw;
    const uint16_t *xq = reinterpret_cast<const uint16_t *>(x) + (img * p.c + grp * cpg) * p.h * p.w;

    float acc[2][WN][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < WN; ni++) acc[mi][ni][0] = acc[mi][ni][1] = acc[mi][ni][2] = acc[mi][ni][3] = 0.0f;
    uint4 areg[2];
    uint32_t breg[BL / 2];
    ig_load<BL>(p, wg, xq, K, kpg, m0, 0, vec, ar, ac, bk, qok, iy0, ix0, areg, breg);
    for (int64_t k0 = 0; k0 < K; k0 += IG_BK) {
#pragma unroll
        for (int v = 0; v < 2; v++) *reinterpret_cast<uint4 *>(&As[ar][ac + 8 * v]) = areg[v];
#pragma unroll
        for (int v = 0; v < BL / 8; v++)
            *reinterpret_cast<uint4 *>(&Bs[bj][bk + 8 * v]) =
                make_uint4(breg[4 * v], breg[4 * v + 1], breg[4 * v + 2], breg[4 * v + 3]);
        __syncthreads();
        if (k0 + IG_BK < K)
            ig_load<BL>(p, wg, xq, K, kpg, m0, k0 + IG_BK, vec, ar, ac, bk, qok, iy0, ix0, areg, breg);
#pragma unroll
        for (int kb = 0; kb < IG_BK; kb += 16) {
            uint32_t a[2][4];
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                const int r = wm * 32 + mi * 16 + g;
                a[mi][0] = *reinterpret_cast<const uint32_t *>(&As[r][kb + 2 * t]);
                a[mi][1] = *reinterpret_cast<const uint32_t *>(&As[r + 8][kb + 2 * t]);
                a[mi][2] = *reinterpret_cast<const uint32_t *>(&As[r][kb + 2 * t + 8]);
                a[mi][3] = *reinterpret_cast<const uint32_t *>(&As[r + 8][kb + 2 * t + 8]);
            }
#pragma unroll
            for (int ni = 0; ni < WN; ni++) {
                const int n = wn * (BN / 2) + ni * 8 + g;
                const uint32_t b0 = *reinterpret_cast<const uint32_t *>(&Bs[n][kb + 2 * t]);
                const uint32_t b1 = *reinterpret_cast<const uint32_t *>(&Bs[n][kb + 2 * t + 8]);
#pragma unroll
                for (int mi = 0; mi < 2; mi++) O::mma(acc[mi][ni], a[mi], b0, b1);
            }
        }
        __syncthreads(); /* the step consumed before the next one is stored */
    }

    /* epilogue: bias, residual, activation, one rounding store */
#pragma unroll
    for (int ni = 0; ni < WN; ni++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int64_t qo = q0 + wn * (BN / 2) + ni * 8 + 2 * t + e;
            if (qo >= cols) continue;
            const int64_t io = qo / osp, po = qo - io * osp;
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int64_t co = m0 + wm * 32 + mi * 16 + g + 8 * h;
                    if (co >= kpg) continue;
                    const int64_t ch = grp * kpg + co, o = (io * p.k + ch) * osp + po;
                    float v = acc[mi][ni][2 * h + e];
                    if (bias) v += kc_ldf(bias[ch]);
                    if (res) v += kc_ldf(res[o]);
                    y[o] = kc_stf<T>(kc_act(p.act, v, p.act_a, p.act_b));
                }
        }
}

#define KC_CONV_IGEMM(S, T)                                                                                  \
    extern "C" __global__ void __launch_bounds__(IG_THREADS)                                                  \
        conv_igemm64_##S(kiln_cu_conv p, const T *x, const T *w, const T *bias, const T *res, T *y) {         \
        kc_conv_igemm<T, 64>(p, x, w, bias, res, y);                                                          \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(IG_THREADS)                                                  \
        conv_igemm32_##S(kiln_cu_conv p, const T *x, const T *w, const T *bias, const T *res, T *y) {         \
        kc_conv_igemm<T, 32>(p, x, w, bias, res, y);                                                          \
    }
KC_CONV_IGEMM(f16, kc_f16)
KC_CONV_IGEMM(bf16, kc_bf16)
