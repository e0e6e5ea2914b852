#!/bin/sh
# pw16c_ab.sh [REV [CFLAGS...]]: builds build-pw16c-ab/pw16c_ab (bench/pw16c_ab.c), src/ops/nn/conv_pw16c.c
# (Conv tactic 13) of git revision REV (default HEAD) as "base" against the working tree's as "new", both
# timed against the builder's best NCHW tactic on ResNet-50's 1x1 convs.  Needs build/libkiln.a (Release).
KILN_AB_WHOLE=1 exec "$(dirname "$0")/kernel_ab.sh" pw16c src/ops/nn/conv_pw16c.c "pw16c_packed pw16c_pack pw16c_units \
pw16c_unit pw16c_run pw16c_conv pw16c_ksplit pw16c_exec 16c_fused_chain 16c_inplace_check" "$@"
