/*
 * out_file.h — how libkiln writes a file at a path the user named (engine
 * files, timing caches).
 *
 * A regular file (or a path that does not exist yet) is written to
 * "<path>.tmp.<pid>.<n>" beside it and renamed over it when complete and
 * synced, so a crash or a failed write never leaves a truncated file and
 * never destroys the file that was there.  A symbolic link is followed: the
 * file it points to is replaced (or created, where the link dangles) the
 * same way, the link stays a link.
 * Anything else that exists (a character device such as /dev/null, a FIFO,
 * a socket) is opened and written in place: renaming over it would replace
 * a device node with a regular file (as root, `kiln build -o /dev/null`
 * used to turn /dev/null into a file).  A directory is refused.
 *
 *   kiln__out_file o;
 *   int rc = kiln__out_open(&o, path, "engine");      // opens o.fd
 *   ... write(o.fd, ...) ...   (errors name o.write_path)
 *   rc = kiln__out_close(&o, rc);  // rc == 0: sync + rename; else unlink the temp file
 *
 * kiln__out_open sets kiln_errmsg() ("cannot write <what> '<path>': ...")
 * on failure and leaves nothing to close.  kiln__out_close always releases
 * the descriptor and the strings, returns rc when it was non-zero, else
 * the first failure of fsync/close/rename (with its message).
 */
#ifndef KILN_CORE_OUT_FILE_H
#define KILN_CORE_OUT_FILE_H

typedef struct kiln__out_file {
    int fd;
    const char *what;  /* "engine", "timing cache": for messages */
    char *path;        /* the file finally written (a symlink's target) */
    char *tmp;         /* the temporary file renamed over path; NULL: in place */
    char *write_path;  /* tmp, or path: what the writes go to */
} kiln__out_file;

int kiln__out_open(kiln__out_file *o, const char *path, const char *what);
int kiln__out_close(kiln__out_file *o, int rc);

#endif
