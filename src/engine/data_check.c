/*
 * data_check.c — the checksums of an engine's bulk sections, verified at
 * the first run instead of at load.
 *
 * A mapped engine file is used in place: its weights and packed weights
 * (sections WEIGHTS and PACKED, nearly all of a CNN's or a transformer's
 * file) are never copied.  Hashing them is the only reason load would read
 * those bytes -- about 10 ms per 100 MB, most of what a load costs -- so a
 * large section's checksum waits until a context first runs the engine
 * (file.c decides which sections; the structure, every offset and size, is
 * still checked at load).  The first run of any context verifies them
 * once for the engine, under a lock, the chunks of a section spread over
 * that context's threads (checksum.h); a mismatch fails that run and every
 * later one with KILN_ECHECKSUM naming the section, so a damaged file
 * never gives an answer.
 */
#include "kiln_int.h"
#include "engine/checksum.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#define MAX_DEFERRED 4

typedef struct kiln__data_check {
    pthread_mutex_t lock;
    atomic_int state; /* 0 not checked, 1 good, < 0 the KILN_E* of a mismatch */
    int n;
    struct {
        const uint8_t *p;
        uint64_t size, ck, off;
        const char *section;
    } s[MAX_DEFERRED];
    char msg[192];
} kiln__data_check;

int kiln__data_check_add(kiln_engine *e, const uint8_t *p, uint64_t n, uint64_t ck, const char *section,
                         uint64_t off) {
    if (!e->data_check) {
        e->data_check = kiln__calloc(1, sizeof *e->data_check);
        if (!e->data_check) return kiln__err(KILN_ENOMEM, "out of memory");
        pthread_mutex_init(&e->data_check->lock, NULL);
    }
    kiln__data_check *d = e->data_check;
    KILN__ASSERT(d->n < MAX_DEFERRED);
    d->s[d->n].p = p;
    d->s[d->n].size = n;
    d->s[d->n].ck = ck;
    d->s[d->n].off = off;
    d->s[d->n].section = section;
    d->n++;
    return 0;
}

/* The chunks of one section, hashed on the context's threads. */
typedef struct ck_job {
    const uint8_t *p;
    uint64_t size;
    uint64_t *h;
} ck_job;

static void ck_range(void *ud, int64_t c0, int64_t c1) {
    const ck_job *j = ud;
    for (int64_t c = c0; c < c1; c++) {
        const uint64_t at = (uint64_t)c * KILN__CK_CHUNK, n = j->size - at;
        j->h[c] = kiln__ck_chunk(j->p + at, n < KILN__CK_CHUNK ? (size_t)n : KILN__CK_CHUNK, (uint64_t)c);
    }
}

static int section_ok(const uint8_t *p, uint64_t size, uint64_t ck, kiln_exec *exec) {
    const int64_t nch = (int64_t)((size + KILN__CK_CHUNK - 1) / KILN__CK_CHUNK);
    uint64_t *h = exec && nch > 1 ? kiln__malloc((size_t)nch * sizeof *h) : NULL;
    if (!h) return kiln__ck64(p, (size_t)size) == ck; /* one thread (or no memory for the table) */
    ck_job j = {p, size, h};
    kiln_exec_parallel_for(exec, nch, 1, ck_range, &j);
    uint64_t outer = KILN__CK_OUTER0;
    for (int64_t c = 0; c < nch; c++) outer = kiln__ck_fold(outer, h[c]);
    kiln__free(h);
    return kiln__ck_final(outer, size) == ck;
}

int kiln__engine_check_data(const kiln_engine *e, kiln_exec *exec) {
    kiln__data_check *d = e->data_check;
    if (!d) return 0;
    int st = atomic_load_explicit(&d->state, memory_order_acquire);
    if (st == 0) {
        pthread_mutex_lock(&d->lock);
        st = atomic_load_explicit(&d->state, memory_order_relaxed);
        for (int i = 0; i < d->n && st == 0; i++)
            if (!section_ok(d->s[i].p, d->s[i].size, d->s[i].ck, exec)) {
                snprintf(d->msg, sizeof d->msg,
                         "section %s (offset %llu, %llu bytes): checksum mismatch (verified at the first run)",
                         d->s[i].section, (unsigned long long)d->s[i].off, (unsigned long long)d->s[i].size);
                st = KILN_ECHECKSUM;
            }
        if (st == 0) st = 1;
        atomic_store_explicit(&d->state, st, memory_order_release);
        pthread_mutex_unlock(&d->lock);
    }
    return st < 0 ? kiln__err(st, "engine %s", d->msg) : 0;
}

void kiln__data_check_free(kiln_engine *e) {
    if (!e->data_check) return;
    pthread_mutex_destroy(&e->data_check->lock);
    kiln__free(e->data_check);
    e->data_check = NULL;
}
