#!/bin/sh
# attn_ab.sh [ROUNDS [THREADS [TACTICS]]]: builds build-attn-ab/attn_ab (bench/attn_ab.c) against build/libkiln.a
# (a Release build: cmake --build build --target kiln_static) and runs it: kiln::attention's CPU tactics timed
# against each other in one process on BERT-base's and the small encoder's attention.
set -e
cd "$(dirname "$0")/.."
out=build-attn-ab
mkdir -p $out
F="-O3 -DNDEBUG -Wall -Wextra -Werror -D_GNU_SOURCE -march=native -std=gnu11 -Iinclude -Isrc"
sodium=$(nm build/libkiln.a 2>/dev/null | grep -q ' U sodium_init' && echo -lsodium || true)
cc $F -Itools -c tools/fma_peak.c -o $out/fma_peak.o
cc $F -c bench/attn_ab.c -o $out/attn_ab.o
cc $out/attn_ab.o $out/fma_peak.o -Wl,--whole-archive build/libkiln.a -Wl,--no-whole-archive -lprotobuf-c $sodium \
    -lm -lpthread -ldl -o $out/attn_ab
exec $out/attn_ab "$@"
