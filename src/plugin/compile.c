/*
 * compile.c — plugins compiled from C source at first use, and cached.
 *
 * kiln_plugin_compile turns a C file defining ops (it includes
 * <kiln/plugin.h>) into a shared library with the system compiler and keeps
 * it in a cache directory.  The cache key is a SHA-256 over everything that
 * changes the result: the source bytes, the compiler command and flags, the
 * compiler's version line, KILN_ABI_VERSION and the kiln headers the source
 * includes.  A hit compiles nothing.  A miss compiles into a temporary file
 * next to the final one and renames it into place, so a concurrent reader
 * never sees half a library.  Only files inside the cache directory are
 * ever written.
 *
 * Compiled plugins are not linked against libkiln: their kiln_* references
 * bind to the libkiln already loaded in the process, so there is exactly one
 * registry.  (An executable that links libkiln statically must export its
 * symbols: -rdynamic / ENABLE_EXPORTS.)
 */
#include "kiln_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* ------------------------------------------------------------ SHA-256 */

static const uint32_t sha_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

typedef struct sha256 {
    uint32_t h[8];
    uint8_t buf[64];
    size_t nbuf;
    uint64_t total;
} sha256;

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha_block(sha256 *s, const uint8_t *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
               (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3];
    uint32_t e = s->h[4], f = s->h[5], g = s->h[6], h = s->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) +
                      sha_k[i] + w[i];
        uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        h = g; g = f; f = e; e = d + t1;
        d = c; c = b; b = a; a = t1 + t2;
    }
    s->h[0] += a; s->h[1] += b; s->h[2] += c; s->h[3] += d;
    s->h[4] += e; s->h[5] += f; s->h[6] += g; s->h[7] += h;
}

static void sha_init(sha256 *s) {
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, iv, sizeof iv);
    s->nbuf = 0;
    s->total = 0;
}

static void sha_update(sha256 *s, const void *data, size_t n) {
    const uint8_t *p = data;
    s->total += n;
    while (n > 0) {
        size_t take = 64 - s->nbuf < n ? 64 - s->nbuf : n;
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += take;
        p += take;
        n -= take;
        if (s->nbuf == 64) {
            sha_block(s, s->buf);
            s->nbuf = 0;
        }
    }
}

static void sha_final(sha256 *s, uint8_t out[32]) {
    uint64_t bits = s->total * 8;
    uint8_t pad = 0x80;
    sha_update(s, &pad, 1);
    pad = 0;
    while (s->nbuf != 56) sha_update(s, &pad, 1);
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)(bits >> (56 - 8 * i));
    sha_update(s, len, 8);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(s->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(s->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(s->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)s->h[i];
    }
}

void kiln__sha256(const void *data, size_t n, uint8_t out[32]) {
    sha256 s;
    sha_init(&s);
    sha_update(&s, data, n);
    sha_final(&s, out);
}

/* Field for the key: a length prefix keeps "ab"+"c" apart from "a"+"bc". */
static void sha_field(sha256 *s, const void *data, size_t n) {
    uint64_t len = n;
    sha_update(s, &len, sizeof len);
    sha_update(s, data, n);
}

/* ------------------------------------------------------------ files */

int kiln__read_file(const char *path, char **data, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 1 << 16, len = 0;
    char *buf = kiln__malloc(cap + 1);
    if (!buf) {
        fclose(f);
        errno = ENOMEM;
        return -1;
    }
    for (;;) {
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (len < cap) break;
        char *nb = kiln__realloc(buf, cap * 2 + 1);
        if (!nb) {
            kiln__free(buf);
            fclose(f);
            errno = ENOMEM;
            return -1;
        }
        buf = nb;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        kiln__free(buf);
        errno = EIO;
        return -1;
    }
    buf[len] = 0;
    *data = buf;
    *n = len;
    return 0;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* mkdir -p with mode 0700 for the parts we create. */
static int mkdirs(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != 0) continue;
        char c = buf[i];
        buf[i] = 0;
        if (mkdir(buf, 0700) != 0 && errno != EEXIST) return -1;
        buf[i] = c;
    }
    return is_dir(path) ? 0 : -1;
}

/* ------------------------------------------------------------ the compiler */

/* $CC split on blanks (or "cc") into argv; returns the count. */
static int cc_split(char *storage, size_t size, char **argv, int max) {
    const char *cc = getenv("CC");
    if (!cc || !*cc) cc = "cc";
    snprintf(storage, size, "%s", cc);
    int n = 0;
    for (char *p = storage; *p && n < max;) {
        while (*p == ' ' || *p == '\t') *p++ = 0;
        if (!*p) break;
        argv[n++] = p;
        while (*p && *p != ' ' && *p != '\t') p++;
    }
    return n;
}

int kiln__cc_run(const char *what, const char *const *args, char **log) {
    if (log) *log = NULL;
    char ccbuf[1024];
    char *argv[256];
    int n = cc_split(ccbuf, sizeof ccbuf, argv, 8);
    if (n == 0) return kiln__err(KILN_ECOMPILE, "no C compiler found (set CC)");
    const char *cc0 = argv[0];
    for (int i = 0; args[i]; i++) {
        if (n >= 255) return kiln__err(KILN_EINVAL, "%s: too many compiler arguments", what);
        argv[n++] = (char *)args[i];
    }
    argv[n] = NULL;

    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) != 0)
        return kiln__err(KILN_EIO, "%s: pipe: %s", what, strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 2);
    pid_t pid;
    int rc = posix_spawnp(&pid, cc0, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    if (rc != 0) {
        close(pfd[0]);
        if (rc == ENOENT || rc == EACCES)
            return kiln__err(KILN_ECOMPILE, "no C compiler found (set CC): '%s': %s", cc0,
                             strerror(rc));
        return kiln__err(KILN_ECOMPILE, "%s: cannot run the compiler '%s': %s", what, cc0,
                         strerror(rc));
    }
    /* Collect its output (keep at most 64 KiB; read everything so it never
     * blocks on a full pipe). */
    size_t cap = 4096, len = 0;
    char *out = kiln__malloc(cap);
    char chunk[4096];
    for (;;) {
        ssize_t r = read(pfd[0], chunk, sizeof chunk);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        if (!out || len + (size_t)r + 1 > 65536) continue;
        if (len + (size_t)r + 1 > cap) {
            while (len + (size_t)r + 1 > cap) cap *= 2;
            char *no = kiln__realloc(out, cap);
            if (!no) continue;
            out = no;
        }
        memcpy(out + len, chunk, (size_t)r);
        len += (size_t)r;
    }
    close(pfd[0]);
    if (out) out[len] = 0;
    int st = 0;
    pid_t w;
    while ((w = waitpid(pid, &st, 0)) < 0 && errno == EINTR) {}
    if (w < 0) {
        /* SIGCHLD ignored by the host reaps the child: its status is lost. */
        int e = errno;
        kiln__free(out);
        return kiln__err(KILN_ECOMPILE, "%s: cannot get the compiler's exit status: %s "
                         "(is SIGCHLD ignored?)", what, strerror(e));
    }
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    if (code == 127 && (!out || len == 0)) {
        kiln__free(out);
        return kiln__err(KILN_ECOMPILE, "no C compiler found (set CC): '%s' could not be run",
                         cc0);
    }
    if (code != 0) {
        /* The compiler's own file:line messages, trimmed to fit. */
        const char *msg = out ? out : "";
        size_t ml = strlen(msg);
        while (ml > 0 && (msg[ml - 1] == '\n' || msg[ml - 1] == ' ')) ml--;
        int show = ml > 3000 ? 3000 : (int)ml;
        kiln__err(KILN_ECOMPILE, "%s: compiler failed (%s exit %d):\n%.*s%s", what, cc0, code,
                  show, msg, ml > 3000 ? "\n..." : "");
        if (log) *log = out;
        else kiln__free(out);
        return KILN_ECOMPILE;
    }
    if (log) *log = out;
    else kiln__free(out);
    return 0;
}

static pthread_mutex_t cc_lock = PTHREAD_MUTEX_INITIALIZER;
static char cc_ver_for[1024]; /* the $CC the cached line belongs to */
static char cc_ver[512];
static int cc_ver_ok;

int kiln__cc_version(char *buf, size_t size) {
    const char *cc = getenv("CC");
    if (!cc || !*cc) cc = "cc";
    pthread_mutex_lock(&cc_lock);
    if (cc_ver_ok && strcmp(cc_ver_for, cc) == 0) {
        snprintf(buf, size, "%s", cc_ver);
        pthread_mutex_unlock(&cc_lock);
        return 0;
    }
    pthread_mutex_unlock(&cc_lock);
    static const char *const args[] = {"--version", NULL};
    char *log = NULL;
    int rc = kiln__cc_run("compiler version", args, &log);
    if (rc) {
        kiln__free(log);
        return rc;
    }
    const char *s = log ? log : "";
    size_t n = strcspn(s, "\n");
    snprintf(buf, size, "%.*s", (int)n, s);
    pthread_mutex_lock(&cc_lock);
    snprintf(cc_ver_for, sizeof cc_ver_for, "%s", cc);
    snprintf(cc_ver, sizeof cc_ver, "%.*s", (int)n, s);
    cc_ver_ok = 1;
    pthread_mutex_unlock(&cc_lock);
    kiln__free(log);
    return 0;
}

static int has_plugin_h(const char *dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/kiln/plugin.h", dir);
    return is_file(p);
}

const char *kiln__include_dir(void) {
    const char *env = getenv("KILN_INCLUDE_DIR");
    if (env && *env && has_plugin_h(env)) return env;
#ifdef KILN_BUILD_INCLUDE_DIR
    if (has_plugin_h(KILN_BUILD_INCLUDE_DIR)) return KILN_BUILD_INCLUDE_DIR;
#endif
#ifdef KILN_INSTALL_INCLUDE_DIR
    if (has_plugin_h(KILN_INSTALL_INCLUDE_DIR)) return KILN_INSTALL_INCLUDE_DIR;
#endif
    if (has_plugin_h("/usr/local/include")) return "/usr/local/include";
    if (has_plugin_h("/usr/include")) return "/usr/include";
    return NULL;
}

/* ------------------------------------------------------------ the cache */

int kiln__cache_dir(char *buf, size_t size) {
    const char *d = getenv("KILN_CACHE_DIR");
    int n;
    if (d && *d) {
        n = snprintf(buf, size, "%s", d);
    } else if ((d = getenv("XDG_CACHE_HOME")) && *d) {
        n = snprintf(buf, size, "%s/kiln", d);
    } else if ((d = getenv("HOME")) && *d) {
        n = snprintf(buf, size, "%s/.cache/kiln", d);
    } else {
        return kiln__err(KILN_EIO, "no compile cache directory: set KILN_CACHE_DIR, "
                                   "XDG_CACHE_HOME or HOME");
    }
    if (n < 0 || (size_t)n >= size)
        return kiln__err(KILN_EIO, "compile cache directory path too long (%d bytes)", n);
    if (mkdirs(buf) != 0)
        return kiln__err(KILN_EIO, "cannot create the compile cache directory %s: %s", buf,
                         strerror(errno));
    return 0;
}

int kiln_compile_cache_dir(char *buf, size_t size) {
    KILN__ARG(buf && size, KILN_EINVAL);
    return kiln__cache_dir(buf, size);
}

/* Short, file-name-safe stem from the source path ("interpolate"). */
static void stem_of(const char *path, char *out, size_t size) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = 0;
    for (; *b && *b != '.' && n + 1 < size && n < 40; b++) {
        char c = *b;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-';
        out[n++] = ok ? c : '_';
    }
    if (n == 0) n = (size_t)snprintf(out, size, "plugin");
    out[n] = 0;
}

/* Write data to path atomically (temp file in the same dir + rename). */
int kiln__write_atomic(const char *path, const void *data, size_t n) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) return -1;
    const char *p = data;
    size_t left = n;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            errno = e;
            return -1;
        }
        p += w;
        left -= (size_t)w;
    }
    if (close(fd) != 0 || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return -1;
    }
    return 0;
}

#define MAX_FLAGS 64

int kiln_plugin_compile(const char *path_or_source, const kiln_compile_options *opt,
                        char **so_path_out) {
    KILN__ARG(path_or_source, KILN_EINVAL);
    static const kiln_compile_options defaults;
    if (!opt) opt = &defaults;
    if (so_path_out) *so_path_out = NULL;
    /* verbose = 1 prints (at INFO) whatever the log level: no log callback
     * or kiln_log_set needed, as docs/AOT.md shows */
#define CLOG(...) (opt->verbose ? kiln__log_always(KILN_LOG_INFO, __VA_ARGS__) : kiln__log(KILN_LOG_VERBOSE, __VA_ARGS__))

    /* The source. */
    char *src = NULL;
    size_t srclen = 0;
    const char *what = opt->is_source ? "plugin source" : path_or_source;
    if (opt->is_source) {
        srclen = strlen(path_or_source);
        src = kiln__malloc(srclen + 1);
        if (!src) return kiln__err(KILN_ENOMEM, "out of memory");
        memcpy(src, path_or_source, srclen + 1);
    } else if (kiln__read_file(path_or_source, &src, &srclen) != 0) {
        return kiln__err(KILN_EIO, "cannot read plugin source %s: %s", path_or_source,
                         strerror(errno));
    }

    const char *inc = kiln__include_dir();
    if (!inc) {
        kiln__free(src);
        return kiln__err(KILN_ENOTFOUND, "%s: kiln headers not found (kiln/plugin.h); set "
                                         "KILN_INCLUDE_DIR", what);
    }
    char ver[512];
    int rc = kiln__cc_version(ver, sizeof ver);
    if (rc) {
        kiln__free(src);
        return rc;
    }
    char dir[4096];
    rc = kiln__cache_dir(dir, sizeof dir);
    if (rc) {
        kiln__free(src);
        return rc;
    }

    /* Flags: ours, then the user's (split on blanks). */
    char incflag[4200];
    snprintf(incflag, sizeof incflag, "-I%s", inc);
    char *uflags = kiln__strdup(opt->cflags ? opt->cflags : "");
    const char *args[MAX_FLAGS + 16];
    int na = 0;
    args[na++] = "-O2";
    args[na++] = "-fPIC";
    args[na++] = "-shared";
    args[na++] = "-std=gnu11";
    args[na++] = incflag;
    int nflags_fixed = na;
    for (char *p = uflags; p && *p;) {
        while (*p == ' ' || *p == '\t' || *p == '\n') *p++ = 0;
        if (!*p) break;
        if (na - nflags_fixed >= MAX_FLAGS) {
            kiln__free(uflags);
            kiln__free(src);
            return kiln__err(KILN_EINVAL, "%s: more than %d extra compiler flags", what,
                             MAX_FLAGS);
        }
        args[na++] = p;
        while (*p && *p != ' ' && *p != '\t' && *p != '\n') p++;
    }
    int nflags = na;

    /* The key. */
    sha256 s;
    sha_init(&s);
    static const char tag[] = "kiln plugin compile 1";
    sha_field(&s, tag, sizeof tag);
    int abi = KILN_ABI_VERSION;
    sha_field(&s, &abi, sizeof abi);
    const char *cc = getenv("CC");
    if (!cc || !*cc) cc = "cc";
    sha_field(&s, cc, strlen(cc));
    sha_field(&s, ver, strlen(ver));
    for (int i = 0; i < nflags; i++) sha_field(&s, args[i], strlen(args[i]));
    static const char *const headers[] = {"kiln/kiln.h", "kiln/plugin.h"};
    for (int i = 0; i < 2; i++) {
        char hp[4300], *hd = NULL;
        size_t hn = 0;
        snprintf(hp, sizeof hp, "%s/%s", inc, headers[i]);
        if (kiln__read_file(hp, &hd, &hn) == 0) {
            sha_field(&s, hd, hn);
            kiln__free(hd);
        }
    }
    sha_field(&s, src, srclen);
    uint8_t digest[32];
    sha_final(&s, digest);
    char key[33];
    for (int i = 0; i < 16; i++) snprintf(key + 2 * i, 3, "%02x", digest[i]);

    char stem[48];
    stem_of(opt->is_source ? "source" : path_or_source, stem, sizeof stem);
    char sopath[4300];
    snprintf(sopath, sizeof sopath, "%s/%s-%s.so", dir, stem, key);

    if (!opt->rebuild && is_file(sopath)) {
        CLOG("compile cache hit %s (%s)", key, sopath);
        kiln__free(uflags);
        kiln__free(src);
        if (so_path_out) {
            *so_path_out = kiln__strdup(sopath);
            if (!*so_path_out) return kiln__err(KILN_ENOMEM, "out of memory");
        }
        return 0;
    }

    /* Source text goes into the cache as a file, so the compiler's
     * messages have a file:line to point at. */
    char cpath[4300];
    const char *compile_src = path_or_source;
    if (opt->is_source) {
        snprintf(cpath, sizeof cpath, "%s/%s-%s.c", dir, stem, key);
        if (kiln__write_atomic(cpath, src, srclen) != 0) {
            int e = errno;
            kiln__free(uflags);
            kiln__free(src);
            return kiln__err(KILN_EIO, "cannot write %s: %s", cpath, strerror(e));
        }
        compile_src = cpath;
    }
    kiln__free(src);

    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s/.%s-%s-XXXXXX.so", dir, stem, key);
    int fd = mkstemps(tmp, 3);
    if (fd < 0) {
        int e = errno;
        kiln__free(uflags);
        return kiln__err(KILN_EIO, "cannot create a temporary file in %s: %s", dir, strerror(e));
    }
    close(fd);
    args[na++] = "-o";
    args[na++] = tmp;
    args[na++] = compile_src;
    args[na++] = "-lm";
    args[na] = NULL;

    CLOG("compile cache %s %s: compiling %s", opt->rebuild ? "rebuild" : "miss",
              key, opt->is_source ? compile_src : path_or_source);
    double t0 = kiln__now_ms();
    char *log = NULL;
    rc = kiln__cc_run(opt->is_source ? compile_src : path_or_source, args, &log);
    kiln__free(uflags);
    if (rc) {
        kiln__free(log);
        unlink(tmp);
        return rc;
    }
    if (log && *log) kiln__log(KILN_LOG_WARN, "compiler output for %s:\n%s", what, log);
    kiln__free(log);
    if (rename(tmp, sopath) != 0) {
        int e = errno;
        unlink(tmp);
        return kiln__err(KILN_EIO, "cannot move the compiled plugin to %s: %s", sopath,
                         strerror(e));
    }
    CLOG("compiled %s in %.0f ms (%s)", key, kiln__now_ms() - t0, sopath);
    if (so_path_out) {
        *so_path_out = kiln__strdup(sopath);
        if (!*so_path_out) return kiln__err(KILN_ENOMEM, "out of memory");
    }
    return 0;
}
#undef CLOG

int kiln_plugin_compile_load(const char *path_or_source, const kiln_compile_options *opt,
                             char **so_path_out) {
    KILN__ARG(path_or_source, KILN_EINVAL);
    static const kiln_compile_options defaults;
    if (!opt) opt = &defaults;
    if (so_path_out) *so_path_out = NULL;
    char *so = NULL;
    int rc = kiln_plugin_compile(path_or_source, opt, &so);
    if (rc) return rc;
    rc = kiln_registry_load_library(so);
    if (rc == KILN_EIO && !opt->rebuild) {
        /* A damaged cache entry (truncated by a full disk, say): build it
         * again once. */
        kiln__log(KILN_LOG_WARN, "cached plugin %s does not load (%s); rebuilding", so,
                  kiln_errmsg());
        kiln__free(so);
        so = NULL;
        kiln_compile_options again = *opt;
        again.rebuild = 1;
        rc = kiln_plugin_compile(path_or_source, &again, &so);
        if (rc) return rc;
        rc = kiln_registry_load_library(so);
    }
    if (rc) {
        kiln__free(so);
        return rc;
    }
    if (so_path_out) *so_path_out = so;
    else kiln__free(so);
    return 0;
}
