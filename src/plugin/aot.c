/*
 * aot.c — ahead-of-time kernels: compiled at build time, embedded in the
 * engine, launched at run time with no plugin library loaded.
 *
 * An op's `aot` function returns C source, an entry symbol, the number of
 * work items (`extent`) and typed scalar arguments, all as symbolic
 * expressions.  The builder checks them against the op's declared
 * `aot_signature` (count and types: the AOT contract is checked at build,
 * never discovered at run), compiles the source with the system compiler
 * into a self-contained shared object (-z defs: it may use libc and libm,
 * nothing else) and stores the bytes with the expressions mapped to engine
 * nodes.  At run time the bytes are loaded from memory (so_load.c) and the
 * entry is called as entry(args, ith, nth) on the context's thread pool.
 */
#include "kiln_int.h"
#include "core/bytes.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

typedef void (*aot_entry_fn)(const kiln_aot_args *a, int ith, int nth);

const char *kiln__aot_scalar_name(int t) {
    switch (t) {
    case KILN_SCALAR_I32: return "i32";
    case KILN_SCALAR_I64: return "i64";
    case KILN_SCALAR_F32: return "f32";
    default: return "?";
    }
}

static int valid_ident(const char *s) {
    if (!s || !*s) return 0;
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_')) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_'))
            return 0;
    return 1;
}

/* ------------------------------------------------------------ compile */

static int rm_tree_files(const char *dir, const char *const *names, int n) {
    char p[4300];
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    return rmdir(dir);
}

/* Key material: length-prefixed fields appended to a growing buffer. */
typedef kiln__wbuf keybuf;

static void key_add(keybuf *k, const void *d, size_t n) {
    kiln__w_u64(k, n);
    kiln__w_bytes(k, d, n);
}

static void key_add_file(keybuf *k, const char *dir, const char *name) {
    char p[4300];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "rb");
    if (!f) return;
    char buf[8192];
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, f)) > 0) key_add(k, buf, r);
    fclose(f);
}

static int read_all(const char *path, uint8_t **data, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    long len = -1;
    if (fseek(f, 0, SEEK_END) == 0) len = ftell(f);
    uint8_t *b = NULL;
    if (len > 0 && fseek(f, 0, SEEK_SET) == 0) {
        b = kiln__malloc((size_t)len);
        if (b && fread(b, 1, (size_t)len, f) != (size_t)len) {
            kiln__free(b);
            b = NULL;
        }
    }
    fclose(f);
    if (!b) return -1;
    *data = b;
    *n = (size_t)len;
    return 0;
}

/* The entry must exist: find out at build, not when the engine runs. */
static int check_entry(const uint8_t *bytes, size_t len, const char *what, const char *entry) {
    void *h = NULL;
    int rc = kiln__so_load_bytes(bytes, len, what, &h);
    if (rc) return rc;
    dlerror();
    void *sym = dlsym(h, entry);
    kiln__so_unload(h);
    if (!sym)
        return kiln__err(KILN_ECOMPILE,
                         "AOT kernel: the source defines no function '%s' (the entry; declare it "
                         "void %s(const kiln_aot_args *a, int ith, int nth), not static)",
                         entry, entry);
    return 0;
}

static char *join_flags(const char *const *args, int nflags) {
    char cc[512] = "cc";
    const char *ccenv = getenv("CC");
    if (ccenv && *ccenv) snprintf(cc, sizeof cc, "%s", ccenv);
    size_t cap = strlen(cc) + 1;
    for (int i = 0; i < nflags; i++) cap += strlen(args[i]) + 1;
    char *fl = kiln__malloc(cap + 1);
    if (fl) {
        size_t o = (size_t)snprintf(fl, cap + 1, "%s", cc);
        for (int i = 0; i < nflags; i++) o += (size_t)snprintf(fl + o, cap + 1 - o, " %s", args[i]);
    }
    return fl;
}

/* Compile in a private temporary directory; *so gets the object's bytes.
 * keep (may be NULL): where the source stays, for inspection when it fails
 * to compile (the compile cache); the compiler then reads it from there,
 * so its file:line messages name a file that exists, lines counted from the
 * kernel source's first line. */
static int aot_cc(const char *source, const char *entry, const char **args, int na,
                  uint8_t **so, size_t *n, const char *keep) {
    const char *base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s/kiln-aot-XXXXXX", base) >= (int)sizeof dir)
        return kiln__err(KILN_EIO, "AOT kernel %s: temporary directory path too long", entry);
    if (!mkdtemp(dir))
        return kiln__err(KILN_EIO, "AOT kernel %s: cannot create a directory in %s: %s", entry,
                         base, strerror(errno));
    static const char *const files[] = {"kernel.c", "kernel.so"};
    char cpath[4200], sopath[4200];
    snprintf(cpath, sizeof cpath, "%s/kernel.c", dir);
    snprintf(sopath, sizeof sopath, "%s/kernel.so", dir);
    FILE *f = fopen(cpath, "wb");
    size_t slen = strlen(source);
    if (!f || fwrite(source, 1, slen, f) != slen || fclose(f) != 0) {
        int e = errno;
        if (f) fclose(f);
        rm_tree_files(dir, files, 2);
        return kiln__err(KILN_EIO, "AOT kernel %s: cannot write %s: %s", entry, cpath,
                         strerror(e));
    }
    int kept = keep && kiln__write_atomic(keep, source, slen) == 0;
    args[na++] = "-o";
    args[na++] = sopath;
    args[na++] = kept ? keep : cpath;
    args[na++] = "-lm";
    args[na] = NULL;
    char what[300];
    snprintf(what, sizeof what, "AOT kernel %s", entry);
    /* The kept source stays after a success too: every compile of this key
     * writes the same bytes there (renamed into place), so a concurrent
     * compile of the same kernel (ctest -j, processes sharing a cache) may
     * be about to read it; unlinking it here failed that one with "No such
     * file or directory".  The name stays the same for every compile, so
     * the object (whose symbols name its source file) is the same too. */
    int rc = kiln__cc_run(what, args, NULL);
    if (kept && rc == KILN_ECOMPILE) {
        char m[4096];
        snprintf(m, sizeof m, "%s", kiln_errmsg());
        kiln__err(rc, "%s\n(the kernel source stays in %s for inspection)", m, keep);
    }
    if (!rc && read_all(sopath, so, n) != 0)
        rc = kiln__err(KILN_EIO, "AOT kernel %s: cannot read the compiled object", entry);
    rm_tree_files(dir, files, 2);
    return rc;
}

int kiln__aot_compile(const char *source, const char *entry, uint8_t **so, size_t *n,
                      char **flags_used) {
    KILN__ASSERT(source && entry && so && n);
    *so = NULL;
    *n = 0;
    if (flags_used) *flags_used = NULL;
    if (!valid_ident(entry))
        return kiln__err(KILN_EINVAL, "AOT kernel entry '%s' is not a C identifier", entry);
    const char *inc = kiln__include_dir();
    char incflag[4200];
    const char *args[24];
    int na = 0;
    args[na++] = "-O2";
#if defined(__x86_64__) || defined(__aarch64__)
    args[na++] = "-march=native";
#endif
    args[na++] = "-fPIC";
    args[na++] = "-shared";
    args[na++] = "-std=gnu11";
    args[na++] = "-Wl,-z,defs";
    if (inc) {
        snprintf(incflag, sizeof incflag, "-I%s", inc);
        args[na++] = incflag;
    }
    int nflags = na;
    char what[300];
    snprintf(what, sizeof what, "AOT kernel %s", entry);

    /* The compile cache: key over everything that changes the object.
     * Entries hold the object's SHA-256 ahead of its bytes, so a damaged
     * entry is recompiled rather than handed to the dynamic loader. */
    char ver[512];
    int rc = kiln__cc_version(ver, sizeof ver);
    if (rc) return rc;
    keybuf kb = {0};
    static const char tag[] = "kiln aot kernel 1";
    int abi = KILN_ABI_VERSION;
    const char *cc = getenv("CC");
    if (!cc || !*cc) cc = "cc";
    key_add(&kb, tag, sizeof tag);
    key_add(&kb, &abi, sizeof abi);
    key_add(&kb, cc, strlen(cc));
    key_add(&kb, ver, strlen(ver));
    for (int i = 0; i < nflags; i++) key_add(&kb, args[i], strlen(args[i]));
    if (inc) {
        key_add_file(&kb, inc, "kiln/kiln.h");
        key_add_file(&kb, inc, "kiln/plugin.h");
    }
    key_add(&kb, entry, strlen(entry));
    key_add(&kb, source, strlen(source));
    uint8_t digest[32];
    int have_key = !kb.oom;
    if (have_key) kiln__sha256(kb.p, kb.n, digest);
    kiln__free(kb.p);
    char key[33] = "", dir[4096], path[4400] = "";
    if (have_key && kiln__cache_dir(dir, sizeof dir) == 0) {
        for (int i = 0; i < 16; i++) snprintf(key + 2 * i, 3, "%02x", digest[i]);
        snprintf(path, sizeof path, "%s/aot-%.60s-%s.bin", dir, entry, key);
    }

    uint8_t *bytes = NULL;
    size_t len = 0;
    if (path[0]) {
        uint8_t *file = NULL;
        size_t flen = 0;
        if (read_all(path, &file, &flen) == 0) {
            uint8_t h[32];
            if (flen > 32) kiln__sha256(file + 32, flen - 32, h);
            if (flen > 32 && memcmp(h, file, 32) == 0 &&
                (bytes = kiln__malloc(flen - 32)) != NULL) {
                memcpy(bytes, file + 32, flen - 32);
                len = flen - 32;
                kiln__log(KILN_LOG_VERBOSE, "compile cache hit %s (%s)", key, path);
            } else {
                kiln__log(KILN_LOG_WARN, "compile cache entry %s is damaged; recompiling", path);
            }
            kiln__free(file);
        }
    }
    if (!bytes) {
        if (path[0]) kiln__log(KILN_LOG_VERBOSE, "compile cache miss %s: compiling %s", key, what);
        char keep[4400] = "";
        if (path[0]) snprintf(keep, sizeof keep, "%.*s.c", (int)(strlen(path) - 4), path);
        rc = aot_cc(source, entry, args, na, &bytes, &len, keep[0] ? keep : NULL);
        if (rc) return rc;
        if (path[0]) {
            uint8_t *file = kiln__malloc(len + 32);
            if (file) {
                kiln__sha256(bytes, len, file);
                memcpy(file + 32, bytes, len);
                if (kiln__write_atomic(path, file, len + 32) != 0)
                    kiln__log(KILN_LOG_VERBOSE, "cannot store %s in the compile cache: %s", what,
                              strerror(errno));
                kiln__free(file);
            }
        }
    }
    rc = check_entry(bytes, len, what, entry);
    if (rc) {
        kiln__free(bytes);
        return rc;
    }
    if (flags_used) *flags_used = join_flags(args, nflags);
    *so = bytes;
    *n = len;
    return 0;
}

/* ------------------------------------------------------------ contract */

int kiln__aot_check(const kiln__op *op, const kiln_aot_kernel *k) {
    KILN__ASSERT(op && k);
    char id[256];
    snprintf(id, sizeof id, "op %s::%s v%d", op->ns, op->name, op->version);
    const char *sig = op->quick ? op->quick->aot_signature : NULL;
    if (!sig) sig = "";
    /* "*": no signature fixed at registration; the kernel's own scalar
     * types are the signature (each still checked below). */
    int derived = strcmp(sig, KILN_AOT_SIGNATURE_DERIVED) == 0;
    kiln_scalar_type want[KILN_MAX_SCALARS];
    int nwant = 0;
    for (const char *p = derived ? "" : sig; *p;) {
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) break;
        const char *b = p;
        while (*p && *p != ',' && *p != ' ' && *p != '\t') p++;
        size_t len = (size_t)(p - b);
        while (*p == ' ' || *p == '\t') p++;
        if (*p == ',') p++;
        kiln_scalar_type t;
        if (len == 3 && !memcmp(b, "i32", 3)) t = KILN_SCALAR_I32;
        else if (len == 3 && !memcmp(b, "i64", 3)) t = KILN_SCALAR_I64;
        else if (len == 3 && !memcmp(b, "f32", 3)) t = KILN_SCALAR_F32;
        else
            return kiln__err(KILN_EINVAL,
                             "%s: aot_signature \"%s\": argument %d is '%.*s', expected i32, "
                             "i64 or f32", id, sig, nwant, (int)len, b);
        if (nwant == KILN_MAX_SCALARS)
            return kiln__err(KILN_EINVAL, "%s: aot_signature \"%s\" has more than %d arguments",
                             id, sig, KILN_MAX_SCALARS);
        want[nwant++] = t;
    }
    if (!k->source || !*k->source)
        return kiln__err(KILN_EINVAL, "%s: aot kernel has no source", id);
    if (!valid_ident(k->entry))
        return kiln__err(KILN_EINVAL, "%s: aot kernel entry '%s' is not a C identifier", id,
                         k->entry ? k->entry : "(null)");
    if (!k->extent && k->lang == KILN_AOT_LANG_C)
        return kiln__err(KILN_EINVAL, "%s: aot kernel has no extent", id);
    if (k->nscalars < 0 || k->nscalars > KILN_MAX_SCALARS)
        return kiln__err(KILN_EINVAL, "%s: aot kernel has %d scalars, at most %d allowed", id,
                         k->nscalars, KILN_MAX_SCALARS);
    if (derived) {
        nwant = k->nscalars;
        for (int i = 0; i < nwant; i++) want[i] = k->scalar_types[i];
    }
    if (k->nscalars != nwant)
        return kiln__err(KILN_EINVAL, "%s: aot kernel has %d scalar%s, signature \"%s\" says %d",
                         id, k->nscalars, k->nscalars == 1 ? "" : "s", sig, nwant);
    for (int i = 0; i < k->nscalars; i++) {
        int t = (int)k->scalar_types[i];
        if (t != KILN_SCALAR_I32 && t != KILN_SCALAR_I64 && t != KILN_SCALAR_F32)
            return kiln__err(KILN_EINVAL,
                             "%s: aot kernel scalar %d has type %d, not a kiln_scalar_type "
                             "(signature says %s)", id, i, t, kiln__aot_scalar_name(want[i]));
        if (t != (int)want[i])
            return kiln__err(KILN_EINVAL, "%s: aot kernel scalar %d is %s, signature says %s", id,
                             i, kiln__aot_scalar_name(t), kiln__aot_scalar_name(want[i]));
        if (t != KILN_SCALAR_F32 && !k->scalars[i])
            return kiln__err(KILN_EINVAL, "%s: aot kernel scalar %d (%s) has no expression", id,
                             i, kiln__aot_scalar_name(t));
    }
    return 0;
}

int kiln__aot_from_kernel(const kiln__op *op, const kiln_aot_kernel *k,
                          kiln__aot_node_fn node_of, void *ud, kiln__aot *out) {
    KILN__ASSERT(op && k && node_of && out);
    memset(out, 0, sizeof *out);
    if (k->lang != KILN_AOT_LANG_C)
        return kiln__err(KILN_EINVAL, "op %s::%s v%d: aot returned lang %d; CUDA kernels come from cuda_aot", op->ns,
                         op->name, op->version, k->lang);
    int rc = kiln__aot_check(op, k);
    if (rc) return rc;
    out->extent = node_of(ud, k->extent);
    if (out->extent < 0)
        return kiln__err_prefix(KILN_EINVAL, "op %s::%s v%d: aot kernel extent", op->ns,
                                op->name, op->version);
    out->nscalars = k->nscalars;
    for (int i = 0; i < k->nscalars; i++) {
        out->scalar_types[i] = (uint8_t)k->scalar_types[i];
        out->scalars[i] = -1;
        if (k->scalar_types[i] == KILN_SCALAR_F32 && !k->scalars[i]) {
            out->fscalars[i] = k->fscalars[i];
        } else {
            out->scalars[i] = node_of(ud, k->scalars[i]);
            if (out->scalars[i] < 0)
                return kiln__err_prefix(KILN_EINVAL, "op %s::%s v%d: aot kernel scalar %d",
                                        op->ns, op->name, op->version, i);
        }
    }
    uint8_t *so = NULL;
    size_t n = 0;
    char *flags = NULL;
    rc = kiln__aot_compile(k->source, k->entry, &so, &n, &flags);
    if (rc == KILN_ECOMPILE) return rc; /* the caller names the layer and op; the message names the kernel */
    if (rc)
        return kiln__err_prefix(rc, "op %s::%s v%d", op->ns, op->name, op->version);
    kiln__log(KILN_LOG_VERBOSE, "AOT kernel %s of %s::%s v%d: %zu bytes (%s)", k->entry,
              op->ns, op->name, op->version, n, flags ? flags : "");
    kiln__free(flags);
    out->so = so;
    out->so_size = n;
    out->entry = kiln__strdup(k->entry);
    out->cpu_sig = kiln__strdup(kiln_cpu_signature());
    if (!out->entry || !out->cpu_sig) {
        kiln__aot_free(out);
        return kiln__err(KILN_ENOMEM, "out of memory");
    }
    return 0;
}

/* ------------------------------------------------------------ load / free */

static pthread_mutex_t aot_lock = PTHREAD_MUTEX_INITIALIZER;

int kiln__aot_load(kiln__aot *k) {
    KILN__ASSERT(k);
    if (__atomic_load_n(&k->fn, __ATOMIC_ACQUIRE)) return 0;
    pthread_mutex_lock(&aot_lock);
    int rc = 0;
    if (k->fn) goto done;
    const char *entry = k->entry ? k->entry : "(null)";
    if (k->cpu_sig && *k->cpu_sig && strcmp(k->cpu_sig, kiln_cpu_signature()) != 0) {
        rc = kiln__err(KILN_EDEVICE,
                       "AOT kernel %s was compiled for CPU \"%s\", this CPU is \"%s\": rebuild "
                       "the engine on this machine", entry, k->cpu_sig, kiln_cpu_signature());
        goto done;
    }
    char what[300];
    snprintf(what, sizeof what, "AOT kernel %s", entry);
    void *h = NULL;
    rc = kiln__so_load_bytes(k->so, (size_t)k->so_size, what, &h);
    if (rc) goto done;
    dlerror();
    void *fn = k->entry ? dlsym(h, k->entry) : NULL;
    if (!fn) {
        kiln__so_unload(h);
        rc = kiln__err(KILN_EFORMAT, "AOT kernel: entry '%s' not found in its embedded object",
                       entry);
        goto done;
    }
    k->handle = h;
    __atomic_store_n(&k->fn, fn, __ATOMIC_RELEASE);
done:
    pthread_mutex_unlock(&aot_lock);
    return rc;
}

void kiln__aot_free(kiln__aot *k) {
    if (!k) return;
    if (k->handle) kiln__so_unload(k->handle);
    kiln__free(k->entry);
    kiln__free(k->so);
    kiln__free(k->cpu_sig);
    memset(k, 0, sizeof *k);
}

/* ------------------------------------------------------------ serialize */

/* Record (little-endian):
 *   u32 entry_len, entry bytes; u32 sig_len, cpu_sig bytes;
 *   i32 extent; i32 nscalars;
 *   nscalars x { u8 type; i32 node (-1 for f32); f64 value (f32 scalars) };
 *   u8[32] SHA-256 of the object; u64 so_size; so bytes.
 * The hash is checked before the bytes ever reach the dynamic loader:
 * ld.so trusts what it maps, and a damaged dynamic section crashes it. */
int kiln__aot_serialize(const kiln__aot *k, uint8_t *buf, size_t *size) {
    KILN__ASSERT(k && size);
    kiln__wbuf w;
    kiln__w_init_fixed(&w, buf, *size);
    kiln__w_str(&w, k->entry, 4);
    kiln__w_str(&w, k->cpu_sig, 4);
    kiln__w_i32(&w, k->extent);
    kiln__w_i32(&w, k->nscalars);
    for (int i = 0; i < k->nscalars && i < KILN_MAX_SCALARS; i++) {
        kiln__w_u8(&w, k->scalar_types[i]);
        kiln__w_i32(&w, k->scalars[i]);
        kiln__w_f64(&w, k->fscalars[i]);
    }
    uint8_t digest[32];
    kiln__sha256(k->so ? (const void *)k->so : "", (size_t)k->so_size, digest);
    kiln__w_bytes(&w, digest, 32);
    kiln__w_u64(&w, k->so_size);
    kiln__w_bytes(&w, k->so, (size_t)k->so_size);
    if (buf && w.n > *size)
        return kiln__err(KILN_EINVAL, "AOT kernel record needs %zu bytes, buffer has %zu", w.n,
                         *size);
    *size = w.n;
    return 0;
}

/* A node index of the record: 0 <= v < nnodes. */
static int node_ok(kiln__rbuf *r, int32_t v, int32_t nnodes, const char *field, int i, size_t at) {
    if (v >= 0 && v < nnodes) return 0;
    char f[64];
    if (i >= 0) snprintf(f, sizeof f, "%s %d", field, i);
    else snprintf(f, sizeof f, "%s", field);
    return kiln__r_fail_at(r, at, KILN_EFORMAT, "%s node %d is out of range [0, %d)", f, (int)v,
                           (int)nnodes);
}

int kiln__aot_deserialize(kiln__aot *k, const uint8_t *buf, size_t size, int32_t nnodes) {
    KILN__ASSERT(k && (buf || size == 0));
    memset(k, 0, sizeof *k);
    kiln__rbuf r;
    kiln__r_init(&r, buf, size, "AOT kernel record");
    int rc;
    k->entry = kiln__r_str(&r, 4, 4096, "entry");
    if ((rc = r.err)) goto fail;
    if (!valid_ident(k->entry)) {
        rc = kiln__r_fail_at(&r, 4, KILN_EFORMAT, "entry '%s' is not a C identifier",
                             k->entry ? k->entry : "");
        goto fail;
    }
    k->cpu_sig = kiln__r_str(&r, 4, 4096, "cpu signature");
    size_t at = r.at;
    k->extent = kiln__r_i32(&r, "extent");
    if ((rc = r.err) || (rc = node_ok(&r, k->extent, nnodes, "extent", -1, at))) goto fail;
    at = r.at;
    uint32_t ns = kiln__r_u32(&r, "scalar count");
    if ((rc = r.err)) goto fail;
    if (!kiln__r_check(&r, ns, 0, KILN_MAX_SCALARS + 1, "scalar count", at)) {
        rc = r.err;
        goto fail;
    }
    k->nscalars = (int32_t)ns;
    for (int i = 0; i < k->nscalars; i++) {
        at = r.at;
        uint8_t t = kiln__r_u8(&r, "scalar type");
        if ((rc = r.err)) goto fail;
        if (t != KILN_SCALAR_I32 && t != KILN_SCALAR_I64 && t != KILN_SCALAR_F32) {
            rc = kiln__r_fail_at(&r, at, KILN_EFORMAT, "scalar %d type %u is not i32/i64/f32", i, t);
            goto fail;
        }
        k->scalar_types[i] = t;
        at = r.at;
        k->scalars[i] = kiln__r_i32(&r, "scalar node");
        if ((rc = r.err)) goto fail;
        /* an F32 scalar is a constant (node -1) or an expression */
        if ((t != KILN_SCALAR_F32 || k->scalars[i] != -1) &&
            (rc = node_ok(&r, k->scalars[i], nnodes, "scalar", i, at)))
            goto fail;
        k->fscalars[i] = kiln__r_f64(&r, "scalar value");
    }
    const uint8_t *want = kiln__r_span(&r, 32, "object checksum");
    at = r.at;
    uint64_t n = kiln__r_u64(&r, "object size");
    if ((rc = r.err)) goto fail;
    if (n == 0) {
        rc = kiln__r_fail_at(&r, at, KILN_EFORMAT, "object size 0");
        goto fail;
    }
    at = r.at;
    k->so = kiln__r_copy(&r, n, "object");
    if ((rc = r.err)) goto fail;
    k->so_size = n;
    uint8_t got[32];
    kiln__sha256(k->so, (size_t)n, got);
    if (memcmp(want, got, 32) != 0) {
        rc = kiln__r_fail_at(&r, at, KILN_ECHECKSUM,
                             "the %s object (%llu bytes) does not match the SHA-256 stored beside it: "
                             "the file is damaged (a hash in the same file catches damage, not "
                             "deliberate changes: sign engines and load with --verify for that)",
                             k->entry, (unsigned long long)n);
        goto fail;
    }
    if ((rc = kiln__r_end(&r))) goto fail;
    return 0;
fail:
    kiln__aot_free(k);
    return rc;
}

/* ------------------------------------------------------------ launch */

typedef struct aot_task {
    aot_entry_fn fn;
    const kiln_aot_args *args;
} aot_task;

static void aot_trampoline(void *ud, int ith, int nth) {
    const aot_task *t = ud;
    t->fn(t->args, ith, nth);
}

int kiln__aot_launch(kiln__aot *k, kiln_exec *ex, void *const *in, void *const *out,
                     const int64_t *node_values) {
    KILN__ASSERT(k && node_values);
    int rc = kiln__aot_load(k);
    if (rc) return rc;
    int64_t extent = node_values[k->extent];
    if (extent < 0)
        return kiln__err(KILN_EKERNEL, "AOT kernel %s: extent evaluates to %lld", k->entry,
                         (long long)extent);
    if (extent == 0) return 0;
    int64_t i64[KILN_MAX_SCALARS] = {0};
    double f64[KILN_MAX_SCALARS] = {0};
    for (int i = 0; i < k->nscalars; i++) {
        if (k->scalar_types[i] == KILN_SCALAR_F32) {
            f64[i] = (double)(float)(k->scalars[i] >= 0 ? (double)node_values[k->scalars[i]] : k->fscalars[i]);
        } else {
            i64[i] = node_values[k->scalars[i]];
            if (k->scalar_types[i] == KILN_SCALAR_I32 && (i64[i] < INT32_MIN || i64[i] > INT32_MAX))
                return kiln__err(KILN_EKERNEL, "AOT kernel %s: i32 scalar %d is %lld, out of range",
                                 k->entry, i, (long long)i64[i]);
        }
    }
    kiln_aot_args a = {in, out, i64, f64, extent};
    aot_task t = {(aot_entry_fn)__atomic_load_n(&k->fn, __ATOMIC_ACQUIRE), &a};
    if (!ex) {
        t.fn(&a, 0, 1);
        return 0;
    }
    int tasks = extent > INT_MAX ? INT_MAX : (int)extent;
    kiln_exec_parallel(ex, tasks, aot_trampoline, &t);
    return 0;
}
