/*
 * library.c — loading plugin libraries.
 *
 * A plugin library registers its ops from constructors that run inside
 * dlopen.  Registration failures there cannot return to anyone, so the
 * registry remembers the first one while we load (registry_int.h) and
 * kiln_registry_load_library reports it.  Libraries are tracked by real
 * path: loading one twice is a no-op that returns the first load's result.
 */
#include "registry_int.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct loaded_lib {
    char *path; /* realpath */
    void *handle;
    int status; /* result of the first load */
    char *msg;
} loaded_lib;

/* Recursive: a plugin's constructor may itself load a library. */
static pthread_mutex_t g_lib_mu = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static loaded_lib *g_libs;
static int g_nlibs, g_cap_libs;

/* Index of the library loaded from real path rp, or -1 (lock held). */
static int find_lib(const char *rp) {
    for (int i = 0; i < g_nlibs; i++)
        if (strcmp(g_libs[i].path, rp) == 0) return i;
    return -1;
}

/* Number of registered ops. */
static int count_ops(void) {
    int n = 0;
    while (kiln__registry_at(n)) n++;
    return n;
}

/* The result of an earlier load of the same library (lock held). */
static int repeat_status(int i) {
    int st = g_libs[i].status;
    if (st) kiln__err(st, "%s", g_libs[i].msg ? g_libs[i].msg : "plugin library failed to load");
    return st;
}

int kiln_registry_load_library(const char *path) {
    if (!path || !*path) return kiln__err(KILN_EINVAL, "kiln_registry_load_library: empty path");
    /* A bare file name ("libmyops.so") is searched like dlopen does; any
     * path with a '/' must exist. */
    char *rp = realpath(path, NULL);
    if (!rp && strchr(path, '/'))
        return kiln__err(KILN_EIO, "plugin library %s: %s", path, strerror(errno));
    /* One load at a time: two threads loading the same library must not
     * both record it. */
    pthread_mutex_lock(&g_lib_mu);
    int i = rp ? find_lib(rp) : -1;
    if (i >= 0) {
        int st = repeat_status(i);
        pthread_mutex_unlock(&g_lib_mu);
        free(rp);
        return st;
    }
    /* A library already mapped (linked into the program, or opened
     * outside kiln) ran its constructors before: it registers nothing now. */
    void *pre = dlopen(rp ? rp : path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (pre) dlclose(pre);
    int nops0 = count_ops();
    kiln__registry_loading_begin();
    dlerror();
    void *h = dlopen(rp ? rp : path, RTLD_NOW | RTLD_LOCAL);
    char msg[1024];
    int st = kiln__registry_loading_end(msg, sizeof msg);
    if (!h) {
        const char *e = dlerror();
        pthread_mutex_unlock(&g_lib_mu);
        int rc = kiln__err(KILN_EIO, "plugin library %s: dlopen failed: %s", path, e ? e : "unknown error");
        free(rp);
        return rc;
    }
    if (!rp) {
        struct link_map *lm = NULL;
        if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
            rp = realpath(lm->l_name, NULL);
        if (!rp) rp = strdup(path);
        if (!rp) {
            pthread_mutex_unlock(&g_lib_mu);
            return kiln__err(KILN_ENOMEM, "out of memory");
        }
        if ((i = find_lib(rp)) >= 0) { /* loaded before under its full path */
            st = repeat_status(i);
            pthread_mutex_unlock(&g_lib_mu);
            free(rp);
            return st;
        }
    }
    if (st) kiln__err(st, "plugin library %s: %s", path, msg);
    else if (!pre && count_ops() == nops0)
        st = kiln__err(KILN_EINVAL,
                       "plugin library %s: loaded, but it registered no ops (expected a kiln plugin "
                       "library whose ops register with KILN_OP / KILN_PLUGIN)",
                       path);
    if (g_nlibs == g_cap_libs) {
        int nc = g_cap_libs ? g_cap_libs * 2 : 16;
        loaded_lib *n = kiln__realloc(g_libs, sizeof *n * (size_t)nc);
        if (!n) {
            pthread_mutex_unlock(&g_lib_mu);
            free(rp);
            return kiln__err(KILN_ENOMEM, "out of memory");
        }
        g_libs = n;
        g_cap_libs = nc;
    }
    loaded_lib *l = &g_libs[g_nlibs++];
    l->path = kiln__strdup(rp);
    l->handle = h; /* never closed: registered ops point into it */
    l->status = st;
    l->msg = st ? kiln__strdup(kiln_errmsg()) : NULL;
    int oom = !l->path;
    pthread_mutex_unlock(&g_lib_mu);
    free(rp);
    if (oom) return kiln__err(KILN_ENOMEM, "out of memory");
    if (!st) kiln__log(KILN_LOG_INFO, "loaded plugin library %s", path);
    return st;
}
