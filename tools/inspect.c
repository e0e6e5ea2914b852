/*
 * inspect.c — `kiln inspect ENGINE [--plugins LIB]...`
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static int usage(FILE *f) {
    fprintf(f, "usage: kiln inspect ENGINE [--plugins LIB.so | --plugin-source F.c]... [-v]\n"
               "  Describe an engine: IO, layers with op identity, types, formats, tactic and\n"
               "  timing, memory plan, weights, AOT kernels, required plugins, whether it\n"
               "  carries native code and a signature.\n"
               "  ENGINE may be a MODEL.onnx: built in memory first (dynamic dims at 1).\n"
               "  -v, --verbose  library log (engine loading, plugin lookups)\n" CLI_TRUST_HELP);
    return f == stdout ? 0 : 2;
}

int kiln_cli_inspect(int argc, char **argv) {
    const char *verb = "inspect", *path = NULL;
    cli_plugins plugins = {0};
    for (int i = 1; i < argc; i++) {
        int m;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage(stdout);
        if (cli_verbose_opt(argv[i])) continue;
        if ((m = cli_plugins_opt(verb, argc, argv, &i, &plugins)) ||
            (m = cli_trust_opt(verb, argc, argv, &i))) {
            if (m < 0) return 2;
        } else if (argv[i][0] == '-') {
            cli_fail(verb, "unknown option '%s'", argv[i]);
            return usage(stderr);
        } else if (!path) {
            path = argv[i];
        } else {
            cli_fail(verb, "one engine at a time (found '%s' and '%s')", path, argv[i]);
            return 2;
        }
    }
    if (!path) {
        cli_fail(verb, "expected an engine file");
        return usage(stderr);
    }
    int prc = cli_plugins_load(verb, &plugins);
    cli_plugins_free(&plugins); /* the libraries stay loaded */
    if (prc) return 1;
    kiln_engine *e = NULL;
    int rc = cli_engine_open(verb, path, NULL, &e);
    if (rc) return 1;
    rc = kiln_engine_inspect(e, stdout);
    kiln_engine_free(e);
    if (rc) return cli_fail_kiln(verb, rc, path);
    return 0;
}
