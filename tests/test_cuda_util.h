/*
 * test_cuda_util.h — what the CUDA placement tests share (they run on the
 * host-memory stand-in device, kiln__cuda_fake): a CUDA build of a
 * network and the device a layer was placed on; and, for the tests that
 * need a real GPU, test_need_gpu.
 */
#ifndef KILN_TEST_CUDA_UTIL_H
#define KILN_TEST_CUDA_UTIL_H

#include "device/cuda/cuda_int.h"
#include "device/device.h"
#include "kiln/kiln.h"
#include "kiln_int.h"
#include "test.h"

/* The real GPU, or exit with the skip code 77 saying why (no device, or a
 * libkiln built without CUDA kernels). */
static inline const kiln__device *test_need_gpu(void) {
    const kiln__device *d = kiln__device_get(KILN_DEVICE_CUDA);
    if (!d) {
        printf("SKIP: %s\n", kiln_errmsg());
        exit(77);
    }
    if (!kiln__cuda_have_kernels()) {
        printf("SKIP: libkiln was built without CUDA kernels (nvcc not found at build)\n");
        exit(77);
    }
    return d;
}

/* kiln_build for KILN_DEVICE_CUDA with `flags`; NULL when it fails (the
 * message is kiln_errmsg()). */
static inline kiln_engine *build_cuda(const kiln_network *net, unsigned flags) {
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_device(cfg, KILN_DEVICE_CUDA);
    kiln_build_config_set_flags(cfg, flags);
    kiln_engine *e = NULL;
    int rc = kiln_build(net, cfg, &e, NULL);
    kiln_build_config_free(cfg);
    return rc ? NULL : e;
}

/* The kiln_device_kind layer `name` of e runs on (fails the test if e has
 * no such layer). */
static inline int layer_device(const kiln_engine *e, const char *name) {
    for (int32_t l = 0; l < e->nlayers; l++)
        if (!strcmp(e->layers[l].name, name)) return e->layers[l].device;
    TEST__FAIL("no layer '%s'", name);
}

/* Element i of b, which holds F32, F16 or BF16 values, as a float. */
static inline float test_from_dtype(const void *b, size_t i, kiln_dtype dt) {
    uint16_t h;
    float f;
    if (dt == KILN_DTYPE_F32) {
        memcpy(&f, (const uint8_t *)b + i * 4, 4);
        return f;
    }
    memcpy(&h, (const uint8_t *)b + i * 2, 2);
    return dt == KILN_DTYPE_F16 ? kiln_f16_to_f32(h) : kiln_bf16_to_f32(h);
}

#endif /* KILN_TEST_CUDA_UTIL_H */
