/*
 * inplace_add — x += y: output 0 shares the buffer of input 0.
 *
 * The shape function declares the alias with kiln_shape_alias(); the
 * builder then gives the output no memory of its own (it inserts a copy only
 * when input 0 is still needed later, or is a network input or constant).
 * impl therefore sees out[0].data == in[0].data and must be written so that
 * this is safe (here: each element is read before it is written).  While
 * timing (version 2) the candidates run on separate buffers, which the
 * same loop handles.  Version 2 adds the autotune part: FP32|FP16.
 * cuda_impl runs the same add on the GPU (sample_cuda.c).
 */
#include <kiln/plugin.h>

#include "sample_cuda.h"
#include "samples.h"

static int inplace_shape(kiln_shape_ctx *c) {
    /* f16 too: version 2 offers FP16, and a loaded engine re-checks its
     * layers' shapes with the types the build chose */
    kiln_dtype t = c->in[0].dtype;
    if ((t != KILN_DTYPE_F32 && t != KILN_DTYPE_F16) || c->in[1].dtype != t)
        return kiln_set_error(KILN_ETYPE, "inplace_add: expected two f32 (or two f16) inputs, found %s and %s",
                              kiln_dtype_name(t), kiln_dtype_name(c->in[1].dtype));
    if (c->in[0].ndim != c->in[1].ndim)
        return kiln_set_error(KILN_ESHAPE, "inplace_add: inputs differ in rank");
    for (int i = 0; i < c->in[0].ndim; i++)
        if (c->in[0].dims[i] != c->in[1].dims[i])
            return kiln_set_error(KILN_ESHAPE, "inplace_add: inputs differ in dim %d", i);
    c->out[0] = c->in[0];
    c->out[0].data = NULL;
    return kiln_shape_alias(c, 0, 0);
}

static void inplace_log(const kiln_call *c) {
    kiln_samples_inplace_log *log = kiln_samples_inplace_log_get();
    int k = log->n++ % KILN_SAMPLES_INPLACE_LOG;
    log->in0[k] = c->in[0].data;
    log->out[k] = c->out[0].data;
}

static int inplace_cuda(const kiln_call *c) {
    inplace_log(c);
    return ks_cuda_add(c);
}

static int inplace_impl(const kiln_call *c) {
    int64_t n = kiln_tensor_numel(&c->out[0]);
    if (c->out[0].dtype == KILN_DTYPE_F16) {
        const uint16_t *a = c->in[0].data, *b = c->in[1].data; /* a == y when aliased */
        uint16_t *y = c->out[0].data;
        for (int64_t i = 0; i < n; i++) y[i] = kiln_f32_to_f16(kiln_f16_to_f32(a[i]) + kiln_f16_to_f32(b[i]));
    } else {
        const float *a = c->in[0].data, *b = c->in[1].data; /* a == y when the builder honoured the alias */
        float *y = c->out[0].data;
        for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
    }
    inplace_log(c);
    return 0;
}

static const kiln_quick_op inplace_add = {
    .ns = "sample", .name = "inplace_add", .version = 1,
    .min_inputs = 2, .max_inputs = 2, .num_outputs = 1,
    .shape = inplace_shape, .impl = inplace_impl, .cuda_impl = inplace_cuda,
    .doc = "x += y in place (output 0 aliases input 0)",
};
KILN_OP(inplace_add)

static const kiln_combo inplace_formats[] = {{"FP32|FP16, FP32|FP16, FP32|FP16", NULL, {0}}, {NULL, NULL, {0}}};
static const kiln_quick_op inplace_add_tuned = {
    .ns = "sample", .name = "inplace_add", .version = 2,
    .min_inputs = 2, .max_inputs = 2, .num_outputs = 1, .formats = inplace_formats,
    .shape = inplace_shape, .impl = inplace_impl, .cuda_impl = inplace_cuda,
    .doc = "x += y in place, FP32 or FP16 chosen by timing",
};
KILN_OP(inplace_add_tuned)
