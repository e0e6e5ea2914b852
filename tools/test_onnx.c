/*
 * test_onnx.c — `kiln test-onnx`: the ONNX conformance runner.
 *
 *   kiln test-onnx [--skip-list F] [--rtol R] [--atol A] [--threads N]
 *                  [--plugins LIB] [--no-fork] [-v] DIR...
 *
 * Each DIR is an ONNX test case (model.onnx + test_data_set_*\/input_N.pb,
 * output_N.pb) or a folder of cases.  For every case: import, build (no
 * timing), run every data set with poisoned output buffers, compare
 * (|got - want| <= atol + rtol * |want| for floats, NaN == NaN, integers and
 * bools exact, shapes and dtypes exact).  One line per case:
 *   PASS name | FAIL name: reason | SKIP name: reason
 * and last the line "N passed, N failed, N skipped".  Exit status 1 when a
 * case failed.
 *
 * SKIP means: listed in the skip list (its reason is printed), or the model
 * uses something kiln does not support (an op that is not registered, a
 * type combination no implementation accepts, sequence types: the error is
 * KILN_EUNSUPPORTED).
 *
 * Build-time values: some ops need the *value* of an input at build time
 * (Reshape's shape, Resize's scales, Silero's sample rate, axes, pads ...).
 * A case is first built as the model says (dynamic dims symbolic, with a
 * min = opt = max profile from the data set).  Only when that build fails:
 * (1) rebuilt with the dynamic dims fixed to the data set's shapes
 * (kiln_onnx_options.shapes: an If on a dim becomes known), then (2) also
 * with the small inputs (integer/bool inputs of at most 64 elements, float
 * inputs of at most 8 elements) turned into constants holding the data
 * set's values (kiln_onnx_options.values), once per data set.  -v prints
 * which was needed.
 *
 * Every case runs in a forked child (unless --no-fork): a crash or a hang
 * (120 s) fails that case, not the run.
 *
 * Skip list format: one case name (fnmatch pattern) per line, then
 * optionally "# reason"; lines starting with '#' are comments.
 */
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "kiln/onnx.h"
#include "kiln_int.h"

#define VERB "test-onnx"
#define MAX_IO 64

typedef struct skip_entry {
    char *pattern;
    char *reason;
} skip_entry;

typedef struct runner {
    double rtol, atol;
    int threads;
    int verbose;
    int fork;
    skip_entry *skips;
    int nskips;
    int passed, failed, skipped;
    kiln_device_kind device;   /* --device: where engines are built to run */
    unsigned flags;            /* --fp16/--bf16/--tf32: build flags added */
    int on_gpu;                /* passed cases whose op layers all ran on the GPU */
} runner;

enum { R_PASS = 0, R_FAIL = 1, R_SKIP = 2 };

/* ------------------------------------------------------------ helpers */

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}
static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted subdirectory names of dir with the given prefix (NULL: all). */
static int list_dirs(const char *dir, const char *prefix, char ***out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0, cap = 0;
    char **v = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (prefix && strncmp(e->d_name, prefix, strlen(prefix))) continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (!is_dir(p)) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) break;
            v = nv;
        }
        v[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n) qsort(v, (size_t)n, sizeof *v, cmp_str);
    *out = v;
    return n;
}

static void free_list(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

static int load_skips(runner *r, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return cli_fail(VERB, "cannot open skip list '%s': %s", path, strerror(errno));
    char line[2048];
    while (fgets(line, sizeof line, f)) {
        char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        if (*s == '#' || *s == '\n' || !*s) continue;
        char *hash = strchr(s, '#');
        char *reason = hash ? hash + 1 : (char *)"in the skip list";
        if (hash) *hash = 0;
        char *end = s + strcspn(s, " \t\r\n");
        *end = 0;
        while (*reason == ' ') reason++;
        reason[strcspn(reason, "\r\n")] = 0;
        skip_entry *ns = realloc(r->skips, (size_t)(r->nskips + 1) * sizeof *ns);
        if (!ns) break;
        r->skips = ns;
        r->skips[r->nskips].pattern = strdup(s);
        r->skips[r->nskips].reason = strdup(*reason ? reason : "in the skip list");
        r->nskips++;
    }
    fclose(f);
    return 0;
}

static const char *skip_reason(const runner *r, const char *name) {
    for (int i = 0; i < r->nskips; i++)
        if (!fnmatch(r->skips[i].pattern, name, 0)) return r->skips[i].reason;
    return NULL;
}

/* ------------------------------------------------------------ tensors */

typedef struct tensor {
    kiln_dtype dtype;
    int ndim;
    int64_t dims[KILN_MAX_DIMS];
    void *data;
    size_t bytes;
    int libc;   /* data from malloc (else from kiln: kiln_free) */
} tensor;

static int64_t numel(int ndim, const int64_t *dims) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= dims[i];
    return n;
}

static int read_pb(const char *path, tensor *t) {
    int rc = kiln_onnx_read_tensor(path, &t->dtype, &t->ndim, t->dims, &t->data);
    if (rc) return rc;
    t->bytes = (size_t)numel(t->ndim, t->dims) * kiln_dtype_size(t->dtype);
    return 0;
}

static double get_f(kiln_dtype dt, const void *p, int64_t i) {
    switch (dt) {
    case KILN_DTYPE_F32: return ((const float *)p)[i];
    case KILN_DTYPE_F64: return ((const double *)p)[i];
    case KILN_DTYPE_F16: return kiln_f16_to_f32(((const uint16_t *)p)[i]);
    case KILN_DTYPE_BF16: return kiln_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return 0;
    }
}

static int is_float(kiln_dtype dt) {
    return dt == KILN_DTYPE_F32 || dt == KILN_DTYPE_F64 || dt == KILN_DTYPE_F16 || dt == KILN_DTYPE_BF16;
}

static void shape_str(int ndim, const int64_t *dims, char *buf, size_t size) {
    size_t p = 0;
    p += (size_t)snprintf(buf + p, size - p, "[");
    for (int i = 0; i < ndim && p < size; i++)
        p += (size_t)snprintf(buf + p, size - p, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (p < size) snprintf(buf + p, size - p, "]");
}

/* 0 equal; else 1 with reason. */
static int compare(const runner *r, const char *name, const tensor *want_, kiln_dtype gdt, int gnd,
                   const int64_t *gdims, const void *got, char *why, size_t wsz) {
    tensor wcopy = *want_;
    const tensor *want = &wcopy;
    /* Older ONNX test data stores bfloat16 tensors as uint16 bit patterns. */
    if (wcopy.dtype == KILN_DTYPE_U16 && gdt == KILN_DTYPE_BF16) wcopy.dtype = KILN_DTYPE_BF16;
    /* An empty sequence in test data names no element type. */
    if (wcopy.dtype == KILN_DTYPE_UNDEFINED && !wcopy.bytes) wcopy.dtype = gdt;
    if (gdt != want->dtype) {
        snprintf(why, wsz, "output '%s' has dtype %s, expected %s", name, kiln_dtype_name(gdt),
                 kiln_dtype_name(want->dtype));
        return 1;
    }
    int same = gnd == want->ndim;
    for (int i = 0; same && i < gnd; i++) same = gdims[i] == want->dims[i];
    if (!same) {
        char a[256], b[256];
        shape_str(gnd, gdims, a, sizeof a);
        shape_str(want->ndim, want->dims, b, sizeof b);
        snprintf(why, wsz, "output '%s' has shape %s, expected %s", name, a, b);
        return 1;
    }
    int64_t n = numel(want->ndim, want->dims);
    if (n && !got) {
        snprintf(why, wsz, "output '%s' has no data", name);
        return 1;
    }
    if (is_float(want->dtype)) {
        int64_t bad = 0, first = -1;
        double worst = 0;
        for (int64_t i = 0; i < n; i++) {
            double g = get_f(gdt, got, i), w = get_f(want->dtype, want->data, i);
            int ok;
            if (isnan(w)) ok = isnan(g);
            else if (isinf(w)) ok = g == w;
            else ok = !isnan(g) && fabs(g - w) <= r->atol + r->rtol * fabs(w);
            if (!ok) {
                if (first < 0) first = i;
                bad++;
                double d = fabs(g - w);
                if (!(d <= worst)) worst = d;
            }
        }
        if (bad) {
            snprintf(why, wsz, "output '%s': %lld of %lld values differ (first at %lld: got %.9g, "
                     "expected %.9g; max abs diff %.3g; rtol %g atol %g)", name, (long long)bad,
                     (long long)n, (long long)first, get_f(gdt, got, first),
                     get_f(want->dtype, want->data, first), worst, r->rtol, r->atol);
            return 1;
        }
        return 0;
    }
    size_t es = kiln_dtype_size(want->dtype);
    for (int64_t i = 0; i < n; i++)
        if (memcmp((const char *)got + (size_t)i * es, (const char *)want->data + (size_t)i * es, es)) {
            long long g = 0, w = 0;
            memcpy(&g, (const char *)got + (size_t)i * es, es < 8 ? es : 8);
            memcpy(&w, (const char *)want->data + (size_t)i * es, es < 8 ? es : 8);
            if (es < 8 && want->dtype != KILN_DTYPE_U8 && want->dtype != KILN_DTYPE_U16 &&
                want->dtype != KILN_DTYPE_U32 && want->dtype != KILN_DTYPE_BOOL) {
                int sh = (int)(64 - 8 * es);
                g = (long long)((unsigned long long)g << sh) >> sh;
                w = (long long)((unsigned long long)w << sh) >> sh;
            }
            snprintf(why, wsz, "output '%s': element %lld is %lld, expected %lld (exact compare)",
                     name, (long long)i, g, w);
            return 1;
        }
    return 0;
}

/* ------------------------------------------------------------ one case */

typedef struct dataset {
    int nin, nout;
    tensor in[MAX_IO], out[MAX_IO];
} dataset;

/* How ONNX values map onto the network's tensors: a sequence or optional
 * value `s` is the tensors s, s:shapes (and s:present) (kiln/onnx.h), so
 * input_N.pb may fill several network inputs.  parts[v] tensors from
 * first[v] on; rank[t]: the declared dim 1 of a :shapes tensor (-1). */
typedef struct iomap {
    int nval[2];                 /* ONNX values: inputs, outputs */
    int first[2][MAX_IO], parts[2][MAX_IO];
    int ntensor[2];
    int part[2][MAX_IO];         /* network tensor t is part k>0 of a value: k */
    int64_t rank[2][MAX_IO];
    kiln_dtype dtype[2][MAX_IO];
    int inseq[2][MAX_IO];        /* network tensor t belongs to a multi-tensor value */
    int isstr[2][MAX_IO];        /* value v is a string tensor (bytes, :lens) */
} iomap;

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

static void iomap_make(const kiln_network *net, iomap *m) {
    memset(m, 0, sizeof *m);
    for (int k = 0; k < 2; k++) {
        int n = k ? kiln_network_num_outputs(net) : kiln_network_num_inputs(net);
        if (n > MAX_IO) n = MAX_IO;
        m->ntensor[k] = n;
        for (int t = 0; t < n; t++) {
            const char *nm = k ? kiln_network_output_name(net, t) : kiln_network_input_name(net, t);
            const kiln__ntensor *nt = &net->tensors[k ? net->outputs[t] : net->inputs[t]];
            m->rank[k][t] = nt->ndim == 2 ? nt->dims[1] : -1;
            m->dtype[k][t] = nt->dtype;
            int lens = ends_with(nm, ":lens");
            int pk = ends_with(nm, ":shapes") || lens ? 1 : ends_with(nm, ":present") ? 2 : 0;
            if (pk && m->nval[k] > 0 && m->parts[k][m->nval[k] - 1] == pk) {
                m->parts[k][m->nval[k] - 1]++;
                m->part[k][t] = pk;
                m->isstr[k][m->nval[k] - 1] = lens;
                continue;
            }
            m->first[k][m->nval[k]] = t;
            m->parts[k][m->nval[k]++] = 1;
        }
        for (int v = 0; v < m->nval[k]; v++)
            for (int q = 0; q < m->parts[k][v] && m->parts[k][v] > 1; q++) m->inseq[k][m->first[k][v] + q] = 1;
    }
}

/* A sequence/optional (parts 2 or 3) or string (is_str, parts 2) value
 * into t[0..parts): the tensors kiln carries it in. */
static int read_value_pb(const char *path, int is_str, int parts, const int64_t *rank, kiln_dtype want,
                         tensor *t, char *why, size_t wsz) {
    cli_tensor v[3];
    int rc = cli_value_read(path, is_str, parts, want, rank[1], v, why, wsz);
    if (rc) return rc;
    for (int k = 0; k < parts; k++) {
        memset(&t[k], 0, sizeof t[k]);
        t[k].dtype = v[k].dtype;
        t[k].ndim = v[k].ndim;
        memcpy(t[k].dims, v[k].dims, sizeof t[k].dims);
        t[k].data = v[k].data;
        t[k].bytes = v[k].bytes;
        t[k].libc = 1;
    }
    return 0;
}

static void dataset_free(dataset *d) {
    for (int i = 0; i < d->nin; i++) d->in[i].libc ? free(d->in[i].data) : kiln_free(d->in[i].data);
    for (int i = 0; i < d->nout; i++) d->out[i].libc ? free(d->out[i].data) : kiln_free(d->out[i].data);
    d->nin = d->nout = 0;
}

static int load_dataset(const char *dir, const iomap *m, dataset *d, char *why, size_t wsz) {
    memset(d, 0, sizeof *d);
    for (int k = 0; k < 2; k++) {
        for (int i = 0, t0 = 0; i < MAX_IO; i++) {
            char p[4200];
            snprintf(p, sizeof p, "%s/%s_%d.pb", dir, k ? "output" : "input", i);
            if (!is_file(p)) break;
            int parts = i < m->nval[k] ? m->parts[k][i] : 1;
            if (i < m->nval[k]) t0 = m->first[k][i];
            if (t0 + parts > MAX_IO) {
                snprintf(why, wsz, "%s: more than %d %s tensors (kiln test-onnx handles at most %d)", p, MAX_IO,
                         k ? "output" : "input", MAX_IO);
                return R_FAIL;
            }
            tensor *t = k ? &d->out[t0] : &d->in[t0];
            int rc = 0;
            if (parts > 1) {
                char m2[1024];
                if ((rc = read_value_pb(p, m->isstr[k][i], parts, &m->rank[k][t0], m->dtype[k][t0], t, m2,
                                        sizeof m2))) {
                    snprintf(why, wsz, "reading %s: %s", p, m2);
                    return rc == KILN_EUNSUPPORTED ? R_SKIP : R_FAIL;
                }
            } else if ((rc = read_pb(p, t))) {
                snprintf(why, wsz, "reading %s: %s", p, kiln_errmsg());
                return rc == KILN_EUNSUPPORTED ? R_SKIP : R_FAIL;
            }
            t0 += parts;
            if (k) d->nout = t0;
            else d->nin = t0;
        }
        char p[4200];
        snprintf(p, sizeof p, "%s/%s_%d.pb", dir, k ? "output" : "input", MAX_IO);
        if (is_file(p)) {
            snprintf(why, wsz, "%s: more than %d %s files (kiln test-onnx handles at most %d)", dir, MAX_IO,
                     k ? "output_N.pb" : "input_N.pb", MAX_IO);
            return R_FAIL;
        }
    }
    return 0;
}

static int is_unsupported(int rc) { return rc == KILN_EUNSUPPORTED; }

/* First line of the current kiln message. */
static void errline(char *buf, size_t size) {
    const char *m = kiln_errmsg();
    snprintf(buf, size, "%s", m && *m ? m : "(no message)");
}

static int promotable(const tensor *t) {
    int64_t n = numel(t->ndim, t->dims);
    if (is_float(t->dtype)) return n <= 8;
    return n <= 64;
}

/* Import + build for one data set.  tier 0: as the model says; 1: dynamic
 * dims fixed to the data set's shapes; 2: also small inputs promoted to
 * constants.  Returns -1 when the tier changes nothing. */
static const char *const tier_note[3] = {"", " (shapes fixed to the data set's)",
                                         " (shapes fixed, small inputs promoted to constants)"};

static int build_for(const runner *r, const char *model, const dataset *ds, int tier, int dynamic,
                     char (*names)[256], int nnames, kiln_engine **eng, char *why, size_t wsz) {
    *eng = NULL;
    kiln_onnx_value vals[MAX_IO], shapes[MAX_IO];
    int nv = 0, ns = 0;
    for (int i = 0; i < ds->nin && i < nnames; i++) {
        if (tier >= 2 && promotable(&ds->in[i])) {
            vals[nv].name = names[i];
            vals[nv].dtype = ds->in[i].dtype;
            vals[nv].ndim = ds->in[i].ndim;
            vals[nv].dims = ds->in[i].dims;
            vals[nv].data = ds->in[i].data;
            nv++;
        } else if (tier >= 1) {
            shapes[ns].name = names[i];
            shapes[ns].dtype = ds->in[i].dtype;
            shapes[ns].ndim = ds->in[i].ndim;
            shapes[ns].dims = ds->in[i].dims;
            shapes[ns].data = NULL;
            ns++;
        }
    }
    if ((tier == 1 && !dynamic) || (tier == 2 && !nv)) return -1;
    kiln_onnx_options opt;
    memset(&opt, 0, sizeof opt);
    opt.values = vals;
    opt.nvalues = nv;
    opt.shapes = shapes;
    opt.nshapes = ns;
    kiln_network *net = NULL;
    int rc = kiln_onnx_import(model, &opt, &net);
    if (rc) {
        char m[1600];
        errline(m, sizeof m);
        snprintf(why, wsz, "import: %s", m);
        return is_unsupported(rc) ? R_SKIP : R_FAIL;
    }
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING | r->flags);
    kiln_build_config_set_threads(cfg, r->threads);
    kiln_build_config_set_device(cfg, r->device);
    /* Profiles: dynamic inputs take the data set's shape. */
    for (int i = 0; i < net->ninputs; i++) {
        const kiln__ntensor *t = &net->tensors[net->inputs[i]];
        int dyn = 0;
        for (int k = 0; k < t->ndim; k++) dyn |= t->dims[k] < 0;
        if (!dyn) continue;
        int di = -1;
        for (int k = 0; k < nnames; k++)
            if (!strcmp(names[k], t->name)) di = k;
        if (di < 0 || di >= ds->nin) continue;
        kiln_build_config_set_profile(cfg, t->name, ds->in[di].ndim, ds->in[di].dims, ds->in[di].dims,
                                      ds->in[di].dims);
    }
    rc = kiln_build(net, cfg, eng, NULL);
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    if (rc) {
        char m[1600];
        errline(m, sizeof m);
        snprintf(why, wsz, "build%s: %s", tier_note[tier], m);
        return is_unsupported(rc) ? R_SKIP : R_FAIL;
    }
    if (tier && r->verbose) {
        fprintf(stderr, "  built with%s:", tier_note[tier]);
        for (int i = 0; i < nv; i++) fprintf(stderr, " %s", vals[i].name);
        fprintf(stderr, "\n");
    }
    return R_PASS;
}

static int run_dataset(const runner *r, kiln_engine *e, const dataset *ds, char (*names)[256],
                       int nnames, char *why, size_t wsz) {
    kiln_context *ctx = NULL;
    int rc = kiln_context_create(e, r->threads, &ctx);
    if (rc) {
        char m[1600];
        errline(m, sizeof m);
        snprintf(why, wsz, "context: %s", m);
        return R_FAIL;
    }
    int res = R_PASS;
    void *obuf[MAX_IO] = {0};
    int nei = kiln_engine_num_inputs(e), neo = kiln_engine_num_outputs(e);
    for (int i = 0; i < nei && res == R_PASS; i++) {
        kiln_io_info io;
        kiln_engine_io(e, i, &io);
        int di = -1;
        for (int k = 0; k < nnames; k++)
            if (!strcmp(names[k], io.name)) di = k;
        if (di < 0 || di >= ds->nin) {
            snprintf(why, wsz, "no test data for input '%s'", io.name);
            res = R_FAIL;
            break;
        }
        const tensor *t = &ds->in[di];
        /* bfloat16 stored as uint16 bit patterns (older test data) */
        int bf16_bits = t->dtype == KILN_DTYPE_U16 && io.dtype == KILN_DTYPE_BF16;
        if (t->dtype != io.dtype && !bf16_bits) {
            snprintf(why, wsz, "test data for input '%s' is %s, the engine expects %s", io.name,
                     kiln_dtype_name(t->dtype), kiln_dtype_name(io.dtype));
            res = R_FAIL;
            break;
        }
        if ((rc = kiln_context_set_input_shape(ctx, io.name, t->ndim, t->dims)) ||
            (rc = kiln_context_bind(ctx, io.name, t->data, t->bytes))) {
            char m[1600];
            errline(m, sizeof m);
            snprintf(why, wsz, "input '%s': %s", io.name, m);
            res = R_FAIL;
        }
    }
    if (res == R_PASS && neo != ds->nout) {
        snprintf(why, wsz, "the model has %d outputs, the data set %d", neo, ds->nout);
        res = R_FAIL;
    }
    /* Poisoned output buffers: anything not written shows up as garbage. */
    for (int i = 0; i < neo && res == R_PASS; i++) {
        kiln_io_info io;
        kiln_engine_io(e, nei + i, &io);
        size_t cap = 0;
        if ((rc = kiln_context_output_capacity(ctx, io.name, &cap))) {
            char m[1600];
            errline(m, sizeof m);
            snprintf(why, wsz, "output '%s': %s", io.name, m);
            res = R_FAIL;
            break;
        }
        obuf[i] = malloc(cap ? cap : 1);
        memset(obuf[i], 0xA5, cap ? cap : 1);
        if ((rc = kiln_context_bind(ctx, io.name, obuf[i], cap))) {
            char m[1600];
            errline(m, sizeof m);
            snprintf(why, wsz, "binding output '%s': %s", io.name, m);
            res = R_FAIL;
        }
    }
    if (res == R_PASS && (rc = kiln_context_run(ctx))) {
        char m[1600];
        errline(m, sizeof m);
        snprintf(why, wsz, "run: %s", m);
        res = is_unsupported(rc) ? R_SKIP : R_FAIL;
    }
    for (int i = 0; i < neo && res == R_PASS; i++) {
        kiln_io_info io;
        kiln_engine_io(e, nei + i, &io);
        int nd = 0;
        int64_t dims[KILN_MAX_DIMS];
        if ((rc = kiln_context_shape(ctx, io.name, &nd, dims))) {
            char m[1600];
            errline(m, sizeof m);
            snprintf(why, wsz, "output '%s' shape: %s", io.name, m);
            res = R_FAIL;
            break;
        }
        const void *got = kiln_context_output(ctx, io.name);
        if (compare(r, io.name, &ds->out[i], io.dtype, nd, dims, got, why, wsz)) res = R_FAIL;
    }
    kiln_context_free(ctx);
    for (int i = 0; i < neo; i++) free(obuf[i]);
    return res;
}

static int run_case(const runner *r, const char *dir, char *why, size_t wsz) {
    char model[4200];
    snprintf(model, sizeof model, "%s/model.onnx", dir);
    char **sets = NULL;
    int nsets = list_dirs(dir, "test_data_set_", &sets);
    if (nsets <= 0) {
        snprintf(why, wsz, "no test_data_set_* folder");
        free_list(sets, nsets > 0 ? nsets : 0);
        return R_FAIL;
    }
    /* Names of the graph's real inputs, in order (input_N.pb is input N). */
    kiln_network *net = NULL;
    int rc = kiln_onnx_import(model, NULL, &net);
    if (rc) {
        char m[1600];
        errline(m, sizeof m);
        if (is_unsupported(rc) && strstr(m, "op_type '") && !r->verbose) {
            /* "unsupported op A, B (first: <message of the first node>)" */
            char ops[512] = "";
            size_t ol = 0;
            for (const char *p = strstr(m, "op_type '"); p; p = strstr(p + 1, "op_type '")) {
                const char *b = p + 9, *e = strchr(b, '\'');
                if (!e || e - b > 100) break;
                char op[128];
                snprintf(op, sizeof op, "%.*s", (int)(e - b), b);
                int dup = 0;
                for (const char *q = ops; *q && !dup;) {
                    const char *c = strstr(q, ", ");
                    size_t len = c ? (size_t)(c - q) : strlen(q);
                    dup = len == strlen(op) && !strncmp(q, op, len);
                    if (!c) break;
                    q = c + 2;
                }
                if (dup) continue;
                ol += (size_t)snprintf(ops + ol, ol < sizeof ops ? sizeof ops - ol : 0, "%s%s", ol ? ", " : "", op);
                if (ol >= sizeof ops) break;
            }
            const char *first = strstr(m, "node '");
            snprintf(why, wsz, "unsupported op %s (%s)", ops, first ? first : m);
        } else {
            snprintf(why, wsz, "import: %s", m);
        }
        free_list(sets, nsets);
        return is_unsupported(rc) ? R_SKIP : R_FAIL;
    }
    if (kiln_network_num_inputs(net) > MAX_IO || kiln_network_num_outputs(net) > MAX_IO) {
        snprintf(why, wsz, "the model has %d inputs and %d outputs, kiln test-onnx handles at most %d of each",
                 kiln_network_num_inputs(net), kiln_network_num_outputs(net), MAX_IO);
        kiln_network_free(net);
        free_list(sets, nsets);
        return R_FAIL;
    }
    char(*names)[256] = calloc(MAX_IO, sizeof *names);
    int nnames = kiln_network_num_inputs(net);
    if (nnames > MAX_IO) nnames = MAX_IO;
    for (int i = 0; i < nnames; i++) snprintf(names[i], 256, "%s", kiln_network_input_name(net, i));
    int dynamic = 0;
    for (int i = 0; i < net->ninputs; i++) {
        const kiln__ntensor *t = &net->tensors[net->inputs[i]];
        for (int k = 0; k < t->ndim; k++) dynamic |= t->dims[k] < 0;
    }
    iomap *map = calloc(1, sizeof *map);
    if (map) iomap_make(net, map);
    kiln_network_free(net);
    if (!map) {
        free(names);
        free_list(sets, nsets);
        snprintf(why, wsz, "out of memory");
        return R_FAIL;
    }

    int res = R_PASS, tier = 0;
    kiln_engine *e = NULL;
    for (int s = 0; s < nsets && res == R_PASS; s++) {
        char sd[4400];
        snprintf(sd, sizeof sd, "%s/%s", dir, sets[s]);
        dataset ds;
        res = load_dataset(sd, map, &ds, why, wsz);
        if (res != R_PASS) break;
        if (!e || tier || dynamic) {
            if (e) kiln_engine_free(e);
            e = NULL;
            res = build_for(r, model, &ds, tier, dynamic, names, nnames, &e, why, wsz);
            /* The build failed (not the import) on the first data set: try
             * the next tiers, keep the first message if none helps. */
            if (res != R_PASS && s == 0 && !strncmp(why, "build", 5)) {
                char first[2048];
                snprintf(first, sizeof first, "%s", why);
                int last = res;
                for (int t = 1; t <= 2 && last != R_PASS; t++) {
                    int r2 = build_for(r, model, &ds, t, dynamic, names, nnames, &e, why, wsz);
                    if (r2 < 0) continue;
                    last = r2;
                    if (r2 == R_PASS) tier = t;
                }
                if (last == R_PASS) {
                    res = R_PASS;
                    if (r->verbose) fprintf(stderr, "  (as the model says: %s)\n", first);
                } else if (!strcmp(why, first) || last == res) {
                    size_t l = strlen(why);
                    if (r->verbose && strcmp(why, first) && l + 16 < wsz)
                        snprintf(why + l, wsz - l, " [as the model says: %s]", first);
                    res = last;
                } else {
                    res = last;
                }
            }
        }
        if (res == R_PASS) {
            res = run_dataset(r, e, &ds, names, nnames, why, wsz);
            if (res != R_PASS && nsets > 1) {
                size_t l = strlen(why);
                if (l + 32 < wsz) snprintf(why + l, wsz - l, " (%s)", sets[s]);
            }
        }
        dataset_free(&ds);
    }
    /* CUDA runs: a passed case says where its layers ran ("on GPU" or how
     * many stayed on the CPU), for the summary. */
    if (res == R_PASS && e && r->device == KILN_DEVICE_CUDA) {
        int g = 0, c = 0;
        kiln_engine_placement(e, &g, &c);
        if (c) snprintf(why, wsz, "%d of %d layers on the CPU", c, g + c);
        else if (g) snprintf(why, wsz, "on GPU");
        else snprintf(why, wsz, "no layers: folded at build");
    }
    if (e) kiln_engine_free(e);
    free(map);
    free(names);
    free_list(sets, nsets);
    return res;
}

/* ------------------------------------------------------------ driver */

static void report(runner *r, const char *name, int res, const char *why) {
    /* One line per case: flatten multi-line messages. */
    char flat[4096];
    snprintf(flat, sizeof flat, "%s", why);
    for (char *p = flat; *p; p++)
        if (*p == '\n') *p = ' ';
    if (!r->verbose && strlen(flat) > 600) strcpy(flat + 596, " ...");
    switch (res) {
    case R_PASS:
        if (flat[0]) printf("PASS %s (%s)\n", name, flat);
        else printf("PASS %s\n", name);
        r->passed++;
        r->on_gpu += !strcmp(flat, "on GPU");
        break;
    case R_SKIP: printf("SKIP %s: %s\n", name, flat); r->skipped++; break;
    default: printf("FAIL %s: %s\n", name, flat); r->failed++; break;
    }
    fflush(stdout);
}

static void do_case(runner *r, const char *dir, const char *name) {
    const char *sk = skip_reason(r, name);
    if (sk) {
        report(r, name, R_SKIP, sk);
        return;
    }
    char why[4096] = "";
    if (!r->fork) {
        int res = run_case(r, dir, why, sizeof why);
        report(r, name, res, why);
        return;
    }
    int fds[2];
    if (pipe(fds) != 0) {
        report(r, name, R_FAIL, "pipe failed");
        return;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        alarm(120);
        int res = run_case(r, dir, why, sizeof why);
        size_t len = strlen(why);
        ssize_t w = write(fds[1], why, len);
        (void)w;
        close(fds[1]);
        _exit(res);
    }
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        report(r, name, R_FAIL, "fork failed");
        return;
    }
    size_t len = 0;
    ssize_t n;
    while (len + 1 < sizeof why && (n = read(fds[0], why + len, sizeof why - 1 - len)) > 0) len += (size_t)n;
    why[len] = 0;
    close(fds[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (WIFSIGNALED(st)) {
        char m[4200];
        int sig = WTERMSIG(st);
        snprintf(m, sizeof m, "%s (signal %d: %s)", sig == SIGALRM ? "timed out after 120 s" : "crashed",
                 sig, strsignal(sig));
        report(r, name, R_FAIL, m);
    } else if (WIFEXITED(st) && WEXITSTATUS(st) <= R_SKIP && (why[0] || WEXITSTATUS(st) == R_PASS)) {
        report(r, name, WEXITSTATUS(st), why);
    } else {
        char m[4200];
        snprintf(m, sizeof m, "the case process exited with status %d without a result (a sanitizer "
                 "report or exit() on stderr?) %s", WIFEXITED(st) ? WEXITSTATUS(st) : -1, why);
        report(r, name, R_FAIL, m);
    }
}

static void do_path(runner *r, const char *path) {
    char model[4200];
    snprintf(model, sizeof model, "%s/model.onnx", path);
    const char *base = strrchr(path, '/');
    char name[1024];
    snprintf(name, sizeof name, "%s", base && base[1] ? base + 1 : path);
    size_t nl = strlen(name);
    if (nl > 1 && name[nl - 1] == '/') name[nl - 1] = 0;
    if (is_file(model)) {
        do_case(r, path, name);
        return;
    }
    char **subs = NULL;
    int n = list_dirs(path, NULL, &subs);
    if (n < 0) {
        report(r, name, R_FAIL, "not a test case or a folder of test cases");
        return;
    }
    for (int i = 0; i < n; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", path, subs[i]);
        char m2[4300];
        snprintf(m2, sizeof m2, "%s/model.onnx", p);
        if (strlen(m2) >= sizeof model) continue;
        memcpy(model, m2, strlen(m2) + 1);
        if (is_file(model)) do_case(r, p, subs[i]);
    }
    free_list(subs, n);
}

/* dirs: room for argc folder names */
static int test_onnx(int argc, char **argv, const char **dirs) {
    runner r;
    memset(&r, 0, sizeof r);
    r.rtol = 1e-3;
    r.atol = 1e-5;
    r.threads = 1;
    r.fork = 1;
    cli_plugins plugins;
    memset(&plugins, 0, sizeof plugins);
    int ndirs = 0;
    long min_pass = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int m;
        if ((m = cli_opt(argc, argv, &i, "--skip-list", &v))) {
            if (m < 0 || load_skips(&r, v)) return 2;
        } else if ((m = cli_opt(argc, argv, &i, "--rtol", &v))) {
            if (m < 0 || cli_double(VERB, "--rtol", v, &r.rtol)) return 2;
        } else if ((m = cli_opt(argc, argv, &i, "--atol", &v))) {
            if (m < 0 || cli_double(VERB, "--atol", v, &r.atol)) return 2;
        } else if ((m = cli_opt(argc, argv, &i, "--threads", &v))) {
            long t;
            if (m < 0 || cli_int(VERB, "--threads", v, &t)) return 2;
            r.threads = t < 1 ? 1 : (int)t;
        } else if ((m = cli_opt(argc, argv, &i, "--device", &v))) {
            if (m < 0 || cli_device(VERB, v, &r.device)) return 2;
        } else if ((m = cli_opt(argc, argv, &i, "--plugins", &v))) {
            if (m < 0 || cli_plugins_add(VERB, &plugins, v)) return 2;
        } else if ((m = cli_opt(argc, argv, &i, "--min-pass", &v))) {
            if (m < 0 || cli_int(VERB, "--min-pass", v, &min_pass)) return 2;
        } else if (!strcmp(argv[i], "--fp16")) {
            r.flags |= KILN_BUILD_FP16;
        } else if (!strcmp(argv[i], "--bf16")) {
            r.flags |= KILN_BUILD_BF16;
        } else if (!strcmp(argv[i], "--tf32")) {
            r.flags |= KILN_BUILD_TF32;
        } else if (!strcmp(argv[i], "--no-fork")) {
            r.fork = 0;
        } else if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose")) {
            r.verbose = 1;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: kiln test-onnx [--skip-list F] [--rtol R] [--atol A] [--threads N]\n"
                   "                      [--plugins LIB] [--min-pass N] [--no-fork] [--device cpu|cuda]\n"
                   "                      [--fp16|--bf16] [--tf32] [-v] DIR...\n"
                   "--device cuda builds each case for the GPU; a passed case then says whether\n"
                   "all its layers ran on the GPU, and a last line counts those that did.\n"
                   "--fp16/--bf16/--tf32 build as kiln build does with them (loosen --rtol/--atol).\n"
                   "Runs ONNX test cases (model.onnx + test_data_set_*/) or folders of them.\n"
                   "Exits 1 when a case fails, or fewer than N pass (a case that stopped\n"
                   "passing and is now skipped as unsupported).\n");
            return 0;
        } else if (argv[i][0] == '-') {
            cli_fail(VERB, "unknown option '%s' (see kiln test-onnx --help)", argv[i]);
            return 2;
        } else {
            dirs[ndirs++] = argv[i];
        }
    }
    if (!ndirs) {
        cli_fail(VERB, "expected at least one test folder (see kiln test-onnx --help)");
        return 2;
    }
    if (cli_plugins_load(VERB, &plugins)) return 1;
    for (int i = 0; i < ndirs; i++) {
        if (!is_dir(dirs[i])) {
            report(&r, dirs[i], R_FAIL, "no such folder");
            continue;
        }
        do_path(&r, dirs[i]);
    }
    printf("%d passed, %d failed, %d skipped\n", r.passed, r.failed, r.skipped);
    if (r.device == KILN_DEVICE_CUDA) printf("%d of the %d passed ran entirely on the GPU\n", r.on_gpu, r.passed);
    int none = !r.passed && !r.failed && !r.skipped;
    if (none) /* a wrong folder is not a successful run */
        cli_fail(VERB, "no test cases (model.onnx + test_data_set_*/) found under %s%s", dirs[0],
                 ndirs > 1 ? " or the other folders given" : "");
    for (int i = 0; i < r.nskips; i++) {
        free(r.skips[i].pattern);
        free(r.skips[i].reason);
    }
    free(r.skips);
    int few = r.passed < min_pass;
    if (few)
        cli_fail(VERB, "%d cases passed, at least %ld expected (--min-pass): a case that passed before is "
                 "now skipped or missing", r.passed, min_pass);
    return r.failed || none || few ? 1 : 0;
}

int kiln_cli_test_onnx(int argc, char **argv) {
    /* every argument may be a folder: argc bounds the list (it used to be
     * 256 entries, and folders past them were silently not run) */
    const char **dirs = calloc((size_t)argc, sizeof *dirs);
    if (!dirs) {
        cli_fail(VERB, "out of memory");
        return 2;
    }
    int rc = test_onnx(argc, argv, dirs);
    free(dirs);
    return rc;
}
