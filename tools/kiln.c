/*
 * kiln.c — the `kiln` command-line tool: dispatch to one verb.
 *
 *   kiln build (MODEL.onnx | --network NAME) ... -o ENGINE
 *   kiln run ENGINE ...        kiln bench ENGINE ...
 *   kiln inspect ENGINE        kiln plugins [FILTER]   kiln plugins compile F.c
 *   kiln test-onnx ...         kiln devices
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* Default for builds without tools/test_onnx.c (the ONNX conformance
 * runner); the real definition overrides it at link time. */
__attribute__((weak)) int kiln_cli_test_onnx(int argc, char **argv) {
    (void)argc;
    (void)argv;
    fprintf(stderr, "kiln test-onnx: not available in this build\n");
    return 1;
}

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} verbs[] = {
    {"build", kiln_cli_build, "build an engine from an ONNX model or a plugin library's network"},
    {"run", kiln_cli_run, "run an engine on .npy/.pb or random inputs; write and compare outputs"},
    {"bench", kiln_cli_bench, "measure latency (min/median/p90/p99/max) and throughput"},
    {"inspect", kiln_cli_inspect, "describe an engine: layers, tactics, memory, plugins"},
    {"keygen", kiln_cli_keygen, "make an Ed25519 key pair to sign (build --sign) and verify engines"},
    {"plugins", kiln_cli_plugins, "list registered ops; `plugins compile F.c`: compile a plugin source"},
    {"test-onnx", kiln_cli_test_onnx, "run ONNX backend conformance cases"},
    {"devices", kiln_cli_devices, "list the devices: CPU, CUDA GPUs (name, sm, memory, driver), CUDA kernels"},
};

static int usage(FILE *f) {
    fprintf(f, "usage: kiln VERB [options]   (kiln VERB --help for a verb's options)\n\nverbs:\n");
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        fprintf(f, "  %-10s %s\n", verbs[i].name, verbs[i].summary);
    fprintf(f, "\nkiln %d.%d.%d, CPU %s\n", KILN_VERSION_MAJOR, KILN_VERSION_MINOR,
            KILN_VERSION_PATCH, kiln_cpu_signature());
    return f == stdout ? 0 : 2;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage(stderr);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help"))
        return usage(stdout);
    if (!strcmp(argv[1], "--version")) {
        printf("kiln %d.%d.%d\n", KILN_VERSION_MAJOR, KILN_VERSION_MINOR, KILN_VERSION_PATCH);
        return 0;
    }
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (!strcmp(argv[1], verbs[i].name)) {
            cli_verb_name = verbs[i].name;
            return verbs[i].fn(argc - 1, argv + 1);
        }
    fprintf(stderr, "kiln: unknown verb '%s'\n", argv[1]);
    return usage(stderr);
}
