/*
 * device_cuda.c — the device interface over the CUDA driver API.
 *
 * Every function first makes the primary context current on the calling
 * thread (kiln__cuda_enter), so builders and contexts may be used from any
 * thread.  Copies use cuMemcpyAsync with unified addressing: the direction
 * comes from the pointers, and a host pointer may be pageable (then the
 * driver stages it) or page-locked (host_alloc: truly asynchronous).
 * Graphs are captured in relaxed mode so the builder's own allocations on
 * other threads do not invalidate a capture.
 */
#include "device/cuda/cuda_int.h"
#include "device/cuda/cudnn.h"
#include "device/device.h"

#include <stdio.h>

enum { CU_CAPTURE_RELAXED = 2, CU_STREAM_NONBLOCKING = 1, CU_EVENT_DEFAULT_ = 0 };

static const kiln__cu *cu(void) {
    const kiln__cu *c = NULL;
    return kiln__cuda_init(&c, NULL) ? NULL : c;
}

#define CU_OR_FAIL(c)                                                                              \
    const kiln__cu *c = cu();                                                                      \
    if (!c) return KILN_EDEVICE

static int d_alloc(size_t n, void **p) {
    CU_OR_FAIL(c);
    CUdeviceptr d = 0;
    CUresult r = c->MemAlloc(&d, n ? n : 256);
    if (r) {
        size_t fr = 0, tot = 0;
        c->MemGetInfo(&fr, &tot);
        int rc = kiln__cuda_check(r, "cuMemAlloc");
        return kiln__err_prefix(rc, "device memory: %zu bytes requested, %zu of %zu free", n, fr, tot);
    }
    *p = (void *)(uintptr_t)d;
    return 0;
}

static void d_free(void *p) {
    const kiln__cu *c = cu();
    if (c && p) c->MemFree((CUdeviceptr)(uintptr_t)p);
}

static int d_host_alloc(size_t n, void **p) {
    CU_OR_FAIL(c);
    CUresult r = c->MemAllocHost(p, n ? n : 64);
    if (r) return kiln__err_prefix(kiln__cuda_check(r, "cuMemAllocHost"), "%zu bytes of pinned host memory", n);
    return 0;
}

static void d_host_free(void *p) {
    const kiln__cu *c = cu();
    if (c && p) c->MemFreeHost(p);
}

static int d_is_device_ptr(const void *p) {
    const kiln__cu *c = cu();
    unsigned type = 0;
    int attr = 2; /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE; CU_MEMORYTYPE_DEVICE is 2 */
    void *data[1] = {&type};
    /* the plural query: a pointer CUDA does not know (pageable host memory)
     * gets type 0 and CUDA_SUCCESS, not an API error (which cuPointerGetAttribute
     * returns, and compute-sanitizer reports) */
    return c && p && !c->PointerGetAttributes(1, &attr, data, (CUdeviceptr)(uintptr_t)p) && type == 2;
}

static int d_copy(void *dst, const void *src, size_t n, void *stream) {
    if (!n || dst == src) return 0;
    CU_OR_FAIL(c);
    return kiln__cuda_check(c->MemcpyAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, n, stream),
                            "cuMemcpyAsync");
}

static int d_memset(void *dst, int byte, size_t n, void *stream) {
    if (!n) return 0;
    CU_OR_FAIL(c);
    return kiln__cuda_check(c->MemsetD8Async((CUdeviceptr)(uintptr_t)dst, (unsigned char)byte, n, stream),
                            "cuMemsetD8Async");
}

static int d_stream_create(void **s) {
    CU_OR_FAIL(c);
    return kiln__cuda_check(c->StreamCreate((CUstream *)s, CU_STREAM_NONBLOCKING), "cuStreamCreate");
}

static void d_stream_destroy(void *s) {
    const kiln__cu *c = cu();
    if (c && s) c->StreamDestroy(s);
}

static int d_stream_sync(void *s) {
    CU_OR_FAIL(c);
    return kiln__cuda_check(c->StreamSynchronize(s), "cuStreamSynchronize");
}

static int d_event_create(void **ev) {
    CU_OR_FAIL(c);
    return kiln__cuda_check(c->EventCreate((CUevent *)ev, CU_EVENT_DEFAULT_), "cuEventCreate");
}

static void d_event_destroy(void *ev) {
    const kiln__cu *c = cu();
    if (c && ev) c->EventDestroy(ev);
}

static int d_event_record(void *ev, void *stream) {
    CU_OR_FAIL(c);
    return kiln__cuda_check(c->EventRecord(ev, stream), "cuEventRecord");
}

static int d_event_elapsed(void *start, void *end, float *ms) {
    CU_OR_FAIL(c);
    int rc = kiln__cuda_check(c->EventSynchronize(end), "cuEventSynchronize");
    return rc ? rc : kiln__cuda_check(c->EventElapsedTime(ms, start, end), "cuEventElapsedTime");
}

static int d_graph_begin(void *stream) {
    CU_OR_FAIL(c);
    return kiln__cuda_check(c->StreamBeginCapture(stream, CU_CAPTURE_RELAXED), "cuStreamBeginCapture");
}

static int d_graph_end(void *stream, void **exec) {
    CU_OR_FAIL(c);
    CUgraph g = NULL;
    *exec = NULL;
    int rc = kiln__cuda_check(c->StreamEndCapture(stream, &g), "cuStreamEndCapture");
    if (rc) return rc;
    rc = kiln__cuda_check(c->GraphInstantiateWithFlags((CUgraphExec *)exec, g, 0), "cuGraphInstantiateWithFlags");
    c->GraphDestroy(g);
    return rc;
}

static int d_graph_launch(void *exec, void *stream) {
    CU_OR_FAIL(c);
    return kiln__cuda_check(c->GraphLaunch(exec, stream), "cuGraphLaunch");
}

static void d_graph_destroy(void *exec) {
    const kiln__cu *c = cu();
    if (c && exec) c->GraphExecDestroy(exec);
}

/* "cuda:NVIDIA H100 80GB HBM3:sm_90:driver 13000": tactics and engines are
 * only valid on the same GPU model and driver. */
static int d_signature(char *buf, size_t size) {
    const kiln__cuda_info *in = NULL;
    int rc = kiln__cuda_init(NULL, &in);
    if (rc) return rc;
    snprintf(buf, size, "cuda:%s:sm_%d%d:driver %d", in->name, in->sm_major, in->sm_minor, in->driver_version);
    return 0;
}

/* Loads cuDNN (once per process) to learn its version, for its tactics only. */
static int d_tactic_library(const char *ns, const char *op, int tactic, char *buf, size_t size) {
    if (kiln__cudnn_tactic(ns, op, tactic))
        kiln__cudnn_signature(kiln__cudnn_version(), buf, size);
    else if (size)
        buf[0] = 0;
    return 0;
}

static const kiln__device g_cuda = {
    .kind = KILN_DEVICE_CUDA,
    .name = "cuda",
    .alloc = d_alloc,
    .free = d_free,
    .host_alloc = d_host_alloc,
    .host_free = d_host_free,
    .is_device_ptr = d_is_device_ptr,
    .copy = d_copy,
    .memset = d_memset,
    .stream_create = d_stream_create,
    .stream_destroy = d_stream_destroy,
    .stream_sync = d_stream_sync,
    .event_create = d_event_create,
    .event_destroy = d_event_destroy,
    .event_record = d_event_record,
    .event_elapsed = d_event_elapsed,
    .graph_begin = d_graph_begin,
    .graph_end = d_graph_end,
    .graph_launch = d_graph_launch,
    .graph_destroy = d_graph_destroy,
    .signature = d_signature,
    .tactic_library = d_tactic_library,
};

const kiln__device *kiln__device_cuda(void) {
    const kiln__device *fake = kiln__cuda_fake_device();
    if (fake) return fake;
    return kiln__cuda_enter() ? NULL : &g_cuda;
}
