/*
 * cast.cu — Cast between the GPU dtypes (F32 F16 BF16 F64 I8 U8 I32 I64 BOOL),
 * one kernel per pair: cast_<from>_<to>(n, x, y) on contiguous tensors.
 *
 * The Cast op's CPU semantics (kiln__ops_cast): float -> integer truncates
 * toward zero, NaN -> 0, saturates to int64 and wraps to the target (out of
 * range is undefined in ONNX); integer -> integer wraps; any
 * -> bool is "!= 0"; bool -> number is 0 or 1; float -> float rounds to
 * nearest even.
 */
#include "ops/common/cuda_common.cuh"

/* Bool storage, distinct from uint8 for the overloads below. */
struct kc_bool {
    uint8_t v;
};

/* Source value in its widest compute form: float types -> float (double
 * -> double), integers -> int64, bool -> int64 0/1. */
template <typename S> __device__ __forceinline__ float kc_src(S v, float *) { return kc_ldf(v); }
__device__ __forceinline__ double kc_src(double v, double *) { return v; }
__device__ __forceinline__ int64_t kc_src(int8_t v, int64_t *) { return v; }
__device__ __forceinline__ int64_t kc_src(uint8_t v, int64_t *) { return v; }
__device__ __forceinline__ int64_t kc_src(int32_t v, int64_t *) { return v; }
__device__ __forceinline__ int64_t kc_src(int64_t v, int64_t *) { return v; }
__device__ __forceinline__ int64_t kc_src(kc_bool v, int64_t *) { return v.v != 0; }

template <typename S> struct kc_src_t { typedef int64_t W; };
template <> struct kc_src_t<float> { typedef float W; };
template <> struct kc_src_t<kc_f16> { typedef float W; };
template <> struct kc_src_t<kc_bf16> { typedef float W; };
template <> struct kc_src_t<double> { typedef double W; };

/* Store into destination D from a float, double or int64 source value
 * (one rounding: double goes to the 16-bit floats directly). */
template <typename D> __device__ __forceinline__ D kc_dst(float v) { return kc_stf<D>(v); }
template <typename D> __device__ __forceinline__ D kc_dst(int64_t v) { return kc_stf<D>((float)v); }
template <typename D> __device__ __forceinline__ D kc_dst(double v) { return (D)v; }
template <> __device__ __forceinline__ double kc_dst<double>(float v) { return v; }
template <> __device__ __forceinline__ double kc_dst<double>(int64_t v) { return (double)v; }
template <> __device__ __forceinline__ kc_f16 kc_dst<kc_f16>(double v) { return __double2half(v); }
template <> __device__ __forceinline__ kc_bf16 kc_dst<kc_bf16>(double v) { return __double2bfloat16(v); }
/* float -> integer as the Cast op on the CPU (kiln__ops_cast): truncate
 * toward zero, NaN -> 0, saturate to int64, then wrap to the target type */
__device__ __forceinline__ int64_t kc_sat64(double v) {
    return v != v ? 0 : v >= 9.2233720368547758e18 ? INT64_MAX : v <= -9.2233720368547758e18 ? INT64_MIN : (int64_t)v;
}
#define KC_DST_INT(T)                                                                         \
    template <> __device__ __forceinline__ T kc_dst<T>(float v) { return (T)kc_sat64(v); }      \
    template <> __device__ __forceinline__ T kc_dst<T>(double v) { return (T)kc_sat64(v); }     \
    template <> __device__ __forceinline__ T kc_dst<T>(int64_t v) { return (T)v; }
KC_DST_INT(int8_t)
KC_DST_INT(uint8_t)
KC_DST_INT(int32_t)
KC_DST_INT(int64_t)
template <> __device__ __forceinline__ kc_bool kc_dst<kc_bool>(float v) { return kc_bool{(uint8_t)(v != 0.0f)}; }
template <> __device__ __forceinline__ kc_bool kc_dst<kc_bool>(int64_t v) { return kc_bool{(uint8_t)(v != 0)}; }
template <> __device__ __forceinline__ kc_bool kc_dst<kc_bool>(double v) { return kc_bool{(uint8_t)(v != 0.0)}; }

template <typename S, typename D> __device__ __forceinline__ void kc_cast(int64_t n, const S *x, D *y) {
    typedef typename kc_src_t<S>::W W;
    KC_FOR(i, n, int64_t) y[i] = kc_dst<D>(kc_src(x[i], (W *)0));
}

/* cast_<from>_<to> for every pair (nested X-macros: sources, then
 * destinations of each source). */
#define KC_CAST_DST(X, SS, TS)                                                                \
    X(SS, TS, f32, float) X(SS, TS, f16, kc_f16) X(SS, TS, bf16, kc_bf16) X(SS, TS, i8, int8_t) \
        X(SS, TS, u8, uint8_t) X(SS, TS, i32, int32_t) X(SS, TS, i64, int64_t) X(SS, TS, bool, kc_bool) \
            X(SS, TS, f64, double)
#define KC_CAST_DEF(SS, TS, SD, TD)                                                           \
    extern "C" __global__ void cast_##SS##_##SD(int64_t n, const TS *x, TD *y) { kc_cast<TS, TD>(n, x, y); }
#define KC_CAST_FROM(SS, TS) KC_CAST_DST(KC_CAST_DEF, SS, TS)
KC_CAST_FROM(f32, float)
KC_CAST_FROM(f16, kc_f16)
KC_CAST_FROM(bf16, kc_bf16)
KC_CAST_FROM(i8, int8_t)
KC_CAST_FROM(u8, uint8_t)
KC_CAST_FROM(i32, int32_t)
KC_CAST_FROM(i64, int64_t)
KC_CAST_FROM(bool, kc_bool)
KC_CAST_FROM(f64, double)
