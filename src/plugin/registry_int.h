/*
 * registry_int.h — private glue between the files of src/plugin/ owned by
 * the registry (registry.c, quick_op.c, library.c).
 */
#ifndef KILN_REGISTRY_INT_H
#define KILN_REGISTRY_INT_H

#include "kiln_int.h"

/* The adapter that runs quick ops through the plugin vtable.  Its create
 * and deserialize entries cannot know which op they serve: instances of
 * quick ops are made with kiln__op_create / kiln__op_deserialize. */
extern const kiln_plugin_vtable kiln__quick_vtable;

/* Library loading: while kiln_registry_load_library runs dlopen, failed
 * registrations are remembered here (first failure wins). */
void kiln__registry_loading_begin(void);
int kiln__registry_loading_end(char *msg, size_t size); /* status of the first failure, 0 */

/* 1 if ns is reserved for built-in ops ("kiln", "ai.onnx", "ai.onnx.*"). */
int kiln__registry_ns_reserved(const char *ns);
/* 1 if the object at addr lives in the image (exe or .so) holding libkiln. */
int kiln__registry_in_libkiln(const void *addr);

/* def_copy.c: the registry's deep copies of definitions.  All memory of
 * one copy hangs on a kiln__defmem (failed = 1 after an allocation
 * failure; the copy functions then return NULL). */
typedef struct kiln__defmem {
    void *head;
    int failed;
} kiln__defmem;
const kiln_quick_op *kiln__quick_copy(kiln__defmem *m, const kiln_quick_op *q);
const kiln_plugin_def *kiln__plugin_def_copy(kiln__defmem *m, const kiln_plugin_def *p);
const kiln_combo *kiln__combos_copy(kiln__defmem *m, const kiln_combo *c, int n);
void kiln__defmem_free(kiln__defmem *m);

#endif
