/*
 * add_norm.c — kiln::add_layernorm: LayerNormalization of a residual sum,
 *
 *   Y = LayerNormalization(A + B, Scale, Bias; axis, epsilon)
 *
 * A and B of the same dims (no broadcasting), Scale and the optional Bias
 * broadcasting over the normalized dims (dims >= axis) as in
 * LayerNormalization.  The builder makes it from Add -> LayerNormalization
 * (builder/transformer.c); the GPU kernel (add_norm.cu)
 * keeps each row of the sum in registers: one read of A and B, one write
 * of Y.  The CPU kernel (addnorm_rows) keeps the sum in Y and normalizes
 * it there: one read of A and B, one write and two re-reads of a row in L1.
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

/* Rows split over the threads; per row x = a + b goes to y, then the mean,
 * the variance about it (two passes: no cancellation) and the normalized
 * row, in 16 float lanes the compiler keeps in vector registers (the sums
 * of the lanes in double). */
typedef struct addnorm_task {
    kiln_cu_addnorm p;
    const float *a, *b, *s, *bias;
    float *y;
} addnorm_task;

enum { AN_LANES = 16 };

static double lanes_sum(const float *acc) {
    double t = 0;
    for (int j = 0; j < AN_LANES; j++) t += acc[j];
    return t;
}

static void addnorm_rows(void *ud, int64_t r0, int64_t r1) {
    const addnorm_task *t = ud;
    const int64_t n = t->p.inner, se = t->p.se, be = t->p.be;
    for (int64_t r = r0; r < r1; r++) {
        const float *ar = t->a + r * n, *br = t->b + r * n;
        float *yr = t->y + r * n, acc[AN_LANES] = {0};
        int64_t i = 0;
        for (; i + AN_LANES <= n; i += AN_LANES)
            for (int j = 0; j < AN_LANES; j++) acc[j] += yr[i + j] = ar[i + j] + br[i + j];
        double sum = 0;
        for (; i < n; i++) sum += yr[i] = ar[i] + br[i];
        const float m = (float)((sum + lanes_sum(acc)) / (double)n);
        float sq[AN_LANES] = {0};
        for (i = 0; i + AN_LANES <= n; i += AN_LANES)
            for (int j = 0; j < AN_LANES; j++) sq[j] += (yr[i + j] - m) * (yr[i + j] - m);
        double var = 0;
        for (; i < n; i++) var += (double)(yr[i] - m) * (yr[i] - m);
        const float rstd = (float)(1.0 / sqrt((var + lanes_sum(sq)) / (double)n + t->p.eps));
        if (se == n && (be == n || !t->bias))
            for (i = 0; i < n; i++) yr[i] = (yr[i] - m) * rstd * t->s[i] + (t->bias ? t->bias[i] : 0.0f);
        else
            for (i = 0; i < n; i++) yr[i] = (yr[i] - m) * rstd * t->s[i % se] + (t->bias ? t->bias[i % be] : 0.0f);
    }
}

static int addnorm_cpu(const kiln_call *c) {
    addnorm_task t;
    int rc = addnorm_geo(c, &t.p);
    if (rc) return rc;
    t.a = c->in[0].data;
    t.b = c->in[1].data;
    t.s = c->in[2].data;
    t.bias = t.p.be ? c->in[3].data : NULL;
    t.y = c->out[0].data;
    int64_t grain = 16384 / (t.p.inner > 0 ? t.p.inner : 1); /* rows worth waking a thread for */
    kiln_exec_parallel_for(c->exec, t.p.rows, grain > 1 ? grain : 1, addnorm_rows, &t);
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
