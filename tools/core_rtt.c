/*
 * core_rtt.c — how far apart two of this process's CPUs are, for `kiln
 * bench` at 2+ threads: the round trip of one cache line between a thread
 * pinned to the first allowed CPU and one pinned to the second (each
 * writes the line the other waits on), the best of 3 trials of 4000 (or
 * of what 20 ms allow).
 *
 * Why it is printed: on a VM the host decides where the guest's vCPUs
 * run, and moves them.  On the 2-vCPU AMD EPYC (Zen 5) of 2026-11-27 the
 * same two vCPUs measured ~80-120 ns (one die) and ~430 ns (two dies)
 * minutes apart; ResNet-18 at 2 threads ran 6.2 ms in the first placement
 * and 8.9 ms in the second (ResNet-50 16.6 / 20.3 ms), ONNX Runtime 8.3 and
 * 8.7 ms.  A 2-thread figure means little without it.  Two threads of a
 * helper, never the caller: the caller's affinity is left alone.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "cli.h"

#define TRIPS 4000

typedef struct rtt_job {
    _Atomic int turn __attribute__((aligned(64))); /* 0: the first thread's, 1: the second's */
    char pad[64 - sizeof(_Atomic int)];
    int cpu[2];
    _Atomic int ready, failed, stop;
    double ns; /* the first thread's result */
} rtt_job;

static int pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    return pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

/* The first thread counts round trips: at its i-th turn, i have completed.
 * It stops at TRIPS or after 20 ms (a CPU taken by other work, valgrind's
 * one-thread-at-a-time scheduling), the second when it sees the stop. */
static void *side(rtt_job *j, int me) {
    if (pin(j->cpu[me])) atomic_store(&j->failed, 1);
    atomic_fetch_add(&j->ready, 1);
    while (atomic_load(&j->ready) < 2) {
    }
    if (atomic_load(&j->failed)) return NULL;
    double t0 = cli_now_ms();
    for (int i = 0;; i++) {
        while (atomic_load_explicit(&j->turn, memory_order_acquire) != me)
            if (atomic_load_explicit(&j->stop, memory_order_relaxed)) return NULL;
        if (me == 0 && (i == TRIPS || ((i & 15) == 15 && cli_now_ms() - t0 > 20.0))) {
            j->ns = (cli_now_ms() - t0) * 1e6 / i;
            atomic_store(&j->stop, 1);
            return NULL;
        }
        atomic_store_explicit(&j->turn, !me, memory_order_release);
    }
}

static void *first(void *arg) { return side(arg, 0); }
static void *second(void *arg) { return side(arg, 1); }

int cli_core_rtt(double *ns, int *cpu_a, int *cpu_b) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set)) return -1;
    int cpu[2], n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &set)) cpu[n++] = c;
    if (n < 2) return -1;
    double best = -1;
    for (int trial = 0; trial < 3; trial++) {
        rtt_job j = {.cpu = {cpu[0], cpu[1]}, .ns = -1};
        pthread_t t[2];
        if (pthread_create(&t[0], NULL, first, &j)) return -1;
        if (pthread_create(&t[1], NULL, second, &j)) { /* release the first, which waits for it */
            atomic_store(&j.failed, 1);
            atomic_fetch_add(&j.ready, 1);
            pthread_join(t[0], NULL);
            return -1;
        }
        pthread_join(t[0], NULL);
        pthread_join(t[1], NULL);
        if (j.ns > 0 && (best < 0 || j.ns < best)) best = j.ns;
    }
    if (best < 0) return -1; /* a CPU could not be pinned */
    *ns = best;
    *cpu_a = cpu[0];
    *cpu_b = cpu[1];
    return 0;
}
