/*
 * scan.c — ONNX Scan (opsets 8/9/11/16) over a body sub-engine (see
 * subengine.h for the mechanism).
 *
 * Layer layout (made by the ONNX importer):
 *   inputs   [sequence_lens (opset 8 only, "" when absent), initial_state...,
 *             scan_inputs..., outer...]
 *   body in  [state..., scan_input slices..., outer...]
 *   body out [state_out..., scan_output slices...]   (+ importer padding)
 *   outputs  [final_state..., scan_outputs..., unused...]
 * The trip count is the length of the scan axis, which must be fixed when
 * the engine is built, so every output shape is static.  Opset 8 has a
 * leading batch axis on every input and output (the scan axis is then 1);
 * sequence_lens, if given, must equal the full length for every batch.
 */
#include "ops/controlflow/subengine.h"

#include <stdio.h>
#include <string.h>

#define SCAN_MAX_OUT 16
#define SCAN_TAG 0x53434153u
#define SCAN_HDR 8 /* ints before the per-input axes/directions */

static const kiln_attr_def scan_attrs[] = {
    {"body", KILN_ATTR_GRAPH, KILN_DTYPE_UNDEFINED, NULL, 1, "the scan body"},
    {"num_scan_inputs", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, NULL, 1, "how many inputs are scanned"},
    {"directions", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "opset 8: per scan input, 0 forward / 1 reverse"},
    {"scan_input_axes", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "axis scanned per scan input (default 0)"},
    {"scan_input_directions", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "per scan input, 0 forward / 1 reverse"},
    {"scan_output_axes", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "axis stacked per scan output (default 0)"},
    {"scan_output_directions", KILN_ATTR_ARRAY, KILN_DTYPE_I64, NULL, 0, "per scan output, 0 append / 1 prepend"},
    {"num_outputs", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "0", 0,
     "outputs the node really has; 0 = body outputs (set by the importer)"},
    {"num_outer", KILN_ATTR_INT, KILN_DTYPE_UNDEFINED, "0", 0,
     "trailing inputs that are outer-scope values the body uses (set by the importer)"},
    {NULL, 0, 0, NULL, 0, NULL},
};

typedef struct scan_state {
    uint32_t tag;
    const kiln_network *graph;           /* borrowed, build time only */
    const kiln_attr_value *a_dir, *a_in_axes, *a_in_dirs, *a_out_axes, *a_out_dirs; /* build time */
    int64_t num_outputs, num_outer;
    /* After shape/deserialize: */
    int64_t opset8, n_state, n_in, n_out, n_outer, trip, batch;
    int64_t in_axis[KILN_MAX_IO], in_dir[KILN_MAX_IO], out_axis[KILN_MAX_IO], out_dir[KILN_MAX_IO];
    kiln__body body;
} scan_state;

static int scan_create_v(const kiln_attrs *a, void **state, int opset8) {
    scan_state *s = kiln__calloc(1, sizeof *s);
    if (!s) return kiln__err(KILN_ENOMEM, "Scan: out of memory");
    s->tag = SCAN_TAG;
    s->graph = kiln__body_graph(a);
    s->n_in = kiln_attrs_int(a, "num_scan_inputs");
    s->num_outputs = kiln_attrs_int(a, "num_outputs");
    s->num_outer = kiln_attrs_int(a, "num_outer");
    s->opset8 = opset8;
    s->a_dir = kiln_attrs_get(a, "directions");
    s->a_in_axes = kiln_attrs_get(a, "scan_input_axes");
    s->a_in_dirs = kiln_attrs_get(a, "scan_input_directions");
    s->a_out_axes = kiln_attrs_get(a, "scan_output_axes");
    s->a_out_dirs = kiln_attrs_get(a, "scan_output_directions");
    *state = s;
    return 0;
}
static int scan_create8(const kiln_attrs *a, void **state) { return scan_create_v(a, state, 1); }
static int scan_create9(const kiln_attrs *a, void **state) { return scan_create_v(a, state, 0); }

static void scan_destroy(void *state) {
    scan_state *s = state;
    if (!s) return;
    kiln__body_free(&s->body);
    kiln__free(s);
}

static int scan_clone(const void *state, void **out) {
    const scan_state *s = state;
    scan_state *d = kiln__calloc(1, sizeof *d);
    if (!d) return kiln__err(KILN_ENOMEM, "Scan: out of memory");
    *d = *s;
    int rc = kiln__body_clone(&s->body, &d->body);
    if (rc) { kiln__free(d); return rc; }
    *out = d;
    return 0;
}

/* Array attribute of `count` entries into v (default `def`); message on a bad count. */
static int attr_list(const kiln_attr_value *a, const char *name, int64_t count, int64_t def, int64_t *v) {
    for (int64_t i = 0; i < count; i++) v[i] = def;
    if (!a || !a->present) return 0;
    if (a->count != count)
        return kiln_set_error(KILN_EATTR, "Scan: attribute '%s' has %lld entries, expected %lld", name,
                              (long long)a->count, (long long)count);
    for (int64_t i = 0; i < count; i++) v[i] = ((const int64_t *)a->data)[i];
    return 0;
}

static int scan_shape(void *state, kiln_shape_ctx *c) {
    scan_state *s = state;
    if (!s->graph) return kiln_set_error(KILN_EATTR, "Scan: attribute 'body' is not set");
    int lead = s->opset8 ? 1 : 0;
    int64_t M = s->n_in, E = s->num_outer, N = c->nin - lead - M - E;
    if (M < 1 || E < 0 || N < 0)
        return kiln_set_error(KILN_EINVAL, "Scan: %d inputs do not hold %lld scan inputs and %lld outer values", c->nin,
                              (long long)M, (long long)E);
    int bnout = kiln_network_num_outputs(s->graph);
    int64_t real = s->num_outputs > 0 ? s->num_outputs : bnout;
    int64_t K = real - N;
    if (K < 0 || real > bnout || real > c->nout)
        return kiln_set_error(KILN_ESHAPE, "Scan: the body has %d outputs, the node %lld with %lld state values",
                              bnout, (long long)real, (long long)N);
    int rc;
    if (s->opset8) {
        rc = attr_list(s->a_dir, "directions", M, 0, s->in_dir);
        for (int i = 0; i < M; i++) s->in_axis[i] = 1;
        for (int k = 0; k < K; k++) s->out_axis[k] = 0, s->out_dir[k] = 0;
    } else {
        rc = attr_list(s->a_in_axes, "scan_input_axes", M, 0, s->in_axis);
        if (!rc) rc = attr_list(s->a_in_dirs, "scan_input_directions", M, 0, s->in_dir);
        if (!rc) rc = attr_list(s->a_out_axes, "scan_output_axes", K, 0, s->out_axis);
        if (!rc) rc = attr_list(s->a_out_dirs, "scan_output_directions", K, 0, s->out_dir);
    }
    if (rc) return rc;
    if (lead && c->in[0].dtype != KILN_DTYPE_UNDEFINED && c->in[0].dtype != KILN_DTYPE_I64)
        return kiln_set_error(KILN_ETYPE, "Scan: sequence_lens must be int64, it is %s", kiln_dtype_name(c->in[0].dtype));
    kiln_desc bin[KILN_MAX_IO];
    kiln_exprs *x = c->x;
    int64_t trip = -1, batch = 1;
    for (int i = 0; i < N + M + E; i++) {
        const kiln_desc *d = &c->in[lead + i];
        if (d->dtype == KILN_DTYPE_UNDEFINED)
            return kiln_set_error(KILN_EINVAL, "Scan: input %d is absent", lead + i);
        int64_t dims[KILN_MAX_DIMS];
        if (!kiln__ops_const_dims(d, dims))
            return kiln_set_error(KILN_EUNSUPPORTED, "Scan: input %d has a dim known only at run time; kiln runs "
                                  "Scan with fixed shapes only", lead + i);
        bin[i] = *d;
        bin[i].data = NULL;
        bin[i].nvalues = -1;
        int is_scan = i >= N && i < N + M;
        int strip_batch = s->opset8 && i < N + M;
        if (strip_batch) {
            if (d->ndim < 1 + is_scan)
                return kiln_set_error(KILN_ESHAPE, "Scan (opset 8): input %d needs a batch axis%s", lead + i,
                                      is_scan ? " and a sequence axis" : "");
            if (i == 0 || (i == N && N == 0)) batch = dims[0];
            else if (dims[0] != batch)
                return kiln_set_error(KILN_ESHAPE, "Scan (opset 8): input %d has batch %lld, expected %lld", lead + i,
                                      (long long)dims[0], (long long)batch);
            bin[i].ndim = d->ndim - 1;
            for (int k = 0; k < bin[i].ndim; k++) bin[i].dims[k] = d->dims[k + 1];
            memmove(dims, dims + 1, sizeof dims[0] * (size_t)(KILN_MAX_DIMS - 1));
        }
        if (is_scan) {
            int j = i - N;
            int64_t ax = s->opset8 ? 0 : s->in_axis[j];
            int r = bin[i].ndim;
            if (ax < 0) ax += r;
            if (ax < 0 || ax >= r)
                return kiln_set_error(KILN_EATTR, "Scan: scan input %d axis %lld out of range for rank %d", j,
                                      (long long)s->in_axis[j], r);
            s->in_axis[j] = ax;
            if (trip < 0) trip = dims[ax];
            else if (dims[ax] != trip)
                return kiln_set_error(KILN_ESHAPE, "Scan: scan input %d has %lld steps along axis %lld, scan input 0 "
                                      "has %lld", j, (long long)dims[ax], (long long)ax, (long long)trip);
            for (int k = (int)ax; k < r - 1; k++) bin[i].dims[k] = bin[i].dims[k + 1];
            bin[i].ndim = r - 1;
        }
    }
    kiln__body_free(&s->body);
    rc = kiln__body_build(&s->body, s->graph, bin, (int)(N + M + E), "Scan");
    if (rc) return rc;
    rc = kiln__body_check_static(&s->body, 0, (int)(N + K), "Scan");
    if (rc) return rc;
    const kiln__body *b = &s->body;
    for (int i = 0; i < N; i++) {
        const kiln__body_io *o = &b->out[i], *v = &b->in[i];
        int same = o->dtype == v->dtype && o->ndim == v->ndim;
        for (int d = 0; same && d < o->ndim; d++) same = o->dims[d] == v->dims[d];
        if (!same)
            return kiln_set_error(KILN_ESHAPE, "Scan: state value %d: the body takes '%s' and returns '%s' with "
                                  "another type or shape; kiln needs them equal", i, v->name, o->name);
    }
    s->n_state = N;
    s->n_out = K;
    s->n_outer = E;
    s->trip = trip;
    s->batch = batch;
    for (int i = 0; i < N; i++) {
        c->out[i] = c->in[lead + i];
        c->out[i].data = NULL;
        c->out[i].nvalues = -1;
    }
    for (int k = 0; k < K; k++) {
        const kiln__body_io *o = &b->out[N + k];
        kiln_desc *d = &c->out[N + k];
        memset(d, 0, sizeof *d);
        d->nvalues = -1;
        d->dtype = o->dtype;
        int r = o->ndim + 1, off = s->opset8 ? 1 : 0;
        if (r + off > KILN_MAX_DIMS)
            return kiln_set_error(KILN_EUNSUPPORTED, "Scan: scan output %d would have rank %d", k, r + off);
        int64_t ax = s->out_axis[k];
        if (ax < 0) ax += r;
        if (ax < 0 || ax >= r)
            return kiln_set_error(KILN_EATTR, "Scan: scan output %d axis %lld out of range for rank %d", k,
                                  (long long)s->out_axis[k], r);
        s->out_axis[k] = ax;
        d->ndim = r + off;
        if (off) d->dims[0] = kiln_expr_const(x, batch);
        for (int i = 0, j = 0; i < r; i++)
            d->dims[off + i] = kiln_expr_const(x, i == ax ? trip : o->dims[j++]);
    }
    kiln__ops_fill_unused(c, (int)(N + K));
    return 0;
}

/* Copy slice `idx` along `axis` of a row-major tensor (dims, rank r) to or
 * from a contiguous buffer. */
static void slice_copy(uint8_t *t, const int64_t *dims, int r, int64_t axis, int64_t idx, size_t es, uint8_t *buf,
                       int to_buf) {
    int64_t outer = 1, inner = (int64_t)es;
    for (int i = 0; i < axis; i++) outer *= dims[i];
    for (int i = (int)axis + 1; i < r; i++) inner *= dims[i];
    for (int64_t o = 0; o < outer; o++) {
        uint8_t *p = t + ((size_t)o * (size_t)dims[axis] + (size_t)idx) * (size_t)inner;
        if (to_buf) memcpy(buf + (size_t)o * (size_t)inner, p, (size_t)inner);
        else memcpy(p, buf + (size_t)o * (size_t)inner, (size_t)inner);
    }
}

static int scan_enqueue(void *state, const kiln_call *c) {
    kiln__subctx tmp, *x = NULL;
    kiln_context *sub = NULL;
    int rc = kiln__subctx_get(state, 1, &tmp, &x, "Scan");
    if (rc) return rc;
    const scan_state *s = x->st;
    if ((rc = kiln__subctx_open(x, 0, &s->body, c->exec, &sub))) goto out;
    const kiln__body *b = &s->body;
    int lead = s->opset8 ? 1 : 0;
    int N = (int)s->n_state, M = (int)s->n_in, K = (int)s->n_out, E = (int)s->n_outer;
    int64_t T = s->trip, B = s->batch;
    if (lead && c->in[0].data) {
        const int64_t *sl = c->in[0].data;
        int64_t n = kiln_tensor_numel(&c->in[0]);
        for (int64_t i = 0; i < n; i++)
            if (sl[i] != T) {
                rc = kiln__err(KILN_EUNSUPPORTED, "Scan: sequence_lens[%lld] = %lld; kiln supports only the full "
                               "length %lld", (long long)i, (long long)sl[i], (long long)T);
                goto out;
            }
    }
    /* Buffers: state A/B, one slice per scan input and per scan output. */
    size_t off[3 * KILN_MAX_IO], total = 0;
    int nb = 2 * N + M + K;
    for (int i = 0; i < nb; i++) {
        const kiln__body_io *io = i < 2 * N ? &b->in[i % N] : i < 2 * N + M ? &b->in[N + (i - 2 * N)]
                                                                           : &b->out[N + (i - 2 * N - M)];
        off[i] = total;
        total += (kiln__body_io_bytes(io) + 63) & ~(size_t)63;
    }
    uint8_t *mem = kiln__aligned_alloc(total ? total : 64);
    if (!mem) { rc = kiln__err(KILN_ENOMEM, "Scan: out of memory"); goto out; }
    for (int64_t bi = 0; bi < B && !rc; bi++) {
        uint8_t *A = mem, *Bf = mem + (N ? off[N] : 0);
        size_t soff[KILN_MAX_IO];
        for (int i = 0; i < N; i++) {
            soff[i] = off[i];
            size_t sb = kiln__body_io_bytes(&b->in[i]);
            memcpy(A + soff[i], (const uint8_t *)c->in[lead + i].data + (size_t)bi * sb, sb);
        }
        for (int64_t t = 0; t < T && !rc; t++) {
            for (int j = 0; j < M; j++) {
                const kiln_tensor *x = &c->in[lead + N + j];
                size_t es = kiln_dtype_size(x->dtype);
                const int64_t *dims = x->dims + lead;
                int r = x->ndim - lead;
                size_t per = kiln__body_io_bytes(&b->in[N + j]) * (size_t)T;
                uint8_t *base = (uint8_t *)x->data + (size_t)bi * per;
                int64_t idx = s->in_dir[j] ? T - 1 - t : t;
                slice_copy(base, dims, r, s->in_axis[j], idx, es, mem + off[2 * N + j], 1);
                if (!rc) rc = kiln__body_bind_in(sub, b, N + j, mem + off[2 * N + j]);
            }
            for (int i = 0; i < N && !rc; i++) rc = kiln__body_bind_in(sub, b, i, A + soff[i]);
            for (int i = 0; i < E && !rc; i++) rc = kiln__body_bind_in(sub, b, N + M + i, c->in[lead + N + M + i].data);
            for (int i = 0; i < N && !rc; i++) rc = kiln__body_bind_out(sub, b, i, Bf + soff[i]);
            for (int k = 0; k < K && !rc; k++) rc = kiln__body_bind_out(sub, b, N + k, mem + off[2 * N + M + k]);
            if (!rc) rc = kiln_context_run(sub);
            if (rc) { rc = kiln__err_prefix(rc, "Scan step %lld", (long long)t); break; }
            for (int k = 0; k < K; k++) {
                kiln_tensor *y = &c->out[N + k];
                size_t es = kiln_dtype_size(y->dtype);
                size_t per = kiln__body_io_bytes(&b->out[N + k]) * (size_t)T;
                int64_t idx = s->out_dir[k] ? T - 1 - t : t;
                slice_copy((uint8_t *)y->data + (size_t)bi * per, y->dims + lead, y->ndim - lead, s->out_axis[k], idx,
                           es, mem + off[2 * N + M + k], 0);
            }
            uint8_t *sw = A;
            A = Bf;
            Bf = sw;
        }
        for (int i = 0; i < N && !rc; i++) {
            size_t sb = kiln__body_io_bytes(&b->in[i]);
            memcpy((uint8_t *)c->out[i].data + (size_t)bi * sb, A + soff[i], sb);
        }
    }
    kiln__aligned_free(mem);
    if (!rc) kiln__ops_zero_unused(c, N + K);
out:
    kiln__subctx_put(x);
    return rc;
}

static int scan_attach(void *state, void **ctx_state) { return kiln__subctx_attach(state, 1, ctx_state, "Scan"); }

static int scan_serialize(const void *state, void *buf, size_t *size) {
    const scan_state *s = state;
    int64_t ints[SCAN_HDR + 4 * KILN_MAX_IO];
    int n = 0;
    ints[n++] = s->opset8, ints[n++] = s->n_state, ints[n++] = s->n_in, ints[n++] = s->n_out;
    ints[n++] = s->n_outer, ints[n++] = s->trip, ints[n++] = s->batch, ints[n++] = 0;
    for (int i = 0; i < KILN_MAX_IO; i++) {
        ints[n++] = s->in_axis[i];
        ints[n++] = s->in_dir[i];
        ints[n++] = s->out_axis[i];
        ints[n++] = s->out_dir[i];
    }
    return kiln__body_serialize(&s->body, ints, n, buf, size);
}

static int scan_deserialize(const void *buf, size_t size, void **state) {
    scan_state *s = kiln__calloc(1, sizeof *s);
    if (!s) return kiln__err(KILN_ENOMEM, "Scan: out of memory");
    s->tag = SCAN_TAG;
    int64_t ints[SCAN_HDR + 4 * KILN_MAX_IO];
    int rc = kiln__body_deserialize(&s->body, ints, SCAN_HDR + 4 * KILN_MAX_IO, buf, size);
    if (!rc) {
        int n = 0;
        s->opset8 = ints[n++], s->n_state = ints[n++], s->n_in = ints[n++], s->n_out = ints[n++];
        s->n_outer = ints[n++], s->trip = ints[n++], s->batch = ints[n++];
        n++;
        int bad = 0;
        for (int i = 0; i < KILN_MAX_IO; i++) {
            s->in_axis[i] = ints[n++];
            s->in_dir[i] = ints[n++];
            s->out_axis[i] = ints[n++];
            s->out_dir[i] = ints[n++];
            if (s->in_axis[i] < 0 || s->in_axis[i] >= KILN_MAX_DIMS || s->out_axis[i] < 0 ||
                s->out_axis[i] >= KILN_MAX_DIMS)
                bad = 1;
        }
        if (bad || s->n_state < 0 || s->n_in < 1 || s->n_out < 0 || s->n_outer < 0 || s->trip < 0 || s->batch < 0 ||
            s->n_state + s->n_in + s->n_outer != s->body.nin || s->n_state + s->n_out > s->body.nout ||
            s->n_state + s->n_out > SCAN_MAX_OUT)
            rc = kiln__err(KILN_EFORMAT, "Scan state: inconsistent counts or axes");
    }
    if (rc) { scan_destroy(s); return rc; }
    *state = s;
    return 0;
}

static int scan_timing_id(void *state, char *buf, size_t size) {
    const scan_state *s = state;
    return kiln__body_timing_id(&s->body, "scan", buf, size);
}

#define SCAN_VT(var, createfn)                                                                       \
    static const kiln_plugin_vtable var = {                                                          \
        .version = KILN_PLUGIN_VTABLE_VERSION, .create = createfn, .clone = scan_clone,             \
        .destroy = scan_destroy, .shape = scan_shape, .timing_id = scan_timing_id,                   \
        .enqueue = scan_enqueue, .serialize = scan_serialize, .deserialize = scan_deserialize,       \
        .attach_to_context = scan_attach, .detach_from_context = kiln__subctx_detach,                        \
    };
SCAN_VT(scan_vt8, scan_create8)
SCAN_VT(scan_vt9, scan_create9)

#define SCAN_DEF(var, ver, vtab, minin)                                                                \
    static const kiln_plugin_def var = {                                                             \
        .ns = "ai.onnx", .name = "Scan", .version = ver,                                             \
        .min_inputs = minin, .max_inputs = KILN_MAX_IO - SCAN_MAX_OUT, .num_outputs = SCAN_MAX_OUT,   \
        .attrs = scan_attrs, .vt = &vtab,                                                            \
        .doc = "Scan over a body sub-engine (the scan length must be fixed at build)",               \
    };                                                                                               \
    KILN_PLUGIN(var)

SCAN_DEF(scan_8, 8, scan_vt8, 2)
SCAN_DEF(scan_9, 9, scan_vt9, 1)
SCAN_DEF(scan_11, 11, scan_vt9, 1)
SCAN_DEF(scan_16, 16, scan_vt9, 1)
