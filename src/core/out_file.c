/*
 * out_file.c — writing a file at a user's path: a temporary file renamed
 * over a regular file, in place on a device or FIFO (out_file.h).
 */
#include "core/out_file.h"

#include "kiln_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void out_free(kiln__out_file *o) {
    kiln__free(o->path);
    kiln__free(o->tmp);
    o->path = o->tmp = o->write_path = NULL;
    o->fd = -1;
}

int kiln__out_open(kiln__out_file *o, const char *path, const char *what) {
    memset(o, 0, sizeof *o);
    o->fd = -1;
    o->what = what;
    struct stat st, lst;
    const int exists = stat(path, &st) == 0;
    if (exists && S_ISDIR(st.st_mode))
        return kiln__err(KILN_EIO, "cannot save %s to '%s': it is a directory (expected a file path)", what, path);
    if (exists && !S_ISREG(st.st_mode)) { /* /dev/null, a FIFO: written in place, never replaced */
        o->path = kiln__strdup(path);
        if (!o->path) return kiln__err(KILN_ENOMEM, "out of memory saving %s '%s'", what, path);
        o->write_path = o->path;
        o->fd = open(path, O_WRONLY | O_CLOEXEC);
        if (o->fd < 0) {
            int rc = kiln__err(KILN_EIO, "cannot save %s to '%s': %s", what, path, strerror(errno));
            out_free(o);
            return rc;
        }
        return 0;
    }
    /* A symlink: the file it names is replaced (or created, where the link
     * dangles, as a shell's `>` would), the link kept. */
    char *target = NULL;
    if (lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode)) {
        char *real = exists ? realpath(path, NULL) : NULL;
        char link[PATH_MAX];
        ssize_t k = exists ? 0 : readlink(path, link, sizeof link - 1);
        if (real) {
            target = kiln__strdup(real);
            free(real);
        } else if (k > 0) { /* dangling: its target as the link names it, relative to the link's folder */
            link[k] = 0;
            const char *slash = strrchr(path, '/');
            target = link[0] == '/' || !slash ? kiln__strdup(link)
                                              : kiln__strfmt("%.*s/%s", (int)(slash - path), path, link);
        } else {
            return kiln__err(KILN_EIO, "cannot save %s to '%s': resolving the link: %s", what, path,
                             strerror(errno));
        }
    } else {
        target = kiln__strdup(path);
    }
    if (!target) return kiln__err(KILN_ENOMEM, "out of memory saving %s '%s'", what, path);
    static _Atomic unsigned seq; /* concurrent saves in one process never share a temp file */
    o->path = target;
    o->tmp = kiln__strfmt("%s.tmp.%ld.%u", target, (long)getpid(), seq++);
    if (!o->tmp) {
        out_free(o);
        return kiln__err(KILN_ENOMEM, "out of memory saving %s '%s'", what, path);
    }
    o->write_path = o->tmp;
    o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (o->fd < 0) {
        int rc = kiln__err(KILN_EIO, "cannot save %s to '%s': creating '%s': %s", what, path, o->tmp, strerror(errno));
        out_free(o);
        return rc;
    }
    return 0;
}

int kiln__out_close(kiln__out_file *o, int rc) {
    if (!o->tmp) { /* in place: nothing to sync (fsync fails on /dev/null) or rename */
        if (close(o->fd) != 0 && !rc) rc = kiln__err(KILN_EIO, "close '%s': %s", o->path, strerror(errno));
        out_free(o);
        return rc;
    }
    if (!rc && fsync(o->fd) != 0) rc = kiln__err(KILN_EIO, "fsync '%s': %s", o->tmp, strerror(errno));
    if (close(o->fd) != 0 && !rc) rc = kiln__err(KILN_EIO, "close '%s': %s", o->tmp, strerror(errno));
    if (!rc && rename(o->tmp, o->path) != 0)
        rc = kiln__err(KILN_EIO, "rename '%s' -> '%s': %s", o->tmp, o->path, strerror(errno));
    if (rc) {
        unlink(o->tmp);
    } else { /* make the rename itself durable (best effort) */
        char *slash = strrchr(o->tmp, '/');
        if (slash) *slash = 0;
        int dfd = open(slash ? (slash == o->tmp ? "/" : o->tmp) : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
    out_free(o);
    return rc;
}
