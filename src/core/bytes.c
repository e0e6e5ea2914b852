/*
 * bytes.c — the little-endian byte codec (see bytes.h): one writer and one
 * bounds-checked reader for the engine file, attribute blobs, AOT kernel
 * records and sub-engine states, which each had their own before.
 */
#include "core/bytes.h"

#include "kiln_int.h"

#include <stdio.h>

/* ------------------------------------------------------------ writer */

void kiln__w_init(kiln__wbuf *w) { memset(w, 0, sizeof *w); }

void kiln__w_init_fixed(kiln__wbuf *w, void *buf, size_t cap) {
    memset(w, 0, sizeof *w);
    w->p = buf;
    w->cap = buf ? cap : 0;
    w->fixed = 1;
}

void kiln__w_bytes(kiln__wbuf *w, const void *src, size_t n) {
    if (w->oom) return;
    if (w->fixed) {
        /* count always; copy only what fits (the caller compares w->n) */
        if (w->p && n && w->n <= w->cap && n <= w->cap - w->n) memcpy(w->p + w->n, src, n);
        w->n += n;
        return;
    }
    if (n > SIZE_MAX - w->n) {
        w->oom = 1;
        return;
    }
    if (w->n + n > w->cap) {
        size_t c = w->cap ? w->cap : 256;
        while (c < w->n + n) c = c > SIZE_MAX / 2 ? w->n + n : c * 2;
        uint8_t *q = kiln__realloc(w->p, c);
        if (!q) {
            w->oom = 1;
            return;
        }
        w->p = q;
        w->cap = c;
    }
    if (n) memcpy(w->p + w->n, src, n);
    w->n += n;
}

void kiln__w_le(kiln__wbuf *w, uint64_t v, int bytes) {
    uint8_t b[8];
    for (int i = 0; i < bytes; i++) b[i] = (uint8_t)(v >> (8 * i));
    kiln__w_bytes(w, b, (size_t)bytes);
}

void kiln__w_f64(kiln__wbuf *w, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    kiln__w_le(w, u, 8);
}

void kiln__w_str(kiln__wbuf *w, const char *s, int len_bytes) {
    size_t n = s ? strlen(s) : 0;
    kiln__w_le(w, n, len_bytes);
    kiln__w_bytes(w, s, n);
}

void kiln__w_elems(kiln__wbuf *w, const void *data, size_t count, size_t es) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    const uint8_t *p = data;
    for (size_t k = 0; k < count; k++)
        for (size_t b = 0; b < es; b++) kiln__w_bytes(w, &p[k * es + es - 1 - b], 1);
#else
    kiln__w_bytes(w, data, count * es);
#endif
}

void kiln__w_pad(kiln__wbuf *w, size_t align) {
    static const uint8_t z[64];
    while (!w->oom && w->n % align) {
        size_t k = align - w->n % align;
        kiln__w_bytes(w, z, k < sizeof z ? k : sizeof z);
    }
}

/* ------------------------------------------------------------ reader */

void kiln__r_init(kiln__rbuf *r, const void *p, size_t n, const char *what) {
    memset(r, 0, sizeof *r);
    r->p = p;
    r->n = p ? n : 0;
    r->what = what;
    r->unit = "offset";
}

int kiln__r_fail_at(kiln__rbuf *r, size_t at, int status, const char *fmt, ...) {
    if (r->err) return r->err;
    char m[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    r->err = kiln__err(status, "%s%s%s (%s %zu): %s", r->what ? r->what : "record",
                       r->name ? " " : "", r->name ? r->name : "", r->unit ? r->unit : "offset",
                       r->base + at, m);
    return r->err;
}

int kiln__r_need(kiln__rbuf *r, size_t k, const char *field) {
    if (r->err) return r->err;
    if (k > r->n - r->at)
        return kiln__r_fail(r, KILN_EFORMAT, "%s: needs %zu bytes, %zu left", field, k, r->n - r->at);
    return 0;
}

uint64_t kiln__r_le(kiln__rbuf *r, int bytes, const char *field) {
    if (kiln__r_need(r, (size_t)bytes, field)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)r->p[r->at + (size_t)i] << (8 * i);
    r->at += (size_t)bytes;
    return v;
}

double kiln__r_f64(kiln__rbuf *r, const char *field) {
    uint64_t u = kiln__r_le(r, 8, field);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

const uint8_t *kiln__r_span(kiln__rbuf *r, uint64_t len, const char *field) {
    if (kiln__r_need(r, len > SIZE_MAX ? SIZE_MAX : (size_t)len, field) || len == 0) return NULL;
    const uint8_t *s = r->p + r->at;
    r->at += (size_t)len;
    return s;
}

uint8_t *kiln__r_copy(kiln__rbuf *r, uint64_t len, const char *field) {
    size_t at0 = r->at;
    const uint8_t *s = kiln__r_span(r, len, field);
    if (!s) return NULL;
    uint8_t *b = kiln__malloc((size_t)len);
    if (!b) {
        kiln__r_fail_at(r, at0, KILN_ENOMEM, "%s: out of memory for %llu bytes", field,
                        (unsigned long long)len);
        return NULL;
    }
    memcpy(b, s, (size_t)len);
    return b;
}

char *kiln__r_str(kiln__rbuf *r, int len_bytes, size_t max, const char *field) {
    size_t at0 = r->at;
    uint64_t len = kiln__r_le(r, len_bytes, field);
    if (r->err) return NULL;
    if (len > max) {
        kiln__r_fail_at(r, at0, KILN_EFORMAT, "%s: string length %llu exceeds %zu", field,
                        (unsigned long long)len, max);
        return NULL;
    }
    if (kiln__r_need(r, (size_t)len, field)) return NULL;
    if (memchr(r->p + r->at, 0, (size_t)len)) {
        kiln__r_fail(r, KILN_EFORMAT, "%s: string holds a NUL byte", field);
        return NULL;
    }
    char *s = kiln__malloc((size_t)len + 1);
    if (!s) {
        kiln__r_fail(r, KILN_ENOMEM, "%s: out of memory", field);
        return NULL;
    }
    memcpy(s, r->p + r->at, (size_t)len);
    s[len] = 0;
    r->at += (size_t)len;
    return s;
}

int kiln__r_elems(kiln__rbuf *r, void *dst, uint64_t count, size_t es, const char *field) {
    if (es && count > (r->n - r->at) / es)
        return kiln__r_fail(r, KILN_EFORMAT, "%s: %llu elements of %zu bytes, %zu bytes left", field,
                            (unsigned long long)count, es, r->n - r->at);
    if (r->err) return r->err;
    size_t n = (size_t)count * es;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    uint8_t *d = dst;
    for (size_t k = 0; k < (size_t)count; k++)
        for (size_t b = 0; b < es; b++) d[k * es + es - 1 - b] = r->p[r->at + k * es + b];
#else
    if (n) memcpy(dst, r->p + r->at, n);
#endif
    r->at += n;
    return 0;
}

uint32_t kiln__r_count(kiln__rbuf *r, size_t min_rec, uint32_t max, const char *field) {
    size_t at0 = r->at;
    uint32_t n = kiln__r_u32(r, field);
    if (r->err) return 0;
    if (n > max || (min_rec && n > (r->n - r->at) / min_rec)) {
        kiln__r_fail_at(r, at0, KILN_EFORMAT, "%s: count %u does not fit (max %u, %zu bytes left)",
                        field, n, max, r->n - r->at);
        return 0;
    }
    return n;
}

int kiln__r_check(kiln__rbuf *r, int64_t v, int64_t lo, int64_t hi, const char *field, size_t at) {
    if (r->err) return 0;
    if (v < lo || v >= hi) {
        kiln__r_fail_at(r, at, KILN_EFORMAT, "%s = %lld, expected %lld..%lld", field, (long long)v,
                        (long long)lo, (long long)hi - 1);
        return 0;
    }
    return 1;
}

int kiln__r_end(kiln__rbuf *r) {
    if (!r->err && r->at != r->n)
        kiln__r_fail(r, KILN_EFORMAT, "%zu unexpected bytes at the end", r->n - r->at);
    return r->err;
}
