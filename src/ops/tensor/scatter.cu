/*
 * scatter.cu — GatherND, ScatterElements (and Scatter), ScatterND
 * (gather_scatter.c semantics).  Indices out of range are reported in the
 * fault record ck (the run fails naming the layer; the element is
 * skipped).  The scatters apply their updates in the CPU op's order where
 * two may hit one element: updates that can collide go to one thread, in
 * order, so duplicates and reductions give the CPU's result exactly.
 *
 *   gather_nd_<T>(ck, n, slice, last, batch_stride, ntup, dd, st, idx, x, y):
 *     one thread per output element: tuple at = i / slice (batch
 *     at / ntup), slice element i % slice;
 *   scatter_el_<T>(ck, it, A, axst, ilen, iaxst, red, idx, upd, y): one
 *     thread per line of indices along the axis (`it` walks the other
 *     dims: st[0] data offset, st[1] indices/updates offset), ilen entries
 *     each, strides along the axis axst (data) and iaxst (indices);
 *   scatter_nd_<T>(ck, slice, last, ntup, dd, st, red, idx, upd, y): one
 *     thread per slice element, walking every tuple in order.
 * red: 0 none, 1 add, 2 mul, 3 max, 4 min (y already holds a copy of data).
 */
#include "ops/common/cuda_common.cuh"

template <typename T> __device__ __forceinline__ T kc_scatter_red(int red, T d, T s) {
    typedef kc_t<T> L;
    typedef typename kc_t<T>::C C;
    typedef typename kc_uns<C>::type U;
    C a = L::ld(d), b = L::ld(s);
    switch (red) {
    case 1: return L::st((C)((U)a + (U)b));
    case 2: return L::st((C)((U)a * (U)b));
    case 3: return L::st(a > b ? a : b);
    case 4: return L::st(a < b ? a : b);
    default: return s;
    }
}

/* Offset of one index tuple's slice in data, or -1 (reported). */
template <typename I>
__device__ __forceinline__ int64_t kc_tuple_off(const kiln_cu_check &ck, const I *tup, int64_t last, const int64_t *dd,
                                                const int64_t *st, int64_t pos) {
    int64_t o = 0;
    for (int64_t k = 0; k < last; k++) {
        int64_t j = kc_index(ck, 1, (int64_t)tup[k], dd[k], pos + k);
        if (j < 0) return -1;
        o += j * st[k];
    }
    return o;
}


template <typename T>
__device__ __forceinline__ void kc_gather_nd(const kiln_cu_check &ck, int64_t n, int64_t slice, int64_t last,
                                             int64_t batch_stride, int64_t ntup, const kiln_cu_nd &g, const int64_t *idx,
                                             const T *x, T *y) {
    KC_FOR(i, n, int64_t) {
        int64_t at = i / slice, e = i % slice;
        int64_t o = kc_tuple_off(ck, idx + at * last, last, g.dd, g.st, at * last);
        y[i] = o >= 0 ? x[(at / ntup) * batch_stride + o + e] : (T)0;
    }
}

template <typename T>
__device__ __forceinline__ void kc_scatter_el(const kiln_cu_check &ck, const kiln_cu_iter &it, int64_t A,
                                              int64_t axst, int64_t ilen, int64_t iaxst, int red, const int64_t *idx,
                                              const T *u, T *y) {
    KC_FOR(i, it.numel, int64_t) {
        int64_t o[2];
        kc_offsets<uint64_t, int64_t, 2>(it, (uint64_t)i, o);
        for (int64_t k = 0; k < ilen; k++) {
            int64_t p = o[1] + k * iaxst;
            int64_t j = kc_index(ck, 1, idx[p], A, p);
            if (j < 0) continue;
            T *d = y + o[0] + j * axst;
            *d = kc_scatter_red<T>(red, *d, u[p]);
        }
    }
}

template <typename T>
__device__ __forceinline__ void kc_scatter_nd(const kiln_cu_check &ck, int64_t slice, int64_t last, int64_t ntup,
                                              const kiln_cu_nd &g, int red, const int64_t *idx, const T *u, T *y) {
    KC_FOR(e, slice, int64_t) {
        for (int64_t t = 0; t < ntup; t++) {
            /* every thread checks the tuple; only the first element's thread reports */
            int64_t o = kc_tuple_off(e == 0 ? ck : kiln_cu_check{0, 0}, idx + t * last, last, g.dd, g.st, t * last);
            if (o < 0) continue;
            T *d = y + o + e;
            *d = kc_scatter_red<T>(red, *d, u[t * slice + e]);
        }
    }
}

#define KC_SCATTER(S, T)                                                                      \
    extern "C" __global__ void gather_nd_##S(kiln_cu_check ck, int64_t n, int64_t slice, int64_t last, \
                                             int64_t batch_stride, int64_t ntup, kiln_cu_nd g, const int64_t *idx, \
                                             const T *x, T *y) {                               \
        kc_gather_nd<T>(ck, n, slice, last, batch_stride, ntup, g, idx, x, y);                 \
    }                                                                                          \
    extern "C" __global__ void scatter_el_##S(kiln_cu_check ck, kiln_cu_iter it, int64_t A, int64_t axst, \
                                              int64_t ilen, int64_t iaxst, int red, const int64_t *idx, const T *u, \
                                              T *y) {                                          \
        kc_scatter_el<T>(ck, it, A, axst, ilen, iaxst, red, idx, u, y);                        \
    }                                                                                          \
    extern "C" __global__ void scatter_nd_##S(kiln_cu_check ck, int64_t slice, int64_t last, int64_t ntup, kiln_cu_nd g, \
                                              int red, const int64_t *idx, const T *u, T *y) { \
        kc_scatter_nd<T>(ck, slice, last, ntup, g, red, idx, u, y);                            \
    }
KC_NUMS(KC_SCATTER)
KC_MORE_NUMS(KC_SCATTER)
KC_SCATTER(bool, uint8_t)
