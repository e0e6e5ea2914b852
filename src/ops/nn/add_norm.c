/*
 * add_norm.c — kiln::add_layernorm: LayerNormalization of a residual sum,
 *
 *   Y = LayerNormalization(A + B, Scale, Bias; axis, epsilon)
 *
 * A and B of the same dims (no broadcasting), Scale and the optional Bias
 * broadcasting over the normalized dims (dims >= axis) as in
 * LayerNormalization.  The builder makes it from Add -> LayerNormalization
 * on CUDA builds (builder/transformer.c); the GPU kernel (add_norm.cu)
 * keeps each row of the sum in registers: one read of A and B, one write
 * of Y.  The CPU implementation is the naive reference (double).
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_util.h"

#include <math.h>

static const kiln_attr_def addnorm_attrs[] = {
    {"axis", KILN_ATTR_INT, 0, "-1", 0, "first normalized axis"},
    {"epsilon", KILN_ATTR_FLOAT, 0, "1e-5", 0, "added to the variance"},
    {NULL, 0, 0, NULL, 0, NULL},
};

static int addnorm_shape(kiln_shape_ctx *c) {
    const kiln_desc *a = &c->in[0], *b = &c->in[1];
    if (!kiln__ops_is_float(a->dtype) || b->dtype != a->dtype || a->ndim != b->ndim)
        return kiln_set_error(KILN_ETYPE, "add_layernorm: A and B must be float tensors of one type and rank");
    for (int d = 0; d < a->ndim; d++)
        if (a->dims[d] != b->dims[d]) /* hash-consed */
            return kiln_set_error(KILN_ESHAPE, "add_layernorm: A and B differ in dim %d", d);
    int64_t axis = kiln_attrs_int(c->attrs, "axis");
    if (axis < -a->ndim || axis >= a->ndim)
        return kiln_set_error(KILN_EATTR, "add_layernorm: axis %lld out of range for rank %d", (long long)axis, a->ndim);
    c->out[0] = *a;
    c->out[0].data = NULL;
    c->out[0].nvalues = -1;
    return 0;
}

/* rows x inner of the call and the Scale/Bias lengths. */
static int addnorm_geo(const kiln_call *c, kiln_cu_addnorm *p) {
    const kiln_tensor *a = &c->in[0];
    int64_t axis = kiln_attrs_int(c->attrs, "axis");
    if (axis < 0) axis += a->ndim;
    p->rows = p->inner = 1;
    for (int d = 0; d < a->ndim; d++) *(d < axis ? &p->rows : &p->inner) *= a->dims[d];
    p->se = kiln_tensor_numel(&c->in[2]);
    p->be = c->nin > 3 && c->in[3].data ? kiln_tensor_numel(&c->in[3]) : 0;
    p->eps = (float)kiln_attrs_float(c->attrs, "epsilon");
    if (kiln_tensor_numel(&c->in[1]) != p->rows * p->inner || p->se < 1 || p->inner % p->se ||
        (p->be && p->inner % p->be))
        return kiln_set_error(KILN_ESHAPE, "add_layernorm: B must match A, Scale (%lld) and Bias (%lld) must divide "
                              "the normalized size %lld", (long long)p->se, (long long)p->be, (long long)p->inner);
    return 0;
}

static int addnorm_cpu(const kiln_call *c) {
    kiln_cu_addnorm p;
    int rc = addnorm_geo(c, &p);
    if (rc) return rc;
    const float *a = c->in[0].data, *b = c->in[1].data, *s = c->in[2].data, *bias = p.be ? c->in[3].data : NULL;
    float *y = c->out[0].data;
    for (int64_t r = 0; r < p.rows; r++) {
        const float *ar = a + r * p.inner, *br = b + r * p.inner;
        double m = 0, v = 0;
        for (int64_t i = 0; i < p.inner; i++) m += (double)ar[i] + br[i];
        m /= (double)p.inner;
        for (int64_t i = 0; i < p.inner; i++) {
            double d = (double)ar[i] + br[i] - m;
            v += d * d;
        }
        double rstd = 1.0 / sqrt(v / (double)p.inner + p.eps);
        for (int64_t i = 0; i < p.inner; i++)
            y[r * p.inner + i] =
                (float)(((double)ar[i] + br[i] - m) * rstd * s[i % p.se] + (bias ? bias[i % p.be] : 0.0));
    }
    return 0;
}
static int addnorm_impl(const kiln_call *c) { return kiln__ops_as_f32(c, addnorm_cpu); }

static const kiln_combo addnorm_formats[] = {{.types = "FP32"}, {0}};
static const kiln_combo addnorm_cuda_formats[] = {{.types = "FP32|FP16|BF16"}, {0}};
static const kiln_quick_op add_layernorm_op = {
    .ns = "kiln", .name = "add_layernorm", .version = 1, .min_inputs = 3, .max_inputs = 4, .num_outputs = 1,
    .attrs = addnorm_attrs, .shape = addnorm_shape, .impl = addnorm_impl, .formats = addnorm_formats,
    .doc = "LayerNormalization(A + B, Scale, Bias) (the builder's residual + norm fusion)",
    .cuda_impl = kiln__cu_add_layernorm, .cuda_formats = addnorm_cuda_formats,
};
KILN_OP(add_layernorm_op)
