/*
 * test_ops_util.h — pieces the engine tests share: the identity shape
 * function their test ops use, and a one-layer engine over the sample
 * plugin library (sample::elemwise_add on two f32[6] inputs).
 */
#ifndef KILN_TEST_OPS_UTIL_H
#define KILN_TEST_OPS_UTIL_H

#include "kiln/kiln.h"
#include "kiln/plugin.h"
#include "test.h"

/* out[0] = in[0]: same dtype and dims, no known contents. */
static inline int same_shape(kiln_shape_ctx *c) {
    c->out[0] = c->in[0];
    c->out[0].data = NULL;
    c->out[0].nvalues = -1;
    return 0;
}

/* c = a + b through sample::elemwise_add (loads KILN_SAMPLES_LIB), built
 * without timing plus `flags`.  The caller frees the engine. */
static inline kiln_engine *build_sample_add_engine(unsigned flags) {
    ASSERT_OK(kiln_registry_load_library(KILN_SAMPLES_LIB));
    kiln_network *net = kiln_network_create();
    int64_t dims[1] = {6};
    ASSERT_OK(kiln_network_add_input(net, "a", KILN_DTYPE_F32, 1, dims, NULL));
    ASSERT_OK(kiln_network_add_input(net, "b", KILN_DTYPE_F32, 1, dims, NULL));
    const char *in[] = {"a", "b"}, *out[] = {"c"};
    ASSERT(kiln_network_add_layer(net, "sample::elemwise_add", 1, "add1", 2, in, 1, out));
    ASSERT_OK(kiln_network_mark_output(net, "c"));
    kiln_build_config *cfg = kiln_build_config_create();
    kiln_build_config_set_flags(cfg, KILN_BUILD_NO_TIMING | flags);
    kiln_engine *e = NULL;
    ASSERT_OK(kiln_build(net, cfg, &e, NULL));
    kiln_build_config_free(cfg);
    kiln_network_free(net);
    return e;
}

#endif
