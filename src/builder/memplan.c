/*
 * memplan.c — activation memory planning.
 *
 * Buffers live from the layer that produces them to the last layer that
 * reads them.  Two buffers whose lifetimes overlap must not overlap in
 * memory; others may share.  We place buffers largest first, each at the
 * best-fitting gap (smallest gap that holds it) among the already placed
 * buffers it overlaps in time: the classic greedy-by-size offset
 * assignment, which is within a few percent of optimal on real networks.
 * Aliased buffers (in-place outputs) are merged with their root first: one
 * buffer, the union of the lifetimes, the larger size.
 */
#include "build_int.h"

#include <stdlib.h>

#define ALIGN 64u

typedef struct mp_buf {
    int root;
    uint64_t size;
    int32_t first, last;
    uint64_t off;
    int placed;
} mp_buf;

static int root_of(const int32_t *alias, int n, int i) {
    for (int guard = 0; alias && alias[i] >= 0 && guard <= n; guard++) i = alias[i];
    return i;
}

static _Thread_local const mp_buf *g_sort_bufs;
static int cmp_size_desc(const void *a, const void *b) {
    const mp_buf *x = &g_sort_bufs[*(const int *)a], *y = &g_sort_bufs[*(const int *)b];
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

typedef struct span { uint64_t lo, hi; } span;
static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo ? 1 : 0;
}

int kiln__memplan(int n, const uint64_t *sizes, const int32_t *first, const int32_t *last,
                  const int32_t *alias, uint64_t *offsets, uint64_t *total) {
    *total = 0;
    if (n <= 0) return 0;
    for (int i = 0; i < n; i++) {
        if (alias && (alias[i] >= n || alias[i] == i))
            return kiln__err(KILN_EINVAL, "memplan: buffer %d aliases %d (expected -1 or 0..%d, not itself)",
                             i, alias[i], n - 1);
        if (first[i] > last[i])
            return kiln__err(KILN_EINVAL, "memplan: buffer %d lives from %d to %d (first > last)", i,
                             first[i], last[i]);
    }
    for (int i = 0; i < n; i++) {
        int r = i, steps = 0;
        while (alias && alias[r] >= 0) {
            r = alias[r];
            if (++steps > n) return kiln__err(KILN_EINVAL, "memplan: alias cycle through buffer %d", i);
        }
    }
    mp_buf *b = kiln__calloc((size_t)n, sizeof *b);
    int *order = kiln__malloc((size_t)n * sizeof *order);
    span *sp = kiln__malloc((size_t)n * sizeof *sp);
    if (!b || !order || !sp) {
        kiln__free(b); kiln__free(order); kiln__free(sp);
        return kiln__err(KILN_ENOMEM, "memplan: out of memory for %d buffers", n);
    }
    for (int i = 0; i < n; i++) {
        b[i].root = root_of(alias, n, i);
        b[i].first = INT32_MAX;
        b[i].last = INT32_MIN;
    }
    for (int i = 0; i < n; i++) {
        mp_buf *r = &b[b[i].root];
        uint64_t sz = (sizes[i] + ALIGN - 1) / ALIGN * ALIGN;
        if (sz > r->size) r->size = sz;
        if (first[i] < r->first) r->first = first[i];
        if (last[i] > r->last) r->last = last[i];
    }
    int nroots = 0;
    for (int i = 0; i < n; i++)
        if (b[i].root == i) order[nroots++] = i;
    g_sort_bufs = b; /* qsort has no context argument: a thread-local carries it */
    qsort(order, (size_t)nroots, sizeof *order, cmp_size_desc);
    g_sort_bufs = NULL;
    uint64_t top = 0;
    for (int k = 0; k < nroots; k++) {
        mp_buf *x = &b[order[k]];
        if (x->size == 0) { x->off = 0; x->placed = 1; continue; }
        int ns = 0;
        for (int j = 0; j < k; j++) {
            const mp_buf *y = &b[order[j]];
            if (y->size == 0) continue;
            if (y->first <= x->last && x->first <= y->last) sp[ns++] = (span){y->off, y->off + y->size};
        }
        qsort(sp, (size_t)ns, sizeof *sp, cmp_span);
        uint64_t best = UINT64_MAX, best_gap = UINT64_MAX, cur = 0;
        for (int j = 0; j < ns; j++) {
            if (sp[j].lo > cur) {
                uint64_t gap = sp[j].lo - cur;
                if (gap >= x->size && gap < best_gap) { best_gap = gap; best = cur; }
            }
            if (sp[j].hi > cur) cur = sp[j].hi;
        }
        if (best == UINT64_MAX) best = cur; /* after everything it overlaps */
        x->off = best;
        x->placed = 1;
        if (best + x->size > top) top = best + x->size;
    }
    for (int i = 0; i < n; i++) offsets[i] = b[b[i].root].off;
    *total = top;
    kiln__free(b); kiln__free(order); kiln__free(sp);
    return 0;
}
