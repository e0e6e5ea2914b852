/*
 * loop.c — ONNX Loop (opsets 1/11/13/16, tensor forms).
 *
 * The body runs as a sub-engine (subengine.h): the shape function builds
 * it with fixed shapes from the layer's input descriptors, every outer
 * context gets its own kiln_context of it, and enqueue binds the
 * loop-carried values, runs the body, swaps the double-buffered state and
 * appends the scan outputs.
 *
 * Layer layout (made by the ONNX importer, see kiln/onnx.h):
 *   inputs   [M, cond, v_initial..., outer...]   (M, cond: "" when absent)
 *   body in  [iteration_num, cond_in, v..., outer...]
 *   body out [cond_out, v_out..., scan_out...]   (+ importer padding)
 *   outputs  [v_final..., scan_outputs..., size, unused...]
 * `num_outer` says how many trailing inputs are outer-scope values and
 * `num_outputs` how many outputs the node really has (N + K); the importer
 * sets both.  A scan output has a data-dependent leading dim (the trip
 * count) unless M is a build-time constant and cond is absent; then the
 * output just after the real ones is a size tensor with upper bound M.
 *
 * A body whose carried values change shape between iterations (a growing
 * sequence) cannot run on a fixed-shape sub-engine; when M is known at
 * build (at most LOOP_UNROLL_MAX) the loop is unrolled instead
 * (loop_unroll).  Without a cond input, the body's cond_out is ignored,
 * as ONNX says.
 */
#include "ops/controlflow/subengine.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ Loop */

#define LOOP_MAX_OUT 16
#define LOOP_TAG 0x4c4f4f50u

static const kiln_attr_def loop_attrs[] = {
    {"body", KILN_ATTR_GRAPH, KILN_DTYPE_UNDEFINED, NULL, 1, "the loop body"},
    {"num_outputs", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "0", 0,
     "outputs the node really has (N + K); 0 = body outputs - 1 (set by the importer)"},
    {"num_outer", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "0", 0,
     "trailing inputs that are outer-scope values the body uses (set by the importer)"},
    {NULL, 0, 0, NULL, 0, NULL},
};

typedef struct loop_state {
    uint32_t tag;
    const kiln_network *graph; /* borrowed, build time only */
    int64_t num_outputs, num_outer;
    /* After shape/deserialize: */
    int64_t n_state, n_scan, n_outer, size_slot; /* size_slot: output index of the size tensor, -1 */
    kiln__body body;
} loop_state;

static int loop_create(const kiln_attrs *a, void **state) {
    loop_state *s = kiln__calloc(1, sizeof *s);
    if (!s) return kiln__err(KILN_ENOMEM, "Loop: out of memory");
    s->tag = LOOP_TAG;
    s->graph = kiln__body_graph(a);
    s->num_outputs = kiln_attrs_int(a, "num_outputs");
    s->num_outer = kiln_attrs_int(a, "num_outer");
    s->size_slot = -1;
    *state = s;
    return 0;
}

static void loop_destroy(void *state) {
    loop_state *s = state;
    if (!s) return;
    kiln__body_free(&s->body);
    kiln__free(s);
}

static int loop_clone(const void *state, void **out) {
    const loop_state *s = state;
    loop_state *d = kiln__calloc(1, sizeof *d);
    if (!d) return kiln__err(KILN_ENOMEM, "Loop: out of memory");
    *d = *s;
    int rc = kiln__body_clone(&s->body, &d->body);
    if (rc) { kiln__free(d); return rc; }
    *out = d;
    return 0;
}

/* Value of a 1-element build-time tensor as int64 (1 = known). */
static int desc_scalar(const kiln_desc *d, int64_t *v) {
    if (d->dtype == KILN_DTYPE_UNDEFINED) return 0;
    int64_t dims[KILN_MAX_DIMS], n = 1;
    if (!kiln__ops_const_dims(d, dims)) return 0;
    for (int i = 0; i < d->ndim; i++) n *= dims[i];
    if (n != 1) return 0;
    if (d->data) {
        switch (d->dtype) {
        case KILN_DTYPE_I64: { int64_t x; memcpy(&x, d->data, 8); *v = x; return 1; }
        case KILN_DTYPE_I32: { int32_t x; memcpy(&x, d->data, 4); *v = x; return 1; }
        case KILN_DTYPE_BOOL: case KILN_DTYPE_U8: *v = *(const uint8_t *)d->data; return 1;
        default: return 0;
        }
    }
    if (d->nvalues >= 1 && d->values[0]) return kiln_expr_is_const(d->values[0], v);
    return 0;
}

/* Body outputs whose shape the sub-engine leaves dynamic (a Slice by the
 * iteration number, say): cond_out is a scalar, a loop-carried value keeps
 * the shape of its initial value, and a scan output gets the shape of a
 * probe run of iteration 0 when every input is known at build time.  All
 * are checked after every run. */
static int loop_fix_dyn(loop_state *s, const kiln_shape_ctx *c, int N, int K) {
    kiln__body *b = &s->body;
    int need_probe = 0;
    /* Outputs whose dims the sub-engine's shape program computes from the
     * fixed input shapes alone (the body declares a dim_param, say): ask it.
     * A carried value that comes out with another shape cannot loop on a
     * fixed-shape body (KILN_ESHAPE: the caller may unroll). */
    int rc0 = kiln__body_resolve_dims(b, 1, N + K);
    if (rc0) return rc0;
    for (int k = 1; k <= N; k++)
        if (b->out[k].dyn == 2 && memcmp(b->out[k].dims, b->in[1 + k].dims, sizeof(int64_t) * (size_t)b->out[k].ndim))
            return kiln_set_error(KILN_ESHAPE, "Loop: loop-carried value '%s' changes shape in every iteration",
                                  b->out[k].name);
    for (int k = 0; k < 1 + N + K; k++) {
        kiln__body_io *o = &b->out[k];
        if (!o->dyn || o->dyn == 2) continue;
        if (k == 0) {
            for (int d = 0; d < o->ndim; d++) o->dims[d] = 1;
        } else if (k <= N) {
            const kiln__body_io *v = &b->in[1 + k];
            if (o->ndim != v->ndim)
                return kiln_set_error(KILN_ESHAPE, "Loop: the body takes '%s' with rank %d and returns '%s' with "
                                      "rank %d", v->name, v->ndim, o->name, o->ndim);
            for (int d = 0; d < o->ndim; d++) o->dims[d] = v->dims[d];
            need_probe = 1; /* checked by the probe when it can run */
        } else {
            need_probe = 1;
        }
    }
    if (!need_probe) return 0;
    for (int i = 2; i < c->nin; i++)
        if (!c->in[i].data)
            return kiln__body_check_static(b, 1 + N, K, "Loop");
    int64_t keep[KILN_MAX_IO][KILN_MAX_DIMS];
    for (int k = 1; k <= N; k++) memcpy(keep[k], b->out[k].dims, sizeof keep[k]);
    kiln_context *ctx = NULL;
    int rc = kiln__body_ctx_open(b, NULL, &ctx);
    if (rc) return rc;
    int64_t it = 0;
    uint8_t cond = 1;
    rc = kiln__body_bind_in(ctx, b, 0, &it);
    if (!rc) rc = kiln__body_bind_in(ctx, b, 1, &cond);
    for (int i = 2; i < c->nin && !rc; i++) rc = kiln__body_bind_in(ctx, b, i, c->in[i].data);
    if (!rc) rc = kiln_context_run(ctx);
    for (int k = 1; k < 1 + N + K && !rc; k++) {
        kiln__body_io *o = &b->out[k];
        if (o->dyn != 1) continue;
        int nd = 0;
        rc = kiln_context_shape(ctx, o->name, &nd, o->dims);
        if (!rc && nd != o->ndim) rc = kiln__err(KILN_EINTERNAL, "Loop: probe run: rank of '%s' changed", o->name);
        if (!rc && k <= N && memcmp(o->dims, keep[k], sizeof(int64_t) * (size_t)nd))
            rc = kiln__err(KILN_ESHAPE, "Loop: loop-carried value '%s' changes shape in iteration 0", o->name);
    }
    kiln_context_free(ctx);
    return rc ? kiln__err_prefix(rc, "Loop: probe run of iteration 0 (to learn the scan output shapes)") : 0;
}

/* The Loop as M copies of its body, when M is known at build and at most
 * LOOP_UNROLL_MAX: for bodies a fixed-shape sub-engine cannot run (a
 * carried value that changes shape, such as a growing sequence).  Copy k
 * gets the iteration number k as a constant; with a condition input,
 * copy k's results are taken only while the condition holds
 * (kiln::if_select, which folds away when the condition is known at build)
 * and the condition becomes cond && cond_out.  The network is inlined in
 * place of the layer.  Scan outputs are not unrolled. */
#define LOOP_UNROLL_MAX 64

static int loop_unroll(const loop_state *s, kiln_shape_ctx *c, int64_t M, int N, int K, int E) {
    if (K > 0)
        return kiln_set_error(KILN_EUNSUPPORTED, "Loop: the body's carried values change shape between iterations "
                              "and the node has scan outputs; kiln unrolls such loops only without scan outputs");
    int bnout = kiln_network_num_outputs(s->graph);
    if (N + 1 > KILN_MAX_IO || bnout > KILN_MAX_IO || c->nin > KILN_MAX_IO)
        return kiln_set_error(KILN_EUNSUPPORTED, "Loop: too many values to unroll");
    typedef char name[48];
    struct names {
        name in[KILN_MAX_IO], out[KILN_MAX_IO], carried[KILN_MAX_IO], cond, tmp;
    } *nm = kiln__calloc(1, sizeof *nm);
    kiln_network *u = kiln_network_create();
    const char *bin[KILN_MAX_IO], *bout[KILN_MAX_IO], *cur[KILN_MAX_IO];
    int rc = !nm || !u ? kiln__err(KILN_ENOMEM, "Loop: out of memory") : 0;
    for (int i = 0; i < c->nin && !rc; i++) {
        const kiln_desc *d = &c->in[i];
        snprintf(nm->in[i], sizeof nm->in[i], "in%d", i);
        int64_t dims[KILN_MAX_DIMS];
        for (int k = 0; k < d->ndim; k++)
            if (!kiln_expr_is_const(d->dims[k], &dims[k])) dims[k] = -1;
        if (d->dtype == KILN_DTYPE_UNDEFINED) rc = kiln_network_add_input(u, nm->in[i], KILN_DTYPE_BOOL, 0, NULL, NULL);
        else rc = kiln_network_add_input(u, nm->in[i], d->dtype, d->ndim, dims, NULL);
    }
    uint8_t one = 1;
    float zero = 0;
    if (!rc) rc = kiln_network_add_constant(u, "kiln.true", KILN_DTYPE_BOOL, 0, NULL, &one);
    if (!rc) rc = kiln_network_add_constant(u, "kiln.zero", KILN_DTYPE_F32, 0, NULL, &zero);
    int has_cond = c->in[1].dtype != KILN_DTYPE_UNDEFINED;
    const char *cond = has_cond ? nm->in[1] : "kiln.true";
    for (int j = 0; j < N; j++) cur[j] = nm->in[2 + j];
    for (int64_t k = 0; k < M && !rc; k++) {
        char it[32], pre[32];
        snprintf(it, sizeof it, "it%lld", (long long)k);
        snprintf(pre, sizeof pre, "u%lld/", (long long)k);
        rc = kiln_network_add_constant(u, it, KILN_DTYPE_I64, 0, NULL, &k);
        bin[0] = it;
        bin[1] = cond;
        for (int j = 0; j < N; j++) bin[2 + j] = cur[j];
        for (int e = 0; e < E; e++) bin[2 + N + e] = nm->in[2 + N + e];
        for (int o = 0; o < bnout; o++) {
            snprintf(nm->out[o], sizeof nm->out[o], "u%lld/out%d", (long long)k, o);
            bout[o] = nm->out[o];
        }
        if (!rc) rc = kiln_network_append(u, s->graph, pre, bin, bout);
        for (int j = 0; j < N && !rc; j++) {
            if (!has_cond) { /* no condition input: cond_out is ignored */
                snprintf(nm->carried[j], sizeof nm->carried[j], "u%lld/out%d", (long long)k, 1 + j);
            } else { /* taken only while the condition holds */
                snprintf(nm->tmp, sizeof nm->tmp, "u%lld/v%d", (long long)k, j);
                const char *si[3] = {cond, nm->out[1 + j], cur[j]}, *so[1] = {nm->tmp};
                if (!kiln_network_add_layer(u, "kiln::if_select", 2, NULL, 3, si, 1, so))
                    rc = kiln__err_prefix(KILN_EINTERNAL, "Loop unrolling");
                memcpy(nm->carried[j], nm->tmp, sizeof nm->tmp);
            }
            cur[j] = nm->carried[j];
        }
        if (!rc && has_cond) {
            snprintf(nm->tmp, sizeof nm->tmp, "u%lld/cond", (long long)k);
            const char *ai[2] = {cond, nm->out[0]}, *ao[1] = {nm->tmp};
            if (!kiln_network_add_layer(u, "ai.onnx::And", 7, NULL, 2, ai, 1, ao))
                rc = kiln__err_prefix(KILN_EINTERNAL, "Loop unrolling");
            memcpy(nm->cond, nm->tmp, sizeof nm->cond);
            cond = nm->cond;
        }
    }
    /* outputs: the final carried values, then unused padding */
    for (int o = 0; o < c->nout && !rc; o++) {
        char on[32];
        snprintf(on, sizeof on, "final%d", o);
        const char *ii[1] = {o < N ? cur[o] : "kiln.zero"}, *oo[1] = {on};
        if (!kiln_network_add_layer(u, "ai.onnx::Identity", 1, NULL, 1, ii, 1, oo))
            rc = kiln__err_prefix(KILN_EINTERNAL, "Loop unrolling");
        if (!rc) rc = kiln_network_mark_output(u, on);
    }
    kiln__free(nm);
    if (rc) {
        kiln_network_free(u);
        return kiln__err_prefix(rc, "Loop (unrolling %lld iterations)", (long long)M);
    }
    return kiln_shape_inline_owned(c, u);
}

static int loop_shape(void *state, kiln_shape_ctx *c) {
    loop_state *s = state;
    if (!s->graph) return kiln_set_error(KILN_EATTR, "Loop: attribute 'body' is not set");
    int nin = c->nin;
    int64_t E = s->num_outer, N = nin - 2 - E;
    if (E < 0 || N < 0)
        return kiln_set_error(KILN_EINVAL, "Loop: %d inputs and num_outer = %lld leave no room for M and cond",
                              nin, (long long)E);
    int bnout = kiln_network_num_outputs(s->graph);
    int64_t real = s->num_outputs > 0 ? s->num_outputs : bnout - 1;
    int64_t K = real - N;
    if (K < 0 || 1 + real > bnout)
        return kiln_set_error(KILN_ESHAPE, "Loop: the body has %d outputs, the node %lld, with %lld loop-carried "
                              "values (expected body outputs = 1 + node outputs, node outputs >= loop-carried)",
                              bnout, (long long)real, (long long)N);
    if (real + 1 > c->nout)
        return kiln_set_error(KILN_EUNSUPPORTED, "Loop: %lld outputs; kiln's Loop supports at most %d", (long long)real,
                              c->nout - 1);
    /* Descriptors of the body inputs. */
    kiln_desc bin[KILN_MAX_IO];
    kiln_exprs *x = c->x;
    for (int i = 0; i < nin; i++) {
        bin[i] = c->in[i];
        if (i >= 2) continue;
        kiln_io_info ti, *t = &ti;
        int rc = kiln_network_input_info(s->graph, i, t);
        if (rc) return rc;
        memset(&bin[i], 0, sizeof bin[i]);
        bin[i].dtype = i == 0 ? KILN_DTYPE_I64 : KILN_DTYPE_BOOL;
        bin[i].nvalues = -1;
        bin[i].ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) bin[i].dims[d] = kiln_expr_const(x, 1);
        if (t->dtype != bin[i].dtype)
            return kiln_set_error(KILN_ETYPE, "Loop: body input %d '%s' must be %s, it is declared %s", i, t->name,
                                  kiln_dtype_name(bin[i].dtype), kiln_dtype_name(t->dtype));
    }
    for (int i = 2; i < nin; i++)
        if (bin[i].dtype == KILN_DTYPE_UNDEFINED)
            return kiln_set_error(KILN_EINVAL, "Loop: input %d is absent (loop-carried and outer values are required)", i);
    for (int i = 0; i < 2; i++) {
        const kiln_desc *d = &c->in[i];
        if (d->dtype == KILN_DTYPE_UNDEFINED) continue;
        int64_t dims[KILN_MAX_DIMS], n = 1;
        if (kiln__ops_const_dims(d, dims)) {
            for (int k = 0; k < d->ndim; k++) n *= dims[k];
            if (n != 1)
                return kiln_set_error(KILN_ESHAPE, "Loop: input %d (%s) must hold one element, it holds %lld", i,
                                      i ? "cond" : "M", (long long)n);
        }
        if (i == 0 && d->dtype != KILN_DTYPE_I64)
            return kiln_set_error(KILN_ETYPE, "Loop: M must be int64, it is %s", kiln_dtype_name(d->dtype));
        if (i == 1 && d->dtype != KILN_DTYPE_BOOL)
            return kiln_set_error(KILN_ETYPE, "Loop: cond must be bool, it is %s", kiln_dtype_name(d->dtype));
    }
    kiln__body_free(&s->body);
    /* A trip count known at build allows unrolling when a fixed-shape body
     * cannot run the loop. */
    int64_t mu = -1;
    int unroll = desc_scalar(&c->in[0], &mu) && mu >= 0 && mu <= LOOP_UNROLL_MAX;
#define LOOP_TRY_UNROLL(rc)                                                                       \
    do {                                                                                          \
        if ((rc) == KILN_ENOMEM || !unroll) return (rc);                                          \
        kiln__body_free(&s->body);                                                                \
        return loop_unroll(s, c, mu, (int)N, (int)K, (int)E);                                     \
    } while (0)
    int rc = kiln__body_build(&s->body, s->graph, bin, nin, "Loop");
    if (rc) LOOP_TRY_UNROLL(rc);
    rc = loop_fix_dyn(s, c, (int)N, (int)K);
    if (rc) LOOP_TRY_UNROLL(rc);
    const kiln__body *b = &s->body;
    if (b->out[0].dtype != KILN_DTYPE_BOOL || kiln__body_io_bytes(&b->out[0]) != 1)
        return kiln_set_error(KILN_ETYPE, "Loop: body output 0 (cond_out) must be a single bool, it is %s",
                              kiln_dtype_name(b->out[0].dtype));
    for (int i = 0; i < N; i++) {
        const kiln__body_io *o = &b->out[1 + i], *v = &b->in[2 + i];
        int same = o->dtype == v->dtype && o->ndim == v->ndim;
        for (int d = 0; same && d < o->ndim; d++) same = o->dims[d] == v->dims[d];
        if (!same) {
            rc = kiln_set_error(KILN_ESHAPE, "Loop: loop-carried value %d: the body takes '%s' (%s, rank %d) and "
                                "returns '%s' (%s, rank %d) with another type or shape; kiln needs them equal, or "
                                "the trip count known at build (at most %d) to unroll the loop",
                                i, v->name, kiln_dtype_name(v->dtype), v->ndim, o->name,
                                kiln_dtype_name(o->dtype), o->ndim, LOOP_UNROLL_MAX);
            LOOP_TRY_UNROLL(rc);
        }
    }
#undef LOOP_TRY_UNROLL
    s->n_state = N;
    s->n_scan = K;
    s->n_outer = E;
    s->size_slot = -1;
    for (int i = 0; i < N; i++) {
        c->out[i] = c->in[2 + i];
        c->out[i].data = NULL;
        c->out[i].nvalues = -1;
    }
    int64_t m = -1, cv = -1;
    int m_known = desc_scalar(&c->in[0], &m);
    int c_absent = c->in[1].dtype == KILN_DTYPE_UNDEFINED;
    if (!c_absent) desc_scalar(&c->in[1], &cv);
    const kiln_expr *T = NULL;
    if (K > 0) {
        if (m_known && m < 0) m = 0;
        if (cv == 0 || (m_known && m == 0)) T = kiln_expr_const(x, 0);
        else if (m_known && c_absent) T = kiln_expr_const(x, m);
        else if (!m_known)
            return kiln_set_error(KILN_EUNSUPPORTED, "Loop: the node has scan outputs and its trip count M is %s; "
                                  "kiln needs M known when the engine is built to bound the scan outputs",
                                  c->in[0].dtype == KILN_DTYPE_UNDEFINED ? "absent" : "known only at run time");
        else {
            kiln__ops_fill_unused(c, (int)real);
            T = kiln_shape_size_tensor(c, (int)real, kiln_expr_const(x, m), kiln_expr_const(x, m));
            s->size_slot = real;
        }
    }
    for (int k = 0; k < K; k++) {
        const kiln__body_io *o = &b->out[1 + N + k];
        kiln_desc *d = &c->out[N + k];
        memset(d, 0, sizeof *d);
        d->nvalues = -1;
        d->dtype = o->dtype;
        if (o->ndim + 1 > KILN_MAX_DIMS)
            return kiln_set_error(KILN_EUNSUPPORTED, "Loop: scan output %d would have rank %d (at most %d)", k,
                                  o->ndim + 1, KILN_MAX_DIMS);
        d->ndim = o->ndim + 1;
        d->dims[0] = T;
        for (int i = 0; i < o->ndim; i++) d->dims[i + 1] = kiln_expr_const(x, o->dims[i]);
    }
    if (s->size_slot < 0) kiln__ops_fill_unused(c, (int)real);
    else kiln__ops_fill_unused(c, (int)real + 1);
    return 0;
}

static int loop_enqueue(void *state, const kiln_call *c) {
    kiln__subctx tmp, *x = NULL;
    kiln_context *sub = NULL;
    int rc = kiln__subctx_get(state, 1, &tmp, &x, "Loop");
    if (rc) return rc;
    const loop_state *s = x->st;
    if ((rc = kiln__subctx_open(x, 0, &s->body, c->exec, &sub))) {
        kiln__subctx_put(x);
        return rc;
    }
    const kiln__body *b = &s->body;
    int N = (int)s->n_state, K = (int)s->n_scan, E = (int)s->n_outer;
    int64_t m = INT64_MAX;
    if (c->in[0].data) memcpy(&m, c->in[0].data, 8);
    int cond = 1;
    if (c->in[1].data) cond = *(const uint8_t *)c->in[1].data != 0;
    int64_t upper = INT64_MAX;
    if (K > 0) {
        upper = c->out[N].ndim > 0 ? c->out[N].dims[0] : 0;
        if (s->size_slot >= 0) {
            /* The planned buffer holds the upper bound (M at build). */
            upper = m;
        }
    }
    size_t off[KILN_MAX_IO], total = 0;
    for (int i = 0; i < N; i++) {
        off[i] = total;
        total += (kiln__body_io_bytes(&b->in[2 + i]) + 63) & ~(size_t)63;
    }
    uint8_t *bufA = kiln__aligned_alloc(total ? total : 64), *bufB = kiln__aligned_alloc(total ? total : 64);
    if (!bufA || !bufB) {
        rc = kiln__err(KILN_ENOMEM, "Loop: out of memory for the loop-carried values");
        goto done;
    }
    for (int i = 0; i < N; i++) memcpy(bufA + off[i], c->in[2 + i].data, kiln__body_io_bytes(&b->in[2 + i]));
    int64_t it = 0;
    uint8_t cond_in = 0, cond_out = 0;
    for (; it < m && cond; it++) {
        if (it >= upper) {
            rc = kiln__err(KILN_EINTERNAL, "Loop: more iterations than the scan outputs were planned for (%lld)",
                           (long long)upper);
            goto done;
        }
        cond_in = 1;
        rc = kiln__body_bind_in(sub, b, 0, &it);
        if (!rc) rc = kiln__body_bind_in(sub, b, 1, &cond_in);
        for (int i = 0; i < N && !rc; i++) rc = kiln__body_bind_in(sub, b, 2 + i, bufA + off[i]);
        for (int i = 0; i < E && !rc; i++) rc = kiln__body_bind_in(sub, b, 2 + N + i, c->in[2 + N + i].data);
        if (!rc) rc = kiln__body_bind_out(sub, b, 0, &cond_out);
        for (int i = 0; i < N && !rc; i++) rc = kiln__body_bind_out(sub, b, 1 + i, bufB + off[i]);
        for (int k = 0; k < K && !rc; k++) {
            size_t sb = kiln__body_io_bytes(&b->out[1 + N + k]);
            rc = kiln__body_bind_out(sub, b, 1 + N + k, (uint8_t *)c->out[N + k].data + (size_t)it * sb);
        }
        if (!rc) rc = kiln_context_run(sub);
        if (!rc) rc = kiln__body_check_shapes(sub, b, "Loop");
        if (rc) {
            rc = kiln__err_prefix(rc, "Loop iteration %lld", (long long)it);
            goto done;
        }
        if (c->in[1].data) cond = cond_out != 0; /* without a cond input, cond_out is ignored */
        uint8_t *t = bufA;
        bufA = bufB;
        bufB = t;
    }
    for (int i = 0; i < N; i++) memcpy(c->out[i].data, bufA + off[i], kiln__body_io_bytes(&b->in[2 + i]));
    int from = N + K;
    if (s->size_slot >= 0) {
        memcpy(c->out[s->size_slot].data, &it, 8);
        from = (int)s->size_slot + 1;
    }
    kiln__ops_zero_unused(c, from);
done:
    kiln__aligned_free(bufA);
    kiln__aligned_free(bufB);
    kiln__subctx_put(x);
    return rc;
}

static int loop_attach(void *state, void **ctx_state) { return kiln__subctx_attach(state, 1, ctx_state, "Loop"); }

static int loop_serialize(const void *state, void *buf, size_t *size) {
    const loop_state *s = state;
    int64_t ints[4] = {s->n_state, s->n_scan, s->n_outer, s->size_slot};
    return kiln__body_serialize(&s->body, ints, 4, buf, size);
}

static int loop_deserialize(const void *buf, size_t size, void **state) {
    loop_state *s = kiln__calloc(1, sizeof *s);
    if (!s) return kiln__err(KILN_ENOMEM, "Loop: out of memory");
    s->tag = LOOP_TAG;
    int64_t ints[4];
    int rc = kiln__body_deserialize(&s->body, ints, 4, buf, size);
    if (!rc) {
        s->n_state = ints[0];
        s->n_scan = ints[1];
        s->n_outer = ints[2];
        s->size_slot = ints[3];
        int64_t need = 2 + s->n_state + s->n_outer;
        if (s->n_state < 0 || s->n_scan < 0 || s->n_outer < 0 || need != s->body.nin ||
            1 + s->n_state + s->n_scan > s->body.nout || s->size_slot < -1 || s->size_slot >= LOOP_MAX_OUT ||
            (s->size_slot >= 0 && s->size_slot != s->n_state + s->n_scan))
            rc = kiln__err(KILN_EFORMAT, "Loop state: inconsistent counts (state %lld, scan %lld, outer %lld, body "
                           "%d in / %d out)", (long long)s->n_state, (long long)s->n_scan, (long long)s->n_outer,
                           s->body.nin, s->body.nout);
    }
    if (rc) { loop_destroy(s); return rc; }
    *state = s;
    return 0;
}

static int loop_timing_id(void *state, char *buf, size_t size) {
    const loop_state *s = state;
    return kiln__body_timing_id(&s->body, "loop", buf, size);
}

static const kiln_plugin_vtable loop_vt = {
    .version = KILN_PLUGIN_VTABLE_VERSION,
    .create = loop_create,
    .clone = loop_clone,
    .destroy = loop_destroy,
    .shape = loop_shape,
    .timing_id = loop_timing_id,
    .enqueue = loop_enqueue,
    .serialize = loop_serialize,
    .deserialize = loop_deserialize,
    .attach_to_context = loop_attach,
    .detach_from_context = kiln__subctx_detach,
};

#define LOOP_DEF(var, ver)                                                                          \
    static const kiln_plugin_def var = {                                                            \
        .ns = "ai.onnx", .name = "Loop", .version = ver,                                            \
        .min_inputs = 2, .max_inputs = KILN_MAX_IO - LOOP_MAX_OUT, .num_outputs = LOOP_MAX_OUT,      \
        .attrs = loop_attrs, .vt = &loop_vt,                                                        \
        .doc = "Loop over a body sub-engine (fixed shapes; scan outputs need M known at build)",     \
    };                                                                                              \
    KILN_PLUGIN(var)

LOOP_DEF(loop_1, 1)
LOOP_DEF(loop_11, 11)
LOOP_DEF(loop_13, 13)
LOOP_DEF(loop_16, 16)
