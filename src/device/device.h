/*
 * device.h — the device interface: what the builder and the runtime need from
 * a device, and nothing more.
 *
 * Two implementations: cpu (device/cpu/device_cpu.c: malloc, memcpy, host
 * clock; streams and graphs do not exist there) and cuda (device/cuda/:
 * the driver API loaded with dlopen at first use, so libkiln has no
 * link-time CUDA dependency).  Kernels never call a device directly: they
 * receive pointers and a stream in their kiln_call; the builder and the
 * context use this interface for memory, copies, timing and graphs.
 *
 * Pointers are plain `void *` in every memory space (CUDA device pointers
 * are unified virtual addresses), so `copy` needs no direction: the driver
 * finds it from the pointers.  A stream is an opaque `void *` (a CUstream;
 * NULL on the CPU and the CUDA legacy stream).
 *
 * Every function returns 0 or a KILN_E* code with a message naming the
 * call (CUDA: the driver function and cuGetErrorString's text).
 */
#ifndef KILN_DEVICE_H
#define KILN_DEVICE_H

#include "kiln_int.h"

#include <stddef.h>

struct kiln__device {
    kiln_device_kind kind;
    const char *name;                       /* "cpu", "cuda" */
    /* Device memory (64-byte aligned at least).  Out of memory is
     * KILN_ENOMEM naming the bytes. */
    int (*alloc)(size_t n, void **p);
    void (*free)(void *p);
    /* Page-locked host memory for staging (CPU: ordinary memory). */
    int (*host_alloc)(size_t n, void **p);
    void (*host_free)(void *p);
    /* 1 if p is device memory of this device (a copy there stays on the
     * device); NULL on the CPU. */
    int (*is_device_ptr)(const void *p);
    /* Copy n bytes in any direction, ordered on `stream`. */
    int (*copy)(void *dst, const void *src, size_t n, void *stream);
    int (*memset)(void *dst, int byte, size_t n, void *stream);
    int (*stream_create)(void **s);
    void (*stream_destroy)(void *s);
    int (*stream_sync)(void *s);
    /* Events: record on a stream; elapsed waits for `end`. */
    int (*event_create)(void **ev);
    void (*event_destroy)(void *ev);
    int (*event_record)(void *ev, void *stream);
    int (*event_elapsed)(void *start, void *end, float *ms);
    /* Graph capture of the work enqueued on `stream` between begin and
     * end; end instantiates it into *exec (KILN_EUNSUPPORTED on the CPU). */
    int (*graph_begin)(void *stream);
    int (*graph_end)(void *stream, void **exec);
    int (*graph_launch)(void *exec, void *stream);
    void (*graph_destroy)(void *exec);
    /* What the engine file and the timing cache record as "built for". */
    int (*signature)(char *buf, size_t size);
    /* What one tactic's timing depends on besides the device: the version
     * of the optional library that tactic runs (CUDA: "cudnn 9.19.0", or
     * "cudnn none" where cuDNN is missing, for Conv's cuDNN tactics), or ""
     * when it runs none.  The library is loaded the first time one of its
     * tactics is asked about, and never for a network that has none.  Part
     * of that tactic's timing cache key only, not of engines (an engine runs
     * where the library is missing: such a layer falls back).  NULL:
     * nothing. */
    int (*tactic_library)(const char *ns, const char *op, int tactic, char *buf, size_t size);
};
typedef struct kiln__device kiln__device;

/* The device of that kind, or NULL with KILN_EDEVICE set saying why (no
 * driver, no GPU, ...).  The CPU device always exists. */
const kiln__device *kiln__device_get(kiln_device_kind kind);

/* The two implementations (kiln__device_get picks). */
extern const kiln__device kiln__device_cpu;
/* NULL + message when CUDA cannot be used on this machine. */
const kiln__device *kiln__device_cuda(void);

#endif /* KILN_DEVICE_H */
