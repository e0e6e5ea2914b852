#!/bin/sh
# fuzz/build.sh — build and (optionally) run the libFuzzer target for the
# ONNX reader/importer.
#
#   fuzz/build.sh            build  build-fuzz/onnx_fuzz
#   fuzz/build.sh run [SEC]  build, then fuzz for SEC seconds (default 600),
#                            one job, nice -n 19, corpus fuzz/corpus/ (new
#                            inputs go to build-fuzz/corpus so the committed
#                            corpus stays small)
#
# Needs clang with -fsanitize=fuzzer,address and protoc-c.  All of libkiln
# is compiled in (the importer needs the registry and the network API).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${KILN_FUZZ_OUT:-$ROOT/build-fuzz}
mkdir -p "$OUT/gen" "$OUT/obj" "$OUT/corpus"
protoc-c --c_out="$OUT/gen" -I"$ROOT/src/onnx" "$ROOT/src/onnx/onnx_min.proto"
CFLAGS="-O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -std=gnu11 -D_GNU_SOURCE -DKILN_BUILDING_LIB=1"
INC="-I$ROOT/include -I$ROOT/src -I$OUT/gen"
OBJS=""
for f in "$ROOT"/src/core/*.c "$ROOT"/src/plugin/*.c "$ROOT"/src/builder/*.c "$ROOT"/src/engine/*.c "$ROOT"/src/device/*/*.c \
         "$ROOT"/src/onnx/*.c "$ROOT"/src/ops/*/*.c "$OUT/gen/onnx_min.pb-c.c"; do
  [ -f "$f" ] || continue
  o="$OUT/obj/$(echo "$f" | sed "s|$ROOT/||; s|$OUT/||; s|/|_|g").o"
  if [ ! -f "$o" ] || [ "$f" -nt "$o" ]; then
    # A few files use GCC-only builtins (cpu feature names clang lacks):
    # those are compiled by gcc without instrumentation.
    clang $CFLAGS $INC -c "$f" -o "$o" 2>/dev/null ||
      { echo "note: $f compiled with gcc (no instrumentation)"; \
        gcc -O1 -g -std=gnu11 -D_GNU_SOURCE -DKILN_BUILDING_LIB=1 $INC -c "$f" -o "$o"; }
  fi
  OBJS="$OBJS $o"
done
clang $CFLAGS $INC -fsanitize=fuzzer "$ROOT/fuzz/onnx_fuzz.c" $OBJS -lprotobuf-c -lpthread -ldl -lm \
  -o "$OUT/onnx_fuzz"
echo "built $OUT/onnx_fuzz"
if [ "${1:-}" = run ]; then
  SEC=${2:-600}
  exec nice -n 19 "$OUT/onnx_fuzz" -max_total_time="$SEC" -max_len=65536 \
    -rss_limit_mb=2048 -artifact_prefix="$OUT/" "$OUT/corpus" "$ROOT/fuzz/corpus"
fi
