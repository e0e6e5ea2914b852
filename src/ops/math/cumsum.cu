/*
 * cumsum.cu — CumSum along one axis (cumsum.c semantics): the tensor is
 * [outer, A, inner] around the axis; one thread per (outer, inner) line
 * walks its A elements (forward or reverse, inclusive or exclusive),
 * summing floats in double and integers in uint64 (wrapping), like the CPU
 * op: cumsum_<T>(outer, A, inner, exclusive, reverse, x, y).
 */
#include "ops/common/cuda_common.cuh"

template <typename T> struct kc_acc { typedef double A; };
template <> struct kc_acc<int32_t> { typedef uint64_t A; };
template <> struct kc_acc<int64_t> { typedef uint64_t A; };

template <typename T> __device__ __forceinline__ T kc_from_acc(double v) { return kc_t<T>::st((typename kc_t<T>::C)v); }
template <typename T> __device__ __forceinline__ T kc_from_acc(uint64_t v) { return (T)(int64_t)v; }

template <typename T>
__device__ __forceinline__ void kc_cumsum(int64_t outer, int64_t A, int64_t inner, int excl, int rev, const T *x,
                                          T *y) {
    typedef typename kc_acc<T>::A Acc;
    KC_FOR(i, outer * inner, int64_t) {
        int64_t o = i / inner, in = i % inner;
        Acc s = 0;
        for (int64_t t = 0; t < A; t++) {
            int64_t a = rev ? A - 1 - t : t, pos = (o * A + a) * inner + in;
            Acc v = (Acc)kc_t<T>::ld(x[pos]);
            y[pos] = kc_from_acc<T>(excl ? s : (Acc)(s + v));
            s = (Acc)(s + v);
        }
    }
}

#define KC_CUMSUM(S, T)                                                                       \
    extern "C" __global__ void cumsum_##S(int64_t outer, int64_t A, int64_t inner, int excl, int rev, const T *x, \
                                          T *y) {                                              \
        kc_cumsum<T>(outer, A, inner, excl, rev, x, y);                                        \
    }
KC_FLOATS64(KC_CUMSUM)
KC_INTS(KC_CUMSUM)
