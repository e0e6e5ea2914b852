/*
 * reader.c — ONNX protobuf reading: files, a nesting-depth guard in front of
 * protobuf-c (which recurses once per nested message and has no limit), and
 * TensorProto decoding from raw_data, the typed fields or external data.
 * Nothing read from a file is trusted: every length is checked before use.
 */
#include "onnx_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void *pb_alloc(void *ud, size_t n) {
    (void)ud;
    return kiln__malloc(n ? n : 1);
}
static void pb_free(void *ud, void *p) {
    (void)ud;
    kiln__free(p);
}
ProtobufCAllocator kiln__onnx_pb_alloc = {pb_alloc, pb_free, NULL};

/* Open a file for reading only if it is a regular file.  The type is
 * checked on the open descriptor, and the open does not block: a FIFO (or
 * a device) named as a model or as external data used to hang the build
 * in fopen waiting for a writer.  Returns 0, -1 (not a regular file) or an
 * errno value. */
static int open_regular(const char *path, int flags, FILE **f, struct stat *st) {
    *f = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | flags);
    if (fd < 0) return errno ? errno : EIO;
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        close(fd);
        return -1;
    }
    if (!(*f = fdopen(fd, "rb"))) {
        int e = errno ? errno : EIO;
        close(fd);
        return e;
    }
    return 0;
}

/* Open a whole-file read: a regular file within KILN__ONNX_MAX_FILE;
 * *n its size. */
static int open_whole(const char *path, FILE **f, size_t *n) {
    struct stat st;
    int e = open_regular(path, 0, f, &st);
    if (e > 0) return kiln__err(KILN_EIO, "cannot open '%s': %s", path, strerror(e));
    if (e) return kiln__err(KILN_EIO, "'%s' is not a regular file", path);
    if ((uint64_t)st.st_size > KILN__ONNX_MAX_FILE) {
        fclose(*f);
        return kiln__err(KILN_EIO, "'%s' is too large (%lld bytes, limit %llu)", path,
                         (long long)st.st_size, (unsigned long long)KILN__ONNX_MAX_FILE);
    }
    *n = (size_t)st.st_size;
    return 0;
}

int kiln__onnx_read_file(const char *path, uint8_t **buf, size_t *size) {
    *buf = NULL;
    *size = 0;
    FILE *f;
    size_t n;
    int e = open_whole(path, &f, &n);
    if (e) return e;
    uint8_t *b = kiln__malloc(n ? n : 1);
    if (!b) {
        fclose(f);
        return kiln__err(KILN_ENOMEM, "cannot allocate %zu bytes to read '%s'", n, path);
    }
    if (n && fread(b, 1, n, f) != n) {
        kiln__free(b);
        fclose(f);
        return kiln__err(KILN_EIO, "short read on '%s'", path);
    }
    fclose(f);
    *buf = b;
    *size = n;
    return 0;
}

int kiln__onnx_map_file(const char *path, const uint8_t **buf, size_t *size) {
    *buf = NULL;
    *size = 0;
    FILE *f;
    size_t n;
    int e = open_whole(path, &f, &n);
    if (e) return e;
    /* populated at once: one pass over the page cache instead of a fault
     * per page while protobuf-c copies the fields out */
    void *p = n ? mmap(NULL, n, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fileno(f), 0) : NULL;
    e = errno;
    fclose(f);
    if (p == MAP_FAILED) return kiln__err(KILN_EIO, "cannot map '%s' (%zu bytes): %s", path, n, strerror(e));
    *buf = p ? p : (const uint8_t *)"";
    *size = n;
    return 0;
}

void kiln__onnx_unmap_file(const uint8_t *buf, size_t size) {
    if (size) munmap((void *)(uintptr_t)buf, size);
}

/* ------------------------------------------------------------ depth guard */

static int rd_varint(const uint8_t *p, size_t n, size_t *pos, uint64_t *v) {
    uint64_t r = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*pos >= n) return 0;
        uint8_t b = p[(*pos)++];
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return 1;
        }
    }
    return 0;
}

/* 1: p[0..n) is a well-formed message within the depth limit; 0: not a
 * message (a string or bytes field); -1: a message nested too deep (*bad =
 * offset).  flat: only the wire format of this level, nested fields not
 * examined (1 or 0). */
static int walk(const uint8_t *p, size_t n, int depth, size_t off, size_t *bad, int flat) {
    size_t pos = 0;
    while (pos < n) {
        uint64_t tag, v;
        if (!rd_varint(p, n, &pos, &tag)) return 0;
        if ((tag >> 3) == 0 || (tag >> 3) > 0x1fffffff) return 0;
        switch (tag & 7) {
        case 0:
            if (!rd_varint(p, n, &pos, &v)) return 0;
            break;
        case 1:
            if (n - pos < 8) return 0;
            pos += 8;
            break;
        case 5:
            if (n - pos < 4) return 0;
            pos += 4;
            break;
        case 2: {
            if (!rd_varint(p, n, &pos, &v) || v > n - pos) return 0;
            if (v > 0 && !flat) {
                if (depth >= KILN__ONNX_MAX_DEPTH) {
                    /* Only a parseable message below the limit is a problem
                     * (strings and bytes fields are fine). */
                    if (walk(p + pos, (size_t)v, depth, off, bad, 1)) {
                        *bad = off + pos;
                        return -1;
                    }
                } else if (walk(p + pos, (size_t)v, depth + 1, off + pos, bad, 0) < 0) {
                    return -1;
                }
            }
            pos += (size_t)v;
            break;
        }
        default:
            return 0;
        }
    }
    return 1;
}

int kiln__onnx_check_depth(const uint8_t *buf, size_t size) {
    size_t bad = 0;
    if (walk(buf, size, 0, 0, &bad, 0) < 0)
        return kiln__err(KILN_EFORMAT,
                         "protobuf messages nested deeper than %d levels (at byte offset %zu)",
                         KILN__ONNX_MAX_DEPTH, bad);
    return 0;
}

/* ------------------------------------------------------------ tensors */

int kiln__onnx_numel(int ndim, const int64_t *dims, size_t elem, int64_t *numel,
                     size_t *bytes, const char *where) {
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0)
            return kiln__err(KILN_EFORMAT, "%s: dim %d is %lld (expected >= 0)", where, i,
                             (long long)dims[i]);
        if (__builtin_mul_overflow(n, (uint64_t)dims[i], &n) || n > KILN__ONNX_MAX_FILE)
            return kiln__err(KILN_EFORMAT, "%s: element count overflows (dims product too large)",
                             where);
    }
    uint64_t b;
    if (__builtin_mul_overflow(n, (uint64_t)(elem ? elem : 1), &b) || b > KILN__ONNX_MAX_FILE)
        return kiln__err(KILN_EFORMAT, "%s: byte size overflows", where);
    *numel = (int64_t)n;
    *bytes = (size_t)b;
    return 0;
}

void kiln__onnx_tensor_free(kiln__onnx_tensor *t) {
    if (!t) return;
    if (!t->borrowed) kiln__free(t->data);
    t->data = NULL;
}

/* External data path must stay inside base_dir: relative, no "..". */
static int external_path(const char *base_dir, const char *loc, const char *where, char *out,
                         size_t size) {
    if (!base_dir)
        return kiln__err(KILN_EINVAL,
                         "%s: uses external data '%s' but no base folder is known (set "
                         "kiln_onnx_options.base_dir when importing from memory)",
                         where, loc);
    if (!loc[0]) return kiln__err(KILN_EFORMAT, "%s: external data location is empty", where);
    if (loc[0] == '/')
        return kiln__err(KILN_EFORMAT,
                         "%s: external data location '%s' is an absolute path (expected a path "
                         "relative to the model's folder)",
                         where, loc);
    const char *s = loc;
    while (*s) {
        const char *e = strchr(s, '/');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == 2 && s[0] == '.' && s[1] == '.')
            return kiln__err(KILN_EFORMAT,
                             "%s: external data location '%s' leaves the model's folder ('..')",
                             where, loc);
        if (!e) break;
        s = e + 1;
    }
    if (strchr(loc, '\\'))
        return kiln__err(KILN_EFORMAT, "%s: external data location '%s' contains '\\'", where,
                         loc);
    int n = snprintf(out, size, "%s/%s", base_dir, loc);
    if (n < 0 || (size_t)n >= size)
        return kiln__err(KILN_EFORMAT, "%s: external data path too long", where);
    /* Symlinks may still point outside: compare resolved paths. */
    char rb[PATH_MAX], rf[PATH_MAX];
    if (!realpath(base_dir, rb))
        return kiln__err(KILN_EIO, "%s: cannot resolve folder '%s': %s", where, base_dir,
                         strerror(errno));
    if (!realpath(out, rf))
        return kiln__err(KILN_EIO, "%s: cannot open external data '%s': %s", where, out,
                         strerror(errno));
    size_t lb = strlen(rb);
    if (strncmp(rf, rb, lb) != 0 || (rf[lb] != '/' && !(lb == 1 && rb[0] == '/')))
        return kiln__err(KILN_EFORMAT,
                         "%s: external data '%s' resolves to '%s', outside the model's folder '%s'",
                         where, loc, rf, rb);
    snprintf(out, size, "%s", rf); /* the checked file, not a link that may change */
    return 0;
}

static int read_external(const Onnx__TensorProto *t, const char *base_dir, const char *where,
                         uint8_t **dstp, size_t bytes) {
    const char *loc = NULL;
    int64_t offset = 0, length = -1;
    for (size_t i = 0; i < t->n_external_data; i++) {
        const Onnx__StringStringEntryProto *e = t->external_data[i];
        if (!e->key || !e->value) continue;
        char *end;
        if (!strcmp(e->key, "location")) {
            loc = e->value;
        } else if (!strcmp(e->key, "offset") || !strcmp(e->key, "length")) {
            errno = 0;
            long long v = strtoll(e->value, &end, 10);
            if (errno || *end || end == e->value || v < 0)
                return kiln__err(KILN_EFORMAT, "%s: external data %s '%s' is not a number >= 0",
                                 where, e->key, e->value);
            if (e->key[0] == 'o') offset = v;
            else length = v;
        }
    }
    if (!loc) return kiln__err(KILN_EFORMAT, "%s: external data without 'location'", where);
    char path[PATH_MAX + 256];
    int rc = external_path(base_dir, loc, where, path, sizeof path);
    if (rc) return rc;
    if (length >= 0 && (uint64_t)length != bytes)
        return kiln__err(KILN_EFORMAT, "%s: external data length %lld, expected %zu bytes", where,
                         (long long)length, bytes);
    /* path is resolved (external_path): O_NOFOLLOW refuses a link swapped in since */
    FILE *f;
    struct stat st;
    int e = open_regular(path, O_NOFOLLOW, &f, &st);
    if (e > 0) return kiln__err(KILN_EIO, "%s: cannot open '%s': %s", where, path, strerror(e));
    if (e) return kiln__err(KILN_EIO, "%s: external data '%s' is not a regular file", where, path);
    if ((uint64_t)offset > (uint64_t)st.st_size || bytes > (uint64_t)st.st_size - (uint64_t)offset) {
        fclose(f);
        return kiln__err(KILN_EFORMAT,
                         "%s: external data '%s' has %lld bytes; needed %zu at offset %lld", where,
                         path, (long long)st.st_size, bytes, (long long)offset);
    }
    uint8_t *dst = kiln__malloc(bytes ? bytes : 1);
    if (!dst) {
        fclose(f);
        return kiln__err(KILN_ENOMEM, "%s: cannot allocate %zu bytes", where, bytes);
    }
    if (fseeko(f, (off_t)offset, SEEK_SET) != 0 || (bytes && fread(dst, 1, bytes, f) != bytes)) {
        fclose(f);
        kiln__free(dst);
        return kiln__err(KILN_EIO, "%s: short read on '%s'", where, path);
    }
    fclose(f);
    *dstp = dst;
    return 0;
}

int kiln__onnx_tensor_decode(const Onnx__TensorProto *t, const char *base_dir,
                             const char *where, kiln__onnx_tensor *out) {
    memset(out, 0, sizeof *out);
    int dt = t->has_data_type ? t->data_type : 0;
    if (dt == KILN_DTYPE_STRING)
        return kiln__err(KILN_EUNSUPPORTED, "%s: string tensors are not supported", where);
    if (dt == 14 || dt == 15)
        return kiln__err(KILN_EUNSUPPORTED, "%s: complex tensors are not supported", where);
    if (dt <= 0 || dt >= KILN_DTYPE_COUNT_ || kiln_dtype_size((kiln_dtype)dt) == 0)
        return kiln__err(t->has_data_type && dt > 16 ? KILN_EUNSUPPORTED : KILN_EFORMAT,
                         "%s: data_type %d is not a supported tensor type", where, dt);
    if (t->n_dims > KILN_MAX_DIMS)
        return kiln__err(KILN_EUNSUPPORTED, "%s: rank %zu exceeds the maximum %d", where,
                         t->n_dims, KILN_MAX_DIMS);
    if (t->segment)
        return kiln__err(KILN_EUNSUPPORTED, "%s: segmented tensors are not supported", where);
    kiln_dtype dtype = (kiln_dtype)dt;
    size_t es = kiln_dtype_size(dtype);
    int64_t numel = 0;
    size_t bytes = 0;
    int rc = kiln__onnx_numel((int)t->n_dims, t->dims, es, &numel, &bytes, where);
    if (rc) return rc;
    size_t n = (size_t)numel;
    uint8_t *d = NULL;
    int external = t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    /* Check that the data is there before allocating for it: a tiny file
     * may claim huge dims. */
    if (!external && n) {
        size_t have;
        const char *field;
        if (t->has_raw_data) { have = t->raw_data.len; field = "raw_data"; }
        else switch (dtype) {
        case KILN_DTYPE_F32: have = t->n_float_data; field = "float_data"; break;
        case KILN_DTYPE_I64: have = t->n_int64_data; field = "int64_data"; break;
        case KILN_DTYPE_F64: have = t->n_double_data; field = "double_data"; break;
        case KILN_DTYPE_U64: case KILN_DTYPE_U32: have = t->n_uint64_data; field = "uint64_data"; break;
        default: have = t->n_int32_data; field = "int32_data"; break;
        }
        size_t need = t->has_raw_data ? bytes : n;
        if (have != need) {
            if (t->has_raw_data)
                return kiln__err(KILN_EFORMAT, "%s: raw_data has %zu bytes, dims and type %s need %zu",
                                 where, have, kiln_dtype_name(dtype), bytes);
            return kiln__err(KILN_EFORMAT, "%s: %s holds %zu values, dims need %zu", where, field, have, n);
        }
    }
    if (!external && t->has_raw_data && bytes > 0) {
        /* Large weights: use raw_data in place (one copy less). */
        out->dtype = dtype;
        out->ndim = (int)t->n_dims;
        for (size_t i = 0; i < t->n_dims; i++) out->dims[i] = t->dims[i];
        out->data = t->raw_data.data;
        out->bytes = bytes;
        out->borrowed = 1;
        return 0;
    }
    if (!external) {
        d = kiln__malloc(bytes ? bytes : 1);
        if (!d) return kiln__err(KILN_ENOMEM, "%s: cannot allocate %zu bytes", where, bytes);
    }

#define KILN__NEED(cnt, field)                                                                    \
    do {                                                                                          \
        if ((cnt) != n) {                                                                         \
            rc = kiln__err(KILN_EFORMAT, "%s: %s holds %zu values, dims need %zu", where, field,   \
                           (size_t)(cnt), n);                                                     \
            goto fail;                                                                            \
        }                                                                                         \
    } while (0)

    if (external) {
        rc = read_external(t, base_dir, where, &d, bytes);
        if (rc) goto fail;
    } else if (t->has_raw_data) {
        if (t->raw_data.len != bytes) {
            rc = kiln__err(KILN_EFORMAT, "%s: raw_data has %zu bytes, dims and type %s need %zu",
                           where, t->raw_data.len, kiln_dtype_name(dtype), bytes);
            goto fail;
        }
        if (bytes) memcpy(d, t->raw_data.data, bytes);
    } else if (n == 0) {
        /* empty tensor: nothing to read */
    } else {
        switch (dtype) {
        case KILN_DTYPE_F32:
            KILN__NEED(t->n_float_data, "float_data");
            memcpy(d, t->float_data, bytes);
            break;
        case KILN_DTYPE_I64:
            KILN__NEED(t->n_int64_data, "int64_data");
            memcpy(d, t->int64_data, bytes);
            break;
        case KILN_DTYPE_F64:
            KILN__NEED(t->n_double_data, "double_data");
            memcpy(d, t->double_data, bytes);
            break;
        case KILN_DTYPE_U64:
            KILN__NEED(t->n_uint64_data, "uint64_data");
            memcpy(d, t->uint64_data, bytes);
            break;
        case KILN_DTYPE_U32:
            KILN__NEED(t->n_uint64_data, "uint64_data");
            for (size_t i = 0; i < n; i++) ((uint32_t *)d)[i] = (uint32_t)t->uint64_data[i];
            break;
        case KILN_DTYPE_I32:
            KILN__NEED(t->n_int32_data, "int32_data");
            memcpy(d, t->int32_data, bytes);
            break;
        case KILN_DTYPE_I16:
        case KILN_DTYPE_U16:
        case KILN_DTYPE_F16:
        case KILN_DTYPE_BF16:
            KILN__NEED(t->n_int32_data, "int32_data");
            for (size_t i = 0; i < n; i++) ((uint16_t *)d)[i] = (uint16_t)t->int32_data[i];
            break;
        case KILN_DTYPE_I8:
        case KILN_DTYPE_U8:
        case KILN_DTYPE_BOOL:
            KILN__NEED(t->n_int32_data, "int32_data");
            for (size_t i = 0; i < n; i++) ((uint8_t *)d)[i] = (uint8_t)t->int32_data[i];
            if (dtype == KILN_DTYPE_BOOL)
                for (size_t i = 0; i < n; i++) d[i] = d[i] != 0;
            break;
        default:
            rc = kiln__err(KILN_EUNSUPPORTED, "%s: type %s not supported", where,
                           kiln_dtype_name(dtype));
            goto fail;
        }
    }
#undef KILN__NEED
    out->dtype = dtype;
    out->ndim = (int)t->n_dims;
    for (size_t i = 0; i < t->n_dims; i++) out->dims[i] = t->dims[i];
    out->data = d;
    out->bytes = bytes;
    return 0;
fail:
    kiln__free(d);
    return rc;
}

/* ------------------------------------------------------------ public */

/* Read a test-data file and check its nesting depth (the caller unpacks
 * and frees *buf).  Errors name the file. */
static int read_pb_file(const char *pb_path, uint8_t **buf, size_t *size) {
    int rc = kiln__onnx_read_file(pb_path, buf, size);
    if (rc) return rc;
    rc = kiln__onnx_check_depth(*buf, *size);
    if (rc) {
        kiln__free(*buf);
        *buf = NULL;
        return kiln__err_prefix(rc, "%s", pb_path);
    }
    return 0;
}

/* The folder of a file (external data of test data is relative to it). */
static void pb_dir(const char *pb_path, char *dir, size_t size) {
    snprintf(dir, size, "%s", pb_path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else snprintf(dir, size, ".");
}

KILN_API int kiln_onnx_read_tensor(const char *pb_path, kiln_dtype *dtype, int *ndim,
                                   int64_t *dims, void **data) {
    KILN__ARG(pb_path && dtype && ndim && dims && data, KILN_EINVAL);
    *data = NULL;
    uint8_t *buf;
    size_t size;
    int rc = read_pb_file(pb_path, &buf, &size);
    if (rc) return rc;
    Onnx__TensorProto *t = onnx__tensor_proto__unpack(&kiln__onnx_pb_alloc, size, buf);
    kiln__free(buf);
    if (!t) return kiln__err(KILN_EFORMAT, "%s: not a valid ONNX TensorProto", pb_path);
    char where[512];
    snprintf(where, sizeof where, "tensor file '%s'%s%s", pb_path, t->name && t->name[0] ? " " : "",
             t->name ? t->name : "");
    /* External data of a tensor file is relative to the file's folder. */
    char dir[PATH_MAX];
    pb_dir(pb_path, dir, sizeof dir);
    kiln__onnx_tensor x;
    rc = kiln__onnx_tensor_decode(t, dir, where, &x);
    if (!rc && x.borrowed) {
        void *copy = kiln__malloc(x.bytes);
        if (!copy) rc = kiln__err(KILN_ENOMEM, "%s: cannot allocate %zu bytes", where, x.bytes);
        else memcpy(copy, x.data, x.bytes);
        x.data = copy;
        x.borrowed = 0;
    }
    onnx__tensor_proto__free_unpacked(t, &kiln__onnx_pb_alloc);
    if (rc) return rc;
    *dtype = x.dtype;
    *ndim = x.ndim;
    for (int i = 0; i < x.ndim; i++) dims[i] = x.dims[i];
    *data = x.data;
    return 0;
}

int kiln__onnx_sparse_decode(const Onnx__SparseTensorProto *sp, const char *base_dir,
                             const char *where, kiln__onnx_tensor *out) {
    memset(out, 0, sizeof *out);
    if (!sp->values || !sp->indices)
        return kiln__err(KILN_EFORMAT, "%s: sparse tensor without values or indices", where);
    if (sp->n_dims > KILN_MAX_DIMS)
        return kiln__err(KILN_EUNSUPPORTED, "%s: rank %zu exceeds the maximum %d", where, sp->n_dims,
                         KILN_MAX_DIMS);
    kiln__onnx_tensor v, ix;
    int rc = kiln__onnx_tensor_decode(sp->values, base_dir, where, &v);
    if (rc) return rc;
    rc = kiln__onnx_tensor_decode(sp->indices, base_dir, where, &ix);
    if (rc) {
        kiln__onnx_tensor_free(&v);
        return rc;
    }
    int rank = (int)sp->n_dims;
    size_t es = kiln_dtype_size(v.dtype);
    int64_t numel = 0, nnz = v.ndim == 1 ? v.dims[0] : -1;
    size_t bytes = 0;
    rc = kiln__onnx_numel(rank, sp->dims, es, &numel, &bytes, where);
    if (!rc && nnz < 0)
        rc = kiln__err(KILN_EFORMAT, "%s: sparse values must be 1-D", where);
    /* A tiny file may describe a huge dense tensor: cap what we densify. */
    if (!rc && bytes > ((size_t)1 << 30))
        rc = kiln__err(KILN_EUNSUPPORTED, "%s: sparse tensor densifies to %zu bytes (limit 1 GiB)", where,
                       bytes);
    /* indices: [NNZ] linear or [NNZ, rank] coordinates, int64 */
    int linear = ix.ndim == 1;
    if (!rc && (ix.dtype != KILN_DTYPE_I64 || !(linear ? ix.dims[0] == nnz
                                                       : ix.ndim == 2 && ix.dims[0] == nnz && ix.dims[1] == rank)))
        rc = kiln__err(KILN_EFORMAT, "%s: sparse indices must be int64 [%lld] or [%lld, %d]", where,
                       (long long)nnz, (long long)nnz, rank);
    uint8_t *d = NULL;
    if (!rc) {
        d = kiln__calloc(bytes ? bytes : 1, 1);
        if (!d) rc = kiln__err(KILN_ENOMEM, "%s: cannot allocate %zu bytes", where, bytes);
    }
    const int64_t *id = ix.data;
    for (int64_t k = 0; !rc && k < nnz; k++) {
        int64_t at = 0;
        if (linear) {
            at = id[k];
        } else {
            for (int r = 0; r < rank; r++) {
                int64_t c = id[k * rank + r];
                if (c < 0 || c >= sp->dims[r]) { at = -1; break; }
                at = at * sp->dims[r] + c;
            }
        }
        if (at < 0 || at >= numel) {
            rc = kiln__err(KILN_EFORMAT, "%s: sparse index %lld out of range", where, (long long)k);
            break;
        }
        memcpy(d + (size_t)at * es, (const uint8_t *)v.data + (size_t)k * es, es);
    }
    kiln__onnx_tensor_free(&ix);
    kiln__onnx_tensor_free(&v);
    if (rc) {
        kiln__free(d);
        return rc;
    }
    out->dtype = v.dtype;
    out->ndim = rank;
    for (int i = 0; i < rank; i++) out->dims[i] = sp->dims[i];
    out->data = d;
    out->bytes = bytes;
    return 0;
}

/* ------------------------------------------------------------ sequence test data */

KILN_API void kiln_onnx_sequence_free(kiln_onnx_sequence *s) {
    if (!s) return;
    kiln_free(s->shapes);
    kiln_free(s->data);
    memset(s, 0, sizeof *s);
}

/* Append the tensors of q (a sequence of tensors) to s. */
static int seq_append(const Onnx__SequenceProto *q, const char *dir, const char *path, kiln_onnx_sequence *s) {
    if (q->n_sparse_tensor_values || q->n_sequence_values)
        return kiln__err(KILN_EUNSUPPORTED, "%s: sequences of sparse tensors or of sequences are not supported",
                         path);
    size_t nt = q->n_tensor_values;
    if (!nt) return 0;
    kiln__onnx_tensor *t = kiln__calloc(nt, sizeof *t);
    if (!t) return kiln__err(KILN_ENOMEM, "%s: out of memory", path);
    int rc = 0;
    size_t bytes = 0, nd = 0;
    for (size_t i = 0; i < nt && !rc; i++) {
        char where[600];
        snprintf(where, sizeof where, "%s: element %zu", path, i);
        rc = kiln__onnx_tensor_decode(q->tensor_values[i], dir, where, &t[i]);
        if (rc) break;
        if (i == 0) {
            s->dtype = t[0].dtype;
            s->rank = t[0].ndim;
        } else if (t[i].dtype != s->dtype || t[i].ndim != s->rank) {
            rc = kiln__err(KILN_EUNSUPPORTED, "%s: element %zu is %s of rank %d, element 0 %s of rank %d (kiln "
                           "sequences hold one type and rank)", path, i, kiln_dtype_name(t[i].dtype), t[i].ndim,
                           kiln_dtype_name(s->dtype), s->rank);
        }
        bytes += t[i].bytes;
        nd += (size_t)t[i].ndim;
    }
    if (!rc) {
        s->data = kiln__malloc(bytes ? bytes : 1);
        s->shapes = kiln__malloc(nd ? nd * sizeof(int64_t) : 1);
        if (!s->data || !s->shapes) rc = kiln__err(KILN_ENOMEM, "%s: out of memory", path);
    }
    for (size_t i = 0, off = 0, k = 0; i < nt && !rc; i++) {
        if (t[i].bytes) memcpy((uint8_t *)s->data + off, t[i].data, t[i].bytes);
        off += t[i].bytes;
        for (int d = 0; d < t[i].ndim; d++) s->shapes[k++] = t[i].dims[d];
    }
    if (!rc) {
        s->count = (int64_t)nt;
        s->bytes = bytes;
    }
    for (size_t i = 0; i < nt; i++) kiln__onnx_tensor_free(&t[i]);
    kiln__free(t);
    return rc;
}

KILN_API int kiln_onnx_read_sequence(const char *pb_path, kiln_onnx_sequence *out) {
    KILN__ARG(pb_path && out, KILN_EINVAL);
    memset(out, 0, sizeof *out);
    out->rank = -1;
    out->present = 1;
    uint8_t *buf;
    size_t size;
    int rc = read_pb_file(pb_path, &buf, &size);
    if (rc) return rc;
    Onnx__SequenceProto *q = onnx__sequence_proto__unpack(&kiln__onnx_pb_alloc, size, buf);
    kiln__free(buf);
    if (!q) return kiln__err(KILN_EFORMAT, "%s: not a valid ONNX SequenceProto / OptionalProto", pb_path);
    char dir[PATH_MAX];
    pb_dir(pb_path, dir, sizeof dir);
    int et = q->has_elem_type ? q->elem_type : 0;
    if (et == 3) { /* an optional holding a sequence (or a sequence of sequences) */
        out->nested = 1;
        out->present = q->n_sequence_values > 0;
        if (q->n_sequence_values > 1 || q->n_tensor_values)
            rc = kiln__err(KILN_EUNSUPPORTED, "%s: a sequence of sequences is not supported", pb_path);
        else if (out->present)
            rc = seq_append(q->sequence_values[0], dir, pb_path, out);
    } else if (et == 0 || et == 1) {
        rc = seq_append(q, dir, pb_path, out);
    } else {
        rc = kiln__err(KILN_EUNSUPPORTED, "%s: element type %d (sparse tensors, maps, optionals) is not supported",
                       pb_path, et);
    }
    if (!rc && !out->data && !(out->data = kiln__malloc(1))) rc = kiln__err(KILN_ENOMEM, "%s: out of memory", pb_path);
    onnx__sequence_proto__free_unpacked(q, &kiln__onnx_pb_alloc);
    if (rc) kiln_onnx_sequence_free(out);
    return rc;
}

/* ------------------------------------------------------------ string test data */

KILN_API int kiln_onnx_read_strings(const char *pb_path, int *ndim, int64_t *dims, int64_t **lens, void **bytes,
                                    size_t *nbytes) {
    KILN__ARG(pb_path && ndim && dims && lens && bytes && nbytes, KILN_EINVAL);
    *lens = NULL;
    *bytes = NULL;
    *nbytes = 0;
    uint8_t *buf;
    size_t size;
    int rc = read_pb_file(pb_path, &buf, &size);
    if (rc) return rc;
    Onnx__TensorProto *t = onnx__tensor_proto__unpack(&kiln__onnx_pb_alloc, size, buf);
    kiln__free(buf);
    if (!t) return kiln__err(KILN_EFORMAT, "%s: not a valid ONNX TensorProto", pb_path);
    int64_t n = 1;
    if (!t->has_data_type || t->data_type != KILN_DTYPE_STRING)
        rc = kiln__err(KILN_ETYPE, "%s: not a string tensor (data_type %d)", pb_path, t->has_data_type ? t->data_type : 0);
    else if (t->n_dims > KILN_MAX_DIMS)
        rc = kiln__err(KILN_EUNSUPPORTED, "%s: rank %zu exceeds %d", pb_path, t->n_dims, KILN_MAX_DIMS);
    for (size_t i = 0; !rc && i < t->n_dims; i++) {
        if (t->dims[i] < 0 || (t->dims[i] && n > INT64_MAX / t->dims[i]))
            rc = kiln__err(KILN_EFORMAT, "%s: bad dim %lld", pb_path, (long long)t->dims[i]);
        else n *= t->dims[i];
        dims[i] = t->dims[i];
    }
    if (!rc && (uint64_t)n != (uint64_t)t->n_string_data)
        rc = kiln__err(KILN_EFORMAT, "%s: dims hold %lld strings, the file %zu", pb_path, (long long)n,
                       t->n_string_data);
    size_t total = 0;
    for (size_t i = 0; !rc && i < t->n_string_data; i++) total += t->string_data[i].len;
    if (!rc) {
        *ndim = (int)t->n_dims;
        *lens = kiln__malloc(n ? (size_t)n * sizeof(int64_t) : 1);
        *bytes = kiln__malloc(total ? total : 1);
        if (!*lens || !*bytes) rc = kiln__err(KILN_ENOMEM, "%s: out of memory", pb_path);
    }
    for (size_t i = 0, off = 0; !rc && i < t->n_string_data; i++) {
        if (t->string_data[i].len) memcpy((uint8_t *)*bytes + off, t->string_data[i].data, t->string_data[i].len);
        off += t->string_data[i].len;
        (*lens)[i] = (int64_t)t->string_data[i].len;
    }
    onnx__tensor_proto__free_unpacked(t, &kiln__onnx_pb_alloc);
    if (rc) {
        kiln_free(*lens);
        kiln_free(*bytes);
        *lens = NULL;
        *bytes = NULL;
        return rc;
    }
    *nbytes = total;
    return 0;
}
