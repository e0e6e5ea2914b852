/*
 * scatter_cuda.c — CUDA launchers of GatherND, ScatterElements/Scatter and
 * ScatterND (scatter.cu), int64 indices, contiguous tensors.  The scatters
 * first copy data into the output (unless in place), then apply the
 * updates; indices out of range are reported through the context's fault
 * record (kiln__cu_check).
 */
#include "ops/common/cuda_impls.h"
#include "ops/common/ops_cuda.h"

#include <string.h>

static int check(const kiln_call *c, const char *op, const char **suf) {
    *suf = kiln__cu_suffix(c->out[0].dtype);
    if (!*suf) return kiln__cu_type_err(op, c->out[0].dtype);
    if (c->in[1].dtype != KILN_DTYPE_I64) return kiln__cu_type_err(op, c->in[1].dtype);
    for (int i = 0; i < c->nin; i++)
        if (!kiln__cu_contig(&c->in[i])) return kiln_set_error(KILN_EUNSUPPORTED, "%s: CUDA kernel needs contiguous tensors", op);
    return kiln__cu_contig(&c->out[0]) ? 0 : kiln_set_error(KILN_EUNSUPPORTED, "%s: CUDA kernel needs a contiguous output", op);
}

/* 0 none, 1 add, 2 mul, 3 max, 4 min */
static int reduction(const kiln_call *c, const char *op, int *red) {
    const char *r = kiln__cu_attr_str(c, "reduction", "none");
    static const char *const names[] = {"none", "add", "mul", "max", "min"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(r, names[i])) return *red = i, 0;
    return kiln_set_error(KILN_EATTR, "%s: reduction '%s'", op, r);
}

/* y = x (the scatters start from a copy of data) */
static int copy_data(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0];
    kiln_tensor *y = &c->out[0];
    if (y->data == x->data) return 0;
    int64_t n = kiln_tensor_numel(x), one = 1;
    return kiln__cu_copy(c, y->dtype, 1, &n, x->data, &one, y->data, &one);
}

/* Index-tuple geometry over data x for index depth `last` from dim b on;
 * returns the data slice length after the indexed dims. */
static int64_t nd_geom(const kiln_tensor *x, int64_t b, int64_t last, kiln_cu_nd *g, int64_t *batch_stride) {
    int64_t slice = 1;
    for (int64_t i = b + last; i < x->ndim; i++) slice *= x->dims[i];
    int64_t s = slice;
    memset(g, 0, sizeof *g);
    for (int64_t i = b + last - 1; i >= b; i--) {
        g->st[i - b] = s;
        g->dd[i - b] = x->dims[i];
        s *= x->dims[i];
    }
    *batch_stride = s;
    return slice;
}

static int nd_last(const char *op, const kiln_tensor *x, const kiln_tensor *ix, int64_t b, int64_t *last) {
    *last = ix->ndim ? ix->dims[ix->ndim - 1] : 0;
    if (*last < 1 || *last > KILN_CU_MAX_DIMS || b + *last > x->ndim)
        return kiln_set_error(KILN_ESHAPE, "%s: index depth %lld for data rank %d", op, (long long)*last, x->ndim);
    return 0;
}

int kiln__cu_gather_nd(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0], *ix = &c->in[1];
    const char *suf;
    int64_t b = kiln__cu_attr_int(c, "batch_dims", 0), last, bs;
    int rc = check(c, "GatherND", &suf);
    if (!rc) rc = nd_last("GatherND", x, ix, b, &last);
    if (rc) return rc;
    kiln_cu_nd g;
    int64_t slice = nd_geom(x, b, last, &g, &bs), ntup = 1, n = kiln_tensor_numel(&c->out[0]);
    for (int i = (int)b; i < ix->ndim - 1; i++) ntup *= ix->dims[i];
    kiln_cu_check ck = kiln__cu_check(c);
    void *args[] = {&ck, &n, &slice, &last, &bs, &ntup, &g, (void *)&ix->data, (void *)&x->data, &c->out[0].data};
    return kiln__cu_launch_n(c, "gather_nd", suf, n, args);
}

int kiln__cu_scatter_nd(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0], *ix = &c->in[1], *u = &c->in[2];
    const char *suf;
    int64_t last, bs;
    int red = 0, rc = check(c, "ScatterND", &suf);
    if (!rc) rc = reduction(c, "ScatterND", &red);
    if (!rc) rc = nd_last("ScatterND", x, ix, 0, &last);
    if (!rc) rc = copy_data(c);
    if (rc) return rc;
    kiln_cu_nd g;
    int64_t slice = nd_geom(x, 0, last, &g, &bs), ntup = 1;
    for (int i = 0; i < ix->ndim - 1; i++) ntup *= ix->dims[i];
    kiln_cu_check ck = kiln__cu_check(c);
    void *args[] = {&ck, &slice, &last, &ntup, &g, &red, (void *)&ix->data, (void *)&u->data, &c->out[0].data};
    return ntup ? kiln__cu_launch_n(c, "scatter_nd", suf, slice, args) : 0;
}

int kiln__cu_scatter_elements(const kiln_call *c) {
    const kiln_tensor *x = &c->in[0], *ix = &c->in[1], *u = &c->in[2];
    kiln_tensor *y = &c->out[0];
    const char *suf;
    int red = 0, rc = check(c, "ScatterElements", &suf);
    if (!rc) rc = reduction(c, "ScatterElements", &red);
    if (rc) return rc;
    int r = x->ndim, ax = (int)kiln__cu_attr_int(c, "axis", 0);
    if (ax < 0) ax += r;
    if (ax < 0 || ax >= r || ix->ndim != r || u->ndim != r)
        return kiln_set_error(KILN_ESHAPE, "ScatterElements: axis %d, ranks %d/%d/%d", ax, r, ix->ndim, u->ndim);
    if ((rc = copy_data(c))) return rc;
    /* one line per position of the other dims (the axis dim set to 1) */
    int64_t dims[KILN_MAX_DIMS], ys[KILN_MAX_DIMS];
    kiln__cu_contig_strides(r, y->dims, ys);
    for (int i = 0; i < r; i++) dims[i] = i == ax ? 1 : ix->dims[i];
    const int64_t *st[2] = {ys, ix->strides};
    kiln_cu_iter it;
    kiln__cu_iter_init(&it, r, dims, 2, st);
    int64_t A = x->dims[ax], axst = ys[ax], ilen = ix->dims[ax], iaxst = ix->strides[ax];
    if (!ilen) return 0;
    kiln_cu_check ck = kiln__cu_check(c);
    void *args[] = {&ck, &it, &A, &axst, &ilen, &iaxst, &red, (void *)&ix->data, (void *)&u->data, &y->data};
    return kiln__cu_launch_n(c, "scatter_el", suf, it.numel, args);
}
