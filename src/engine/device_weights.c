/*
 * device_weights.c — what a CUDA engine needs from the GPU before any
 * context runs: the right GPU, and its weights in device memory.
 *
 * The weights blob is uploaded once per engine, on the first context, at
 * the same offsets as on the host, so a constant in device memory is
 * dweights + const_off; every context of the engine shares it.  A failed
 * upload is remembered (the next context gets the same error without
 * retrying a doomed allocation).
 */
#include "device/device.h"

#include <pthread.h>
#include <stdio.h>

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* "cuda:<name>:sm_XY:driver N" without the driver: engines move between
 * driver versions, not between GPU models. */
static size_t gpu_part(const char *sig) {
    const char *d = strstr(sig, ":driver");
    return d ? (size_t)(d - sig) : strlen(sig);
}

int kiln__engine_device_check(const kiln_engine *e) {
    if (e->device != KILN_DEVICE_CUDA) return 0;
    const char *built = e->cuda_sig ? e->cuda_sig : "?";
    const kiln__device *d = kiln__device_get(KILN_DEVICE_CUDA);
    if (!d) return kiln__err_prefix(KILN_EDEVICE, "engine built for CUDA (%s)", built);
    char here[400];
    int rc = d->signature(here, sizeof here);
    if (rc) return rc;
    size_t n = gpu_part(built);
    if (n != gpu_part(here) || strncmp(built, here, n) != 0)
        return kiln__err(KILN_EDEVICE, "engine built for GPU \"%.*s\"; this GPU is \"%.*s\": rebuild the engine here",
                         (int)n, built, (int)gpu_part(here), here);
    return 0;
}

int kiln__engine_device_weights(kiln_engine *e, uint8_t **dweights) {
    pthread_mutex_lock(&g_lock);
    int rc = e->dweights_state < 0 ? e->dweights_state : 0;
    if (rc) {
        kiln__err(rc, "uploading the engine's %llu bytes of weights to the GPU failed before",
                  (unsigned long long)e->weights_size);
    } else if (e->dweights_state == 0) {
        const kiln__device *d = kiln__device_get(KILN_DEVICE_CUDA);
        void *p = NULL;
        rc = d ? d->alloc((size_t)e->weights_size, &p) : KILN_EDEVICE;
        if (!rc) rc = d->copy(p, e->weights, (size_t)e->weights_size, NULL);
        if (!rc) rc = d->stream_sync(NULL);
        if (rc) {
            kiln__err_prefix(rc, "uploading the engine's %llu bytes of weights", (unsigned long long)e->weights_size);
            if (p) d->free(p);
            e->dweights_state = rc;
        } else {
            e->dweights = p;
            e->dweights_state = 1;
        }
    }
    *dweights = e->dweights;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

void kiln__engine_device_free(kiln_engine *e) {
    if (!e->dweights) return;
    const kiln__device *d = kiln__device_get(KILN_DEVICE_CUDA);
    if (d) d->free(e->dweights);
    e->dweights = NULL;
    e->dweights_state = 0;
}
