/*
 * devices.c — `kiln devices`: the CPU, the CUDA GPU kiln would use (or why
 * none), and whether this libkiln holds CUDA kernels.  Exit status 0 either
 * way: no GPU is an answer, not a failure.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int kiln_cli_devices(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: kiln devices\n  lists the CPU, the CUDA device ($KILN_CUDA_DEVICE, default 0) or why "
                   "there is none, and whether CUDA kernels are built in\n");
            return 0;
        }
        fprintf(stderr, "kiln devices: unknown option '%s'\n", argv[i]);
        return 2;
    }
    char buf[2048];
    kiln_devices_describe(buf, sizeof buf);
    fputs(buf, stdout);
    return 0;
}
