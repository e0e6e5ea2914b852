/*
 * def_copy.c — the registry's own copies of op definitions.
 *
 * kiln_register_quick_op / kiln_register_plugin copy what they are given
 * (identity, doc, attribute schema, format strings, vtable) so a binding
 * may build a definition on the heap, register it and free it.  Every
 * allocation of one copy hangs on one list (kiln__defmem) and is freed
 * with it.  Callbacks and `user` are kept as given.
 */
#include "registry_int.h"

typedef struct memnode {
    struct memnode *next;
    max_align_t data[];
} memnode;

static void *dm_alloc(kiln__defmem *m, size_t size) {
    memnode *n = kiln__calloc(1, sizeof *n + (size ? size : 1));
    if (!n) {
        m->failed = 1;
        return NULL;
    }
    n->next = m->head;
    m->head = n;
    return n->data;
}

static const char *dm_str(kiln__defmem *m, const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = dm_alloc(m, n);
    if (d) memcpy(d, s, n);
    return d;
}

void kiln__defmem_free(kiln__defmem *m) {
    memnode *n = m->head;
    while (n) {
        memnode *next = n->next;
        kiln__free(n);
        n = next;
    }
    m->head = NULL;
}

/* The schema up to its {NULL} terminator (at most 1024 entries; longer
 * lists are cut there and refused by the registry's checks). */
static const kiln_attr_def *copy_attrs(kiln__defmem *m, const kiln_attr_def *defs) {
    if (!defs) return NULL;
    int n = 0;
    while (defs[n].name && n < 1025) n++;
    kiln_attr_def *d = dm_alloc(m, sizeof *d * (size_t)(n + 1));
    if (!d) return NULL;
    for (int i = 0; i < n; i++) {
        d[i] = defs[i];
        d[i].name = dm_str(m, defs[i].name);
        d[i].def = dm_str(m, defs[i].def);
        d[i].doc = dm_str(m, defs[i].doc);
    }
    return d;
}

const kiln_combo *kiln__combos_copy(kiln__defmem *m, const kiln_combo *c, int n) {
    kiln_combo *d = dm_alloc(m, sizeof *d * (size_t)(n + 1));
    if (!d) return NULL;
    for (int k = 0; k < n; k++) {
        d[k] = c[k];
        d[k].types = dm_str(m, c[k].types);
        d[k].layouts = dm_str(m, c[k].layouts);
        if (!d[k].types) m->failed = 1;
    }
    return d;
}

const kiln_quick_op *kiln__quick_copy(kiln__defmem *m, const kiln_quick_op *q) {
    kiln_quick_op *d = dm_alloc(m, sizeof *d);
    if (!d) return NULL;
    *d = *q;
    d->ns = dm_str(m, q->ns);
    d->name = dm_str(m, q->name);
    d->attrs = copy_attrs(m, q->attrs);
    d->timing_id = dm_str(m, q->timing_id);
    d->serialize_attrs = dm_str(m, q->serialize_attrs);
    d->aot_signature = dm_str(m, q->aot_signature);
    d->doc = dm_str(m, q->doc);
    if (q->formats) {
        int n = 0;
        while (q->formats[n].types && n < 4097) n++;
        d->formats = kiln__combos_copy(m, q->formats, n);
    }
    return m->failed ? NULL : d;
}

const kiln_plugin_def *kiln__plugin_def_copy(kiln__defmem *m, const kiln_plugin_def *p) {
    kiln_plugin_def *d = dm_alloc(m, sizeof *d);
    if (!d) return NULL;
    *d = *p;
    d->ns = dm_str(m, p->ns);
    d->name = dm_str(m, p->name);
    d->attrs = copy_attrs(m, p->attrs);
    d->doc = dm_str(m, p->doc);
    if (p->vt) {
        kiln_plugin_vtable *vt = dm_alloc(m, sizeof *vt);
        if (vt) *vt = *p->vt;
        d->vt = vt;
    }
    return m->failed ? NULL : d;
}
