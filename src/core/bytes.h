/*
 * bytes.h — the little-endian byte codec behind every binary record kiln
 * writes and reads back: the engine file (engine/file.c), attribute blobs
 * (plugin/attrs.c), AOT kernel records (plugin/aot.c) and sub-engine states
 * (ops/controlflow/subengine.c).
 *
 * Writer: a kiln__wbuf either grows its own buffer (kiln__w_init; free
 * w->p with kiln__free when done) or fills a caller's buffer of fixed size
 * (kiln__w_init_fixed; buf NULL only measures).  Writes past a fixed
 * buffer's end are counted, never performed, so one pass with buf NULL and
 * a second with a buffer of w->n bytes is the "ask the size" idiom.  An
 * allocation failure sets w->oom; later writes do nothing.
 *
 * Reader: a kiln__rbuf never reads past its end.  The first failure sets
 * kiln_errmsg() to "<what> [<name>] (offset N): <field>: <problem>" and is kept in
 * r->err (a negative KILN_E* code); every later read returns 0/NULL and
 * leaves the message alone, so a parser may read a whole record and check
 * r->err once.  Readers of attacker-controlled files (engine files) rely on
 * this: no read trusts a length before checking it against what is left.
 *
 * Internal to libkiln; this header only needs <stddef.h>/<stdint.h>, so
 * op families may include it without the rest of kiln_int.h.
 */
#ifndef KILN_CORE_BYTES_H
#define KILN_CORE_BYTES_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------ writer */
typedef struct kiln__wbuf {
    uint8_t *p;
    size_t n;    /* bytes written (or, past a fixed buffer, needed) */
    size_t cap;
    int fixed;   /* p is the caller's (kiln__w_init_fixed) */
    int oom;     /* a growable buffer could not grow */
} kiln__wbuf;

void kiln__w_init(kiln__wbuf *w);
void kiln__w_init_fixed(kiln__wbuf *w, void *buf, size_t cap);
void kiln__w_bytes(kiln__wbuf *w, const void *src, size_t n);
void kiln__w_le(kiln__wbuf *w, uint64_t v, int bytes); /* low `bytes` bytes of v */
static inline void kiln__w_u8(kiln__wbuf *w, uint8_t v) { kiln__w_le(w, v, 1); }
static inline void kiln__w_u16(kiln__wbuf *w, uint16_t v) { kiln__w_le(w, v, 2); }
static inline void kiln__w_u32(kiln__wbuf *w, uint32_t v) { kiln__w_le(w, v, 4); }
static inline void kiln__w_i32(kiln__wbuf *w, int32_t v) { kiln__w_le(w, (uint32_t)v, 4); }
static inline void kiln__w_u64(kiln__wbuf *w, uint64_t v) { kiln__w_le(w, v, 8); }
static inline void kiln__w_i64(kiln__wbuf *w, int64_t v) { kiln__w_le(w, (uint64_t)v, 8); }
void kiln__w_f64(kiln__wbuf *w, double v);
/* A string as a `len_bytes`-byte length (2, 4 or 8) then its bytes, no
 * terminator; NULL writes an empty string. */
void kiln__w_str(kiln__wbuf *w, const char *s, int len_bytes);
/* count elements of es bytes each, each stored little-endian. */
void kiln__w_elems(kiln__wbuf *w, const void *data, size_t count, size_t es);
/* Zero bytes up to a multiple of align. */
void kiln__w_pad(kiln__wbuf *w, size_t align);

/* ------------------------------------------------------------ reader */
typedef struct kiln__rbuf {
    const uint8_t *p;
    size_t n, at;     /* size and read position */
    size_t base;      /* offset of p[0] in what messages count from */
    const char *what; /* "attribute blob", "section", ... */
    const char *name; /* optional, after what: "LAYERS" */
    const char *unit; /* "offset" (default) or e.g. "file offset" */
    int err;          /* first failure (negative KILN_E* code), 0 */
} kiln__rbuf;

void kiln__r_init(kiln__rbuf *r, const void *p, size_t n, const char *what);
/* Fail at offset `at` (or the read position: kiln__r_fail) with a
 * formatted problem; only the first failure is kept.  Returns r->err. */
int kiln__r_fail_at(kiln__rbuf *r, size_t at, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define kiln__r_fail(r, status, ...) kiln__r_fail_at((r), (r)->at, (status), __VA_ARGS__)
/* 0 when k more bytes can be read, else the failure (KILN_EFORMAT). */
int kiln__r_need(kiln__rbuf *r, size_t k, const char *field);
static inline size_t kiln__r_left(const kiln__rbuf *r) { return r->n - r->at; }
uint64_t kiln__r_le(kiln__rbuf *r, int bytes, const char *field);
static inline uint8_t kiln__r_u8(kiln__rbuf *r, const char *f) { return (uint8_t)kiln__r_le(r, 1, f); }
static inline uint16_t kiln__r_u16(kiln__rbuf *r, const char *f) { return (uint16_t)kiln__r_le(r, 2, f); }
static inline uint32_t kiln__r_u32(kiln__rbuf *r, const char *f) { return (uint32_t)kiln__r_le(r, 4, f); }
static inline int32_t kiln__r_i32(kiln__rbuf *r, const char *f) { return (int32_t)(uint32_t)kiln__r_le(r, 4, f); }
static inline uint64_t kiln__r_u64(kiln__rbuf *r, const char *f) { return kiln__r_le(r, 8, f); }
static inline int64_t kiln__r_i64(kiln__rbuf *r, const char *f) { return (int64_t)kiln__r_le(r, 8, f); }
double kiln__r_f64(kiln__rbuf *r, const char *field);
/* The next len bytes in place (advances), NULL on failure or len 0. */
const uint8_t *kiln__r_span(kiln__rbuf *r, uint64_t len, const char *field);
/* A kiln__malloc'd copy of the next len bytes; NULL on failure or len 0. */
uint8_t *kiln__r_copy(kiln__rbuf *r, uint64_t len, const char *field);
/* A string written by kiln__w_str with the same len_bytes: at most max
 * bytes, no NUL inside; kiln__malloc'd and terminated. */
char *kiln__r_str(kiln__rbuf *r, int len_bytes, size_t max, const char *field);
/* count elements of es bytes written by kiln__w_elems into dst. */
int kiln__r_elems(kiln__rbuf *r, void *dst, uint64_t count, size_t es, const char *field);
/* A u32 count of records of at least min_rec bytes each, at most max:
 * checked against what is left, so a corrupt count cannot ask for a huge
 * allocation. */
uint32_t kiln__r_count(kiln__rbuf *r, size_t min_rec, uint32_t max, const char *field);
/* 1 when lo <= v < hi, else 0 and a failure at offset `at` naming field
 * and range (also 0 after an earlier failure). */
int kiln__r_check(kiln__rbuf *r, int64_t v, int64_t lo, int64_t hi, const char *field, size_t at);
/* Fails when bytes are left unread (a record longer than its parser). */
int kiln__r_end(kiln__rbuf *r);

#endif
