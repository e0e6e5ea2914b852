/*
 * activation.cu — unary elementwise kernels: every activation and math
 * function of activation.c (Relu, Clip, Sigmoid, HardSigmoid, HardSwish,
 * Tanh, Erf, Gelu, Exp, Log, Sqrt, trigonometry, ...), selected by a
 * kiln_cu_act code at run time (uniform across the grid, so the switch
 * costs one branch per element at most).
 *
 * unary_<f32|f16|bf16>(n, x, y, act, a, b): y[i] = f(x[i]) on contiguous
 * tensors, computed in float.  unary_<i32|i64>: the integer subset (Abs,
 * Neg, Relu, Sign, Clip with integer bounds a/b).  classify_<T>(n, x, y,
 * what, neg, pos): IsNaN (what 0) and IsInf (what 1, per detect_negative /
 * detect_positive) into bool.
 */
#include "ops/common/cuda_common.cuh"

template <typename T>
__device__ __forceinline__ void kc_unary(int64_t n, const T *x, T *y, int act, float a, float b) {
    KC_FOR(i, n, int64_t) y[i] = kc_stf<T>(kc_act(act, kc_ldf(x[i]), a, b));
}

template <typename T>
__device__ __forceinline__ void kc_unary_int(int64_t n, const T *x, T *y, int act, int64_t a, int64_t b) {
    typedef typename kc_uns<T>::type U;
    KC_FOR(i, n, int64_t) {
        T v = x[i];
        switch (act) {
        case KILN_CU_ACT_ABS: v = kc_neg(v) ? (T)(0 - (U)v) : v; break;
        case KILN_CU_ACT_NEG: v = (T)(0 - (U)v); break;
        case KILN_CU_ACT_RELU: v = v > 0 ? v : 0; break;
        case KILN_CU_ACT_SIGN: v = v > 0 ? (T)1 : kc_neg(v) ? (T)-1 : (T)0; break;
        case KILN_CU_ACT_CLIP: v = v < (T)a ? (T)a : v > (T)b ? (T)b : v; break;
        default: break;
        }
        y[i] = v;
    }
}

template <typename T>
__device__ __forceinline__ void kc_classify(int64_t n, const T *x, uint8_t *y, int what, int neg, int pos) {
    KC_FOR(i, n, int64_t) {
        float v = kc_ldf(x[i]);
        y[i] = what == 0 ? v != v : (isinf(v) && ((v < 0.0f && neg) || (v > 0.0f && pos)));
    }
}

#define KC_CLASSIFY(S, T)                                                                     \
    extern "C" __global__ void classify_##S(int64_t n, const T *x, uint8_t *y, int what, int neg, int pos) { \
        kc_classify<T>(n, x, y, what, neg, pos);                                               \
    }
KC_FLOATS(KC_CLASSIFY)

#define KC_UNARY(S, T)                                                                        \
    extern "C" __global__ void unary_##S(int64_t n, const T *x, T *y, int act, float a, float b) { \
        kc_unary<T>(n, x, y, act, a, b);                                                       \
    }
#define KC_UNARY_INT(S, T)                                                                    \
    extern "C" __global__ void unary_##S(int64_t n, const T *x, T *y, int act, int64_t a, int64_t b) { \
        kc_unary_int<T>(n, x, y, act, a, b);                                                   \
    }
KC_FLOATS(KC_UNARY)
KC_INTS(KC_UNARY_INT)
/* the narrower and unsigned integers (Clip; the launcher clamps a and b
 * into the type's range, so (T)a is exact) */
KC_UNARY_INT(i8, int8_t)
KC_UNARY_INT(i16, int16_t)
KC_UNARY_INT(u8, uint8_t)
KC_UNARY_INT(u16, uint16_t)
KC_UNARY_INT(u32, uint32_t)
