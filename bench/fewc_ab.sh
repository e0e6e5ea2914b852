#!/bin/sh
# fewc_ab.sh [REV [CFLAGS...]]: builds build-fewc-ab/fewc_ab (bench/fewc_ab.c), src/ops/nn/conv_fewc.c (Conv
# tactics 12 and 17's kiln__fewc_rows) of git revision REV (default HEAD) as "base" against the working tree's
# as "new".  Needs build/libkiln.a (a Release build: cmake --build build --target kiln_static).
exec "$(dirname "$0")/kernel_ab.sh" fewc src/ops/nn/conv_fewc.c "fewc_scratch fewc_packed_w fewc_pack_w fewc_rows \
fewc_pointwise_packed fewc_pointwise_pack fewc_pointwise" "$@"
