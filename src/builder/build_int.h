/*
 * build_int.h — declarations shared by the files of src/build only.
 */
#ifndef KILN_BUILD_INT_H
#define KILN_BUILD_INT_H

#include "kiln_int.h"

typedef struct kiln__profile {
    char *input;
    int ndim;
    int64_t min[KILN_MAX_DIMS], opt[KILN_MAX_DIMS], max[KILN_MAX_DIMS];
} kiln__profile;

struct kiln_build_config {
    unsigned flags;
    int threads;
    int reps;
    kiln_device_kind device;
    char *cache_path;
    kiln__profile *profiles;
    int nprofiles;
};

const kiln__profile *kiln__config_profile(const kiln_build_config *cfg, const char *input);

/* ------------------------------------------------------------ timing cache */
typedef struct kiln__tcache kiln__tcache;
kiln__tcache *kiln__tcache_create(void);
void kiln__tcache_free(kiln__tcache *c);
/* Read entries from `path` (missing file: nothing; other device signature or
 * a corrupt file: ignored with a WARN).  Never fails hard. */
void kiln__tcache_load(kiln__tcache *c, const char *path);
/* Write the entries atomically (temp file + rename), all but transient
 * failures. */
int kiln__tcache_save(const kiln__tcache *c, const char *path);
/* Lookup: 1 and *ms set when present; *from_build = 1 when it was added in
 * this process by kiln__tcache_put (not loaded from a file). */
int kiln__tcache_get(const kiln__tcache *c, const char *key, double *ms, int *from_build);
int kiln__tcache_put(kiln__tcache *c, const char *key, double ms);
/* A candidate that failed (its time reads -1).  transient = 1 (out of
 * memory, a device or I/O error: it may pass next time): this process
 * remembers it, the file does not. */
int kiln__tcache_put_failed(kiln__tcache *c, const char *key, int transient);
int kiln__tcache_count(const kiln__tcache *c);
/* The device signature entries are valid for (default: the CPU's); a CUDA
 * build sets "<cpu> + cuda:<GPU name>:sm_XY:driver N + cudnn <version>". */
int kiln__tcache_set_device(kiln__tcache *c, const char *sig);

#endif
