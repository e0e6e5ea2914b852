/* placement.c — the samples runners' per-layer placement lines (placement.h). */
#include "placement.h"

#include <stdio.h>
#include <string.h>

int kiln_samples_print_placement(const kiln_engine *e, int want) {
    int seen = 0, misplaced = 0;
    for (int i = 0; i < kiln_engine_num_layers(e); i++) {
        kiln_layer_info li;
        if (kiln_engine_layer_info(e, i, &li)) continue;
        printf("  layer %-14s %s::%s v%d on %s, %s tactic %d\n", li.name, li.op_ns, li.op_name, li.op_version,
               li.device == KILN_DEVICE_CUDA ? "cuda" : "cpu", li.aot ? "AOT kernel" : "JIT impl", li.tactic);
        if (!strcmp(li.op_ns, "sample")) {
            seen++;
            if (want >= 0 && (int)li.device != want) {
                fprintf(stderr, "  layer %s runs on %s, not on %s\n", li.name,
                        li.device == KILN_DEVICE_CUDA ? "cuda" : "cpu", want == KILN_DEVICE_CUDA ? "cuda" : "cpu");
                misplaced++;
            }
        }
    }
    if (!seen) fprintf(stderr, "  the engine has no sample:: layer\n");
    return seen ? misplaced : 1;
}
