/*
 * networks.c — the sample networks, built with the public network API, and
 * the diagnostics globals the sample ops update.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kiln/plugin.h>

#include "samples.h"

static kiln_samples_counters g_counters;
static kiln_samples_inplace_log g_inplace;

kiln_samples_counters *kiln_samples_counters_get(void) { return &g_counters; }
kiln_samples_inplace_log *kiln_samples_inplace_log_get(void) { return &g_inplace; }

const char *kiln_samples_network_names(void) {
    return "elemwise_add inplace_add non_zero circ_pad chain100";
}

/* Is word `w` in the comma-separated list `opts`? */
static int has_opt(const char *opts, const char *w) {
    size_t n = strlen(w);
    for (const char *p = opts; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && !strncmp(p, w, n)) return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

/* Value of "key=..." in opts, copied into buf; NULL if absent. */
static const char *opt_value(const char *opts, const char *key, char *buf, size_t size) {
    size_t n = strlen(key);
    for (const char *p = opts; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len > n && !strncmp(p, key, n) && p[n] == '=') {
            size_t vl = len - n - 1 < size - 1 ? len - n - 1 : size - 1;
            memcpy(buf, p + n + 1, vl);
            buf[vl] = 0;
            return buf;
        }
        p = e ? e + 1 : NULL;
    }
    return NULL;
}

/* "a:b:c" -> up to max integers; returns the count or -1. */
static int parse_list(const char *s, int64_t *v, int max) {
    int n = 0;
    while (*s) {
        char *end;
        long long x = strtoll(s, &end, 10);
        if (end == s || n == max) return -1;
        v[n++] = x;
        s = end;
        if (*s == ':' || *s == 'x') s++;
        else if (*s) return -1;
    }
    return n;
}

#define CHECK(call)                                                           \
    do {                                                                      \
        if ((rc = (call)) != 0) goto fail;                                    \
    } while (0)
#define LAYER(var, ...)                                                       \
    do {                                                                      \
        if (!((var) = kiln_network_add_layer(__VA_ARGS__))) {                 \
            rc = KILN_ENOTFOUND;                                              \
            goto fail;                                                        \
        }                                                                     \
    } while (0)

static int net_elemwise_add(kiln_network *net, const char *opts) {
    int rc;
    kiln_layer *l;
    const int64_t dims[3] = {2, 3, 4};
    CHECK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 3, dims, NULL));
    CHECK(kiln_network_add_input(net, "y", KILN_DTYPE_F32, 3, dims, NULL));
    LAYER(l, net, "sample::elemwise_add", has_opt(opts, "autotune") ? 2 : 1, "add",
          2, (const char *[]){"x", "y"}, 1, (const char *[]){"z"});
    CHECK(kiln_network_mark_output(net, "z"));
fail:
    return rc;
}

static int net_inplace_add(kiln_network *net, const char *opts) {
    int v = has_opt(opts, "autotune") ? 2 : 1;
    int rc;
    kiln_layer *l;
    const int64_t dims[2] = {4, 16};
    CHECK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, dims, NULL));
    CHECK(kiln_network_add_input(net, "y", KILN_DTYPE_F32, 2, dims, NULL));
    /* The first op may not overwrite the network input x: the builder
     * copies x once; the second op then works in place on t. */
    LAYER(l, net, "sample::inplace_add", v, "add1", 2, (const char *[]){"x", "y"}, 1,
          (const char *[]){"t"});
    LAYER(l, net, "sample::inplace_add", v, "add2", 2, (const char *[]){"t", "y"}, 1,
          (const char *[]){"z"});
    CHECK(kiln_network_mark_output(net, "z"));
fail:
    return rc;
}

static int net_non_zero(kiln_network *net, const char *opts) {
    int rc;
    kiln_layer *l;
    char buf[64];
    int64_t dims[2] = {6, 7};
    if (opt_value(opts, "shape", buf, sizeof buf) && parse_list(buf, dims, 2) != 2)
        return kiln_set_error(KILN_EINVAL, "non_zero: expected shape=RxC, found '%s'", buf);
    /* "dynamic": both dims symbolic (R, C); the build needs a profile. */
    static const char *const names[2] = {"R", "C"};
    if (has_opt(opts, "dynamic")) dims[0] = dims[1] = -1;
    CHECK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 2, dims, names));
    LAYER(l, net, "sample::non_zero", 1, "nonzero", 1, (const char *[]){"x"}, 2,
          (const char *[]){"indices", "count"});
    CHECK(kiln_network_mark_output(net, "indices"));
    CHECK(kiln_network_mark_output(net, "count"));
fail:
    return rc;
}

static int net_circ_pad(kiln_network *net, const char *opts) {
    int rc;
    kiln_layer *l1, *l2;
    char buf[128];
    int64_t dims[KILN_MAX_DIMS] = {2, 3, 8, 10}, pads[8] = {1, 2, 2, 1};
    int ndim = 4, npads = 4;
    if (opt_value(opts, "shape", buf, sizeof buf) &&
        (ndim = parse_list(buf, dims, KILN_MAX_DIMS)) < 1)
        return kiln_set_error(KILN_EINVAL, "circ_pad: expected shape=AxBxC.., found '%s'", buf);
    if (opt_value(opts, "pads", buf, sizeof buf) && (npads = parse_list(buf, pads, 8)) < 1)
        return kiln_set_error(KILN_EINVAL, "circ_pad: expected pads=a:b:.., found '%s'", buf);
    int version = has_opt(opts, "per-format-tactics") ? 3 : has_opt(opts, "multi-tactic") ? 2 : 1;
    CHECK(kiln_network_add_input(net, "a", KILN_DTYPE_F32, ndim, dims, NULL));
    CHECK(kiln_network_add_input(net, "b", KILN_DTYPE_F32, ndim, dims, NULL));
    /* Two identical instances (same pads, same IO): timed once. */
    LAYER(l1, net, "sample::circ_pad", version, "pad_a", 1, (const char *[]){"a"}, 1,
          (const char *[]){"pa"});
    CHECK(kiln_layer_set_ints(l1, "pads", pads, npads));
    LAYER(l2, net, "sample::circ_pad", version, "pad_b", 1, (const char *[]){"b"}, 1,
          (const char *[]){"pb"});
    CHECK(kiln_layer_set_ints(l2, "pads", pads, npads));
    if (has_opt(opts, "aot")) { /* bake the AOT kernel: no plugin needed at run time */
        CHECK(kiln_layer_set_aot(l1, 1));
        CHECK(kiln_layer_set_aot(l2, 1));
    }
    CHECK(kiln_network_mark_output(net, "pa"));
    CHECK(kiln_network_mark_output(net, "pb"));
fail:
    return rc;
}

static int net_chain(kiln_network *net, int n) {
    int rc;
    kiln_layer *l;
    const int64_t one[1] = {1};
    char prev[32] = "x", cur[32];
    CHECK(kiln_network_add_input(net, "x", KILN_DTYPE_F32, 1, one, NULL));
    CHECK(kiln_network_add_input(net, "y", KILN_DTYPE_F32, 1, one, NULL));
    for (int i = 0; i < n; i++) {
        snprintf(cur, sizeof cur, i == n - 1 ? "z" : "t%d", i);
        LAYER(l, net, "sample::elemwise_add", 1, NULL, 2, (const char *[]){prev, "y"}, 1,
              (const char *[]){cur});
        memcpy(prev, cur, sizeof prev);
    }
    CHECK(kiln_network_mark_output(net, "z"));
fail:
    return rc;
}

/* Every word of opts must be one some network understands: a typo is an
 * error, not a silently different network. */
static int check_opts(const char *opts) {
    static const char *const words[] = {"autotune", "multi-tactic", "per-format-tactics", "aot",
                                        "dynamic", "shape=", "pads="};
    for (const char *p = opts; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        int ok = len == 0;
        for (size_t k = 0; !ok && k < sizeof words / sizeof words[0]; k++) {
            size_t n = strlen(words[k]);
            ok = words[k][n - 1] == '=' ? len >= n && !strncmp(p, words[k], n)
                                        : len == n && !strncmp(p, words[k], n);
        }
        if (!ok)
            return kiln_set_error(KILN_EINVAL,
                                  "unknown network option '%.*s' (expected a comma-separated list of: "
                                  "autotune, multi-tactic, per-format-tactics, aot, dynamic, shape=AxB.., "
                                  "pads=a:b:..)",
                                  (int)len, p);
        p = e ? e + 1 : NULL;
    }
    return 0;
}

int kiln_samples_network(const char *name, const char *opts, kiln_network **out) {
    *out = NULL;
    int orc = check_opts(opts);
    if (orc) return orc;
    kiln_network *net = kiln_network_create();
    if (!net) return kiln_set_error(KILN_ENOMEM, "out of memory creating network '%s'", name);
    int rc;
    if (!strcmp(name, "elemwise_add")) rc = net_elemwise_add(net, opts);
    else if (!strcmp(name, "inplace_add")) rc = net_inplace_add(net, opts);
    else if (!strcmp(name, "non_zero")) rc = net_non_zero(net, opts);
    else if (!strcmp(name, "circ_pad")) rc = net_circ_pad(net, opts);
    else if (!strcmp(name, "chain100")) rc = net_chain(net, 100);
    else
        rc = kiln_set_error(KILN_ENOTFOUND, "unknown sample network '%s' (expected one of: %s)",
                            name, kiln_samples_network_names());
    if (rc) {
        kiln_network_free(net);
        return rc;
    }
    *out = net;
    return 0;
}
