/*
 * validate.c — what an engine file must satisfy beyond parsing, so that no
 * bytes of an engine without native code can make a kernel touch memory
 * outside its tensors.
 *
 * Parsing (file.c) range-checks every count, index, offset and length on
 * its own.  Here the parts are checked against each other:
 *
 *   at load (kiln__engine_validate)
 *     - constants: fixed dims whose bytes fit the constant's weight range,
 *       64-byte aligned;
 *     - layers in order: an activation is written by a layer before any
 *       layer reads it, and every tensor's lifetime (which the memory plan
 *       uses to share memory) covers each layer that reads or writes it;
 *     - an alias (in-place) has the element size of its root;
 *   when the layers are prepared (kiln__layer_check_formats, before any
 *   constant is prepacked)
 *     - each layer's tensors' dtypes and layouts, with its tactic, are a
 *       combination its op accepts on the layer's device (the quick op's
 *       formats / cuda_formats, a built-in op's formats_fn on the static
 *       view of its inputs, or the plugin's supports_format and
 *       valid_tactics), as the builder enumerated them, and the layer's
 *       record of its chosen io says the same; ops without combinations
 *       take LINEAR and tactic 0, and their shape function (below) is
 *       the judge of types;
 *   at each shape change (kiln__layer_check_shapes, from the context)
 *     - each layer's output dtypes and dims are what its op's shape
 *       function computes from the layer's actual input dims and constant
 *       inputs: kernels derive their loops from input dims and write
 *       outputs sized by the shape program, and the two must agree.
 *       Combinations made by formats_fn from the inputs are checked
 *       here too.  Output dims the shape function cannot state without data (size
 *       tensors, values read at run time) are bounded by the memory
 *       reserved for them, checked after their producer ran (context.c).
 *
 * AOT layers are native code, trusted by the load policy (kiln.h), and
 * are not checked here; nor are the outer dims of ops with sub-network
 * bodies (their kernels check their inputs against the body engine).
 * Not stored in the file, so nothing to cross-check: workspace sizes and
 * packed weights (both computed from the validated views at load/run).
 * Attribute blobs are decoded against the op's schema (attrs.c: unknown
 * names, types and array element types other than the schema's fail).
 */
#include "kiln_int.h"
#include "engine/validate.h"

#include <stdarg.h>
#include <stdio.h>

static int vfail(const kiln_engine *e, const char *fmt, ...) KILN_PRINTF(2, 3);
static int vfail(const kiln_engine *e, const char *fmt, ...) {
    (void)e;
    char m[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    return kiln__err(KILN_EFORMAT, "engine is inconsistent: %s", m);
}

/* Bytes of a tensor whose dims are all constants; -1 if not fixed. */
static int64_t fixed_bytes(const kiln_engine *e, const kiln__etensor *t) {
    int64_t dims[KILN_MAX_DIMS];
    uint64_t n;
    if (kiln__etensor_static_dims(e, t, dims) >= 0 ||
        kiln__tensor_bytes((kiln_dtype)t->dtype, (kiln_format)t->format, t->ndim, dims, &n))
        return -1;
    return (int64_t)n;
}

int kiln__engine_validate(const kiln_engine *e) {
    for (int32_t i = 0; i < e->ntensors; i++) {
        const kiln__etensor *t = &e->tensors[i];
        if (t->kind == KILN__ET_CONST) {
            int64_t b = fixed_bytes(e, t);
            if (b < 0)
                return vfail(e, "constant '%s' has dims that are not fixed, negative or beyond 2^48 bytes",
                             t->name);
            if ((uint64_t)b > t->const_bytes)
                return vfail(e, "constant '%s' needs %lld bytes for its dims, has %llu (dims must be "
                             "fixed and fit its weights)", t->name, (long long)b,
                             (unsigned long long)t->const_bytes);
            if (t->alias_of >= 0) return vfail(e, "constant '%s' aliases another tensor", t->name);
            /* the builder places constants 64-byte aligned: kernels load
             * their elements (and vectors) aligned */
            if (t->const_off % 64 && t->const_off != KILN__CONST_PACKED_ONLY)
                return vfail(e, "constant '%s' at weights offset %llu, expected a multiple of 64",
                             t->name, (unsigned long long)t->const_off);
        }
        if (t->alias_of < 0) continue;
        const kiln__etensor *a = &e->tensors[t->alias_of];
        /* in place: activations only (the builder copies network inputs
         * and constants first; their memory is the caller's / the file's) */
        int act = t->kind == KILN__ET_ACT || t->kind == KILN__ET_OUTPUT;
        if (!act || (a->kind != KILN__ET_ACT && a->kind != KILN__ET_OUTPUT))
            return vfail(e, "tensor '%s' shares the buffer of '%s': only activations share buffers",
                         t->name, a->name);
        if (kiln_dtype_size((kiln_dtype)t->dtype) != kiln_dtype_size((kiln_dtype)a->dtype))
            return vfail(e, "tensor '%s' aliases '%s' of another element size", t->name, a->name);
    }
    /* Producers before readers; lifetimes cover every use. */
    int32_t *made = kiln__calloc((size_t)e->ntensors + 1, sizeof *made);
    if (!made) return kiln__err(KILN_ENOMEM, "out of memory validating the engine");
    for (int32_t i = 0; i < e->ntensors; i++) made[i] = -1;
    int rc = 0;
    for (int32_t l = 0; l < e->nlayers && !rc; l++) {
        const kiln__elayer *L = &e->layers[l];
        for (int32_t k = 0; k < L->nin + L->nout && !rc; k++) {
            int is_in = k < L->nin;
            int32_t ti = is_in ? L->in[k] : L->out[k - L->nin];
            if (ti < 0) continue;
            const kiln__etensor *t = &e->tensors[ti];
            if (t->kind != KILN__ET_ACT && t->kind != KILN__ET_OUTPUT) continue;
            if (is_in && made[ti] < 0 && t->alias_of < 0)
                rc = vfail(e, "layer %d '%s' reads '%s' before any layer writes it", (int)l, L->name,
                           t->name);
            else if (l < t->first || l > t->last)
                rc = vfail(e, "layer %d '%s' uses '%s', whose lifetime is layers %d..%d", (int)l,
                           L->name, t->name, (int)t->first, (int)t->last);
            if (!is_in && made[ti] < 0) made[ti] = l;
        }
    }
    /* Network outputs are read after the last layer. */
    for (int32_t i = 0; i < e->noutputs && !rc; i++) {
        const kiln__etensor *t = &e->tensors[e->outputs[i]];
        if ((t->kind == KILN__ET_ACT || t->kind == KILN__ET_OUTPUT) && made[e->outputs[i]] < 0 &&
            t->alias_of < 0)
            rc = vfail(e, "output '%s' is written by no layer", t->name);
    }
    kiln__free(made);
    return rc;
}

/* The desc a shape function sees of a view, as the builder gave it:
 * constant dims; a constant input's data; and the values of a small
 * integer input (the builder knew them when they came from shapes; the
 * layer's producers have run, so they are in memory now). */
static void view_desc(const kiln_engine *e, kiln_exprs *x, int32_t t, const kiln_tensor *v,
                      kiln_desc *d, int *hidden) {
    memset(d, 0, sizeof *d);
    d->nvalues = -1;
    if (t < 0) return;
    d->dtype = v->dtype;
    d->ndim = v->ndim;
    for (int i = 0; i < v->ndim; i++) d->dims[i] = kiln_expr_const(x, v->dims[i]);
    const kiln__etensor *et = &e->tensors[t];
    int64_t n = kiln_tensor_numel(v);
    int linear = et->format == KILN_FORMAT_LINEAR;
    if (et->kind == KILN__ET_CONST && linear && (uint64_t)n * kiln_dtype_size(v->dtype) == et->const_bytes)
        d->data = kiln__etensor_const(e, et);
    int isint = v->dtype == KILN_DTYPE_I64 || v->dtype == KILN_DTYPE_I32;
    if (!isint || !linear || n > KILN_MAX_VALUES) return;
    /* Values are read on the host: a constant from the weights blob (its
     * device twin holds the same bytes), an activation only when it lives
     * in host memory.  One in device memory (a CUDA layer's) is not read:
     * *hidden tells the caller this layer's check lacks it. */
    const uint8_t *src = d->data ? d->data : v->device == KILN_DEVICE_CPU ? v->data : NULL;
    if (!src) {
        if (v->data && v->device != KILN_DEVICE_CPU) *hidden = 1;
        return;
    }
    d->nvalues = (int)n;
    for (int64_t i = 0; i < n; i++) {
        int64_t val;
        if (v->dtype == KILN_DTYPE_I64) {
            memcpy(&val, src + 8 * i, 8);
        } else {
            int32_t w;
            memcpy(&w, src + 4 * i, 4);
            val = w;
        }
        d->values[i] = kiln_expr_const(x, val);
    }
}

/* Data-dependent output k (dims from size tensors): the memory reserved
 * for it must hold what the op says it may write, its dims at their upper
 * bounds (limited by a numel bound, as the context reserves). */
static int check_capacity(const kiln_engine *e, const kiln__elayer *L, int32_t k, const kiln_desc *d,
                          const kiln_expr *numel, uint64_t cap) {
    const kiln__etensor *et = &e->tensors[L->out[k]];
    int64_t dims[KILN_MAX_DIMS], nb = -1;
    uint64_t need = 0;
    for (int i = 0; i < d->ndim; i++)
        if (!d->dims[i] || !kiln_expr_is_const(d->dims[i], &dims[i])) dims[i] = -1;
    int rc = kiln__tensor_bytes(d->dtype, (kiln_format)et->format, d->ndim, dims, &need);
    if (numel && kiln_expr_is_const(numel, &nb) && nb >= 0) {
        uint64_t nbytes = (uint64_t)nb * kiln_dtype_size(d->dtype);
        if (et->format == KILN_FORMAT_NCHW8C || et->format == KILN_FORMAT_NCHW16C) nbytes *= 16;
        if (rc || nbytes < need) need = nbytes, rc = 0;
    }
    if (rc)
        return kiln__err(KILN_EFORMAT, "engine is inconsistent: layer '%s' output %d '%s': its op states no "
                         "bound for its data-dependent dims", L->name, (int)k, et->name);
    if (need > cap)
        return kiln__err(KILN_EFORMAT, "engine is inconsistent: layer '%s' (%s::%s v%d) output %d '%s' may need "
                         "%llu bytes, the engine reserves %llu", L->name, L->op->ns, L->op->name, L->op->version,
                         (int)k, et->name, (unsigned long long)need, (unsigned long long)cap);
    return 0;
}

/* Mark the network-input dims (SYM INPUT_DIM nodes) node n depends on. */
static void mark_input_dims(const kiln_engine *e, int32_t n, uint8_t *seen, uint8_t *dims_used) {
    if (n < 0 || n >= e->nnodes || seen[n]) return;
    seen[n] = 1;
    const kiln__enode *x = &e->nodes[n];
    if (x->op == KILN_EXPR_CONST) return;
    if (x->op == KILN_EXPR_SYM) {
        if (x->symkind == KILN__SYM_INPUT_DIM && x->a >= 0 && x->a < e->ntensors && x->b >= 0 &&
            x->b < KILN_MAX_DIMS)
            dims_used[(size_t)x->a * KILN_MAX_DIMS + (size_t)x->b] = 1;
        return;
    }
    mark_input_dims(e, x->a, seen, dims_used);
    mark_input_dims(e, x->b, seen, dims_used);
    if (x->op == KILN_EXPR_SELECT_) mark_input_dims(e, x->c, seen, dims_used);
}

int kiln__input_dims_of(const kiln_engine *e, const int32_t *tensors, int n, char *buf, size_t size) {
    uint8_t *seen = kiln__calloc((size_t)e->nnodes + 1, 1);
    uint8_t *used = kiln__calloc((size_t)e->ntensors * KILN_MAX_DIMS + 1, 1);
    int count = 0;
    size_t o = 0;
    buf[0] = 0;
    if (seen && used) {
        for (int k = 0; k < n; k++) {
            if (tensors[k] < 0 || tensors[k] >= e->ntensors) continue;
            const kiln__etensor *t = &e->tensors[tensors[k]];
            for (int i = 0; i < t->ndim; i++) mark_input_dims(e, t->dims[i], seen, used);
        }
        for (int32_t t = 0; t < e->ntensors; t++) {
            int n = 0;
            for (int d = 0; d < KILN_MAX_DIMS; d++) {
                if (!used[(size_t)t * KILN_MAX_DIMS + (size_t)d]) continue;
                if (o < size)
                    o += (size_t)snprintf(buf + o, size - o, "%s%s%d", count ? (n ? ", " : "; ") : "",
                                          n ? "" : "dims ", d);
                n++, count++;
            }
            if (n && o < size) o += (size_t)snprintf(buf + o, size - o, " of input '%s'", e->tensors[t].name);
        }
    }
    kiln__free(seen);
    kiln__free(used);
    return count;
}

int kiln__layer_check_shapes(const kiln_engine *e, int32_t l, void *state, const kiln_attrs *attrs,
                             const kiln_tensor *in, const kiln_tensor *out, const uint8_t *size_dep,
                             const uint64_t *capacity) {
    const kiln__elayer *L = &e->layers[l];
    const kiln__op *op = L->op;
    if (L->aot_kernel >= 0 || !op || !op->vt || !op->vt->shape) return 0;
    if (L->nin > KILN_MAX_IO || L->nout > KILN_MAX_IO) return 0;
    /* Ops with sub-network bodies (Loop, Scan, SequenceMap) keep their
     * bodies as sub-engines (validated when they load); their shape
     * functions need the body graph, which only the builder has. */
    for (int i = 0; i < op->nattrs; i++)
        if (op->attr_defs[i].type == KILN_ATTR_GRAPH) return 0;
    /* A quick op that stores only some attributes (serialize_attrs, e.g.
     * Python plugins: those impl takes) shaped the engine with the others,
     * which the file does not hold: its shape function cannot be re-run. */
    if (op->quick && op->quick->serialize_attrs) return 0;
    kiln_exprs *x = kiln__exprs_create();
    if (!x) return kiln__err(KILN_ENOMEM, "out of memory checking layer '%s'", L->name);
    kiln_desc din[KILN_MAX_IO], dout[KILN_MAX_IO];
    int hidden = 0;
    for (int32_t k = 0; k < L->nin; k++) view_desc(e, x, L->in[k], &in[k], &din[k], &hidden);
    for (int32_t k = 0; k < L->nout; k++) {
        memset(&dout[k], 0, sizeof dout[k]);
        dout[k].nvalues = -1;
    }
    kiln_shape_ctx sc = {.x = x, .in = din, .nin = L->nin, .out = dout, .nout = L->nout, .attrs = attrs};
    kiln__shape_bounds bounds;
    int rc = kiln__shape_run_bounds(op, state, &sc, &bounds);
    if (rc && hidden) {
        /* The shape function needed values that are in device memory
         * (reading them would cost a sync per shape change): this layer is
         * not checked here; its kernels get their dims from the engine. */
        kiln__exprs_free(x);
        return 0;
    }
    if (rc) {
        char m[600], d[200] = "";
        size_t ld = 0;
        snprintf(m, sizeof m, "%s", kiln_errmsg());
        for (int32_t k = 0; k < L->nin && ld < sizeof d; k++) {
            ld += (size_t)snprintf(d + ld, sizeof d - ld, "%s[", k ? ", " : "");
            for (int i = 0; i < in[k].ndim && ld < sizeof d; i++)
                ld += (size_t)snprintf(d + ld, sizeof d - ld, "%s%lld", i ? "x" : "", (long long)in[k].dims[i]);
            if (ld < sizeof d) ld += (size_t)snprintf(d + ld, sizeof d - ld, "]");
        }
        /* A layer that reads values known only at run time (a shape input)
         * may be refused for those values: that is the caller's input, not
         * the engine's bytes. */
        int runtime_values = 0;
        for (int32_t k = 0; k < L->nin; k++)
            if (L->in[k] >= 0 && din[k].nvalues >= 0 && e->tensors[L->in[k]].kind != KILN__ET_CONST)
                runtime_values = 1;
        kiln__exprs_free(x);
        if (runtime_values)
            return kiln__err(KILN_ESHAPE, "layer '%s' (%s::%s v%d) rejects its inputs (dims %s): %s",
                             L->name, op->ns, op->name, op->version, d, m);
        /* Dims that follow from the network inputs' dynamic dims: the
         * caller's shapes are refused (e.g. dims left at 1), so say which
         * input dims to change. */
        char from[200];
        if (kiln__input_dims_of(e, L->in, L->nin, from, sizeof from) > 0)
            return kiln__err(KILN_ESHAPE, "layer '%s' (%s::%s v%d) rejects its input dims %s, which follow from %s: %s; "
                             "give those input dims other values", L->name, op->ns, op->name, op->version, d, from, m);
        return kiln__err(KILN_EFORMAT, "engine is inconsistent: layer '%s' (%s::%s v%d) at input dims %s: %s",
                         L->name, op->ns, op->name, op->version, d, m);
    }
    /* combinations that formats_fn made from these inputs */
    if (op->quick && op->quick->formats_fn && (rc = kiln__layer_check_formats(e, l, state, 0))) {
        kiln__exprs_free(x);
        return rc;
    }
    for (int32_t k = 0; k < L->nout && !rc; k++) {
        const kiln_desc *d = &dout[k];
        const kiln_tensor *v = &out[k];
        if (L->out[k] < 0) continue;
        const char *tn = e->tensors[L->out[k]].name;
        if (d->dtype != KILN_DTYPE_UNDEFINED && d->dtype != v->dtype) {
            rc = kiln__err(KILN_EFORMAT, "engine is inconsistent: layer '%s' (%s::%s v%d) output %d '%s' is %s, "
                           "its op makes %s", L->name, op->ns, op->name, op->version, (int)k, tn,
                           kiln_dtype_name(v->dtype), kiln_dtype_name(d->dtype));
            break;
        }
        if (d->dtype == KILN_DTYPE_UNDEFINED) continue;
        int bad = d->ndim != v->ndim;
        int at = -1, dep = 0;
        const kiln__etensor *et = &e->tensors[L->out[k]];
        for (int i = 0; !bad && i < d->ndim; i++) {
            int64_t want;
            /* a dim the layer itself computes (size tensors): the actual
             * value is checked after it ran (context.c), the memory for
             * its upper bound here */
            if (size_dep[et->dims[i]] & 1) {
                dep = 1;
                continue;
            }
            if (!d->dims[i] || !kiln_expr_is_const(d->dims[i], &want)) continue;
            if (want != v->dims[i]) bad = 1, at = i;
        }
        if (bad) {
            char w[160] = "", h[160] = "";
            size_t lw = 0, lh = 0;
            for (int i = 0; i < d->ndim && lw < sizeof w; i++) {
                char b[48] = "?";
                if (d->dims[i]) kiln_expr_print(d->dims[i], b, sizeof b);
                lw += (size_t)snprintf(w + lw, sizeof w - lw, "%s%s", i ? ", " : "", b);
            }
            for (int i = 0; i < v->ndim && lh < sizeof h; i++)
                lh += (size_t)snprintf(h + lh, sizeof h - lh, "%s%lld", i ? ", " : "",
                                       (long long)v->dims[i]);
            rc = kiln__err(KILN_EFORMAT,
                           "engine is inconsistent: layer '%s' (%s::%s v%d) output %d '%s' has dims "
                           "[%s], its op computes [%s] from its inputs%s", L->name, op->ns, op->name,
                           op->version, (int)k, tn, h, w, at >= 0 ? "" : " (rank differs)");
        } else if (dep && !et->is_size) {
            rc = check_capacity(e, L, k, d, bounds.numel[k], capacity[L->out[k]]);
        }
    }
    kiln__exprs_free(x);
    return rc;
}

/* ------------------------------------------------ types, layouts, tactics */

/* The dtype/layout the layer's kernels see at each position (inputs, then
 * outputs): its tensors'; an absent optional input is UNDEFINED, LINEAR,
 * as the builder lays out a kiln_io_format. */
static void tensors_io(const kiln_engine *e, const kiln__elayer *L, kiln_io_format *io) {
    memset(io, 0, sizeof *io);
    io->n = L->nin + L->nout;
    for (int p = 0; p < io->n; p++) {
        int32_t t = p < L->nin ? L->in[p] : L->out[p - L->nin];
        io->dtype[p] = t >= 0 ? (kiln_dtype)e->tensors[t].dtype : KILN_DTYPE_UNDEFINED;
        io->format[p] = t >= 0 ? (kiln_format)e->tensors[t].format : KILN_FORMAT_LINEAR;
    }
}

/* 1 if some expansion of one of the combinations matches io at every
 * present position and lists the tactic (an empty list: tactic 0), as the
 * builder's candidates are made (select.c; a row of the op's full slot
 * count, max_in inputs + nout outputs, also fits a layer with fewer inputs:
 * its output slots are the layer's; and one with more, a fused residual
 * Add's extra input (builder/fuse.c), which has the output's type and
 * shape: it is held to the first output slot). */
static int combos_accept(const kiln_combo *cb, const kiln_io_format *io, int tactic, int max_in, int nout,
                         int *err) {
    const int nin = io->n - nout;
    for (; cb->types; cb++) {
        int nt = 0, has = 0;
        for (; nt < KILN_MAX_TACTICS && cb->tactics[nt]; nt++) has |= cb->tactics[nt] == tactic;
        if (nt ? !has : tactic != 0) continue;
        int at = io->n, n = kiln_combo_expand(cb->types, cb->layouts, at, NULL, 0);
        if (n < 0 && io->n != max_in + nout) n = kiln_combo_expand(cb->types, cb->layouts, at = max_in + nout, NULL, 0);
        if (n <= 0) continue;
        kiln_io_format *x = kiln__malloc(sizeof *x * (size_t)n);
        if (!x) {
            *err = kiln__err(KILN_ENOMEM, "out of memory checking an engine");
            return 0;
        }
        n = kiln_combo_expand(cb->types, cb->layouts, at, x, n);
        int yes = 0;
        for (int i = 0; i < n && !yes; i++) {
            yes = 1;
            for (int p = 0; p < io->n && yes; p++) {
                int f = at == io->n ? p : p < nin && p < max_in ? p : p < nin ? max_in : max_in + (p - nin);
                if (io->dtype[p] != KILN_DTYPE_UNDEFINED)
                    yes = x[i].dtype[f] == io->dtype[p] && x[i].format[f] == io->format[p];
            }
        }
        kiln__free(x);
        if (yes) return 1;
    }
    return 0;
}

/* A plugin's own answer, position by position as the builder asks it. */
static int plugin_accepts(const kiln__op *op, void *state, const kiln_io_format *io, int tactic) {
    const kiln_plugin_vtable *vt = op->vt;
    for (int p = 0; p < io->n; p++) {
        if (io->dtype[p] == KILN_DTYPE_UNDEFINED) continue;
        int yes = vt->supports_format ? vt->supports_format(state, p, io) == 1
                                      : io->format[p] == KILN_FORMAT_LINEAR;
        if (!yes) return 0;
    }
    int tactics[KILN_MAX_TACTICS], nt = vt->valid_tactics ? vt->valid_tactics(state, tactics, KILN_MAX_TACTICS) : 0;
    if (nt <= 0) return tactic == 0;
    for (int i = 0; i < nt && i < KILN_MAX_TACTICS; i++)
        if (tactics[i] == tactic) return 1;
    return 0;
}

/* At load, a built-in op's formats_fn combinations from the engine's
 * static view of the layer's inputs: dtypes, ranks, dims where static (a
 * symbol of their own elsewhere, as the builder saw dynamic dims) and the
 * constants' data; the shape function is not run (the combinations judge
 * the types here).  Built-in formats_fn read only what is static in every
 * engine (Conv's: conv.c), so a stored tactic they never offer fails the
 * load.  Returns 0 when the combinations were computed (kept in state),
 * else 1: checked at the first shape (kiln__layer_check_shapes). */
static int static_formats(const kiln_engine *e, const kiln__elayer *L, void *state) {
    if (L->nin > KILN_MAX_IO || L->nout > KILN_MAX_IO) return 1;
    kiln_exprs *x = kiln__exprs_create();
    if (!x) return 1;
    kiln_desc din[KILN_MAX_IO], dout[KILN_MAX_IO];
    for (int32_t k = 0; k < L->nin + L->nout; k++) {
        kiln_desc *d = k < L->nin ? &din[k] : &dout[k - L->nin];
        memset(d, 0, sizeof *d);
        d->nvalues = -1;
        if (k >= L->nin || L->in[k] < 0) continue;
        const kiln__etensor *t = &e->tensors[L->in[k]];
        int64_t dims[KILN_MAX_DIMS];
        kiln__etensor_static_dims(e, t, dims);
        d->dtype = (kiln_dtype)t->dtype;
        d->ndim = t->ndim;
        for (int i = 0; i < t->ndim; i++) {
            char sym[48];
            snprintf(sym, sizeof sym, "%d.%d", (int)L->in[k], i);
            d->dims[i] = dims[i] >= 0 ? kiln_expr_const(x, dims[i]) : kiln_expr_sym(x, sym);
        }
        int64_t b = fixed_bytes(e, t);
        if (t->kind == KILN__ET_CONST && t->format == KILN_FORMAT_LINEAR && b >= 0 && (uint64_t)b == t->const_bytes)
            d->data = kiln__etensor_const(e, t);
    }
    kiln_shape_ctx sc = {.x = x, .in = din, .nin = L->nin, .out = dout, .nout = L->nout};
    int rc = kiln__op_formats_fn(L->op, state, &sc);
    kiln__exprs_free(x);
    if (rc) kiln__err(KILN_OK, "%s", ""); /* not an error of the file (yet): the shape check will say */
    return rc != 0;
}

int kiln__layer_check_formats(const kiln_engine *e, int32_t l, void *state, int at_load) {
    const kiln__elayer *L = &e->layers[l];
    const kiln__op *op = L->op;
    if (L->aot_kernel >= 0 || !op || !op->vt) return 0;
    kiln_io_format io;
    tensors_io(e, L, &io);
    char have[400] = "";
    size_t lh = 0;
    for (int p = 0; p < io.n && lh < sizeof have; p++)
        lh += (size_t)snprintf(have + lh, sizeof have - lh, "%s%s %s", p ? ", " : "",
                               io.dtype[p] ? kiln_dtype_name(io.dtype[p]) : "-", kiln_format_name(io.format[p]));
    /* the record of the choice made at build must be what the tensors are */
    for (int p = 0; p < L->io.n && p < io.n; p++)
        if (io.dtype[p] != KILN_DTYPE_UNDEFINED &&
            (L->io.dtype[p] != io.dtype[p] || L->io.format[p] != io.format[p]))
            return vfail(e, "layer '%s' (%s::%s v%d) position %d was chosen as %s %s, its tensor is %s %s",
                         L->name, op->ns, op->name, op->version, p, kiln_dtype_name(L->io.dtype[p]),
                         kiln_format_name(L->io.format[p]), kiln_dtype_name(io.dtype[p]),
                         kiln_format_name(io.format[p]));
    /* the builder's own kiln::reformat converts between any types and
     * layouts: its kernel reads both from the tensors it is given */
    if (op->quick && !strcmp(op->ns, "kiln") && !strcmp(op->name, "reformat")) return 0;
    int ok, err = 0;
    if (op->quick) {
        const kiln_quick_op *q = op->quick;
        const kiln_combo *cb = L->device == KILN_DEVICE_CUDA && q->cuda_formats ? q->cuda_formats
                                                                                : kiln__op_formats(op, state);
        /* combinations computed from the inputs (formats_fn) exist once
         * the shape function ran: a built-in op's now, from the static view
         * of its inputs, others' at the first shape (kiln__layer_check_shapes) */
        if (!cb && q->formats_fn && at_load) {
            if (!op->builtin || static_formats(e, L, state)) return 0;
            cb = kiln__op_formats(op, state);
        }
        if (cb) {
            ok = combos_accept(cb, &io, L->tactic, q->max_inputs, q->num_outputs, &err);
        } else { /* no combinations: the tensors' own types, LINEAR, tactic 0 */
            ok = L->tactic == 0;
            for (int p = 0; p < io.n; p++) ok &= io.format[p] == KILN_FORMAT_LINEAR;
        }
    } else {
        ok = plugin_accepts(op, state, &io, L->tactic);
    }
    if (err) return err;
    if (!ok)
        return vfail(e, "layer '%s' (%s::%s v%d) on %s: types/layouts [%s] with tactic %d are not a combination "
                     "its op accepts", L->name, op->ns, op->name, op->version,
                     L->device == KILN_DEVICE_CUDA ? "cuda" : "cpu", have, (int)L->tactic);
    return 0;
}
