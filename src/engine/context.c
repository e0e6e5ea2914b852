/*
 * context.c — running an engine: kiln_context_*.
 *
 * A context holds everything that changes per run: the values of the shape
 * program (one int64 per engine node), the activation arena, output and
 * workspace memory, per-layer tensor views and prebuilt kiln_call structs,
 * and a thread pool.  The engine is only read, so contexts of one engine
 * run concurrently without locks.
 *
 * The steady-state run is lean: when no input shape changed (and the
 * engine has no value symbols) a run patches data pointers only if a
 * binding changed, then calls each layer's enqueue.  On a shape change the
 * program is evaluated in one forward pass, tensor sizes recomputed,
 * memory re-planned with kiln__memplan (the arena only grows) and the views
 * rebuilt.
 *
 * Data-dependent shapes: a size tensor's value is read right after its
 * producer ran, checked against its upper bound, bound to its symbol, and
 * the dims of later layers' views re-evaluated.  Tensors whose dims use size
 * symbols get memory for their upper bound.
 *
 * In-place (alias_of): all tensors of an alias chain share the root's
 * buffer; when one of them is a network output, the whole chain lives in
 * that output's buffer.
 *
 * Debug mode poisons every layer output before the layer runs (a NaN bit
 * pattern for floating types, 0xA5 bytes otherwise; for 1- and 2-byte
 * integers, where 0xA5 is a real value, only a run of 16 poisoned elements
 * (or a wholly poisoned smaller tensor) is reported), guards each output
 * with 64 canary bytes, and after the layer checks both.  Outputs bound to
 * user buffers are staged in context memory (with room for the canary) and
 * copied out at the end.
 */
#include "device/cuda/cuda_kernel_args.h"
#include "device/device.h"
#include "engine/validate.h"

#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

#define CANARY 64u
#define CANARY_BYTE 0xC3u

typedef struct ctx_layer {
    kiln_call call;
    kiln_attrs attrs;
    kiln_tensor *in, *out;      /* views (into ctx->views) */
    const kiln_plugin_vtable *vt;
    kiln__enqueue_fn enq;       /* vt's enqueue for the layer's device */
    kiln__workspace_fn wsf;
    int gpu;                    /* runs on the CUDA device */
    int graph_ok;               /* may be captured in a CUDA graph */
    void *graph;                /* instantiated graph of the segment starting here, NULL */
    int32_t seg_end;            /* segment start: one past its last layer, else -1 */
    void *state;                /* engine state or per-context state */
    void *ctx_state;            /* from attach_to_context (detach on free) */
    int nsize;                  /* outputs that are size tensors */
    size_t ws;                  /* workspace bytes at current shapes */
    int check;                  /* dims changed: check them against the op (validate.c) */
    const char *next_w;         /* kiln_exec.next_w while this layer runs */
    size_t next_w_bytes;
} ctx_layer;

struct kiln_context {
    const kiln_engine *e;
    kiln__pool *pool;
    kiln_exec exec;
    int64_t *vals;              /* nnodes */
    int64_t *vals_up;           /* nnodes: size symbols at their upper bounds */
    uint8_t *dep;               /* per node: 1 = depends on a size symbol, 2 = value symbol */
    int has_value, has_size;
    int32_t *input_of;          /* per tensor: input index or -1 */
    int32_t *output_of;         /* per tensor: output index or -1 */
    int32_t *root;              /* per tensor: end of its alias chain */
    int32_t *group_out;         /* per tensor (roots): network output tensor of the group, -1 */
    uint8_t *tdep;              /* per tensor: dims depend on a size symbol */
    int64_t (*in_dims)[KILN_MAX_DIMS];
    uint8_t *in_set;            /* dynamic input shape given */
    void **bind;                /* per tensor (inputs/outputs) */
    size_t *bind_bytes;
    uint8_t **tptr;             /* per tensor data pointer */
    uint64_t *tbytes;           /* per tensor bytes (capacity for data-dependent) */
    uint64_t *talloc;           /* per tensor bytes reserved (incl. debug slack) */
    int64_t *size_val;          /* per tensor: value of size tensors */
    uint8_t **owned;            /* per output index: context memory */
    size_t *owned_cap;
    uint8_t *arena;
    size_t arena_cap;
    void *ws;
    size_t ws_cap;
    ctx_layer *L;
    /* CUDA engines: the device, the exec handed to GPU layers (its stream:
     * ours or the user's), device arena and workspace, the uploaded weights,
     * and whether GPU work may still be running (a CPU step must wait). */
    const kiln__device *dev;
    kiln__cuda_exec cx;
    void *own_stream;
    uint8_t *dweights;
    uint8_t *darena, *dws;
    size_t darena_cap, dws_cap;
    int gpu_pending;
    int32_t q_first, q_last;    /* GPU layers enqueued since the last wait (valid while gpu_pending) */
    kiln_cu_fault *fault;       /* what kernels report (mapped page-locked memory; cx.fault) */
    char *dead;                 /* set: a CUDA error at a wait; every later run fails with it */
    int graphs;                 /* CUDA graphs enabled (default 1) */
    int graph_warned;           /* a failed capture was logged at KILN_LOG_WARN (once) */
    kiln_tensor *views;
    int32_t *view_t;            /* tensor of each view, -1 absent */
    int nviews;
    double *prof_ms;
    int profiling, debug;
    int dirty;                  /* shapes changed: evaluate + plan */
    int ptrs_dirty;             /* bindings changed: patch views */
    int ran;                    /* a run completed since the last shape change */
    /* planning scratch */
    uint64_t *mp_sizes, *mp_offs;
    int32_t *mp_first, *mp_last, *mp_t;
    int32_t *slot;              /* per tensor: its arena buffer (roots), -1 */
    uint8_t *tnull;             /* per tensor: an output nothing reads, of an op that
                                 * allows it (kiln_quick_op.optional_outputs): passed as NULL */
};

/* ------------------------------------------------------------ helpers */

static const char *layer_op_str(const kiln__elayer *l, char *buf, size_t n) {
    if (l->aot_kernel >= 0)
        snprintf(buf, n, "%s::%s v%d, AOT", l->op_ns, l->op_name, (int)l->op_version);
    else
        snprintf(buf, n, "%s::%s v%d", l->op_ns, l->op_name, (int)l->op_version);
    return buf;
}

static int layer_err(const kiln__elayer *l, int rc) {
    char b[256];
    return kiln__err_prefix(rc, "layer '%s' (%s)", l->name, layer_op_str(l, b, sizeof b));
}

static int find_io(const kiln_context *c, const char *name, int *is_input) {
    const kiln_engine *e = c->e;
    for (int32_t i = 0; i < e->ninputs; i++)
        if (!strcmp(e->tensors[e->inputs[i]].name, name)) {
            *is_input = 1;
            return e->inputs[i];
        }
    for (int32_t i = 0; i < e->noutputs; i++)
        if (!strcmp(e->tensors[e->outputs[i]].name, name)) {
            *is_input = 0;
            return e->outputs[i];
        }
    return -1;
}

static int no_such_io(const kiln_context *c, const char *name) {
    const kiln_engine *e = c->e;
    char list[512];
    size_t n = 0;
    list[0] = 0;
    for (int32_t i = 0; i < e->ninputs + e->noutputs && n < sizeof list - 1; i++) {
        int32_t t = i < e->ninputs ? e->inputs[i] : e->outputs[i - e->ninputs];
        int k = snprintf(list + n, sizeof list - n, "%s'%s'", i ? ", " : "", e->tensors[t].name);
        if (k > 0) n += (size_t)k < sizeof list - n ? (size_t)k : sizeof list - n - 1;
    }
    return kiln__err(KILN_EINVAL, "engine has no input or output named '%s' (it has %s)", name,
                     list);
}

static int evaluate(kiln_context *c);
static void graphs_drop(kiln_context *c);
static void graph_segments(kiln_context *c);
static void *host_alloc(const kiln_context *c, size_t n);
static void host_free(const kiln_context *c, void *p);
static int gpu_wait(kiln_context *c);

/* ------------------------------------------------------------ create/free */

KILN_API int kiln_context_create(const kiln_engine *e, int threads, kiln_context **out) {
    KILN__ARG(e && out, KILN_EINVAL);
    *out = NULL;
    int rc = kiln__engine_device_check(e);
    if (rc) return rc;
    if (threads < 0) threads = 0;
    kiln_context *c = kiln__calloc(1, sizeof *c);
    if (!c) return kiln__err(KILN_ENOMEM, "out of memory creating a context");
    c->e = e;
    size_t nn = (size_t)e->nnodes, nt = (size_t)e->ntensors, nl = (size_t)e->nlayers;
    size_t ni = (size_t)e->ninputs, no = (size_t)e->noutputs;
    c->vals = kiln__calloc(nn + 1, sizeof *c->vals);
    c->vals_up = kiln__calloc(nn + 1, sizeof *c->vals_up);
    c->dep = kiln__calloc(nn + 1, 1);
    c->input_of = kiln__calloc(nt + 1, sizeof *c->input_of);
    c->output_of = kiln__calloc(nt + 1, sizeof *c->output_of);
    c->root = kiln__calloc(nt + 1, sizeof *c->root);
    c->group_out = kiln__calloc(nt + 1, sizeof *c->group_out);
    c->tdep = kiln__calloc(nt + 1, 1);
    c->in_dims = kiln__calloc(ni + 1, sizeof *c->in_dims);
    c->in_set = kiln__calloc(ni + 1, 1);
    c->bind = kiln__calloc(nt + 1, sizeof *c->bind);
    c->bind_bytes = kiln__calloc(nt + 1, sizeof *c->bind_bytes);
    c->tptr = kiln__calloc(nt + 1, sizeof *c->tptr);
    c->tbytes = kiln__calloc(nt + 1, sizeof *c->tbytes);
    c->talloc = kiln__calloc(nt + 1, sizeof *c->talloc);
    c->size_val = kiln__calloc(nt + 1, sizeof *c->size_val);
    c->owned = kiln__calloc(no + 1, sizeof *c->owned);
    c->owned_cap = kiln__calloc(no + 1, sizeof *c->owned_cap);
    c->L = kiln__calloc(nl + 1, sizeof *c->L);
    c->prof_ms = kiln__calloc(nl + 1, sizeof *c->prof_ms);
    c->mp_sizes = kiln__calloc(nt + 1, sizeof *c->mp_sizes);
    c->mp_offs = kiln__calloc(nt + 1, sizeof *c->mp_offs);
    c->mp_first = kiln__calloc(nt + 1, sizeof *c->mp_first);
    c->mp_last = kiln__calloc(nt + 1, sizeof *c->mp_last);
    c->mp_t = kiln__calloc(nt + 1, sizeof *c->mp_t);
    c->slot = kiln__calloc(nt + 1, sizeof *c->slot);
    int nv = 0;
    for (size_t l = 0; l < nl; l++) nv += e->layers[l].nin + e->layers[l].nout;
    c->nviews = nv;
    c->views = kiln__calloc((size_t)nv + 1, sizeof *c->views);
    c->view_t = kiln__calloc((size_t)nv + 1, sizeof *c->view_t);
    if (!c->vals || !c->vals_up || !c->dep || !c->input_of || !c->output_of || !c->root || !c->group_out ||
        !c->tdep || !c->in_dims || !c->in_set || !c->bind || !c->bind_bytes || !c->tptr ||
        !c->tbytes || !c->talloc || !c->size_val || !c->owned || !c->owned_cap || !c->L ||
        !c->prof_ms || !c->mp_sizes || !c->mp_offs || !c->mp_first || !c->mp_last || !c->mp_t || !c->slot ||
        !c->views || !c->view_t) {
        rc = kiln__err(KILN_ENOMEM, "out of memory creating a context");
        goto fail;
    }

    /* Dependencies of nodes on size / value symbols. */
    for (int32_t i = 0; i < e->nnodes; i++) {
        const kiln__enode *x = &e->nodes[i];
        if (x->op == KILN_EXPR_CONST) continue;
        if (x->op == KILN_EXPR_SYM) {
            c->dep[i] = x->symkind == KILN__SYM_SIZE ? 1 : x->symkind == KILN__SYM_VALUE ? 2 : 0;
        } else {
            c->dep[i] = c->dep[x->a] | c->dep[x->b];
            if (x->op == KILN_EXPR_SELECT_) c->dep[i] |= c->dep[x->c];
        }
        if (x->op == KILN_EXPR_SYM && x->symkind == KILN__SYM_VALUE) c->has_value = 1;
        if (x->op == KILN_EXPR_SYM && x->symkind == KILN__SYM_SIZE) c->has_size = 1;
    }
    for (size_t t = 0; t < nt; t++) {
        c->input_of[t] = c->output_of[t] = c->group_out[t] = -1;
        const kiln__etensor *et = &e->tensors[t];
        for (int d = 0; d < et->ndim; d++)
            if (c->dep[et->dims[d]] & 1) c->tdep[t] = 1;
        int32_t r = (int32_t)t;
        for (int32_t k = 0; e->tensors[r].alias_of >= 0 && k <= e->ntensors; k++)
            r = e->tensors[r].alias_of;
        c->root[t] = r;
    }
    /* Outputs nothing reads, which their op may skip computing. */
    c->tnull = kiln__calloc(nt + 1, 1);
    if (!c->tnull) {
        rc = kiln__err(KILN_ENOMEM, "out of memory creating a context");
        goto fail;
    }
    for (size_t l = 0; l < nl; l++) {
        const kiln__elayer *el = &e->layers[l];
        const kiln_quick_op *q = el->aot_kernel < 0 && el->op ? el->op->quick : NULL;
        if (!q || !q->optional_outputs) continue;
        for (int32_t k = 0; k < el->nout && k < 32; k++)
            if (q->optional_outputs & (1u << k)) c->tnull[el->out[k]] = 1;
    }
    for (size_t t = 0; t < nt; t++) {
        const kiln__etensor *et = &e->tensors[t];
        if (et->kind != KILN__ET_ACT || et->is_size || et->alias_of >= 0) c->tnull[t] = 0;
        if (c->root[t] != (int32_t)t) c->tnull[c->root[t]] = 0; /* something aliases it */
    }
    for (size_t l = 0; l < nl; l++)
        for (int32_t k = 0; k < e->layers[l].nin; k++)
            if (e->layers[l].in[k] >= 0) c->tnull[e->layers[l].in[k]] = 0;
    for (size_t i = 0; i < ni; i++) c->input_of[e->inputs[i]] = (int32_t)i;
    for (size_t i = 0; i < no; i++) {
        int32_t t = e->outputs[i];
        if (c->output_of[t] < 0) c->output_of[t] = (int32_t)i;
        if (c->group_out[c->root[t]] < 0) c->group_out[c->root[t]] = t;
    }
    /* Inputs start at their fixed dims, dynamic ones at the profile's opt. */
    for (size_t i = 0; i < ni; i++) {
        const kiln__etensor *et = &e->tensors[e->inputs[i]];
        for (int d = 0; d < et->ndim; d++) {
            const kiln__enode *x = &e->nodes[et->dims[d]];
            c->in_dims[i][d] = x->op == KILN_EXPR_CONST ? x->v : e->prof ? e->prof[i][1][d] : 1;
        }
    }

    c->pool = kiln__pool_create(threads > 0 ? threads
                                : e->threads > 0 ? e->threads
                                                 : kiln__cpu_count());
    if (!c->pool) {
        rc = kiln__err(KILN_ENOMEM, "cannot create a thread pool of %d threads", threads);
        goto fail;
    }
    c->exec.device = KILN_DEVICE_CPU;
    c->exec.pool = c->pool;
    c->graphs = 1;
    if (e->device == KILN_DEVICE_CUDA) {
        c->dev = kiln__device_get(KILN_DEVICE_CUDA);
        rc = c->dev ? c->dev->stream_create(&c->own_stream) : KILN_EDEVICE;
        if (!rc) rc = kiln__engine_device_weights((kiln_engine *)e, &c->dweights);
        if (rc) goto fail;
        c->cx.base.device = KILN_DEVICE_CUDA;
        c->cx.base.pool = c->pool;
        c->cx.base.stream = c->own_stream;
        c->cx.allow_tf32 = e->allow_tf32;
        c->fault = host_alloc(c, sizeof *c->fault);
        if (!c->fault) {
            rc = kiln__err(KILN_ENOMEM, "context: no page-locked memory for the GPU fault record");
            goto fail;
        }
        memset(c->fault, 0, sizeof *c->fault);
        c->cx.fault = c->fault;
    }

    /* Views and calls. */
    int v = 0;
    /* the next layer's weights prefetched (kiln_exec.next_w) where the
     * engine's packed weights outgrow the L3 */
    uint64_t packed = 0;
    for (int32_t l = 0; l < e->nlayers; l++)
        for (int32_t i = 0; e->layers[l].prepacked && i < e->layers[l].nin; i++)
            packed += e->layers[l].prepacked[i] ? e->layers[l].prepacked_size[i] : 0;
    const size_t l3 = kiln__cpu_l3_bytes();
    const int next_w_on = l3 > 0 && packed > l3;
    for (size_t l = 0; l < nl; l++) {
        const kiln__elayer *el = &e->layers[l];
        ctx_layer *cl = &c->L[l];
        cl->in = &c->views[v];
        for (int32_t k = 0; k < el->nin; k++) c->view_t[v++] = el->in[k];
        cl->out = &c->views[v];
        for (int32_t k = 0; k < el->nout; k++) {
            c->view_t[v++] = el->out[k];
            if (e->tensors[el->out[k]].is_size) cl->nsize++;
        }
        cl->call.in = cl->in;
        cl->call.nin = el->nin;
        cl->call.out = cl->out;
        cl->call.nout = el->nout;
        cl->gpu = el->device == KILN_DEVICE_CUDA;
        cl->seg_end = -1;
        cl->call.tactic = el->tactic;
        cl->call.exec = cl->gpu ? &c->cx.base : &c->exec;
        cl->call.layer = el->name;
        /* fused epilogues: host callbacks, or on the GPU an activation code
         * (kiln__epi_cuda_act); packed weights are host-side: CPU layers only */
        cl->call.epilogue = el->epi_rt;
        cl->call.prepacked = cl->gpu ? NULL : (const void *const *)el->prepacked;
        const kiln__elayer *nx = next_w_on && (int64_t)l + 1 < (int64_t)e->nlayers ? &e->layers[l + 1] : NULL;
        for (int32_t i = 0; nx && nx->device == KILN_DEVICE_CPU && nx->prepacked && i < nx->nin; i++)
            if (nx->prepacked[i] && nx->prepacked_size[i] >= KILN__NEXT_W_MIN && nx->prepacked_size[i] > cl->next_w_bytes)
                cl->next_w = nx->prepacked[i], cl->next_w_bytes = nx->prepacked_size[i];
        if (el->aot_kernel >= 0) {
            /* an AOT CUDA kernel's module is loaded here, never inside a run or a graph capture */
            if (cl->gpu && (rc = kiln__aot_cuda_load(&e->acu[el->aot_kernel]))) {
                rc = layer_err(el, rc);
                goto fail;
            }
            continue;
        }
        KILN__ASSERT(el->op && el->op->vt && el->op->vt->enqueue);
        cl->vt = el->op->vt;
        cl->enq = kiln__op_enqueue_fn(el->op, (kiln_device_kind)el->device);
        cl->wsf = kiln__op_workspace_fn(el->op, (kiln_device_kind)el->device);
        if (!cl->enq || (cl->gpu && !c->dev)) {
            rc = layer_err(el, kiln__err(KILN_EDEVICE, "placed on the %s device, where its op has no implementation",
                                         cl->gpu ? "cuda" : "cpu"));
            goto fail;
        }
        cl->state = el->state;
        if (cl->vt->attach_to_context) {
            void *cs = NULL;
            rc = cl->vt->attach_to_context(el->state, &cs);
            if (rc) {
                layer_err(el, rc);
                kiln__err_prefix(rc, "attach_to_context");
                goto fail;
            }
            cl->ctx_state = cs;
            if (cs) cl->state = cs;
        }
        cl->call.state = cl->state;
    }
    /* Attribute views of the engine's decoded (immutable) attribute sets. */
    for (size_t l = 0; l < nl; l++) {
        const kiln__elayer *el = &e->layers[l];
        if (el->attrs.v) c->L[l].attrs = kiln__attrset_view(&el->attrs);
        c->L[l].call.attrs = &c->L[l].attrs;
    }
    graph_segments(c);
    c->dirty = 1;
    c->ptrs_dirty = 1;
    *out = c;
    return 0;
fail:
    kiln_context_free(c);
    return rc;
}

KILN_API void kiln_context_free(kiln_context *c) {
    if (!c) return;
    const kiln_engine *e = c->e;
    if (c->L)
        for (int32_t l = 0; l < e->nlayers; l++)
            if (c->L[l].ctx_state && c->L[l].vt && c->L[l].vt->detach_from_context)
                c->L[l].vt->detach_from_context(e->layers[l].state, c->L[l].ctx_state);
    if (c->dev) {
        if (c->gpu_pending) c->dev->stream_sync(c->cx.base.stream);
        graphs_drop(c);
        c->dev->free(c->darena);
        c->dev->free(c->dws);
        c->dev->stream_destroy(c->own_stream);
    }
    if (c->pool) kiln__pool_free(c->pool);
    if (c->owned)
        for (int32_t i = 0; i < e->noutputs; i++) host_free(c, c->owned[i]);
    host_free(c, c->arena);
    host_free(c, c->ws);
    host_free(c, c->fault);
    kiln__free(c->dead);
    void *arrs[] = {c->vals, c->vals_up,     c->dep,      c->input_of,  c->output_of, c->root,
                    c->group_out, c->tdep,    c->in_dims,   c->in_set,    c->bind,
                    c->bind_bytes, c->tptr,   c->tbytes,    c->talloc,    c->size_val,
                    c->owned,    c->owned_cap, c->L,        c->prof_ms,   c->mp_sizes,
                    c->mp_offs,  c->mp_first, c->mp_last,   c->mp_t,      c->slot,      c->views,
                    c->view_t,   c->tnull};
    for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++) kiln__free(arrs[i]);
    kiln__free(c);
}

/* ------------------------------------------------------------ shapes */

static int read_value(kiln_context *c, int32_t t, int32_t elem, int64_t *v) {
    const kiln_engine *e = c->e;
    const kiln__etensor *et = &e->tensors[t];
    int32_t i = c->input_of[t];
    if (i < 0 || !c->bind[t])
        return kiln__err(KILN_EINVAL,
                         "input '%s' must be bound before its values can set shapes", et->name);
    int64_t numel = 1;
    for (int d = 0; d < et->ndim; d++) numel *= c->in_dims[i][d];
    size_t es = kiln_dtype_size((kiln_dtype)et->dtype);
    if (elem >= numel || (uint64_t)(elem + 1) * es > c->bind_bytes[t])
        return kiln__err(KILN_EINVAL, "input '%s': element %d sets a shape, the input holds %lld",
                         et->name, (int)elem, (long long)numel);
    const uint8_t *p = (const uint8_t *)c->bind[t] + (size_t)elem * es;
    if (et->dtype == KILN_DTYPE_I64) {
        memcpy(v, p, 8);
    } else {
        int32_t x;
        memcpy(&x, p, 4);
        *v = x;
    }
    return 0;
}

/* One forward pass over the shape program into V.  upper_mode: size
 * symbols take their upper bound (from c->vals, evaluated before), which
 * bounds the dims that use them. */
static int eval_nodes(kiln_context *c, int64_t *V, int upper_mode) {
    const kiln_engine *e = c->e;
    for (int32_t i = 0; i < e->nnodes; i++) {
        const kiln__enode *x = &e->nodes[i];
        int64_t a = 0, b = 0, r = 0;
        int bad = 0;
        if (x->op != KILN_EXPR_CONST && x->op != KILN_EXPR_SYM) {
            a = V[x->a];
            b = V[x->b];
        }
        switch ((kiln_expr_op)x->op) {
        case KILN_EXPR_CONST: r = x->v; break;
        case KILN_EXPR_SYM:
            if (x->symkind == KILN__SYM_INPUT_DIM) {
                r = c->in_dims[c->input_of[x->a]][x->b];
            } else if (x->symkind == KILN__SYM_SIZE) {
                int32_t up = e->tensors[x->a].upper;
                /* upper mode: the bound itself at upper values when it is
                 * already computed (a bound may use other size symbols) */
                r = !upper_mode ? c->size_val[x->a] : up < 0 ? 0 : up < i ? V[up] : c->vals[up];
            } else {
                int rc = read_value(c, x->a, x->b, &r);
                if (rc) return rc;
            }
            break;
        case KILN_EXPR_ADD: bad = __builtin_add_overflow(a, b, &r); break;
        case KILN_EXPR_SUB: bad = __builtin_sub_overflow(a, b, &r); break;
        case KILN_EXPR_MUL: bad = __builtin_mul_overflow(a, b, &r); break;
        case KILN_EXPR_FLOORDIV:
        case KILN_EXPR_CEILDIV:
        case KILN_EXPR_MOD: {
            if (b == 0 || (a == INT64_MIN && b == -1)) {
                bad = 1;
                break;
            }
            int64_t q = a / b, m = a % b;
            if (m != 0 && ((m < 0) != (b < 0))) q--, m += b; /* floor */
            if (x->op == KILN_EXPR_FLOORDIV) r = q;
            else if (x->op == KILN_EXPR_MOD) r = m;
            else r = m ? q + 1 : q;
            break;
        }
        case KILN_EXPR_MIN: r = a < b ? a : b; break;
        case KILN_EXPR_MAX: r = a > b ? a : b; break;
        case KILN_EXPR_EQ: r = a == b; break;
        case KILN_EXPR_LT: r = a < b; break;
        case KILN_EXPR_SELECT_: r = a ? b : V[x->c]; break;
        default: bad = 1; break;
        }
        if (bad)
            return kiln__err(KILN_ESHAPE,
                             "shape program node %d (op %d on %lld, %lld): division by zero or "
                             "overflow",
                             (int)i, x->op, (long long)a, (long long)b);
        V[i] = r;
    }
    return 0;
}

static int evaluate(kiln_context *c) { return eval_nodes(c, c->vals, 0); }

/* Bytes of engine tensor t with these dims (blocked layouts pad C). */
static int dims_bytes(const kiln__etensor *t, const int64_t *dims, uint64_t *out) {
    int rc = kiln__tensor_bytes((kiln_dtype)t->dtype, (kiln_format)t->format, t->ndim, dims, out);
    return rc ? kiln__err_prefix(rc, "tensor '%s'", t->name) : 0;
}

static void tensor_dims(const kiln_context *c, const kiln__etensor *t, int64_t *dims) {
    for (int d = 0; d < t->ndim; d++) dims[d] = c->vals[t->dims[d]];
}

/* Bytes to reserve for tensor t at the current values. */
static int tensor_capacity(const kiln_context *c, int32_t t, uint64_t *out) {
    const kiln__etensor *et = &c->e->tensors[t];
    if (et->is_size) {
        *out = 8;
        return 0;
    }
    if (c->tdep[t]) {
        /* dims at the size symbols' upper bounds; with a bound on the
         * element count (kiln_shape_numel_bound), the smaller of the two */
        int64_t dims[KILN_MAX_DIMS];
        for (int d = 0; d < et->ndim; d++) dims[d] = c->vals_up[et->dims[d]];
        uint64_t by_dims = UINT64_MAX;
        int rc = dims_bytes(et, dims, &by_dims);
        if (et->upper < 0) {
            *out = by_dims;
            return rc;
        }
        int64_t up = c->vals_up[et->upper];
        uint64_t es = kiln_dtype_size((kiln_dtype)et->dtype);
        if (up < 0 || (uint64_t)up > ((uint64_t)1 << 48) / es)
            return kiln__err(KILN_ESHAPE, "tensor '%s': upper bound %lld elements", et->name,
                             (long long)up);
        uint64_t bytes = (uint64_t)up * es;
        if (et->format == KILN_FORMAT_NCHW8C || et->format == KILN_FORMAT_NCHW16C)
            bytes *= 16; /* generous: padded channels */
        *out = rc || bytes < by_dims ? bytes : by_dims;
        return 0;
    }
    int64_t dims[KILN_MAX_DIMS];
    tensor_dims(c, et, dims);
    int rc = dims_bytes(et, dims, out);
    char from[200], m[400];
    if (rc == KILN_ESHAPE && kiln__input_dims_of(c->e, &t, 1, from, sizeof from) > 0) {
        /* a shape the caller chose (e.g. dynamic dims left at 1): say which */
        snprintf(m, sizeof m, "%s", kiln_errmsg());
        return kiln__err(rc, "%s; its dims follow from %s: give those input dims other values", m, from);
    }
    return rc;
}

/* upper: dims at the size symbols' upper bounds (the data-dependent
 * outputs of the layer that writes their size tensors: what it may fill). */
static int set_view(const kiln_context *c, kiln_tensor *v, int32_t t, int upper) {
    if (t < 0) {
        memset(v, 0, sizeof *v);
        v->dtype = KILN_DTYPE_UNDEFINED;
        return 0;
    }
    const kiln__etensor *et = &c->e->tensors[t];
    int64_t dims[KILN_MAX_DIMS], known[KILN_MAX_DIMS];
    tensor_dims(c, et, dims);
    for (int d = 0; upper && d < et->ndim; d++) dims[d] = c->vals_up[et->dims[d]];
    /* dims a view can describe (strides fit; unknown dims count as 1) */
    uint64_t b;
    for (int d = 0; d < et->ndim; d++) known[d] = dims[d] < 0 ? 1 : dims[d];
    int rc = dims_bytes(et, known, &b);
    if (rc) return rc;
    kiln__tensor_view(v, NULL, (kiln_dtype)et->dtype, (kiln_format)et->format,
                      kiln__etensor_device(c->e, t), et->ndim, dims);
    return 0;
}

static int update_view_dims(kiln_context *c, int from_layer) {
    const kiln_engine *e = c->e;
    for (int32_t l = from_layer; l < e->nlayers; l++) {
        ctx_layer *cl = &c->L[l];
        int n = cl->call.nin + cl->call.nout, sizes = 0;
        for (int k = 0; k < e->layers[l].nout; k++) sizes |= e->layers[l].out[k] >= 0 && e->tensors[e->layers[l].out[k]].is_size;
        for (int k = 0; k < n; k++) {
            kiln_tensor *v = &cl->in[k]; /* in and out are contiguous */
            int32_t t = c->view_t[v - c->views];
            void *d = v->data;
            int rc = set_view(c, v, t, sizes && k >= cl->call.nin && t >= 0 && c->tdep[t]);
            if (rc) return layer_err(&e->layers[l], rc);
            v->data = d;
        }
    }
    return 0;
}

/* This machine's memory in bytes (0: unknown). */
static uint64_t phys_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

/* Host memory of the context: page-locked for CUDA engines (copies to and
 * from it are truly asynchronous), else aligned heap memory. */
static void *host_alloc(const kiln_context *c, size_t n) {
    void *q = NULL;
    if (c->dev) return c->dev->host_alloc(n, &q) ? NULL : q;
    return kiln__aligned_alloc(n);
}

static void host_free(const kiln_context *c, void *p) {
    if (!p) return;
    if (c->dev) c->dev->host_free(p);
    else kiln__aligned_free(p);
}

static int grow(kiln_context *c, uint8_t **p, size_t *cap, size_t need) {
    if (need <= *cap && *p) return 0;
    /* More than the machine has (data-dependent dims reserved at loose upper
     * bounds, say): a clear error rather than an allocator's abort. */
    uint64_t phys = phys_bytes();
    if (phys && need > phys)
        return kiln__err(KILN_ENOMEM, "out of memory: %zu bytes of context memory needed, more than this machine's "
                         "%llu (tensors with data-dependent dims get memory for their upper bounds)", need,
                         (unsigned long long)phys);
    size_t n = need > *cap * 3 / 2 ? need : *cap * 3 / 2;
    if (phys && n > phys) n = need;
    if (n < 64) n = 64;
    void *q = host_alloc(c, n);
    if (!q) return kiln__err_prefix(KILN_ENOMEM, "out of memory: %zu bytes of context memory", n);
    host_free(c, *p);
    *p = q;
    *cap = n;
    return 0;
}

/* Device memory of at least `need` bytes (the old block is freed once the
 * GPU is done with it; captured graphs point into it, so they go too). */
static int dgrow(kiln_context *c, uint8_t **p, size_t *cap, size_t need, const char *what) {
    if (need <= *cap && *p) return 0;
    int rc = gpu_wait(c);
    if (rc) return rc;
    graphs_drop(c);
    c->dev->free(*p);
    *p = NULL;
    *cap = 0;
    void *q = NULL;
    if ((rc = c->dev->alloc(need, &q))) return kiln__err_prefix(rc, "context device %s", what);
    *p = q;
    *cap = need;
    return 0;
}

static uint64_t debug_slack(const kiln_context *c) { return c->debug ? CANARY : 0; }

/* Sizes, memory plan, views, workspaces: after evaluate(). */
static int plan(kiln_context *c) {
    const kiln_engine *e = c->e;
    uint64_t slack = debug_slack(c);
    int rc;
    if (c->has_size && (rc = eval_nodes(c, c->vals_up, 1))) return rc;
    for (int32_t t = 0; t < e->ntensors; t++) {
        if ((rc = tensor_capacity(c, t, &c->tbytes[t]))) return rc;
        c->talloc[t] = c->tbytes[t] + slack;
    }
    /* Groups' sizes: the largest member. */
    for (int32_t t = 0; t < e->ntensors; t++) {
        int32_t r = c->root[t];
        if (r != t && c->talloc[t] > c->talloc[r]) c->talloc[r] = c->talloc[t];
    }
    /* One arena per memory space: roots of activation groups holding no
     * network output, planned separately. */
    for (int space = 0; space < (c->dev ? 2 : 1); space++) {
        int n = 0;
        for (int32_t t = 0; t < e->ntensors; t++) {
            const kiln__etensor *et = &e->tensors[t];
            c->slot[t] = -1;
            if (c->root[t] != t || c->group_out[t] >= 0 || et->loc != space) continue;
            if (et->kind != KILN__ET_ACT && et->kind != KILN__ET_OUTPUT) continue;
            c->mp_t[n] = t;
            c->mp_sizes[n] = c->talloc[t];
            c->mp_first[n] = INT32_MAX;
            c->mp_last[n] = -1;
            n++;
        }
        /* A group lives from its first member's producer to its last reader. */
        for (int k = 0; k < n; k++) c->slot[c->mp_t[k]] = k;
        for (int32_t t = 0; t < e->ntensors; t++) {
            int k = c->slot[c->root[t]];
            if (k < 0) continue;
            const kiln__etensor *et = &e->tensors[t];
            int32_t f = et->first < 0 ? 0 : et->first, l = et->last;
            if (l < f) l = f;
            if (f < c->mp_first[k]) c->mp_first[k] = f;
            if (l > c->mp_last[k]) c->mp_last[k] = l;
        }
        uint64_t total = 0;
        if ((rc = kiln__memplan(n, c->mp_sizes, c->mp_first, c->mp_last, NULL, c->mp_offs, &total)))
            return kiln__err_prefix(rc, "planning %s memory", space ? "device" : "activation");
        uint8_t *base;
        if (space == KILN_DEVICE_CPU) {
            if ((rc = grow(c, &c->arena, &c->arena_cap, (size_t)total))) return rc;
            base = c->arena;
        } else {
            if ((rc = dgrow(c, &c->darena, &c->darena_cap, (size_t)total, "activations"))) return rc;
            base = c->darena;
        }
        for (int k = 0; k < n; k++) c->tptr[c->mp_t[k]] = base + c->mp_offs[k];
    }
    /* Workspaces (views must hold current dims): one per memory space, the
     * largest a layer there needs. */
    if ((rc = update_view_dims(c, 0))) return rc;
    size_t ws = 0, dws = 0;
    for (int32_t l = 0; l < e->nlayers; l++) {
        ctx_layer *cl = &c->L[l];
        cl->ws = 0;
        const kiln__elayer *el = &e->layers[l];
        if (!cl->vt && !(cl->gpu && el->aot_kernel >= 0)) continue;
        if (!cl->vt) { /* AOT CUDA kernel: its hidden scratch pointers */
            if ((rc = kiln__aot_cuda_scratch(&e->acu[el->aot_kernel], c->vals, &cl->ws))) return layer_err(el, rc);
        } else if (cl->wsf) {
            cl->ws = cl->wsf(cl->state, &cl->call);
        }
        if ((rc = kiln__misuse_take(0))) return layer_err(&e->layers[l], rc);
        size_t *m = cl->gpu ? &dws : &ws;
        if (cl->ws > *m) *m = cl->ws;
    }
    if (ws) {
        uint8_t *p = c->ws;
        if ((rc = grow(c, &p, &c->ws_cap, ws))) return rc;
        c->ws = p;
    }
    if (dws && (rc = dgrow(c, &c->dws, &c->dws_cap, dws, "workspace"))) return rc;
    for (int32_t l = 0; l < e->nlayers; l++) {
        c->L[l].call.workspace = c->L[l].ws ? (c->L[l].gpu ? (void *)c->dws : c->ws) : NULL;
        c->L[l].call.workspace_size = c->L[l].ws;
    }
    c->ptrs_dirty = 1;
    return 0;
}

/* A CPU layer that reads tensor t (or its alias root), or NULL. */
static const kiln__elayer *cpu_reader(const kiln_context *c, int32_t t) {
    const kiln_engine *e = c->e;
    for (int32_t l = 0; l < e->nlayers; l++) {
        const kiln__elayer *L = &e->layers[l];
        if (L->device == KILN_DEVICE_CUDA) continue;
        for (int32_t k = 0; k < L->nin; k++)
            if (L->in[k] >= 0 && c->root[L->in[k]] == c->root[t]) return L;
    }
    return NULL;
}

/* Data pointers of inputs, outputs and aliases, then the views.  Outputs
 * live in context memory when unbound, and always in debug mode (staged,
 * with room for the canary).  Device memory bound to I/O (CUDA engines):
 * inputs are read by the GPU's copy layers (a CPU layer reading one is an
 * error), and an output the GPU produces that no CPU layer reads is written
 * there directly (zero copy) instead of through pinned host staging. */
static int patch_pointers(kiln_context *c) {
    const kiln_engine *e = c->e;
    int (*is_dev)(const void *) = c->dev ? c->dev->is_device_ptr : NULL;
    for (int32_t t = 0; t < e->ntensors; t++) {
        const kiln__etensor *et = &e->tensors[t];
        if (et->kind == KILN__ET_INPUT) {
            c->tptr[t] = c->bind[t];
            const kiln__elayer *L = is_dev && c->bind[t] && is_dev(c->bind[t]) ? cpu_reader(c, t) : NULL;
            if (L)
                return kiln__err(KILN_EINVAL, "input '%s' is bound to device memory, but layer '%s' reads it on the "
                                 "CPU: bind host memory", et->name, L->name);
        } else if (et->kind == KILN__ET_CONST) {
            c->tptr[t] = et->loc == KILN_DEVICE_CUDA ? (uint8_t *)c->dweights + et->const_off
                                                     : (uint8_t *)kiln__etensor_const(e, et);
        }
    }
    for (int32_t i = 0; i < e->noutputs; i++) {
        int32_t t = e->outputs[i];
        if (c->output_of[t] != i) continue;
        const kiln__etensor *et = &e->tensors[t];
        if (et->kind == KILN__ET_INPUT || et->kind == KILN__ET_CONST) continue;
        uint8_t *p = c->bind[t];
        /* outputs copied from the GPU land in pinned context memory, then
         * in the user's buffer (pinned staging) */
        int staged = c->dev && et->first >= 0 && e->layers[et->first].device == KILN_DEVICE_CUDA &&
                     !(p && is_dev && is_dev(p) && !cpu_reader(c, t));
        if (!p || c->debug || staged) {
            size_t need = (size_t)c->talloc[c->root[t]] + CANARY;
            int rc = grow(c, &c->owned[i], &c->owned_cap[i], need);
            if (rc) return rc;
            p = c->owned[i];
        }
        c->tptr[c->root[t]] = p;
    }
    for (int32_t t = 0; t < e->ntensors; t++)
        if (c->root[t] != t) c->tptr[t] = c->tptr[c->root[t]];
    for (int32_t t = 0; t < e->ntensors; t++)
        if (c->tnull[t]) c->tptr[t] = NULL;
    for (int v = 0; v < c->nviews; v++)
        c->views[v].data = c->view_t[v] >= 0 ? c->tptr[c->view_t[v]] : NULL;
    c->ptrs_dirty = 0;
    graphs_drop(c); /* they hold the old pointers */
    return 0;
}

static int on_shape_change(kiln_context *c, int from) {
    const kiln_engine *e = c->e;
    for (int32_t l = from; l < e->nlayers; l++) {
        ctx_layer *cl = &c->L[l];
        cl->check = 1; /* before it next runs, when its inputs' dims are final */
        if (!cl->vt || !cl->vt->on_shape_change) continue;
        int rc = cl->vt->on_shape_change(cl->state, cl->in, cl->call.nin, cl->out, cl->call.nout);
        if (rc) return layer_err(&e->layers[l], rc);
    }
    return 0;
}

/* ------------------------------------------------------------ API */

KILN_API int kiln_context_set_input_shape(kiln_context *c, const char *name, int ndim,
                                          const int64_t *dims) {
    KILN__ARG(c && name && (dims || ndim == 0), KILN_EINVAL);
    const kiln_engine *e = c->e;
    int is_in = 0;
    int32_t t = find_io(c, name, &is_in);
    if (t < 0 || !is_in) {
        if (t >= 0) return kiln__err(KILN_EINVAL, "'%s' is an output, not an input", name);
        return no_such_io(c, name);
    }
    const kiln__etensor *et = &e->tensors[t];
    int32_t i = c->input_of[t];
    if (ndim != et->ndim)
        return kiln__err(KILN_ESHAPE, "input '%s' has %d dims, %d given", name, et->ndim, ndim);
    for (int d = 0; d < ndim; d++) {
        const kiln__enode *x = &e->nodes[et->dims[d]];
        if (x->op == KILN_EXPR_CONST) {
            if (dims[d] != x->v)
                return kiln__err(KILN_ESHAPE, "input '%s' dim %d is fixed at %lld, %lld given",
                                 name, d, (long long)x->v, (long long)dims[d]);
            continue;
        }
        int64_t lo = e->prof ? e->prof[i][0][d] : 0, hi = e->prof ? e->prof[i][2][d] : INT64_MAX;
        if (dims[d] < lo || dims[d] > hi || dims[d] < 0)
            return kiln__err(KILN_EPROFILE, "input '%s' dim %d = %lld outside profile [%lld, %lld]",
                             name, d, (long long)dims[d], (long long)lo, (long long)hi);
    }
    int changed = 0;
    for (int d = 0; d < ndim; d++)
        if (c->in_dims[i][d] != dims[d]) changed = 1;
    memcpy(c->in_dims[i], dims, sizeof(int64_t) * (size_t)ndim);
    c->in_set[i] = 1;
    if (changed) {
        c->dirty = 1;
        c->ran = 0;
    }
    return 0;
}

/* What an input bound as (NULL, 0) points at: a zero-size tensor is a
 * valid binding (its kernels read nothing), and it must not read as "not
 * bound" nor hand kernels a NULL pointer.  A non-empty one fails the size
 * check at run time. */
static _Alignas(64) uint8_t k_empty_input[64];

KILN_API int kiln_context_bind(kiln_context *c, const char *name, void *data, size_t bytes) {
    KILN__ARG(c && name, KILN_EINVAL);
    int is_in = 0;
    int32_t t = find_io(c, name, &is_in);
    if (t < 0) return no_such_io(c, name);
    if (!data && bytes)
        return kiln__err(KILN_EINVAL, "kiln_context_bind('%s'): NULL data with %zu bytes", name, bytes);
    if (!data && is_in) data = k_empty_input;
    if (c->bind[t] != data) c->ptrs_dirty = 1;
    c->bind[t] = data;
    c->bind_bytes[t] = data ? bytes : 0;
    if (is_in && c->has_value) c->dirty = 1;
    return 0;
}

KILN_API void kiln_context_set_debug(kiln_context *c, int on) {
    KILN__ARG(c, );
    if (!!on != c->debug) {
        c->debug = !!on;
        c->dirty = 1;
    }
}

KILN_API void kiln_context_set_profiling(kiln_context *c, int on) {
    KILN__ARG(c, );
    c->profiling = !!on;
}

KILN_API int kiln_context_profile(const kiln_context *c, int layer, const char **name, double *ms) {
    KILN__ARG(c, KILN_EINVAL);
    if (layer < 0 || layer >= c->e->nlayers)
        return kiln__err(KILN_EINVAL, "layer %d out of range [0, %d)", layer, (int)c->e->nlayers);
    if (name) *name = c->e->layers[layer].name;
    if (ms) *ms = c->prof_ms[layer];
    return 0;
}

static int refresh(kiln_context *c) {
    int rc = evaluate(c);
    if (rc) return rc;
    if ((rc = plan(c))) return rc;
    if ((rc = patch_pointers(c))) return rc;
    if ((rc = on_shape_change(c, 0))) return rc;
    c->dirty = 0;
    return 0;
}

KILN_API int kiln_context_shape(const kiln_context *cc, const char *name, int *ndim,
                                int64_t *dims) {
    KILN__ARG(cc && name && ndim && dims, KILN_EINVAL);
    kiln_context *c = (kiln_context *)cc; /* values are a cache */
    int is_in = 0;
    int32_t t = find_io(c, name, &is_in);
    if (t < 0) return no_such_io(c, name);
    const kiln__etensor *et = &c->e->tensors[t];
    if (c->dirty && !is_in) {
        int rc = evaluate(c);
        if (rc) return rc;
    }
    *ndim = et->ndim;
    if (is_in) {
        memcpy(dims, c->in_dims[c->input_of[t]], sizeof(int64_t) * et->ndim);
        return 0;
    }
    for (int d = 0; d < et->ndim; d++)
        dims[d] = (c->dep[et->dims[d]] & 1) && !c->ran ? -1 : c->vals[et->dims[d]];
    return 0;
}

KILN_API const void *kiln_context_output(const kiln_context *c, const char *name) {
    KILN__ARG(c && name, NULL);
    int is_in = 0;
    int32_t t = find_io(c, name, &is_in);
    if (t < 0 || is_in) {
        if (t < 0) no_such_io(c, name);
        else kiln__err(KILN_EINVAL, "'%s' is an input, not an output", name);
        return NULL;
    }
    if (c->bind[t]) return c->bind[t];
    return c->tptr[t];
}

KILN_API int kiln_context_output_capacity(const kiln_context *cc, const char *name,
                                          size_t *bytes) {
    KILN__ARG(cc && name && bytes, KILN_EINVAL);
    kiln_context *c = (kiln_context *)cc;
    int is_in = 0;
    int32_t t = find_io(c, name, &is_in);
    if (t < 0) return no_such_io(c, name);
    if (c->dirty) {
        int rc = evaluate(c);
        if (rc) return rc;
    }
    if (c->has_size) {
        int rc = eval_nodes(c, c->vals_up, 1);
        if (rc) return rc;
    }
    uint64_t b = 0;
    int rc = tensor_capacity(c, t, &b);
    if (rc) return rc;
    *bytes = (size_t)b;
    return 0;
}

/* ------------------------------------------------------------ debug mode */

static size_t poison_pattern(kiln_dtype dt, uint8_t pat[8]) {
    size_t es = kiln_dtype_size(dt);
    memset(pat, 0xA5, 8);
    switch (dt) {
    case KILN_DTYPE_F32: { uint32_t v = 0x7FA5A5A5u; memcpy(pat, &v, 4); break; }
    case KILN_DTYPE_F64: { uint64_t v = 0x7FF5A5A5A5A5A5A5ull; memcpy(pat, &v, 8); break; }
    case KILN_DTYPE_F16: { uint16_t v = 0x7DA5u; memcpy(pat, &v, 2); break; }
    case KILN_DTYPE_BF16: { uint16_t v = 0x7FA5u; memcpy(pat, &v, 2); break; }
    default: break;
    }
    return es;
}

static void debug_before(kiln_context *c, int32_t l) {
    const kiln_engine *e = c->e;
    const kiln__elayer *el = &e->layers[l];
    for (int32_t k = 0; k < el->nout; k++) {
        int32_t t = el->out[k];
        const kiln__etensor *et = &e->tensors[t];
        uint8_t *p = c->tptr[t];
        if (!p || et->loc != KILN_DEVICE_CPU) continue; /* device memory: not checked */
        uint64_t n = c->tbytes[t];
        if (et->alias_of < 0) {
            uint8_t pat[8];
            size_t es = poison_pattern((kiln_dtype)et->dtype, pat);
            for (uint64_t i = 0; i + es <= n; i += es) memcpy(p + i, pat, es);
        }
        memset(p + n, CANARY_BYTE, CANARY);
    }
}

static int debug_after(kiln_context *c, int32_t l) {
    const kiln_engine *e = c->e;
    const kiln__elayer *el = &e->layers[l];
    char ob[256];
    for (int32_t k = 0; k < el->nout; k++) {
        int32_t t = el->out[k];
        const kiln__etensor *et = &e->tensors[t];
        const uint8_t *p = c->tptr[t];
        if (!p || et->loc != KILN_DEVICE_CPU) continue;
        uint64_t cap = c->tbytes[t];
        for (uint32_t i = 0; i < CANARY; i++)
            if (p[cap + i] != CANARY_BYTE)
                return kiln__err(KILN_EDEBUG,
                                 "layer '%s' (%s) wrote past the end of output '%s' (%llu bytes; "
                                 "guard byte %u after the end was changed)",
                                 el->name, layer_op_str(el, ob, sizeof ob), et->name,
                                 (unsigned long long)cap, i);
        if (et->alias_of >= 0) continue;
        int64_t dims[KILN_MAX_DIMS];
        tensor_dims(c, et, dims);
        uint64_t bytes = 0;
        if (dims_bytes(et, dims, &bytes) || bytes > cap) continue;
        uint8_t pat[8];
        size_t es = poison_pattern((kiln_dtype)et->dtype, pat);
        /* 1- and 2-byte integers can hold the poison value for real: for
         * them only a run of 16 poisoned elements (all of a smaller tensor)
         * counts as unwritten. */
        kiln_dtype dt = (kiln_dtype)et->dtype;
        uint64_t run = es <= 2 && dt != KILN_DTYPE_BOOL && dt != KILN_DTYPE_F16 && dt != KILN_DTYPE_BF16 ? 16 : 1;
        for (uint64_t i = 0; i + es <= bytes; i += es) {
            if (memcmp(p + i, pat, es)) continue;
            uint64_t r = 1, need = run < bytes / es ? run : bytes / es;
            while (r < need && i + (r + 1) * es <= bytes && !memcmp(p + i + r * es, pat, es)) r++;
            if (r < need) continue;
            uint64_t idx = i / es, rem = idx;
            char where[160];
            size_t w = 0;
            where[0] = 0;
            if (et->format == KILN_FORMAT_LINEAR) {
                int64_t ix[KILN_MAX_DIMS];
                for (int d = et->ndim - 1; d >= 0; d--) {
                    ix[d] = dims[d] ? (int64_t)(rem % (uint64_t)dims[d]) : 0;
                    rem = dims[d] ? rem / (uint64_t)dims[d] : 0;
                }
                w += (size_t)snprintf(where, sizeof where, " (index [");
                for (int d = 0; d < et->ndim && w < sizeof where; d++)
                    w += (size_t)snprintf(where + w, sizeof where - w, "%s%lld", d ? "," : "",
                                          (long long)ix[d]);
                if (w < sizeof where) snprintf(where + w, sizeof where - w, "])");
            }
            return kiln__err(KILN_EDEBUG, "layer '%s' (%s) output '%s' element %llu%s was not written",
                             el->name, layer_op_str(el, ob, sizeof ob), et->name,
                             (unsigned long long)idx, where);
        }
    }
    return 0;
}

/* ------------------------------------------------------------ run */

static int run_aot(kiln_context *c, int32_t l) {
    const kiln_engine *e = c->e;
    const kiln__elayer *el = &e->layers[l];
    ctx_layer *cl = &c->L[l];
    void *in[KILN_MAX_IO], *out[KILN_MAX_IO];
    for (int k = 0; k < cl->call.nin; k++) in[k] = cl->in[k].data;
    for (int k = 0; k < cl->call.nout; k++) out[k] = cl->out[k].data;
    if (cl->gpu) return kiln__aot_cuda_launch(&e->acu[el->aot_kernel], &cl->call, c->vals);
    return kiln__aot_launch(&e->aot[el->aot_kernel], &c->exec, in, out, c->vals);
}

/* A GPU layer (or graph segment [l, last]; l = -1: a copy) was just
 * enqueued. */
static void gpu_queued(kiln_context *c, int32_t l, int32_t last) {
    if (!c->gpu_pending) c->q_first = l, c->q_last = last;
    else if (l >= 0) c->q_last = last;
    c->gpu_pending = 1;
}

/* "layer 'a'" or "one of layers 'a', 'b', ...": the GPU layers enqueued
 * since the last wait (which one failed is known only to a debug-mode
 * run, which waits after every layer). */
static void queued_layers(const kiln_context *c, char *buf, size_t size) {
    const kiln_engine *e = c->e;
    int32_t a = c->q_first, b = c->q_last < a ? a : c->q_last;
    if (a < 0 || a >= e->nlayers || b >= e->nlayers) {
        snprintf(buf, size, "a copy between host and device");
        return;
    }
    int n = 0;
    for (int32_t l = a; l <= b; l++) n += c->L[l].gpu;
    size_t k = (size_t)snprintf(buf, size, "%s", n > 1 ? "one of layers " : "layer ");
    for (int32_t l = a, i = 0; l <= b && k < size; l++) {
        if (!c->L[l].gpu) continue;
        if (k + strlen(e->layers[l].name) + 8 >= size) {
            snprintf(buf + k, size - k, ", ...");
            break;
        }
        k += (size_t)snprintf(buf + k, size - k, "%s'%s'", i++ ? ", " : "", e->layers[l].name);
    }
}

/* GPU work queued and not waited for: the host must wait before it reads
 * or writes memory the GPU may be using.  The wait is also where the GPU's
 * errors surface: a CUDA error (a kernel fault) names the layers queued
 * since the last wait and kills the context (a fault is sticky: the
 * process's CUDA context is lost); a report in the fault record (a kernel
 * found an index out of range) names its layer and is cleared, the
 * context stays usable. */
static int gpu_wait(kiln_context *c) {
    if (!c->gpu_pending) return 0;
    c->gpu_pending = 0;
    const kiln_engine *e = c->e;
    int rc = c->dev->stream_sync(c->cx.base.stream);
    if (rc) {
        char what[600], msg[1400];
        queued_layers(c, what, sizeof what);
        snprintf(msg, sizeof msg,
                 "%s failed on the GPU: %s; this context is dead: free it and create a new one (after a "
                 "kernel fault CUDA keeps failing in this process until it restarts)",
                 what, kiln_errmsg());
        kiln__free(c->dead);
        c->dead = kiln__strdup(msg);
        return kiln__err(rc, "%s", msg);
    }
    if (!c->fault || !c->fault->code) return 0;
    kiln_cu_fault f = *c->fault;
    memset(c->fault, 0, sizeof *c->fault);
    const kiln__elayer *el = NULL;
    for (int32_t l = 0; l < e->nlayers && !el; l++)
        if ((uint64_t)(uintptr_t)e->layers[l].name == f.tag) el = &e->layers[l];
    char ob[256], what[600];
    if (el) snprintf(what, sizeof what, "layer '%s' (%s)", el->name, layer_op_str(el, ob, sizeof ob));
    else queued_layers(c, what, sizeof what);
    return kiln__err(KILN_EINVAL, "%s: input %d element %lld is %lld, out of range [%lld, %lld) (found on the GPU)",
                     what, f.input, (long long)f.pos, (long long)f.value, (long long)f.lo, (long long)f.hi);
}


/* A layer produced size tensors: read, check, bind, re-evaluate. */
static int after_size_layer(kiln_context *c, int32_t l) {
    const kiln_engine *e = c->e;
    const kiln__elayer *el = &e->layers[l];
    char ob[256];
    for (int32_t k = 0; k < el->nout; k++) {
        int32_t t = el->out[k];
        const kiln__etensor *et = &e->tensors[t];
        if (!et->is_size) continue;
        int64_t v;
        if (et->loc == KILN_DEVICE_CUDA) { /* a sync point: the host needs the value now */
            int rc = c->dev->copy(&v, c->tptr[t], 8, c->cx.base.stream);
            gpu_queued(c, -1, -1);
            if (!rc) rc = gpu_wait(c);
            if (rc) return rc;
        } else {
            memcpy(&v, c->tptr[t], 8);
        }
        int64_t up = et->upper >= 0 ? c->vals[et->upper] : INT64_MAX;
        if (v < 0 || v > up)
            return kiln__err(KILN_EKERNEL,
                             "layer '%s' (%s): size tensor '%s' = %lld, outside [0, %lld] (its "
                             "upper bound)",
                             el->name, layer_op_str(el, ob, sizeof ob), et->name, (long long)v,
                             (long long)up);
        c->size_val[t] = v;
    }
    int rc = evaluate(c);
    if (rc) return rc;
    /* Data-dependent tensors must fit what was reserved for them. */
    for (int32_t t = 0; t < e->ntensors; t++) {
        if (!c->tdep[t]) continue;
        int64_t dims[KILN_MAX_DIMS];
        uint64_t b = 0;
        tensor_dims(c, &e->tensors[t], dims);
        if ((rc = dims_bytes(&e->tensors[t], dims, &b))) return layer_err(el, rc);
        if (b > c->tbytes[t])
            return kiln__err(KILN_EKERNEL,
                             "layer '%s' (%s): tensor '%s' needs %llu bytes at its actual shape, "
                             "its upper bound allows %llu",
                             el->name, layer_op_str(el, ob, sizeof ob), e->tensors[t].name,
                             (unsigned long long)b, (unsigned long long)c->tbytes[t]);
    }
    if ((rc = update_view_dims(c, l + 1))) return rc;
    return on_shape_change(c, l + 1);
}


/* Layers [l, end) of a graph segment: replay its CUDA graph, or capture it
 * (a run after the first at these shapes and pointers: the first one ran
 * eagerly, so lazy initialisation -- module loads, cuBLASLt plans -- is not
 * captured).  A capture that fails leaves the segment to run eagerly. */
static int run_segment(kiln_context *c, int32_t l, int *done) {
    ctx_layer *cl = &c->L[l];
    void *stream = c->cx.base.stream;
    *done = 0;
    if (!cl->graph) {
        if (!c->ran) return 0;
        int rc = c->dev->graph_begin(stream), began = !rc;
        int32_t broke = -1; /* the layer whose enqueue failed inside the capture */
        char why[512] = "";
        for (int32_t k = l; k < cl->seg_end && !rc; k++) {
            rc = c->L[k].vt ? c->L[k].enq(c->L[k].state, &c->L[k].call) : run_aot(c, k);
            if (rc) layer_err(&c->e->layers[k], rc), broke = k;
        }
        if (rc) snprintf(why, sizeof why, "%s", kiln_errmsg()); /* ending the capture sets its own */
        void *g = NULL;
        int erc = began ? c->dev->graph_end(stream, &g) : 0;
        if (!rc && erc) snprintf(why, sizeof why, "%s", kiln_errmsg());
        if (rc || erc) {
            /* A device that cannot capture is no news; a capture that a
             * layer broke costs every run of the segment its graph: said
             * once per context at the default level, naming the layer. */
            const kiln__elayer *L0 = &c->e->layers[l], *L1 = &c->e->layers[cl->seg_end - 1];
            int warn = began && !c->graph_warned;
            c->graph_warned |= warn;
            if (broke >= 0)
                kiln__log(warn ? KILN_LOG_WARN : KILN_LOG_VERBOSE, "context: CUDA graph capture broken by layer '%s' "
                          "(layers '%s'..'%s' run without a CUDA graph): %s", c->e->layers[broke].name, L0->name,
                          L1->name, why);
            else
                kiln__log(warn ? KILN_LOG_WARN : KILN_LOG_VERBOSE, "context: CUDA graph capture of layers '%s'..'%s' "
                          "failed (they run without a CUDA graph): %s", L0->name, L1->name, why);
            if (g) c->dev->graph_destroy(g);
            cl->seg_end = -1;
            return 0;
        }
        cl->graph = g;
    }
    int rc = c->dev->graph_launch(cl->graph, stream);
    if (rc) return kiln__err_prefix(rc, "CUDA graph of layers '%s'..'%s'", c->e->layers[l].name,
                                    c->e->layers[cl->seg_end - 1].name);
    gpu_queued(c, l, cl->seg_end - 1);
    *done = 1;
    return 0;
}

static void graphs_drop(kiln_context *c) {
    if (!c->dev || !c->L) return;
    int any = 0;
    for (int32_t l = 0; l < c->e->nlayers; l++) any |= c->L[l].graph != NULL;
    if (!any) return;
    if (c->gpu_pending) gpu_wait(c);
    for (int32_t l = 0; l < c->e->nlayers; l++) {
        if (c->L[l].graph) c->dev->graph_destroy(c->L[l].graph);
        c->L[l].graph = NULL;
    }
}

/* Segments a CUDA graph may capture: runs of two or more GPU layers whose
 * tensors all live in device memory (host copies stay outside: pageable
 * memory cannot be captured), none graph-unsafe.  Engines whose shapes
 * depend on values read during the run (size tensors, value symbols) are
 * not captured at all. */
static void graph_segments(kiln_context *c) {
    const kiln_engine *e = c->e;
    if (!c->dev || c->has_size || c->has_value) return;
    for (int32_t l = 0; l < e->nlayers; l++) {
        ctx_layer *cl = &c->L[l];
        const kiln__elayer *el = &e->layers[l];
        /* AOT CUDA kernels are plain launches: capturable */
        cl->graph_ok = cl->gpu && (cl->vt ? !kiln__op_graph_unsafe(el->op) : el->aot_kernel >= 0);
        for (int32_t k = 0; k < el->nin && cl->graph_ok; k++)
            if (el->in[k] >= 0 && e->tensors[el->in[k]].loc != KILN_DEVICE_CUDA) cl->graph_ok = 0;
        for (int32_t k = 0; k < el->nout && cl->graph_ok; k++)
            if (e->tensors[el->out[k]].loc != KILN_DEVICE_CUDA) cl->graph_ok = 0;
    }
    for (int32_t l = 0; l < e->nlayers;) {
        int32_t end = l;
        while (end < e->nlayers && c->L[end].graph_ok) end++;
        if (end - l >= 2) c->L[l].seg_end = end;
        l = end > l ? end : l + 1;
    }
}

KILN_API void kiln_context_set_cuda_graphs(kiln_context *c, int on) {
    KILN__ARG(c, );
    c->graphs = !!on;
    if (!on) graphs_drop(c);
}

KILN_API int kiln_context_set_stream(kiln_context *c, void *stream) {
    KILN__ARG(c, KILN_EINVAL);
    if (!c->dev) {
        if (!stream) return 0;
        return kiln__err(KILN_EINVAL, "kiln_context_set_stream: the engine runs on the CPU only (no stream)");
    }
    void *s = stream ? stream : c->own_stream;
    if (s == c->cx.base.stream) return 0;
    int rc = gpu_wait(c);
    c->cx.base.stream = s;
    return rc;
}

KILN_API int kiln_context_synchronize(kiln_context *c) {
    KILN__ARG(c, KILN_EINVAL);
    return c->dev ? gpu_wait(c) : 0;
}

static int run(kiln_context *c, int sync) {
    const kiln_engine *e = c->e;
    /* Memory the GPU may still use (the last enqueue's buffers, arenas a
     * re-plan would free) is touched only once the GPU is done. */
    if (c->dead) return kiln__err(KILN_EDEVICE, "%s", c->dead);
    int rc = gpu_wait(c);
    if (rc || (rc = kiln__engine_check_data(e, &c->exec))) return rc; /* deferred checksums (data_check.c) */
    kiln__misuse_clear();
    for (int32_t i = 0; i < e->ninputs; i++) {
        int32_t t = e->inputs[i];
        if (!c->bind[t])
            return kiln__err(KILN_EINVAL, "input '%s' is not bound (kiln_context_bind)",
                             e->tensors[t].name);
        if (!c->in_set[i] && e->prof) {
            const kiln__etensor *et = &e->tensors[t];
            for (int d = 0; d < et->ndim; d++)
                if (e->nodes[et->dims[d]].op != KILN_EXPR_CONST)
                    return kiln__err(KILN_EINVAL,
                                     "input '%s' has dynamic dims: set them with "
                                     "kiln_context_set_input_shape",
                                     et->name);
        }
    }
    if ((c->dirty || c->has_value) && (rc = refresh(c))) return rc;
    /* Bound buffers must hold their tensors. */
    for (int32_t i = 0; i < e->ninputs + e->noutputs; i++) {
        int32_t t = i < e->ninputs ? e->inputs[i] : e->outputs[i - e->ninputs];
        if (!c->bind[t]) continue;
        /* an output's buffer holds its whole in-place chain */
        uint64_t need = c->tbytes[t];
        if (i >= e->ninputs && c->talloc[c->root[t]] - (debug_slack(c)) > need)
            need = c->talloc[c->root[t]] - debug_slack(c);
        if (c->bind_bytes[t] < need)
            return kiln__err(KILN_EINVAL, "%s '%s' needs %llu bytes, buffer has %zu",
                             i < e->ninputs ? "input" : "output", e->tensors[t].name,
                             (unsigned long long)need, c->bind_bytes[t]);
    }
    if (c->ptrs_dirty && (rc = patch_pointers(c))) return rc;

    const int debug = c->debug, prof = c->profiling;
    const int graphs = c->graphs && !debug && !prof;
    const int32_t nl = e->nlayers;
    ctx_layer *L = c->L;
    for (int32_t l = 0; l < nl;) {
        ctx_layer *cl = &L[l];
        double t0 = 0;
        if (graphs && cl->seg_end > l) {
            int done = 0;
            if ((rc = run_segment(c, l, &done))) return rc;
            if (done) {
                l = cl->seg_end;
                continue;
            }
        }
        /* A CPU layer reads what the GPU wrote: wait for it. */
        if (!cl->gpu && (rc = gpu_wait(c))) return rc;
        if (debug) debug_before(c, l);
        if (cl->check) {
            /* the check reads small host inputs, which a copy from the GPU may still be writing */
            if (cl->gpu && (rc = gpu_wait(c))) return rc;
            rc = kiln__layer_check_shapes(e, l, e->layers[l].state, cl->call.attrs, cl->in, cl->out, c->dep,
                                          c->tbytes);
            if (rc) return rc;
            cl->check = 0;
        }
        if (prof) t0 = kiln__now_ms();
        c->exec.next_w = cl->next_w, c->exec.next_w_bytes = cl->next_w_bytes;
        rc = cl->vt ? cl->enq(cl->state, &cl->call) : run_aot(c, l);
        rc = kiln__misuse_take(rc);
        if (cl->call.epilogue && !cl->gpu) rc = kiln__epi_failure(&c->exec, rc);
        if (rc) return layer_err(&e->layers[l], rc);
        if (cl->gpu) gpu_queued(c, l, l);
        if ((prof || debug) && cl->gpu && (rc = gpu_wait(c))) return rc;
        if (prof) c->prof_ms[l] = kiln__now_ms() - t0;
        if (cl->nsize && (rc = after_size_layer(c, l))) return rc;
        if (debug && (rc = debug_after(c, l))) return rc;
        l++;
    }
    /* Outputs that are not produced in their buffer: copy out. */
    for (int32_t i = 0; i < e->noutputs; i++) {
        int32_t t = e->outputs[i];
        if (!c->bind[t]) continue;
        const kiln__etensor *et = &e->tensors[t];
        int64_t dims[KILN_MAX_DIMS];
        uint64_t b = 0;
        tensor_dims(c, et, dims);
        if (dims_bytes(et, dims, &b)) b = c->tbytes[t];
        if (!c->tptr[t] || c->tptr[t] == c->bind[t]) continue;
        if (c->dev) { /* ordered after the GPU's writes; the buffer may be device memory */
            if ((rc = c->dev->copy(c->bind[t], c->tptr[t], (size_t)b, c->cx.base.stream))) return rc;
            gpu_queued(c, -1, -1);
            continue;
        }
        memcpy(c->bind[t], c->tptr[t], (size_t)b);
    }
    if (sync && (rc = gpu_wait(c))) return rc;
    c->ran = 1;
    return 0;
}

/* The CPU layers of a run, synchronous or enqueued, execute in the caller's
 * thread before run() returns: the pool's workers yield between layers
 * while they do, rather than sleep. */
static int run_held(kiln_context *c, int sync) {
    kiln__pool_hold(c->pool, 1);
    int rc = run(c, sync);
    kiln__pool_hold(c->pool, 0);
    return rc;
}

KILN_API int kiln_context_run(kiln_context *c) {
    KILN__ARG(c, KILN_EINVAL);
    return run_held(c, 1);
}

KILN_API int kiln_context_enqueue(kiln_context *c, void *stream) {
    KILN__ARG(c, KILN_EINVAL);
    int rc = stream ? kiln_context_set_stream(c, stream) : 0;
    return rc ? rc : run_held(c, 0);
}
