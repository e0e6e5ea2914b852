/*
 * copy.cu — data movement by element size (the dtype does not matter):
 *
 *   copy_<bytes>(it, src, dst): dst at it.st[1] offsets = src at it.st[0]
 *     offsets over it.dims.  One kernel serves Transpose (permuted source
 *     strides), Slice (offset base, step strides, negative ones too),
 *     Expand (0 strides), Concat/Split (one launch per part, offset base,
 *     the whole tensor's strides), Tile (dims split into [repeat, dim]
 *     pairs: source stride 0 on the repeat dim), Reshape/Identity copies.
 *     bytes is the moved unit, not the dtype's size: the launcher
 *     (kiln__cu_copy, copy_plan.h) moves rows contiguous on both sides in
 *     units of up to 16 bytes (copy_16 over uint4);
 *   transpose_<bytes>(t, src, dst): the same copy when the destination's
 *     innermost dim is strided in the source and another dim is contiguous
 *     there: 32 x 32 tiles through shared memory (kiln_cu_transpose), so
 *     both the reads and the writes are coalesced;
 *   pad_<bytes>(kiln_cu_pad, src, dst): Pad, modes constant/reflect/edge/wrap.
 *   gather_<bytes>_<i32|i64>(ck, outer, len, inner, nidx, idx, src, dst):
 *     Gather along one axis (negative indices count from the end; an index
 *     out of range is reported in the fault record ck (the run fails naming
 *     the layer) and writes a zero);
 *   gather_el_<bytes>_<i32|i64>(ck, it, len, axis_stride, idx, src, dst):
 *     GatherElements (it walks the indices: st[0] the data offset without
 *     the axis, st[1] the index offset; same out-of-range rule);
 *   fill_<bytes>(n, value, dst): n copies of one element (Dropout's mask,
 *     ConstantOfShape);
 *   trilu_<bytes>(R, C, k, upper, n, src, dst): Trilu over [.., R, C]
 *     (keep column j of row r where j >= r + k (upper) or j <= r + k);
 *   eye_<bytes>(C, k, one, n, dst): EyeLike, `one` on the diagonal j = r + k;
 *   put_i64(vals, dst): the n values of a kiln_cu_vals (Shape: dims the host
 *     knows, written by a kernel so that a CUDA graph replays them).
 */
#include "ops/common/cuda_common.cuh"

template <typename T> __device__ __forceinline__ void kc_copy(const kiln_cu_iter &it, const T *src, T *dst) {
    if (it.ndim == 1 && it.st[0][0] == 1 && it.st[1][0] == 1) {
        KC_FOR(i, it.numel, int64_t) dst[i] = src[i];
        return;
    }
    kc_iterate<2>(it, [&](const int64_t *o) { dst[o[1]] = src[o[0]]; });
}

/* One 32 x 32 tile per block iteration (256 threads: 32 lanes x 8 rows,
 * 4 elements each): read along P (contiguous in src) into tile[q][p],
 * write along Q (contiguous in dst) from tile[q][p]; the row of 33
 * elements puts a tile column in 32 different banks (4-byte types). */
template <typename T> __device__ __forceinline__ void kc_transpose(const kiln_cu_transpose &t, const T *src, T *dst) {
    __shared__ T tile[32][33];
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    const int64_t per = t.tp * t.tq;
    for (int64_t b = blockIdx.x; b < t.nblocks; b += gridDim.x) {
        int64_t ti = b % per, p0 = (ti % t.tp) * 32, q0 = (ti / t.tp) * 32;
        int64_t o[2];
        kc_offsets<uint64_t, int64_t, 2>(t.batch, (uint64_t)(b / per), o);
        const T *s = src + o[0];
        T *d = dst + o[1];
#pragma unroll
        for (int k = 0; k < 32; k += 8) {
            int64_t p = p0 + tx, q = q0 + ty + k;
            if (p < t.P && q < t.Q) tile[ty + k][tx] = s[p + q * t.sq];
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < 32; k += 8) {
            int64_t q = q0 + tx, p = p0 + ty + k;
            if (p < t.P && q < t.Q) d[q + p * t.dp] = tile[tx][ty + k];
        }
        __syncthreads();
    }
}

__device__ __forceinline__ int64_t kc_pad_index(int64_t i, int64_t n, int mode) {
    if (i >= 0 && i < n) return i;
    switch (mode) {
    case 1: { /* reflect (edge not repeated), period 2 (n - 1) */
        if (n == 1) return 0;
        int64_t per = 2 * (n - 1), r = i % per;
        if (r < 0) r += per;
        return r < n ? r : per - r;
    }
    case 2: return i < 0 ? 0 : n - 1;
    case 3: {
        int64_t r = i % n;
        return r < 0 ? r + n : r;
    }
    default: return -1;
    }
}

template <typename T> __device__ __forceinline__ void kc_pad(const kiln_cu_pad &p, const T *src, T *dst) {
    int64_t numel = 1;
    for (int d = 0; d < p.ndim; d++) numel *= p.out_dims[d];
    const T value = (T)p.value;
    KC_FOR(i, numel, int64_t) {
        int64_t rem = i, off = 0, st = 1;
        bool inside = true;
        for (int d = p.ndim - 1; d >= 0; d--) {
            int64_t o = rem % p.out_dims[d];
            rem /= p.out_dims[d];
            int64_t s = kc_pad_index(o - p.begin[d], p.in_dims[d], p.mode);
            if (s < 0 || p.in_dims[d] == 0) {
                inside = false;
                break;
            }
            off += s * st;
            st *= p.in_dims[d];
        }
        dst[i] = inside ? src[off] : value;
    }
}

template <typename T, typename I>
__device__ __forceinline__ void kc_gather(const kiln_cu_check &ck, int64_t outer, int64_t len, int64_t inner,
                                          int64_t nidx, const I *idx, const T *src, T *dst) {
    KC_FOR(i, outer * nidx * inner, int64_t) {
        int64_t in = i % inner, j = (i / inner) % nidx, o = i / (inner * nidx);
        int64_t k = kc_index(ck, 1, (int64_t)idx[j], len, j);
        dst[i] = k >= 0 ? src[(o * len + k) * inner + in] : (T)0;
    }
}

template <typename T, typename I>
__device__ __forceinline__ void kc_gather_el(const kiln_cu_check &ck, const kiln_cu_iter &it, int64_t len,
                                             int64_t axst, const I *idx, const T *src, T *dst) {
    KC_FOR(i, it.numel, int64_t) {
        int64_t o[2];
        kc_offsets<uint64_t, int64_t, 2>(it, (uint64_t)i, o);
        int64_t k = kc_index(ck, 1, (int64_t)idx[o[1]], len, i);
        dst[i] = k >= 0 ? src[o[0] + k * axst] : (T)0;
    }
}

#define KC_GATHER(S, T, IS, I)                                                                \
    extern "C" __global__ void gather_##S##_##IS(kiln_cu_check ck, int64_t outer, int64_t len, int64_t inner, \
                                                 int64_t nidx, const I *idx, const T *src, T *dst) { \
        kc_gather<T, I>(ck, outer, len, inner, nidx, idx, src, dst);                           \
    }                                                                                          \
    extern "C" __global__ void gather_el_##S##_##IS(kiln_cu_check ck, kiln_cu_iter it, int64_t len, int64_t axst, \
                                                    const I *idx, const T *src, T *dst) {      \
        kc_gather_el<T, I>(ck, it, len, axst, idx, src, dst);                                  \
    }
#define KC_COPY(S, T)                                                                         \
    extern "C" __global__ void copy_##S(kiln_cu_iter it, const T *src, T *dst) { kc_copy<T>(it, src, dst); } \
    extern "C" __global__ void __launch_bounds__(256) transpose_##S(kiln_cu_transpose t, const T *src, T *dst) { \
        kc_transpose<T>(t, src, dst);                                                          \
    }                                                                                          \
    extern "C" __global__ void pad_##S(kiln_cu_pad p, const T *src, T *dst) { kc_pad<T>(p, src, dst); } \
    KC_GATHER(S, T, i32, int32_t)                                                              \
    KC_GATHER(S, T, i64, int64_t)                                                              \
    extern "C" __global__ void fill_##S(int64_t n, uint64_t value, T *dst) {                  \
        KC_FOR(i, n, int64_t) dst[i] = (T)value;                                               \
    }                                                                                          \
    extern "C" __global__ void trilu_##S(int64_t R, int64_t C, int64_t k, int upper, int64_t n, const T *src, \
                                         T *dst) {                                             \
        KC_FOR(i, n, int64_t) {                                                                \
            int64_t j = i % C, r = (i / C) % R;                                                \
            dst[i] = (upper ? j >= r + k : j <= r + k) ? src[i] : (T)0;                        \
        }                                                                                      \
    }                                                                                          \
    extern "C" __global__ void eye_##S(int64_t C, int64_t k, uint64_t one, int64_t n, T *dst) { \
        KC_FOR(i, n, int64_t) dst[i] = i % C == i / C + k ? (T)one : (T)0;                     \
    }
KC_SIZES(KC_COPY)
/* 16-byte units: rows contiguous on both sides, 16-byte aligned */
extern "C" __global__ void copy_16(kiln_cu_iter it, const uint4 *src, uint4 *dst) { kc_copy<uint4>(it, src, dst); }

extern "C" __global__ void put_i64(kiln_cu_vals v, int64_t *dst) {
    KC_FOR(i, v.n, int64_t) dst[i] = v.v[i];
}
