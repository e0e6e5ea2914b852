/*
 * plugins.c — `kiln plugins [--plugins LIB | --plugin-source F.c]... [FILTER]`
 *             `kiln plugins compile FILE.c [--rebuild] [--cflags "..."] [-v]`
 *             `kiln plugins cache [--list | --clean]`
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kiln/plugin.h>

#include "cli.h"

static int usage(FILE *f) {
    fprintf(f, "usage: kiln plugins [--plugins LIB.so | --plugin-source F.c]... [-v] [FILTER]\n"
               "  List every registered op (built-in and loaded) with its schema: attributes\n"
               "  and defaults, formats, tactics, AOT.  FILTER: a substring of \"ns::name\".\n"
               "  -v: library log (plugin loading).\n"
               "usage: kiln plugins compile FILE.c [--rebuild] [--cflags \"...\"] [-v]\n"
               "  Compile a plugin source into the compile cache ($KILN_CACHE_DIR, else\n"
               "  $XDG_CACHE_HOME/kiln, else ~/.cache/kiln), load it to check that it\n"
               "  registers, and print the library's path and whether it was a cache hit.\n"
               "usage: kiln plugins cache [--list | --clean]\n"
               "  List (default) or remove the compile cache's entries: compiled plugin\n"
               "  sources (<stem>-<key>.so), AOT kernels (aot-<entry>-<key>.bin), AOT\n"
               "  sources kept after a compile error (.c) and leftover temporary files;\n"
               "  other files there are left alone.\n");
    return f == stdout ? 0 : 2;
}

/* A file the compile cache made: <stem>-<32 hex>.so, aot-...-<32 hex>.bin,
 * or one of their temporary files (<entry>.tmp-XXXXXX). */
static int cache_entry(const char *name) {
    const char *t = strstr(name, ".tmp-");
    size_t n = t ? (size_t)(t - name) : strlen(name);
    size_t ext = n >= 4 && !strncmp(name + n - 4, ".bin", 4) ? 4
                 : n >= 3 && !strncmp(name + n - 3, ".so", 3) ? 3
                 : n >= 2 && !strncmp(name + n - 2, ".c", 2) ? 2 : 0;
    if (!ext || n < ext + 33 || name[n - ext - 33] != '-') return 0;
    for (size_t i = n - ext - 32; i < n - ext; i++)
        if (!strchr("0123456789abcdef", name[i])) return 0;
    return ext == 3 || !strncmp(name, "aot-", 4); /* .c: an AOT source kept after a compile error */
}

static int cache_verb(int argc, char **argv) {
    const char *verb = "plugins cache";
    int clean = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--list")) clean = 0;
        else if (!strcmp(argv[i], "--clean")) clean = 1;
        else if (cli_verbose_opt(argv[i])) continue;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage(stdout);
        else return cli_fail(verb, "unknown argument '%s' (expected --list or --clean)", argv[i]), 2;
    }
    char dir[4096];
    int rc = kiln_compile_cache_dir(dir, sizeof dir);
    if (rc) return cli_fail_kiln(verb, rc, "compile cache");
    DIR *d = opendir(dir);
    if (!d) return cli_fail(verb, "%s: %s", dir, strerror(errno));
    int n = 0, failed = 0;
    unsigned long long bytes = 0;
    struct dirent *ent;
    while ((ent = readdir(d))) {
        if (!cache_entry(ent->d_name)) continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", dir, ent->d_name);
        struct stat st;
        if (lstat(p, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (clean && unlink(p) != 0) {
            fprintf(stderr, "kiln %s: cannot remove %s: %s\n", verb, p, strerror(errno));
            failed = 1;
            continue;
        }
        if (!clean) printf("%10lld  %s\n", (long long)st.st_size, p);
        n++;
        bytes += (unsigned long long)st.st_size;
    }
    closedir(d);
    printf("%s%d cache entr%s, %.1f KiB, in %s\n", clean ? "removed " : "", n, n == 1 ? "y" : "ies",
           (double)bytes / 1024.0, dir);
    return failed;
}

static int usage_compile(FILE *f) {
    fprintf(f, "usage: kiln plugins compile FILE.c [--rebuild] [--cflags \"...\"] [-v]\n"
               "  --rebuild        compile even when the cache holds the library\n"
               "  --cflags FLAGS   extra compiler flags (part of the cache key)\n"
               "  -v, --verbose    show the cache lookup and the compiler command's result\n"
               "  Prints \"<path to .so> (cache hit)\" or \"<path to .so> (compiled)\".\n");
    return f == stdout ? 0 : 2;
}

/* Log sink for `compile`: remembers whether the cache answered, and
 * prints what the user asked to see. */
typedef struct compile_log {
    int verbose, hit;
} compile_log;

static void compile_log_fn(void *ud, kiln_log_level level, const char *msg) {
    compile_log *cl = ud;
    if (!strncmp(msg, "compile cache hit ", 18)) cl->hit = 1;
    static const char *const names[] = {"error", "warning", "info", "verbose"};
    if (cl->verbose || level <= KILN_LOG_WARN)
        fprintf(stderr, "kiln %s: %s\n", (unsigned)level < 4 ? names[level] : "log", msg);
}

int kiln_cli_plugins_compile(int argc, char **argv) {
    const char *verb = "plugins compile", *path = NULL, *v;
    kiln_compile_options o;
    memset(&o, 0, sizeof o);
    compile_log cl = {0, 0};
    for (int i = 1; i < argc; i++) {
        int m;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage_compile(stdout);
        if (!strcmp(argv[i], "--rebuild")) o.rebuild = 1;
        else if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--verbose")) cl.verbose = 1;
        else if ((m = cli_opt(argc, argv, &i, "--cflags", &v))) {
            if (m < 0) return 2;
            o.cflags = v;
        } else if (argv[i][0] == '-') {
            cli_fail(verb, "unknown option '%s'", argv[i]);
            return usage_compile(stderr);
        } else if (!path) {
            path = argv[i];
        } else {
            cli_fail(verb, "one source file at a time (found '%s' and '%s')", path, argv[i]);
            return 2;
        }
    }
    if (!path) {
        cli_fail(verb, "expected a plugin source file (FILE.c)");
        return usage_compile(stderr);
    }
    /* The cache logs hits and misses at INFO with verbose = 1. */
    o.verbose = 1;
    kiln_log_set(KILN_LOG_INFO, compile_log_fn, &cl);
    char *so = NULL;
    int rc = kiln_plugin_compile_load(path, &o, &so);
    kiln_log_set(KILN_LOG_WARN, NULL, NULL);
    if (rc) return cli_fail_compile(verb, rc, path);
    printf("%s (%s)\n", so, cl.hit ? "cache hit" : "compiled");
    kiln_free(so);
    return 0;
}

int kiln_cli_plugins(int argc, char **argv) {
    const char *verb = "plugins", *filter = NULL;
    if (argc > 1 && !strcmp(argv[1], "cache")) {
        cli_verb_name = "plugins cache";
        return cache_verb(argc - 1, argv + 1);
    }
    if (argc > 1 && !strcmp(argv[1], "compile")) {
        cli_verb_name = "plugins compile";
        return kiln_cli_plugins_compile(argc - 1, argv + 1);
    }
    cli_plugins plugins = {0};
    for (int i = 1; i < argc; i++) {
        int m;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return usage(stdout);
        if (cli_verbose_opt(argv[i])) continue;
        if ((m = cli_plugins_opt(verb, argc, argv, &i, &plugins))) {
            if (m < 0) return 2;
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
    int prc = cli_plugins_load(verb, &plugins);
    cli_plugins_free(&plugins);
    if (prc) return 1;
    /* how a version asked for resolves (issue 12: 13 silently ran v6) */
    static const char note[] =
        "note: a layer (or ONNX node) asking for an ai.onnx op at version V runs the highest version <= V\n"
        "      listed here (the opset rule; below every listed version fails); other namespaces need the\n"
        "      exact version.\n";
    if (!filter) {
        kiln_registry_dump(stdout, NULL);
        fputs(note, stdout);
        return 0;
    }
    /* A filter that matches nothing is an error, not an empty listing. */
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem) return cli_fail(verb, "out of memory");
    kiln_registry_dump(mem, filter);
    fclose(mem);
    int found = len > 0;
    if (found) fwrite(text, 1, len, stdout);
    if (found && strstr(text, "ai.onnx")) fputs(note, stdout);
    free(text);
    if (!found)
        return cli_fail(verb, "no registered op matches '%s' (a substring of \"ns::name\"; "
                              "load libraries with --plugins)", filter);
    return 0;
}
