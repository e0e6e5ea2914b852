/*
 * alloc_error.h — the library allocator (alloc.c) and error reporting
 * (error.c): the internal services every module may call, built-in ops
 * included (through ops/common/ops_util.h), without the rest of
 * kiln_int.h.
 */
#ifndef KILN_CORE_ALLOC_ERROR_H
#define KILN_CORE_ALLOC_ERROR_H

#include "kiln/kiln.h"

#include <stddef.h>

/* ---- alloc.c: through the replaceable allocator (kiln_set_allocator) */
void *kiln__malloc(size_t n);
void *kiln__calloc(size_t n, size_t size);
void *kiln__realloc(void *p, size_t n);
void kiln__free(void *p);
char *kiln__strdup(const char *s);
/* printf into a new string (kiln__free it), or NULL out of memory: names
 * built from user names have no length limit but KILN__MAX_NAME's. */
char *kiln__strfmt(const char *fmt, ...) KILN_PRINTF(1, 2);
/* 64-byte aligned allocation (free with kiln__aligned_free). */
void *kiln__aligned_alloc(size_t n);
void kiln__aligned_free(void *p);
/* The array p of *cap elements of elem bytes, grown (capacity doubled,
 * from 16) to hold at least need >= 1 elements; *cap is updated.  Returns
 * the array, moved or not, or NULL with KILN_ENOMEM set (p is then still
 * valid and unchanged). */
void *kiln__grow(void *p, int *cap, int need, size_t elem);

/* ---- error.c */
/* Set the thread's error message and return status (== kiln_set_error). */
int kiln__err(int status, const char *fmt, ...) KILN_PRINTF(2, 3);
/* Prepend "prefix: " to the current message (keeps status); returns status. */
int kiln__err_prefix(int status, const char *fmt, ...) KILN_PRINTF(2, 3);
void kiln__log(kiln_log_level level, const char *fmt, ...) KILN_PRINTF(2, 3);
/* The same whatever the log level (an option the caller set asked for it,
 * e.g. kiln_compile_options.verbose): to the log callback, else stderr. */
void kiln__log_always(kiln_log_level level, const char *fmt, ...) KILN_PRINTF(2, 3);

#endif /* KILN_CORE_ALLOC_ERROR_H */
