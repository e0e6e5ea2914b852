/*
 * module.c — CUDA modules that are not libkiln's own kernels: the kernels
 * plugins compile at run time (kiln_cuda_module_get / kiln_cuda_launch,
 * public) and the PTX -> cubin step of AOT CUDA kernels (plugin/aot_cuda.c).
 *
 * A plugin's module is keyed by the SHA-256 of its text and language, kept
 * for the life of the process (engines and contexts come and go; a module
 * is small), with its function handles cached by name.
 */
#include "device/cuda/cuda_int.h"
#include "core/bytes.h"

#include <pthread.h>
#include <stdio.h>

enum { CU_JIT_ERROR_LOG_BUFFER = 5, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6, CU_JIT_INPUT_PTX = 1,
       CU_FUNC_ATTR_MAX_DYN_SMEM = 8, MOD_FNS = 16 };

int kiln__cuda_ptx_cubin(const char *ptx, const char *what, uint8_t **cubin, size_t *size) {
    const kiln__cu *cu = NULL;
    *cubin = NULL;
    *size = 0;
    int rc = kiln__cuda_init(&cu, NULL);
    if (rc) return kiln__err_prefix(rc, "%s", what);
    char log[4096] = "";
    int opt[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *val[2] = {log, (void *)(uintptr_t)sizeof log};
    CUlinkState st = NULL;
    CUresult r = cu->LinkCreate(2, opt, val, &st);
    if (r) return kiln__err_prefix(kiln__cuda_check(r, "cuLinkCreate"), "%s", what);
    r = cu->LinkAddData(st, CU_JIT_INPUT_PTX, (void *)ptx, strlen(ptx) + 1, "kernel.ptx", 0, NULL, NULL);
    void *img = NULL;
    size_t n = 0;
    if (!r) r = cu->LinkComplete(st, &img, &n);
    if (r) {
        rc = kiln__cuda_check(r, "linking the PTX (cuLinkAddData/cuLinkComplete)");
        rc = kiln__err_prefix(rc, "%s", what);
        if (log[0]) kiln__err(rc, "%s\nptxas: %s", kiln_errmsg(), log);
    } else if (!n || !(*cubin = kiln__malloc(n))) {
        rc = kiln__err(KILN_ENOMEM, "%s: out of memory for the cubin", what);
    } else {
        memcpy(*cubin, img, n); /* img belongs to the link state */
        *size = n;
    }
    cu->LinkDestroy(st);
    return rc;
}

int kiln__cuda_launch_func(CUfunction f, const char *name, const char *layer, void *stream,
                           const unsigned grid[3], const unsigned block[3], unsigned smem, void **args) {
    const kiln__cu *cu = NULL;
    const kiln__cuda_info *info = NULL;
    int rc = kiln__cuda_init(&cu, &info);
    if (rc) return kiln__err_prefix(rc, "kernel %s (layer '%s')", name, layer);
    if (!grid[0] || !grid[1] || !grid[2]) return 0; /* empty tensor: nothing to do */
    if (smem > 48 * 1024) { /* more than 48 KiB must be opted into; cheap to repeat */
        if (info->smem_optin && smem > (unsigned)info->smem_optin)
            return kiln__err(KILN_EDEVICE, "kernel %s (layer '%s'): %u bytes of shared memory requested, this GPU "
                             "allows %d", name, layer, smem, info->smem_optin);
        rc = kiln__cuda_check(cu->FuncSetAttribute(f, CU_FUNC_ATTR_MAX_DYN_SMEM, (int)smem),
                              "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
        if (rc) return kiln__err_prefix(rc, "kernel %s (layer '%s')", name, layer);
    }
    CUresult r = cu->LaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem,
                                  (CUstream)stream, args, NULL);
    if (r)
        return kiln__err_prefix(kiln__cuda_check(r, "cuLaunchKernel"),
                                "kernel %s (layer '%s', grid %ux%ux%u, block %ux%ux%u, %u B shared)", name, layer,
                                grid[0], grid[1], grid[2], block[0], block[1], block[2], smem);
    return 0;
}

/* ------------------------------------------------------------ plugin modules */

struct kiln_cuda_module {
    uint8_t key[32];
    CUmodule mod;
    struct { char *name; CUfunction f; } fn[MOD_FNS];
    struct kiln_cuda_module *next;
};
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kiln_cuda_module *g_mods;

KILN_API int kiln_cuda_module_get(const char *source, int lang, const char *what, kiln_cuda_module **m) {
    KILN__ARG(source && m, KILN_EINVAL);
    *m = NULL;
    if (!what) what = "CUDA module";
    if (lang != KILN_AOT_LANG_CUDA && lang != KILN_AOT_LANG_PTX)
        return kiln__err(KILN_EINVAL, "kiln_cuda_module_get(%s): lang %d is neither KILN_AOT_LANG_CUDA (1) nor "
                         "KILN_AOT_LANG_PTX (2)", what, lang);
    const kiln__cu *cu = NULL;
    const kiln__cuda_info *info = NULL;
    int rc = kiln__cuda_init(&cu, &info);
    if (rc) return kiln__err_prefix(rc, "%s", what);
    kiln__wbuf kb = {0};
    kiln__w_u8(&kb, (uint8_t)lang);
    kiln__w_bytes(&kb, source, strlen(source));
    if (kb.oom) return kiln__err(KILN_ENOMEM, "%s: out of memory", what);
    uint8_t key[32];
    kiln__sha256(kb.p, kb.n, key);
    kiln__free(kb.p);
    pthread_mutex_lock(&g_lock);
    struct kiln_cuda_module *x = g_mods;
    while (x && memcmp(x->key, key, 32)) x = x->next;
    if (!x) {
        char *ptx = NULL;
        size_t n = 0;
        if (lang == KILN_AOT_LANG_CUDA)
            rc = kiln__nvrtc_ptx(source, what, info->sm_major * 10 + info->sm_minor, &ptx, &n);
        x = rc ? NULL : kiln__calloc(1, sizeof *x);
        if (!rc && !x) rc = kiln__err(KILN_ENOMEM, "%s: out of memory", what);
        if (!rc) {
            rc = kiln__cuda_check(cu->ModuleLoadData(&x->mod, ptx ? ptx : source), "cuModuleLoadData");
            if (rc) {
                rc = kiln__err_prefix(rc, "%s", what);
                kiln__free(x);
                x = NULL;
            }
        }
        kiln__free(ptx);
        if (x) {
            memcpy(x->key, key, 32);
            x->next = g_mods;
            g_mods = x;
        }
    }
    pthread_mutex_unlock(&g_lock);
    *m = x;
    return rc;
}

KILN_API int kiln_cuda_launch(const kiln_call *c, kiln_cuda_module *m, const char *entry, const unsigned grid[3],
                              const unsigned block[3], unsigned shared_mem, void **args) {
    KILN__ARG(c && m && entry && grid && block, KILN_EINVAL);
    const char *layer = c->layer ? c->layer : "?";
    if (!c->exec || kiln_exec_device(c->exec) != KILN_DEVICE_CUDA)
        return kiln__err(KILN_EINVAL, "kiln_cuda_launch(%s, layer '%s'): not a CUDA call (call it from cuda_impl)",
                         entry, layer);
    const kiln__cu *cu = NULL;
    int rc = kiln__cuda_init(&cu, NULL);
    if (rc) return kiln__err_prefix(rc, "kernel %s (layer '%s')", entry, layer);
    CUfunction f = NULL;
    pthread_mutex_lock(&g_lock);
    int i = 0;
    while (i < MOD_FNS && m->fn[i].name && strcmp(m->fn[i].name, entry)) i++;
    if (i < MOD_FNS && m->fn[i].name) {
        f = m->fn[i].f;
    } else {
        rc = kiln__cuda_check(cu->ModuleGetFunction(&f, m->mod, entry), "cuModuleGetFunction");
        if (rc) rc = kiln__err_prefix(rc, "kernel %s (layer '%s'): not in its module (extern \"C\"?)", entry, layer);
        if (!rc && i < MOD_FNS && (m->fn[i].name = kiln__strdup(entry))) m->fn[i].f = f;
    }
    pthread_mutex_unlock(&g_lock);
    if (rc) return rc;
    return kiln__cuda_launch_func(f, entry, layer, kiln_exec_stream(c->exec), grid, block, shared_mem, args);
}
