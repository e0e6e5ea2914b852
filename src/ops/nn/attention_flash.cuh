/*
 * attention_flash.cuh — what the flash-attention kernels (attention_tc.cu,
 * attention_f32.cu) share: the part of the launch one CTA owns.  The grid
 * is one CTA per (batch, head, tile of bq query rows); each operand's base
 * for the CTA follows from its batch and head strides in kiln_cu_flash.
 */
#ifndef KILN_ATTENTION_FLASH_CUH
#define KILN_ATTENTION_FLASH_CUH

#include "ops/common/cuda_common.cuh"

template <typename T> struct kc_flash_bases {
    const T *q, *k, *v, *m; /* m: read only with has_mask */
    T *y;
    int64_t q0; /* the tile's first query row */
};

template <typename T>
__device__ __forceinline__ kc_flash_bases<T> kc_flash_cta(const kiln_cu_flash &p, int bq, const T *q, const T *k,
                                                          const T *v, const T *mask, T *y) {
    const int64_t qtiles = (p.sq + bq - 1) / bq, bh = blockIdx.x / qtiles;
    const int64_t bb = bh / p.nh, hh = bh - bb * p.nh;
    kc_flash_bases<T> c;
    c.q = q + bb * p.qs[0] + hh * p.qs[1];
    c.k = k + bb * p.ks[0] + hh * p.ks[1];
    c.v = v + bb * p.vs[0] + hh * p.vs[1];
    c.m = mask + bb * p.ms[0] + hh * p.ms[1];
    c.y = y + bb * p.ys[0] + hh * p.ys[1];
    c.q0 = (blockIdx.x - bh * qtiles) * bq;
    return c;
}

#endif
