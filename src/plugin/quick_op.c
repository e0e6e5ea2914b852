/*
 * quick_op.c — runs quick ops through the plugin vtable, and creates /
 * serializes op instances for both kinds of ops.
 *
 * A quick-op instance is its attribute values plus the chosen formats and
 * tactic.  Its format combinations are expanded once per instance (lazily)
 * and kept, since the builder asks supports_format many times.
 */
#include "registry_int.h"

#include <stdio.h>

typedef struct qstate {
    const kiln__op *op;
    const kiln_quick_op *q;
    kiln__attrset attrs;
    int tactic;
    kiln_io_format io;
    int configured;
    /* expanded combos at nio = max_inputs + num_outputs, and the index of
     * the kiln_combo each came from */
    kiln_io_format *combos;
    int *combo_src;
    int ncombos; /* -1 = not expanded yet */
    /* formats_fn's answer for this layer ({NULL}-terminated, in fmem), or
     * NULL: the op's static formats. */
    const kiln_combo *formats;
    kiln__defmem fmem;
    /* cuda_check's answer at the last shape call (0: covered) and its message */
    int cuda_refused;
    char cuda_why[256];
} qstate;

/* The combinations this instance offers: formats_fn's or the op's. */
static const kiln_combo *q_formats(const qstate *s) {
    return s->q->formats_fn ? s->formats : s->q->formats;
}

static qstate *qstate_new(const kiln__op *op) {
    qstate *s = kiln__calloc(1, sizeof *s);
    if (!s) {
        kiln__err(KILN_ENOMEM, "op %s::%s: out of memory", op->ns, op->name);
        return NULL;
    }
    s->op = op;
    s->q = op->quick;
    s->ncombos = -1;
    return s;
}

static void q_destroy(void *state) {
    qstate *s = state;
    if (!s) return;
    kiln__attrset_free(&s->attrs);
    kiln__free(s->combos);
    kiln__free(s->combo_src);
    kiln__defmem_free(&s->fmem);
    kiln__free(s);
}

/* Keep a copy of the n combinations at c as this instance's formats. */
static int set_formats(qstate *s, const kiln_combo *c, int n) {
    kiln__defmem m = {0};
    const kiln_combo *f = kiln__combos_copy(&m, c, n);
    if (!f) {
        kiln__defmem_free(&m);
        return kiln__err(KILN_ENOMEM, "op %s::%s: out of memory", s->op->ns, s->op->name);
    }
    kiln__defmem_free(&s->fmem);
    s->fmem = m;
    s->formats = f;
    kiln__free(s->combos);
    kiln__free(s->combo_src);
    s->combos = NULL;
    s->combo_src = NULL;
    s->ncombos = -1;
    return 0;
}

static int count_formats(const kiln_combo *f) {
    int n = 0;
    while (f && f[n].types) n++;
    return n;
}

static int q_create(const kiln_attrs *attrs, void **state) {
    (void)attrs;
    (void)state;
    return kiln__err(KILN_EINTERNAL, "quick-op instances are created with kiln__op_create");
}

static int q_deserialize(const void *buf, size_t size, void **state) {
    (void)buf;
    (void)size;
    (void)state;
    return kiln__err(KILN_EINTERNAL, "quick-op instances are deserialized with kiln__op_deserialize");
}

static int q_clone(const void *state, void **out) {
    const qstate *s = state;
    qstate *c = qstate_new(s->op);
    if (!c) return KILN_ENOMEM;
    int rc = kiln__attrset_copy(&c->attrs, &s->attrs);
    if (rc) {
        q_destroy(c);
        return rc;
    }
    c->tactic = s->tactic;
    c->io = s->io;
    c->configured = s->configured;
    c->cuda_refused = s->cuda_refused;
    memcpy(c->cuda_why, s->cuda_why, sizeof c->cuda_why);
    if (s->formats && (rc = set_formats(c, s->formats, count_formats(s->formats)))) {
        q_destroy(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* Ask the op's formats_fn for this layer's combinations (after shape, with
 * its context) and keep a checked copy. */
static int call_formats_fn(qstate *s, const kiln_shape_ctx *c) {
    enum { MAXC = 256 };
    kiln_combo *buf = kiln__calloc(MAXC, sizeof *buf);
    if (!buf) return kiln__err(KILN_ENOMEM, "op %s::%s: out of memory", s->op->ns, s->op->name);
    int n = s->q->formats_fn(c, buf, MAXC);
    int rc = n < 0 ? kiln__err_prefix(n, "op %s::%s: formats_fn", s->op->ns, s->op->name) : 0;
    if (!rc && n > MAXC)
        rc = kiln__err(KILN_EINVAL, "op %s::%s: formats_fn returned %d combinations, at most %d fit", s->op->ns,
                       s->op->name, n, MAXC);
    int nio = s->q->max_inputs + s->q->num_outputs;
    for (int k = 0; !rc && k < n; k++) {
        if (!buf[k].types) {
            rc = kiln__err(KILN_EINVAL, "op %s::%s: formats_fn combination %d has no types string", s->op->ns,
                           s->op->name, k);
            break;
        }
        int m = kiln_combo_expand(buf[k].types, buf[k].layouts, nio, NULL, 0);
        if (m < 0) rc = kiln__err_prefix(m, "op %s::%s: formats_fn combination %d", s->op->ns, s->op->name, k);
        for (int t = 0; !rc && t < KILN_MAX_TACTICS && buf[k].tactics[t]; t++)
            if (buf[k].tactics[t] < 0)
                rc = kiln__err(KILN_EINVAL, "op %s::%s: formats_fn combination %d lists tactic %d, expected > 0",
                               s->op->ns, s->op->name, k, buf[k].tactics[t]);
    }
    if (!rc) rc = set_formats(s, buf, n > 0 ? n : 0);
    if (!rc && n == 0) s->formats = NULL; /* none: the default, as formats == NULL */
    kiln__free(buf);
    return rc;
}

static int q_shape(void *state, kiln_shape_ctx *c) {
    qstate *s = state;
    kiln_attrs view = kiln__attrset_view(&s->attrs);
    const kiln_attrs *saved = c->attrs;
    void *saved_user = c->user;
    if (!c->attrs) c->attrs = &view;
    c->user = s->q->user;
    int rc = s->q->shape(c);
    if (!rc && s->q->formats_fn) rc = call_formats_fn(s, c);
    if (!rc && s->q->cuda_impl && s->q->cuda_check) {
        kiln__err(KILN_OK, "%s", ""); /* the message, if any, is the check's */
        s->cuda_refused = kiln__misuse_take(s->q->cuda_check(c)); /* misuse there: refused, saying so */
        if (s->cuda_refused) {
            const char *m = kiln_errmsg();
            snprintf(s->cuda_why, sizeof s->cuda_why, "%s", m && *m ? m : "refused by the op's cuda_check");
        }
    }
    c->attrs = saved;
    c->user = saved_user;
    return rc;
}

int kiln__op_formats_fn(const kiln__op *op, void *state, kiln_shape_ctx *c) {
    if (!op->quick || !op->quick->formats_fn || !state) return 0;
    qstate *s = state;
    kiln_attrs view = kiln__attrset_view(&s->attrs);
    kiln_shape_ctx sc = *c;
    if (!sc.attrs) sc.attrs = &view;
    sc.user = s->q->user;
    return call_formats_fn(s, &sc);
}

static int expand_combos(qstate *s) {
    if (s->ncombos >= 0) return 0;
    const kiln_quick_op *q = s->q;
    const kiln_combo *formats = q_formats(s);
    int nio = q->max_inputs + q->num_outputs, total = 0;
    for (int k = 0; formats && formats[k].types; k++) {
        int n = kiln_combo_expand(formats[k].types, formats[k].layouts, nio, NULL, 0);
        if (n < 0) return kiln__err_prefix(n, "op %s::%s formats[%d]", q->ns, q->name, k);
        total += n;
    }
    s->combos = kiln__malloc(sizeof *s->combos * (size_t)(total ? total : 1));
    s->combo_src = kiln__malloc(sizeof *s->combo_src * (size_t)(total ? total : 1));
    if (!s->combos || !s->combo_src) return kiln__err(KILN_ENOMEM, "op %s::%s: out of memory", q->ns, q->name);
    int n = 0;
    for (int k = 0; formats && formats[k].types; k++) {
        int m = kiln_combo_expand(formats[k].types, formats[k].layouts, nio, s->combos + n, total - n);
        if (m < 0) return m;
        for (int i = 0; i < m; i++) s->combo_src[n + i] = k;
        n += m;
    }
    s->ncombos = n;
    return 0;
}

/* Index in the full (max_inputs + outputs) position list of position p of
 * an io with io->n positions (absent trailing optional inputs shift the
 * outputs). */
static int full_pos(const kiln_quick_op *q, const kiln_io_format *io, int p) {
    int nin = io->n - q->num_outputs;
    return p < nin ? p : q->max_inputs + (p - nin);
}

static int combo_matches(const qstate *s, const kiln_io_format *c, const kiln_io_format *io, int upto) {
    for (int p = 0; p <= upto && p < io->n; p++) {
        int f = full_pos(s->q, io, p);
        if (f < 0 || f >= c->n) return 0;
        /* UNDEFINED marks an absent optional input: any choice is fine */
        if (io->dtype[p] != KILN_DTYPE_UNDEFINED && c->dtype[f] != io->dtype[p]) return 0;
        if (c->format[f] != io->format[p]) return 0;
    }
    return 1;
}

static int q_supports_format(void *state, int pos, const kiln_io_format *io) {
    qstate *s = state;
    if (pos < 0 || pos >= io->n) return 0;
    if (!q_formats(s)) return io->format[pos] == KILN_FORMAT_LINEAR;
    if (expand_combos(s)) return 0;
    for (int i = 0; i < s->ncombos; i++)
        if (combo_matches(s, &s->combos[i], io, pos)) return 1;
    return 0;
}

static int q_configure(void *state, const kiln_io_format *io, const kiln_desc *in, int nin, const kiln_desc *out,
                       int nout) {
    (void)in;
    (void)nin;
    (void)out;
    (void)nout;
    qstate *s = state;
    s->io = *io;
    s->configured = 1;
    return 0;
}

/* The call a quick op's callback sees: the instance's attributes, no
 * plugin state, the definition's user pointer. */
static kiln_call q_view_call(const qstate *s, const kiln_call *c, kiln_attrs *view) {
    *view = kiln__attrset_view(&s->attrs);
    kiln_call cc = *c;
    cc.attrs = view;
    cc.state = NULL;
    cc.user = s->q->user;
    return cc;
}

static size_t q_ws_call(const qstate *s, size_t (*fn)(const kiln_call *), const kiln_call *c) {
    if (!fn) return 0;
    kiln_attrs view;
    kiln_call cc = q_view_call(s, c, &view);
    return fn(&cc);
}

static size_t q_workspace(void *state, const kiln_call *c) {
    qstate *s = state;
    return q_ws_call(s, s->q->workspace, c);
}

static size_t q_workspace_cuda(void *state, const kiln_call *c) {
    qstate *s = state;
    return q_ws_call(s, s->q->cuda_workspace, c);
}

static int add_tactic(int *tactics, int n, int max, int t) {
    for (int i = 0; i < n; i++)
        if (tactics[i] == t) return n;
    if (n < max) tactics[n++] = t;
    return n;
}

static int q_valid_tactics(void *state, int *tactics, int max) {
    qstate *s = state;
    int n = 0;
    const kiln_combo *formats = q_formats(s);
    if (!formats || expand_combos(s)) return add_tactic(tactics, 0, max, 0);
    for (int i = 0; i < s->ncombos; i++) {
        if (s->configured && !combo_matches(s, &s->combos[i], &s->io, s->io.n - 1)) continue;
        const kiln_combo *c = &formats[s->combo_src[i]];
        if (!c->tactics[0]) n = add_tactic(tactics, n, max, 0);
        for (int t = 0; t < KILN_MAX_TACTICS && c->tactics[t]; t++) n = add_tactic(tactics, n, max, c->tactics[t]);
    }
    if (!n) n = add_tactic(tactics, 0, max, 0);
    return n;
}

static uint64_t fnv(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void put_value(char *buf, size_t size, size_t *off, const kiln_attr_value *v) {
#define PUT(...)                                                                                   \
    do {                                                                                           \
        if (*off < size) *off += (size_t)snprintf(buf + *off, size - *off, __VA_ARGS__);           \
    } while (0)
    if (!v->present) {
        PUT("-");
        return;
    }
    switch (v->type) {
    case KILN_ATTR_INT:
    case KILN_ATTR_BOOL: PUT("%lld", (long long)v->i); break;
    case KILN_ATTR_FLOAT: PUT("%.17g", v->f); break;
    case KILN_ATTR_STRING: PUT("\"%s\"", v->s ? v->s : ""); break;
    case KILN_ATTR_BYTES: PUT("bytes(%zu,%016llx)", v->len, (unsigned long long)fnv(v->s, v->len)); break;
    case KILN_ATTR_ARRAY: {
        PUT("%s[", kiln_dtype_name(v->elem));
        size_t es = kiln_dtype_size(v->elem);
        if (v->count <= 32) {
            for (int64_t k = 0; k < v->count; k++) {
                const uint8_t *p = (const uint8_t *)v->data + (size_t)k * es;
                uint64_t bits = 0;
                memcpy(&bits, p, es);
                PUT("%s%llx", k ? "," : "", (unsigned long long)bits);
            }
        } else {
            PUT("%lld:%016llx", (long long)v->count, (unsigned long long)fnv(v->data, (size_t)v->count * es));
        }
        PUT("]");
        break;
    }
    case KILN_ATTR_TENSOR: {
        PUT("%s(", kiln_dtype_name(v->elem));
        for (int k = 0; k < v->ndim; k++) PUT("%s%lld", k ? "x" : "", (long long)v->dims[k]);
        PUT(",%016llx)", (unsigned long long)fnv(v->data, (size_t)v->count * kiln_dtype_size(v->elem)));
        break;
    }
    default: PUT("graph"); break;
    }
#undef PUT
}

/* Is `name` in the comma-separated `list`?  A NULL list holds every name. */
static int in_names(const char *list, const char *name) {
    if (!list) return 1;
    size_t nl = strlen(name);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == ',') p++;
        const char *b = p;
        while (*p && *p != ',' && *p != ' ') p++;
        if ((size_t)(p - b) == nl && strncmp(b, name, nl) == 0) return 1;
    }
    return 0;
}

static int q_timing_id(void *state, char *buf, size_t size) {
    qstate *s = state;
    size_t off = 0;
    if (size) buf[0] = '\0';
    for (int i = 0; i < s->attrs.count; i++) {
        const char *name = s->attrs.defs[i].name;
        if (!in_names(s->q->timing_id, name)) continue;
        if (off < size) off += (size_t)snprintf(buf + off, size - off, "%s=", name);
        put_value(buf, size, &off, &s->attrs.v[i]);
        if (off < size) off += (size_t)snprintf(buf + off, size - off, ";");
    }
    if (off >= size && size)
        return kiln__err(KILN_EINVAL, "op %s::%s: timing id needs %zu bytes, buffer holds %zu", s->op->ns,
                         s->op->name, off + 1, size);
    return 0;
}

static int q_set_tactic(void *state, int tactic) {
    ((qstate *)state)->tactic = tactic;
    return 0;
}

static int q_call(const qstate *s, int (*fn)(const kiln_call *), const kiln_call *c) {
    kiln_attrs view;
    kiln_call cc = q_view_call(s, c, &view);
    return fn(&cc);
}

static int q_enqueue(void *state, const kiln_call *c) {
    qstate *s = state;
    if (!s->q->impl)
        return kiln__err(KILN_EUNSUPPORTED, "op %s::%s v%d has only an AOT implementation; build with AOT enabled",
                         s->op->ns, s->op->name, s->op->version);
    return q_call(s, s->q->impl, c);
}

static int q_enqueue_cuda(void *state, const kiln_call *c) {
    qstate *s = state;
    if (!s->q->cuda_impl)
        return kiln__err(KILN_EUNSUPPORTED, "op %s::%s v%d has no CUDA implementation", s->op->ns, s->op->name,
                         s->op->version);
    return q_call(s, s->q->cuda_impl, c);
}

static int q_serialize(const void *state, void *buf, size_t *size) {
    const qstate *s = state;
    if (!s->q->serialize_attrs) return kiln__attrs_serialize(&s->attrs, buf, size);
    /* build-time-only attributes: serialize a view with them marked absent */
    kiln_attr_value *v = kiln__malloc(sizeof *v * (size_t)(s->attrs.count ? s->attrs.count : 1));
    if (!v) return kiln__err(KILN_ENOMEM, "op %s::%s: out of memory serializing attributes", s->op->ns, s->op->name);
    for (int i = 0; i < s->attrs.count; i++) {
        v[i] = s->attrs.v[i];
        if (!in_names(s->q->serialize_attrs, s->attrs.defs[i].name)) v[i].present = 0;
    }
    kiln__attrset view = {.count = s->attrs.count, .defs = s->attrs.defs, .v = v};
    int rc = kiln__attrs_serialize(&view, buf, size);
    kiln__free(v);
    return rc;
}

const kiln_plugin_vtable kiln__quick_vtable = {
    .version = KILN_PLUGIN_VTABLE_VERSION,
    .create = q_create,
    .clone = q_clone,
    .destroy = q_destroy,
    .shape = q_shape,
    .supports_format = q_supports_format,
    .configure = q_configure,
    .workspace_size = q_workspace,
    .valid_tactics = q_valid_tactics,
    .timing_id = q_timing_id,
    .set_tactic = q_set_tactic,
    .on_shape_change = NULL,
    .enqueue = q_enqueue,
    .serialize = q_serialize,
    .deserialize = q_deserialize,
    .attach_to_context = NULL,
    .detach_from_context = NULL,
    .enqueue_cuda = q_enqueue_cuda,
    .workspace_size_cuda = q_workspace_cuda,
};

/* ------------------------------------------------------------ devices */

int kiln__op_has_device(const kiln__op *op, kiln_device_kind d) {
    if (d == KILN_DEVICE_CPU) return 1;
    if (d != KILN_DEVICE_CUDA) return 0;
    if (op->quick) return op->quick->cuda_impl != NULL;
    return op->vt->version >= 2 && op->vt->enqueue_cuda != NULL;
}

int kiln__op_cuda_check(const kiln__op *op, const void *state, const char **why) {
    *why = NULL;
    const qstate *s = state;
    if (!op->quick) return 0;
    /* A plugin's NULL cuda_formats means "as formats"; a built-in launcher
     * takes only the types it names, so a built-in op (its namespace is
     * reserved to libkiln) that names none is not placed at all. */
    if (op->builtin && kiln__registry_ns_reserved(op->ns) && !op->quick->cuda_formats && !op->quick->cuda_check) {
        *why = "a built-in op that states no CUDA types (neither cuda_formats nor cuda_check)";
        return KILN_EUNSUPPORTED;
    }
    if (!s || !s->cuda_refused) return 0;
    *why = s->cuda_why;
    return s->cuda_refused;
}

unsigned kiln__op_host_inputs(const kiln__op *op, kiln_device_kind d) {
    return d == KILN_DEVICE_CUDA && op->quick ? op->quick->cuda_host_inputs : 0;
}

int kiln__op_graph_unsafe(const kiln__op *op) {
    return op->quick ? op->quick->cuda_graph_unsafe : op->plugin && op->plugin->cuda_graph_unsafe;
}

kiln__enqueue_fn kiln__op_enqueue_fn(const kiln__op *op, kiln_device_kind d) {
    if (d == KILN_DEVICE_CUDA) return kiln__op_has_device(op, d) ? op->vt->enqueue_cuda : NULL;
    return op->vt->enqueue;
}

kiln__workspace_fn kiln__op_workspace_fn(const kiln__op *op, kiln_device_kind d) {
    if (d == KILN_DEVICE_CUDA) return kiln__op_has_device(op, d) ? op->vt->workspace_size_cuda : NULL;
    return op->vt->workspace_size;
}

/* ---------------------------------------------------------------- instances */

const kiln_combo *kiln__op_formats(const kiln__op *op, const void *state) {
    if (!op->quick) return NULL;
    if (!op->quick->formats_fn || !state) return op->quick->formats;
    return ((const qstate *)state)->formats;
}

int kiln__op_create(const kiln__op *op, const kiln_attrs *attrs, void **state) {
    KILN__ASSERT(op && state);
    *state = NULL;
    if (op->quick) {
        qstate *s = qstate_new(op);
        if (!s) return KILN_ENOMEM;
        int rc = kiln__attrset_init(&s->attrs, op);
        for (int i = 0; !rc && attrs && i < attrs->count; i++) {
            if (!attrs->v[i].present) continue;
            const char *name = attrs->defs ? attrs->defs[i].name : i < op->nattrs ? op->attr_defs[i].name : "?";
            rc = kiln__attrset_set(&s->attrs, name, &attrs->v[i]);
        }
        if (rc) {
            q_destroy(s);
            return kiln__err_prefix(rc, "op %s::%s v%d", op->ns, op->name, op->version);
        }
        *state = s;
        return 0;
    }
    kiln__attrset tmp = {0};
    kiln_attrs view;
    if (!attrs) {
        int rc = kiln__attrset_init(&tmp, op);
        if (rc) return rc;
        view = kiln__attrset_view(&tmp);
        attrs = &view;
    }
    const kiln_plugin_def *p = op->plugin;
    kiln__misuse_clear();
    int rc = kiln__misuse_take(p->create_user ? p->create_user(attrs, p->user, state)
                                              : op->vt->create(attrs, state));
    kiln__attrset_free(&tmp);
    if (rc) {
        *state = NULL;
        return kiln__err_prefix(rc < 0 ? rc : KILN_EPLUGIN, "plugin %s::%s v%d: create", op->ns, op->name,
                                op->version);
    }
    return 0;
}

int kiln__op_deserialize(const kiln__op *op, const void *blob, size_t size, void **state) {
    KILN__ASSERT(op && state);
    *state = NULL;
    if (op->quick) {
        qstate *s = qstate_new(op);
        if (!s) return KILN_ENOMEM;
        int rc = kiln__attrs_deserialize(&s->attrs, op, blob, size);
        if (rc) {
            q_destroy(s);
            return kiln__err_prefix(rc, "op %s::%s v%d", op->ns, op->name, op->version);
        }
        *state = s;
        return 0;
    }
    const kiln_plugin_def *p = op->plugin;
    int rc = p->deserialize_user ? p->deserialize_user(blob, size, p->user, state)
                                 : op->vt->deserialize(blob, size, state);
    if (rc) {
        *state = NULL;
        return kiln__err_prefix(rc < 0 ? rc : KILN_EPLUGIN, "plugin %s::%s v%d: deserialize", op->ns, op->name,
                                op->version);
    }
    return 0;
}

int kiln__op_serialize(const kiln__op *op, const void *state, uint8_t **blob, size_t *size) {
    KILN__ASSERT(op && blob && size);
    *blob = NULL;
    *size = 0;
    size_t n = 0;
    int rc = op->vt->serialize(state, NULL, &n);
    if (rc) return kiln__err_prefix(rc < 0 ? rc : KILN_EPLUGIN, "op %s::%s v%d: serialize", op->ns, op->name,
                                    op->version);
    uint8_t *b = kiln__malloc(n ? n : 1);
    if (!b) return kiln__err(KILN_ENOMEM, "op %s::%s: out of memory", op->ns, op->name);
    size_t m = n;
    rc = op->vt->serialize(state, b, &m);
    if (rc || m > n) {
        kiln__free(b);
        if (!rc) return kiln__err(KILN_EPLUGIN, "plugin %s::%s v%d: serialize wrote %zu bytes after asking for %zu",
                                  op->ns, op->name, op->version, m, n);
        return kiln__err_prefix(rc < 0 ? rc : KILN_EPLUGIN, "op %s::%s v%d: serialize", op->ns, op->name,
                                op->version);
    }
    *blob = b;
    *size = m;
    return 0;
}

int kiln__op_prepack(const kiln__op *op, const void *state, const kiln_call *c, int input, void *dst,
                     size_t *size) {
    KILN__ASSERT(op && c && size && input >= 0 && input < c->nin);
    size_t want = *size;
    *size = 0;
    if (!op->quick || !op->quick->prepack || !state) return 0;
    const qstate *s = state;
    kiln_attrs view = kiln__attrset_view(&s->attrs);
    kiln_call cc = *c;
    cc.attrs = &view;
    cc.state = NULL;
    cc.prepacked = NULL;
    cc.user = op->quick->user;
    size_t n = dst ? want : 0;
    kiln__misuse_clear();
    int rc = kiln__misuse_take(op->quick->prepack(&cc, input, dst, &n));
    if (rc)
        return kiln__err_prefix(rc < 0 ? rc : KILN_EPLUGIN, "op %s::%s v%d: prepack of input %d", op->ns,
                                op->name, op->version, input);
    if (dst && n != want)
        return kiln__err(KILN_EPLUGIN, "op %s::%s v%d: prepack of input %d wrote %zu bytes after asking for %zu",
                         op->ns, op->name, op->version, input, n, want);
    *size = n;
    return 0;
}
