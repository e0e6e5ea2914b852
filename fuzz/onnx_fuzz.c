/*
 * onnx_fuzz.c — libFuzzer target for the ONNX reader and importer.
 *
 * Each input is tried as a ModelProto (kiln_onnx_import_memory: depth
 * guard, protobuf parse, tensor decoding, node mapping, network building)
 * and as a TensorProto file (kiln_onnx_read_tensor through a memfd).  Any
 * crash, leak or sanitizer report is a bug; errors are the expected result
 * for most inputs.  Build and run with fuzz/build.sh.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kiln/kiln.h"
#include "kiln/onnx.h"

static int quiet_init(void) {
    kiln_log_set(KILN_LOG_ERROR, NULL, NULL);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int once;
    if (!once) once = 1 + quiet_init();
    kiln_network *net = NULL;
    if (kiln_onnx_import_memory(data, size, NULL, &net) == 0) kiln_network_free(net);

    /* TensorProto path: the public API reads files, so give it one. */
    int fd = memfd_create("t.pb", 0);
    if (fd >= 0) {
        if (size == 0 || write(fd, data, size) == (ssize_t)size) {
            char path[64];
            snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
            kiln_dtype dt;
            int nd;
            int64_t dims[KILN_MAX_DIMS];
            void *p = NULL;
            if (kiln_onnx_read_tensor(path, &dt, &nd, dims, &p) == 0) kiln_free(p);
        }
        close(fd);
    }
    return 0;
}
