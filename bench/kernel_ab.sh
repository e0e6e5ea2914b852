#!/bin/sh
# kernel_ab.sh NAME SOURCE "EXPORTS" [REV [CFLAGS...]]: builds build-NAME-ab/NAME_ab (bench/NAME_ab.c) with the
# library source SOURCE of git revision REV (default HEAD) as "base" against the working tree's as "new", each
# compiled with its exported names (EXPORTS, kiln__ left out) renamed base_* / new_*, both linked with
# build/libkiln.a (a Release build) and tools/fma_peak.c (CFLAGS: -D switches for "new" only, to time an
# experiment behind an #ifdef).  bench/sgemm_ab.sh and bench/dwrows_ab.sh call it.  For another machine:
# KILN_AB_MARCH (default native) and KILN_AB_LIB (default build/libkiln.a, a library built for that -march);
# KILN_AB_OUT names the output directory (default build-NAME-ab).
set -e
cd "$(dirname "$0")/.."
name=$1 src=$2 exports=$3
shift 3
rev=${1:-HEAD}
[ $# -gt 0 ] && shift
out=${KILN_AB_OUT:-build-$name-ab}
mkdir -p $out
F="-O3 -DNDEBUG -Wall -Wextra -Werror -D_GNU_SOURCE -march=${KILN_AB_MARCH:-native} -std=gnu11 -Iinclude -Isrc"
# every name the source exports, prefixed, so that both copies link beside libkiln.a's
ren() {
    for n in $exports; do printf ' -Dkiln__%s=%s_%s' $n "$1" $n; done
}
git show "$rev":$src > $out/${name}_base.c
cc $F $(ren base) -I"$(dirname $src)" -c $out/${name}_base.c -o $out/base.o
cc $F $(ren new) "$@" -c $src -o $out/new.o
cc $F -Itools -c tools/fma_peak.c -o $out/fma_peak.o
cc $F -c bench/${name}_ab.c -o $out/${name}_ab.o
# code that pulls in the engine pulls in its signatures (libsodium) too
lib=${KILN_AB_LIB:-build/libkiln.a}
sodium=$(nm $lib 2>/dev/null | grep -q ' U sodium_init' && echo -lsodium || true)
# KILN_AB_WHOLE=1: the whole library (a harness that builds networks needs every op's registration)
[ -n "$KILN_AB_WHOLE" ] && lib="-Wl,--whole-archive $lib -Wl,--no-whole-archive -lprotobuf-c"
cc $out/${name}_ab.o $out/base.o $out/new.o $out/fma_peak.o $lib $sodium -lm -lpthread -ldl -o $out/${name}_ab
echo "$out/${name}_ab: base = $rev, new = the working tree $*"
