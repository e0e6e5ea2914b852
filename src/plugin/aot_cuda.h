/*
 * aot_cuda.h — the engine file's AOTCUDA section (plugin/aot_cuda.c), for
 * engine/file.c.  The record layout is documented in aot_cuda.c.
 */
#ifndef KILN_AOT_CUDA_H
#define KILN_AOT_CUDA_H

#include "kiln_int.h"
#include "core/bytes.h"

/* Append e's AOT CUDA kernels (nothing when it has none: the section is
 * optional). */
void kiln__aot_cuda_write_section(const kiln_engine *e, kiln__wbuf *w);
/* Read the section into e->acu / e->nacu (counted as read, so a failure
 * leaves what was read for kiln__engine_destroy); every length, node index
 * and hash checked. */
int kiln__aot_cuda_parse_section(kiln_engine *e, kiln__rbuf *r);

#endif
