/*
 * launch.c — kiln__cuda_launch: run a kernel of libkiln's embedded fatbin.
 *
 * The fatbin (every src/ops/<family>/<family>.cu, compiled by nvcc at
 * project build: SASS for sm_80/86/89/90 plus compute_90 PTX) is loaded into
 * the primary context once, on the first launch; the driver picks the SASS
 * for this GPU or JIT-compiles the PTX for a newer one.  Function handles are
 * cached by name in a small open-addressing table (kernels are few; a lookup
 * is a hash and a strcmp).  The launch itself is module.c's
 * kiln__cuda_launch_func, the one launch path of libkiln's kernels, plugin
 * modules and AOT kernels alike.
 */
#include "device/cuda/cuda_int.h"

#include <pthread.h>
#include <stdio.h>

enum { FN_CAP = 1024 };

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static CUmodule g_mod;
static int g_mod_status = -1;    /* -1 not tried, 0 loaded, else KILN_E* */
static char g_mod_why[400];
static struct fn_slot {
    const char *name;            /* the caller's string (kernel names are literals) */
    char *own;                   /* our copy, compared when pointers differ */
    CUfunction f;
} g_fn[FN_CAP];

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (uint8_t)*s++) * 1099511628211ull;
    return h;
}

/* Module loaded, under g_lock. */
static int module_locked(const kiln__cu *cu) {
    if (g_mod_status == 0) return 0;
    if (g_mod_status > 0 || g_mod_status < -1) return kiln__err(g_mod_status, "%s", g_mod_why);
    if (!kiln__cuda_have_kernels()) {
        g_mod_status = KILN_EUNSUPPORTED;
        snprintf(g_mod_why, sizeof g_mod_why, "libkiln was built without CUDA kernels (nvcc not found at build)");
        return kiln__err(g_mod_status, "%s", g_mod_why);
    }
    int rc = kiln__cuda_check(cu->ModuleLoadData(&g_mod, kiln__cuda_fatbin), "cuModuleLoadData (libkiln's kernels)");
    if (rc) {
        g_mod_status = rc;
        snprintf(g_mod_why, sizeof g_mod_why, "%s", kiln_errmsg());
        return rc;
    }
    g_mod_status = 0;
    return 0;
}

/* The cached slot of kernel `name` (resolved on first use), under g_lock. */
static int function_locked(const kiln__cu *cu, const char *name, struct fn_slot **out) {
    int rc = module_locked(cu);
    if (rc) return rc;
    size_t i = (size_t)(hash_str(name) & (FN_CAP - 1));
    for (size_t probe = 0; probe < FN_CAP; probe++, i = (i + 1) & (FN_CAP - 1)) {
        struct fn_slot *s = &g_fn[i];
        if (s->name == name || (s->own && !strcmp(s->own, name))) {
            *out = s;
            return 0;
        }
        if (s->own) continue;
        CUfunction f = NULL;
        CUresult r = cu->ModuleGetFunction(&f, g_mod, name);
        if (r) return kiln__cuda_check(r, "cuModuleGetFunction");
        s->own = kiln__strdup(name);
        if (!s->own) return kiln__err(KILN_ENOMEM, "out of memory");
        s->name = name;
        s->f = f;
        *out = s;
        return 0;
    }
    return kiln__err(KILN_EINTERNAL, "more than %d distinct CUDA kernels", FN_CAP);
}

int kiln__cuda_launch(const kiln_call *c, const char *name, const unsigned grid[3], const unsigned block[3],
                      unsigned smem_bytes, void **args) {
    const kiln__cu *cu = NULL;
    const char *layer = c && c->layer ? c->layer : "?";
    int rc = kiln__cuda_init(&cu, NULL);
    if (rc) return kiln__err_prefix(rc, "kernel %s (layer '%s')", name, layer);
    if (!grid[0] || !grid[1] || !grid[2]) return 0; /* empty tensor: nothing to do */
    pthread_mutex_lock(&g_lock);
    struct fn_slot *s = NULL;
    rc = function_locked(cu, name, &s);
    CUfunction f = s ? s->f : NULL;
    pthread_mutex_unlock(&g_lock);
    if (rc) return kiln__err_prefix(rc, "kernel %s (layer '%s')", name, layer);
    void *stream = c && c->exec ? kiln_exec_stream(c->exec) : NULL;
    return kiln__cuda_launch_func(f, name, layer, stream, grid, block, smem_bytes, args);
}
