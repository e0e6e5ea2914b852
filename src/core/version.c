/* version.c — the library's version, for bindings and tools that load
 * libkiln at run time (the headers' KILN_VERSION_* say what they were
 * compiled against). */
#include "kiln_int.h"

#define KILN__STR2(x) #x
#define KILN__STR(x) KILN__STR2(x)

const char *kiln_version(void) {
    return KILN__STR(KILN_VERSION_MAJOR) "." KILN__STR(KILN_VERSION_MINOR) "." KILN__STR(KILN_VERSION_PATCH);
}

int kiln_abi_version(void) { return KILN_ABI_VERSION; }
