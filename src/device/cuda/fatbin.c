/*
 * fatbin.c — libkiln's CUDA kernels, embedded as bytes.
 *
 * With nvcc at project build, CMake compiles every .cu file under src/ops/<family>/
 * (and under src/device/cuda/) into one fatbin and defines KILN_CUDA_FATBIN
 * as its path (a string literal); the assembler's .incbin then places the file's bytes here,
 * 64-byte aligned and NUL-terminated.  Without nvcc the array is empty and
 * kiln__cuda_have_kernels() says so.
 */
#include "device/cuda/cuda_int.h"

#ifdef KILN_CUDA_FATBIN
__asm__(".section .rodata\n"
        ".balign 64\n"
        ".globl kiln__cuda_fatbin\n"
        ".hidden kiln__cuda_fatbin\n"
        "kiln__cuda_fatbin:\n"
        ".incbin \"" KILN_CUDA_FATBIN "\"\n"
        "kiln__cuda_fatbin_end:\n"
        ".byte 0\n"
        ".balign 8\n"
        ".globl kiln__cuda_fatbin_size\n"
        ".hidden kiln__cuda_fatbin_size\n"
        "kiln__cuda_fatbin_size:\n"
        ".quad kiln__cuda_fatbin_end - kiln__cuda_fatbin\n"
        ".previous\n");
#else
const unsigned char kiln__cuda_fatbin[1] = {0};
const unsigned long kiln__cuda_fatbin_size = 0;
#endif
