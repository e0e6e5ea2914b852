/*
 * plugins.c — `kiln plugins [--plugins LIB]... [FILTER]`
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static int usage(FILE *f) {
    fprintf(f, "usage: kiln plugins [--plugins LIB.so]... [FILTER]\n"
               "  List every registered op (built-in and loaded) with its schema: attributes\n"
               "  and defaults, formats, tactics, AOT.  FILTER: a substring of \"ns::name\".\n");
    return f == stdout ? 0 : 2;
}

int kiln_cli_plugins(int argc, char **argv) {
    const char *verb = "plugins", *filter = NULL, *v;
    cli_plugins plugins = {0};
    for (int i = 1; i < argc; i++) {
        int m;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage(stdout);
        if ((m = cli_opt(argc, argv, &i, "--plugins", &v))) {
            if (m < 0 || cli_plugins_add(verb, &plugins, v)) return 2;
        } else if (argv[i][0] == '-') {
            cli_fail(verb, "unknown option '%s'", argv[i]);
            return usage(stderr);
        } else if (!filter) {
            filter = argv[i];
        } else {
            cli_fail(verb, "one filter at a time (found '%s' and '%s')", filter, argv[i]);
            return 2;
        }
    }
    if (cli_plugins_load(verb, &plugins)) return 1;
    kiln_registry_dump(stdout, filter);
    return 0;
}
