/* test_threadpool.c — the CPU pool and kiln_exec_* helpers. */
#include "kiln_int.h"
#include "test.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef struct cover {
    _Atomic int *hits;
    int64_t n;
    int64_t grain;
    _Atomic int bad;
} cover;

static void cover_range(void *ud, int64_t b, int64_t e) {
    cover *c = ud;
    if (b < 0 || e > c->n || b >= e) atomic_store(&c->bad, 1);
    /* chunks are at least `grain` long unless the whole range is shorter */
    if (e - b < c->grain && !(b == 0 && e == c->n)) atomic_store(&c->bad, 2);
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&c->hits[i], 1);
}

TEST_IMPL(parallel_for_cover) {
    int threads_list[] = {1, 2, 3, 4, 8};
    int64_t ns[] = {1, 2, 3, 7, 64, 100, 1000, 4097};
    int64_t grains[] = {1, 3, 16, 1000};
    for (size_t ti = 0; ti < sizeof threads_list / sizeof *threads_list; ti++) {
        kiln__pool *p = kiln__pool_create(threads_list[ti]);
        ASSERT(p);
        ASSERT_EQ(kiln__pool_threads(p), threads_list[ti]);
        kiln_exec e = {.device = KILN_DEVICE_CPU, .pool = p};
        ASSERT_EQ(kiln_exec_threads(&e), threads_list[ti]);
        ASSERT_EQ(kiln_exec_device(&e), KILN_DEVICE_CPU);
        ASSERT(kiln_exec_stream(&e) == NULL);
        for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++)
            for (size_t gi = 0; gi < sizeof grains / sizeof *grains; gi++) {
                int64_t n = ns[ni];
                cover c = {calloc((size_t)n, sizeof(_Atomic int)), n, grains[gi], 0};
                kiln_exec_parallel_for(&e, n, grains[gi], cover_range, &c);
                ASSERT_EQ(atomic_load(&c.bad), 0);
                for (int64_t i = 0; i < n; i++)
                    if (atomic_load(&c.hits[i]) != 1)
                        TEST__FAIL("threads %d n %lld grain %lld: index %lld hit %d times", threads_list[ti],
                                   (long long)n, (long long)grains[gi], (long long)i, atomic_load(&c.hits[i]));
                free(c.hits);
            }
        kiln__pool_free(p);
    }
}

/* A slow first chunk: the caller's share is left to the others, who take
 * it from its back (threadpool.c's shares); with more tasks than the
 * shares (64), two tasks take from one.  Every index once either way. */
static void slow_range(void *ud, int64_t b, int64_t e) {
    if (b == 0) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    cover_range(ud, b, e);
}

TEST_IMPL(parallel_for_shares) {
    const int threads_list[] = {2, 3, 70};
    for (size_t ti = 0; ti < sizeof threads_list / sizeof *threads_list; ti++) {
        kiln__pool *p = kiln__pool_create(threads_list[ti]);
        ASSERT(p);
        kiln_exec e = {.device = KILN_DEVICE_CPU, .pool = p};
        for (int64_t n = 5; n <= 5000; n *= 10) {
            cover c = {calloc((size_t)n, sizeof(_Atomic int)), n, 1, 0};
            kiln_exec_parallel_for(&e, n, 1, slow_range, &c);
            ASSERT_EQ(atomic_load(&c.bad), 0);
            for (int64_t i = 0; i < n; i++)
                if (atomic_load(&c.hits[i]) != 1)
                    TEST__FAIL("threads %d n %lld: index %lld hit %d times", threads_list[ti], (long long)n,
                               (long long)i, atomic_load(&c.hits[i]));
            free(c.hits);
        }
        kiln__pool_free(p);
    }
}

typedef struct tasks {
    _Atomic int seen[64];
    _Atomic int nth_seen;
    _Atomic int calls;
} tasks;

static void task_fn(void *ud, int ith, int nth) {
    tasks *t = ud;
    atomic_fetch_add(&t->seen[ith], 1);
    atomic_store(&t->nth_seen, nth);
    atomic_fetch_add(&t->calls, 1);
}

/* Every task once, on pools claiming by mask (up to 16 tasks: each thread
 * its own first) and by counter (more). */
TEST_IMPL(parallel_tasks) {
    const int pools[] = {4, 16, 17, 20};
    for (size_t pi = 0; pi < sizeof pools / sizeof pools[0]; pi++) {
        const int threads = pools[pi];
        kiln__pool *p = kiln__pool_create(threads);
        kiln_exec e = {.device = KILN_DEVICE_CPU, .pool = p};
        for (int rep = 0; rep < (threads > 4 ? 300 : 2000); rep++) {
            int n_tasks = 1 + rep % (threads + 3);
            tasks t;
            memset(&t, 0, sizeof t);
            kiln_exec_parallel(&e, n_tasks, task_fn, &t);
            int nth = n_tasks < threads ? n_tasks : threads;
            ASSERT_EQ(atomic_load(&t.calls), nth);
            ASSERT_EQ(atomic_load(&t.nth_seen), nth);
            for (int i = 0; i < nth; i++) ASSERT_EQ(atomic_load(&t.seen[i]), 1);
        }
        kiln_exec_parallel(&e, 0, task_fn, NULL); /* nothing to do */
        kiln__pool_free(p);
    }
}

typedef struct nested {
    kiln_exec *e;
    _Atomic int64_t sum;
    pthread_t outer_thread[8];
    _Atomic int inner_other_thread;
} nested;

static void inner_range(void *ud, int64_t b, int64_t e) {
    nested *n = ud;
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&n->sum, i);
}

static void inner_task(void *ud, int ith, int nth) {
    (void)ith;
    (void)nth;
    nested *n = ud;
    atomic_fetch_add(&n->sum, 1000000);
}

static void outer_task(void *ud, int ith, int nth) {
    nested *n = ud;
    (void)nth;
    pthread_t self = pthread_self();
    n->outer_thread[ith] = self;
    /* nested calls run serially on this thread */
    kiln_exec_parallel_for(n->e, 100, 1, inner_range, n);
    kiln_exec_parallel(n->e, 5, inner_task, n);
}

TEST_IMPL(nested_serial) {
    kiln__pool *p = kiln__pool_create(3);
    kiln_exec e = {.device = KILN_DEVICE_CPU, .pool = p};
    for (int rep = 0; rep < 200; rep++) {
        nested n;
        memset(&n, 0, sizeof n);
        n.e = &e;
        kiln_exec_parallel(&e, 3, outer_task, &n);
        /* 3 outer tasks x (sum 0..99 + one serial inner task) */
        ASSERT_EQ(atomic_load(&n.sum), 3 * (4950 + 1000000));
    }
    kiln__pool_free(p);
}

static void record_thread(void *ud, int ith, int nth) {
    (void)ith;
    (void)nth;
    *(pthread_t *)ud = pthread_self();
}
static void record_range(void *ud, int64_t b, int64_t e) {
    (void)b;
    (void)e;
    *(pthread_t *)ud = pthread_self();
}

TEST_IMPL(single_thread_inline) {
    /* threads == 1 (or no pool): everything runs on the caller's thread */
    kiln__pool *p = kiln__pool_create(1);
    kiln_exec e = {.device = KILN_DEVICE_CPU, .pool = p};
    pthread_t who;
    kiln_exec_parallel(&e, 8, record_thread, &who);
    ASSERT(pthread_equal(who, pthread_self()));
    kiln_exec_parallel_for(&e, 1000, 1, record_range, &who);
    ASSERT(pthread_equal(who, pthread_self()));
    kiln__pool_free(p);
    kiln_exec none = {.device = KILN_DEVICE_CPU, .pool = NULL};
    ASSERT_EQ(kiln_exec_threads(&none), 1);
    kiln_exec_parallel(&none, 4, record_thread, &who);
    ASSERT(pthread_equal(who, pthread_self()));
    /* one task on a multi-thread pool also runs inline */
    p = kiln__pool_create(4);
    e.pool = p;
    kiln_exec_parallel(&e, 1, record_thread, &who);
    ASSERT(pthread_equal(who, pthread_self()));
    kiln__pool_free(p);
    ASSERT(kiln__cpu_count() >= 1);
}

/* Two pools used from two threads at once, and one pool from two threads
 * (the second dispatcher runs inline). */
typedef struct shared_use {
    kiln__pool *p;
    int64_t total;
} shared_use;

static void add_task(void *ud, int ith, int nth) {
    (void)nth;
    atomic_fetch_add((_Atomic int64_t *)ud, ith + 1);
}

static void *hammer(void *arg) {
    shared_use *s = arg;
    for (int i = 0; i < 3000; i++) {
        _Atomic int64_t acc = 0;
        kiln__pool_run(s->p, 3, add_task, &acc);
        s->total += atomic_load(&acc);
    }
    return NULL;
}

TEST_IMPL(concurrent_dispatch) {
    kiln__pool *p = kiln__pool_create(3);
    shared_use a = {p, 0}, b = {p, 0};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, hammer, &a);
    pthread_create(&t2, NULL, hammer, &b);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    ASSERT_EQ(a.total, 3000 * 6);
    ASSERT_EQ(b.total, 3000 * 6);
    kiln__pool_free(p);
}

/* kiln__pool_hold: between dispatches 5 ms apart (past the 200 us spin)
 * a held pool's worker yields instead of sleeping on the condition
 * variable, a pool not held sleeps; every task runs once either way, and a
 * pool freed while held does not hang. */
typedef struct worker_tid {
    _Atomic long tid; /* the thread that ran task 1 */
    _Atomic int runs[2];
} worker_tid;

static void tid_task(void *ud, int ith, int nth) {
    (void)nth;
    worker_tid *w = ud;
    if (ith == 1) atomic_store(&w->tid, (long)syscall(SYS_gettid));
    const int was = atomic_fetch_add(&w->runs[ith], 1);
    if (ith == 0) { /* leave task 1 to the worker: wait up to 20 ms for it */
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do clock_gettime(CLOCK_MONOTONIC, &t);
        while (atomic_load(&w->runs[1]) <= was &&
               (t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 20000000L);
    }
}

/* Voluntary context switches of thread tid of this process (-1: unknown). */
static long voluntary_switches(long tid) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/self/task/%ld/status", tid);
    FILE *f = fopen(path, "r");
    long v = -1;
    if (!f) return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "voluntary_ctxt_switches: %ld", &v) == 1) break;
    fclose(f);
    return v;
}

static long switches_over_pauses(int hold, int pauses, worker_tid *w) {
    kiln__pool *p = kiln__pool_create(2);
    kiln_exec e = {.device = KILN_DEVICE_CPU, .pool = p};
    kiln__pool_hold(p, hold);
    long before = -1, after = -1, tid = -1;
    const struct timespec pause = {0, 5000000};
    for (int i = 0; i <= pauses; i++) {
        kiln_exec_parallel(&e, 2, tid_task, w);
        const long who = atomic_load(&w->tid);
        if (tid < 0 && who != (long)syscall(SYS_gettid)) { /* the worker ran task 1: count from here */
            tid = who;
            before = voluntary_switches(tid);
        }
        nanosleep(&pause, NULL);
    }
    if (tid > 0) after = voluntary_switches(tid);
    kiln__pool_free(p); /* held: the worker leaves its yield loop on stop */
    return before >= 0 && after >= 0 ? after - before : -1;
}

TEST_IMPL(hold_yields) {
    worker_tid held, free_;
    memset(&held, 0, sizeof held);
    memset(&free_, 0, sizeof free_);
    const int pauses = 20;
    long sw_held = switches_over_pauses(1, pauses, &held);
    long sw_free = switches_over_pauses(0, pauses, &free_);
    for (int t = 0; t < 2; t++) {
        ASSERT_EQ(atomic_load(&held.runs[t]), pauses + 1);
        ASSERT_EQ(atomic_load(&free_.runs[t]), pauses + 1);
    }
    /* -1: the caller ran task 1 every time (a loaded machine) or no /proc */
    if (sw_held >= 0 && sw_free >= 0) {
        if (sw_held >= 5) TEST__FAIL("held pool: the worker slept %ld times over %d pauses", sw_held, pauses);
        if (sw_free < 5) TEST__FAIL("pool not held: the worker slept only %ld times over %d pauses", sw_free, pauses);
    }
}

/* sysfs's cache sizes (kiln__cpu_l3_bytes reads index3/size: the context
 * prefetches the next layer's weights when an engine's outgrow it). */
TEST_IMPL(cache_size_parse) {
    ASSERT_EQ(kiln__parse_cache_size("32768K\n"), (size_t)32 << 20);
    ASSERT_EQ(kiln__parse_cache_size("300M"), (size_t)300 << 20);
    ASSERT_EQ(kiln__parse_cache_size("1024"), (size_t)1024);
    ASSERT_EQ(kiln__parse_cache_size(""), (size_t)0);
    ASSERT_EQ(kiln__parse_cache_size("abc"), (size_t)0);
    ASSERT_EQ(kiln__parse_cache_size("12X"), (size_t)0);
    ASSERT_EQ(kiln__parse_cache_size("12KB"), (size_t)0);
    ASSERT_EQ(kiln__parse_cache_size(NULL), (size_t)0);
    /* the L3 as sysfs says it, read here apart (kilobytes, its usual form), or 0 where there is none */
    unsigned long kb = 0;
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    const int n = f ? fscanf(f, "%luK", &kb) : 0;
    if (f) fclose(f);
    if (!f) ASSERT_EQ(kiln__cpu_l3_bytes(), (size_t)0);
    else if (n == 1) ASSERT_EQ(kiln__cpu_l3_bytes(), (size_t)kb << 10);
}

TEST_LIST(TEST_ENTRY(cache_size_parse), TEST_ENTRY(parallel_for_cover), TEST_ENTRY(parallel_for_shares), TEST_ENTRY(parallel_tasks), TEST_ENTRY(nested_serial),
          TEST_ENTRY(single_thread_inline), TEST_ENTRY(concurrent_dispatch), TEST_ENTRY(hold_yields))
