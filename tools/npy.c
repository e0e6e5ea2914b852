/*
 * npy.c — NumPy .npy files (format versions 1.0, 2.0, 3.0), and ONNX
 * TensorProto (.pb) files through the importer, as host tensors.
 *
 * Layout: "\x93NUMPY", major, minor, header length (u16 for 1.x, u32 for
 * 2.x/3.x, little-endian), then an ASCII dict literal
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * padded with spaces and '\n' so that the data starts 64-byte aligned.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kiln/onnx.h>

#include "cli.h"

/* The ONNX importer may be absent from a partial build: weak reference. */
#pragma weak kiln_onnx_read_tensor

static const struct {
    const char *descr; /* without the byte-order character */
    kiln_dtype dtype;
} npy_types[] = {
    {"f4", KILN_DTYPE_F32}, {"f2", KILN_DTYPE_F16}, {"f8", KILN_DTYPE_F64},
    {"i1", KILN_DTYPE_I8},  {"i2", KILN_DTYPE_I16}, {"i4", KILN_DTYPE_I32},
    {"i8", KILN_DTYPE_I64}, {"u1", KILN_DTYPE_U8},  {"u2", KILN_DTYPE_U16},
    {"u4", KILN_DTYPE_U32}, {"u8", KILN_DTYPE_U64}, {"b1", KILN_DTYPE_BOOL},
};

/* Find `'key':` in the header dict and return what follows (spaces skipped). */
static const char *dict_value(const char *h, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(h, pat);
    if (!p) {
        snprintf(pat, sizeof pat, "\"%s\"", key);
        p = strstr(h, pat);
    }
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

__attribute__((format(printf, 3, 4))) static int npy_err(char *err, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return -1;
}
#define ERR(...) npy_err(err, errsize, __VA_ARGS__)

int npy_read(const char *path, cli_tensor *t, char *err, size_t errsize) {
    memset(t, 0, sizeof *t);
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; only regular
     * files are read (their size bounds what the header may claim). */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return ERR("%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ERR("%s: %s, expected a regular .npy file", path,
                   S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return ERR("%s: %s", path, strerror(errno));
    }
    unsigned char pre[12];
    char *h = NULL;
    int rc = -1;
    if (fread(pre, 1, 10, f) != 10 || memcmp(pre, "\x93NUMPY", 6)) {
        ERR("%s: not a .npy file (expected the magic \\x93NUMPY)", path);
        goto out;
    }
    int major = pre[6];
    size_t hlen, off;
    if (major == 1) {
        hlen = pre[8] | (size_t)pre[9] << 8;
        off = 10;
    } else if (major == 2 || major == 3) {
        if (fread(pre + 10, 1, 2, f) != 2) {
            ERR("%s: truncated header", path);
            goto out;
        }
        hlen = pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 | (size_t)pre[11] << 24;
        off = 12;
    } else {
        ERR("%s: .npy format version %d.%d unsupported (expected 1.x, 2.x or 3.x)", path, major, pre[7]);
        goto out;
    }
    if (hlen > (1u << 24)) {
        ERR("%s: header length %zu is implausible", path, hlen);
        goto out;
    }
    h = calloc(hlen + 8, 1); /* zero slack: the parser may look a few bytes past the end */
    if (!h) {
        ERR("%s: out of memory for a %zu-byte header", path, hlen);
        goto out;
    }
    if (fread(h, 1, hlen, f) != hlen) {
        ERR("%s: truncated header (expected %zu bytes)", path, hlen);
        goto out;
    }
    h[hlen] = 0;
    const size_t data_off = off + hlen; /* hlen shrinks below */
    /* Messages quote the header on one line: no padding, no control bytes. */
    while (hlen > 0 && (h[hlen - 1] == ' ' || h[hlen - 1] == '\n')) h[--hlen] = 0;
    for (size_t k = 0; k < hlen; k++)
        if ((unsigned char)h[k] < 0x20) h[k] = ' ';
    const char *d = dict_value(h, "descr"), *fo = dict_value(h, "fortran_order"),
               *sh = dict_value(h, "shape");
    if (!d || !fo || !sh || (*d != '\'' && *d != '"')) {
        ERR("%s: header lacks descr/fortran_order/shape: %s", path, h);
        goto out;
    }
    char order = d[1];
    const char *code = d + 2;
    if (order == '>' ? code[1] != '1' : (order != '<' && order != '|' && order != '=')) {
        ERR("%s: byte order '%c' in descr %.6s unsupported (expected little-endian '<')", path, order, d);
        goto out;
    }
    t->dtype = KILN_DTYPE_UNDEFINED;
    for (size_t k = 0; k < sizeof npy_types / sizeof npy_types[0]; k++)
        if (!strncmp(code, npy_types[k].descr, 2) && (code[2] == '\'' || code[2] == '"'))
            t->dtype = npy_types[k].dtype;
    if (!t->dtype) {
        ERR("%s: dtype %.6s unsupported (expected f2/f4/f8, i1..i8, u1..u8 or b1)", path, d);
        goto out;
    }
    if (!strncmp(fo, "True", 4)) {
        ERR("%s: fortran_order=True unsupported (save with C order)", path);
        goto out;
    }
    if (*sh != '(') {
        ERR("%s: malformed shape in header: %s", path, h);
        goto out;
    }
    const char *shape_txt = sh++;
    size_t n = 1;
    while (1) {
        while (*sh == ' ' || *sh == ',') sh++;
        if (*sh == ')') break;
        char *e;
        long long v = strtoll(sh, &e, 10);
        if (e == sh || v < 0 || t->ndim == KILN_MAX_DIMS) {
            ERR("%s: malformed shape (or rank > %d) in header: %s", path, KILN_MAX_DIMS, h);
            goto out;
        }
        if (v && n > (SIZE_MAX / 16) / (size_t)v) {
            ERR("%s: the header's shape is too large (over %zu bytes): %s", path, SIZE_MAX / 16, h);
            goto out;
        }
        t->dims[t->ndim++] = v;
        n *= (size_t)v;
        sh = e;
        while (*sh == 'L') sh++;
    }
    t->bytes = n * kiln_dtype_size(t->dtype);
    /* The header's shape is only a claim: the file must hold that many
     * bytes before anything is allocated for them. */
    uint64_t avail = (uint64_t)st.st_size > data_off ? (uint64_t)st.st_size - data_off : 0;
    if (t->bytes > avail) {
        ERR("%s: the header's shape %.*s needs %zu data bytes, the file has %llu after the %zu-byte header", path,
            (int)(sh - shape_txt + 1), shape_txt, t->bytes, (unsigned long long)avail, data_off);
        goto out;
    }
    t->data = malloc(t->bytes ? t->bytes : 1);
    if (!t->data) {
        ERR("%s: out of memory for %zu data bytes", path, t->bytes);
        goto out;
    }
    if (fread(t->data, 1, t->bytes, f) != t->bytes) {
        ERR("%s: expected %zu data bytes after the %zu-byte header, file is shorter", path, t->bytes,
            data_off);
        goto out;
    }
    rc = 0;
out:
    if (rc) {
        free(t->data);
        t->data = NULL;
    }
    free(h);
    fclose(f);
    return rc;
}

int npy_write(const char *path, kiln_dtype dtype, int ndim, const int64_t *dims,
              const void *data) {
    const char *code = NULL;
    for (size_t k = 0; k < sizeof npy_types / sizeof npy_types[0]; k++)
        if (npy_types[k].dtype == dtype) code = npy_types[k].descr;
    if (!code) {
        errno = EINVAL;
        return -1;
    }
    char dict[512];
    int len = snprintf(dict, sizeof dict, "{'descr': '%c%s', 'fortran_order': False, 'shape': (",
                       code[1] == '1' ? '|' : '<', code);
    size_t n = 1;
    for (int i = 0; i < ndim; i++) {
        len += snprintf(dict + len, sizeof dict - (size_t)len, "%lld%s", (long long)dims[i],
                        ndim == 1 ? "," : i + 1 < ndim ? ", " : "");
        n *= (size_t)dims[i];
    }
    len += snprintf(dict + len, sizeof dict - (size_t)len, "), }");
    int v1 = 10 + len + 1 <= 65535;
    size_t pre = v1 ? 10 : 12, total = pre + (size_t)len + 1;
    size_t pad = (64 - total % 64) % 64, hlen = (size_t)len + pad + 1;
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    unsigned char p[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', v1 ? 1 : 2, 0};
    if (v1) {
        p[8] = hlen & 0xff;
        p[9] = hlen >> 8 & 0xff;
    } else {
        for (int i = 0; i < 4; i++) p[8 + i] = hlen >> (8 * i) & 0xff;
    }
    int ok = fwrite(p, 1, pre, f) == pre && fwrite(dict, 1, (size_t)len, f) == (size_t)len;
    for (size_t i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    size_t bytes = n * kiln_dtype_size(dtype);
    ok = ok && fwrite(data, 1, bytes, f) == bytes;
    if (fclose(f) || !ok) return -1;
    return 0;
}

int cli_tensor_read(const char *path, cli_tensor *t, char *err, size_t errsize) {
    size_t l = strlen(path);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        memset(t, 0, sizeof *t);
        return ERR("%s: is a directory, expected a .npy or .pb tensor file", path);
    }
    if (l > 3 && !strcmp(path + l - 3, ".pb")) {
        memset(t, 0, sizeof *t);
        if (!kiln_onnx_read_tensor) return ERR("%s: this kiln has no ONNX support to read .pb", path);
        void *data = NULL;
        int rc = kiln_onnx_read_tensor(path, &t->dtype, &t->ndim, t->dims, &data);
        if (rc) return ERR("%s", kiln_errmsg());
        size_t n = 1;
        for (int i = 0; i < t->ndim; i++) n *= (size_t)t->dims[i];
        t->bytes = n * kiln_dtype_size(t->dtype);
        t->data = malloc(t->bytes ? t->bytes : 1);
        memcpy(t->data, data, t->bytes);
        kiln_free(data);
        return 0;
    }
    return npy_read(path, t, err, errsize);
}

/* out->data = a malloc'd copy of n bytes at p. */
static int copy_part(cli_tensor *out, const void *p, size_t n) {
    out->bytes = n;
    out->data = malloc(n ? n : 1);
    if (!out->data) return -1;
    if (n) memcpy(out->data, p, n);
    return 0;
}

int cli_value_read(const char *path, int is_str, int parts, kiln_dtype want, int64_t rank, cli_tensor *out,
                   char *err, size_t errsize) {
    memset(out, 0, (size_t)parts * sizeof *out);
    int rc = 0;
    if (is_str) {
        int64_t *lens = NULL;
        void *bytes = NULL;
        size_t nb = 0;
        if ((rc = kiln_onnx_read_strings(path, &out[1].ndim, out[1].dims, &lens, &bytes, &nb)))
            return ERR("%s", kiln_errmsg()), rc;
        size_t n = 1;
        for (int d = 0; d < out[1].ndim; d++) n *= (size_t)out[1].dims[d];
        out[0].dtype = KILN_DTYPE_U8;
        out[0].ndim = 1;
        out[0].dims[0] = (int64_t)nb;
        out[1].dtype = KILN_DTYPE_I64;
        rc = copy_part(&out[0], bytes, nb) || copy_part(&out[1], lens, n * sizeof(int64_t));
        kiln_free(lens);
        kiln_free(bytes);
    } else {
        kiln_onnx_sequence q;
        if ((rc = kiln_onnx_read_sequence(path, &q))) return ERR("%s", kiln_errmsg()), rc;
        out[0].dtype = q.dtype != KILN_DTYPE_UNDEFINED ? q.dtype : want;
        out[0].ndim = 1;
        out[0].dims[0] = (int64_t)(q.bytes / (kiln_dtype_size(out[0].dtype) ? kiln_dtype_size(out[0].dtype) : 1));
        out[1].dtype = KILN_DTYPE_I64;
        out[1].ndim = 2;
        out[1].dims[0] = q.count;
        out[1].dims[1] = q.rank >= 0 ? q.rank : rank > 0 ? rank : 0;
        rc = copy_part(&out[0], q.data, q.bytes) ||
             copy_part(&out[1], q.shapes, (size_t)(q.count * out[1].dims[1]) * sizeof(int64_t));
        if (!rc && parts > 2) {
            uint8_t present = (uint8_t)(q.nested ? q.present : q.count > 0);
            out[2].dtype = KILN_DTYPE_BOOL;
            rc = copy_part(&out[2], &present, 1);
        }
        kiln_onnx_sequence_free(&q);
    }
    if (rc) {
        for (int k = 0; k < parts; k++) free(out[k].data);
        return ERR("%s: out of memory", path);
    }
    return 0;
}

double cli_tensor_get(kiln_dtype dtype, const void *data, size_t i) {
    switch (dtype) {
    case KILN_DTYPE_F32: return ((const float *)data)[i];
    case KILN_DTYPE_F64: return ((const double *)data)[i];
    case KILN_DTYPE_F16: return kiln_f16_to_f32(((const uint16_t *)data)[i]);
    case KILN_DTYPE_BF16: return kiln_bf16_to_f32(((const uint16_t *)data)[i]);
    case KILN_DTYPE_I8: return ((const int8_t *)data)[i];
    case KILN_DTYPE_I16: return ((const int16_t *)data)[i];
    case KILN_DTYPE_I32: return ((const int32_t *)data)[i];
    case KILN_DTYPE_I64: return (double)((const int64_t *)data)[i];
    case KILN_DTYPE_U8: case KILN_DTYPE_BOOL: return ((const uint8_t *)data)[i];
    case KILN_DTYPE_U16: return ((const uint16_t *)data)[i];
    case KILN_DTYPE_U32: return ((const uint32_t *)data)[i];
    case KILN_DTYPE_U64: return (double)((const uint64_t *)data)[i];
    default: return 0;
    }
}

void cli_convert(kiln_dtype to, void *dst, kiln_dtype from, const void *src, size_t n) {
    if (to == from) {
        memcpy(dst, src, n * kiln_dtype_size(to));
        return;
    }
    for (size_t i = 0; i < n; i++) {
        double v = cli_tensor_get(from, src, i);
        switch (to) {
        case KILN_DTYPE_F32: ((float *)dst)[i] = (float)v; break;
        case KILN_DTYPE_F64: ((double *)dst)[i] = v; break;
        case KILN_DTYPE_F16: ((uint16_t *)dst)[i] = kiln_f32_to_f16((float)v); break;
        case KILN_DTYPE_BF16: ((uint16_t *)dst)[i] = kiln_f32_to_bf16((float)v); break;
        case KILN_DTYPE_I8: ((int8_t *)dst)[i] = (int8_t)v; break;
        case KILN_DTYPE_I16: ((int16_t *)dst)[i] = (int16_t)v; break;
        case KILN_DTYPE_I32: ((int32_t *)dst)[i] = (int32_t)v; break;
        case KILN_DTYPE_I64:
            /* keep exact int64 values (doubles lose precision above 2^53) */
            ((int64_t *)dst)[i] = from == KILN_DTYPE_U64 ? (int64_t)((const uint64_t *)src)[i]
                                  : (int64_t)v;
            break;
        case KILN_DTYPE_U8: ((uint8_t *)dst)[i] = (uint8_t)v; break;
        case KILN_DTYPE_BOOL: ((uint8_t *)dst)[i] = v != 0; break;
        case KILN_DTYPE_U16: ((uint16_t *)dst)[i] = (uint16_t)v; break;
        case KILN_DTYPE_U32: ((uint32_t *)dst)[i] = (uint32_t)v; break;
        case KILN_DTYPE_U64: ((uint64_t *)dst)[i] = (uint64_t)v; break;
        default: break;
        }
    }
}
