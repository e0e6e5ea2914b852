#!/bin/sh
# sgemm_ab.sh [REV [CFLAGS...]]: builds build-sgemm-ab/sgemm_ab (bench/sgemm_ab.c), src/device/cpu/sgemm.c
# of git revision REV (default HEAD) as "base" against the working tree's as "new" (CFLAGS: -D switches for
# "new" only, to time an experiment behind an #ifdef).  Needs build/libkiln.a (a Release build).
set -e
cd "$(dirname "$0")/.."
rev=${1:-HEAD}
[ $# -gt 0 ] && shift
out=build-sgemm-ab
mkdir -p $out
F="-O3 -DNDEBUG -Wall -Wextra -Werror -D_GNU_SOURCE -march=native -std=gnu11 -Iinclude -Isrc"
# every name sgemm.c exports, prefixed, so that both copies link beside libkiln.a's
ren() {
    for n in sgemm sgemm_serial sgemm_pack_a sgemm_pack_a_floats sgemm_pack_b sgemm_pack_b_floats \
             cpu_scratch cpu_scratch_or_fail sgemm_nr sgemm_kc prepack_layout; do printf ' -Dkiln__%s=%s_%s' $n "$1" $n; done
}
git show "$rev":src/device/cpu/sgemm.c > $out/sgemm_base.c
cc $F $(ren base) -Isrc/device/cpu -c $out/sgemm_base.c -o $out/base.o
cc $F $(ren new) "$@" -c src/device/cpu/sgemm.c -o $out/new.o
cc $F -Itools -c tools/fma_peak.c -o $out/fma_peak.o
cc $F -c bench/sgemm_ab.c -o $out/sgemm_ab.o
cc $out/sgemm_ab.o $out/base.o $out/new.o $out/fma_peak.o build/libkiln.a -lm -lpthread -ldl -o $out/sgemm_ab
echo "$out/sgemm_ab: base = $rev, new = the working tree $*"
