/* network_info.c — a network's layers as data (kiln_network_layer_info),
 * for bindings and tools that walk a network without knowing its structs. */
#include "kiln_int.h"

int kiln_network_layer_info(const kiln_network *net, int i, kiln_layer_info *info) {
    if (!net || !info) return kiln__err(KILN_EINVAL, "kiln_network_layer_info: network or info is NULL");
    if (i < 0 || i >= net->nlayers)
        return kiln__err(KILN_EINVAL, "network layer %d out of range (the network has %d)", i, net->nlayers);
    const kiln_layer *l = net->layers[i];
    memset(info, 0, sizeof *info);
    info->name = l->name;
    info->op_ns = l->op->ns;
    info->op_name = l->op->name;
    info->op_version = l->op->version;
    info->nin = l->nin;
    info->nout = l->nout;
    for (int k = 0; k < l->nin && k < KILN_MAX_IO; k++) info->inputs[k] = l->in[k] < 0 ? "" : net->tensors[l->in[k]].name;
    for (int k = 0; k < l->nout && k < KILN_MAX_IO; k++) info->outputs[k] = net->tensors[l->out[k]].name;
    info->aot = l->aot;
    return 0;
}
