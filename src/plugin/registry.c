/*
 * registry.c — the process-wide table of op definitions.
 *
 * Ops are keyed by (namespace, name, version).  The registry keeps its own
 * copy of every definition (def_copy.c), so callers may free theirs.  An
 * unregistered op leaves the lookup table but is never freed: networks and
 * engines that hold its kiln__op keep working, so the kiln__op pointers
 * handed out stay valid for the life of the process.
 * Registration validates everything it can up front (identity, counts,
 * attribute defaults, format strings, vtable version) so that a broken
 * plugin fails when it loads, naming itself, rather than in the middle of
 * a build.
 *
 * Which library defined an op is found with dladdr() on the struct passed
 * in.  Ops whose struct lives in the same image as libkiln are built-ins;
 * only they may use the reserved namespaces "ai.onnx*" and "kiln".  Structs
 * in the main program or in no file at all (heap) have no library.
 */
#include "registry_int.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static kiln__op **g_ops;
static int g_nops, g_cap;
/* Unregistered ops: out of the table, still in use (see the top). */
static kiln__op **g_retired;
static int g_nretired;

/* Library loading context (see registry_int.h).  dlopen runs constructors
 * on the loading thread, so the context is per thread. */
static _Thread_local int t_loading;
static _Thread_local int t_load_status;
static _Thread_local char t_load_msg[1024];

void kiln__registry_loading_begin(void) {
    t_loading = 1;
    t_load_status = 0;
    t_load_msg[0] = '\0';
}

int kiln__registry_loading_end(char *msg, size_t size) {
    t_loading = 0;
    if (msg && size) snprintf(msg, size, "%s", t_load_msg);
    return t_load_status;
}

static int reg_fail(int status) {
    /* While kiln_registry_load_library runs, the failure is its result (one
     * message; later ones are logged); constructors that run elsewhere can
     * only log it. */
    if (!t_loading || t_load_status) kiln__log(KILN_LOG_ERROR, "%s", kiln_errmsg());
    if (t_loading && !t_load_status) {
        t_load_status = status;
        snprintf(t_load_msg, sizeof t_load_msg, "%s", kiln_errmsg());
    }
    return status;
}

int kiln__registry_ns_reserved(const char *ns) {
    if (!ns) return 0;
    if (strcmp(ns, "kiln") == 0 || strcmp(ns, "ai.onnx") == 0) return 1;
    return strncmp(ns, "ai.onnx.", 8) == 0;
}

/* Base address of the image holding addr, or NULL. */
static void *image_base(const void *addr, const char **fname) {
    Dl_info info;
    if (!dladdr(addr, &info)) return NULL;
    if (fname) *fname = info.dli_fname;
    return info.dli_fbase;
}

/* Whether the struct at addr lives inside libkiln's own image. */
int kiln__registry_in_libkiln(const void *addr) {
    void *self = image_base((const void *)&kiln__registry_ns_reserved, NULL);
    void *base = image_base(addr, NULL);
    return self && base == self;
}

/* Whether addr lives in another copy of libkiln (e.g. libkiln.so pulled in
 * by a plugin library into a program that links libkiln statically): that
 * image defines kiln_register_quick_op itself.  Its built-in ops are the
 * same as ours, so they are treated as built-ins and duplicates skipped. */
static int in_libkiln_copy(const void *addr) {
    Dl_info info;
    if (!dladdr(addr, &info) || !info.dli_fname || !info.dli_fname[0]) return 0;
    void *h = dlopen(info.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
    if (!h) return 0;
    void *sym = dlsym(h, "kiln_register_quick_op");
    Dl_info si;
    int same = sym && dladdr(sym, &si) && si.dli_fbase == info.dli_fbase;
    dlclose(h);
    return same;
}

/* Whether the image file `fname` is the running program itself. */
static int is_main_program(const char *fname) {
    char *a = realpath(fname, NULL), *b = realpath("/proc/self/exe", NULL);
    int same = a && b && strcmp(a, b) == 0;
    free(a);
    free(b);
    return same;
}

static const char *lib_label(const kiln__op *op) {
    if (op->library) return op->library;
    return op->builtin ? "libkiln (built in)" : "the main program (or a binding: no library file)";
}

/* ---------------------------------------------------------------- lookup */

static kiln__op *find_locked(const char *ns, const char *name, int version) {
    for (int i = 0; i < g_nops; i++) {
        kiln__op *o = g_ops[i];
        if (o->version == version && strcmp(o->name, name) == 0 && strcmp(o->ns, ns) == 0) return o;
    }
    return NULL;
}

const kiln__op *kiln__registry_find(const char *ns, const char *name, int version) {
    if (!ns || !name) return NULL;
    pthread_mutex_lock(&g_mu);
    const kiln__op *o = find_locked(ns, name, version);
    pthread_mutex_unlock(&g_mu);
    return o;
}

const kiln__op *kiln__registry_resolve(const char *ns, const char *name, int max_version) {
    if (!ns || !name) return NULL;
    const kiln__op *best = NULL;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_nops; i++) {
        const kiln__op *o = g_ops[i];
        if (o->version <= max_version && (!best || o->version > best->version) && strcmp(o->name, name) == 0 &&
            strcmp(o->ns, ns) == 0)
            best = o;
    }
    pthread_mutex_unlock(&g_mu);
    return best;
}

void kiln__registry_versions(const char *ns, const char *name, char *buf, size_t size) {
    if (!buf || !size) return;
    buf[0] = '\0';
    int vers[256], n = 0;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_nops && n < 256; i++)
        if (strcmp(g_ops[i]->name, name) == 0 && strcmp(g_ops[i]->ns, ns) == 0) vers[n++] = g_ops[i]->version;
    pthread_mutex_unlock(&g_mu);
    /* sort ascending (small n) */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && vers[j - 1] > vers[j]; j--) {
            int t = vers[j];
            vers[j] = vers[j - 1];
            vers[j - 1] = t;
        }
    size_t off = 0;
    for (int i = 0; i < n && off < size; i++)
        off += (size_t)snprintf(buf + off, size - off, "%s%d", i ? ", " : "", vers[i]);
    if (!n) snprintf(buf, size, "none");
}

const kiln__op *kiln__registry_at(int i) {
    const kiln__op *o = NULL;
    pthread_mutex_lock(&g_mu);
    if (i >= 0 && i < g_nops) o = g_ops[i];
    pthread_mutex_unlock(&g_mu);
    return o;
}

int kiln__split_identity(const char *id, char *buf, size_t size, const char **ns, const char **name) {
    if (!id) return kiln__err(KILN_EINVAL, "op identity is NULL, expected \"namespace::name\"");
    const char *sep = strstr(id, "::");
    size_t len = strlen(id);
    if (!sep || sep == id || !sep[2] || strstr(sep + 2, "::"))
        return kiln__err(KILN_EINVAL, "op identity \"%s\": expected \"namespace::name\" (e.g. \"sample::circ_pad\")",
                         id);
    if (len + 1 > size) return kiln__err(KILN_EINVAL, "op identity \"%.64s...\" is too long", id);
    memcpy(buf, id, len + 1);
    size_t nsl = (size_t)(sep - id);
    buf[nsl] = '\0';
    *ns = buf;
    *name = buf + nsl + 2;
    return 0;
}

/* ---------------------------------------------------------------- validation */

static int check_ident(const char *what, const char *s, const char *ns, const char *name) {
    if (!s || !*s)
        return kiln__err(KILN_EINVAL, "op %s::%s: empty %s", ns ? ns : "?", name ? name : "?", what);
    for (const char *p = s; *p; p++)
        if (*p == ':' || *p == ' ' || *p == '\t' || *p == '\n' || (unsigned char)*p < 0x20)
            return kiln__err(KILN_EINVAL, "op %s::%s: %s \"%s\" contains '%c' (use letters, digits, '_', '.', '-')",
                             ns ? ns : "?", name ? name : "?", what, s, *p == '\n' ? ' ' : *p);
    return 0;
}

static int check_attrs(const char *ns, const char *name, const kiln_attr_def *defs, int *nattrs,
                       kiln_attr_value **defaults) {
    int n = 0;
    *defaults = NULL;
    while (defs && defs[n].name) {
        if (n == 1024) return kiln__err(KILN_EINVAL, "op %s::%s: attribute list not terminated by {NULL}", ns, name);
        n++;
    }
    *nattrs = n;
    for (int i = 0; i < n; i++) {
        const kiln_attr_def *d = &defs[i];
        if (!d->name[0]) return kiln__err(KILN_EINVAL, "op %s::%s: attribute %d has an empty name", ns, name, i);
        if (d->type < KILN_ATTR_INT || d->type > KILN_ATTR_GRAPH)
            return kiln__err(KILN_EINVAL, "op %s::%s: attribute '%s' has type %d, expected a kiln_attr_type", ns,
                             name, d->name, (int)d->type);
        for (int j = 0; j < i; j++)
            if (strcmp(defs[j].name, d->name) == 0)
                return kiln__err(KILN_EINVAL, "op %s::%s: attribute '%s' declared twice", ns, name, d->name);
    }
    if (!n) return 0;
    kiln_attr_value *dv = kiln__calloc((size_t)n, sizeof *dv);
    if (!dv) return kiln__err(KILN_ENOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        int rc = kiln__attr_parse_default(&defs[i], &dv[i]);
        if (rc) {
            for (int j = 0; j < i; j++) kiln__attr_value_free(&dv[j]);
            kiln__free(dv);
            return kiln__err_prefix(rc, "op %s::%s", ns, name);
        }
    }
    *defaults = dv;
    return 0;
}

static int check_quick(const kiln_quick_op *q, const kiln_attr_def *defs, int nattrs) {
    int nio = q->max_inputs + q->num_outputs;
    if (!q->shape) return kiln__err(KILN_EINVAL, "op %s::%s: no shape function", q->ns, q->name);
    if (!q->impl && !q->aot && !q->cuda_impl && !q->cuda_aot)
        return kiln__err(KILN_EINVAL, "op %s::%s: no implementation (impl, aot, cuda_impl or cuda_aot) given",
                         q->ns, q->name);
    /* The CPU combinations and the CUDA ones (when given) obey one grammar. */
    const kiln_combo *lists[2] = {q->formats, q->cuda_formats};
    const char *lname[2] = {"formats", "cuda_formats"};
    for (int li = 0; li < 2; li++) {
        const kiln_combo *f = lists[li];
        for (int k = 0; f && f[k].types; k++) {
            if (k == 4096)
                return kiln__err(KILN_EINVAL, "op %s::%s: %s not terminated by {NULL}", q->ns, q->name, lname[li]);
            int rc = kiln_combo_expand(f[k].types, f[k].layouts, nio, NULL, 0);
            if (rc < 0) return kiln__err_prefix(rc, "op %s::%s: %s[%d]", q->ns, q->name, lname[li], k);
            for (int t = 0; t < KILN_MAX_TACTICS && f[k].tactics[t]; t++)
                if (f[k].tactics[t] < 0)
                    return kiln__err(KILN_EINVAL, "op %s::%s: %s[%d] lists tactic %d, expected > 0", q->ns, q->name,
                                     lname[li], k, f[k].tactics[t]);
        }
    }
    if (q->cuda_formats && !q->cuda_impl && !q->cuda_aot)
        return kiln__err(KILN_EINVAL, "op %s::%s: cuda_formats given without cuda_impl or cuda_aot", q->ns, q->name);
    if (q->cuda_check && !q->cuda_impl)
        return kiln__err(KILN_EINVAL, "op %s::%s: cuda_check given without cuda_impl", q->ns, q->name);
    const char *lists_of_names[2] = {q->timing_id, q->serialize_attrs};
    const char *list_name[2] = {"timing_id", "serialize_attrs"};
    for (int li = 0; li < 2; li++) {
        const char *p = lists_of_names[li];
        while (p && *p) {
            while (*p == ' ' || *p == ',') p++;
            const char *b = p;
            while (*p && *p != ',' && *p != ' ') p++;
            if (p == b) break;
            int found = 0;
            for (int i = 0; i < nattrs && !found; i++)
                found = strlen(defs[i].name) == (size_t)(p - b) && strncmp(defs[i].name, b, (size_t)(p - b)) == 0;
            if (!found)
                return kiln__err(KILN_EINVAL, "op %s::%s: %s names '%.*s', which is not an attribute", q->ns,
                                 q->name, list_name[li], (int)(p - b), b);
        }
    }
    if (q->aot_signature && strcmp(q->aot_signature, KILN_AOT_SIGNATURE_DERIVED) != 0) {
        const char *p = q->aot_signature;
        int n = 0;
        while (*p) {
            while (*p == ' ' || *p == ',') p++;
            const char *b = p;
            while (*p && *p != ',' && *p != ' ') p++;
            if (p == b) break;
            size_t l = (size_t)(p - b);
            if (!((l == 3 && (!strncmp(b, "i32", 3) || !strncmp(b, "i64", 3) || !strncmp(b, "f32", 3)))))
                return kiln__err(KILN_EINVAL, "op %s::%s: aot_signature \"%s\": unknown scalar type '%.*s' (i32, i64, f32)",
                                 q->ns, q->name, q->aot_signature, (int)l, b);
            if (++n > KILN_MAX_SCALARS)
                return kiln__err(KILN_EINVAL, "op %s::%s: aot_signature has more than %d scalars", q->ns, q->name,
                                 KILN_MAX_SCALARS);
        }
    }
    return 0;
}

static int check_vtable(const kiln_plugin_def *d) {
    const kiln_plugin_vtable *vt = d->vt;
    if (!vt) return kiln__err(KILN_EINVAL, "plugin %s::%s: no vtable", d->ns, d->name);
    if (vt->version > KILN_PLUGIN_VTABLE_VERSION)
        return kiln__err(KILN_EVERSION,
                         "plugin %s::%s v%d: vtable version %d is newer than this kiln supports (%d); "
                         "rebuild the plugin against this kiln's plugin.h or upgrade kiln",
                         d->ns, d->name, d->version, vt->version, KILN_PLUGIN_VTABLE_VERSION);
    if (vt->version < 1)
        return kiln__err(KILN_EINVAL, "plugin %s::%s: vtable version %d, expected 1..%d", d->ns, d->name, vt->version,
                         KILN_PLUGIN_VTABLE_VERSION);
    const char *missing = !vt->create && !d->create_user ? "create" : !vt->destroy ? "destroy"
                          : !vt->shape ? "shape" : !vt->enqueue ? "enqueue" : !vt->serialize ? "serialize"
                          : !vt->deserialize && !d->deserialize_user ? "deserialize" : !vt->clone ? "clone"
                          : NULL;
    if (missing) return kiln__err(KILN_EINVAL, "plugin %s::%s: vtable lacks %s()", d->ns, d->name, missing);
    return 0;
}

/* ---------------------------------------------------------------- registration */

static void op_free(kiln__op *o) {
    if (!o) return;
    kiln__defmem m = {o->defmem, 0};
    kiln__defmem_free(&m);
    for (int i = 0; i < o->nattrs && o->attr_defaults; i++) kiln__attr_value_free(&o->attr_defaults[i]);
    kiln__free(o->attr_defaults);
    kiln__free(o->ns);
    kiln__free(o->name);
    kiln__free(o->library);
    kiln__free(o);
}

static int do_register(const void *def, const char *ns, const char *name, int version, int min_in, int max_in,
                       int nout, const kiln_attr_def *attrs, const kiln_quick_op *q, const kiln_plugin_def *p) {
    int rc;
    if ((rc = check_ident("namespace", ns, ns, name)) || (rc = check_ident("name", name, ns, name))) return rc;
    if (version < 1) return kiln__err(KILN_EINVAL, "op %s::%s: version %d, expected >= 1", ns, name, version);
    if (min_in < 0 || max_in < min_in || nout < 1 || max_in + nout > KILN_MAX_IO)
        return kiln__err(KILN_EINVAL,
                         "op %s::%s v%d: inputs %d..%d, outputs %d; expected 0 <= min_inputs <= max_inputs, "
                         "num_outputs >= 1, max_inputs + num_outputs <= %d",
                         ns, name, version, min_in, max_in, nout, KILN_MAX_IO);
    int builtin = kiln__registry_in_libkiln(def), copy = 0;
    if (!builtin) builtin = copy = in_libkiln_copy(def);
    if (kiln__registry_ns_reserved(ns) && !builtin)
        return kiln__err(KILN_EINVAL,
                         "op %s::%s v%d: namespace \"%s\" is reserved for kiln's built-in ops; use your own "
                         "namespace (and plugin_namespace in ONNX to override a built-in)",
                         ns, name, version, ns);
    const char *fname = NULL;
    image_base(def, &fname);
    int nattrs = 0;
    kiln_attr_value *defaults = NULL;
    if ((rc = check_attrs(ns, name, attrs, &nattrs, &defaults))) return rc;
    if (q) rc = check_quick(q, attrs, nattrs);
    else rc = check_vtable(p);
    kiln__op *o = NULL;
    if (rc) goto fail;
    o = kiln__calloc(1, sizeof *o);
    if (!o) {
        rc = kiln__err(KILN_ENOMEM, "out of memory");
        goto fail;
    }
    kiln__defmem mem = {0};
    q = q ? kiln__quick_copy(&mem, q) : NULL;
    p = p ? kiln__plugin_def_copy(&mem, p) : NULL;
    o->defmem = mem.head;
    if (mem.failed) {
        rc = kiln__err(KILN_ENOMEM, "out of memory");
        goto fail;
    }
    attrs = q ? q->attrs : p->attrs;
    o->origin = def;
    o->ns = kiln__strdup(ns);
    o->name = kiln__strdup(name);
    o->version = version;
    o->min_inputs = min_in;
    o->max_inputs = max_in;
    o->num_outputs = nout;
    o->attr_defs = attrs;
    o->nattrs = nattrs;
    o->attr_defaults = defaults;
    defaults = NULL;
    o->vt = q ? &kiln__quick_vtable : p->vt;
    o->quick = q;
    o->plugin = p;
    o->builtin = builtin;
    int has_lib = !builtin && fname && fname[0] && !is_main_program(fname);
    if (has_lib) {
        char *rp = realpath(fname, NULL);
        o->library = kiln__strdup(rp ? rp : fname);
        free(rp);
    }
    if (!o->ns || !o->name || (has_lib && !o->library)) {
        rc = kiln__err(KILN_ENOMEM, "out of memory");
        goto fail;
    }
    pthread_mutex_lock(&g_mu);
    kiln__op *old = find_locked(ns, name, version);
    if (old) {
        /* The same struct with the same callbacks: registered twice (a
         * library loaded by the dynamic linker and again by path). */
        int same = old->origin == def &&
                   ((q && old->quick && old->quick->shape == q->shape && old->quick->impl == q->impl &&
                     old->quick->user == q->user) ||
                    (p && old->plugin && old->plugin->vt->enqueue == p->vt->enqueue && old->plugin->user == p->user));
        pthread_mutex_unlock(&g_mu);
        if (same || (copy && old->builtin)) {
            op_free(o);
            return 0; /* the same definition again: nothing to do */
        }
        rc = kiln__err(KILN_EEXISTS, "op %s::%s v%d from %s is already registered by %s", ns, name, version,
                       lib_label(o), lib_label(old));
        goto fail;
    }
    if (g_nops == g_cap) {
        int nc = g_cap ? g_cap * 2 : 64;
        kiln__op **n = kiln__realloc(g_ops, sizeof *n * (size_t)nc);
        if (!n) {
            pthread_mutex_unlock(&g_mu);
            rc = kiln__err(KILN_ENOMEM, "out of memory");
            goto fail;
        }
        g_ops = n;
        g_cap = nc;
    }
    g_ops[g_nops++] = o;
    pthread_mutex_unlock(&g_mu);
    kiln__log(KILN_LOG_VERBOSE, "registered op %s::%s v%d from %s", ns, name, version, lib_label(o));
    return 0;
fail:
    if (defaults) {
        for (int i = 0; i < nattrs; i++) kiln__attr_value_free(&defaults[i]);
        kiln__free(defaults);
    }
    op_free(o);
    return rc;
}

int kiln_register_quick_op(const kiln_quick_op *op) {
    return kiln_register_quick_op_sized(op, sizeof *op);
}

int kiln_register_plugin(const kiln_plugin_def *def) {
    return kiln_register_plugin_sized(def, sizeof *def);
}

/* Structs from a plugin compiled against an older plugin.h are shorter:
 * the fields it does not know are zero (their documented defaults), so the
 * struct is zero-extended into `ours` (the registry then copies that).  A
 * longer struct comes from a newer kiln: refused, naming both sizes. */
static int abi_extend(const void *def, size_t size, void *ours, size_t ours_size, const char *what) {
    if (size > ours_size || size < 2 * sizeof(const char *))
        return kiln__err(KILN_EVERSION,
                         "%s of %zu bytes: this kiln (ABI %d) knows %zu bytes; rebuild the plugin against "
                         "this kiln's headers", what, size, KILN_ABI_VERSION, ours_size);
    memset(ours, 0, ours_size);
    memcpy(ours, def, size);
    return 0;
}

int kiln_register_quick_op_sized(const kiln_quick_op *op, size_t size) {
    if (!op) return reg_fail(kiln__err(KILN_EINVAL, "kiln_register_quick_op: op is NULL"));
    kiln_quick_op q;
    int rc = abi_extend(op, size, &q, sizeof q, "kiln_quick_op");
    if (!rc)
        rc = do_register(op, q.ns, q.name, q.version, q.min_inputs, q.max_inputs, q.num_outputs, q.attrs, &q, NULL);
    return rc ? reg_fail(rc) : 0;
}

int kiln_register_plugin_sized(const kiln_plugin_def *def, size_t size) {
    if (!def) return reg_fail(kiln__err(KILN_EINVAL, "kiln_register_plugin: def is NULL"));
    kiln_plugin_def p;
    int rc = abi_extend(def, size, &p, sizeof p, "kiln_plugin_def");
    if (!rc)
        rc = do_register(def, p.ns, p.name, p.version, p.min_inputs, p.max_inputs, p.num_outputs, p.attrs, NULL, &p);
    return rc ? reg_fail(rc) : 0;
}

int kiln_registry_unregister(const char *identity, int version) {
    char buf[512];
    const char *ns, *name;
    int rc = kiln__split_identity(identity, buf, sizeof buf, &ns, &name);
    if (rc) return rc;
    pthread_mutex_lock(&g_mu);
    int i = 0;
    while (i < g_nops && !(g_ops[i]->version == version && !strcmp(g_ops[i]->name, name) && !strcmp(g_ops[i]->ns, ns)))
        i++;
    if (i == g_nops) {
        pthread_mutex_unlock(&g_mu);
        return kiln__err(KILN_ENOTFOUND, "unregister: op %s v%d is not registered", identity, version);
    }
    kiln__op *o = g_ops[i];
    if (o->builtin) {
        pthread_mutex_unlock(&g_mu);
        return kiln__err(KILN_EINVAL, "unregister: op %s v%d is built into libkiln", identity, version);
    }
    kiln__op **r = kiln__realloc(g_retired, sizeof *r * (size_t)(g_nretired + 1));
    if (!r) {
        pthread_mutex_unlock(&g_mu);
        return kiln__err(KILN_ENOMEM, "unregister: out of memory");
    }
    g_retired = r;
    g_retired[g_nretired++] = o;
    memmove(&g_ops[i], &g_ops[i + 1], sizeof *g_ops * (size_t)(g_nops - i - 1));
    g_nops--;
    pthread_mutex_unlock(&g_mu);
    kiln__log(KILN_LOG_VERBOSE, "unregistered op %s v%d", identity, version);
    return 0;
}

int kiln_registry_count(void) {
    pthread_mutex_lock(&g_mu);
    int n = g_nops;
    pthread_mutex_unlock(&g_mu);
    return n;
}

static void op_info(const kiln__op *o, kiln_op_info *info) {
    memset(info, 0, sizeof *info);
    info->ns = o->ns;
    info->name = o->name;
    info->version = o->version;
    info->min_inputs = o->min_inputs;
    info->max_inputs = o->max_inputs;
    info->num_outputs = o->num_outputs;
    info->nattrs = o->nattrs;
    info->attrs = o->attr_defs;
    const char *doc = o->quick ? o->quick->doc : o->plugin->doc;
    info->doc = doc ? doc : "";
    info->library = o->library ? o->library : "";
    info->builtin = o->builtin;
    info->is_quick = o->quick != NULL;
    info->has_impl = !o->quick || o->quick->impl;
    info->has_aot = o->quick && o->quick->aot;
}

int kiln_registry_op(int i, kiln_op_info *info) {
    if (!info) return kiln__err(KILN_EINVAL, "kiln_registry_op: info is NULL");
    const kiln__op *o = kiln__registry_at(i);
    if (!o) return kiln__err(KILN_EINVAL, "kiln_registry_op: op %d out of range (%d registered)", i,
                             kiln_registry_count());
    op_info(o, info);
    return 0;
}

/* kiln_registry_find/resolve: o found (info filled), or KILN_ENOTFOUND. */
static int lookup_result(const kiln__op *o, const char *ns, const char *name, const char *how,
                         int version, kiln_op_info *info) {
    if (o) {
        if (info) op_info(o, info);
        return 0;
    }
    char vers[256];
    kiln__registry_versions(ns ? ns : "", name ? name : "", vers, sizeof vers);
    return kiln__err(KILN_ENOTFOUND, "op %s::%s %s %d is not registered (registered versions: %s)",
                     ns ? ns : "(null)", name ? name : "(null)", how, version, vers);
}

int kiln_registry_find(const char *ns, const char *name, int version, kiln_op_info *info) {
    return lookup_result(kiln__registry_find(ns, name, version), ns, name, "version", version, info);
}

int kiln_registry_resolve(const char *ns, const char *name, int max_version, kiln_op_info *info) {
    return lookup_result(kiln__registry_resolve(ns, name, max_version), ns, name, "at version <=",
                         max_version, info);
}

void kiln_registry_versions(const char *ns, const char *name, char *buf, size_t size) {
    if (!buf || !size) return;
    if (!ns || !name) snprintf(buf, size, "none");
    else kiln__registry_versions(ns, name, buf, size);
}

/* ---------------------------------------------------------------- dump */

static void print_value(FILE *out, const kiln_attr_value *v) {
    switch (v->type) {
    case KILN_ATTR_INT: fprintf(out, "%lld", (long long)v->i); break;
    case KILN_ATTR_BOOL: fprintf(out, "%s", v->i ? "true" : "false"); break;
    case KILN_ATTR_FLOAT: fprintf(out, "%g", v->f); break;
    case KILN_ATTR_STRING: fprintf(out, "\"%s\"", v->s ? v->s : ""); break;
    case KILN_ATTR_BYTES: fprintf(out, "<%zu bytes>", v->len); break;
    case KILN_ATTR_ARRAY: {
        fprintf(out, "[");
        size_t es = kiln_dtype_size(v->elem);
        for (int64_t k = 0; k < v->count; k++) {
            const uint8_t *p = (const uint8_t *)v->data + (size_t)k * es;
            if (k) fprintf(out, ", ");
            switch (v->elem) {
            case KILN_DTYPE_F32: { float f; memcpy(&f, p, 4); fprintf(out, "%g", f); break; }
            case KILN_DTYPE_F64: { double f; memcpy(&f, p, 8); fprintf(out, "%g", f); break; }
            case KILN_DTYPE_F16: { uint16_t h; memcpy(&h, p, 2); fprintf(out, "%g", kiln_f16_to_f32(h)); break; }
            case KILN_DTYPE_BF16: { uint16_t h; memcpy(&h, p, 2); fprintf(out, "%g", kiln_bf16_to_f32(h)); break; }
            case KILN_DTYPE_I64: { int64_t x; memcpy(&x, p, 8); fprintf(out, "%lld", (long long)x); break; }
            case KILN_DTYPE_U64: { uint64_t x; memcpy(&x, p, 8); fprintf(out, "%llu", (unsigned long long)x); break; }
            case KILN_DTYPE_I32: { int32_t x; memcpy(&x, p, 4); fprintf(out, "%d", x); break; }
            case KILN_DTYPE_U32: { uint32_t x; memcpy(&x, p, 4); fprintf(out, "%u", x); break; }
            case KILN_DTYPE_I16: { int16_t x; memcpy(&x, p, 2); fprintf(out, "%d", x); break; }
            case KILN_DTYPE_U16: { uint16_t x; memcpy(&x, p, 2); fprintf(out, "%u", x); break; }
            case KILN_DTYPE_I8: { int8_t x; memcpy(&x, p, 1); fprintf(out, "%d", x); break; }
            case KILN_DTYPE_U8: fprintf(out, "%u", *p); break;
            case KILN_DTYPE_BOOL: fprintf(out, "%s", *p ? "true" : "false"); break;
            default: fprintf(out, "?"); break;
            }
        }
        fprintf(out, "]");
        break;
    }
    default: fprintf(out, "<%s>", "value"); break;
    }
}

static const char *attr_type_label(const kiln_attr_def *d, char *buf, size_t size) {
    const char *t = kiln_attr_type_name(d->type);
    if (d->type == KILN_ATTR_ARRAY)
        snprintf(buf, size, "%s[]", kiln_dtype_name(d->elem ? d->elem : KILN_DTYPE_I64));
    else
        snprintf(buf, size, "%s", t);
    return buf;
}

void kiln_registry_dump(FILE *out, const char *filter) {
    if (!out) out = stdout;
    for (int i = 0;; i++) {
        const kiln__op *o = kiln__registry_at(i);
        if (!o) break;
        char id[512];
        snprintf(id, sizeof id, "%s::%s", o->ns, o->name);
        if (filter && *filter && !strstr(id, filter)) continue;
        const char *doc = o->quick ? o->quick->doc : o->plugin->doc;
        fprintf(out, "%s v%d  (%s, inputs %d..%d, outputs %d)\n", id, o->version, o->quick ? "quick op" : "plugin",
                o->min_inputs, o->max_inputs, o->num_outputs);
        if (doc && *doc) fprintf(out, "  %s\n", doc);
        fprintf(out, "  library: %s\n", lib_label(o));
        for (int k = 0; k < o->nattrs; k++) {
            const kiln_attr_def *d = &o->attr_defs[k];
            char tb[64];
            fprintf(out, "  attr %s: %s", d->name, attr_type_label(d, tb, sizeof tb));
            if (o->attr_defaults && o->attr_defaults[k].present) {
                fprintf(out, " = ");
                print_value(out, &o->attr_defaults[k]);
            }
            if (d->required) fprintf(out, " (required)");
            if (d->doc && *d->doc) fprintf(out, "  -- %s", d->doc);
            fprintf(out, "\n");
        }
        if (o->quick) {
            const kiln_quick_op *q = o->quick;
            if (q->formats_fn) fprintf(out, "  formats: from formats_fn() per layer\n");
            else if (!q->formats) fprintf(out, "  formats: any type, LINEAR; tactic 0\n");
            for (int k = 0; q->formats && q->formats[k].types; k++) {
                fprintf(out, "  formats: types \"%s\" layouts \"%s\" tactics ", q->formats[k].types,
                        q->formats[k].layouts ? q->formats[k].layouts : "LINEAR");
                if (!q->formats[k].tactics[0]) fprintf(out, "0");
                for (int t = 0; t < KILN_MAX_TACTICS && q->formats[k].tactics[t]; t++)
                    fprintf(out, "%s%d", t ? "," : "", q->formats[k].tactics[t]);
                fprintf(out, "\n");
            }
            if (q->timing_id) fprintf(out, "  timing id: %s\n", q->timing_id);
            fprintf(out, "  aot: %s%s%s\n", q->aot ? "yes" : "no", q->aot && q->aot_signature ? ", scalars " : "",
                    q->aot && q->aot_signature ? q->aot_signature : "");
            if (q->cuda_impl || q->cuda_aot)
                fprintf(out, "  cuda: %s%s\n", q->cuda_impl ? "cuda_impl" : "",
                        q->cuda_aot ? (q->cuda_impl ? ", AOT kernel (cuda_aot)" : "AOT kernel (cuda_aot)") : "");
        } else {
            fprintf(out, "  formats: %s; tactics: %s\n",
                    o->vt->supports_format ? "chosen by supports_format()" : "any type, LINEAR",
                    o->vt->valid_tactics ? "from valid_tactics()" : "0");
            fprintf(out, "  aot: no\n");
        }
    }
}
