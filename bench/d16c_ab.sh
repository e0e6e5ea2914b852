#!/bin/sh
# d16c_ab.sh [REV [CFLAGS...]]: builds build-d16c-ab/d16c_ab (bench/d16c_ab.c), src/ops/nn/conv_direct16c.c
# (Conv tactic 16) of git revision REV (default HEAD) as "base" against the working tree's as "new", both
# timed against the builder's best NCHW tactic on ResNet-50's / ResNet-18's strided convs.  Needs
# build/libkiln.a (Release).
KILN_AB_WHOLE=1 exec "$(dirname "$0")/kernel_ab.sh" d16c src/ops/nn/conv_direct16c.c "d16c_packed d16c_pack \
d16c_units d16c_unit d16c_run d16c_wmajor d16c_ws d16c_conv" "$@"
