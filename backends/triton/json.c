/* json.c — see json.h.  A recursive-descent reader with a depth limit. */
#include "json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { KT_JSON_MAX_DEPTH = 64 };

typedef struct {
    const char *s;
    size_t n, i;
    char *err;
    size_t errsize;
} reader;

static void *fail(reader *r, const char *what)
{
    if (r->err && !r->err[0])
        snprintf(r->err, r->errsize, "model config JSON: %s at byte %zu", what, r->i);
    return NULL;
}

static void skip_ws(reader *r)
{
    while (r->i < r->n && strchr(" \t\r\n", r->s[r->i]) && r->s[r->i]) r->i++;
}

static kt_json *node(kt_json_type t)
{
    kt_json *v = calloc(1, sizeof *v);
    if (v) v->type = t;
    return v;
}

/* A string starting at the opening quote; \uXXXX beyond ASCII becomes '?'
 * (config names are identifiers, so this only keeps odd text readable). */
static char *read_string(reader *r)
{
    r->i++; /* opening quote */
    char *out = malloc(r->n - r->i + 1);
    size_t o = 0;
    if (!out) return fail(r, "out of memory");
    while (r->i < r->n && r->s[r->i] != '"') {
        char c = r->s[r->i++];
        if (c == '\\') {
            if (r->i >= r->n) break;
            char e = r->s[r->i++];
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'u': {
                unsigned cp = 0;
                if (r->n - r->i < 4 || sscanf(r->s + r->i, "%4x", &cp) != 1) {
                    free(out);
                    return fail(r, "bad \\u escape");
                }
                r->i += 4;
                c = cp < 0x80 ? (char)cp : '?';
                break;
            }
            default: c = e; break; /* \" \\ \/ */
            }
        }
        out[o++] = c;
    }
    if (r->i >= r->n) {
        free(out);
        return fail(r, "unterminated string");
    }
    r->i++; /* closing quote */
    out[o] = 0;
    return out;
}

static int push(kt_json *v, char *key, kt_json *item)
{
    kt_json **items = realloc(v->items, (size_t)(v->n + 1) * sizeof *items);
    if (!items) return -1;
    v->items = items;
    if (v->type == KT_JSON_OBJECT) {
        char **keys = realloc(v->keys, (size_t)(v->n + 1) * sizeof *keys);
        if (!keys) return -1;
        v->keys = keys;
        keys[v->n] = key;
    }
    items[v->n++] = item;
    return 0;
}

static kt_json *read_value(reader *r, int depth);

static kt_json *read_container(reader *r, int depth, kt_json_type t)
{
    char close = t == KT_JSON_OBJECT ? '}' : ']';
    kt_json *v = node(t);
    if (!v) return fail(r, "out of memory");
    r->i++;
    skip_ws(r);
    if (r->i < r->n && r->s[r->i] == close) {
        r->i++;
        return v;
    }
    for (;;) {
        char *key = NULL;
        skip_ws(r);
        if (t == KT_JSON_OBJECT) {
            if (r->i >= r->n || r->s[r->i] != '"') break;
            if (!(key = read_string(r))) break;
            skip_ws(r);
            if (r->i >= r->n || r->s[r->i] != ':') {
                free(key);
                fail(r, "expected ':'");
                break;
            }
            r->i++;
        }
        kt_json *item = read_value(r, depth + 1);
        if (!item || push(v, key, item)) {
            free(key);
            kt_json_free(item);
            break;
        }
        skip_ws(r);
        if (r->i < r->n && r->s[r->i] == ',') {
            r->i++;
            continue;
        }
        if (r->i < r->n && r->s[r->i] == close) {
            r->i++;
            return v;
        }
        break;
    }
    kt_json_free(v);
    return fail(r, t == KT_JSON_OBJECT ? "malformed object" : "malformed array");
}

static kt_json *read_value(reader *r, int depth)
{
    if (depth > KT_JSON_MAX_DEPTH) return fail(r, "nesting too deep");
    skip_ws(r);
    if (r->i >= r->n) return fail(r, "unexpected end");
    char c = r->s[r->i];
    if (c == '{') return read_container(r, depth, KT_JSON_OBJECT);
    if (c == '[') return read_container(r, depth, KT_JSON_ARRAY);
    if (c == '"') {
        kt_json *v = node(KT_JSON_STRING);
        if (!v || !(v->text = read_string(r))) {
            kt_json_free(v);
            return NULL;
        }
        return v;
    }
    size_t start = r->i;
    while (r->i < r->n && strchr("+-.0123456789eEtruefalsn", r->s[r->i]) && r->s[r->i]) r->i++;
    size_t len = r->i - start;
    if (!len) return fail(r, "unexpected character");
    kt_json_type t = KT_JSON_NUMBER;
    if (len == 4 && !memcmp(r->s + start, "null", 4)) t = KT_JSON_NULL;
    else if ((len == 4 && !memcmp(r->s + start, "true", 4)) ||
             (len == 5 && !memcmp(r->s + start, "false", 5))) t = KT_JSON_BOOL;
    else if (!strchr("-0123456789", r->s[start])) return fail(r, "bad literal");
    kt_json *v = node(t);
    if (!v || !(v->text = malloc(len + 1))) {
        kt_json_free(v);
        return fail(r, "out of memory");
    }
    memcpy(v->text, r->s + start, len);
    v->text[len] = 0;
    return v;
}

kt_json *kt_json_parse(const char *s, size_t n, char *err, size_t errsize)
{
    reader r = { s, n, 0, err, errsize };
    if (err && errsize) err[0] = 0;
    kt_json *v = read_value(&r, 0);
    skip_ws(&r);
    if (v && r.i != n) {
        kt_json_free(v);
        return fail(&r, "trailing characters");
    }
    return v;
}

void kt_json_free(kt_json *v)
{
    if (!v) return;
    for (int i = 0; i < v->n; i++) {
        kt_json_free(v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->text);
    free(v);
}

const kt_json *kt_json_get(const kt_json *v, const char *key)
{
    if (!v || v->type != KT_JSON_OBJECT) return NULL;
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->keys[i], key)) return v->items[i];
    return NULL;
}

int kt_json_int(const kt_json *v, int64_t *out)
{
    if (!v || (v->type != KT_JSON_NUMBER && v->type != KT_JSON_STRING) || !v->text[0]) return -1;
    char *end;
    errno = 0;
    long long x = strtoll(v->text, &end, 10);
    if (*end || errno) return -1;
    *out = x;
    return 0;
}

const char *kt_json_str(const kt_json *v)
{
    return v && v->type == KT_JSON_STRING ? v->text : NULL;
}

kt_json *kt_json_new(kt_json_type type, const char *text)
{
    kt_json *v = node(type);
    if (v && text && !(v->text = strdup(text))) {
        free(v);
        return NULL;
    }
    return v;
}

int kt_json_set(kt_json *obj, const char *key, kt_json *item)
{
    if (!obj || obj->type != KT_JSON_OBJECT || !item) return kt_json_free(item), -1;
    for (int i = 0; i < obj->n; i++)
        if (!strcmp(obj->keys[i], key)) {
            kt_json_free(obj->items[i]);
            obj->items[i] = item;
            return 0;
        }
    char *k = strdup(key);
    if (!k || push(obj, k, item)) return free(k), kt_json_free(item), -1;
    return 0;
}

int kt_json_append(kt_json *arr, kt_json *item)
{
    if (!arr || arr->type != KT_JSON_ARRAY || !item || push(arr, NULL, item))
        return kt_json_free(item), -1;
    return 0;
}

/* A growing output buffer; `bad` is set once an allocation failed. */
typedef struct {
    char *s;
    size_t n, cap;
    int bad;
} writer;

static void put(writer *w, const char *s, size_t n)
{
    if (w->bad) return;
    if (w->n + n + 1 > w->cap) {
        size_t cap = (w->n + n + 1) * 2;
        char *t = realloc(w->s, cap);
        if (!t) {
            w->bad = 1;
            return;
        }
        w->s = t, w->cap = cap;
    }
    memcpy(w->s + w->n, s, n);
    w->n += n;
    w->s[w->n] = 0;
}

static void put_string(writer *w, const char *s)
{
    put(w, "\"", 1);
    for (; *s; s++) {
        char esc[8];
        if (*s == '"' || *s == '\\') esc[0] = '\\', esc[1] = *s, put(w, esc, 2);
        else if ((unsigned char)*s < 0x20) put(w, esc, (size_t)snprintf(esc, sizeof esc, "\\u%04x", *s));
        else put(w, s, 1);
    }
    put(w, "\"", 1);
}

static void write_value(writer *w, const kt_json *v)
{
    switch (v->type) {
    case KT_JSON_NULL: put(w, "null", 4); break;
    case KT_JSON_BOOL:
    case KT_JSON_NUMBER: put(w, v->text, strlen(v->text)); break;
    case KT_JSON_STRING: put_string(w, v->text); break;
    case KT_JSON_ARRAY:
    case KT_JSON_OBJECT:
        put(w, v->type == KT_JSON_ARRAY ? "[" : "{", 1);
        for (int i = 0; i < v->n; i++) {
            if (i) put(w, ",", 1);
            if (v->type == KT_JSON_OBJECT) put_string(w, v->keys[i]), put(w, ":", 1);
            write_value(w, v->items[i]);
        }
        put(w, v->type == KT_JSON_ARRAY ? "]" : "}", 1);
        break;
    }
}

char *kt_json_write(const kt_json *v, size_t *size)
{
    writer w = { 0 };
    write_value(&w, v);
    if (w.bad || !w.s) return free(w.s), NULL;
    if (size) *size = w.n;
    return w.s;
}
