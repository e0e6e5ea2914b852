#!/bin/sh
# dwrows_ab.sh [REV [CFLAGS...]]: builds build-dwrows-ab/dwrows_ab (bench/dwrows_ab.c), src/ops/nn/conv_dwrows.c
# of git revision REV (default HEAD) as "base" against the working tree's as "new" (CFLAGS: -D switches for
# "new" only, to time an experiment behind an #ifdef).  Needs build/libkiln.a (a Release build).
exec "$(dirname "$0")/kernel_ab.sh" dwrows src/ops/nn/conv_dwrows.c "dwrows_band dwrows_run dwrows_fits" "$@"
