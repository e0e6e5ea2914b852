/*
 * model.c — ONNX models where the CLI expects an engine: `kiln run m.onnx`
 * (and bench, inspect) build one in memory first, as trtexec and ONNX
 * Runtime take a model directly; and the default profile for dynamic dims
 * (1, said on stderr) so neither `kiln build` nor those need --shapes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <kiln/onnx.h>

#include "cli.h"

int cli_default_shapes(const char *verb, const kiln_network *net, const cli_shapes *const *given, int ngiven,
                       cli_shapes *out) {
    int n = kiln_network_num_inputs(net);
    for (int i = 0; i < n; i++) {
        kiln_io_info info;
        if (kiln_network_input_info(net, i, &info)) continue;
        int dynamic = 0, named = 0;
        for (int d = 0; d < info.ndim; d++) dynamic |= info.dims[d] < 0;
        for (int g = 0; g < ngiven && !named; g++) named = cli_shapes_find(given[g], info.name) != NULL;
        if (!dynamic || named) continue;
        cli_shape sh;
        memset(&sh, 0, sizeof sh);
        if (strlen(info.name) >= sizeof sh.name)
            return cli_fail(verb, "input '%.60s...': name too long for a default shape; give --shapes", info.name),
                   -1;
        snprintf(sh.name, sizeof sh.name, "%s", info.name);
        sh.ndim = info.ndim;
        char txt[KILN_MAX_DIMS * 24] = "";
        for (int d = 0, off = 0; d < info.ndim; d++) {
            sh.dims[d] = info.dims[d] < 0 ? 1 : info.dims[d];
            off += snprintf(txt + off, sizeof txt - (size_t)off, "%s%lld", d ? "x" : "", (long long)sh.dims[d]);
        }
        if (cli_shapes_set(verb, out, &sh)) return -1;
        fprintf(stderr, "kiln %s: input '%s' has dynamic dims: building for %s:%s (dynamic dims at 1; "
                        "--shapes %s:... to change)\n", verb, info.name, info.name, txt, info.name);
    }
    return 0;
}

int cli_is_onnx(const char *path) {
    size_t a = strlen(path);
    return a >= 5 && !strcmp(path + a - 5, ".onnx");
}

int cli_engine_open(const char *verb, const char *path, const cli_shapes *shapes, kiln_engine **e) {
    *e = NULL;
    if (!cli_is_onnx(path)) return cli_engine_load(verb, path, e);
    kiln_onnx_options o;
    memset(&o, 0, sizeof o);
    kiln_network *net = NULL;
    int rc = kiln_onnx_import(path, &o, &net);
    if (rc) return cli_fail_kiln(verb, rc, path);
    cli_shapes all = {0};
    if (shapes) all = *shapes;
    /* entries may name an input by position (as --input 0=FILE does) */
    for (int k = 0; k < all.n; k++) {
        char *end;
        long pos = strtol(all.s[k].name, &end, 10);
        int is_pos = !*end && end != all.s[k].name && pos >= 0 && pos < kiln_network_num_inputs(net);
        const char *nm = is_pos ? kiln_network_input_name(net, (int)pos) : NULL;
        if (nm && strlen(nm) < sizeof all.s[k].name) snprintf(all.s[k].name, sizeof all.s[k].name, "%s", nm);
    }
    const cli_shapes *given[1] = {&all};
    kiln_build_config *cfg = kiln_build_config_create();
    int status = 1;
    if (!cfg) {
        cli_fail(verb, "out of memory");
        goto done;
    }
    if (cli_default_shapes(verb, net, given, 1, &all)) goto done;
    for (int k = 0; k < all.n; k++) {
        const cli_shape *s = &all.s[k];
        if ((rc = kiln_build_config_set_profile(cfg, s->name, s->ndim, s->dims, s->dims, s->dims))) {
            cli_fail_kiln(verb, rc, s->name);
            goto done;
        }
    }
    kiln_build_stats st;
    memset(&st, 0, sizeof st);
    if ((rc = kiln_build(net, cfg, e, &st))) {
        cli_fail_kiln(verb, rc, path);
        goto done;
    }
    fprintf(stderr, "kiln %s: built %s in memory in %.1f ms (%d layers; kiln build -o saves an engine)\n", verb,
            path, st.build_ms, st.layers);
    status = 0;
done:
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    return status;
}
