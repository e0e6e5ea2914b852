/*
 * shape.c — the builder's first passes, and the shape-function helpers of
 * plugin.h (kiln_shape_alias, kiln_shape_size_tensor, kiln_shape_broadcast,
 * kiln_shape_inline).
 *
 *   1. symbols: every dynamic input dim is a symbol named after the dim; its
 *      min/opt/max come from the config's profile for that input.  Small
 *      integer inputs (rank <= 1) carry value symbols "<input>[i]".
 *   2. shape inference in topological order, calling each op's shape function
 *      on a fresh instance; If-style ops may splice a sub-network in
 *      (kiln_shape_inline).  Layers whose inputs are all constants are run
 *      right away on the CPU (constant folding); outputs whose symbolic values
 *      are all constants become constants without running anything.
 *   3. dead layers (nothing reads their outputs) are dropped.
 */
#include "builder.h"

#include <stdio.h>
#include <stdlib.h>

#define BUILD_MAX_DEPTH 16
#define FOLD_MAX_BYTES ((uint64_t)256 << 20)

static bsym *add_sym(builder *b, const kiln_expr *e, bsym_kind kind, int t, int d) {
    bsym *n = kiln__grow(b->sym, &b->capsym, b->nsym + 1, sizeof *b->sym);
    if (!n) return NULL;
    b->sym = n;
    bsym *s = &b->sym[b->nsym++];
    memset(s, 0, sizeof *s);
    s->e = e;
    s->kind = kind;
    s->t = t;
    s->d = d;
    return s;
}

static int is_int_dtype(kiln_dtype t) {
    return t == KILN_DTYPE_I64 || t == KILN_DTYPE_I32 || t == KILN_DTYPE_I16 || t == KILN_DTYPE_I8 ||
           t == KILN_DTYPE_U8 || t == KILN_DTYPE_U16 || t == KILN_DTYPE_U32 || t == KILN_DTYPE_U64 ||
           t == KILN_DTYPE_BOOL;
}

static int64_t load_int(const void *p, kiln_dtype t, int64_t i) {
    switch (t) {
    case KILN_DTYPE_I64: return ((const int64_t *)p)[i];
    case KILN_DTYPE_I32: return ((const int32_t *)p)[i];
    case KILN_DTYPE_I16: return ((const int16_t *)p)[i];
    case KILN_DTYPE_I8: return ((const int8_t *)p)[i];
    case KILN_DTYPE_U8: case KILN_DTYPE_BOOL: return ((const uint8_t *)p)[i];
    case KILN_DTYPE_U16: return ((const uint16_t *)p)[i];
    case KILN_DTYPE_U32: return ((const uint32_t *)p)[i];
    case KILN_DTYPE_U64: return (int64_t)((const uint64_t *)p)[i];
    default: return 0;
    }
}

static void store_int(void *p, kiln_dtype t, int64_t i, int64_t v) {
    switch (t) {
    case KILN_DTYPE_I64: ((int64_t *)p)[i] = v; break;
    case KILN_DTYPE_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case KILN_DTYPE_I16: ((int16_t *)p)[i] = (int16_t)v; break;
    case KILN_DTYPE_I8: ((int8_t *)p)[i] = (int8_t)v; break;
    case KILN_DTYPE_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case KILN_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case KILN_DTYPE_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case KILN_DTYPE_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case KILN_DTYPE_U64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    default: break;
    }
}

/* numel if all dims are constant, else -1. */
static int64_t const_numel(const bt *t) {
    int64_t n = 1, v;
    for (int d = 0; d < t->ndim; d++) {
        if (!kiln_expr_is_const(t->dims[d], &v)) return -1;
        n *= v;
    }
    return n;
}

/* Small integer constants also carry their values as expressions, so shape
 * functions downstream can compute with them symbolically. */
static void const_values(builder *b, bt *t) {
    t->nvalues = -1;
    if (!t->data || !is_int_dtype(t->dtype) || t->ndim > 1) return;
    int64_t n = const_numel(t);
    if (n < 0 || n > KILN_MAX_VALUES) return;
    for (int64_t i = 0; i < n; i++) t->values[i] = kiln_expr_const(b->x, load_int(t->data, t->dtype, i));
    t->nvalues = (int)n;
}

/* ------------------------------------------------------------ shape functions API */

typedef struct shape_priv {
    builder *b;                 /* NULL: bounds mode (kiln__shape_run_bounds) */
    kiln__shape_bounds *bounds;
    int layer;
    const kiln_network *inline_net;
    int alias[KILN_MAX_IO];
    int nsize;
} shape_priv;

/* Shape-function helpers are called from plugin code: a NULL context or
 * argument is misuse (recorded, and the shape callback fails with it). */

int kiln_shape_alias(kiln_shape_ctx *c, int out, int in) {
    KILN__CB_ARG(c, KILN_EINVAL);
    if (out < 0 || out >= c->nout || in < 0 || in >= c->nin)
        return kiln__err(KILN_EINVAL, "kiln_shape_alias: output %d / input %d out of range (%d outputs, %d inputs)",
                         out, in, c->nout, c->nin);
    if (c->in[in].dtype == KILN_DTYPE_UNDEFINED)
        return kiln__err(KILN_EINVAL, "kiln_shape_alias: input %d is absent", in);
    shape_priv *p = c->priv_;
    if (p && out < KILN_MAX_IO) p->alias[out] = in;
    return 0;
}

const kiln_expr *kiln_shape_size_tensor(kiln_shape_ctx *c, int out, const kiln_expr *opt,
                                        const kiln_expr *upper) {
    KILN__CB_ARG(c && c->x, kiln_expr_sym(NULL, NULL));
    KILN__CB_ARG(opt && upper && out >= 0 && out < c->nout, kiln_expr_sym(c->x, "<invalid size tensor>"));
    shape_priv *p = c->priv_;
    if (p && !p->b) { /* bounds mode: the dims it sets hold at most this */
        c->out[out].dtype = KILN_DTYPE_I64;
        c->out[out].ndim = 0;
        return upper;
    }
    char *name = kiln__strfmt("%s:size%d", p ? p->b->l[p->layer].name : "?", out);
    const kiln_expr *s = name ? kiln_expr_sym(c->x, name) : kiln_expr_sym(NULL, NULL);
    kiln__free(name);
    kiln__expr_assume_min(s, 0); /* a count */
    kiln_desc *d = &c->out[out];
    d->dtype = KILN_DTYPE_I64;
    d->ndim = 0;
    d->nvalues = 1;
    d->values[0] = s;
    if (p) {
        builder *b = p->b;
        if (!kiln__b_find_sym(b, s)) {
            bsym *bs = add_sym(b, s, BS_SIZE, b->l[p->layer].out[out], out);
            if (bs) {
                bs->opt = opt;
                bs->upper = upper;
            }
        }
        b->t[b->l[p->layer].out[out]].is_size = 1;
        b->t[b->l[p->layer].out[out]].size_sym = s;
        p->nsize++;
    }
    return s;
}

int kiln_shape_numel_bound(kiln_shape_ctx *c, int out, const kiln_expr *upper) {
    KILN__CB_ARG(c && upper, KILN_EINVAL);
    if (out < 0 || out >= c->nout)
        return kiln__err(KILN_EINVAL, "kiln_shape_numel_bound: output %d out of range (%d outputs)", out, c->nout);
    shape_priv *p = c->priv_;
    if (p && !p->b) p->bounds->numel[out] = upper;
    else if (p) p->b->t[p->b->l[p->layer].out[out]].numel_bound = upper;
    return 0;
}

int kiln__shape_ctx_building(const kiln_shape_ctx *c) {
    const shape_priv *p = c ? c->priv_ : NULL;
    return p && p->b;
}

int kiln__shape_ctx_build_threads(const kiln_shape_ctx *c) {
    const shape_priv *p = c ? c->priv_ : NULL;
    return p && p->b ? (p->b->cfg->threads > 0 ? p->b->cfg->threads : 1) : 0;
}

int kiln__shape_ctx_cpu_blocked(const kiln_shape_ctx *c) {
    const shape_priv *p = c ? c->priv_ : NULL;
    if (!p || !p->b) return 1;
    /* KILN_BUILD_CPU_LINEAR (the caller's) wins over the tests' force */
    return !(p->b->cfg->flags & KILN_BUILD_CPU_LINEAR) &&
           (p->b->cfg->device == KILN_DEVICE_CPU || kiln__b_blocked_force());
}

int kiln__b_formats(builder *b, int li) {
    const bl *L = &b->l[li];
    kiln_desc din[KILN_MAX_IO], dout[KILN_MAX_IO];
    for (int i = 0; i < L->nin; i++) kiln__b_desc(b, L->in[i], &din[i]);
    for (int k = 0; k < L->nout; k++) kiln__b_desc(b, L->out[k], &dout[k]);
    shape_priv sp = {.b = b, .layer = li};
    for (int k = 0; k < KILN_MAX_IO; k++) sp.alias[k] = -1;
    kiln_shape_ctx c = {.x = b->x, .in = din, .nin = L->nin, .out = dout, .nout = L->nout, .priv_ = &sp};
    return kiln__op_formats_fn(L->op, L->state, &c);
}

int kiln__shape_run_bounds(const kiln__op *op, void *state, kiln_shape_ctx *c, kiln__shape_bounds *bounds) {
    shape_priv sp = {.b = NULL, .bounds = bounds};
    for (int k = 0; k < KILN_MAX_IO; k++) {
        sp.alias[k] = -1;
        bounds->numel[k] = NULL;
    }
    c->priv_ = &sp;
    int rc = kiln__misuse_take(op->vt->shape(state, c));
    c->priv_ = NULL;
    if (!rc && sp.inline_net)
        rc = kiln__err(KILN_EUNSUPPORTED, "the op replaces itself by a sub-network (only the builder inlines)");
    return rc;
}

/* "2,?,3": dims for a message, '?' where not constant. */
static void dims_text(const kiln_expr *const *d, int n, char *buf, size_t size) {
    size_t len = 0;
    buf[0] = 0;
    for (int k = 0; k < n && len < size; k++) {
        int64_t v;
        if (kiln_expr_is_const(d[k], &v))
            len += (size_t)snprintf(buf + len, size - len, "%s%lld", k ? "," : "", (long long)v);
        else
            len += (size_t)snprintf(buf + len, size - len, "%s?", k ? "," : "");
    }
}

int kiln_shape_broadcast(kiln_shape_ctx *c, const kiln_expr *const *a, int na,
                         const kiln_expr *const *bb, int nb, const kiln_expr **out) {
    KILN__CB_ARG(c && (a || na <= 0) && (bb || nb <= 0) && out && na >= 0 && nb >= 0, KILN_EINVAL);
    int n = na > nb ? na : nb;
    if (n > KILN_MAX_DIMS)
        return kiln__err(KILN_ESHAPE, "broadcast: rank %d exceeds %d", n, KILN_MAX_DIMS);
    const kiln_expr *res[KILN_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        const kiln_expr *x = i - (n - na) >= 0 ? a[i - (n - na)] : NULL;
        const kiln_expr *y = i - (n - nb) >= 0 ? bb[i - (n - nb)] : NULL;
        int64_t xv = -1, yv = -1;
        int xc = x && kiln_expr_is_const(x, &xv), yc = y && kiln_expr_is_const(y, &yv);
        if (!x) res[i] = y;
        else if (!y) res[i] = x;
        else if (x == y) res[i] = x;
        else if (xc && xv == 1) res[i] = y;
        else if (yc && yv == 1) res[i] = x;
        else if (xc && yc) {
            char sa[128], sb[128];
            dims_text(a, na, sa, sizeof sa);
            dims_text(bb, nb, sb, sizeof sb);
            return kiln__err(KILN_ESHAPE,
                             "cannot broadcast shapes [%s] and [%s]: dim %d is %lld vs %lld (expected equal or 1)",
                             sa, sb, i, (long long)xv, (long long)yv);
        } else res[i] = kiln_expr_max(c->x, x, y);
    }
    for (int i = 0; i < n; i++) out[i] = res[i];
    return n;
}

int kiln_shape_inline(kiln_shape_ctx *c, const kiln_network *sub) {
    KILN__CB_ARG(c, KILN_EINVAL);
    shape_priv *p = c->priv_;
    if (!p || !p->b) return kiln__err(KILN_EUNSUPPORTED, "kiln_shape_inline: only the builder can inline");
    if (!sub) return kiln__err(KILN_EINVAL, "kiln_shape_inline: sub-network is NULL");
    if (sub->ninputs > c->nin)
        return kiln__err(KILN_EINVAL, "kiln_shape_inline: sub-network has %d inputs, the layer %d",
                         sub->ninputs, c->nin);
    if (sub->noutputs != c->nout)
        return kiln__err(KILN_EINVAL, "kiln_shape_inline: sub-network has %d outputs, the layer %d",
                         sub->noutputs, c->nout);
    p->inline_net = sub;
    return 0;
}

int kiln_shape_inline_owned(kiln_shape_ctx *c, kiln_network *sub) {
    shape_priv *p = c ? c->priv_ : NULL;
    if (!p || !sub) {
        kiln_network_free(sub);
        return kiln__err(KILN_EUNSUPPORTED, "kiln_shape_inline: only the builder can inline");
    }
    builder *b = p->b;
    kiln_network **o = kiln__realloc(b->owned, (size_t)(b->nowned + 1) * sizeof *o);
    if (!o) {
        kiln_network_free(sub);
        return kiln__err(KILN_ENOMEM, "build: out of memory");
    }
    b->owned = o;
    b->owned[b->nowned++] = sub;
    return kiln_shape_inline(c, sub);
}

/* ------------------------------------------------------------ inference + folding */

static int layer_err(builder *b, int li, int rc) {
    const bl *L = &b->l[li];
    return kiln__err_prefix(rc, "layer '%s' (%s::%s v%d)", L->name, L->op->ns, L->op->name,
                            L->op->version);
}


/* Execute a layer whose inputs are all constants; its outputs become constants. */
static int fold_run(builder *b, int li) {
    bl *L = &b->l[li];
    kiln_tensor in[KILN_MAX_IO], out[KILN_MAX_IO];
    kiln_io_format io = {.n = L->nin + L->nout};
    void *bufs[KILN_MAX_IO] = {0};
    uint64_t bytes[KILN_MAX_IO];
    int rc = 0;
    memset(in, 0, sizeof in);
    memset(out, 0, sizeof out);
    for (int i = 0; i < L->nin; i++) {
        if (L->in[i] < 0) continue;
        const bt *t = &b->t[L->in[i]];
        int64_t dims[KILN_MAX_DIMS] = {0};
        for (int d = 0; d < t->ndim; d++) kiln_expr_is_const(t->dims[d], &dims[d]);
        kiln__tensor_view(&in[i], (void *)t->data, t->dtype, KILN_FORMAT_LINEAR, b->exec.device,
                          t->ndim, dims);
        io.dtype[i] = t->dtype;
    }
    for (int k = 0; k < L->nout; k++) {
        bt *t = &b->t[L->out[k]];
        int64_t dims[KILN_MAX_DIMS] = {0};
        for (int d = 0; d < t->ndim; d++) kiln_expr_is_const(t->dims[d], &dims[d]);
        kiln_format fmt = KILN_FORMAT_LINEAR;
        kiln_attrs rf_view = kiln__attrset_view(L->attrs);
        if (L->is_reformat && t->ndim >= 3) /* a constant converted to another layout */
            fmt = (kiln_format)kiln_attrs_int(&rf_view, "to_format");
        kiln__tensor_view(&out[k], NULL, t->dtype, fmt, b->exec.device, t->ndim, dims);
        io.dtype[L->nin + k] = t->dtype;
        io.format[L->nin + k] = out[k].format;
        rc = kiln__tensor_bytes(t->dtype, out[k].format, t->ndim, out[k].dims, &bytes[k]);
        bufs[k] = rc ? NULL : kiln__aligned_alloc(bytes[k] ? bytes[k] : 64);
        if (!rc && !bufs[k])
            rc = kiln__err(KILN_ENOMEM, "out of memory for %llu bytes", (unsigned long long)bytes[k]);
        if (rc) { /* the limits of a run, named like a run's errors */
            layer_err(b, li, kiln__err_prefix(rc, "output '%s'", t->name));
            kiln__err_prefix(rc, "constant folding");
            goto fail;
        }
        out[k].data = bufs[k];
        if (t->alias_in >= 0) {
            /* In-place kernel: give it a private copy of the input to update. */
            for (int i = 0; i < L->nin; i++)
                if (L->in[i] == t->alias_in) {
                    memcpy(bufs[k], b->t[t->alias_in].data, b->t[t->alias_in].bytes);
                    in[i].data = bufs[k];
                }
        }
    }
    rc = kiln__b_run(b, li, &io, 0, in, out, 0, NULL);
    if (rc) {
        layer_err(b, li, rc);
        kiln__err_prefix(rc, "constant folding");
        goto fail;
    }
    for (int k = 0; k < L->nout; k++) {
        bt *t = &b->t[L->out[k]];
        t->kind = BT_CONST;
        t->data = bufs[k];
        t->data_owned = 1;
        t->bytes = (size_t)bytes[k];
        t->pdtype = t->dtype;
        t->pfmt = out[k].format;
        t->producer = -1;
        t->alias_in = -1;
        bufs[k] = NULL;
        const_values(b, t);
    }
    L->dead = 1;
    if (b->st) b->st->folded++;
    return 0;
fail:
    for (int k = 0; k < L->nout; k++) kiln__aligned_free(bufs[k]);
    return rc;
}

/* Outputs whose symbolic values are all constants become constants. */
static int fold_values(builder *b, int li) {
    bl *L = &b->l[li];
    for (int k = 0; k < L->nout; k++) {
        const bt *t = &b->t[L->out[k]];
        int64_t n = const_numel(t), v;
        if (n < 0 || t->nvalues != n || !is_int_dtype(t->dtype) || t->is_size) return 0;
        for (int i = 0; i < n; i++)
            if (!kiln_expr_is_const(t->values[i], &v)) return 0;
    }
    for (int k = 0; k < L->nout; k++) {
        bt *t = &b->t[L->out[k]];
        int64_t n = const_numel(t), v;
        size_t bytes = (size_t)n * kiln_dtype_size(t->dtype);
        void *data = kiln__aligned_alloc(bytes ? bytes : 64);
        if (!data) return kiln__err(KILN_ENOMEM, "folding: out of memory");
        for (int i = 0; i < n; i++) {
            kiln_expr_is_const(t->values[i], &v);
            store_int(data, t->dtype, i, v);
        }
        t->kind = BT_CONST;
        t->data = data;
        t->data_owned = 1;
        t->bytes = bytes;
        t->producer = -1;
        t->alias_in = -1;
    }
    L->dead = 1;
    if (b->st) b->st->folded++;
    return 0;
}

static int infer_layer(builder *b, int li, int depth) {
    bl *L = &b->l[li];
    const kiln__op *op = L->op;
    const char *missing = kiln__attrset_missing(L->attrs);
    if (missing)
        return kiln__err(KILN_EATTR, "layer '%s' (%s::%s v%d): required attribute '%s' is not set",
                         L->name, op->ns, op->name, op->version, missing);
    kiln_attrs view = kiln__attrset_view(L->attrs);
    int rc = kiln__op_create(op, &view, &L->state);
    if (rc) return layer_err(b, li, rc);
    kiln_desc din[KILN_MAX_IO], dout[KILN_MAX_IO];
    for (int i = 0; i < L->nin; i++) kiln__b_desc(b, L->in[i], &din[i]);
    for (int k = 0; k < L->nout; k++) {
        memset(&dout[k], 0, sizeof dout[k]);
        dout[k].nvalues = -1;
    }
    shape_priv sp = {.b = b, .layer = li};
    for (int k = 0; k < KILN_MAX_IO; k++) sp.alias[k] = -1;
    kiln_shape_ctx c = {.x = b->x, .in = din, .nin = L->nin, .out = dout, .nout = L->nout,
                        .attrs = &view, .priv_ = &sp};
    kiln__err(0, "%s", "");
    kiln__misuse_clear();
    rc = kiln__misuse_take(op->vt->shape(L->state, &c));
    L = &b->l[li];
    if (rc) return layer_err(b, li, rc);
    if (sp.inline_net) {
        if (depth >= BUILD_MAX_DEPTH)
            return kiln__err(KILN_EUNSUPPORTED, "layer '%s': sub-networks nested deeper than %d", L->name,
                             BUILD_MAX_DEPTH);
        if (op->vt->destroy) op->vt->destroy(L->state);
        L->state = NULL;
        L->dead = 1;
        int in_map[KILN_MAX_IO], out_map[KILN_MAX_IO];
        for (int i = 0; i < L->nin; i++) in_map[i] = L->in[i];
        for (int k = 0; k < L->nout; k++) out_map[k] = L->out[k];
        char *prefix = kiln__strfmt("%s/", L->name);
        rc = prefix ? kiln__b_process_net(b, sp.inline_net, in_map, out_map, prefix, depth + 1)
                    : kiln__err(KILN_ENOMEM, "build: out of memory");
        kiln__free(prefix);
        if (rc) return kiln__err_prefix(rc, "layer '%s' (inlined sub-network)", b->l[li].name);
        return 0;
    }
    for (int k = 0; k < L->nout; k++) {
        bt *t = &b->t[L->out[k]];
        const kiln_desc *d = &dout[k];
        if (d->dtype <= KILN_DTYPE_UNDEFINED || d->dtype >= KILN_DTYPE_COUNT_ || kiln_dtype_size(d->dtype) == 0)
            return kiln__err(KILN_EINTERNAL, "layer '%s' (%s::%s v%d): shape function left output %d ('%s') without a valid dtype (%d)",
                             L->name, op->ns, op->name, op->version, k, t->name, (int)d->dtype);
        if (d->ndim < 0 || d->ndim > KILN_MAX_DIMS)
            return kiln__err(KILN_EINTERNAL, "layer '%s' (%s::%s v%d): output %d rank %d out of range",
                             L->name, op->ns, op->name, op->version, k, d->ndim);
        t->dtype = d->dtype;
        t->ndim = d->ndim;
        for (int i = 0; i < d->ndim; i++) {
            if (!d->dims[i])
                return kiln__err(KILN_EINTERNAL, "layer '%s' (%s::%s v%d): output %d dim %d not set",
                                 L->name, op->ns, op->name, op->version, k, i);
            int64_t v;
            if (kiln_expr_is_const(d->dims[i], &v) && v < 0)
                return kiln__err(KILN_ESHAPE, "layer '%s' (%s::%s v%d): output %d ('%s') dim %d is %lld",
                                 L->name, op->ns, op->name, op->version, k, t->name, i, (long long)v);
            t->dims[i] = d->dims[i];
        }
        t->nvalues = d->nvalues > KILN_MAX_VALUES ? -1 : d->nvalues;
        for (int i = 0; i < t->nvalues; i++) {
            if (!d->values[i]) { t->nvalues = -1; break; }
            t->values[i] = d->values[i];
        }
        if (sp.alias[k] >= 0) {
            int src = L->in[sp.alias[k]];
            if (kiln_dtype_size(b->t[src].dtype) != kiln_dtype_size(t->dtype))
                return kiln__err(KILN_ESHAPE, "layer '%s': output %d aliases input %d but element sizes differ (%zu vs %zu bytes)",
                                 L->name, k, sp.alias[k], kiln_dtype_size(t->dtype), kiln_dtype_size(b->t[src].dtype));
            t->alias_in = src;
        }
    }
    /* Constant folding. */
    int all_const = 1, any_in = 0;
    for (int i = 0; i < L->nin; i++) {
        if (L->in[i] < 0) continue;
        any_in = 1;
        if (b->t[L->in[i]].kind != BT_CONST) all_const = 0;
    }
    int nondet = op->quick ? op->quick->nondeterministic : 0;
    if (b->no_fold) return 0;
    if (all_const && any_in && !nondet && sp.nsize == 0) {
        uint64_t total = 0;
        int ok = 1;
        for (int k = 0; k < L->nout && ok; k++) {
            int64_t n = const_numel(&b->t[L->out[k]]);
            if (n < 0) ok = 0;
            else total += (uint64_t)n * kiln_dtype_size(b->t[L->out[k]].dtype);
        }
        if (ok && total <= FOLD_MAX_BYTES) return fold_run(b, li);
    }
    if (sp.nsize == 0) return fold_values(b, li);
    return 0;
}

/* Topological order of a network's layers (Kahn); a cycle names a layer. */
static int topo_order(const kiln_network *net, int *order) {
    int n = net->nlayers, rc = 0;
    int *indeg = kiln__calloc((size_t)(n ? n : 1), sizeof *indeg);
    int *queue = kiln__malloc((size_t)(n ? n : 1) * sizeof *queue);
    if (!indeg || !queue) {
        kiln__free(indeg);
        kiln__free(queue);
        return kiln__err(KILN_ENOMEM, "build: out of memory");
    }
    for (int li = 0; li < n; li++) {
        const kiln_layer *l = net->layers[li];
        for (int i = 0; i < l->nin; i++)
            if (l->in[i] >= 0 && net->tensors[l->in[i]].producer >= 0) indeg[li]++;
    }
    int qh = 0, qt = 0, done = 0;
    for (int li = 0; li < n; li++)
        if (!indeg[li]) queue[qt++] = li;
    while (qh < qt) {
        int li = queue[qh++];
        order[done++] = li;
        const kiln_layer *l = net->layers[li];
        for (int k = 0; k < l->nout; k++) {
            int t = l->out[k];
            for (int lj = 0; lj < n; lj++) {
                const kiln_layer *m = net->layers[lj];
                for (int i = 0; i < m->nin; i++)
                    if (m->in[i] == t && --indeg[lj] == 0) queue[qt++] = lj;
            }
        }
    }
    if (done < n) {
        for (int li = 0; li < n; li++)
            if (indeg[li] > 0) {
                rc = kiln__err(KILN_EINVAL, "network has a cycle through layer '%s' (its inputs depend on its own outputs)",
                               net->layers[li]->name);
                break;
            }
    }
    kiln__free(indeg);
    kiln__free(queue);
    return rc;
}

/* A dynamic dim name is one symbol across the inputs: every input that
 * names it must give it the same min/opt/max, pinned (min = max, made a
 * constant below) or not.  Checks input ni's dims against its earlier
 * dims and inputs < ni (whose profiles setup_input has accepted). */
static int check_shared_dims(const builder *b, const kiln_network *net, int ni, const kiln__profile *p) {
    const kiln__ntensor *nt = &net->tensors[net->inputs[ni]];
    for (int d = 0; d < nt->ndim; d++) {
        if (nt->dims[d] >= 0 || !nt->dim_names[d]) continue;
        for (int j = 0; j <= ni; j++) {
            const kiln__ntensor *ot = &net->tensors[net->inputs[j]];
            const kiln__profile *q = j == ni ? p : kiln__config_profile(b->cfg, ot->name);
            for (int e = 0; q && e < (j == ni ? d : ot->ndim) && e < q->ndim; e++) {
                if (ot->dims[e] >= 0 || !ot->dim_names[e] || strcmp(ot->dim_names[e], nt->dim_names[d])) continue;
                if (q->min[e] != p->min[d] || q->opt[e] != p->opt[d] || q->max[e] != p->max[d])
                    return kiln__err(KILN_EPROFILE,
                                     "dim '%s' appears in inputs '%s' (dim %d) and '%s' (dim %d) with different "
                                     "profiles (min/opt/max %lld/%lld/%lld vs %lld/%lld/%lld): a dim name is one "
                                     "size across the inputs", nt->dim_names[d], ot->name, e, nt->name, d,
                                     (long long)q->min[e], (long long)q->opt[e], (long long)q->max[e],
                                     (long long)p->min[d], (long long)p->opt[d], (long long)p->max[d]);
            }
        }
    }
    return 0;
}

static int setup_input(builder *b, const kiln_network *net, int ni) {
    const kiln__ntensor *nt = &net->tensors[net->inputs[ni]];
    int ti = kiln__b_new_tensor(b, nt->name, BT_INPUT);
    if (ti < 0) return ti;
    bt *t = &b->t[ti];
    t->dtype = nt->dtype;
    t->ndim = nt->ndim;
    t->input_index = ni;
    const kiln__profile *p = kiln__config_profile(b->cfg, nt->name);
    if (p && p->ndim != nt->ndim)
        return kiln__err(KILN_EPROFILE, "profile for input '%s' has %d dims, the input has %d", nt->name,
                         p->ndim, nt->ndim);
    int rc = p ? check_shared_dims(b, net, ni, p) : 0;
    if (rc) return rc;
    for (int d = 0; d < nt->ndim; d++) {
        if (nt->dims[d] >= 0) {
            if (p && (p->min[d] != nt->dims[d] || p->opt[d] != nt->dims[d] || p->max[d] != nt->dims[d]))
                return kiln__err(KILN_EPROFILE,
                                 "profile for input '%s' dim %d: the dim is fixed at %lld, the profile says min %lld opt %lld max %lld",
                                 nt->name, d, (long long)nt->dims[d], (long long)p->min[d],
                                 (long long)p->opt[d], (long long)p->max[d]);
            t->dims[d] = kiln_expr_const(b->x, nt->dims[d]);
            continue;
        }
        if (!p)
            return kiln__err(KILN_EPROFILE,
                             "input '%s' has dynamic dim %d ('%s') but the build config has no profile for it "
                             "(kiln_build_config_set_profile; kiln build: --shapes NAME:AxB.. or --min-shapes/--opt-shapes/--max-shapes)",
                             nt->name, d, nt->dim_names[d]);
        /* A profile that pins the dim (min = max) makes it a constant: the
         * shape arithmetic on it (Shape -> Gather -> Concat -> Reshape)
         * then folds at build instead of running as layers. */
        if (p->min[d] == p->max[d]) {
            t->dims[d] = kiln_expr_const(b->x, p->min[d]);
            continue;
        }
        const kiln_expr *s = kiln_expr_sym(b->x, nt->dim_names[d]);
        kiln__expr_assume_min(s, p->min[d]); /* the context enforces the profile */
        t = &b->t[ti];
        t->dims[d] = s;
        if (kiln__b_find_sym(b, s)) continue; /* an earlier input's, with the same profile (check_shared_dims) */
        bsym *bs = add_sym(b, s, BS_INPUT_DIM, ti, d);
        if (!bs) return KILN_ENOMEM;
        bs->vmin = p->min[d];
        bs->vopt = p->opt[d];
        bs->vmax = p->max[d];
    }
    /* Small integer inputs: their elements are value symbols "<input>[i]". */
    t = &b->t[ti];
    int64_t n = const_numel(t);
    if ((t->dtype == KILN_DTYPE_I64 || t->dtype == KILN_DTYPE_I32) && t->ndim <= 1 && n >= 0 &&
        n <= KILN_MAX_VALUES) {
        for (int64_t i = 0; i < n; i++) {
            char *name = kiln__strfmt("%s[%lld]", t->name, (long long)i);
            if (!name) return kiln__err(KILN_ENOMEM, "build: out of memory");
            const kiln_expr *s = kiln_expr_sym(b->x, name);
            kiln__free(name);
            b->t[ti].values[i] = s;
            if (!kiln__b_find_sym(b, s)) {
                bsym *bs = add_sym(b, s, BS_VALUE, ti, (int)i);
                if (!bs) return KILN_ENOMEM;
                bs->vmin = bs->vopt = bs->vmax = 1;
            }
        }
        b->t[ti].nvalues = (int)n;
    }
    return ti;
}

int kiln__b_process_net(builder *b, const kiln_network *net, const int *in_map, const int *out_map,
                       const char *prefix, int depth) {
    int rc = 0;
    int *tmap = kiln__malloc((size_t)(net->ntensors ? net->ntensors : 1) * sizeof *tmap);
    int *order = kiln__malloc((size_t)(net->nlayers ? net->nlayers : 1) * sizeof *order);
    if (!tmap || !order) {
        rc = kiln__err(KILN_ENOMEM, "build: out of memory");
        goto out;
    }
    for (int i = 0; i < net->ntensors; i++) tmap[i] = -1;
    rc = topo_order(net, order);
    if (rc) goto out;
    for (int i = 0; i < net->ninputs; i++) {
        if (in_map) {
            /* an absent layer input: an error only where a layer reads it */
            tmap[net->inputs[i]] = in_map[i];
        } else {
            rc = setup_input(b, net, i);
            if (rc < 0) goto out;
            tmap[net->inputs[i]] = rc;
            rc = 0;
        }
    }
    for (int i = 0; i < net->ntensors; i++) {
        const kiln__ntensor *nt = &net->tensors[i];
        if (nt->kind != KILN__T_CONST) continue;
        char *nm = kiln__strfmt("%s%s", prefix, nt->name);
        int ti = nm ? kiln__b_new_tensor(b, nm, BT_CONST) : kiln__err(KILN_ENOMEM, "build: out of memory");
        kiln__free(nm);
        if (ti < 0) { rc = ti; goto out; }
        bt *t = &b->t[ti];
        t->dtype = nt->dtype;
        t->ndim = nt->ndim;
        for (int d = 0; d < nt->ndim; d++) t->dims[d] = kiln_expr_const(b->x, nt->dims[d]);
        t->data = nt->data;
        t->bytes = nt->bytes;
        const_values(b, t);
        tmap[i] = ti;
    }
    /* Sub-network outputs produced by its layers write the outer layer's outputs. */
    int bound[KILN_MAX_IO] = {0};
    if (out_map)
        for (int k = 0; k < net->noutputs; k++) {
            int st = net->outputs[k];
            if (net->tensors[st].kind == KILN__T_LAYER && tmap[st] < 0) {
                tmap[st] = out_map[k];
                bound[k] = 1;
            }
        }
    for (int oi = 0; oi < net->nlayers; oi++) {
        const kiln_layer *nl = net->layers[order[oi]];
        char *nm = kiln__strfmt("%s%s", prefix, nl->name);
        int li = nm ? kiln__b_new_layer(b, nm, nl->op, nl->nin, nl->nout)
                    : kiln__err(KILN_ENOMEM, "build: out of memory");
        kiln__free(nm);
        if (li < 0) { rc = li; goto out; }
        bl *L = &b->l[li];
        L->attrs = &nl->attrs;
        L->aot = nl->aot;
        for (int i = 0; i < nl->nin; i++) {
            L->in[i] = nl->in[i] >= 0 ? tmap[nl->in[i]] : -1;
            if (nl->in[i] >= 0 && L->in[i] < 0) {
                rc = kiln__err(KILN_EINVAL, "layer '%s': input '%s' is not available (a sub-network input "
                               "bound to an absent input of the layer it replaces?)", L->name,
                               net->tensors[nl->in[i]].name);
                goto out;
            }
        }
        for (int k = 0; k < nl->nout; k++) {
            int st = nl->out[k];
            if (tmap[st] < 0) {
                nm = kiln__strfmt("%s%s", prefix, net->tensors[st].name);
                int ti = nm ? kiln__b_new_tensor(b, nm, BT_ACT) : kiln__err(KILN_ENOMEM, "build: out of memory");
                kiln__free(nm);
                if (ti < 0) { rc = ti; goto out; }
                tmap[st] = ti;
            }
            b->t[tmap[st]].producer = li;
            b->l[li].out[k] = tmap[st];
        }
        rc = infer_layer(b, li, depth);
        if (rc) goto out;
    }
    if (out_map) {
        /* Outputs that are sub-network inputs/constants (or named twice) need a copy. */
        for (int k = 0; k < net->noutputs; k++) {
            if (bound[k]) continue;
            int src = tmap[net->outputs[k]];
            int dst = out_map[k];
            char *nm = kiln__strfmt("%scopy:%s", prefix, b->t[dst].name);
            int li = nm ? kiln__b_new_layer(b, nm, b->reformat_op, 1, 1)
                        : kiln__err(KILN_ENOMEM, "build: out of memory");
            kiln__free(nm);
            if (li < 0) { rc = li; goto out; }
            bl *L = &b->l[li];
            L->has_own = 1;
            rc = kiln__attrset_init(&L->own, b->reformat_op);
            if (rc) goto out;
            L->attrs = &L->own;
            L->is_reformat = 1;
            L->in[0] = src;
            L->out[0] = dst;
            b->t[dst].producer = li;
            rc = infer_layer(b, li, depth);
            if (rc) goto out;
        }
    } else {
        for (int k = 0; k < net->noutputs; k++) b->t[tmap[net->outputs[k]]].is_output = 1;
    }
out:
    kiln__free(tmap);
    kiln__free(order);
    return rc;
}

int kiln__b_add_reformat(builder *b, int from, const char *name, kiln_dtype dt, kiln_format fmt,
                         int *out_tensor) {
    char *lname = kiln__strfmt("reformat:%s", name);
    int li = lname ? kiln__b_new_layer(b, lname, b->reformat_op, 1, 1) : kiln__err(KILN_ENOMEM, "build: out of memory");
    kiln__free(lname);
    if (li < 0) return li;
    bl *L = &b->l[li];
    L->has_own = 1;
    int rc = kiln__attrset_init(&L->own, b->reformat_op);
    if (rc) return rc;
    L->attrs = &L->own;
    L->is_reformat = 1;
    kiln_attr_value v = {.present = 1, .type = KILN_ATTR_INT, .i = dt};
    rc = kiln__attrset_set(&L->own, "to_dtype", &v);
    v.i = fmt;
    if (!rc) rc = kiln__attrset_set(&L->own, "to_format", &v);
    if (rc) return rc;
    int ti = *out_tensor;
    if (ti < 0) ti = kiln__b_new_tensor(b, name, BT_ACT);
    if (ti < 0) return ti;
    L = &b->l[li];
    L->in[0] = from;
    L->out[0] = ti;
    b->t[ti].producer = li;
    rc = infer_layer(b, li, 0);
    if (rc) return rc;
    L = &b->l[li];
    const bt *src = &b->t[from];
    bt *t = &b->t[ti];
    t->pdtype = t->dtype;
    t->pfmt = fmt;
    /* Same elements as its source: a bound on a data-dependent source's
     * element count bounds the copy too (without it the copy of a tensor
     * with data-dependent dims is sized at every dim's upper bound at once:
     * 329 GB for a [<=4350]^3 SequenceAt output copied to the GPU). */
    if (!t->numel_bound) t->numel_bound = src->numel_bound;
    L->io.n = 2;
    L->io.dtype[0] = src->pdtype;
    L->io.format[0] = src->pfmt;
    L->io.dtype[1] = t->dtype;
    L->io.format[1] = fmt;
    *out_tensor = ti;
    return li;
}

/* ------------------------------------------------------------ dead layers */

/* Expressions already walked.  Dims are hash-consed DAGs that share
 * subexpressions heavily (a transformer's reshapes nest the same products
 * again and again): walking them as trees took exponential time (minutes
 * for a 12-layer encoder), so each node is visited once.  Open addressing
 * on the pointer; when it cannot grow, the walk simply repeats nodes. */
typedef struct expr_set {
    const kiln_expr **v;
    size_t cap, n;
} expr_set;

static int expr_set_add(expr_set *s, const kiln_expr *e) { /* 1: new */
    if (2 * (s->n + 1) > s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        const kiln_expr **v = kiln__calloc(cap, sizeof *v);
        if (!v) return 1;
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->v[i]) continue;
            size_t h = ((uintptr_t)s->v[i] >> 4) * 0x9E3779B97F4A7C15ull % cap;
            while (v[h]) h = (h + 1) % cap;
            v[h] = s->v[i];
        }
        kiln__free(s->v);
        s->v = v;
        s->cap = cap;
    }
    size_t h = ((uintptr_t)e >> 4) * 0x9E3779B97F4A7C15ull % s->cap;
    while (s->v[h]) {
        if (s->v[h] == e) return 0;
        h = (h + 1) % s->cap;
    }
    s->v[h] = e;
    s->n++;
    return 1;
}

static void mark_syms(builder *b, expr_set *seen, const kiln_expr *e, int depth) {
    if (!e || depth > 200 || !expr_set_add(seen, e)) return;
    if (e->op == KILN_EXPR_SYM) {
        const bsym *s = kiln__b_find_sym(b, e);
        if (s && s->kind == BS_SIZE) b->t[s->t].live = 1;
        return;
    }
    mark_syms(b, seen, e->a, depth + 1);
    mark_syms(b, seen, e->b, depth + 1);
    mark_syms(b, seen, e->c, depth + 1);
}

void kiln__b_dead_code(builder *b) {
    expr_set seen = {0};
    for (int i = 0; i < b->nt; i++)
        if (b->t[i].is_output) b->t[i].live = 1;
    for (int li = b->nl - 1; li >= 0; li--) {
        bl *L = &b->l[li];
        if (L->dead) continue;
        int live = 0;
        for (int k = 0; k < L->nout; k++) live |= b->t[L->out[k]].live;
        if (!live) {
            L->dead = 1;
            continue;
        }
        for (int k = 0; k < L->nout; k++) {
            const bt *t = &b->t[L->out[k]];
            for (int d = 0; d < t->ndim; d++) mark_syms(b, &seen, t->dims[d], 0);
        }
        for (int i = 0; i < L->nin; i++)
            if (L->in[i] >= 0) {
                b->t[L->in[i]].live = 1;
                const bt *t = &b->t[L->in[i]];
                for (int d = 0; d < t->ndim; d++) mark_syms(b, &seen, t->dims[d], 0);
            }
    }
    kiln__free(seen.v);
}

