/*
 * norm_cuda.c — CUDA launchers of norm.c's BatchNormalization (inference)
 * and the plane normalizations (Layer-, Instance-, GroupNormalization),
 * kernels batchnorm_<T> and norm_<T> of norm.cu.  The parameter layout
 * (kiln_cu_norm) mirrors norm.c's norm_task, so both devices share one
 * meaning of "plane", "inner" and the affine indexing.
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

static int float_suffix(const char *op, const kiln_tensor *x, const char **suf) {
    if (x->dtype != KILN_DTYPE_F32 && x->dtype != KILN_DTYPE_F16 && x->dtype != KILN_DTYPE_BF16)
        return kiln__cu_type_err(op, x->dtype);
    if (!kiln__cu_contig(x))
        return kiln_set_error(KILN_EUNSUPPORTED, "%s: CUDA kernel needs contiguous tensors", op);
    *suf = kiln__cu_suffix(x->dtype);
    return 0;
}

static float attr_eps(const kiln_call *c) {
    const kiln_attr_value *v = kiln_attrs_get(c->attrs, "epsilon");
    return v && v->present ? (float)v->f : 1e-5f;
}

int kiln__cu_batchnorm(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    const char *suf = NULL;
    int rc = float_suffix("BatchNormalization", x, &suf);
    if (rc) return rc;
    const kiln_attr_value *tm = kiln_attrs_get(c->attrs, "training_mode");
    if (tm && tm->present && tm->i)
        return kiln_set_error(KILN_EUNSUPPORTED, "BatchNormalization: training_mode=1 has no CUDA kernel");
    for (int i = 1; i < 5; i++)
        if (c->in[i].dtype != x->dtype)
            return kiln_set_error(KILN_EUNSUPPORTED, "BatchNormalization: CUDA kernel needs input %d in %s, found %s",
                                  i, kiln_dtype_name(x->dtype), kiln_dtype_name(c->in[i].dtype));
    int64_t n = kiln_tensor_numel(x), C = x->ndim > 1 ? x->dims[1] : 1, S = 1;
    for (int i = 2; i < x->ndim; i++) S *= x->dims[i];
    if (kiln_tensor_numel(&c->in[1]) != C)
        return kiln_set_error(KILN_ESHAPE, "BatchNormalization: scale has %lld elements, X has %lld channels",
                              (long long)kiln_tensor_numel(&c->in[1]), (long long)C);
    float eps = attr_eps(c), a = 0, b = 0;
    int act = KILN_CU_ACT_NONE;
    void *args[] = {&n, &C, &S, (void *)&x->data, (void *)&c->in[1].data, (void *)&c->in[2].data,
                    (void *)&c->in[3].data, (void *)&c->in[4].data, &eps, &c->out[0].data, &act, &a, &b};
    return kiln__cu_launch_n(c, "batchnorm", suf, n, args);
}

static int norm_launch(const kiln_call *c, const char *suf, kiln_cu_norm *p, const void *scale, const void *bias,
                       float *mean, float *rstd) {
    p->eps = attr_eps(c);
    p->act = KILN_CU_ACT_NONE;
    void *args[] = {p, (void *)&c->in[0].data, (void *)&scale, (void *)&bias, &c->out[0].data, &mean, &rstd};
    return kiln__cu_launch_blocks(c, "norm", suf, p->planes, kiln__cu_block_for(p->inner), args);
}

int kiln__cu_layernorm(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    const char *suf = NULL;
    int rc = float_suffix("LayerNormalization", x, &suf);
    if (rc) return rc;
    int64_t axis = kiln__cu_attr_int(c, "axis", -1);
    if (axis < 0) axis += x->ndim;
    kiln_cu_norm p = {.planes = 1, .inner = 1, .affine = 0, .div = 1, .mod = 1, .sub = 1, .cpg = 1, .groups = 1};
    for (int i = 0; i < x->ndim; i++) {
        if (i < axis) p.planes *= x->dims[i];
        else p.inner *= x->dims[i];
    }
    int has_b = kiln__cu_has_in(c, 2);
    p.se = kiln_tensor_numel(&c->in[1]);
    p.be = has_b ? kiln_tensor_numel(&c->in[2]) : 1;
    if (p.se < 1 || p.be < 1 || p.inner % p.se || p.inner % p.be)
        return kiln_set_error(KILN_ESHAPE, "LayerNormalization: Scale (%lld elements) and B (%lld) do not "
                              "broadcast to the normalized size %lld", (long long)p.se, (long long)p.be,
                              (long long)p.inner);
    float *st[2] = {NULL, NULL};
    for (int i = 1; i < 3 && i < c->nout; i++) {
        if (!c->out[i].data) continue;
        if (c->out[i].dtype != KILN_DTYPE_F32) return kiln__cu_type_err("LayerNormalization statistics", c->out[i].dtype);
        st[i - 1] = c->out[i].data;
    }
    if (p.planes == 0 || p.inner == 0) return 0;
    return norm_launch(c, suf, &p, c->in[1].data, has_b ? c->in[2].data : NULL, st[0], st[1]);
}

int kiln__cu_instancenorm(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    const char *suf = NULL;
    int rc = float_suffix("InstanceNormalization", x, &suf);
    if (rc) return rc;
    if (x->ndim < 2) return kiln_set_error(KILN_ESHAPE, "InstanceNormalization: X must have rank >= 2");
    int64_t C = x->dims[1], sp = 1;
    for (int i = 2; i < x->ndim; i++) sp *= x->dims[i];
    if (kiln_tensor_numel(&c->in[1]) != C || kiln_tensor_numel(&c->in[2]) != C)
        return kiln_set_error(KILN_ESHAPE, "InstanceNormalization: scale and B must have %lld elements",
                              (long long)C);
    kiln_cu_norm p = {.planes = x->dims[0] * C, .inner = sp, .affine = 1, .se = 1, .be = 1, .div = 1, .mod = C,
                      .sub = 1, .cpg = 1, .groups = 1};
    if (p.planes == 0 || p.inner == 0) return 0;
    return norm_launch(c, suf, &p, c->in[1].data, c->in[2].data, NULL, NULL);
}

static int groupnorm(const kiln_call *c, int per_channel) {
    const kiln_tensor *x = &c->in[0];
    const char *suf = NULL;
    int rc = float_suffix("GroupNormalization", x, &suf);
    if (rc) return rc;
    int64_t G = kiln__cu_attr_int(c, "num_groups", 0);
    if (x->ndim < 2) return kiln_set_error(KILN_ESHAPE, "GroupNormalization: X must have rank >= 2");
    int64_t N = x->dims[0], C = x->dims[1], sp = 1;
    for (int i = 2; i < x->ndim; i++) sp *= x->dims[i];
    if (G < 1 || C % G)
        return kiln_set_error(KILN_EATTR, "GroupNormalization: %lld channels not divisible into num_groups=%lld",
                              (long long)C, (long long)G);
    int64_t want = per_channel ? C : G;
    if (kiln_tensor_numel(&c->in[1]) != want || kiln_tensor_numel(&c->in[2]) != want)
        return kiln_set_error(KILN_ESHAPE, "GroupNormalization: scale and bias must have %lld elements",
                              (long long)want);
    kiln_cu_norm p = {.planes = N * G, .inner = C / G * sp, .affine = per_channel ? 2 : 1, .se = 1, .be = 1,
                      .div = 1, .mod = G, .sub = sp, .cpg = C / G, .groups = G};
    if (p.planes == 0 || p.inner == 0) return 0;
    return norm_launch(c, suf, &p, c->in[1].data, c->in[2].data, NULL, NULL);
}

int kiln__cu_groupnorm18(const kiln_call *c) { return groupnorm(c, 0); }
int kiln__cu_groupnorm21(const kiln_call *c) { return groupnorm(c, 1); }
