/*
 * copy_cuda.c — CUDA launchers of the data-movement ops, all on copy.cu's
 * kernels (the dtype only matters by its size):
 *   copy_<unit>, transpose_<size> (kiln__cu_copy, planned by copy_plan.c):
 *                 Transpose, Concat, Split, Slice, Expand, Tile, and the
 *                 view ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity:
 *                 a plain copy unless the output aliases the input);
 *   pad_<size>:   Pad (constant, reflect, edge, wrap; negative pads crop);
 *   put_i64:      Shape and Size (values the host knows, into output 0);
 *   gather_<size>_<i32|i64>: Gather (indices out of range are reported
 *                 through the context's fault record: kiln__cu_check).
 * Output dims are final when a launcher runs, so Expand/Tile/Reshape need
 * no look at their shape inputs; Slice and Pad read their small integer
 * inputs on the host (cuda_host_inputs).
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"
#include "ops/tensor/copy_plan.h"

#include <stdio.h>
#include <string.h>

/* The strided copy behind every op here: planned on the host (unit width,
 * plain or tiled transpose: copy_plan.h), then one launch. */
int kiln__cu_copy(const kiln_call *c, kiln_dtype t, int nd, const int64_t *dims, const void *src,
                  const int64_t *src_st, void *dst, const int64_t *dst_st) {
    if (!kiln__cu_size_suffix(t)) return kiln__cu_type_err("copy", t);
    if (nd > KILN_CU_MAX_DIMS)
        return kiln_set_error(KILN_EUNSUPPORTED, "copy: rank %d exceeds the CUDA copy's %d dims", nd, KILN_CU_MAX_DIMS);
    kiln__cu_copy_plan p;
    kiln__cu_copy_plan_make(nd, dims, kiln_dtype_size(t), (uintptr_t)src, src_st, (uintptr_t)dst, dst_st, &p);
    char sz[4];
    snprintf(sz, sizeof sz, "%d", p.unit);
    if (p.transpose) {
        void *args[] = {&p.tr, &src, &dst};
        return kiln__cu_launch_blocks(c, "transpose", sz, p.tr.nblocks < 65536 ? p.tr.nblocks : 65536, 256, args);
    }
    void *args[] = {&p.it, &src, &dst};
    return kiln__cu_launch_n(c, "copy", sz, p.it.numel, args);
}

static int need_contig(const char *op, const kiln_tensor *t) {
    return kiln__cu_contig(t) ? 0 : kiln_set_error(KILN_EUNSUPPORTED, "%s: CUDA kernels need contiguous tensors", op);
}

int kiln__cu_copy_input(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    int64_t n = kiln_tensor_numel(y), one = 1;
    if (kiln_tensor_numel(x) != n) /* a Reshape shape known only at run time */
        return kiln_set_error(KILN_ESHAPE, "copy of %lld elements into an output of %lld", (long long)kiln_tensor_numel(x),
                              (long long)n);
    if (y->data == x->data || !x->data) return 0;
    return kiln__cu_copy(c, y->dtype, 1, &n, x->data, &one, y->data, &one);
}

int kiln__cu_transpose(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    int r = x->ndim;
    const int64_t *perm = NULL;
    int64_t np = kiln__cu_attr_ints(c, "perm", &perm), st[KILN_MAX_DIMS], yst[KILN_MAX_DIMS];
    for (int i = 0; i < r; i++) {
        int p = np == r ? (int)(perm[i] < 0 ? perm[i] + r : perm[i]) : r - 1 - i;
        if (p < 0 || p >= r) return kiln_set_error(KILN_EATTR, "Transpose: perm[%d] out of range", i);
        st[i] = x->strides[p];
    }
    kiln__cu_contig_strides(r, y->dims, yst);
    return kiln__cu_copy(c, y->dtype, r, y->dims, x->data, st, y->data, yst);
}

/* Concat: each input copied into its slab of the output along axis. */
int kiln__cu_concat(const kiln_call *c) {
    kiln_tensor *y = &c->out[0];
    int r = y->ndim, ax = (int)kiln__cu_attr_int(c, "axis", 0);
    if (ax < 0) ax += r;
    size_t es = kiln_dtype_size(y->dtype);
    int64_t pos = 0, yst[KILN_MAX_DIMS];
    kiln__cu_contig_strides(r, y->dims, yst);
    for (int k = 0; k < c->nin; k++) {
        const kiln_tensor *x = &c->in[k];
        if (!x->data || x->ndim != r) continue;
        char *dst = (char *)y->data + (size_t)(pos * yst[ax]) * es;
        int rc = kiln__cu_copy(c, y->dtype, r, x->dims, x->data, x->strides, dst, yst);
        if (rc) return rc;
        pos += x->dims[ax];
    }
    return 0;
}

/* Split: each output a slab of the input along axis. */
int kiln__cu_split(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    int r = x->ndim, ax = (int)kiln__cu_attr_int(c, "axis", 0);
    if (ax < 0) ax += r;
    size_t es = kiln_dtype_size(x->dtype);
    int64_t pos = 0;
    for (int k = 0; k < c->nout; k++) {
        kiln_tensor *y = &c->out[k];
        if (!y->data || y->ndim != r) continue;
        if (pos + y->dims[ax] > x->dims[ax])
            return kiln_set_error(KILN_ESHAPE, "Split: parts exceed the input along axis %d", ax);
        const char *src = (const char *)x->data + (size_t)(pos * x->strides[ax]) * es;
        int64_t yst[KILN_MAX_DIMS];
        kiln__cu_contig_strides(r, y->dims, yst);
        int rc = kiln__cu_copy(c, y->dtype, r, y->dims, src, x->strides, y->data, yst);
        if (rc) return rc;
        pos += y->dims[ax];
    }
    return 0;
}

/* Slice: starts/axes/steps from attributes (opset 1) or host inputs; the
 * output dims are final, so only each axis' first index and step matter. */
int kiln__cu_slice(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    int r = x->ndim;
    int64_t start[KILN_MAX_DIMS], step[KILN_MAX_DIMS];
    for (int i = 0; i < r; i++) start[i] = 0, step[i] = 1;
    int64_t n, na = -1;
    const int64_t *sv = NULL, *av = NULL;
    int64_t s_buf[KILN_MAX_DIMS], a_buf[KILN_MAX_DIMS], t_buf[KILN_MAX_DIMS];
    if (c->nin == 1) { /* Slice-1: attributes */
        n = kiln__cu_attr_ints(c, "starts", &sv);
        na = kiln__cu_attr_ints(c, "axes", &av);
        if (n > KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "Slice: %lld starts for rank %d", (long long)n, r);
        for (int i = 0; i < n; i++) t_buf[i] = 1;
    } else {
        for (int i = 1; i < c->nin && i < 5; i++)
            if (kiln__cu_has_in(c, i) && c->in[i].device != KILN_DEVICE_CPU)
                return kiln_set_error(KILN_EINTERNAL, "Slice: input %d is not in host memory", i);
        n = kiln_tensor_numel(&c->in[1]);
        if (n > KILN_MAX_DIMS) return kiln_set_error(KILN_ESHAPE, "Slice: %lld starts for rank %d", (long long)n, r);
        for (int64_t i = 0; i < n; i++) {
            s_buf[i] = kiln__cu_host_i64(&c->in[1], i);
            a_buf[i] = kiln__cu_has_in(c, 3) ? kiln__cu_host_i64(&c->in[3], i) : i;
            t_buf[i] = kiln__cu_has_in(c, 4) ? kiln__cu_host_i64(&c->in[4], i) : 1;
        }
        sv = s_buf;
        av = a_buf;
        na = n;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t a = na >= 0 && av ? av[i] : i;
        if (a < 0) a += r;
        if (a < 0 || a >= r) return kiln_set_error(KILN_EATTR, "Slice: axis %lld out of range", (long long)a);
        int64_t d = x->dims[a], s = sv[i], t = t_buf[i];
        if (t == 0) return kiln_set_error(KILN_EATTR, "Slice: step 0 on axis %lld", (long long)a);
        if (s < 0) s += d;
        if (t > 0) s = s < 0 ? 0 : s > d ? d : s;
        else s = s < 0 ? -1 : s > d - 1 ? d - 1 : s;
        start[a] = s;
        step[a] = t;
    }
    if (kiln_tensor_numel(y) == 0) return 0;
    size_t es = kiln_dtype_size(x->dtype);
    int64_t off = 0, st[KILN_MAX_DIMS], yst[KILN_MAX_DIMS];
    for (int i = 0; i < r; i++) {
        off += start[i] * x->strides[i];
        st[i] = step[i] * x->strides[i];
    }
    kiln__cu_contig_strides(r, y->dims, yst);
    return kiln__cu_copy(c, y->dtype, r, y->dims, (const char *)x->data + (size_t)off * es, st, y->data, yst);
}

int kiln__cu_expand(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    int64_t st[KILN_MAX_DIMS], yst[KILN_MAX_DIMS];
    int rc = kiln__cu_bcast_strides("Expand", y->ndim, y->dims, x->ndim, x->dims, x->strides, st);
    if (rc) return rc;
    kiln__cu_contig_strides(y->ndim, y->dims, yst);
    return kiln__cu_copy(c, y->dtype, y->ndim, y->dims, x->data, st, y->data, yst);
}

/* Tile: output dim i = repeat_i * dim_i, iterated as the pair [repeat,
 * dim] (source stride 0 on the repeat); at most 4 axes may repeat. */
int kiln__cu_tile(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    int r = x->ndim, nd = 0;
    int64_t dims[KILN_CU_MAX_DIMS], st[KILN_CU_MAX_DIMS], yst[KILN_CU_MAX_DIMS], ycs[KILN_MAX_DIMS];
    kiln__cu_contig_strides(r, y->dims, ycs);
    for (int i = 0; i < r; i++) {
        int64_t d = x->dims[i], rep = d ? y->dims[i] / d : 0;
        if (rep * d != y->dims[i]) return kiln_set_error(KILN_ESHAPE, "Tile: output dim %d is no multiple of %lld", i, (long long)d);
        if (rep != 1) {
            if (nd >= KILN_CU_MAX_DIMS) goto too_many;
            dims[nd] = rep, st[nd] = 0, yst[nd] = d * ycs[i], nd++;
        }
        if (nd >= KILN_CU_MAX_DIMS) goto too_many;
        dims[nd] = d, st[nd] = x->strides[i], yst[nd] = ycs[i], nd++;
    }
    return kiln__cu_copy(c, y->dtype, nd, dims, x->data, st, y->data, yst);
too_many:
    return kiln_set_error(KILN_EUNSUPPORTED, "Tile: rank %d with these repeats exceeds the CUDA copy's %d dims", r,
                          KILN_CU_MAX_DIMS);
}

/* The bits of value v stored as one element of dtype t. */
static uint64_t value_bits(kiln_dtype t, double v) {
    uint64_t b = 0;
    switch (t) {
    case KILN_DTYPE_F32: {
        float f = (float)v;
        memcpy(&b, &f, 4);
        break;
    }
    case KILN_DTYPE_F64: memcpy(&b, &v, 8); break;
    case KILN_DTYPE_F16: b = kiln_f32_to_f16((float)v); break;
    case KILN_DTYPE_BF16: b = kiln_f32_to_bf16((float)v); break;
    case KILN_DTYPE_BOOL: b = v != 0; break;
    default: b = (uint64_t)(int64_t)v; break;
    }
    return b;
}

int kiln__cu_pad(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    const char *sz = kiln__cu_size_suffix(x->dtype);
    if (!sz) return kiln__cu_type_err("Pad", x->dtype);
    int rc = need_contig("Pad", x);
    if (!rc) rc = need_contig("Pad", y);
    if (rc) return rc;
    kiln_cu_pad p;
    memset(&p, 0, sizeof p);
    int r = x->ndim;
    const char *m = kiln__cu_attr_str(c, "mode", "constant");
    p.mode = !strcmp(m, "reflect") ? 1 : !strcmp(m, "edge") ? 2 : !strcmp(m, "wrap") ? 3 : 0;
    double value = 0;
    int64_t pads[2 * KILN_MAX_DIMS], np, axes[KILN_MAX_DIMS], nax = r;
    for (int i = 0; i < r; i++) axes[i] = i;
    if (c->nin == 1) { /* Pad-2: attributes */
        const int64_t *v;
        np = kiln__cu_attr_ints(c, "pads", &v);
        for (int64_t i = 0; i < np && i < 2 * KILN_MAX_DIMS; i++) pads[i] = v[i];
        value = kiln__cu_attr_float(c, "value", 0.0);
    } else {
        for (int i = 1; i < c->nin && i < 4; i++)
            if (kiln__cu_has_in(c, i) && c->in[i].device != KILN_DEVICE_CPU)
                return kiln_set_error(KILN_EINTERNAL, "Pad: input %d is not in host memory", i);
        np = kiln_tensor_numel(&c->in[1]);
        for (int64_t i = 0; i < np && i < 2 * KILN_MAX_DIMS; i++) pads[i] = kiln__cu_host_i64(&c->in[1], i);
        if (kiln__cu_has_in(c, 3)) {
            nax = kiln_tensor_numel(&c->in[3]);
            for (int64_t i = 0; i < nax && i < KILN_MAX_DIMS; i++) {
                axes[i] = kiln__cu_host_i64(&c->in[3], i);
                if (axes[i] < 0) axes[i] += r;
            }
        }
        if (kiln__cu_has_in(c, 2) && kiln_tensor_numel(&c->in[2]) > 0) value = kiln__cu_host_f64(&c->in[2], 0);
    }
    if (nax > KILN_MAX_DIMS || np != 2 * nax)
        return kiln_set_error(KILN_ESHAPE, "Pad: %lld pads for %lld axes", (long long)np, (long long)nax);
    for (int64_t i = 0; i < nax; i++) {
        if (axes[i] < 0 || axes[i] >= r) return kiln_set_error(KILN_EATTR, "Pad: axis %lld out of range", (long long)axes[i]);
        p.begin[axes[i]] = pads[i];
    }
    p.ndim = r;
    for (int i = 0; i < r; i++) {
        p.in_dims[i] = x->dims[i];
        p.out_dims[i] = y->dims[i];
        if (p.mode && x->dims[i] == 0 && y->dims[i] > 0)
            return kiln_set_error(KILN_ESHAPE, "Pad: cannot %s-pad empty axis %d", m, i);
    }
    p.value = value_bits(x->dtype, value);
    if (r == 0) {
        int64_t one = 1;
        return kiln__cu_copy(c, y->dtype, 0, &one, x->data, &one, y->data, &one);
    }
    void *args[] = {&p, (void *)&x->data, &y->data};
    return kiln__cu_launch_n(c, "pad", sz, kiln_tensor_numel(y), args);
}

int kiln__cu_gather(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0], *ix = &c->in[1];
    kiln_tensor *y = &c->out[0];
    const char *sz = kiln__cu_size_suffix(x->dtype);
    if (!sz) return kiln__cu_type_err("Gather", x->dtype);
    if (ix->dtype != KILN_DTYPE_I32 && ix->dtype != KILN_DTYPE_I64) return kiln__cu_type_err("Gather indices", ix->dtype);
    int rc = need_contig("Gather", x);
    if (!rc) rc = need_contig("Gather", ix);
    if (!rc) rc = need_contig("Gather", y);
    if (rc) return rc;
    int r = x->ndim, ax = (int)kiln__cu_attr_int(c, "axis", 0);
    if (ax < 0) ax += r;
    int64_t outer = 1, inner = 1, len = x->dims[ax], nidx = kiln_tensor_numel(ix);
    for (int i = 0; i < ax; i++) outer *= x->dims[i];
    for (int i = ax + 1; i < r; i++) inner *= x->dims[i];
    char base[24];
    memcpy(base, "gather_", 8);
    strcat(base, sz);
    kiln_cu_check ck = kiln__cu_check(c);
    void *args[] = {&ck, &outer, &len, &inner, &nidx, (void *)&ix->data, (void *)&x->data, &y->data};
    return kiln__cu_launch_n(c, base, ix->dtype == KILN_DTYPE_I32 ? "i32" : "i64", outer * nidx * inner, args);
}

int kiln__cu_gather_elements(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0], *ix = &c->in[1];
    kiln_tensor *y = &c->out[0];
    const char *sz = kiln__cu_size_suffix(x->dtype);
    if (!sz) return kiln__cu_type_err("GatherElements", x->dtype);
    if (ix->dtype != KILN_DTYPE_I32 && ix->dtype != KILN_DTYPE_I64)
        return kiln__cu_type_err("GatherElements indices", ix->dtype);
    int rc = need_contig("GatherElements", y);
    if (rc) return rc;
    int r = x->ndim, ax = (int)kiln__cu_attr_int(c, "axis", 0);
    if (ax < 0) ax += r;
    if (ix->ndim != r || ax < 0 || ax >= r) return kiln_set_error(KILN_ESHAPE, "GatherElements: indices rank or axis");
    int64_t xs[KILN_MAX_DIMS];
    for (int i = 0; i < r; i++) xs[i] = i == ax ? 0 : x->strides[i];
    const int64_t *st[2] = {xs, ix->strides};
    kiln_cu_iter it;
    kiln__cu_iter_init(&it, r, ix->dims, 2, st);
    int64_t len = x->dims[ax], axst = x->strides[ax];
    char base[24] = "gather_el_";
    strcat(base, sz);
    kiln_cu_check ck = kiln__cu_check(c);
    void *args[] = {&ck, &it, &len, &axst, (void *)&ix->data, (void *)&x->data, &y->data};
    return kiln__cu_launch_n(c, base, ix->dtype == KILN_DTYPE_I32 ? "i32" : "i64", it.numel, args);
}

/* DepthToSpace / SpaceToDepth: a transposing copy over a 6-d view of
 * [N, C, H, W] (blocksize b):
 *   DepthToSpace DCR: [N, b, b, C', H, W] -> [N, C', H, b, W, b]
 *   DepthToSpace CRD: [N, C', b, b, H, W] -> [N, C', H, b, W, b]
 *   SpaceToDepth:     [N, C, H', b, W', b] -> [N, b, b, C, H', W'] */
static int space_depth(const kiln_call *c, int d2s) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    const char *op = d2s ? "DepthToSpace" : "SpaceToDepth";
    int rc = need_contig(op, x);
    if (!rc) rc = need_contig(op, y);
    if (rc) return rc;
    if (x->ndim != 4) return kiln_set_error(KILN_ESHAPE, "%s: CUDA kernel takes rank 4, found %d", op, x->ndim);
    int64_t b = kiln__cu_attr_int(c, "blocksize", 1), N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
    int crd = !strcmp(kiln__cu_attr_str(c, "mode", "DCR"), "CRD");
    int64_t vd[6], vst[6], perm[6], dims[6], st[6], yst[6];
    if (d2s) {
        int64_t Cq = C / (b * b);
        int64_t v[6] = {N, b, b, Cq, H, W}, vc[6] = {N, Cq, b, b, H, W};
        int64_t p[6] = {0, 3, 4, 1, 5, 2}, pc[6] = {0, 1, 4, 2, 5, 3};
        for (int i = 0; i < 6; i++) vd[i] = crd ? vc[i] : v[i], perm[i] = crd ? pc[i] : p[i];
    } else {
        int64_t v[6] = {N, C, H / b, b, W / b, b}, p[6] = {0, 3, 5, 1, 2, 4};
        for (int i = 0; i < 6; i++) vd[i] = v[i], perm[i] = p[i];
    }
    kiln__cu_contig_strides(6, vd, vst);
    for (int i = 0; i < 6; i++) dims[i] = vd[perm[i]], st[i] = vst[perm[i]];
    kiln__cu_contig_strides(6, dims, yst);
    return kiln__cu_copy(c, y->dtype, 6, dims, x->data, st, y->data, yst);
}

int kiln__cu_depth_to_space(const kiln_call *c) { return space_depth(c, 1); }
int kiln__cu_space_to_depth(const kiln_call *c) { return space_depth(c, 0); }

/* Dropout (inference): y = x, mask all true. */
int kiln__cu_dropout(const kiln_call *c) {
    /* ratio and training_mode are host inputs: training is the identity only with ratio 0 */
    if (kiln__cu_has_in(c, 2) && kiln__cu_host_i64(&c->in[2], 0) &&
        !(kiln__cu_has_in(c, 1) && kiln__cu_host_f64(&c->in[1], 0) == 0))
        return kiln_set_error(KILN_EUNSUPPORTED,
                              "Dropout: training_mode = true with ratio > 0 is not supported (inference only)");
    int rc = kiln__cu_copy_input(c);
    if (rc || c->nout < 2 || !c->out[1].data) return rc;
    int64_t n = kiln_tensor_numel(&c->out[1]);
    uint64_t one = 1;
    void *args[] = {&n, &one, &c->out[1].data};
    return kiln__cu_launch_n(c, "fill", "1", n, args);
}

int kiln__cu_put_i64(const kiln_call *c, int n, const int64_t *v) {
    kiln_cu_vals a = {.n = n};
    if (n < 0 || n > KILN_CU_MAX_DIMS || kiln_tensor_numel(&c->out[0]) != n || c->out[0].dtype != KILN_DTYPE_I64)
        return kiln_set_error(KILN_ESHAPE, "%d values for an output of %lld %s elements", n,
                              (long long)kiln_tensor_numel(&c->out[0]), kiln_dtype_name(c->out[0].dtype));
    memcpy(a.v, v, (size_t)n * sizeof *v);
    void *args[] = {&a, &c->out[0].data};
    return kiln__cu_launch_n(c, "put", "i64", n, args);
}
