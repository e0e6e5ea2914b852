/*
 * args.c — option parsing and helpers shared by the verbs.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <kiln/plugin.h>

#include "cli.h"

const char *cli_verb_name = "?";

int cli_fail(const char *verb, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kiln %s: ", verb);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

int cli_fail_kiln(const char *verb, int status, const char *what) {
    const char *m = kiln_errmsg();
    if (!m || !*m) m = kiln_strerror(status);
    size_t n = what ? strlen(what) : 0;
    /* Messages that already start with "what: " are not prefixed twice. */
    if (!what || (n && !strncmp(m, what, n) && m[n] == ':')) return cli_fail(verb, "%s", m);
    return cli_fail(verb, "%s: %s", what, m);
}

int cli_opt(int argc, char **argv, int *i, const char *name, const char **val) {
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n)) return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n]) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "kiln %s: option %s expects a value\n", cli_verb_name, name);
        return -1;
    }
    *val = argv[++*i];
    return 1;
}

int cli_int(const char *verb, const char *opt, const char *s, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 0);
    if (errno || end == s || *end || v < 0)
        return cli_fail(verb, "%s expects a non-negative integer, found '%s'", opt, s), -1;
    *out = v;
    return 0;
}

int cli_threads(const char *verb, const char *s, long *out) {
    if (cli_int(verb, "--threads", s, out)) return -1;
    if (*out > CLI_MAX_THREADS)
        return cli_fail(verb, "--threads expects 0 (default) to %d, found '%s'", CLI_MAX_THREADS, s), -1;
    return 0;
}

int cli_double(const char *verb, const char *opt, const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < 0)
        return cli_fail(verb, "%s expects a finite non-negative number, found '%s'", opt, s), -1;
    *out = v;
    return 0;
}

/* One "name:AxBxC" entry (len bytes at p). */
static int shape_one(const char *verb, const char *p, size_t len, cli_shapes *out) {
    const char *colon = NULL;
    for (size_t k = len; k > 0; k--)
        if (p[k - 1] == ':') {
            colon = p + k - 1;
            break;
        }
    if (!colon || colon == p || (size_t)(colon - p) >= sizeof out->s[0].name)
        return cli_fail(verb, "expected shapes as name:AxBxC, found '%.*s'", (int)len, p), -1;
    cli_shape sh;
    memset(&sh, 0, sizeof sh);
    memcpy(sh.name, p, (size_t)(colon - p));
    const char *s = colon + 1, *end = p + len;
    if (s == end || (end - s == 2 && !strncmp(s, "[]", 2))) {
        sh.ndim = 0; /* scalar: "name:" or "name:[]" */
    } else {
        while (s < end) {
            char *e;
            errno = 0;
            long long v = strtoll(s, &e, 10);
            if (errno == ERANGE)
                return cli_fail(verb, "dim too large in shape '%.*s'", (int)len, p), -1;
            if (e == s || v < 0 || sh.ndim == KILN_MAX_DIMS || e > end)
                return cli_fail(verb, "expected dims AxBxC (at most %d, each >= 0) in '%.*s'",
                                KILN_MAX_DIMS, (int)len, p), -1;
            sh.dims[sh.ndim++] = v;
            s = e;
            if (s < end && (*s == 'x' || *s == 'X')) s++;
            else if (s < end)
                return cli_fail(verb, "unexpected '%c' in shape '%.*s'", *s, (int)len, p), -1;
        }
    }
    return cli_shapes_set(verb, out, &sh);
}

int cli_shapes_set(const char *verb, cli_shapes *out, const cli_shape *sh) {
    for (int k = 0; k < out->n; k++)
        if (!strcmp(out->s[k].name, sh->name)) {
            out->s[k] = *sh;
            return 0;
        }
    if (out->n == CLI_MAX_SHAPES) return cli_fail(verb, "too many shapes (at most %d)", CLI_MAX_SHAPES), -1;
    out->s[out->n++] = *sh;
    return 0;
}

int cli_shapes_parse(const char *verb, const char *spec, cli_shapes *out) {
    const char *p = spec;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len && shape_one(verb, p, len, out)) return -1;
        p = e ? e + 1 : p + len;
    }
    return 0;
}

const cli_shape *cli_shapes_find(const cli_shapes *s, const char *name) {
    for (int k = 0; k < s->n; k++)
        if (!strcmp(s->s[k].name, name)) return &s->s[k];
    return NULL;
}

int cli_plugins_add(const char *verb, cli_plugins *p, const char *path) {
    if (p->n == CLI_MAX_PLUGINS)
        return cli_fail(verb, "too many --plugins/--plugin-source (at most %d)", CLI_MAX_PLUGINS), -1;
    p->source[p->n] = 0;
    p->so[p->n] = NULL;
    p->path[p->n++] = path;
    return 0;
}

int cli_plugins_add_source(const char *verb, cli_plugins *p, const char *path) {
    if (cli_plugins_add(verb, p, path)) return -1;
    p->source[p->n - 1] = 1;
    return 0;
}

int cli_plugins_opt(const char *verb, int argc, char **argv, int *i, cli_plugins *p) {
    const char *v;
    int m = cli_opt(argc, argv, i, "--plugins", &v);
    if (m > 0) return cli_plugins_add(verb, p, v) ? -1 : 1;
    if (m < 0) return -1;
    m = cli_opt(argc, argv, i, "--plugin-source", &v);
    if (m > 0) return cli_plugins_add_source(verb, p, v) ? -1 : 1;
    return m;
}

int cli_fail_compile(const char *verb, int status, const char *source) {
    const char *m = kiln_errmsg();
    if (!m || !*m) m = kiln_strerror(status);
    const char *nl = strchr(m, '\n');
    if (status != KILN_ECOMPILE || !nl) return cli_fail(verb, "%s: %s", source, m);
    /* "<what>: compiler failed (cc exit 1):\n<diagnostics>": the compiler's
     * own lines first (they carry file:line), then one summary line that
     * repeats the first error so a log grep finds it. */
    fprintf(stderr, "%s\n", nl + 1);
    const char *first = NULL;
    int flen = 0;
    for (const char *l = nl + 1; *l;) {
        const char *e = strchr(l, '\n');
        int len = e ? (int)(e - l) : (int)strlen(l);
        for (int j = 0; j + 7 <= len; j++)
            if (!strncmp(l + j, ": error", 7)) {
                first = l;
                flen = len;
                break;
            }
        if (first || !e) break;
        l = e + 1;
    }
    int head = (int)(nl - m);
    if (head > 0 && m[head - 1] == ':') head--;
    if (!first) return cli_fail(verb, "%.*s", head, m);
    return cli_fail(verb, "%.*s; first error: %.*s", head, m, flen, first);
}

int cli_plugins_load(const char *verb, cli_plugins *p) {
    for (int k = 0; k < p->n; k++) {
        int rc;
        if (p->source[k]) {
            free(p->so[k]);
            p->so[k] = NULL;
            char *so = NULL;
            rc = kiln_plugin_compile_load(p->path[k], NULL, &so);
            if (rc) return cli_fail_compile(verb, rc, p->path[k]);
            /* Own copy: freed with free(), not kiln_free, in cli_plugins_free. */
            p->so[k] = strdup(so);
            kiln_free(so);
            if (!p->so[k]) return cli_fail(verb, "out of memory");
        } else {
            rc = kiln_registry_load_library(p->path[k]);
            if (rc) return cli_fail_kiln(verb, rc, p->path[k]);
        }
    }
    return 0;
}

const char *cli_plugins_library(const cli_plugins *p, int k) {
    return p->source[k] ? p->so[k] : p->path[k];
}

void cli_plugins_free(cli_plugins *p) {
    for (int k = 0; k < p->n; k++) {
        free(p->so[k]);
        p->so[k] = NULL;
    }
}

static uint64_t xorshift(uint64_t *s) {
    uint64_t x = *s ? *s : 0x9E3779B97F4A7C15ull;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

void cli_fill_random(void *data, kiln_dtype dtype, size_t n, uint64_t *seed) {
    for (size_t i = 0; i < n; i++) {
        uint64_t r = xorshift(seed);
        double f = (double)(r >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
        double v;
        switch (dtype) {
        case KILN_DTYPE_F32: case KILN_DTYPE_F16: case KILN_DTYPE_F64: case KILN_DTYPE_BF16:
            v = f;
            break;
        case KILN_DTYPE_BOOL: v = (double)(r >> 63); break;
        default: v = (double)((r >> 33) % 4); break;
        }
        cli_convert(dtype, (char *)data + i * kiln_dtype_size(dtype), KILN_DTYPE_F64, &v, 1);
    }
}

int cli_context_random_inputs(const char *verb, const kiln_engine *e, kiln_context *ctx,
                              const cli_shapes *shapes, uint64_t seed, void ***bufs) {
    int nin = kiln_engine_num_inputs(e);
    void **b = calloc((size_t)nin + 1, sizeof *b);
    *bufs = b;
    if (!b) return cli_fail(verb, "out of memory");
    /* Every --shapes name must be an engine input (a typo is not ignored). */
    for (int k = 0; shapes && k < shapes->n; k++) {
        int found = 0;
        char names[512] = "";
        size_t off = 0;
        for (int i = 0; i < nin && !found; i++) {
            kiln_io_info info;
            if (kiln_engine_io(e, i, &info)) continue;
            found = !strcmp(info.name, shapes->s[k].name);
            if (off < sizeof names)
                off += (size_t)snprintf(names + off, sizeof names - off, "%s'%s'", i ? ", " : "", info.name);
        }
        if (!found)
            return cli_fail(verb, "--shapes: the engine has no input '%s' (its inputs: %s)", shapes->s[k].name,
                            nin ? names : "none");
    }
    for (int i = 0; i < nin; i++) {
        kiln_io_info info;
        int rc = kiln_engine_io(e, i, &info);
        if (rc) return cli_fail_kiln(verb, rc, "engine input");
        const cli_shape *s = shapes ? cli_shapes_find(shapes, info.name) : NULL;
        int64_t dims[KILN_MAX_DIMS];
        int ndim = info.ndim;
        if (s) {
            ndim = s->ndim;
            memcpy(dims, s->dims, sizeof dims);
        } else {
            for (int d = 0; d < ndim; d++) dims[d] = info.dims[d] >= 0 ? info.dims[d] : info.opt[d];
        }
        rc = kiln_context_set_input_shape(ctx, info.name, ndim, dims);
        if (rc) return cli_fail_kiln(verb, rc, info.name);
        size_t n = 1, esize = kiln_dtype_size(info.dtype);
        int over = 0;
        for (int d = 0; d < ndim; d++) {
            if (dims[d] && n > SIZE_MAX / esize / (size_t)dims[d]) over = 1;
            n *= (size_t)dims[d];
        }
        size_t bytes = n * esize;
        b[i] = over ? NULL : malloc(bytes ? bytes : 1);
        if (!b[i])
            return cli_fail(verb, "input '%s': cannot allocate %s%zu bytes for its random data", info.name,
                            over ? "more than " : "", over ? (size_t)SIZE_MAX : bytes);
        cli_fill_random(b[i], info.dtype, n, &seed);
        rc = kiln_context_bind(ctx, info.name, b[i], bytes);
        if (rc) return cli_fail_kiln(verb, rc, info.name);
    }
    return 0;
}

double cli_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int cli_verbose_opt(const char *a) {
    if (strcmp(a, "-v") && strcmp(a, "--verbose")) return 0;
    kiln_log_set(KILN_LOG_VERBOSE, NULL, NULL);
    return 1;
}

int cli_engine_load(const char *verb, const char *path, kiln_engine **e) {
    int rc = kiln_engine_load_ex(path, &cli_load_opts, e);
    if (!rc) return 0;
    /* The loader's messages name the engine file ("engine 'x.kiln': ..."):
     * no second prefix then. */
    char quoted[4096];
    snprintf(quoted, sizeof quoted, "'%s'", path);
    const char *m = kiln_errmsg();
    int named = m && strstr(m, quoted);
    /* A missing plugin: the library's hint names the C API; say the options. */
    const char *api = rc == KILN_EPLUGIN ? strstr(m, "; load it first with kiln_registry_load_library") : NULL;
    if (!api && rc == KILN_EPLUGIN) api = strstr(m, "; load them first with kiln_registry_load_library");
    if (api) {
        int src = strstr(api, "compiled from source") != NULL;
        return cli_fail(verb, "%s%s%.*s; %s", named ? "" : path, named ? "" : ": ", (int)(api - m), m,
                        src ? "it was compiled from source: pass its .c file with --plugin-source (or the "
                              "library with --plugins)"
                            : "load the library with --plugins LIB.so (--plugin-source FILE.c for a source)");
    }
    return named ? cli_fail(verb, "%s", m) : cli_fail_kiln(verb, rc, path);
}

int cli_device(const char *verb, const char *s, kiln_device_kind *out) {
    if (!strcmp(s, "cpu")) *out = KILN_DEVICE_CPU;
    else if (!strcmp(s, "cuda")) *out = KILN_DEVICE_CUDA;
    else {
        cli_fail(verb, "--device expects cpu or cuda, found '%s'", s);
        return -1;
    }
    return 0;
}
