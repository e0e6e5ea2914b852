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
 */
#include "device/cuda/cuda_int.h"
#include "device/device.h"

#include <pthread.h>
#include <stdio.h>

enum { FAKE_MAX = 4096 };
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { void *p; size_t n; } g_blocks[FAKE_MAX];
static int g_on;

static int f_alloc(size_t n, void **p) {
    int rc = kiln__device_cpu.alloc(n, p);
    if (rc) return rc;
    pthread_mutex_lock(&g_lock);
    int i = 0;
    while (i < FAKE_MAX && g_blocks[i].p) i++;
    if (i < FAKE_MAX) g_blocks[i].p = *p, g_blocks[i].n = n ? n : 64;
    pthread_mutex_unlock(&g_lock);
    if (i == FAKE_MAX) {
        kiln__device_cpu.free(*p);
        return kiln__err(KILN_ENOMEM, "fake CUDA device: more than %d blocks", FAKE_MAX);
    }
    return 0;
}

static void f_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < FAKE_MAX; i++)
        if (g_blocks[i].p == p) g_blocks[i].p = NULL;
    pthread_mutex_unlock(&g_lock);
    kiln__device_cpu.free(p);
}

int kiln__cuda_fake_owns(const void *p) {
    const uint8_t *q = p;
    int yes = 0;
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < FAKE_MAX && !yes; i++)
        yes = g_blocks[i].p && q >= (const uint8_t *)g_blocks[i].p && q < (const uint8_t *)g_blocks[i].p + g_blocks[i].n;
    pthread_mutex_unlock(&g_lock);
    return yes;
}

static int f_signature(char *buf, size_t size) {
    snprintf(buf, size, "cuda:fake GPU:sm_00:driver 0");
    return 0;
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
    g_fake.signature = f_signature;
    g_on = on;
}

const kiln__device *kiln__cuda_fake_device(void) { return g_on ? &g_fake : NULL; }
