/*
 * timing_cache.c — measured times of (op, IO types/formats/shapes,
 * timing id, tactic) keys, shared by identical layers within a build and
 * persisted across builds.
 *
 * File format (text, one entry per line, so a user can read and diff it):
 *   kiln-timing-cache 1
 *   device <cpu signature>
 *   entries <n>
 *   <ms as %.17g> <key>          (n lines; keys never hold newlines;
 *                                 ms -1: the candidate failed there)
 * A file with another version or device signature, or one that does not
 * parse, is ignored with a WARN: timing is only ever slower, never wrong.
 * Writes go to "<path>.tmp.<pid>.<n>" then rename() (core/out_file.h: a
 * device such as /dev/null is written in place), so a crash never leaves a
 * truncated cache behind.  A failure that may pass another time (out of
 * memory, a device or I/O error) is not written: only refusals are.
 */
#include "build_int.h"
#include "core/out_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define TC_MAGIC "kiln-timing-cache"
#define TC_VERSION 1

typedef struct tc_entry {
    char *key;
    uint64_t hash;
    double ms;
    int from_build;
    int transient; /* a failure the file does not keep */
} tc_entry;

struct kiln__tcache {
    tc_entry *e;
    int n, cap;
    int *slots; /* open addressing over e[], -1 empty */
    int nslots;
    char *sig;  /* device signature (kiln__tcache_set_device), NULL: the CPU's */
};

static const char *tc_sig(const kiln__tcache *c) { return c->sig ? c->sig : kiln_cpu_signature(); }

int kiln__tcache_set_device(kiln__tcache *c, const char *sig) {
    kiln__free(c->sig);
    c->sig = sig ? kiln__strdup(sig) : NULL;
    return sig && !c->sig ? kiln__err(KILN_ENOMEM, "timing cache: out of memory") : 0;
}

static uint64_t fnv(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

kiln__tcache *kiln__tcache_create(void) {
    kiln__tcache *c = kiln__calloc(1, sizeof *c);
    if (!c) kiln__err(KILN_ENOMEM, "timing cache: out of memory");
    return c;
}

void kiln__tcache_free(kiln__tcache *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) kiln__free(c->e[i].key);
    kiln__free(c->e);
    kiln__free(c->slots);
    kiln__free(c->sig);
    kiln__free(c);
}

int kiln__tcache_count(const kiln__tcache *c) { return c ? c->n : 0; }

static int find_slot(const kiln__tcache *c, const char *key, uint64_t h) {
    if (!c->nslots) return -1;
    for (int i = (int)(h & (uint64_t)(c->nslots - 1));; i = (i + 1) & (c->nslots - 1)) {
        int k = c->slots[i];
        if (k < 0) return -1 - i;
        if (c->e[k].hash == h && strcmp(c->e[k].key, key) == 0) return i;
    }
}

static int rehash(kiln__tcache *c, int nslots) {
    int *s = kiln__malloc((size_t)nslots * sizeof *s);
    if (!s) return kiln__err(KILN_ENOMEM, "timing cache: out of memory");
    for (int i = 0; i < nslots; i++) s[i] = -1;
    for (int k = 0; k < c->n; k++) {
        int i = (int)(c->e[k].hash & (uint64_t)(nslots - 1));
        while (s[i] >= 0) i = (i + 1) & (nslots - 1);
        s[i] = k;
    }
    kiln__free(c->slots);
    c->slots = s;
    c->nslots = nslots;
    return 0;
}

int kiln__tcache_get(const kiln__tcache *c, const char *key, double *ms, int *from_build) {
    int i = find_slot(c, key, fnv(key));
    if (i < 0) return 0;
    const tc_entry *e = &c->e[c->slots[i]];
    *ms = e->ms;
    if (from_build) *from_build = e->from_build;
    return 1;
}

static int put(kiln__tcache *c, const char *key, double ms, int from_build, int transient) {
    if (strchr(key, '\n')) return kiln__err(KILN_EINVAL, "timing cache: key holds a newline");
    uint64_t h = fnv(key);
    int i = find_slot(c, key, h);
    if (i >= 0) {
        c->e[c->slots[i]].ms = ms;
        c->e[c->slots[i]].from_build = from_build;
        c->e[c->slots[i]].transient = transient;
        return 0;
    }
    if ((c->n + 1) * 2 > c->nslots) {
        int rc = rehash(c, c->nslots ? c->nslots * 2 : 64);
        if (rc) return rc;
    }
    tc_entry *ne = kiln__grow(c->e, &c->cap, c->n + 1, sizeof *c->e);
    if (!ne) return KILN_ENOMEM;
    c->e = ne;
    char *k = kiln__strdup(key);
    if (!k) return kiln__err(KILN_ENOMEM, "timing cache: out of memory");
    c->e[c->n] = (tc_entry){k, h, ms, from_build, transient};
    i = find_slot(c, key, h);
    c->slots[-1 - i] = c->n++;
    return 0;
}

int kiln__tcache_put(kiln__tcache *c, const char *key, double ms) { return put(c, key, ms, 1, 0); }

int kiln__tcache_put_failed(kiln__tcache *c, const char *key, int transient) {
    return put(c, key, -1.0, 1, transient);
}

/* Reads a whole line into a growing buffer; 0 at EOF. */
static int read_line(FILE *f, char **buf, size_t *cap) {
    size_t n = 0;
    int ch;
    while ((ch = fgetc(f)) != EOF) {
        if (n + 2 > *cap) {
            size_t nc = *cap ? *cap * 2 : 256;
            char *nb = kiln__realloc(*buf, nc);
            if (!nb) return -1;
            *buf = nb;
            *cap = nc;
        }
        if (ch == '\n') break;
        (*buf)[n++] = (char)ch;
    }
    if (ch == EOF && n == 0) return 0;
    (*buf)[n] = 0;
    return 1;
}

void kiln__tcache_load(kiln__tcache *c, const char *path) {
    /* A device or FIFO (/dev/null) holds no cache, and opening a FIFO
     * would wait for a writer: the build starts empty and writes to it. */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        kiln__log(KILN_LOG_INFO, "timing cache '%s': not a regular file; starting empty", path);
        return;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno != ENOENT)
            kiln__log(KILN_LOG_WARN, "timing cache '%s': cannot open (%s); starting empty", path,
                      strerror(errno));
        return;
    }
    char *line = NULL;
    size_t cap = 0;
    const char *why = NULL;
    long lineno = 0;
    kiln__tcache *tmp = kiln__tcache_create();
    if (!tmp) { fclose(f); return; }
    int version = 0;
    long long count = -1;
    char magic[32];
    if (read_line(f, &line, &cap) <= 0 || sscanf(line, "%31s %d", magic, &version) != 2 ||
        strcmp(magic, TC_MAGIC) != 0) {
        why = "not a kiln timing cache (bad first line)";
        lineno = 1;
    } else if (version != TC_VERSION) {
        kiln__log(KILN_LOG_WARN, "timing cache '%s': format version %d, this kiln reads %d; ignored",
                  path, version, TC_VERSION);
        goto done;
    } else if (read_line(f, &line, &cap) <= 0 || strncmp(line, "device ", 7) != 0) {
        why = "missing 'device' line";
        lineno = 2;
    } else if (strcmp(line + 7, tc_sig(c)) != 0) {
        kiln__log(KILN_LOG_WARN,
                  "timing cache '%s': made for device '%s', this is '%s'; ignored (it will be rewritten)",
                  path, line + 7, tc_sig(c));
        goto done;
    } else if (read_line(f, &line, &cap) <= 0 || sscanf(line, "entries %lld", &count) != 1 || count < 0) {
        why = "missing 'entries' line";
        lineno = 3;
    } else {
        lineno = 3;
        for (long long k = 0; k < count; k++) {
            lineno++;
            if (read_line(f, &line, &cap) <= 0) { why = "fewer entries than announced"; break; }
            char *end;
            double ms = strtod(line, &end);
            if (end == line || *end != ' ' || !(ms >= 0 || ms == -1) || !end[1]) { why = "malformed entry"; break; }
            if (put(tmp, end + 1, ms, 0, 0)) { why = "out of memory"; break; }
        }
        if (!why && read_line(f, &line, &cap) > 0) { why = "trailing data after the entries"; lineno++; }
    }
    if (why) {
        kiln__log(KILN_LOG_WARN, "timing cache '%s' line %ld: %s; the file is ignored", path, lineno, why);
        goto done;
    }
    for (int i = 0; i < tmp->n; i++) put(c, tmp->e[i].key, tmp->e[i].ms, 0, 0);
    kiln__log(KILN_LOG_INFO, "timing cache '%s': %d entries loaded", path, tmp->n);
done:
    kiln__tcache_free(tmp);
    kiln__free(line);
    fclose(f);
}

int kiln__tcache_save(const kiln__tcache *c, const char *path) {
    kiln__out_file o;
    int rc = kiln__out_open(&o, path, "timing cache");
    if (rc) return rc;
    int kept = 0;
    for (int i = 0; i < c->n; i++) kept += !c->e[i].transient;
    int bad = dprintf(o.fd, "%s %d\ndevice %s\nentries %d\n", TC_MAGIC, TC_VERSION, tc_sig(c), kept) < 0;
    for (int i = 0; i < c->n && !bad; i++)
        if (!c->e[i].transient) bad = dprintf(o.fd, "%.17g %s\n", c->e[i].ms, c->e[i].key) < 0;
    if (bad) rc = kiln__err(KILN_EIO, "timing cache: cannot write '%s': %s", o.write_path, strerror(errno));
    return kiln__out_close(&o, rc);
}
