/*
 * elemwise_add — the smallest useful quick op: z = x + y, same shapes.
 *
 * Version 1 (27 lines) has no `formats`: the builder keeps the types the
 * shape function produced (FP32 in, FP32 out), times nothing, and impl runs
 * only at inference.  Version 2 adds the autotune part (7 lines): every
 * position may be FP32 or FP16, tied (all FP32 or all FP16); with
 * KILN_BUILD_FP16 the builder times both candidates and keeps the faster.
 * The two lines marked "diagnostics" let kiln-samples count the calls.
 * Both versions also run on the GPU (cuda_impl: the kernels of
 * sample_cuda.c, compiled with NVRTC at first use); the GPU side offers the
 * same combinations and is timed with CUDA events.
 */
#include <kiln/plugin.h>
#include "sample_cuda.h"
#include "samples.h"

static int add_shape(kiln_shape_ctx *c) {
    int same = c->in[0].ndim == c->in[1].ndim && c->in[0].dtype == c->in[1].dtype;
    for (int i = 0; same && i < c->in[0].ndim; i++) same = c->in[0].dims[i] == c->in[1].dims[i];
    if (!same) return kiln_set_error(KILN_ESHAPE, "elemwise_add: expected inputs of equal dtype and dims");
    c->out[0] = c->in[0];
    return 0;
}

static int add_impl(const kiln_call *c) {
    int64_t n = kiln_tensor_numel(&c->out[0]);
    int f16 = c->out[0].dtype == KILN_DTYPE_F16;
    if (f16) {
        const uint16_t *a = c->in[0].data, *b = c->in[1].data;
        uint16_t *y = c->out[0].data;
        for (int64_t i = 0; i < n; i++) y[i] = kiln_f32_to_f16(kiln_f16_to_f32(a[i]) + kiln_f16_to_f32(b[i]));
    } else {
        const float *a = c->in[0].data, *b = c->in[1].data;
        float *y = c->out[0].data;
        for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
    }
    kiln_samples_counters *k = kiln_samples_counters_get(); /* diagnostics */
    *(f16 ? &k->add_f16 : &k->add_f32) += 1;                /* diagnostics */
    return 0;
}

static int add_cuda(const kiln_call *c) {
    kiln_samples_counters *k = kiln_samples_counters_get();             /* diagnostics */
    *(c->out[0].dtype == KILN_DTYPE_F16 ? &k->add_f16 : &k->add_f32) += 1; /* diagnostics */
    return ks_cuda_add(c);
}

static const kiln_quick_op elemwise_add = {
    .ns = "sample", .name = "elemwise_add", .version = 1,
    .min_inputs = 2, .max_inputs = 2, .num_outputs = 1,
    .shape = add_shape, .impl = add_impl, .cuda_impl = add_cuda, .doc = "z = x + y (FP32; impl runs only at inference)",
};
KILN_OP(elemwise_add)

static const kiln_combo add_formats[] = {{"FP32|FP16, FP32|FP16, FP32|FP16", NULL, {0}}, {NULL, NULL, {0}}};
static const kiln_quick_op elemwise_add_tuned = {
    .ns = "sample", .name = "elemwise_add", .version = 2,
    .min_inputs = 2, .max_inputs = 2, .num_outputs = 1, .formats = add_formats,
    .shape = add_shape, .impl = add_impl, .cuda_impl = add_cuda, .doc = "z = x + y, FP32 or FP16 chosen by timing",
};
KILN_OP(elemwise_add_tuned)
