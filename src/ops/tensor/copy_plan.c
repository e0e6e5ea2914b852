/*
 * copy_plan.c — kiln__cu_copy_plan_make: the form the CUDA strided copy
 * takes (unit width, plain or tiled transpose); see copy_plan.h.
 */
#include "ops/tensor/copy_plan.h"

#include "ops/common/ops_cuda.h"

#include <string.h>

/* The widest unit (<= 16 bytes, a multiple of es) that divides the
 * innermost row's bytes, both bases and every outer stride in bytes. */
static int64_t widest_unit(const kiln_cu_iter *it, int64_t es, uintptr_t src, uintptr_t dst) {
    int L = it->ndim - 1;
    for (int64_t w = 16; w > es; w /= 2) {
        int ok = (it->dims[L] * es) % w == 0 && src % (uintptr_t)w == 0 && dst % (uintptr_t)w == 0;
        for (int k = 0; k < 2 && ok; k++)
            for (int d = 0; d < L && ok; d++) ok = (it->st[k][d] * es) % w == 0;
        if (ok) return w;
    }
    return es;
}

/* The iterator over the dims of `it` but p and q (batch of the transpose). */
static void batch_iter(const kiln_cu_iter *it, int p, int q, kiln_cu_iter *b) {
    int64_t dims[KILN_CU_MAX_DIMS], s0[KILN_CU_MAX_DIMS], s1[KILN_CU_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < it->ndim; d++)
        if (d != p && d != q) dims[n] = it->dims[d], s0[n] = it->st[0][d], s1[n] = it->st[1][d], n++;
    const int64_t *st[2] = {s0, s1};
    kiln__cu_iter_init(b, n, dims, 2, st);
}

void kiln__cu_copy_plan_make(int nd, const int64_t *dims, size_t es, uintptr_t src, const int64_t *src_st,
                             uintptr_t dst, const int64_t *dst_st, kiln__cu_copy_plan *p) {
    memset(p, 0, sizeof *p);
    const int64_t *st[2] = {src_st, dst_st};
    kiln_cu_iter *it = &p->it;
    kiln__cu_iter_init(it, nd, dims, 2, st);
    p->unit = (int)es;
    int L = it->ndim - 1;
    if (it->numel <= 0) return;
    if (it->st[0][L] == 1 && it->st[1][L] == 1) { /* rows contiguous on both sides: widen */
        int64_t w = widest_unit(it, (int64_t)es, src, dst), f = w / (int64_t)es;
        if (f == 1) return;
        int64_t wd[KILN_CU_MAX_DIMS], w0[KILN_CU_MAX_DIMS], w1[KILN_CU_MAX_DIMS];
        for (int d = 0; d <= L; d++) {
            wd[d] = it->dims[d];
            w0[d] = d == L ? 1 : it->st[0][d] / f;
            w1[d] = d == L ? 1 : it->st[1][d] / f;
        }
        wd[L] /= f;
        const int64_t *ws[2] = {w0, w1};
        int n = it->ndim;
        kiln__cu_iter_init(it, n, wd, 2, ws); /* a row of one unit may now merge outward */
        p->unit = (int)w;
        return;
    }
    if (it->st[1][L] != 1 || it->dims[L] < KILN__CU_TILE_MIN) return;
    int q = L, pd = -1;
    for (int d = 0; d < L; d++)
        if (it->st[0][d] == 1 && it->dims[d] >= KILN__CU_TILE_MIN) pd = d;
    if (pd < 0) return;
    kiln_cu_transpose *t = &p->tr;
    batch_iter(it, pd, q, &t->batch);
    t->P = it->dims[pd];
    t->Q = it->dims[q];
    t->sq = it->st[0][q];
    t->dp = it->st[1][pd];
    t->tp = (t->P + 31) / 32;
    t->tq = (t->Q + 31) / 32;
    t->nblocks = t->batch.numel * t->tp * t->tq;
    p->transpose = 1;
}
