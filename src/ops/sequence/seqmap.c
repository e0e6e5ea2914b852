/*
 * seqmap.c — ONNX SequenceMap (17): run a body graph on every element of
 * one or more sequences (packed form, see sequence.c), collecting each
 * body output into an output sequence.
 *
 * Like Loop (loop.c) the body runs as a sub-engine built with fixed
 * shapes (controlflow/subengine.h).  Elements of a sequence may differ in shape, so
 * the shape function builds one sub-engine per distinct element-shape
 * signature and maps every element to its engine.  That needs the element
 * shapes when the engine is built: the `:shapes` tensor of each sequence
 * input must be a build-time value (a constant, or rows known
 * symbolically, e.g. from SequenceConstruct); otherwise the layer is
 * KILN_EUNSUPPORTED with a message saying so.  At run time the actual
 * shapes are checked against the built ones.
 *
 * Layer layout (made by the ONNX importer): inputs = the node's inputs,
 * each sequence as (data, shapes), each tensor as itself, then
 * `num_outer` outer-scope values; `input_parts` lists 2 (sequence) or 1
 * (tensor) per node input.  Outputs: (data, shapes) per body output, then
 * unused padding.  Body inputs: one element (or the tensor) per node
 * input, then the outer values.
 */
#include "ops/controlflow/subengine.h"

#include <stdio.h>
#include <string.h>

#define SM_MAX_OUT 16
#define SM_TAG 0x534d4150u
#define SM_MAGIC 0x314d5153 /* "SQM1" */

static const kiln_attr_def sm_attrs[] = {
    {"body", KILN_ATTR_GRAPH, KILN_DTYPE_UNDEFINED, NULL, 1, "the graph applied to every element"},
    {"num_outer", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "0", 0,
     "trailing inputs that are outer-scope values the body uses (set by the importer)"},
    {"input_parts", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0,
     "per node input: 2 = a sequence (data, shapes), 1 = a tensor (set by the importer)"},
    {NULL, 0, 0, NULL, 0, NULL},
};

typedef struct sm_state {
    uint32_t tag;
    const kiln_network *graph; /* borrowed, build time only */
    int64_t num_outer;
    int nparts;
    int64_t parts[KILN_MAX_IO];
    /* After shape/deserialize: */
    int64_t n;                 /* elements */
    int nbody;
    kiln__body *body;          /* nbody sub-engines */
    int64_t *map;              /* n: element -> body */
} sm_state;

static void sm_clear(sm_state *s) {
    for (int i = 0; i < s->nbody; i++) kiln__body_free(&s->body[i]);
    kiln__free(s->body);
    kiln__free(s->map);
    s->body = NULL;
    s->map = NULL;
    s->nbody = 0;
    s->n = 0;
}

static int sm_create(const kiln_attrs *a, void **state) {
    sm_state *s = kiln__calloc(1, sizeof *s);
    if (!s) return kiln__err(KILN_ENOMEM, "SequenceMap: out of memory");
    s->tag = SM_TAG;
    s->graph = kiln__body_graph(a);
    s->num_outer = kiln_attrs_int(a, "num_outer");
    const int64_t *p = NULL;
    int64_t np = kiln_attrs_ints(a, "input_parts", &p);
    if (np > KILN_MAX_IO) np = KILN_MAX_IO;
    for (int64_t i = 0; i < np; i++) s->parts[i] = p[i];
    s->nparts = np > 0 ? (int)np : 0;
    *state = s;
    return 0;
}

static void sm_destroy(void *state) {
    sm_state *s = state;
    if (!s) return;
    sm_clear(s);
    kiln__free(s);
}

static int sm_serialize(const void *state, void *buf, size_t *size);
static int sm_deserialize(const void *buf, size_t size, void **state);

static int sm_clone(const void *state, void **out) {
    const sm_state *s = state;
    size_t n = 0;
    int rc = sm_serialize(s, NULL, &n);
    if (rc) return rc;
    void *p = kiln__malloc(n);
    if (!p) return kiln__err(KILN_ENOMEM, "SequenceMap: out of memory");
    rc = sm_serialize(s, p, &n);
    if (!rc) rc = sm_deserialize(p, n, out);
    kiln__free(p);
    if (!rc) {
        sm_state *d = *out;
        d->graph = s->graph;
        d->num_outer = s->num_outer;
    }
    return rc;
}

/* Element dims of sequence input j (desc index i) as constants; 0 when
 * not known at build. */
static int sm_rows(const kiln_shape_ctx *c, int i, int64_t *n, int *r, int64_t *rows, int max) {
    const kiln_desc *sh = &c->in[i + 1];
    int64_t nv, rv;
    if (sh->dtype != KILN_DTYPE_I64 || sh->ndim != 2 || c->in[i].ndim != 1 ||
        !kiln_expr_is_const(sh->dims[0], &nv) || !kiln_expr_is_const(sh->dims[1], &rv))
        return 0;
    if (nv * rv > max) return 0;
    *n = nv;
    *r = (int)rv;
    for (int64_t k = 0; k < nv * rv; k++) {
        if (sh->data) rows[k] = ((const int64_t *)sh->data)[k];
        else if (sh->nvalues != nv * rv || !kiln_expr_is_const(sh->values[k], &rows[k])) return 0;
    }
    return 1;
}

/* Body outputs the sub-engine leaves symbolic (the body declares dim_params)
 * take the dims its shape program computes for the fixed input shapes;
 * they are still checked after every run.  Data-dependent ones stay
 * unsupported. */
static int sm_fix_dyn(kiln__body *b, int M) {
    int rc = kiln__body_resolve_dims(b, 0, M);
    return rc ? rc : kiln__body_check_static(b, 0, M, "SequenceMap");
}

static int sm_shape(void *state, kiln_shape_ctx *c) {
    sm_state *s = state;
    if (!s->graph) return kiln_set_error(KILN_EATTR, "SequenceMap: attribute 'body' is not set");
    int np = s->nparts, E = (int)s->num_outer;
    int want = E;
    for (int j = 0; j < np; j++) {
        if (s->parts[j] != 1 && s->parts[j] != 2)
            return kiln_set_error(KILN_EATTR, "SequenceMap: input_parts[%d] = %lld (1 or 2)", j, (long long)s->parts[j]);
        want += (int)s->parts[j];
    }
    if (np < 1 || s->parts[0] != 2 || want != c->nin)
        return kiln_set_error(KILN_EINVAL, "SequenceMap: input_parts / num_outer describe %d inputs, the layer has %d "
                              "(input 0 must be a sequence); the ONNX importer sets them", want, c->nin);
    int bnin = kiln_network_num_inputs(s->graph), M = kiln_network_num_outputs(s->graph);
    if (bnin != np + E)
        return kiln_set_error(KILN_ESHAPE, "SequenceMap: the body has %d inputs, the node gives %d", bnin, np + E);
    if (2 * M > c->nout)
        return kiln_set_error(KILN_EUNSUPPORTED, "SequenceMap: %d body outputs; kiln supports at most %d", M,
                              c->nout / 2);
    /* Element shapes of every sequence input. */
    enum { MAXROWS = 4096 };
    int64_t *rows = kiln__malloc(sizeof(int64_t) * MAXROWS * (size_t)np);
    int64_t nseq[KILN_MAX_IO];
    int rank[KILN_MAX_IO], first[KILN_MAX_IO];
    if (!rows) return kiln__err(KILN_ENOMEM, "SequenceMap: out of memory");
    int rc = 0;
    int64_t n = -1;
    for (int j = 0, i = 0; j < np && !rc; i += (int)s->parts[j], j++) {
        first[j] = i;
        if (s->parts[j] != 2) continue;
        if (!sm_rows(c, i, &nseq[j], &rank[j], rows + (size_t)j * MAXROWS, MAXROWS))
            rc = kiln_set_error(KILN_EUNSUPPORTED, "SequenceMap: the element shapes of input %d are known only at run "
                                "time; kiln builds the body for known element shapes (make its ':shapes' tensor a "
                                "build-time value, e.g. kiln build --values NAME:shapes=...)", j);
        else if (n >= 0 && nseq[j] != n)
            rc = kiln_set_error(KILN_ESHAPE, "SequenceMap: input %d has %lld elements, input 0 has %lld", j,
                                (long long)nseq[j], (long long)n);
        else n = nseq[j];
    }
    if (!rc && n <= 0)
        rc = kiln_set_error(KILN_EUNSUPPORTED, "SequenceMap: the input sequences are empty (no element type to build "
                            "the body for)");
    if (!rc) {
        sm_clear(s);
        s->n = n;
        s->map = kiln__calloc((size_t)n, sizeof *s->map);
        s->body = kiln__calloc((size_t)n, sizeof *s->body);
        if (!s->map || !s->body) rc = kiln__err(KILN_ENOMEM, "SequenceMap: out of memory");
    }
    kiln_desc bin[KILN_MAX_IO];
    for (int64_t k = 0; k < n && !rc; k++) {
        for (int j = 0; j < np; j++) {
            const kiln_desc *d = &c->in[first[j]];
            bin[j] = *d;
            if (s->parts[j] != 2) continue;
            bin[j].data = NULL;
            bin[j].nvalues = -1;
            bin[j].ndim = rank[j];
            for (int q = 0; q < rank[j]; q++)
                bin[j].dims[q] = kiln_expr_const(c->x, rows[(size_t)j * MAXROWS + (size_t)(k * rank[j] + q)]);
        }
        for (int e = 0; e < E; e++) bin[np + e] = c->in[c->nin - E + e];
        /* an engine built for the same element shapes already? */
        int found = -1;
        for (int b = 0; b < s->nbody && found < 0; b++) {
            int same = 1;
            for (int j = 0; j < np && same; j++) {
                if (s->parts[j] != 2) continue;
                for (int q = 0; q < rank[j] && same; q++)
                    same = s->body[b].in[j].dims[q] == rows[(size_t)j * MAXROWS + (size_t)(k * rank[j] + q)];
            }
            if (same) found = b;
        }
        if (found < 0) {
            char what[64];
            snprintf(what, sizeof what, "SequenceMap element %lld", (long long)k);
            rc = kiln__body_build(&s->body[s->nbody], s->graph, bin, np + E, what);
            if (!rc) rc = sm_fix_dyn(&s->body[s->nbody], M);
            if (rc) break;
            found = s->nbody++;
        }
        s->map[k] = found;
    }
    /* Output sequences: element k of output m has the shape body[map[k]] gives it. */
    for (int m = 0; m < M && !rc; m++) {
        const kiln__body_io *o0 = &s->body[0].out[m];
        int64_t len = 0;
        for (int64_t k = 0; k < n && !rc; k++) {
            const kiln__body_io *o = &s->body[s->map[k]].out[m];
            if (o->dtype != o0->dtype || o->ndim != o0->ndim)
                rc = kiln_set_error(KILN_EUNSUPPORTED, "SequenceMap: body output %d is %s rank %d for element %lld, %s "
                                    "rank %d for element 0 (kiln sequences hold one type and rank)", m,
                                    kiln_dtype_name(o->dtype), o->ndim, (long long)k, kiln_dtype_name(o0->dtype), o0->ndim);
            int64_t numel = 1;
            for (int q = 0; q < o->ndim; q++) numel *= o->dims[q];
            len += numel;
        }
        if (rc) break;
        kiln_desc *d = &c->out[2 * m], *sh = &c->out[2 * m + 1];
        memset(d, 0, sizeof *d);
        memset(sh, 0, sizeof *sh);
        d->dtype = o0->dtype;
        d->ndim = 1;
        d->dims[0] = kiln_expr_const(c->x, len);
        d->nvalues = -1;
        sh->dtype = KILN_DTYPE_I64;
        sh->ndim = 2;
        sh->dims[0] = kiln_expr_const(c->x, n);
        sh->dims[1] = kiln_expr_const(c->x, o0->ndim);
        sh->nvalues = -1;
        if (n * o0->ndim <= KILN_MAX_VALUES) {
            sh->nvalues = (int)(n * o0->ndim);
            for (int64_t k = 0; k < n; k++)
                for (int q = 0; q < o0->ndim; q++)
                    sh->values[k * o0->ndim + q] = kiln_expr_const(c->x, s->body[s->map[k]].out[m].dims[q]);
        }
    }
    kiln__free(rows);
    if (!rc) kiln__ops_fill_unused(c, 2 * M);
    return rc;
}

static int sm_enqueue(void *state, const kiln_call *c) {
    kiln__subctx tmp, *x = NULL;
    /* state: the attached kiln__subctx, or the instance (its nbody bodies) */
    int nbody = *(const uint32_t *)state == KILN__SUBCTX_TAG ? 0 : ((const sm_state *)state)->nbody;
    int rc = kiln__subctx_get(state, nbody, &tmp, &x, "SequenceMap");
    if (rc) return rc;
    const sm_state *s = x->st;
    int np = s->nparts, E = (int)s->num_outer, M = s->nbody ? s->body[0].nout : 0;
    int64_t off[KILN_MAX_IO] = {0}, ooff[SM_MAX_OUT] = {0};
    int first[KILN_MAX_IO];
    for (int j = 0, i = 0; j < np; i += (int)s->parts[j], j++) {
        first[j] = i;
        if (s->parts[j] == 2 && c->in[i + 1].dims[0] != s->n)
            rc = kiln__err(KILN_ESHAPE, "SequenceMap: input %d has %lld elements, the engine was built for %lld", j,
                           (long long)c->in[i + 1].dims[0], (long long)s->n);
    }
    for (int64_t k = 0; k < s->n && !rc; k++) {
        int bi = (int)s->map[k];
        const kiln__body *b = &s->body[bi];
        kiln_context *ctx = NULL;
        if ((rc = kiln__subctx_open(x, bi, b, c->exec, &ctx))) break;
        for (int j = 0; j < np && !rc; j++) {
            const kiln_tensor *d = &c->in[first[j]];
            if (s->parts[j] != 2) {
                rc = kiln__body_bind_in(ctx, b, j, d->data);
                continue;
            }
            const int64_t *row = (const int64_t *)c->in[first[j] + 1].data + k * b->in[j].ndim;
            int64_t numel = 1;
            for (int q = 0; q < b->in[j].ndim; q++) {
                if (row[q] != b->in[j].dims[q])
                    rc = kiln__err(KILN_ESHAPE, "SequenceMap: element %lld of input %d has dim %d = %lld, the engine "
                                   "was built for %lld", (long long)k, j, q, (long long)row[q],
                                   (long long)b->in[j].dims[q]);
                numel *= row[q];
            }
            if (!rc && off[j] + numel > kiln_tensor_numel(d))
                rc = kiln__err(KILN_ESHAPE, "SequenceMap: input %d's shapes describe more data than it holds", j);
            if (!rc) rc = kiln__body_bind_in(ctx, b, j, (const uint8_t *)d->data + (size_t)off[j] * kiln_dtype_size(d->dtype));
            off[j] += numel;
        }
        for (int e = 0; e < E && !rc; e++) rc = kiln__body_bind_in(ctx, b, np + e, c->in[c->nin - E + e].data);
        for (int m = 0; m < M && !rc; m++) {
            const kiln__body_io *o = &b->out[m];
            rc = kiln__body_bind_out(ctx, b, m, (uint8_t *)c->out[2 * m].data + (size_t)ooff[m] * kiln_dtype_size(o->dtype));
            int64_t *shp = (int64_t *)c->out[2 * m + 1].data + k * o->ndim;
            int64_t numel = 1;
            for (int q = 0; q < o->ndim; q++) {
                shp[q] = o->dims[q];
                numel *= o->dims[q];
            }
            ooff[m] += numel;
        }
        if (!rc) rc = kiln_context_run(ctx);
        if (!rc) rc = kiln__body_check_shapes(ctx, b, "SequenceMap");
        if (rc) rc = kiln__err_prefix(rc, "SequenceMap element %lld", (long long)k);
    }
    if (!rc) kiln__ops_zero_unused(c, 2 * M);
    kiln__subctx_put(x);
    return rc;
}

static int sm_attach(void *state, void **ctx_state) {
    return kiln__subctx_attach(state, ((const sm_state *)state)->nbody, ctx_state, "SequenceMap");
}

/* Blob: magic, n, nbody, nparts, parts[], num_outer, map[n], then per body
 * its size and kiln__body_serialize bytes. */
static int sm_serialize(const void *state, void *buf, size_t *size) {
    const sm_state *s = state;
    size_t hdr = 8 * (size_t)(5 + s->nparts + s->n), total = hdr;
    size_t bsz[KILN_MAX_IO * 4];
    if (s->nbody > (int)(sizeof bsz / sizeof bsz[0]))
        return kiln__err(KILN_EUNSUPPORTED, "SequenceMap: %d distinct element shapes (at most %zu)", s->nbody,
                         sizeof bsz / sizeof bsz[0]);
    for (int b = 0; b < s->nbody; b++) {
        int rc = kiln__body_serialize(&s->body[b], NULL, 0, NULL, &bsz[b]);
        if (rc) return rc;
        total += 8 + bsz[b];
    }
    if (!buf) {
        *size = total;
        return 0;
    }
    if (*size < total) return kiln__err(KILN_EINVAL, "SequenceMap: buffer of %zu bytes, %zu needed", *size, total);
    uint8_t *p = buf;
    int64_t h[5] = {SM_MAGIC, s->n, s->nbody, s->nparts, s->num_outer};
    memcpy(p, h, sizeof h);
    p += sizeof h;
    memcpy(p, s->parts, 8 * (size_t)s->nparts);
    p += 8 * (size_t)s->nparts;
    memcpy(p, s->map, 8 * (size_t)s->n);
    p += 8 * (size_t)s->n;
    for (int b = 0; b < s->nbody; b++) {
        int64_t n = (int64_t)bsz[b];
        memcpy(p, &n, 8);
        p += 8;
        size_t got = bsz[b];
        int rc = kiln__body_serialize(&s->body[b], NULL, 0, p, &got);
        if (rc) return rc;
        p += bsz[b];
    }
    *size = total;
    return 0;
}

static int sm_deserialize(const void *buf, size_t size, void **state) {
    const uint8_t *p = buf, *end = p + size;
    int64_t h[5];
    if (size < sizeof h) return kiln__err(KILN_EFORMAT, "SequenceMap state: %zu bytes, truncated", size);
    memcpy(h, p, sizeof h);
    p += sizeof h;
    if (h[0] != SM_MAGIC || h[1] < 1 || h[2] < 1 || h[2] > h[1] || h[3] < 1 || h[3] > KILN_MAX_IO || h[4] < 0 ||
        h[4] > KILN_MAX_IO || (uint64_t)(end - p) / 8 < (uint64_t)(h[3] + h[1]))
        return kiln__err(KILN_EFORMAT, "SequenceMap state: bad header");
    sm_state *s = kiln__calloc(1, sizeof *s);
    if (!s) return kiln__err(KILN_ENOMEM, "SequenceMap: out of memory");
    s->tag = SM_TAG;
    s->n = h[1];
    s->nparts = (int)h[3];
    s->num_outer = h[4];
    memcpy(s->parts, p, 8 * (size_t)s->nparts);
    p += 8 * (size_t)s->nparts;
    s->map = kiln__calloc((size_t)s->n, sizeof *s->map);
    s->body = kiln__calloc((size_t)h[2], sizeof *s->body);
    int rc = !s->map || !s->body ? kiln__err(KILN_ENOMEM, "SequenceMap: out of memory") : 0;
    if (!rc) {
        memcpy(s->map, p, 8 * (size_t)s->n);
        p += 8 * (size_t)s->n;
        for (int64_t k = 0; k < s->n && !rc; k++)
            if (s->map[k] < 0 || s->map[k] >= h[2]) rc = kiln__err(KILN_EFORMAT, "SequenceMap state: bad element map");
    }
    for (int b = 0; b < h[2] && !rc; b++) {
        int64_t n;
        if (end - p < 8) { rc = kiln__err(KILN_EFORMAT, "SequenceMap state: truncated"); break; }
        memcpy(&n, p, 8);
        p += 8;
        if (n < 0 || n > end - p) { rc = kiln__err(KILN_EFORMAT, "SequenceMap state: truncated body %d", b); break; }
        rc = kiln__body_deserialize(&s->body[b], NULL, 0, p, (size_t)n);
        if (!rc) s->nbody = b + 1;
        p += n;
        if (!rc && (s->body[b].nin != s->nparts + s->num_outer || s->body[b].nout > SM_MAX_OUT / 2 ||
                    s->body[b].nout != s->body[0].nout))
            rc = kiln__err(KILN_EFORMAT, "SequenceMap state: body %d has %d inputs / %d outputs", b, s->body[b].nin,
                           s->body[b].nout);
    }
    if (!rc && p != end) rc = kiln__err(KILN_EFORMAT, "SequenceMap state: %zu trailing bytes", (size_t)(end - p));
    if (rc) {
        sm_destroy(s);
        return rc;
    }
    *state = s;
    return 0;
}

static int sm_timing_id(void *state, char *buf, size_t size) {
    const sm_state *s = state;
    if (!s->nbody) return snprintf(buf, size, "seqmap (unbuilt)") < 0;
    char b0[128];
    kiln__body_timing_id(&s->body[0], "seqmap", b0, sizeof b0);
    snprintf(buf, size, "%s n=%lld bodies=%d", b0, (long long)s->n, s->nbody);
    return 0;
}

static const kiln_plugin_vtable sm_vt = {
    .version = KILN_PLUGIN_VTABLE_VERSION,
    .create = sm_create,
    .clone = sm_clone,
    .destroy = sm_destroy,
    .shape = sm_shape,
    .timing_id = sm_timing_id,
    .enqueue = sm_enqueue,
    .serialize = sm_serialize,
    .deserialize = sm_deserialize,
    .attach_to_context = sm_attach,
    .detach_from_context = kiln__subctx_detach,
};

static const kiln_plugin_def seqmap_17 = {
    .ns = "ai.onnx", .name = "SequenceMap", .version = 17,
    .min_inputs = 2, .max_inputs = KILN_MAX_IO - SM_MAX_OUT, .num_outputs = SM_MAX_OUT,
    .attrs = sm_attrs, .vt = &sm_vt,
    .doc = "apply a body to every element of sequences (element shapes known at build)",
};
KILN_PLUGIN(seqmap_17)
