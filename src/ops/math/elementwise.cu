/*
 * elementwise.cu — broadcasting binary kernels (Add Sub Mul Div Pow Max Min
 * Mod PRelu, bitwise ops), comparisons, logical ops, Not and Where.
 *
 * One templated body per kernel kind, instantiated per dtype as
 * binary_<T>, compare_<T> (T: every float type and every integer type
 * of 1 to 8 bytes), where_<bytes>; the op is a run-time argument
 * (kiln_cu_binop), uniform across the grid.  Operands are addressed through
 * a kiln_cu_iter (the launcher coalesces the broadcast dims; strides 0
 * broadcast).  Semantics follow the CPU ops in elementwise.c: integer
 * division truncates and x / 0 = 0, Max/Min propagate NaN, Mod has both
 * the C (fmod = 1) and the Python (fmod = 0) sign rule.
 */
#include "ops/common/cuda_common.cuh"

/* ---- float compute (float for the 32- and 16-bit floats, double for
 * double; pow/fmod resolve to powf/fmodf for float) ------------------------- */
template <typename F> __device__ __forceinline__ F kc_fbin(int op, F x, F z) {
    switch (op) {
    case KILN_CU_ADD: return x + z;
    case KILN_CU_SUB: return x - z;
    case KILN_CU_MUL: return x * z;
    case KILN_CU_DIV: return x / z;
    case KILN_CU_POW: return pow(x, z);
    case KILN_CU_MAX: return x > z || x != x ? x : z;
    case KILN_CU_MIN: return x < z || x != x ? x : z;
    case KILN_CU_FMOD: return fmod(x, z);
    case KILN_CU_MOD: {
        F r = fmod(x, z);
        return r != (F)0 && ((r < (F)0) != (z < (F)0)) ? r + z : r;
    }
    case KILN_CU_PRELU: return x < (F)0 ? z * x : x;
    default: return (F)0;
    }
}
__device__ __forceinline__ float kc_bin(int op, float x, float z) { return kc_fbin<float>(op, x, z); }
__device__ __forceinline__ double kc_bin(int op, double x, double z) { return kc_fbin<double>(op, x, z); }

/* ---- integer compute (wraps like the CPU op: arithmetic in unsigned) ------
 * Signed and unsigned types of 1 to 8 bytes; -1 is special only when signed
 * (x / -1 and x % -1 would trap on the minimum). */

template <typename T> __device__ __forceinline__ T kc_ipow(T b, T e) {
    if (kc_neg(e)) return b == (T)1 ? (T)1 : kc_neg1(b) ? (e % 2 ? (T)-1 : (T)1) : (T)0;
    typedef typename kc_uns<T>::type U;
    U r = 1, ub = (U)b;
    while (e) {
        if (e & 1) r *= ub;
        ub *= ub;
        e >>= 1;
    }
    return (T)r;
}

template <typename T> __device__ __forceinline__ T kc_bin(int op, T x, T z) {
    typedef typename kc_uns<T>::type U;
    switch (op) {
    case KILN_CU_ADD: return (T)((U)x + (U)z);
    case KILN_CU_SUB: return (T)((U)x - (U)z);
    case KILN_CU_MUL: return (T)((U)x * (U)z);
    case KILN_CU_DIV: return z == 0 ? (T)0 : kc_neg1(z) ? (T)(0 - (U)x) : (T)(x / z);
    case KILN_CU_POW: return kc_ipow<T>(x, z);
    case KILN_CU_MAX: return x > z ? x : z;
    case KILN_CU_MIN: return x < z ? x : z;
    case KILN_CU_FMOD: return z == 0 || kc_neg1(z) ? (T)0 : (T)(x % z);
    case KILN_CU_MOD: {
        if (z == 0 || kc_neg1(z)) return 0;
        T r = (T)(x % z);
        return r != 0 && (kc_neg(r) != kc_neg(z)) ? (T)(r + z) : r;
    }
    case KILN_CU_PRELU: return kc_neg(x) ? (T)((U)z * (U)x) : x;
    case KILN_CU_BAND: return x & z;
    case KILN_CU_BOR: return x | z;
    case KILN_CU_BXOR: return x ^ z;
    case KILN_CU_SHL: return (uint64_t)z >= 8 * sizeof(T) ? (T)0 : (T)(x << z);
    case KILN_CU_SHR: return (uint64_t)z >= 8 * sizeof(T) ? (T)0 : (T)(x >> z);
    default: return 0;
    }
}

template <typename T> __device__ __forceinline__ uint8_t kc_cmp(int op, T x, T z) {
    switch (op) {
    case KILN_CU_EQ: return x == z;
    case KILN_CU_LT: return x < z;
    case KILN_CU_GT: return x > z;
    case KILN_CU_LE: return x <= z;
    case KILN_CU_GE: return x >= z;
    case KILN_CU_AND: return x && z;
    case KILN_CU_OR: return x || z;
    case KILN_CU_XOR: return !x != !z;
    default: return 0;
    }
}

/* ---- kernels ---------------------------------------------------------------
 * Fast path: all three operands contiguous (ndim 1, unit strides), or one
 * input a scalar; otherwise the general iterator. */
template <typename T>
__device__ __forceinline__ void kc_binary(const kiln_cu_iter &it, const T *a, const T *b, T *y, int op) {
    typedef kc_t<T> L;
    if (it.ndim == 1 && it.st[2][0] == 1 && it.st[0][0] <= 1 && it.st[1][0] <= 1 && it.st[0][0] >= 0 &&
        it.st[1][0] >= 0) {
        int64_t sa = it.st[0][0], sb = it.st[1][0];
        KC_FOR(i, it.numel, int64_t) y[i] = L::st(kc_bin(op, L::ld(a[i * sa]), L::ld(b[i * sb])));
        return;
    }
    kc_iterate<3>(it, [&](const int64_t *o) { y[o[2]] = L::st(kc_bin(op, L::ld(a[o[0]]), L::ld(b[o[1]]))); });
}

template <typename T>
__device__ __forceinline__ void kc_compare(const kiln_cu_iter &it, const T *a, const T *b, uint8_t *y, int op) {
    typedef kc_t<T> L;
    kc_iterate<3>(it, [&](const int64_t *o) { y[o[2]] = kc_cmp(op, L::ld(a[o[0]]), L::ld(b[o[1]])); });
}

#define KC_BINARY(S, T)                                                                       \
    extern "C" __global__ void binary_##S(kiln_cu_iter it, const T *a, const T *b, T *y, int op) { \
        kc_binary<T>(it, a, b, y, op);                                                         \
    }
#define KC_COMPARE(S, T)                                                                      \
    extern "C" __global__ void compare_##S(kiln_cu_iter it, const T *a, const T *b, uint8_t *y, int op) { \
        kc_compare<T>(it, a, b, y, op);                                                        \
    }
KC_NUMS(KC_BINARY)
KC_NUMS(KC_COMPARE)
KC_MORE_NUMS(KC_BINARY)
KC_MORE_NUMS(KC_COMPARE)
KC_COMPARE(bool, uint8_t)

/* Where(cond, x, y): it has four operands' worth of addressing in two
 * iterators: `it` for cond (st[0]), x (st[1]), y (st[2]); the output is
 * contiguous over it's dims. */
template <typename T>
__device__ __forceinline__ void kc_where(const kiln_cu_iter &it, const uint8_t *c, const T *x, const T *y,
                                         T *out) {
    if (it.small) {
        KC_FOR(i, it.numel, uint32_t) {
            int32_t o[3];
            kc_offsets<uint32_t, int32_t, 3>(it, i, o);
            out[i] = c[o[0]] ? x[o[1]] : y[o[2]];
        }
    } else {
        KC_FOR(i, it.numel, uint64_t) {
            int64_t o[3];
            kc_offsets<uint64_t, int64_t, 3>(it, i, o);
            out[i] = c[o[0]] ? x[o[1]] : y[o[2]];
        }
    }
}
#define KC_WHERE(S, T)                                                                        \
    extern "C" __global__ void where_##S(kiln_cu_iter it, const uint8_t *c, const T *x, const T *y, T *out) { \
        kc_where<T>(it, c, x, y, out);                                                         \
    }
KC_SIZES(KC_WHERE)

/* Not: y = !x on bools. */
extern "C" __global__ void not_bool(int64_t n, const uint8_t *x, uint8_t *y) { KC_FOR(i, n, int64_t) y[i] = !x[i]; }
