#!/bin/sh
# fuzz/build.sh — build and (optionally) run the libFuzzer targets.
#
#   fuzz/build.sh                    build build-fuzz/onnx_fuzz and build-fuzz/engine_fuzz
#   fuzz/build.sh run TARGET [SEC]   build, then fuzz TARGET (onnx or engine) for SEC
#                                    seconds (default 600), one worker (-fork=1, going
#                                    on after a crash), nice -n 19
#   fuzz/build.sh runs TARGET N      build, then run TARGET for N executions (CI)
#   fuzz/build.sh pack DIR           build, then bundle both targets, their seed corpora,
#                                    the shared libraries another machine may lack
#                                    (protobuf-c, libsodium) and fuzz/run.sh into DIR, to
#                                    fuzz on a machine with more cores:
#                                    DIR/run.sh JOBS SECONDS [TARGET] [OUT_DIR] (see run.sh)
#
# Corpora: fuzz/corpus/ (ONNX models) and build-fuzz/seed_engine/ (small
# engines made here by fuzz/make_engine_corpus.sh); new inputs go to
# build-fuzz/corpus_TARGET so the committed corpus stays small, crash inputs
# to build-fuzz/ (keep each one as a regression test: tests/engines_crafted/
# for engines).
#
# Needs clang with -fsanitize=fuzzer,address and protoc-c.  All of libkiln
# is compiled in (the importer needs the registry and the network API), and
# the sample ops (so engines that use them run).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${KILN_FUZZ_OUT:-$ROOT/build-fuzz}
mkdir -p "$OUT/gen" "$OUT/obj" "$OUT/corpus_onnx" "$OUT/corpus_engine"
protoc-c --c_out="$OUT/gen" -I"$ROOT/src/onnx" "$ROOT/src/onnx/onnx_min.proto"
SODIUM=""
if pkg-config --exists libsodium 2>/dev/null; then
  SODIUM="-DKILN_HAVE_SODIUM=1 $(pkg-config --cflags libsodium)"
  SODIUM_LIB=$(pkg-config --libs libsodium)
else
  SODIUM_LIB=""
fi
CFLAGS="-O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -std=gnu11 -D_GNU_SOURCE -DKILN_BUILDING_LIB=1"
INC="-I$ROOT/include -I$ROOT/src -I$ROOT/samples -I$OUT/gen"
OBJS=""
# Objects are rebuilt when their source or any header is newer (a changed
# struct in kiln_int.h must not leave objects with the old layout), KILN_JOBS
# (default: the number of cores) at a time.
HDR=$(ls -t "$ROOT"/include/kiln/*.h "$ROOT"/src/*.h "$ROOT"/src/*/*.h "$ROOT"/src/*/*/*.h 2>/dev/null | head -1)
TODO="$OUT/obj/todo"
: > "$TODO"
for f in "$ROOT"/src/core/*.c "$ROOT"/src/plugin/*.c "$ROOT"/src/builder/*.c "$ROOT"/src/engine/*.c "$ROOT"/src/device/*.c \
         "$ROOT"/src/device/*/*.c "$ROOT"/src/onnx/*.c "$ROOT"/src/ops/*/*.c "$ROOT"/samples/ops/*.c "$OUT/gen/onnx_min.pb-c.c"; do
  [ -f "$f" ] || continue
  o="$OUT/obj/$(echo "$f" | sed "s|$ROOT/||; s|$OUT/||; s|/|_|g").o"
  if [ ! -f "$o" ] || [ "$f" -nt "$o" ] || [ "$HDR" -nt "$o" ]; then
    echo "$f $o" >> "$TODO"
  fi
  OBJS="$OBJS $o"
done
# A few files use GCC-only builtins (cpu feature names clang lacks): those
# are compiled by gcc without instrumentation.
CFLAGS="$CFLAGS" SODIUM="$SODIUM" INC="$INC" xargs -P "${KILN_JOBS:-$(nproc 2>/dev/null || echo 2)}" -n 2 sh -c '
  clang $CFLAGS $SODIUM $INC -c "$1" -o "$2" 2>/dev/null ||
    { echo "note: $1 compiled with gcc (no instrumentation)";
      gcc -O1 -g -std=gnu11 -D_GNU_SOURCE -DKILN_BUILDING_LIB=1 $SODIUM $INC -c "$1" -o "$2"; }' sh < "$TODO"
for t in onnx engine; do
  clang $CFLAGS $INC -fsanitize=fuzzer "$ROOT/fuzz/${t}_fuzz.c" $OBJS -lprotobuf-c $SODIUM_LIB -lpthread -ldl -lm \
    -o "$OUT/${t}_fuzz"
  echo "built $OUT/${t}_fuzz"
done
# The engine seeds are made on this machine (engines carry its CPU signature),
# again when one no longer loads (a format version change, another CPU).
if [ "${1:-}" = run ] || [ "${1:-}" = runs ] || [ "${1:-}" = pack ]; then
  first=$(ls "$OUT"/seed_engine/*.engine 2>/dev/null | head -1)
  if [ -n "$first" ] && [ -x "$ROOT/build/kiln" ] && ! "$ROOT/build/kiln" inspect "$first" >/dev/null 2>&1; then
    echo "fuzz/build.sh: $first does not load with build/kiln: remaking the seed engines"
    rm -rf "$OUT/seed_engine" "$OUT/corpus_engine"
    mkdir -p "$OUT/corpus_engine"
  fi
  if { [ "${2:-}" = engine ] || [ "$1" = pack ]; } && [ ! -d "$OUT/seed_engine" ]; then
    [ -x "$ROOT/build/kiln" ] || { echo "fuzz/build.sh: build kiln first (build/kiln makes the seed engines)"; exit 1; }
    sh "$ROOT/fuzz/make_engine_corpus.sh" "$ROOT/build" "$OUT/seed_engine"
  fi
fi
corpus() { if [ "$1" = onnx ]; then echo "$ROOT/fuzz/corpus"; else echo "$OUT/seed_engine"; fi; }
case "${1:-}" in
  run)
    T=${2:?target: onnx or engine}; SEC=${3:-600}
    # -fork=1: one worker process, restarted after a crash (kept in $OUT/),
    # so a long run reports every crash site, not only the first
    ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1} exec nice -n 19 "$OUT/${T}_fuzz" -max_total_time="$SEC" -max_len=262144 -timeout=60 \
      -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
      -rss_limit_mb=2048 -malloc_limit_mb=1024 -artifact_prefix="$OUT/" "$OUT/corpus_$T" "$(corpus "$T")" ;;
  runs)
    T=${2:?target: onnx or engine}; N=${3:-2000}
    # new inputs go to the first folder: build-fuzz/, never the committed corpus
    ASAN_OPTIONS=${ASAN_OPTIONS:-allocator_may_return_null=1} exec nice -n 19 "$OUT/${T}_fuzz" -runs="$N" -seed=1 -max_len=262144 -timeout=60 \
      -rss_limit_mb=2048 -malloc_limit_mb=1024 -artifact_prefix="$OUT/" "$OUT/corpus_$T" "$(corpus "$T")" ;;
  pack)
    D=${2:?usage: fuzz/build.sh pack DIR}
    mkdir -p "$D/lib" "$D/seed_engine" "$D/seed_onnx"
    cp "$OUT/engine_fuzz" "$OUT/onnx_fuzz" "$ROOT/fuzz/run.sh" "$D/"
    # the seeds, and what fuzzing here has added to them (engines made on
    # another machine are re-signed by the harness, see engine_fuzz.c)
    cp "$OUT"/seed_engine/* "$D/seed_engine/"
    find "$OUT/corpus_engine" -type f -size -64k -exec cp {} "$D/seed_engine/" \; 2>/dev/null
    cp "$ROOT"/fuzz/corpus/* "$D/seed_onnx/"
    find "$OUT/corpus_onnx" -type f -size -64k -exec cp {} "$D/seed_onnx/" \; 2>/dev/null
    # libraries beyond the C runtime's (libstdc++ and libgcc_s are everywhere)
    ldd "$OUT/engine_fuzz" "$OUT/onnx_fuzz" | awk '/=> \// {print $3}' | sort -u |
      grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libgcc_s|libstdc\+\+)\.so' |
      while read -r lib; do cp -L "$lib" "$D/lib/"; done
    echo "packed $D ($(du -sh "$D" | cut -f1)): $(ls "$D/seed_engine" | wc -l) engine seeds, $(ls "$D/seed_onnx" | wc -l) ONNX seeds"
    echo "run there: sh $D/run.sh JOBS SECONDS [engine|onnx] [OUT_DIR]" ;;
esac
