/*
 * cuda_coverage.c — which ops keep ONNX node cases off the GPU, found on a
 * machine without one (scripts/cuda_coverage.sh builds and runs it).
 *
 * Each case's model is built for KILN_DEVICE_CUDA on the host-memory
 * stand-in device (src/device/cuda/fake.c) without timing, so placement is
 * decided exactly as on a GPU: from the CUDA implementations and the type
 * combinations the ops register.  Nothing runs.  Each case is built the
 * way `kiln test-onnx` builds it (dynamic dims profiled at test data set
 * 0's shapes; failing that, fixed to them; failing that, small inputs made
 * constants), so the counts compare with scripts/test_gpu.sh's.  A folder
 * of models (../shared/models) works the same way.
 *
 * Output: one line per case ("GPU name", "CPU name: Op[types] ...",
 * "NOBUILD name: message", "SKIP name"), then the ranking: per op and
 * type signature, the cases with such a layer on the CPU, and how many of
 * them that op alone keeps off the GPU.  Build errors and run-time
 * rejections of a launcher are not placement: a case counted GPU here can
 * still fail on the GPU (scripts/test_gpu.sh says).
 *
 *   cuda_coverage SKIP_LIST NODE_DIR
 */
#include "device/cuda/cuda_int.h"
#include "kiln_int.h"

#include <kiln/kiln.h>
#include <kiln/onnx.h>

#include <dirent.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SKIP 512
#define MAX_SIGS 1024

static char g_skip[MAX_SKIP][256];
static int g_nskip;

static void read_skip(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[1024];
    while (g_nskip < MAX_SKIP && fgets(line, sizeof line, f)) {
        char pat[256];
        if (sscanf(line, " %255[^# \t\n]", pat) == 1) snprintf(g_skip[g_nskip++], sizeof g_skip[0], "%s", pat);
    }
    fclose(f);
}

static int skipped(const char *name) {
    for (int i = 0; i < g_nskip; i++)
        if (!fnmatch(g_skip[i], name, 0)) return 1;
    return 0;
}

/* A CPU layer's signature: "Op[T_in,...->T_out,...]". */
typedef struct sig {
    char text[160];
    int cases;  /* cases with such a layer on the CPU */
    int alone;  /* of them, cases where it is the only signature on the CPU */
} sig;
static sig g_sigs[MAX_SIGS];
static int g_nsigs;

static sig *sig_get(const char *text) {
    for (int i = 0; i < g_nsigs; i++)
        if (!strcmp(g_sigs[i].text, text)) return &g_sigs[i];
    if (g_nsigs == MAX_SIGS) return NULL;
    sig *s = &g_sigs[g_nsigs++];
    snprintf(s->text, sizeof s->text, "%s", text);
    return s;
}

static void layer_sig(const kiln_engine *e, const kiln__elayer *L, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "%s[", L->op_name);
    for (int k = 0; k < L->nin + L->nout && n < size; k++) {
        int t = k < L->nin ? L->in[k] : L->out[k - L->nin];
        const char *sep = k == 0 ? "" : k == L->nin ? "->" : ",";
        n += (size_t)snprintf(buf + n, size - n, "%s%s", sep, t < 0 ? "-" : kiln_dtype_name(e->tensors[t].dtype));
    }
    if (n < size) snprintf(buf + n, size - n, "]");
}

/* Test data set 0's inputs: what `kiln test-onnx` builds a case for. */
typedef struct dataset {
    int n;
    kiln_onnx_value v[KILN_MAX_IO];
    int64_t dims[KILN_MAX_IO][KILN_MAX_DIMS];
} dataset;

static void dataset_free(dataset *ds) {
    for (int i = 0; i < ds->n; i++) kiln_free((void *)ds->v[i].data);
    ds->n = 0;
}

/* Reads input_<i>.pb for each of the model's inputs, named after them;
 * stops at the first that is missing or not a tensor (sequences). */
static void dataset_read(const char *dir, const char *model, dataset *ds) {
    static char names[KILN_MAX_IO][256];
    ds->n = 0;
    kiln_network *net = NULL;
    if (kiln_onnx_import(model, NULL, &net)) return;
    int n = kiln_network_num_inputs(net);
    for (int i = 0; i < n && i < KILN_MAX_IO; i++) {
        char p[4600];
        snprintf(p, sizeof p, "%s/test_data_set_0/input_%d.pb", dir, i);
        kiln_dtype dt;
        int nd;
        void *data = NULL;
        if (kiln_onnx_read_tensor(p, &dt, &nd, ds->dims[i], &data)) break;
        snprintf(names[i], sizeof names[i], "%s", kiln_network_input_name(net, i));
        ds->v[i] = (kiln_onnx_value){.name = names[i], .dtype = dt, .ndim = nd, .dims = ds->dims[i], .data = data};
        ds->n++;
    }
    kiln_network_free(net);
}

/* Small inputs become constants at tier 2 (as in tools/test_onnx.c). */
static int promotable(const kiln_onnx_value *v) {
    int64_t n = 1;
    for (int k = 0; k < v->ndim; k++) n *= v->dims[k];
    int fl = v->dtype == KILN_DTYPE_F32 || v->dtype == KILN_DTYPE_F64 || v->dtype == KILN_DTYPE_F16 ||
             v->dtype == KILN_DTYPE_BF16;
    return n <= (fl ? 8 : 64);
}

/* The tiers of `kiln test-onnx`: 0 as the model says (dynamic dims get a
 * min = opt = max profile of the data set's shape), 1 dynamic dims fixed to
 * the data set's shapes, 2 also small inputs promoted to constants.  The
 * case is placed as test-onnx builds it, so its counts compare with
 * scripts/test_gpu.sh's. */
static int build(const char *model, const dataset *ds, int tier, kiln_engine **e, char *why, size_t wsz) {
    kiln_onnx_value vals[KILN_MAX_IO], shapes[KILN_MAX_IO];
    int nv = 0, ns = 0;
    for (int i = 0; i < ds->n && tier > 0; i++) {
        if (tier == 2 && promotable(&ds->v[i]))
            vals[nv++] = ds->v[i];
        else
            shapes[ns++] = ds->v[i];
    }
    kiln_onnx_options opt;
    memset(&opt, 0, sizeof opt);
    opt.values = vals;
    opt.nvalues = nv;
    opt.shapes = shapes;
    opt.nshapes = ns;
    kiln_network *net = NULL;
    int rc = kiln_onnx_import(model, &opt, &net);
    if (rc) {
        snprintf(why, wsz, "import: %s", kiln_errmsg());
        return rc;
    }
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING);
    kiln_build_config_set_device(cfg, KILN_DEVICE_CUDA);
    for (int i = 0; i < kiln_network_num_inputs(net); i++) {
        kiln_io_info io;
        if (kiln_network_input_info(net, i, &io)) continue;
        int dyn = 0;
        for (int k = 0; k < io.ndim; k++) dyn |= io.dims[k] < 0;
        for (int k = 0; k < ds->n && dyn; k++)
            if (!strcmp(ds->v[k].name, io.name))
                kiln_build_config_set_profile(cfg, io.name, ds->v[k].ndim, ds->v[k].dims, ds->v[k].dims,
                                              ds->v[k].dims);
    }
    rc = kiln_build(net, cfg, e, NULL);
    if (rc) snprintf(why, wsz, "build: %s", kiln_errmsg());
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    return rc;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int by_cases(const void *a, const void *b) {
    const sig *x = a, *y = b;
    if (x->alone != y->alone) return y->alone - x->alone;
    if (x->cases != y->cases) return y->cases - x->cases;
    return strcmp(x->text, y->text);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s SKIP_LIST NODE_DIR\n", argv[0]);
        return 2;
    }
    read_skip(argv[1]);
    kiln__cuda_fake(1);
    kiln_log_set(KILN_LOG_ERROR, NULL, NULL);
    DIR *d = opendir(argv[2]);
    if (!d) {
        fprintf(stderr, "cannot open %s\n", argv[2]);
        return 1;
    }
    char **names = NULL;
    int nn = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.' || de->d_type == DT_REG) continue; /* folders only (models/README.md) */
        names = realloc(names, (size_t)(nn + 1) * sizeof *names);
        names[nn++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)nn, sizeof *names, by_name);
    int gpu = 0, cpu = 0, nobuild = 0, skip = 0, folded = 0;
    for (int c = 0; c < nn; c++) {
        const char *name = names[c];
        if (skipped(name)) {
            printf("SKIP %s\n", name);
            skip++;
            continue;
        }
        char dir[4400], model[4500], why[2048] = "";
        snprintf(dir, sizeof dir, "%s/%s", argv[2], name);
        snprintf(model, sizeof model, "%s/model.onnx", dir);
        kiln_engine *e = NULL;
        dataset ds;
        dataset_read(dir, model, &ds);
        int rc = build(model, &ds, 0, &e, why, sizeof why);
        for (int tier = 1; rc && tier <= 2 && ds.n; tier++) rc = build(model, &ds, tier, &e, why, sizeof why);
        dataset_free(&ds);
        if (rc) {
            for (char *p = why; *p; p++)
                if (*p == '\n') *p = ' ';
            printf("NOBUILD %s: %.300s\n", name, why);
            nobuild++;
            continue;
        }
        /* distinct CPU signatures of this case */
        char line[8192] = "";
        sig *seen[64];
        int nseen = 0, ops = 0;
        for (int32_t l = 0; l < e->nlayers; l++) {
            const kiln__elayer *L = &e->layers[l];
            if (!strcmp(L->op_name, "reformat")) continue;
            ops++;
            if (L->device != KILN_DEVICE_CPU) continue;
            char s[160];
            layer_sig(e, L, s, sizeof s);
            sig *g = sig_get(s);
            int dup = 0;
            for (int k = 0; k < nseen; k++) dup |= seen[k] == g;
            if (dup || !g || nseen == 64) continue;
            seen[nseen++] = g;
            strncat(line, " ", sizeof line - strlen(line) - 1);
            strncat(line, s, sizeof line - strlen(line) - 1);
        }
        kiln_engine_free(e);
        if (!ops) {
            printf("FOLDED %s\n", name);
            folded++;
        } else if (!nseen) {
            printf("GPU %s\n", name);
            gpu++;
        } else {
            printf("CPU %s:%s\n", name, line);
            cpu++;
            for (int k = 0; k < nseen; k++) {
                seen[k]->cases++;
                seen[k]->alone += nseen == 1;
            }
        }
        fflush(stdout);
    }
    qsort(g_sigs, (size_t)g_nsigs, sizeof g_sigs[0], by_cases);
    printf("\n# CPU layers by op and types: cases it alone keeps off the GPU, cases it is in\n");
    for (int i = 0; i < g_nsigs; i++) printf("%5d %5d  %s\n", g_sigs[i].alone, g_sigs[i].cases, g_sigs[i].text);
    printf("\n# %d cases: %d entirely on the GPU, %d with CPU layers, %d folded at build (no layers), "
           "%d do not build, %d skipped\n", nn, gpu, cpu, folded, nobuild, skip);
    for (int i = 0; i < nn; i++) free(names[i]);
    free(names);
    return 0;
}
