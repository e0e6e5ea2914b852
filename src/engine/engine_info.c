/* engine_info.c — an engine's layers as data (kiln_engine_layer_info);
 * kiln_engine_inspect prints the same and more. */
#include "kiln_int.h"

int kiln_engine_num_layers(const kiln_engine *e) {
    if (!e) return kiln__err(KILN_EINVAL, "kiln_engine_num_layers: engine is NULL");
    return e->nlayers;
}

int kiln_engine_layer_info(const kiln_engine *e, int i, kiln_layer_info *info) {
    if (!e || !info) return kiln__err(KILN_EINVAL, "kiln_engine_layer_info: engine or info is NULL");
    if (i < 0 || i >= e->nlayers)
        return kiln__err(KILN_EINVAL, "engine layer %d out of range (the engine has %d)", i, (int)e->nlayers);
    const kiln__elayer *l = &e->layers[i];
    memset(info, 0, sizeof *info);
    info->name = l->name;
    info->op_ns = l->op_ns;
    info->op_name = l->op_name;
    info->op_version = l->op_version;
    info->nin = l->nin;
    info->nout = l->nout;
    for (int k = 0; k < l->nin && k < KILN_MAX_IO; k++) info->inputs[k] = l->in[k] < 0 ? "" : e->tensors[l->in[k]].name;
    for (int k = 0; k < l->nout && k < KILN_MAX_IO; k++) info->outputs[k] = e->tensors[l->out[k]].name;
    info->tactic = l->tactic;
    info->aot = l->aot_kernel >= 0;
    info->time_ms = l->time_ms;
    info->device = (kiln_device_kind)l->device;
    return 0;
}
