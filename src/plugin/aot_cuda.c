/*
 * aot_cuda.c — AOT CUDA kernels: what kiln_quick_op.cuda_aot returns,
 * compiled at build, stored in the engine (section AOTCUDA), launched with
 * cuLaunchKernel at run time with no plugin library loaded.
 *
 * Build: CUDA C goes through NVRTC to PTX for the build GPU's compute
 * capability; PTX (given or compiled) has its .entry parameter list checked
 * against what kiln will pass (pointers for inputs and outputs, the typed
 * scalars, the hidden scratch pointers), then the driver's JIT linker makes
 * a cubin for the build GPU.  Both are stored.  Run: the cubin when this
 * GPU has the build GPU's architecture, else (or with $KILN_AOT_CUDA_PTX=1)
 * the PTX, which the driver compiles for this GPU.
 */
#include "kiln_int.h"
#include "core/bytes.h"
#include "device/cuda/cuda_int.h"
#include "plugin/aot_cuda.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

enum { MAX_PTRS = 2 * KILN_MAX_IO, SCRATCH_ALIGN = 256 };

void kiln__aot_cuda_free(kiln__aot_cuda *k) {
    if (!k) return;
    if (k->module) {
        const kiln__cu *cu = NULL;
        if (kiln__cuda_init(&cu, NULL) == 0) cu->ModuleUnload((CUmodule)k->module);
    }
    kiln__free(k->entry);
    kiln__free(k->ptx);
    kiln__free(k->cubin);
    memset(k, 0, sizeof *k);
}

/* ------------------------------------------------------------ PTX signature */

/* What kiln passes as parameter i: a pointer, or scalar type t. */
static const char *param_name(const kiln__aot_cuda *k, int i, char *buf, size_t n) {
    if (i < k->nptr) snprintf(buf, n, "a pointer (input/output %d)", i);
    else if (i < k->nptr + k->nscalars)
        snprintf(buf, n, "%s (scalar %d)", kiln__aot_scalar_name(k->scalar_types[i - k->nptr]), i - k->nptr);
    else snprintf(buf, n, "a pointer (hidden scratch %d)", i - k->nptr - k->nscalars);
    return buf;
}

/* Does PTX parameter type `ty` (".u64", ".f32", ...) take what kiln passes? */
static int param_fits(const kiln__aot_cuda *k, int i, const char *ty) {
    int t = i >= k->nptr && i < k->nptr + k->nscalars ? k->scalar_types[i - k->nptr] : 0;
    static const char *const w64[] = {".u64", ".s64", ".b64"};
    static const char *const w32[] = {".u32", ".s32", ".b32"};
    if (t == KILN_SCALAR_F32) return !strcmp(ty, ".f32") || !strcmp(ty, ".b32");
    const char *const *ok = t == KILN_SCALAR_I32 ? w32 : w64;
    for (int j = 0; j < 3; j++)
        if (!strcmp(ty, ok[j])) return 1;
    return 0;
}

/* Find `.entry <name>(` in the PTX and check its parameter list. */
static int ptx_check(const kiln__aot_cuda *k, const char *id) {
    const char *p = k->ptx, *params = NULL;
    size_t el = strlen(k->entry);
    while ((p = strstr(p, ".entry")) != NULL) {
        p += 6;
        const char *q = p;
        while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r') q++;
        if (strncmp(q, k->entry, el)) continue;
        q += el;
        while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r') q++;
        if (*q == '(') {
            params = q + 1;
            break;
        }
    }
    if (!params)
        return kiln__err(KILN_EINVAL, "%s: AOT CUDA kernel %s: the PTX has no .entry %s (for CUDA C: declare it "
                         "extern \"C\" __global__)", id, k->entry, k->entry);
    int want = k->nptr + k->nscalars + k->nscratch, got = 0;
    char b[96];
    for (const char *q = params;;) {
        while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r' || *q == ',') q++;
        if (*q == ')' || !*q) break;
        if (strncmp(q, ".param", 6))
            return kiln__err(KILN_EINVAL, "%s: AOT CUDA kernel %s: cannot read parameter %d of its PTX", id,
                             k->entry, got);
        q += 6;
        while (*q == ' ' || *q == '\t') q++;
        char ty[16];
        int n = 0;
        while (q[n] && q[n] != ' ' && q[n] != '\t' && n < 15) n++;
        memcpy(ty, q, (size_t)n);
        ty[n] = 0;
        if (got >= want)
            return kiln__err(KILN_EINVAL, "%s: AOT CUDA kernel %s takes more than the %d parameters kiln passes (%d "
                             "pointers for inputs and outputs, %d scalars, %d hidden scratch pointers)", id,
                             k->entry, want, k->nptr, k->nscalars, k->nscratch);
        if (!param_fits(k, got, ty))
            return kiln__err(KILN_EINVAL, "%s: AOT CUDA kernel %s: parameter %d is %s%s, kiln passes %s", id, k->entry,
                             got, ty, !strcmp(ty, ".align") ? " (a struct by value)" : "",
                             param_name(k, got, b, sizeof b));
        got++;
        while (*q && *q != ',' && *q != ')') q++;
    }
    if (got != want)
        return kiln__err(KILN_EINVAL, "%s: AOT CUDA kernel %s takes %d parameters, kiln passes %d (%d pointers for "
                         "inputs and outputs, %d scalars, %d hidden scratch pointers)", id, k->entry, got, want,
                         k->nptr, k->nscalars, k->nscratch);
    return 0;
}

/* ------------------------------------------------------------ build */

/* The compute capability to compile for: the build GPU's, else (a build on
 * the fake device, tests without a GPU) the oldest CUDA 13 supports. */
static int build_sm(int *have_gpu) {
    const kiln__cuda_info *info = NULL;
    *have_gpu = !kiln__cuda_fake_device() && kiln__cuda_init(NULL, &info) == 0;
    return *have_gpu ? info->sm_major * 10 + info->sm_minor : 75;
}

/* NVRTC's PTX for CUDA C `source`, through the compile cache directory
 * (aot-cuda-<sha256>.ptx): the key is kiln's version, the target
 * compute_<sm> and the source — kiln__nvrtc_ptx's other options are
 * constants of this kiln version — so a rebuild of the same kernel skips
 * NVRTC (~0.1-1 s each).  Any cache failure (no directory, unreadable or
 * unwritable file) just compiles; a cached file is PTX the driver checks
 * when it loads it. */
static int nvrtc_ptx_cached(const char *source, const char *what, int sm, char **ptx, size_t *n) {
    char dir[4096], path[4300] = "";
    kiln__wbuf kb = {0};
    kiln__w_str(&kb, "kiln nvrtc ptx", 1);
    kiln__w_u32(&kb, (KILN_VERSION_MAJOR << 16) | (KILN_VERSION_MINOR << 8) | KILN_VERSION_PATCH);
    kiln__w_u32(&kb, (uint32_t)sm);
    kiln__w_bytes(&kb, source, strlen(source));
    if (!kb.oom && kiln__cache_dir(dir, sizeof dir) == 0) {
        uint8_t key[32];
        char hex[65];
        kiln__sha256(kb.p, kb.n, key);
        for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", key[i]);
        snprintf(path, sizeof path, "%s/aot-cuda-%s.ptx", dir, hex);
        if (kiln__read_file(path, ptx, n) == 0 && *n) {
            kiln__free(kb.p);
            kiln__log(KILN_LOG_VERBOSE, "%s: NVRTC cache hit %s", what, path);
            return 0;
        }
        kiln__free(*ptx);
        *ptx = NULL;
    }
    kiln__free(kb.p);
    int rc = kiln__nvrtc_ptx(source, what, sm, ptx, n);
    if (!rc && path[0] && kiln__write_atomic(path, *ptx, *n) != 0)
        kiln__log(KILN_LOG_VERBOSE, "%s: NVRTC cache: cannot write %s", what, path);
    return rc;
}

int kiln__aot_cuda_from_kernel(const kiln__op *op, const kiln_aot_kernel *k, int nptr, kiln__aot_node_fn node_of,
                               void *ud, kiln__aot_cuda *out) {
    KILN__ASSERT(op && k && node_of && out);
    memset(out, 0, sizeof *out);
    char id[256];
    snprintf(id, sizeof id, "op %s::%s v%d", op->ns, op->name, op->version);
    if (k->lang != KILN_AOT_LANG_CUDA && k->lang != KILN_AOT_LANG_PTX)
        return kiln__err(KILN_EINVAL, "%s: cuda_aot returned lang %d, expected KILN_AOT_LANG_CUDA (1) or "
                         "KILN_AOT_LANG_PTX (2)", id, k->lang);
    int rc = kiln__aot_check(op, k);
    if (rc) return rc;
    if (k->nscratch < 0 || k->nscratch > KILN_AOT_MAX_SCRATCH)
        return kiln__err(KILN_EINVAL, "%s: AOT CUDA kernel %s: nscratch %d, expected 0..%d", id, k->entry,
                         k->nscratch, KILN_AOT_MAX_SCRATCH);
    if (nptr > MAX_PTRS) return kiln__err(KILN_EINVAL, "%s: more than %d inputs and outputs", id, MAX_PTRS);
    out->lang = (uint8_t)k->lang;
    out->nptr = nptr;
    out->nscalars = k->nscalars;
    out->nscratch = k->nscratch;
    for (int i = 0; i < k->nscratch; i++) out->scratch_bytes[i] = k->scratch_bytes[i];
    const kiln_expr *dims[7] = {k->grid[0], k->grid[1], k->grid[2], k->block[0], k->block[1], k->block[2],
                                k->shared_mem};
    int32_t *slot[7] = {&out->grid[0], &out->grid[1], &out->grid[2], &out->block[0], &out->block[1], &out->block[2],
                        &out->smem};
    static const char *const dname[7] = {"grid x", "grid y", "grid z", "block x", "block y", "block z",
                                         "shared_mem"};
    /* -1 marks "not given" (the default); node_of's failures are errors */
    for (int i = 0; i < 7; i++) {
        *slot[i] = dims[i] ? node_of(ud, dims[i]) : 0;
        if (*slot[i] < 0) return kiln__err_prefix(*slot[i], "%s: AOT CUDA kernel %s: %s", id, k->entry, dname[i]);
        if (!dims[i]) *slot[i] = -1;
    }
    for (int i = 0; i < k->nscalars; i++) {
        out->scalar_types[i] = (uint8_t)k->scalar_types[i];
        out->fscalars[i] = k->fscalars[i];
        out->scalars[i] = k->scalars[i] ? node_of(ud, k->scalars[i]) : 0;
        if (out->scalars[i] < 0)
            return kiln__err_prefix(out->scalars[i], "%s: AOT CUDA kernel %s: scalar %d", id, k->entry, i);
        if (!k->scalars[i]) out->scalars[i] = -1;
    }
    if (!(out->entry = kiln__strdup(k->entry))) return kiln__err(KILN_ENOMEM, "out of memory");
    int gpu = 0, sm = build_sm(&gpu);
    char what[300];
    snprintf(what, sizeof what, "%s: AOT CUDA kernel %s", id, k->entry);
    size_t n = 0;
    if (k->lang == KILN_AOT_LANG_CUDA) {
        rc = nvrtc_ptx_cached(k->source, what, sm, &out->ptx, &n);
    } else {
        n = strlen(k->source);
        rc = (out->ptx = kiln__strdup(k->source)) ? 0 : kiln__err(KILN_ENOMEM, "out of memory");
    }
    out->ptx_size = n;
    if (!rc) rc = ptx_check(out, id);
    /* The cubin for the build GPU; a build without one (the fake device)
     * stores the PTX alone. */
    if (!rc && gpu) {
        size_t cn = 0;
        rc = kiln__cuda_ptx_cubin(out->ptx, what, &out->cubin, &cn);
        out->cubin_size = cn;
        out->sm = sm;
    }
    if (rc) {
        kiln__aot_cuda_free(out);
        return rc;
    }
    kiln__log(KILN_LOG_VERBOSE, "%s: %s, PTX %zu bytes, cubin %llu bytes for sm_%d", what,
              k->lang == KILN_AOT_LANG_CUDA ? "CUDA C compiled with NVRTC" : "PTX", n,
              (unsigned long long)out->cubin_size, (int)out->sm);
    return 0;
}

/* ------------------------------------------------------------ run */

static pthread_mutex_t g_load = PTHREAD_MUTEX_INITIALIZER;

int kiln__aot_cuda_load(kiln__aot_cuda *k) {
    KILN__ASSERT(k);
    if (__atomic_load_n(&k->fn, __ATOMIC_ACQUIRE)) return 0;
    const kiln__cu *cu = NULL;
    const kiln__cuda_info *info = NULL;
    int rc = kiln__cuda_init(&cu, &info);
    if (rc) return kiln__err_prefix(rc, "AOT CUDA kernel %s", k->entry);
    pthread_mutex_lock(&g_load);
    if (!k->fn) {
        const char *force = getenv("KILN_AOT_CUDA_PTX");
        int here = info->sm_major * 10 + info->sm_minor;
        k->from_ptx = !k->cubin_size || k->sm != here || (force && *force && strcmp(force, "0"));
        CUmodule m = NULL;
        rc = kiln__cuda_check(cu->ModuleLoadData(&m, k->from_ptx ? (const void *)k->ptx : k->cubin),
                              k->from_ptx ? "cuModuleLoadData (PTX)" : "cuModuleLoadData (cubin)");
        CUfunction f = NULL;
        if (!rc) {
            rc = kiln__cuda_check(cu->ModuleGetFunction(&f, m, k->entry), "cuModuleGetFunction");
            if (rc) cu->ModuleUnload(m);
        }
        if (rc) {
            rc = kiln__err_prefix(rc, "AOT CUDA kernel %s (built for sm_%d, this GPU is sm_%d)", k->entry,
                                  (int)k->sm, here);
        } else {
            k->module = m;
            kiln__log(KILN_LOG_VERBOSE, "AOT CUDA kernel %s loaded from its %s", k->entry,
                      k->from_ptx ? "PTX" : "cubin");
            __atomic_store_n(&k->fn, (void *)f, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&g_load);
    return rc;
}

static int64_t node_or(const int64_t *vals, int32_t node, int64_t dflt) { return node < 0 ? dflt : vals[node]; }

/* Grid and block at these values: 0 when valid; *empty when a grid dim is 0. */
static int launch_dims(const kiln__aot_cuda *k, const int64_t *vals, unsigned grid[3], unsigned block[3],
                       unsigned *smem) {
    static const int64_t gmax[3] = {INT32_MAX, 65535, 65535};
    for (int d = 0; d < 3; d++) {
        int64_t g = node_or(vals, k->grid[d], 1), b = node_or(vals, k->block[d], 1);
        if (g < 0 || g > gmax[d] || b < 1 || b > 1024)
            return kiln__err(KILN_EKERNEL, "AOT CUDA kernel %s: grid %c = %lld (0..%lld), block %c = %lld (1..1024)",
                             k->entry, "xyz"[d], (long long)g, (long long)gmax[d], "xyz"[d], (long long)b);
        grid[d] = (unsigned)g;
        block[d] = (unsigned)b;
    }
    int64_t s = node_or(vals, k->smem, 0);
    if (s < 0 || s > INT32_MAX)
        return kiln__err(KILN_EKERNEL, "AOT CUDA kernel %s: shared memory %lld bytes", k->entry, (long long)s);
    *smem = (unsigned)s;
    return 0;
}

int kiln__aot_cuda_scratch(const kiln__aot_cuda *k, const int64_t *vals, size_t *bytes) {
    *bytes = 0;
    if (!k->nscratch) return 0;
    unsigned g[3], b[3], s;
    int rc = launch_dims(k, vals, g, b, &s);
    if (rc) return rc;
    uint64_t blocks = (uint64_t)g[0] * g[1] * g[2], total = 0;
    for (int i = 0; i < k->nscratch; i++) {
        if (k->scratch_bytes[i] && blocks > UINT64_MAX / 2 / k->scratch_bytes[i])
            return kiln__err(KILN_EKERNEL, "AOT CUDA kernel %s: scratch %d overflows", k->entry, i);
        total += (k->scratch_bytes[i] * blocks + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN * SCRATCH_ALIGN;
    }
    *bytes = (size_t)total;
    return 0;
}

int kiln__aot_cuda_launch(kiln__aot_cuda *k, const kiln_call *c, const int64_t *vals) {
    KILN__ASSERT(k && c && vals);
    int rc = kiln__aot_cuda_load(k);
    if (rc) return rc;
    if (c->nin + c->nout != k->nptr)
        return kiln__err(KILN_EINTERNAL, "AOT CUDA kernel %s: %d pointers, layer has %d", k->entry, (int)k->nptr,
                         c->nin + c->nout);
    unsigned grid[3], block[3], smem;
    if ((rc = launch_dims(k, vals, grid, block, &smem))) return rc;
    union { void *p; int32_t i32; int64_t i64; float f32; } v[MAX_PTRS + KILN_MAX_SCALARS + KILN_AOT_MAX_SCRATCH];
    void *args[MAX_PTRS + KILN_MAX_SCALARS + KILN_AOT_MAX_SCRATCH];
    int n = 0;
    for (int i = 0; i < c->nin; i++) v[n++].p = c->in[i].data;
    for (int i = 0; i < c->nout; i++) v[n++].p = c->out[i].data;
    for (int i = 0; i < k->nscalars; i++, n++) {
        int64_t x = node_or(vals, k->scalars[i], 0);
        if (k->scalar_types[i] == KILN_SCALAR_F32) {
            v[n].f32 = k->scalars[i] >= 0 ? (float)x : (float)k->fscalars[i];
        } else if (k->scalar_types[i] == KILN_SCALAR_I32) {
            if (x < INT32_MIN || x > INT32_MAX)
                return kiln__err(KILN_EKERNEL, "AOT CUDA kernel %s: i32 scalar %d is %lld, out of range", k->entry,
                                 i, (long long)x);
            v[n].i32 = (int32_t)x;
        } else {
            v[n].i64 = x;
        }
    }
    uint64_t blocks = (uint64_t)grid[0] * grid[1] * grid[2];
    size_t need = 0;
    if (k->nscratch && (rc = kiln__aot_cuda_scratch(k, vals, &need))) return rc;
    if (need > c->workspace_size) /* e.g. a grid that grew with a size tensor after the plan */
        return kiln__err(KILN_EKERNEL, "AOT CUDA kernel %s: scratch needs %zu bytes at grid %ux%ux%u, the layer's "
                         "workspace has %zu", k->entry, need, grid[0], grid[1], grid[2], c->workspace_size);
    uint8_t *ws = c->workspace;
    for (int i = 0; i < k->nscratch; i++) {
        v[n++].p = k->scratch_bytes[i] ? ws : NULL;
        ws += (k->scratch_bytes[i] * blocks + SCRATCH_ALIGN - 1) / SCRATCH_ALIGN * SCRATCH_ALIGN;
    }
    for (int i = 0; i < n; i++) args[i] = &v[i];
    return kiln__cuda_launch_func((CUfunction)__atomic_load_n(&k->fn, __ATOMIC_ACQUIRE), k->entry,
                                  c->layer ? c->layer : "?", kiln_exec_stream(c->exec), grid, block, smem, args);
}

/* ------------------------------------------------------------ engine section AOTCUDA */

/* Section AOTCUDA: u32 count, then per kernel a u64 record size and:
 *   str entry (u32 length); u8 lang; i32 sm (0: no cubin); i32 pointer count;
 *   i32 grid[3], block[3], shared_mem (nodes, -1: 1 / 1 / 0);
 *   u32 nscalars, per scalar { u8 type; i32 node (-1: the f64); f64 value };
 *   u32 nscratch, u64 bytes per block each;
 *   u8[32] SHA-256 + u64 size + PTX text; u8[32] SHA-256 + u64 size + cubin. */
static void w_blob(kiln__wbuf *w, const void *p, uint64_t n) {
    uint8_t h[32];
    kiln__sha256(p ? p : "", (size_t)n, h);
    kiln__w_bytes(w, h, 32);
    kiln__w_u64(w, n);
    kiln__w_bytes(w, p, (size_t)n);
}

static void write_one(kiln__wbuf *w, const kiln__aot_cuda *k) {
    kiln__w_str(w, k->entry, 4);
    kiln__w_u8(w, k->lang);
    kiln__w_i32(w, k->sm);
    kiln__w_i32(w, k->nptr);
    for (int d = 0; d < 3; d++) kiln__w_i32(w, k->grid[d]);
    for (int d = 0; d < 3; d++) kiln__w_i32(w, k->block[d]);
    kiln__w_i32(w, k->smem);
    kiln__w_u32(w, (uint32_t)k->nscalars);
    for (int i = 0; i < k->nscalars; i++) {
        kiln__w_u8(w, k->scalar_types[i]);
        kiln__w_i32(w, k->scalars[i]);
        kiln__w_f64(w, k->fscalars[i]);
    }
    kiln__w_u32(w, (uint32_t)k->nscratch);
    for (int i = 0; i < k->nscratch; i++) kiln__w_u64(w, k->scratch_bytes[i]);
    w_blob(w, k->ptx, k->ptx_size);
    w_blob(w, k->cubin, k->cubin_size);
}

void kiln__aot_cuda_write_section(const kiln_engine *e, kiln__wbuf *w) {
    if (e->nacu <= 0) return;
    kiln__w_u32(w, (uint32_t)e->nacu);
    for (int32_t i = 0; i < e->nacu; i++) {
        kiln__wbuf one;
        kiln__w_init(&one);
        write_one(&one, &e->acu[i]);
        kiln__w_u64(w, one.n);
        kiln__w_bytes(w, one.p, one.n);
        if (one.oom) w->oom = 1;
        kiln__free(one.p);
    }
}

static int node_in(kiln__rbuf *r, int32_t v, int32_t nnodes, const char *field, size_t at) {
    if (v >= -1 && v < nnodes) return 0;
    return kiln__r_fail_at(r, at, KILN_EFORMAT, "%s node %d is out of range [-1, %d)", field, (int)v, (int)nnodes);
}

/* A checksummed blob: *p a copy (text: NUL-terminated, no NUL inside). */
static int r_blob(kiln__rbuf *r, const char *field, int text, int may_be_empty, uint8_t **p, uint64_t *n) {
    const uint8_t *want = kiln__r_span(r, 32, field);
    size_t at = r->at;
    uint64_t len = kiln__r_u64(r, field);
    if (r->err) return r->err;
    if ((!len && !may_be_empty) || len > kiln__r_left(r))
        return kiln__r_fail_at(r, at, KILN_EFORMAT, "%s size %llu (%zu bytes left)", field, (unsigned long long)len,
                               kiln__r_left(r));
    const uint8_t *src = kiln__r_span(r, len, field);
    if (r->err) return r->err;
    uint8_t got[32];
    kiln__sha256(src ? (const void *)src : "", (size_t)len, got);
    if (memcmp(got, want, 32))
        return kiln__r_fail_at(r, at, KILN_ECHECKSUM, "the %s (%llu bytes) does not match the SHA-256 stored beside "
                               "it: the file is damaged", field, (unsigned long long)len);
    if (text && len && memchr(src, 0, (size_t)len))
        return kiln__r_fail_at(r, at, KILN_EFORMAT, "the %s holds a NUL byte", field);
    if (!len) return 0;
    if (!(*p = kiln__malloc((size_t)len + 1))) return kiln__err(KILN_ENOMEM, "out of memory reading the %s", field);
    memcpy(*p, src, (size_t)len);
    (*p)[len] = 0;
    *n = len;
    return 0;
}

static int read_one(kiln__aot_cuda *k, kiln__rbuf *r, int32_t nnodes) {
    if (!(k->entry = kiln__r_str(r, 4, 4096, "entry"))) return r->err ? r->err : kiln__r_fail(r, KILN_EFORMAT, "empty entry");
    size_t at = r->at;
    k->lang = kiln__r_u8(r, "lang");
    if (!r->err && k->lang != KILN_AOT_LANG_CUDA && k->lang != KILN_AOT_LANG_PTX)
        return kiln__r_fail_at(r, at, KILN_EFORMAT, "lang %u is not CUDA (1) or PTX (2)", k->lang);
    at = r->at;
    k->sm = kiln__r_i32(r, "sm");
    if (!kiln__r_check(r, k->sm, 0, 1000, "sm", at)) return r->err;
    at = r->at;
    k->nptr = kiln__r_i32(r, "pointer count");
    if (!kiln__r_check(r, k->nptr, 0, MAX_PTRS + 1, "pointer count", at)) return r->err;
    int32_t *nodes[7] = {&k->grid[0], &k->grid[1], &k->grid[2], &k->block[0], &k->block[1], &k->block[2], &k->smem};
    for (int i = 0; i < 7; i++) {
        at = r->at;
        *nodes[i] = kiln__r_i32(r, "launch dim");
        if (r->err || node_in(r, *nodes[i], nnodes, i < 3 ? "grid" : i < 6 ? "block" : "shared_mem", at)) return r->err;
    }
    at = r->at;
    uint32_t ns = kiln__r_u32(r, "scalar count");
    if (!kiln__r_check(r, ns, 0, KILN_MAX_SCALARS + 1, "scalar count", at)) return r->err;
    k->nscalars = (int32_t)ns;
    for (int i = 0; i < k->nscalars; i++) {
        at = r->at;
        uint8_t t = kiln__r_u8(r, "scalar type");
        if (!r->err && t != KILN_SCALAR_I32 && t != KILN_SCALAR_I64 && t != KILN_SCALAR_F32)
            return kiln__r_fail_at(r, at, KILN_EFORMAT, "scalar %d type %u is not i32/i64/f32", i, t);
        k->scalar_types[i] = t;
        at = r->at;
        k->scalars[i] = kiln__r_i32(r, "scalar node");
        if (r->err || node_in(r, k->scalars[i], nnodes, "scalar", at)) return r->err;
        if (t != KILN_SCALAR_F32 && k->scalars[i] < 0)
            return kiln__r_fail_at(r, at, KILN_EFORMAT, "integer scalar %d has no node", i);
        k->fscalars[i] = kiln__r_f64(r, "scalar value");
    }
    at = r->at;
    uint32_t nsc = kiln__r_u32(r, "scratch count");
    if (!kiln__r_check(r, nsc, 0, KILN_AOT_MAX_SCRATCH + 1, "scratch count", at)) return r->err;
    k->nscratch = (int32_t)nsc;
    for (int i = 0; i < k->nscratch; i++) {
        at = r->at;
        k->scratch_bytes[i] = kiln__r_u64(r, "scratch bytes");
        if (!kiln__r_check(r, (int64_t)(k->scratch_bytes[i] >> 1), 0, (int64_t)1 << 39, "scratch bytes", at))
            return r->err;
    }
    int rc = r_blob(r, "PTX", 1, 0, (uint8_t **)&k->ptx, &k->ptx_size);
    if (!rc) rc = r_blob(r, "cubin", 0, 1, &k->cubin, &k->cubin_size);
    if (!rc && !k->cubin_size != !k->sm)
        rc = kiln__r_fail(r, KILN_EFORMAT, "sm %d with a cubin of %llu bytes (a cubin needs its sm)", (int)k->sm,
                          (unsigned long long)k->cubin_size);
    return rc ? rc : kiln__r_end(r);
}

int kiln__aot_cuda_parse_section(kiln_engine *e, kiln__rbuf *r) {
    uint32_t n = kiln__r_count(r, 8, 1u << 20, "AOT CUDA kernel count");
    if (r->err) return r->err;
    if (n && !(e->acu = kiln__calloc(n, sizeof *e->acu)))
        return kiln__err(KILN_ENOMEM, "out of memory reading AOT CUDA kernels");
    for (uint32_t i = 0; i < n && !r->err; i++) {
        size_t at = r->at;
        uint64_t sz = kiln__r_u64(r, "record size");
        if (r->err) break;
        if (sz > kiln__r_left(r)) {
            kiln__r_fail_at(r, at, KILN_EFORMAT, "AOT CUDA record %u of %llu bytes, %zu left", i,
                            (unsigned long long)sz, kiln__r_left(r));
            break;
        }
        kiln__rbuf one;
        kiln__r_init(&one, r->p + r->at, (size_t)sz, "AOT CUDA kernel record");
        one.base = r->base + r->at;
        one.unit = r->unit;
        e->nacu = (int32_t)i + 1; /* freed by destroy from here on */
        int rc = read_one(&e->acu[i], &one, e->nnodes);
        if (rc) return kiln__err_prefix(rc, "section AOTCUDA: kernel %u", i);
        r->at += (size_t)sz;
    }
    return r->err ? r->err : kiln__r_end(r);
}
