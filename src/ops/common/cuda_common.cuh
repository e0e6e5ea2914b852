/*
 * cuda_common.cuh — device helpers shared by the built-in CUDA kernels
 * (src/ops/<family>/<family>.cu): element types and their float conversions, the
 * strided n-d iterator, the elementwise function table (activations and
 * epilogues), warp/block reductions and the macros that instantiate a
 * templated kernel body as extern "C" kernels named <kernel>_<dtype>.
 *
 * All .cu files are compiled into one fatbin (possibly as one translation
 * unit), so this header has an include guard and every kernel name is
 * unique across the families.  FP16/BF16 are loaded into float, computed
 * in float and rounded once on store (round to nearest even).
 */
#ifndef KILN_CUDA_COMMON_CUH
#define KILN_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "device/cuda/cuda_kernel_args.h"

typedef __half kc_f16;
typedef __nv_bfloat16 kc_bf16;

/* ---- element types ---------------------------------------------------------
 * kc_t<T>::C is the compute type (float for the 16-bit floats, T
 * otherwise); ld/st convert between storage and compute type. */
template <typename T> struct kc_t {
    typedef T C;
    static __device__ __forceinline__ C ld(T v) { return v; }
    static __device__ __forceinline__ T st(C v) { return v; }
};
template <> struct kc_t<kc_f16> {
    typedef float C;
    static __device__ __forceinline__ float ld(kc_f16 v) { return __half2float(v); }
    static __device__ __forceinline__ kc_f16 st(float v) { return __float2half_rn(v); }
};
template <> struct kc_t<kc_bf16> {
    typedef float C;
    static __device__ __forceinline__ float ld(kc_bf16 v) { return __bfloat162float(v); }
    static __device__ __forceinline__ kc_bf16 st(float v) { return __float2bfloat16_rn(v); }
};
template <typename T> __device__ __forceinline__ float kc_ldf(T v) { return (float)kc_t<T>::ld(v); }
template <typename T> __device__ __forceinline__ T kc_stf(float v) { return kc_t<T>::st((typename kc_t<T>::C)v); }

/* The unsigned type of an integer type (wrapping arithmetic). */
template <typename T> struct kc_uns { typedef T type; };
template <> struct kc_uns<int32_t> { typedef uint32_t type; };
template <> struct kc_uns<int64_t> { typedef uint64_t type; };
template <> struct kc_uns<int8_t> { typedef uint8_t type; };
template <> struct kc_uns<int16_t> { typedef uint16_t type; };

/* Sign tests that compile without "pointless comparison" warnings for the
 * unsigned types: x < 0, and x == -1 (false for unsigned types). */
template <typename T, bool SIGNED = ((T)-1 < (T)0)> struct kc_sign {
    static __device__ __forceinline__ bool neg(T x) { return x < (T)0; }
    static __device__ __forceinline__ bool neg1(T x) { return x == (T)-1; }
};
template <typename T> struct kc_sign<T, false> {
    static __device__ __forceinline__ bool neg(T) { return false; }
    static __device__ __forceinline__ bool neg1(T) { return false; }
};
template <typename T> __device__ __forceinline__ bool kc_neg(T x) { return kc_sign<T>::neg(x); }
template <typename T> __device__ __forceinline__ bool kc_neg1(T x) { return kc_sign<T>::neg1(x); }

/* X(suffix, type) per dtype class, for the instantiation macros. */
#define KC_FLOATS(X) X(f32, float) X(f16, kc_f16) X(bf16, kc_bf16)
#define KC_INTS(X) X(i32, int32_t) X(i64, int64_t)
#define KC_NUMS(X) KC_FLOATS(X) KC_INTS(X)
/* the float types with double (kernels that take every float type) */
#define KC_FLOATS64(X) KC_FLOATS(X) X(f64, double)
/* the numeric types beyond KC_NUMS (double, 8/16-bit and unsigned
 * integers), for the kernels that take every numeric type */
#define KC_MORE_NUMS(X)                                                                 \
    X(f64, double) X(i8, int8_t) X(i16, int16_t) X(u8, uint8_t) X(u16, uint16_t) X(u32, uint32_t) X(u64, uint64_t)
/* element sizes, for kernels that only move bytes */
#define KC_SIZES(X) X(1, uint8_t) X(2, uint16_t) X(4, uint32_t) X(8, uint64_t)

/* ---- grid-stride loop ---------------------------------------------------- */
#define KC_FOR(i, n, I)                                                                  \
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < (I)(n);                    \
         i += (I)gridDim.x * blockDim.x)

/* ---- n-d iterator ---------------------------------------------------------
 * Offsets of element i (< it.numel) of the iteration space in the first nop
 * operands.  U: unsigned index type (uint32_t when it.small, else
 * uint64_t); S: the signed offset type.  The outermost index is what is
 * left of i after the inner dims (no division: i < numel). */
template <typename U, typename S, int NOP>
__device__ __forceinline__ void kc_offsets(const kiln_cu_iter &it, U i, S off[NOP]) {
#pragma unroll
    for (int k = 0; k < NOP; k++) off[k] = 0;
    for (int d = it.ndim - 1; d > 0; d--) {
        U dim = (U)it.dims[d];
        U q = i / dim, r = i - q * dim;
#pragma unroll
        for (int k = 0; k < NOP; k++) off[k] += (S)r * (S)it.st[k][d];
        i = q;
    }
#pragma unroll
    for (int k = 0; k < NOP; k++) off[k] += (S)i * (S)it.st[k][0];
}

/* Call f(off[]) for every element of the space, indexing in 32 bits when
 * the launcher allowed it. */
template <int NOP, typename F> __device__ __forceinline__ void kc_iterate(const kiln_cu_iter &it, F f) {
    if (it.small) {
        KC_FOR(i, it.numel, uint32_t) {
            int32_t off[NOP];
            kc_offsets<uint32_t, int32_t, NOP>(it, i, off);
            int64_t o[NOP];
#pragma unroll
            for (int k = 0; k < NOP; k++) o[k] = off[k];
            f(o);
        }
    } else {
        KC_FOR(i, it.numel, uint64_t) {
            int64_t off[NOP];
            kc_offsets<uint64_t, int64_t, NOP>(it, i, off);
            f(off);
        }
    }
}

/* ---- elementwise functions ------------------------------------------------ */
__device__ __forceinline__ float kc_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ float kc_act1(int act, float x, float a, float b) {
    switch (act) {
    case KILN_CU_ACT_NONE: return x;
    case KILN_CU_ACT_RELU: return x > 0.0f ? x : (x != x ? x : 0.0f);
    case KILN_CU_ACT_CLIP: return x != x ? x : fminf(fmaxf(x, a), b);
    case KILN_CU_ACT_SIGMOID: return kc_sigmoid(x);
    case KILN_CU_ACT_HARDSIGMOID: return fmaxf(0.0f, fminf(1.0f, a * x + b));
    case KILN_CU_ACT_HARDSWISH: return x * fmaxf(0.0f, fminf(1.0f, x * (1.0f / 6.0f) + 0.5f));
    case KILN_CU_ACT_TANH: return tanhf(x);
    case KILN_CU_ACT_LEAKYRELU: return x < 0.0f ? a * x : x;
    case KILN_CU_ACT_ELU: return x < 0.0f ? a * expm1f(x) : x;
    case KILN_CU_ACT_SELU: return b * (x <= 0.0f ? a * expm1f(x) : x);
    case KILN_CU_ACT_GELU: return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case KILN_CU_ACT_GELU_TANH:
        return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case KILN_CU_ACT_SOFTPLUS: return x > 20.0f ? x : log1pf(expf(x));
    case KILN_CU_ACT_SOFTSIGN: return x / (1.0f + fabsf(x));
    case KILN_CU_ACT_MISH: return x * tanhf(x > 20.0f ? x : log1pf(expf(x)));
    case KILN_CU_ACT_SILU: return x * kc_sigmoid(x);
    case KILN_CU_ACT_THRESHOLDEDRELU: return x > a ? x : 0.0f;
    case KILN_CU_ACT_CELU: return fmaxf(0.0f, x) + fminf(0.0f, a * expm1f(x / a));
    case KILN_CU_ACT_EXP: return expf(x);
    case KILN_CU_ACT_LOG: return logf(x);
    case KILN_CU_ACT_SQRT: return sqrtf(x);
    case KILN_CU_ACT_RSQRT_: return rsqrtf(x);
    case KILN_CU_ACT_RECIPROCAL: return 1.0f / x;
    case KILN_CU_ACT_ABS: return fabsf(x);
    case KILN_CU_ACT_NEG: return -x;
    case KILN_CU_ACT_FLOOR: return floorf(x);
    case KILN_CU_ACT_CEIL: return ceilf(x);
    case KILN_CU_ACT_ROUND: return rintf(x);
    case KILN_CU_ACT_SIGN: return x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x;
    case KILN_CU_ACT_ERF: return erff(x);
    case KILN_CU_ACT_SIN: return sinf(x);
    case KILN_CU_ACT_COS: return cosf(x);
    case KILN_CU_ACT_TAN: return tanf(x);
    case KILN_CU_ACT_ASIN: return asinf(x);
    case KILN_CU_ACT_ACOS: return acosf(x);
    case KILN_CU_ACT_ATAN: return atanf(x);
    case KILN_CU_ACT_SINH: return sinhf(x);
    case KILN_CU_ACT_COSH: return coshf(x);
    case KILN_CU_ACT_ASINH: return asinhf(x);
    case KILN_CU_ACT_ACOSH: return acoshf(x);
    case KILN_CU_ACT_ATANH: return atanhf(x);
    case KILN_CU_ACT_AFFINE: return a * x + b;
    case KILN_CU_ACT_SHRINK: return x < -a ? x + b : x > a ? x - b : 0.0f;
    default: return x;
    }
}

/* act as in kiln_cu_act (cuda_kernel_args.h), with KILN_CU_ACT_THEN_AFFINE. */
__device__ __forceinline__ float kc_act(int act, float x, float a, float b) {
    if (act >= KILN_CU_ACT_THEN_AFFINE) return kc_act1(act - KILN_CU_ACT_THEN_AFFINE, x, 0.0f, 0.0f) * a + b;
    return kc_act1(act, x, a, b);
}

/* ---- reductions ------------------------------------------------------------ */
struct kc_sum {
    static __device__ __forceinline__ float id() { return 0.0f; }
    static __device__ __forceinline__ float op(float x, float y) { return x + y; }
};
struct kc_max {
    static __device__ __forceinline__ float id() { return -INFINITY; }
    static __device__ __forceinline__ float op(float x, float y) { return x != x ? x : y != y ? y : fmaxf(x, y); }
};
struct kc_min {
    static __device__ __forceinline__ float id() { return INFINITY; }
    static __device__ __forceinline__ float op(float x, float y) { return x != x ? x : y != y ? y : fminf(x, y); }
};

template <typename R> __device__ __forceinline__ float kc_warp_reduce(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = R::op(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
/* Reduce v over the block (blockDim.x a multiple of 32, at most 1024); every
 * thread gets the result.  Uses 33 floats of shared memory; callable
 * repeatedly (it synchronizes before reusing them). */
template <typename R> __device__ __forceinline__ float kc_block_reduce(float v) {
    __shared__ float part[33];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = kc_warp_reduce<R>(v);
    __syncthreads(); /* a previous call may still read part[] */
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < nw ? part[lane] : R::id();
        w = kc_warp_reduce<R>(w);
        if (lane == 0) part[32] = w;
    }
    __syncthreads();
    return part[32];
}

/* ---- faults -----------------------------------------------------------------
 * Report a bad value found by a kernel (see kiln_cu_fault): plain volatile
 * stores into mapped host memory, the code last, so the host never sees a
 * code without its fields; the first report stays (races may mix fields of
 * two bad elements of one launch, each a true report). */
__device__ __noinline__ void kc_fault(const kiln_cu_check &ck, int input, int64_t value, int64_t lo, int64_t hi,
                                      int64_t pos) {
    volatile kiln_cu_fault *f = ck.fault;
    if (!f || f->code) return;
    f->tag = ck.tag;
    f->value = value;
    f->lo = lo;
    f->hi = hi;
    f->pos = pos;
    f->input = input;
    __threadfence_system();
    f->code = KILN_CU_FAULT_INDEX;
}

/* An index into an axis of length len (negative counts from the end), or
 * -1 after reporting it when out of range. */
__device__ __forceinline__ int64_t kc_index(const kiln_cu_check &ck, int input, int64_t k, int64_t len, int64_t pos) {
    int64_t j = k < 0 ? k + len : k;
    if (j >= 0 && j < len) return j;
    kc_fault(ck, input, k, -len, len, pos);
    return -1;
}

#endif /* KILN_CUDA_COMMON_CUH */
