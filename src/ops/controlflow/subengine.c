/*
 * subengine.c — the body sub-engine of Loop (loop.c), Scan (scan.c) and
 * SequenceMap (sequence/seqmap.c); see subengine.h.
 *
 * A body runs many times with values that change per iteration, so it
 * cannot be inlined into the outer engine the way an If branch is.  The
 * op's shape function builds the body network into an engine of its own
 * with the public build API (fixed shapes from the layer's input
 * descriptors), the outer engine stores it inside the layer's state
 * (kiln_engine_serialize after a small header) and loading calls
 * kiln_engine_load_memory.  Every outer context gets its own
 * kiln_context of each sub-engine (kiln__subctx, attach_to_context).
 */
#include "ops/controlflow/subengine.h"

#include "core/bytes.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------ body engine */

void kiln__body_free(kiln__body *b) {
    if (!b) return;
    if (b->eng) kiln_engine_free(b->eng);
    for (int i = 0; i < b->nin; i++) kiln__free(b->in[i].name);
    for (int i = 0; i < b->nout; i++) kiln__free(b->out[i].name);
    kiln__free(b->in);
    kiln__free(b->out);
    memset(b, 0, sizeof *b);
}

size_t kiln__body_io_bytes(const kiln__body_io *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->dims[i];
    return (size_t)n * kiln_dtype_size(t->dtype);
}

static int engine_find(const kiln_engine *e, const char *name, int first, int count, kiln_io_info *info) {
    for (int i = first; i < first + count; i++) {
        if (kiln_engine_io(e, i, info)) continue;
        if (info->name && !strcmp(info->name, name)) return i;
    }
    return -1;
}

/* Fill the presence/shape tables of b from its engine. */
static int body_describe(kiln__body *b, const char *what) {
    int ne_in = kiln_engine_num_inputs(b->eng), ne_out = kiln_engine_num_outputs(b->eng);
    kiln_io_info info;
    for (int i = 0; i < b->nin; i++) b->in[i].present = engine_find(b->eng, b->in[i].name, 0, ne_in, &info) >= 0;
    for (int k = 0; k < b->nout; k++) {
        kiln__body_io *o = &b->out[k];
        if (engine_find(b->eng, o->name, ne_in, ne_out, &info) < 0)
            return kiln__err(KILN_EINTERNAL, "%s: body output '%s' is missing from the body engine", what, o->name);
        o->present = 1;
        o->dtype = info.dtype;
        o->ndim = info.ndim;
        o->dyn = 0;
        for (int d = 0; d < info.ndim; d++) {
            o->dims[d] = info.dims[d];
            if (info.dims[d] < 0 || info.data_dependent) o->dyn = 1;
        }
    }
    return 0;
}

int kiln__body_check_static(const kiln__body *b, int first, int count, const char *what) {
    for (int k = first; k < first + count; k++)
        if (b->out[k].dyn == 1) /* 2: dims known at build, checked per run */
            return kiln__err(KILN_EUNSUPPORTED, "%s: body output '%s' has a shape known only at run time; kiln "
                             "runs loop bodies with fixed shapes only", what, b->out[k].name);
    return 0;
}

const kiln_network *kiln__body_graph(const kiln_attrs *a) {
    const kiln_attr_value *g = kiln_attrs_get(a, "body");
    return g && g->present ? g->graph : NULL;
}

int kiln__body_build(kiln__body *b, const kiln_network *body, const kiln_desc *in, int nin, const char *what) {
    memset(b, 0, sizeof *b);
    int bnin = kiln_network_num_inputs(body), bnout = kiln_network_num_outputs(body);
    if (bnin != nin)
        return kiln__err(KILN_ESHAPE, "%s: the body has %d inputs, the layer provides %d", what, bnin, nin);
    b->nin = bnin;
    b->nout = bnout;
    b->in = kiln__calloc((size_t)(bnin ? bnin : 1), sizeof *b->in);
    b->out = kiln__calloc((size_t)(bnout ? bnout : 1), sizeof *b->out);
    kiln_build_config *cfg = kiln_build_config_create();
    if (!b->in || !b->out || !cfg) {
        kiln_build_config_free(cfg);
        kiln__body_free(b);
        return kiln__err(KILN_ENOMEM, "%s: out of memory", what);
    }
    int rc = 0;
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING);
    kiln_build_config_set_threads(cfg, 1);
    for (int i = 0; i < bnin && !rc; i++) {
        kiln_io_info ti, *t = &ti;
        if ((rc = kiln_network_input_info(body, i, t))) break;
        kiln__body_io *io = &b->in[i];
        io->name = kiln__strdup(t->name);
        if (!io->name) { rc = kiln__err(KILN_ENOMEM, "%s: out of memory", what); break; }
        const kiln_desc *d = &in[i];
        if (d->dtype != t->dtype) {
            rc = kiln__err(KILN_ETYPE, "%s: body input %d '%s' is declared %s, the layer gives %s", what, i,
                           t->name, kiln_dtype_name(t->dtype), kiln_dtype_name(d->dtype));
            break;
        }
        if (d->ndim != t->ndim) {
            rc = kiln__err(KILN_ESHAPE, "%s: body input %d '%s' is declared with rank %d, the layer gives rank %d",
                           what, i, t->name, t->ndim, d->ndim);
            break;
        }
        io->dtype = d->dtype;
        io->ndim = d->ndim;
        int dyn = 0;
        for (int k = 0; k < d->ndim; k++) {
            int64_t v;
            if (!kiln_expr_is_const(d->dims[k], &v)) {
                char e[96];
                kiln_expr_print(d->dims[k], e, sizeof e);
                rc = kiln__err(KILN_EUNSUPPORTED, "%s: body input %d '%s' dim %d is '%s', known only at run time; "
                               "kiln builds loop bodies for fixed shapes (give the model fixed input shapes)",
                               what, i, t->name, k, e);
                break;
            }
            if (t->dims[k] >= 0 && t->dims[k] != v) {
                rc = kiln__err(KILN_ESHAPE, "%s: body input %d '%s' dim %d is declared %lld, the layer gives %lld",
                               what, i, t->name, k, (long long)t->dims[k], (long long)v);
                break;
            }
            if (t->dims[k] < 0) dyn = 1;
            io->dims[k] = v;
        }
        if (!rc && dyn) rc = kiln_build_config_set_profile(cfg, t->name, io->ndim, io->dims, io->dims, io->dims);
    }
    for (int k = 0; k < bnout && !rc; k++) {
        b->out[k].name = kiln__strdup(kiln_network_output_name(body, k));
        if (!b->out[k].name) rc = kiln__err(KILN_ENOMEM, "%s: out of memory", what);
    }
    if (!rc) {
        rc = kiln_build(body, cfg, &b->eng, NULL);
        if (rc) rc = kiln__err_prefix(rc, "%s: building the body", what);
    }
    kiln_build_config_free(cfg);
    if (!rc) rc = body_describe(b, what);
    if (rc) kiln__body_free(b);
    return rc;
}

#define BODY_MAGIC 0x31594442 /* "BDY1" */

int kiln__body_serialize(const kiln__body *b, const int64_t *ints, int nints, void *buf, size_t *size) {
    if (!b->eng) return kiln__err(KILN_EINTERNAL, "loop body: serialize before the body was built");
    void *eb = NULL;
    size_t es = 0;
    int rc = kiln_engine_serialize(b->eng, &eb, &es);
    if (rc) return rc;
    kiln__wbuf w;
    kiln__w_init(&w);
    kiln__w_i64(&w, BODY_MAGIC);
    kiln__w_i64(&w, nints);
    for (int i = 0; i < nints; i++) kiln__w_i64(&w, ints[i]);
    kiln__w_i64(&w, b->nin);
    for (int i = 0; i < b->nin; i++) {
        const kiln__body_io *t = &b->in[i];
        kiln__w_str(&w, t->name, 8);
        kiln__w_i64(&w, t->dtype);
        kiln__w_i64(&w, t->ndim);
        for (int d = 0; d < t->ndim; d++) kiln__w_i64(&w, t->dims[d]);
    }
    kiln__w_i64(&w, b->nout);
    for (int k = 0; k < b->nout; k++) {
        const kiln__body_io *t = &b->out[k];
        kiln__w_str(&w, t->name, 8);
        kiln__w_i64(&w, t->dyn);
        kiln__w_i64(&w, t->ndim);
        for (int d = 0; d < t->ndim; d++) kiln__w_i64(&w, t->dims[d]);
    }
    kiln__w_i64(&w, (int64_t)es);
    kiln__w_bytes(&w, eb, es);
    kiln_free(eb);
    if (w.oom) {
        kiln__free(w.p);
        return kiln__err(KILN_ENOMEM, "loop body: out of memory serializing");
    }
    if (buf) {
        if (*size < w.n) {
            kiln__free(w.p);
            return kiln__err(KILN_EINVAL, "loop body: buffer of %zu bytes, %zu needed", *size, w.n);
        }
        memcpy(buf, w.p, w.n);
    }
    *size = w.n;
    kiln__free(w.p);
    return 0;
}

int kiln__body_deserialize(kiln__body *b, int64_t *ints, int nints, const void *buf, size_t size) {
    memset(b, 0, sizeof *b);
    kiln__rbuf r;
    kiln__r_init(&r, buf, size, "loop body blob");
    if (kiln__r_i64(&r, "magic") != BODY_MAGIC || r.err)
        return kiln__err(KILN_EFORMAT, "loop body blob: bad magic (not a Loop/Scan state)");
    int64_t ni = kiln__r_i64(&r, "header field count");
    if (ni != nints) return kiln__err(KILN_EFORMAT, "loop body blob: %lld header fields, expected %d", (long long)ni, nints);
    for (int i = 0; i < nints; i++) ints[i] = kiln__r_i64(&r, "header field");
    int64_t nin = kiln__r_i64(&r, "body input count");
    if (r.err || nin < 0 || nin > KILN_MAX_IO)
        return kiln__err(KILN_EFORMAT, "loop body blob: %lld body inputs (at most %d)", (long long)nin, KILN_MAX_IO);
    b->nin = (int)nin;
    b->in = kiln__calloc((size_t)(nin ? nin : 1), sizeof *b->in);
    if (!b->in) return kiln__err(KILN_ENOMEM, "loop body: out of memory");
    for (int i = 0; i < b->nin && !r.err; i++) {
        kiln__body_io *t = &b->in[i];
        t->name = kiln__r_str(&r, 8, 1u << 20, "name");
        int64_t dt = kiln__r_i64(&r, "input dtype"), nd = kiln__r_i64(&r, "input rank");
        if (r.err || dt <= 0 || dt >= KILN_DTYPE_COUNT_ || kiln_dtype_size((kiln_dtype)dt) == 0 || nd < 0 ||
            nd > KILN_MAX_DIMS) {
            r.err = KILN_EFORMAT;
            break;
        }
        t->dtype = (kiln_dtype)dt;
        t->ndim = (int)nd;
        for (int d = 0; d < t->ndim; d++) {
            t->dims[d] = kiln__r_i64(&r, "input dim");
            if (t->dims[d] < 0) r.err = KILN_EFORMAT;
        }
    }
    int64_t nout = r.err ? -1 : kiln__r_i64(&r, "body output count");
    if (r.err || nout < 0 || nout > KILN_MAX_IO) {
        kiln__body_free(b);
        return kiln__err(KILN_EFORMAT, "loop body blob: truncated or malformed body description");
    }
    b->nout = (int)nout;
    b->out = kiln__calloc((size_t)(nout ? nout : 1), sizeof *b->out);
    if (!b->out) { kiln__body_free(b); return kiln__err(KILN_ENOMEM, "loop body: out of memory"); }
    kiln__body_io saved[KILN_MAX_IO];
    for (int k = 0; k < b->nout && !r.err; k++) {
        b->out[k].name = kiln__r_str(&r, 8, 1u << 20, "name");
        saved[k].dyn = (int)kiln__r_i64(&r, "output dynamic flag");
        int64_t nd = kiln__r_i64(&r, "output rank");
        if (r.err || nd < 0 || nd > KILN_MAX_DIMS) { r.err = KILN_EFORMAT; break; }
        saved[k].ndim = (int)nd;
        for (int d = 0; d < saved[k].ndim; d++) {
            saved[k].dims[d] = kiln__r_i64(&r, "output dim");
            if (saved[k].dims[d] < -1) r.err = KILN_EFORMAT;
        }
    }
    int64_t es = r.err ? -1 : kiln__r_i64(&r, "sub-engine size");
    if (r.err || es < 0 || (uint64_t)es != kiln__r_left(&r)) {
        kiln__body_free(b);
        return kiln__err(KILN_EFORMAT, "loop body blob: the sub-engine size does not match the blob (%zu bytes)", size);
    }
    int rc = kiln_engine_load_memory(r.p + r.at, (size_t)es, &b->eng);
    if (rc) {
        kiln__body_free(b);
        return kiln__err_prefix(rc, "loop body sub-engine");
    }
    rc = body_describe(b, "loop body");
    for (int k = 0; k < b->nout && !rc; k++) {
        /* Dims the engine leaves dynamic were fixed by a probe run at build. */
        kiln__body_io *o = &b->out[k];
        if (o->ndim != saved[k].ndim) {
            rc = kiln__err(KILN_EFORMAT, "loop body blob: output '%s' has rank %d, the sub-engine says %d", o->name,
                           saved[k].ndim, o->ndim);
            break;
        }
        o->dyn = saved[k].dyn;
        for (int d = 0; d < o->ndim; d++) {
            if (o->dims[d] >= 0 && saved[k].dims[d] != o->dims[d]) {
                rc = kiln__err(KILN_EFORMAT, "loop body blob: output '%s' dim %d is %lld, the sub-engine says %lld",
                               o->name, d, (long long)saved[k].dims[d], (long long)o->dims[d]);
                break;
            }
            o->dims[d] = saved[k].dims[d];
        }
    }
    if (rc) kiln__body_free(b);
    return rc;
}

int kiln__body_clone(const kiln__body *src, kiln__body *dst) {
    memset(dst, 0, sizeof *dst);
    if (!src->eng) return 0;
    size_t n = 0;
    int rc = kiln__body_serialize(src, NULL, 0, NULL, &n);
    if (rc) return rc;
    void *p = kiln__malloc(n);
    if (!p) return kiln__err(KILN_ENOMEM, "loop body: out of memory");
    rc = kiln__body_serialize(src, NULL, 0, p, &n);
    if (!rc) rc = kiln__body_deserialize(dst, NULL, 0, p, n);
    kiln__free(p);
    return rc;
}

int kiln__body_timing_id(const kiln__body *b, const char *op, char *buf, size_t size) {
    /* The body engine's bytes decide the timing: hash them (FNV-1a). */
    uint64_t h = 1469598103934665603ull;
    void *eb = NULL;
    size_t n = 0;
    if (b->eng && kiln_engine_serialize(b->eng, &eb, &n) == 0) {
        for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)eb)[i]) * 1099511628211ull;
        kiln_free(eb);
    }
    snprintf(buf, size, "%s body=%016llx", op, (unsigned long long)h);
    return 0;
}

int kiln__body_ctx_open(const kiln__body *b, kiln_exec *exec, kiln_context **out) {
    int threads = exec ? kiln_exec_threads(exec) : 1;
    kiln_context *ctx = NULL;
    int rc = kiln_context_create(b->eng, threads, &ctx);
    if (rc) return kiln__err_prefix(rc, "loop body context");
    for (int i = 0; i < b->nin; i++) {
        if (!b->in[i].present) continue;
        rc = kiln_context_set_input_shape(ctx, b->in[i].name, b->in[i].ndim, b->in[i].dims);
        if (rc) {
            kiln_context_free(ctx);
            return kiln__err_prefix(rc, "loop body input '%s'", b->in[i].name);
        }
    }
    *out = ctx;
    return 0;
}

int kiln__body_bind_in(kiln_context *ctx, const kiln__body *b, int i, const void *data) {
    if (!b->in[i].present) return 0;
    int rc = kiln_context_bind(ctx, b->in[i].name, (void *)data, kiln__body_io_bytes(&b->in[i]));
    return rc ? kiln__err_prefix(rc, "loop body input '%s'", b->in[i].name) : 0;
}

int kiln__body_bind_out(kiln_context *ctx, const kiln__body *b, int k, void *data) {
    int rc = kiln_context_bind(ctx, b->out[k].name, data, kiln__body_io_bytes(&b->out[k]));
    return rc ? kiln__err_prefix(rc, "loop body output '%s'", b->out[k].name) : 0;
}

int kiln__body_check_shapes(const kiln_context *ctx, const kiln__body *b, const char *what) {
    for (int k = 0; k < b->nout; k++) {
        const kiln__body_io *o = &b->out[k];
        int known = o->dyn;
        for (int d = 0; known && d < o->ndim; d++) known = o->dims[d] >= 0;
        if (!known) continue; /* not used by the op (importer padding) */
        int nd = 0;
        int64_t dims[KILN_MAX_DIMS];
        int rc = kiln_context_shape(ctx, o->name, &nd, dims);
        if (rc) return kiln__err_prefix(rc, "%s: body output '%s'", what, o->name);
        int same = nd == o->ndim;
        for (int d = 0; same && d < nd; d++) same = dims[d] == o->dims[d];
        if (!same)
            return kiln__err(KILN_ESHAPE, "%s: body output '%s' changed shape between iterations (dim count %d, "
                             "first dim %lld; expected %d, %lld); kiln needs a fixed shape per output", what, o->name,
                             nd, (long long)(nd ? dims[0] : 0), o->ndim, (long long)(o->ndim ? o->dims[0] : 0));
    }
    return 0;
}

int kiln__body_resolve_dims(kiln__body *b, int first, int count) {
    kiln_context *ctx = NULL;
    int ne = kiln_engine_num_inputs(b->eng) + kiln_engine_num_outputs(b->eng), rc = 0;
    for (int k = first; k < first + count && !rc; k++) {
        kiln__body_io *o = &b->out[k];
        if (o->dyn != 1) continue;
        kiln_io_info info;
        int dd = 1, nd = 0;
        for (int i = 0; i < ne; i++)
            if (!kiln_engine_io(b->eng, i, &info) && info.name && !strcmp(info.name, o->name)) dd = info.data_dependent;
        if (dd) continue;
        if (!ctx && (rc = kiln__body_ctx_open(b, NULL, &ctx))) break;
        int64_t dims[KILN_MAX_DIMS];
        if (kiln_context_shape(ctx, o->name, &nd, dims) || nd != o->ndim) continue;
        memcpy(o->dims, dims, sizeof(int64_t) * (size_t)nd);
        o->dyn = 2;
    }
    kiln_context_free(ctx);
    return rc;
}
/* ------------------------------------------------------------ per-context sub-contexts */

static int subctx_init(kiln__subctx *x, void *state, int n, int temp, const char *what) {
    x->tag = KILN__SUBCTX_TAG;
    x->st = state;
    x->n = n > 0 ? n : 1;
    x->temp = temp;
    x->sub = kiln__calloc((size_t)x->n, sizeof *x->sub);
    return x->sub ? 0 : kiln__err(KILN_ENOMEM, "%s: out of memory", what);
}

int kiln__subctx_attach(void *state, int n, void **ctx_state, const char *what) {
    kiln__subctx *x = kiln__calloc(1, sizeof *x);
    if (!x) return kiln__err(KILN_ENOMEM, "%s: out of memory", what);
    int rc = subctx_init(x, state, n, 0, what);
    if (rc) {
        kiln__free(x);
        return rc;
    }
    *ctx_state = x;
    return 0;
}

static void subctx_close(kiln__subctx *x) {
    for (int i = 0; x->sub && i < x->n; i++) kiln_context_free(x->sub[i]);
    kiln__free(x->sub);
    x->sub = NULL;
}

void kiln__subctx_detach(void *state, void *ctx_state) {
    (void)state;
    kiln__subctx *x = ctx_state;
    if (!x) return;
    subctx_close(x);
    kiln__free(x);
}

int kiln__subctx_get(void *state, int n, kiln__subctx *tmp, kiln__subctx **out, const char *what) {
    if (*(const uint32_t *)state == KILN__SUBCTX_TAG) {
        *out = state;
        return 0;
    }
    /* No attached context (the builder folding a constant layer). */
    int rc = subctx_init(tmp, state, n, 1, what);
    if (rc) return rc;
    *out = tmp;
    return 0;
}

int kiln__subctx_open(kiln__subctx *x, int i, const kiln__body *b, kiln_exec *exec, kiln_context **out) {
    if (i < 0 || i >= x->n) return kiln__err(KILN_EINTERNAL, "sub-engine context %d of %d", i, x->n);
    if (!x->sub[i]) {
        int rc = kiln__body_ctx_open(b, exec, &x->sub[i]);
        if (rc) return rc;
    }
    *out = x->sub[i];
    return 0;
}

void kiln__subctx_put(kiln__subctx *x) {
    if (x && x->temp) subctx_close(x);
}
