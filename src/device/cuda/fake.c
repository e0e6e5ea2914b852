/*
 * fake.c — a stand-in CUDA device for tests on machines without a GPU.
 *
 * kiln__cuda_fake(1) makes kiln__device_get(KILN_DEVICE_CUDA) return a
 * device whose "device memory" is host memory recorded in a table, so the
 * placement logic (which layers run where, the copies between memory
 * spaces, one arena per space, weights uploaded once) can be tested in CI:
 * a test op's cuda_impl asserts with kiln__cuda_fake_owns that it got
 * device memory, its CPU impl that it got host memory.  Kernels of the real
 * backend (kiln__cuda_launch, cuBLASLt) are not faked.  Never on by itself.
 *
 * Like real device memory, the fake's is not readable by host code: each
 * block is its own mapping, kept PROT_NONE except while the fake device
 * itself works on it (its copy and memset, and the "kernels": test ops'
 * cuda_impl bodies run through kiln__cuda_fake_kernel).  Host code that
 * dereferences a device pointer — the bug a real GPU reports as a segfault
 * or, worse, silently on a machine with unified memory — faults in CI.
 * The fake serializes its work under one lock (tests only); while any of
 * it runs, all blocks are open.  It holds what an H100 holds (80 GiB) and
 * records the largest block asked for, so tests can bound device plans.
 */
#include "device/cuda/cuda_int.h"
#include "device/cuda/cudnn.h"
#include "device/device.h"

#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

enum { FAKE_MAX = 4096 };
#define FAKE_CAPACITY ((size_t)80 << 30) /* bytes: an H100's */
static pthread_mutex_t g_lock;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static struct { void *p; size_t n, map; } g_blocks[FAKE_MAX];
static int g_on, g_open; /* g_open: depth of fake work in progress (blocks readable) */
static size_t g_largest; /* the largest block asked for (kiln__cuda_fake_largest) */

/* Recursive: a kernel body may call the fake's copy. */
static void lock_init(void) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&g_lock, &a);
    pthread_mutexattr_destroy(&a);
}
static void lock(void) {
    pthread_once(&g_once, lock_init);
    pthread_mutex_lock(&g_lock);
}

static void protect_all(int prot) {
    for (int i = 0; i < FAKE_MAX; i++)
        if (g_blocks[i].p) mprotect(g_blocks[i].p, g_blocks[i].map, prot);
}

/* Open every block for the fake's own work (nested calls keep them open). */
static void enter(void) {
    lock();
    if (g_open++ == 0) protect_all(PROT_READ | PROT_WRITE);
}
static void leave(void) {
    if (--g_open == 0) protect_all(PROT_NONE);
    pthread_mutex_unlock(&g_lock);
}

static int f_alloc(size_t n, void **p) {
    lock();
    if (n > g_largest) g_largest = n;
    pthread_mutex_unlock(&g_lock);
    /* A GPU's memory, not the host's overcommit: a block no H100 holds is
     * refused as cuMemAlloc would (mapping it would "succeed", and fail
     * only when opened). */
    if (n > FAKE_CAPACITY)
        return kiln__err(KILN_ENOMEM, "fake CUDA device: out of memory: %zu bytes requested, more than its %zu", n,
                         FAKE_CAPACITY);
    size_t page = (size_t)sysconf(_SC_PAGESIZE), map = ((n ? n : 64) + page - 1) / page * page;
    void *m = mmap(NULL, map, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return kiln__err(KILN_ENOMEM, "fake CUDA device: out of memory: %zu bytes", n);
    lock();
    int i = 0;
    while (i < FAKE_MAX && g_blocks[i].p) i++;
    if (i < FAKE_MAX) {
        g_blocks[i].p = m, g_blocks[i].n = n ? n : 64, g_blocks[i].map = map;
        if (g_open) mprotect(m, map, PROT_READ | PROT_WRITE);
    }
    pthread_mutex_unlock(&g_lock);
    if (i == FAKE_MAX) {
        munmap(m, map);
        return kiln__err(KILN_ENOMEM, "fake CUDA device: more than %d blocks", FAKE_MAX);
    }
    *p = m;
    return 0;
}

static void f_free(void *p) {
    if (!p) return;
    lock();
    for (int i = 0; i < FAKE_MAX; i++)
        if (g_blocks[i].p == p) {
            munmap(p, g_blocks[i].map);
            g_blocks[i].p = NULL;
        }
    pthread_mutex_unlock(&g_lock);
}

/* Inside a graph capture (kiln__cuda_fake_graphs) work is recorded, not
 * run, as on a GPU: copies, memsets and kernels do nothing then (the fake's
 * captures never instantiate, so the context runs them again eagerly). */
static int g_capturing;

static int f_copy(void *dst, const void *src, size_t n, void *stream) {
    if (g_capturing) return 0;
    enter();
    int rc = kiln__device_cpu.copy(dst, src, n, stream);
    leave();
    return rc;
}

static int f_memset(void *dst, int byte, size_t n, void *stream) {
    if (g_capturing) return 0;
    enter();
    int rc = kiln__device_cpu.memset(dst, byte, n, stream);
    leave();
    return rc;
}

int kiln__cuda_fake_kernel(int (*fn)(const kiln_call *), const kiln_call *c) {
    if (g_capturing) return 0;
    enter();
    int rc = fn(c);
    leave();
    return rc;
}

int kiln__cuda_fake_owns(const void *p) {
    const uint8_t *q = p;
    int yes = 0;
    lock();
    for (int i = 0; i < FAKE_MAX && !yes; i++)
        yes = g_blocks[i].p && q >= (const uint8_t *)g_blocks[i].p && q < (const uint8_t *)g_blocks[i].p + g_blocks[i].n;
    pthread_mutex_unlock(&g_lock);
    return yes;
}

static int f_signature(char *buf, size_t size) {
    snprintf(buf, size, "cuda:fake GPU:sm_00:driver 0");
    return 0;
}

/* The cuDNN version the fake claims (kiln__cuda_fake_cudnn; 0: none), and
 * how often a real device would have loaded cuDNN to learn it. */
static int g_cudnn, g_cudnn_asked;
static int f_tactic_library(const char *ns, const char *op, int tactic, char *buf, size_t size) {
    (void)ns, (void)op; /* any op's tactics 10..17 stand for Conv's */
    if (!kiln__cudnn_tactic("ai.onnx", "Conv", tactic)) {
        if (size) buf[0] = 0;
        return 0;
    }
    __atomic_fetch_add(&g_cudnn_asked, 1, __ATOMIC_RELAXED);
    kiln__cudnn_signature(g_cudnn, buf, size);
    return 0;
}
void kiln__cuda_fake_cudnn(int version) { g_cudnn = version; }
int kiln__cuda_fake_cudnn_asked(int reset) {
    return reset ? __atomic_exchange_n(&g_cudnn_asked, 0, __ATOMIC_RELAXED)
                 : __atomic_load_n(&g_cudnn_asked, __ATOMIC_RELAXED);
}

static kiln__device g_fake;

static int f_is_device_ptr(const void *p) { return kiln__cuda_fake_owns(p); }

void kiln__cuda_fake(int on) {
    g_fake = kiln__device_cpu;
    g_fake.kind = KILN_DEVICE_CUDA;
    g_fake.name = "cuda (fake)";
    g_fake.alloc = f_alloc;
    g_fake.free = f_free;
    g_fake.is_device_ptr = f_is_device_ptr;
    g_fake.copy = f_copy;
    g_fake.memset = f_memset;
    g_fake.signature = f_signature;
    g_fake.tactic_library = f_tactic_library;
    g_on = on;
}

/* Graph capture (kiln__cuda_fake_graphs): a capture begins and ends, and
 * ending it fails, like a capture the driver refused to instantiate (the
 * fake cannot replay its work). */
static int f_graph_begin(void *stream) {
    (void)stream;
    g_capturing = 1;
    return 0;
}
static int f_graph_end(void *stream, void **exec) {
    (void)stream;
    *exec = NULL;
    g_capturing = 0;
    return kiln__err(KILN_EDEVICE, "fake CUDA device: a captured graph cannot be replayed");
}

void kiln__cuda_fake_graphs(int on) {
    g_fake.graph_begin = on ? f_graph_begin : kiln__device_cpu.graph_begin;
    g_fake.graph_end = on ? f_graph_end : kiln__device_cpu.graph_end;
}

int kiln__cuda_fake_capturing(void) { return g_capturing; }

const kiln__device *kiln__cuda_fake_device(void) { return g_on ? &g_fake : NULL; }

size_t kiln__cuda_fake_largest(int reset) {
    lock();
    size_t n = g_largest;
    if (reset) g_largest = 0;
    pthread_mutex_unlock(&g_lock);
    return n;
}
