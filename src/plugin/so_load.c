/*
 * so_load.c — load a shared object from bytes in memory.
 *
 * Engines carry AOT kernels (and embedded plugins) as .so bytes.  dlopen
 * wants a path, so the bytes go into an anonymous memfd and are opened as
 * /proc/self/fd/N: nothing is written to any directory the user did not
 * choose.  Where memfd_create is unavailable (old kernels, seccomp), the
 * bytes go to a private mkdtemp directory under $XDG_RUNTIME_DIR (or
 * $TMPDIR, /tmp) that is removed right after dlopen.
 *
 * The bytes are never trusted: the ELF header and program headers are
 * checked against the buffer size before dlopen sees them, so a truncated
 * or foreign object is a KILN_EFORMAT naming what is wrong.
 *
 * glibc identifies loaded objects by path name, and "/proc/self/fd/N" is
 * reused once fd N closes, so the memfd stays open while the object is
 * loaded (fd numbers of live objects are then unique) and a name that is
 * still known to the loader is avoided by moving to another fd number.
 */
#include "kiln_int.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if UINTPTR_MAX == 0xffffffffffffffffu
typedef Elf64_Ehdr so_ehdr;
typedef Elf64_Phdr so_phdr;
#define SO_CLASS ELFCLASS64
#else
typedef Elf32_Ehdr so_ehdr;
typedef Elf32_Phdr so_phdr;
#define SO_CLASS ELFCLASS32
#endif

#if defined(__x86_64__)
#define SO_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define SO_MACHINE EM_AARCH64
#elif defined(__i386__)
#define SO_MACHINE EM_386
#elif defined(__riscv)
#define SO_MACHINE EM_RISCV
#elif defined(__powerpc64__)
#define SO_MACHINE EM_PPC64
#endif

/* Live objects and the fd that backs each (memfd path only). */
typedef struct so_entry {
    void *handle;
    int fd;
} so_entry;

static pthread_mutex_t so_lock = PTHREAD_MUTEX_INITIALIZER;
static so_entry *so_live;
static int so_nlive, so_caplive;

static int so_check_elf(const uint8_t *b, size_t n, const char *what) {
    if (n < sizeof(so_ehdr))
        return kiln__err(KILN_EFORMAT, "%s: %zu bytes is too short for an ELF header (%zu)",
                         what, n, sizeof(so_ehdr));
    if (memcmp(b, ELFMAG, SELFMAG) != 0)
        return kiln__err(KILN_EFORMAT,
                         "%s: not an ELF object (magic %02x %02x %02x %02x at offset 0, "
                         "expected 7f 45 4c 46)", what, b[0], b[1], b[2], b[3]);
    if (b[EI_CLASS] != SO_CLASS)
        return kiln__err(KILN_EFORMAT, "%s: ELF class %d, this process needs %d (%d-bit)",
                         what, b[EI_CLASS], SO_CLASS, (int)(sizeof(void *) * 8));
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const int data = ELFDATA2LSB;
#else
    const int data = ELFDATA2MSB;
#endif
    if (b[EI_DATA] != data)
        return kiln__err(KILN_EFORMAT, "%s: ELF byte order %d, this machine uses %d", what,
                         b[EI_DATA], data);
    so_ehdr h;
    memcpy(&h, b, sizeof h);
    if (h.e_type != ET_DYN)
        return kiln__err(KILN_EFORMAT, "%s: ELF type %d, expected a shared object (%d)", what,
                         (int)h.e_type, ET_DYN);
#ifdef SO_MACHINE
    if (h.e_machine != SO_MACHINE)
        return kiln__err(KILN_EFORMAT,
                         "%s: built for ELF machine %d, this machine is %d (built elsewhere?)",
                         what, (int)h.e_machine, SO_MACHINE);
#endif
    if (h.e_phentsize != sizeof(so_phdr) || h.e_phnum == 0 || h.e_phoff > n ||
        (uint64_t)h.e_phnum * sizeof(so_phdr) > n - h.e_phoff)
        return kiln__err(KILN_EFORMAT,
                         "%s: program headers (offset %llu, %u x %u bytes) do not fit in %zu bytes",
                         what, (unsigned long long)h.e_phoff, (unsigned)h.e_phnum,
                         (unsigned)h.e_phentsize, n);
    if (h.e_shnum != 0 &&
        (h.e_shoff > n || (uint64_t)h.e_shnum * h.e_shentsize > n - h.e_shoff))
        return kiln__err(KILN_EFORMAT,
                         "%s: section headers (offset %llu, %u x %u bytes) do not fit in %zu bytes "
                         "(truncated?)", what, (unsigned long long)h.e_shoff, (unsigned)h.e_shnum,
                         (unsigned)h.e_shentsize, n);
    for (unsigned i = 0; i < h.e_phnum; i++) {
        so_phdr p;
        memcpy(&p, b + h.e_phoff + (size_t)i * sizeof p, sizeof p);
        if (p.p_type != PT_LOAD && p.p_type != PT_DYNAMIC) continue;
        if (p.p_offset > n || p.p_filesz > n - p.p_offset)
            return kiln__err(KILN_EFORMAT,
                             "%s: segment %u (offset %llu, %llu bytes) extends past the end of "
                             "the object (%zu bytes)", what, i, (unsigned long long)p.p_offset,
                             (unsigned long long)p.p_filesz, n);
    }
    return 0;
}

static int so_write_all(int fd, const uint8_t *b, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, b, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int so_remember(void *handle, int fd) {
    pthread_mutex_lock(&so_lock);
    if (so_nlive == so_caplive) {
        int cap = so_caplive ? so_caplive * 2 : 8;
        so_entry *p = kiln__realloc(so_live, (size_t)cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&so_lock);
            return KILN_ENOMEM;
        }
        so_live = p;
        so_caplive = cap;
    }
    so_live[so_nlive++] = (so_entry){handle, fd};
    pthread_mutex_unlock(&so_lock);
    return 0;
}

/* dlopen "/proc/self/fd/N" for the memfd, moving it to a fresh fd number
 * while the loader still knows an object by that name. */
static int so_load_memfd(const uint8_t *b, size_t n, const char *what, void **handle) {
#ifdef MFD_CLOEXEC
    int fd = memfd_create("kiln-so", MFD_CLOEXEC);
    if (fd < 0) return 1; /* not available: use the file fallback */
    if (so_write_all(fd, b, n) != 0) {
        int e = errno;
        close(fd);
        return kiln__err(KILN_EIO, "%s: writing %zu bytes to a memfd: %s", what, n, strerror(e));
    }
    char path[64];
    for (int tries = 0;; tries++) {
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        void *old = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        if (!old) break;
        dlclose(old);
        int nfd = fcntl(fd, F_DUPFD_CLOEXEC, fd + 1);
        close(fd);
        if (nfd < 0 || tries > 64) {
            if (nfd >= 0) close(nfd);
            return kiln__err(KILN_EIO, "%s: no free fd name to load the object from", what);
        }
        fd = nfd;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *de = dlerror();
        close(fd);
        if (access("/proc/self/fd", F_OK) != 0) return 1; /* no /proc: fallback */
        return kiln__err(KILN_EIO, "%s: dlopen failed: %s", what, de ? de : "unknown error");
    }
    if (so_remember(h, fd) != 0) {
        dlclose(h);
        close(fd);
        return kiln__err(KILN_ENOMEM, "%s: out of memory", what);
    }
    *handle = h;
    return 0;
#else
    (void)b; (void)n; (void)what; (void)handle;
    return 1;
#endif
}

static int so_load_file(const uint8_t *b, size_t n, const char *what, void **handle) {
    const char *base = getenv("XDG_RUNTIME_DIR");
    struct stat st;
    if (!base || !*base || stat(base, &st) != 0 || !S_ISDIR(st.st_mode)) base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    char dir[4096], file[4200];
    if (snprintf(dir, sizeof dir, "%s/kiln-so-XXXXXX", base) >= (int)sizeof dir)
        return kiln__err(KILN_EIO, "%s: temporary directory path too long (%s)", what, base);
    if (!mkdtemp(dir))
        return kiln__err(KILN_EIO, "%s: cannot create a private directory in %s: %s", what, base,
                         strerror(errno));
    snprintf(file, sizeof file, "%s/object.so", dir);
    int fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0700);
    if (fd < 0) {
        int e = errno;
        rmdir(dir);
        return kiln__err(KILN_EIO, "%s: cannot create %s: %s", what, file, strerror(e));
    }
    int werr = so_write_all(fd, b, n) != 0 ? errno : 0;
    close(fd);
    void *h = NULL;
    const char *de = NULL;
    if (!werr) {
        h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
        if (!h) de = dlerror();
    }
    unlink(file);
    rmdir(dir);
    if (werr) return kiln__err(KILN_EIO, "%s: writing %s: %s", what, file, strerror(werr));
    if (!h) return kiln__err(KILN_EIO, "%s: dlopen failed: %s", what, de ? de : "unknown error");
    if (so_remember(h, -1) != 0) {
        dlclose(h);
        return kiln__err(KILN_ENOMEM, "%s: out of memory", what);
    }
    *handle = h;
    return 0;
}

int kiln__so_load_bytes(const void *bytes, size_t n, const char *what, void **handle) {
    KILN__ASSERT(handle);
    *handle = NULL;
    if (!what) what = "shared object";
    if (!bytes) return kiln__err(KILN_EINVAL, "%s: no bytes given", what);
    int rc = so_check_elf(bytes, n, what);
    if (rc) return rc;
    /* KILN_SO_NO_MEMFD=1 forces the file fallback (tests, sandboxes that
     * forbid exec from memfds). */
    const char *nomem = getenv("KILN_SO_NO_MEMFD");
    if (!nomem || strcmp(nomem, "1") != 0) {
        rc = so_load_memfd(bytes, n, what, handle);
        if (rc <= 0) return rc;
    }
    return so_load_file(bytes, n, what, handle);
}

void kiln__so_unload(void *handle) {
    if (!handle) return;
    int fd = -1;
    pthread_mutex_lock(&so_lock);
    for (int i = 0; i < so_nlive; i++) {
        if (so_live[i].handle == handle) {
            fd = so_live[i].fd;
            so_live[i] = so_live[--so_nlive];
            break;
        }
    }
    if (so_nlive == 0) {
        kiln__free(so_live);
        so_live = NULL;
        so_caplive = 0;
    }
    pthread_mutex_unlock(&so_lock);
    dlclose(handle);
    if (fd >= 0) close(fd);
}
