#!/bin/sh
# sgemm_ab.sh [REV [CFLAGS...]]: builds build-sgemm-ab/sgemm_ab (bench/sgemm_ab.c), src/device/cpu/sgemm.c
# of git revision REV (default HEAD) as "base" against the working tree's as "new" (CFLAGS: -D switches for
# "new" only, to time an experiment behind an #ifdef).  Needs build/libkiln.a (a Release build).
exec "$(dirname "$0")/kernel_ab.sh" sgemm src/device/cpu/sgemm.c "sgemm sgemm_serial sgemm_pack_a \
sgemm_pack_a_floats sgemm_pack_b sgemm_pack_b_floats cpu_scratch cpu_scratch_or_fail sgemm_nr sgemm_kc prepack_layout" "$@"
