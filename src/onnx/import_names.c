/*
 * import_names.c — small containers of the ONNX importer: a set of names
 * (open addressing, insertion order kept) and growing message text.
 */
#include "import_int.h"

/* ------------------------------------------------------------ string set */

static uint64_t str_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

void kiln__imp_strset_free(strset *s) {
    for (int i = 0; i < s->n; i++) kiln__free(s->keys[i]);
    kiln__free(s->keys);
    kiln__free(s->slots);
    memset(s, 0, sizeof *s);
}

int kiln__imp_strset_has(const strset *s, const char *k) {
    if (!s->nslots) return 0;
    for (uint64_t h = str_hash(k) & (uint64_t)(s->nslots - 1);; h = (h + 1) & (uint64_t)(s->nslots - 1)) {
        int v = s->slots[h];
        if (!v) return 0;
        if (!strcmp(s->keys[v - 1], k)) return 1;
    }
}

/* 1 added, 0 present, <0 error. */
int kiln__imp_strset_add(strset *s, const char *k) {
    if (kiln__imp_strset_has(s, k)) return 0;
    if (s->n + 1 > s->nslots / 2) {
        int ns = s->nslots ? s->nslots * 2 : 64;
        int *sl = kiln__calloc((size_t)ns, sizeof *sl);
        if (!sl) return kiln__err(KILN_ENOMEM, "out of memory");
        kiln__free(s->slots);
        s->slots = sl;
        s->nslots = ns;
        for (int i = 0; i < s->n; i++) {
            uint64_t h = str_hash(s->keys[i]) & (uint64_t)(ns - 1);
            while (sl[h]) h = (h + 1) & (uint64_t)(ns - 1);
            sl[h] = i + 1;
        }
    }
    if (s->n == s->cap) {
        int nc = s->cap ? s->cap * 2 : 16;
        char **k2 = kiln__realloc(s->keys, (size_t)nc * sizeof *k2);
        if (!k2) return kiln__err(KILN_ENOMEM, "out of memory");
        s->keys = k2;
        s->cap = nc;
    }
    char *d = kiln__strdup(k);
    if (!d) return kiln__err(KILN_ENOMEM, "out of memory");
    s->keys[s->n++] = d;
    uint64_t h = str_hash(k) & (uint64_t)(s->nslots - 1);
    while (s->slots[h]) h = (h + 1) & (uint64_t)(s->nslots - 1);
    s->slots[h] = s->n;
    return 1;
}

/* ------------------------------------------------------------ growing text */

void kiln__imp_text_add(text *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char tmp[1024];
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof tmp) n = sizeof tmp - 1;
    if (t->len + (size_t)n + 1 > t->cap) {
        size_t nc = (t->cap ? t->cap * 2 : 256) + (size_t)n;
        char *s = kiln__realloc(t->s, nc);
        if (!s) return;
        t->s = s;
        t->cap = nc;
    }
    memcpy(t->s + t->len, tmp, (size_t)n + 1);
    t->len += (size_t)n;
}
