/* json.h — a small JSON reader for Triton's model configuration (the
 * backend receives config.pbtxt as JSON through TRITONSERVER_Message).
 * Reads the whole document into a tree; lookups never fail on a missing key
 * or a wrong type, they return NULL / an error code, so callers can report
 * what was expected.  Numbers are kept as text: protobuf's JSON mapping
 * writes int64 fields (dims, max_batch_size in some versions) as strings. */
#ifndef KILN_TRITON_JSON_H
#define KILN_TRITON_JSON_H

#include <stddef.h>
#include <stdint.h>

typedef enum { KT_JSON_NULL, KT_JSON_BOOL, KT_JSON_NUMBER, KT_JSON_STRING, KT_JSON_ARRAY,
               KT_JSON_OBJECT } kt_json_type;

typedef struct kt_json {
    kt_json_type type;
    char *text;              /* STRING: unescaped value; NUMBER/BOOL: literal */
    char **keys;             /* OBJECT: member names, parallel to items */
    struct kt_json **items;  /* ARRAY / OBJECT members */
    int n;
} kt_json;

/* Parse `n` bytes.  NULL on malformed input (the message, with the byte
 * offset, is written to err). */
kt_json *kt_json_parse(const char *s, size_t n, char *err, size_t errsize);
void kt_json_free(kt_json *v);
/* Member `key` of an object, or NULL (also when v is not an object). */
const kt_json *kt_json_get(const kt_json *v, const char *key);
/* Integer value of a NUMBER or of a STRING holding one: 0, or -1 if v is
 * NULL or not an integer. */
int kt_json_int(const kt_json *v, int64_t *out);
/* STRING value or NULL. */
const char *kt_json_str(const kt_json *v);

/* Building and editing (the backend completes Triton's model config and
 * hands it back as JSON).  Constructors return NULL when out of memory;
 * `text` is copied.  kt_json_set replaces member `key` of an object or
 * appends it, kt_json_append adds to an array: both take ownership of
 * `item` (freed on failure) and return 0 or -1 (out of memory, or v of the
 * wrong type). */
kt_json *kt_json_new(kt_json_type type, const char *text);
int kt_json_set(kt_json *obj, const char *key, kt_json *item);
int kt_json_append(kt_json *arr, kt_json *item);
/* The tree as compact JSON text (malloc'd, NUL-terminated; *size gets its
 * length), or NULL when out of memory. */
char *kt_json_write(const kt_json *v, size_t *size);

#endif
