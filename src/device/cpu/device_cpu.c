/*
 * device_cpu.c — the device interface on the host: memory is ordinary
 * aligned memory, copies are memcpy, work is synchronous (a "stream" is
 * NULL), events read the monotonic clock.  Graphs do not exist.
 */
#include "device/device.h"

#include <stdio.h>

static int cpu_alloc(size_t n, void **p) {
    *p = kiln__aligned_alloc(n ? n : 64);
    if (!*p) return kiln__err(KILN_ENOMEM, "out of memory: %zu bytes of host memory", n);
    return 0;
}

static void cpu_free(void *p) { kiln__aligned_free(p); }

static int cpu_copy(void *dst, const void *src, size_t n, void *stream) {
    (void)stream;
    if (n && dst != src) memmove(dst, src, n);
    return 0;
}

static int cpu_memset(void *dst, int byte, size_t n, void *stream) {
    (void)stream;
    memset(dst, byte, n);
    return 0;
}

static int cpu_stream_create(void **s) {
    *s = NULL;
    return 0;
}

static void cpu_stream_destroy(void *s) { (void)s; }
static int cpu_stream_sync(void *s) {
    (void)s;
    return 0;
}

/* An event is the time it was recorded, in a heap double. */
static int cpu_event_create(void **ev) {
    *ev = kiln__calloc(1, sizeof(double));
    return *ev ? 0 : kiln__err(KILN_ENOMEM, "out of memory creating an event");
}

static void cpu_event_destroy(void *ev) { kiln__free(ev); }

static int cpu_event_record(void *ev, void *stream) {
    (void)stream;
    *(double *)ev = kiln__now_ms();
    return 0;
}

static int cpu_event_elapsed(void *start, void *end, float *ms) {
    *ms = (float)(*(double *)end - *(double *)start);
    return 0;
}

static int cpu_graph_begin(void *stream) {
    (void)stream;
    return kiln__err(KILN_EUNSUPPORTED, "graph capture: the CPU device has no graphs");
}

static int cpu_graph_end(void *stream, void **exec) {
    (void)stream;
    *exec = NULL;
    return kiln__err(KILN_EUNSUPPORTED, "graph capture: the CPU device has no graphs");
}

static int cpu_graph_launch(void *exec, void *stream) {
    (void)exec;
    (void)stream;
    return kiln__err(KILN_EUNSUPPORTED, "graph launch: the CPU device has no graphs");
}

static void cpu_graph_destroy(void *exec) { (void)exec; }

static int cpu_signature(char *buf, size_t size) {
    snprintf(buf, size, "%s", kiln_cpu_signature());
    return 0;
}

const kiln__device kiln__device_cpu = {
    .kind = KILN_DEVICE_CPU,
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .copy = cpu_copy,
    .memset = cpu_memset,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .stream_sync = cpu_stream_sync,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .event_elapsed = cpu_event_elapsed,
    .graph_begin = cpu_graph_begin,
    .graph_end = cpu_graph_end,
    .graph_launch = cpu_graph_launch,
    .graph_destroy = cpu_graph_destroy,
    .signature = cpu_signature,
};

const kiln__device *kiln__device_get(kiln_device_kind kind) {
    if (kind == KILN_DEVICE_CPU) return &kiln__device_cpu;
    if (kind == KILN_DEVICE_CUDA) return kiln__device_cuda();
    kiln__err(KILN_EDEVICE, "unknown device kind %d", (int)kind);
    return NULL;
}
