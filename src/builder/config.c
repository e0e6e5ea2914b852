/*
 * config.c — build configuration: flags, threads, timing repetitions,
 * timing cache file and optimization profiles.
 */
#include "build_int.h"

kiln_build_config *kiln_build_config_create(void) {
    kiln_build_config *c = kiln__calloc(1, sizeof *c);
    if (!c) {
        kiln__err(KILN_ENOMEM, "kiln_build_config_create: out of memory");
        return NULL;
    }
    c->threads = kiln__cpu_count();
    if (c->threads < 1) c->threads = 1;
    c->reps = 5;
    c->device = KILN_DEVICE_CPU;
    return c;
}

void kiln_build_config_free(kiln_build_config *cfg) {
    if (!cfg) return;
    kiln__free(cfg->cache_path);
    for (int i = 0; i < cfg->nprofiles; i++) kiln__free(cfg->profiles[i].input);
    kiln__free(cfg->profiles);
    kiln__free(cfg);
}

void kiln_build_config_set_flags(kiln_build_config *cfg, unsigned flags) {
    KILN__ARG(cfg, );
    cfg->flags = flags;
}

unsigned kiln_build_config_get_flags(const kiln_build_config *cfg) {
    KILN__ARG(cfg, 0);
    return cfg->flags;
}

void kiln_build_config_set_threads(kiln_build_config *cfg, int n) {
    KILN__ARG(cfg, );
    cfg->threads = n >= 1 ? n : kiln__cpu_count();
    if (cfg->threads < 1) cfg->threads = 1;
}

void kiln_build_config_set_timing_reps(kiln_build_config *cfg, int reps) {
    KILN__ARG(cfg, );
    cfg->reps = reps >= 1 ? reps : 1;
}

void kiln_build_config_set_device(kiln_build_config *cfg, kiln_device_kind d) {
    KILN__ARG(cfg, );
    cfg->device = d;
}

int kiln_build_config_set_timing_cache(kiln_build_config *cfg, const char *path) {
    KILN__ARG(cfg, KILN_EINVAL);
    char *p = NULL;
    if (path && *path) {
        p = kiln__strdup(path);
        if (!p) return kiln__err(KILN_ENOMEM, "timing cache path: out of memory");
    }
    kiln__free(cfg->cache_path);
    cfg->cache_path = p;
    return 0;
}

const kiln__profile *kiln__config_profile(const kiln_build_config *cfg, const char *input) {
    if (!cfg) return NULL;
    for (int i = 0; i < cfg->nprofiles; i++)
        if (strcmp(cfg->profiles[i].input, input) == 0) return &cfg->profiles[i];
    return NULL;
}

int kiln_build_config_set_profile(kiln_build_config *cfg, const char *input, int ndim,
                                  const int64_t *min, const int64_t *opt, const int64_t *max) {
    KILN__ARG(cfg, KILN_EINVAL);
    if (!input || !*input) return kiln__err(KILN_EINVAL, "set profile: input name is empty");
    if (ndim < 0 || ndim > KILN_MAX_DIMS)
        return kiln__err(KILN_EINVAL, "profile for '%s': rank must be 0..%d, got %d", input,
                         KILN_MAX_DIMS, ndim);
    if (ndim > 0 && !opt)
        return kiln__err(KILN_EINVAL, "profile for '%s': opt dims are NULL", input);
    kiln__profile p = {0};
    p.ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        p.opt[d] = opt[d];
        p.min[d] = min ? min[d] : opt[d];
        p.max[d] = max ? max[d] : opt[d];
        if (p.min[d] < 0 || p.min[d] > p.opt[d] || p.opt[d] > p.max[d])
            return kiln__err(KILN_EINVAL,
                             "profile for '%s' dim %d: expected 0 <= min <= opt <= max, got "
                             "min %lld, opt %lld, max %lld",
                             input, d, (long long)p.min[d], (long long)p.opt[d], (long long)p.max[d]);
    }
    for (int i = 0; i < cfg->nprofiles; i++)
        if (strcmp(cfg->profiles[i].input, input) == 0) {
            p.input = cfg->profiles[i].input;
            cfg->profiles[i] = p;
            return 0;
        }
    p.input = kiln__strdup(input);
    kiln__profile *np = kiln__realloc(cfg->profiles, (size_t)(cfg->nprofiles + 1) * sizeof *np);
    if (!p.input || !np) {
        kiln__free(p.input);
        if (np) cfg->profiles = np;
        return kiln__err(KILN_ENOMEM, "set profile: out of memory");
    }
    cfg->profiles = np;
    cfg->profiles[cfg->nprofiles++] = p;
    return 0;
}
