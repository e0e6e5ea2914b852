/*
 * nvrtc.c — NVRTC (the CUDA runtime compiler), loaded with dlopen at first
 * use like the driver: kiln builds and runs where the toolkit is absent,
 * and only compiling CUDA C source (AOT CUDA kernels, kiln_cuda_module_get)
 * needs it.  $KILN_NVRTC names the library; else the unversioned name,
 * the CUDA 13 and 12 sonames, then the toolkit's default directory.
 */
#include "device/cuda/cuda_int.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct nvrtc_prog *nvrtcProgram;
static struct {
    int (*Create)(nvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *);
    int (*Compile)(nvrtcProgram, int, const char *const *);
    int (*PTXSize)(nvrtcProgram, size_t *);
    int (*PTX)(nvrtcProgram, char *);
    int (*LogSize)(nvrtcProgram, size_t *);
    int (*Log)(nvrtcProgram, char *);
    int (*Destroy)(nvrtcProgram *);
    const char *(*ErrorString)(int);
} g_nv;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char g_why[600];

static void load_once(void) {
    const char *names[] = {getenv("KILN_NVRTC"), "libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                           "/usr/local/cuda/lib64/libnvrtc.so"};
    void *h = NULL;
    const char *err = "not found";
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++) {
        if (!names[i] || !*names[i]) continue;
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h && dlerror()) err = names[i] == names[0] ? "$KILN_NVRTC does not load" : "not found";
    }
    if (!h) {
        snprintf(g_why, sizeof g_why,
                 "cannot load NVRTC (libnvrtc.so, libnvrtc.so.13/.12: %s); install the CUDA toolkit's NVRTC or "
                 "set KILN_NVRTC to its path", err);
        return;
    }
    const kiln__dl_sym need[] = {
        {(void **)&g_nv.Create, "nvrtcCreateProgram", NULL},   {(void **)&g_nv.Compile, "nvrtcCompileProgram", NULL},
        {(void **)&g_nv.PTXSize, "nvrtcGetPTXSize", NULL},     {(void **)&g_nv.PTX, "nvrtcGetPTX", NULL},
        {(void **)&g_nv.LogSize, "nvrtcGetProgramLogSize", NULL}, {(void **)&g_nv.Log, "nvrtcGetProgramLog", NULL},
        {(void **)&g_nv.Destroy, "nvrtcDestroyProgram", NULL}, {(void **)&g_nv.ErrorString, "nvrtcGetErrorString", NULL},
    };
    const char *miss = kiln__dl_resolve(h, need, sizeof need / sizeof need[0]);
    if (miss) {
        snprintf(g_why, sizeof g_why, "NVRTC library lacks %s", miss);
        g_nv.Create = NULL;
        return;
    }
}

int kiln__nvrtc_ptx(const char *source, const char *what, int sm, char **ptx, size_t *n) {
    KILN__ASSERT(source && ptx && n);
    *ptx = NULL;
    *n = 0;
    pthread_once(&g_once, load_once);
    if (!g_nv.Create || !g_nv.Compile) return kiln__err(KILN_EDEVICE, "%s: %s", what, g_why);
    char arch[64];
    snprintf(arch, sizeof arch, "--gpu-architecture=compute_%d", sm);
    const char *opts[] = {arch, "-default-device"};
    nvrtcProgram p = NULL;
    int r = g_nv.Create(&p, source, "kernel.cu", 0, NULL, NULL);
    if (r) return kiln__err(KILN_EDEVICE, "%s: nvrtcCreateProgram: %s", what, g_nv.ErrorString(r));
    r = g_nv.Compile(p, 2, opts);
    int rc = 0;
    if (r) {
        size_t ls = 0;
        char *log = NULL;
        if (!g_nv.LogSize(p, &ls) && ls && (log = kiln__malloc(ls + 1)) && !g_nv.Log(p, log)) log[ls] = 0;
        rc = kiln__err(KILN_ECOMPILE, "%s: NVRTC (%s) failed: %s\n%s", what, arch, g_nv.ErrorString(r),
                       log ? log : "(no log)");
        kiln__free(log);
    } else {
        size_t sz = 0;
        char *out = NULL;
        if ((r = g_nv.PTXSize(p, &sz)) || !sz || !(out = kiln__malloc(sz + 1)) || (r = g_nv.PTX(p, out))) {
            kiln__free(out);
            rc = r ? kiln__err(KILN_EDEVICE, "%s: nvrtcGetPTX: %s", what, g_nv.ErrorString(r))
                   : kiln__err(KILN_ENOMEM, "%s: out of memory for the PTX", what);
        } else {
            out[sz] = 0;
            *ptx = out;
            *n = strlen(out);
        }
    }
    g_nv.Destroy(&p);
    return rc;
}
