/*
 * build_id.c — the identity of the running libkiln binary: its GNU
 * build-id note (a hash the linker takes over the code), as hex.
 *
 * A verdict that depends on what the built-in kernels do -- the builder's
 * packed-only check (packed_only.c) -- is kept in the timing cache under
 * this id, so it is reused only by the very same binary: a rebuilt
 * library, even one with the same version, checks again.  A binary
 * linked without a build id (--build-id=none) gets NULL: nothing is
 * reused.
 */
#include "kiln_int.h"

#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>

static char g_id[2 * 64 + 1];

/* dl_iterate_phdr callback: the object whose PT_LOAD segments hold this
 * function; its build-id note into g_id.  1 stops the walk. */
static int on_object(struct dl_phdr_info *info, size_t size, void *ud) {
    (void)size;
    const uintptr_t self = (uintptr_t)ud;
    int mine = 0;
    for (int i = 0; i < info->dlpi_phnum && !mine; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        const uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        mine = ph->p_type == PT_LOAD && self >= lo && self - lo < ph->p_memsz;
    }
    if (!mine) return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE) continue;
        const size_t align = ph->p_align == 8 ? 8 : 4;
        const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
        while ((size_t)(end - p) >= sizeof(ElfW(Nhdr))) {
            ElfW(Nhdr) nh;
            memcpy(&nh, p, sizeof nh);
            const size_t name = (nh.n_namesz + align - 1) & ~(align - 1);
            const size_t desc = (nh.n_descsz + align - 1) & ~(align - 1);
            if ((size_t)(end - p) - sizeof nh < name || (size_t)(end - p) - sizeof nh - name < desc) break;
            const uint8_t *d = p + sizeof nh + name;
            if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && !memcmp(p + sizeof nh, "GNU", 4) &&
                nh.n_descsz > 0 && 2 * (size_t)nh.n_descsz < sizeof g_id) {
                for (size_t k = 0; k < nh.n_descsz; k++) snprintf(g_id + 2 * k, 3, "%02x", d[k]);
                return 1;
            }
            p += sizeof nh + name + desc;
        }
    }
    return 1;
}

static void find_id(void) { dl_iterate_phdr(on_object, (void *)(uintptr_t)&find_id); }

const char *kiln__build_id(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, find_id);
    return g_id[0] ? g_id : NULL;
}
