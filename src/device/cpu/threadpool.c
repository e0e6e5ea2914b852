/*
 * threadpool.c — the CPU thread pool behind kiln_exec_parallel.
 *
 * Goal: a layer dispatch costs well under a microsecond.  With one thread,
 * or one task, work runs inline with no synchronization at all.  Otherwise
 * the caller publishes the job and bumps a generation counter; workers spin
 * briefly on the counter (back-to-back layers find them awake) and only
 * then sleep on a condition variable, or, while an inference runs
 * (kiln__pool_hold), yield their core and look again.  The caller takes
 * part in the work.
 *
 * Task claiming uses one 64-bit word: generation (32 bits) | nth (16) |
 * claimed tasks (16).  A worker that woke late for an old generation fails
 * its compare-and-swap instead of running a task of the next job, and a
 * worker reads fn/ud only after claiming a task, when the job cannot change
 * under it (the caller waits for every claimed task before the next
 * dispatch).
 *
 * Each thread claims its own task first (the caller task 0, worker w task
 * w + 1), then whatever is left: kernels split by task index (row bands of
 * a GEMM), so with a fixed thread per index the rows a core wrote in one
 * layer are the rows it reads in the next, from its own L2.  Claimed in
 * arrival order, a spinning worker took task 0 in 30% of 2-task dispatches
 * (load ~6), handing that layer's inputs to the other core.  Up to 16
 * tasks the low 16 bits are a mask of the claimed ones; beyond, a counter
 * (arrival order).
 */
#include "kiln_int.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* How long a worker with nothing to do, and a caller waiting for the
 * workers, spin before they sleep.  Waking a sleeping thread is what costs:
 * on the 2-vCPU VMs we measure on, the futex wake took the dispatching
 * thread 50-57 us (and a layer of a few us waits that long for it), so a
 * worker must still be spinning when the next parallel layer comes after a
 * stretch of serial ones (silero, the glue between BERT's GEMMs) or the
 * next inference.  PAUSE takes 14 ns there and 3x that on other CPUs, so
 * the spin is measured in time, not iterations (was 4000 PAUSEs: 57 us
 * there).  Not longer: on a machine shared with other work a spinning
 * worker takes a core from it (ctest -j2 on 2 cores took 27.7 -> 38.9 s
 * with 1 ms). */
#define SPIN_NS 200000
#define MAX_THREADS 1024

struct kiln__pool {
    int threads;
    pthread_t *workers;
    int nworkers;
    _Atomic uint32_t gen;
    _Atomic uint64_t claim;        /* gen << 32 | nth << 16 | claimed (mask or count) */
    _Atomic(kiln_task_fn) fn;
    _Atomic(void *) ud;
    _Atomic int done;
    _Atomic int sleepers;
    _Atomic int caller_waiting;
    _Atomic int stop;
    _Atomic int busy;
    _Atomic int hold; /* kiln__pool_hold: an inference is running */
    _Atomic int next_id; /* workers' ids 1.. (their own task) */
    pthread_mutex_t mu;
    pthread_cond_t wake, finished;
    /* Misuse recorded on a worker thread (a kernel task calling an attribute
     * accessor wrongly): handed to the dispatching thread, whose caller
     * fails the layer with it. */
    _Atomic int misuse;
    char misuse_msg[512];
};

static _Thread_local int t_in_task;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Spin until *w differs from v (returns 1) or SPIN_NS pass (or the pool
 * stops: returns 0); reads the clock once every 32 PAUSEs. */
static int spin_while(_Atomic uint32_t *w, uint32_t v, _Atomic int *stop) {
    uint64_t t0 = now_ns();
    for (uint32_t i = 1;; i++) {
        if (atomic_load_explicit(w, memory_order_acquire) != v) return 1;
        if (atomic_load_explicit(stop, memory_order_relaxed)) return 0;
        cpu_relax();
        if ((i & 31) == 0 && now_ns() - t0 > SPIN_NS) return 0;
    }
}

int kiln__cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* (kiln_int.h) "32768K", "300M", "1024": bytes; 0 for anything else. */
size_t kiln__parse_cache_size(const char *s) {
    char *end = NULL;
    if (!s) return 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s) return 0;
    const unsigned long long mul = *end == 'K' ? 1ull << 10 : *end == 'M' ? 1ull << 20 : *end == 'G' ? 1ull << 30 : 1;
    if (mul > 1) end++;
    if (*end != '\0' && *end != '\n') return 0;
    return (size_t)(v * mul);
}

/* (kiln_int.h) sysfs's, as the kernel reports this CPU's cache (sysconf's
 * LEVEL3_CACHE_SIZE reported the host's 384 MB on a VM whose cores share
 * 32 MB).  Read once; contexts created on several threads at once may each
 * read it the first time, and store the same value (atomic: no data race). */
size_t kiln__cpu_l3_bytes(void) {
    static _Atomic size_t cached = SIZE_MAX;
    size_t v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v != SIZE_MAX) return v;
    v = 0;
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    if (f) {
        char buf[64];
        if (fgets(buf, sizeof buf, f)) v = kiln__parse_cache_size(buf);
        fclose(f);
    }
    atomic_store_explicit(&cached, v, memory_order_relaxed);
    return v;
}

#define MASK_TASKS 16

/* Claim a task of generation g: `own` if it is still free, else the first
 * free one; -1 when none is left. */
static int claim_task(kiln__pool *p, uint32_t g, int own, int *nth_out) {
    for (;;) {
        uint64_t v = atomic_load(&p->claim);
        if ((uint32_t)(v >> 32) != g) return -1;
        uint32_t nth = (uint32_t)(v >> 16) & 0xffffu, low = (uint32_t)v & 0xffffu;
        uint32_t idx;
        uint64_t nv;
        if (nth <= MASK_TASKS) {
            uint32_t free = ~low & (uint32_t)((1u << nth) - 1u);
            if (!free) return -1;
            idx = own < (int)nth && (free >> own & 1u) ? (uint32_t)own : (uint32_t)__builtin_ctz(free);
            nv = v | (uint64_t)1u << idx;
        } else {
            if (low >= nth) return -1;
            idx = low;
            nv = v + 1;
        }
        if (atomic_compare_exchange_weak(&p->claim, &v, nv)) {
            *nth_out = (int)nth;
            return (int)idx;
        }
    }
}

/* Claim and run tasks of generation g until none are left; `own` is the
 * calling thread's task (see the top). */
static void run_tasks(kiln__pool *p, uint32_t g, int own) {
    for (;;) {
        int nth, idx = claim_task(p, g, own, &nth);
        if (idx < 0) return;
        kiln_task_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        void *ud = atomic_load_explicit(&p->ud, memory_order_relaxed);
        fn(ud, idx, nth);
        char msg[sizeof p->misuse_msg];
        if (kiln__misuse_pop(msg, sizeof msg)) {
            pthread_mutex_lock(&p->mu);
            if (!atomic_load(&p->misuse)) {
                memcpy(p->misuse_msg, msg, sizeof msg);
                atomic_store(&p->misuse, 1);
            }
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_fetch_add(&p->done, 1) + 1 == (int)nth && atomic_load(&p->caller_waiting)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->finished);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

/* Past its spin while an inference runs (kiln__pool_hold), a worker yields
 * its core instead of sleeping: the next layer's dispatch then needs no
 * futex wake (50 us of the dispatching thread, and the worker's 6-31 us and
 * more to get a core back).  On a shared 2-core VM a worker slept ~39 times
 * within one ResNet-50 inference at 2 threads (its task ended > 200 us
 * before the caller's, or it was descheduled).  Yielding, it leaves the
 * core to whoever is runnable.  Bounded by HOLD_NS, should a hold be left
 * on. */
#define HOLD_NS 50000000

static void yield_while_held(kiln__pool *p, uint32_t seen) {
    const uint64_t t0 = now_ns();
    for (uint32_t i = 1; atomic_load_explicit(&p->hold, memory_order_relaxed) &&
                         atomic_load_explicit(&p->gen, memory_order_acquire) == seen &&
                         !atomic_load_explicit(&p->stop, memory_order_relaxed);
         i++) {
        sched_yield();
        if ((i & 31) == 0 && now_ns() - t0 > HOLD_NS) return;
    }
}

void kiln__pool_hold(kiln__pool *p, int on) {
    if (p) atomic_store(&p->hold, on);
}

static void *worker_main(void *arg) {
    kiln__pool *p = arg;
    t_in_task = 1; /* anything a worker runs is inside a task */
    const int own = atomic_fetch_add(&p->next_id, 1) + 1;
    uint32_t seen = atomic_load(&p->gen);
    for (;;) {
        spin_while(&p->gen, seen, &p->stop);
        uint32_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g == seen) {
            yield_while_held(p, seen);
            g = atomic_load_explicit(&p->gen, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) break;
        seen = g;
        run_tasks(p, g, own);
    }
    return NULL;
}

kiln__pool *kiln__pool_create(int threads) {
    if (threads < 1) threads = 1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    kiln__pool *p = kiln__calloc(1, sizeof *p);
    if (!p) {
        kiln__err(KILN_ENOMEM, "thread pool: out of memory");
        return NULL;
    }
    p->threads = threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->finished, NULL);
    if (threads > 1) {
        p->workers = kiln__calloc((size_t)threads - 1, sizeof *p->workers);
        if (!p->workers) {
            kiln__pool_free(p);
            kiln__err(KILN_ENOMEM, "thread pool: out of memory");
            return NULL;
        }
        for (int i = 0; i < threads - 1; i++) {
            if (pthread_create(&p->workers[i], NULL, worker_main, p) != 0) {
                kiln__log(KILN_LOG_WARN, "thread pool: could only start %d of %d threads", i + 1,
                          threads);
                break;
            }
            p->nworkers++;
        }
        p->threads = p->nworkers + 1;
    }
    return p;
}

void kiln__pool_free(kiln__pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nworkers; i++) pthread_join(p->workers[i], NULL);
    kiln__free(p->workers);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->finished);
    kiln__free(p);
}

int kiln__pool_threads(const kiln__pool *p) { return p ? p->threads : 1; }

void kiln__pool_run(kiln__pool *p, int n_tasks, kiln_task_fn fn, void *ud) {
    if (n_tasks <= 0) return;
    int threads = p ? p->threads : 1;
    int nth = n_tasks < threads ? n_tasks : threads;
    if (nth == 1) {
        fn(ud, 0, 1);
        return;
    }
    /* Nested call from a task, or another thread already dispatching on this
     * pool: run on this thread. */
    if (t_in_task || atomic_exchange(&p->busy, 1)) {
        int saved = t_in_task;
        t_in_task = 1;
        for (int i = 0; i < nth; i++) fn(ud, i, nth);
        t_in_task = saved;
        return;
    }
    uint32_t g = atomic_load(&p->gen) + 1;
    atomic_store(&p->claim, (uint64_t)g << 32 | (uint64_t)nth << 16);
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ud, ud, memory_order_relaxed);
    atomic_store(&p->done, 0);
    atomic_store(&p->gen, g); /* publishes the job */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
    t_in_task = 1;
    run_tasks(p, g, 0);
    t_in_task = 0;
    uint64_t t0 = now_ns(); /* the workers' tasks end soon: spin, as they do */
    for (uint32_t i = 1; atomic_load(&p->done) != nth; i++) {
        cpu_relax();
        if ((i & 31) == 0 && now_ns() - t0 > SPIN_NS) break;
    }
    if (atomic_load(&p->done) != nth) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->caller_waiting, 1);
        while (atomic_load(&p->done) != nth) pthread_cond_wait(&p->finished, &p->mu);
        atomic_store(&p->caller_waiting, 0);
        pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->misuse)) {
        pthread_mutex_lock(&p->mu);
        kiln__misuse_push(p->misuse_msg);
        atomic_store(&p->misuse, 0);
        pthread_mutex_unlock(&p->mu);
    }
    atomic_store(&p->busy, 0);
}

/* ---------------------------------------------------------------- kiln_exec */

/* Called from kernels, which cannot be handed a status: a NULL handle is
 * misuse (recorded; the run fails with it once the kernel returns) and the
 * work runs serially. */

kiln_device_kind kiln_exec_device(const kiln_exec *e) {
    KILN__CB_ARG(e, KILN_DEVICE_CPU);
    return e->device;
}

void *kiln_exec_stream(const kiln_exec *e) {
    KILN__CB_ARG(e, NULL);
    return e->stream;
}

int kiln_exec_threads(const kiln_exec *e) {
    KILN__CB_ARG(e, 1);
    return e->pool ? kiln__pool_threads(e->pool) : 1;
}

void kiln_exec_parallel(kiln_exec *e, int n_tasks, kiln_task_fn fn, void *ud) {
    KILN__CB_ARG(fn, );
    if (n_tasks <= 0) return;
    if (!e) {
        kiln__misuse("kiln_exec_parallel: invalid argument, expected an execution handle, found NULL");
        fn(ud, 0, 1);
        return;
    }
    if (!e->pool || e->depth > 0 || t_in_task) {
        /* serial: one task covering everything (e->depth is only touched by
         * the dispatching thread, never from inside tasks) */
        fn(ud, 0, 1);
        return;
    }
    e->depth++;
    kiln__pool_run(e->pool, n_tasks, fn, ud);
    e->depth--;
}

/* kiln_exec_parallel_for's chunks: task i owns the i-th contiguous share
 * of them and takes its own first, from the front; a task done with its
 * share then takes what is left of the others', from their backs.  Owned
 * shares keep a range on the core that ran it in the layer before: a
 * kernel that splits its output the same way as its producer reads its
 * input from its own L2 (on a VM whose two vCPUs sat on two dies, chunks
 * claimed in arrival order from one counter sent half of every layer's
 * input across the dies: ResNet-50 at 2 threads 19.4 against 15.8 ms on
 * one die). */
#define PFOR_CHUNKS 4  /* per task */
typedef struct pfor_job {
    kiln_range_fn fn;
    void *ud;
    int64_t n, nchunks;
    kiln__shares shares;
} pfor_job;

void kiln__shares_init(kiln__shares *sh, int64_t items, int tasks) {
    sh->n = tasks < KILN__SHARES ? tasks : KILN__SHARES;
    for (int s = 0; s < sh->n; s++)
        atomic_init(&sh->s[s], (uint64_t)((s + 1) * items / sh->n) << 32 | (uint64_t)(s * items / sh->n));
}

/* An item of share s from its front (its owner) or back; -1 when none is left. */
static int64_t share_take(kiln__shares *sh, int s, int back) {
    uint64_t v = atomic_load(&sh->s[s]);
    for (;;) {
        uint32_t f = (uint32_t)v, b = (uint32_t)(v >> 32);
        if (f >= b) return -1;
        uint64_t nv = back ? (uint64_t)(b - 1) << 32 | f : (uint64_t)b << 32 | (f + 1);
        if (atomic_compare_exchange_weak(&sh->s[s], &v, nv)) return back ? b - 1 : f;
    }
}

int64_t kiln__shares_take(kiln__shares *sh, int task) {
    const int own = task % sh->n;
    int64_t k = share_take(sh, own, 0);
    for (int s = 1; k < 0 && s < sh->n; s++) k = share_take(sh, (own + s) % sh->n, 1); /* from the next one on */
    return k;
}

static void pfor_chunk(pfor_job *j, int64_t k) {
    int64_t b, end;
    kiln_split_range(j->n, (int)k, (int)j->nchunks, &b, &end);
    if (end > b) j->fn(j->ud, b, end);
}

static void pfor_task(void *arg, int ith, int nth) {
    (void)nth;
    pfor_job *j = arg;
    for (int64_t k; (k = kiln__shares_take(&j->shares, ith)) >= 0;) pfor_chunk(j, k);
}

void kiln_exec_parallel_for(kiln_exec *e, int64_t n, int64_t grain, kiln_range_fn fn, void *ud) {
    KILN__CB_ARG(fn, );
    if (n <= 0) return;
    if (!e) {
        kiln__misuse("kiln_exec_parallel_for: invalid argument, expected an execution handle, found NULL");
        fn(ud, 0, n);
        return;
    }
    if (grain < 1) grain = 1;
    int threads = kiln_exec_threads(e);
    int64_t nchunks = n / grain;
    if (nchunks > (int64_t)threads * PFOR_CHUNKS) nchunks = (int64_t)threads * PFOR_CHUNKS;
    if (nchunks < 1) nchunks = 1;
    if (nchunks == 1 || threads == 1 || e->depth > 0 || t_in_task) {
        fn(ud, 0, n);
        return;
    }
    int tasks = nchunks < threads ? (int)nchunks : threads;
    pfor_job j = {.fn = fn, .ud = ud, .n = n, .nchunks = nchunks};
    kiln__shares_init(&j.shares, nchunks, tasks);
    kiln_exec_parallel(e, tasks, pfor_task, &j);
}
