#!/usr/bin/env bash
# valgrind.sh — the samples (and the real models, when ../shared/models is
# there) under valgrind memcheck: no leaks, no invalid accesses.  valgrind
# cannot decode every AVX-512 instruction, so this uses a portable build
# (-DKILN_NATIVE=OFF) in build-valgrind/.  Skipped when valgrind is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${KILN_JOBS:-2}
if ! command -v valgrind >/dev/null; then
    echo "valgrind.sh: valgrind not installed, skipped"
    exit 0
fi
cmake -S . -B build-valgrind -DCMAKE_BUILD_TYPE=Release -DKILN_NATIVE=OFF \
  ${KILN_PREBUILT_FATBIN:+-DKILN_CUDA_FATBIN=$KILN_PREBUILT_FATBIN} >/dev/null
cmake --build build-valgrind -j"$jobs" --target kiln-samples kiln_samples_ops kiln_cli >/dev/null
b=build-valgrind
art=$b/valgrind-artifacts
export KILN_CACHE_DIR=$b/valgrind-cache
vg=(valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect,possible
    --error-exitcode=99)
fail=0
check() {
    if "${vg[@]}" "$@" >"$b/valgrind.log" 2>&1; then
        echo "valgrind ok:   $*"
    else
        echo "valgrind FAIL: $*"; tail -30 "$b/valgrind.log"; fail=1
    fi
}
check $b/kiln-samples elemwise_add
check $b/kiln-samples elemwise_add --autotune --precision fp16 -v
check $b/kiln-samples inplace_add
check $b/kiln-samples non_zero
check $b/kiln-samples circ_pad --multi-tactic --save-engine --artifacts-dir "$art"
check $b/kiln-samples circ_pad --load-engine --artifacts-dir "$art"
check $b/kiln-samples circ_pad --aot
check $b/kiln-samples circ_pad --per-format-tactics --precision fp16
check $b/kiln-samples interpolate
for m in ../shared/models/*/; do
    [ -f "$m/model.onnx" ] && check $b/kiln test-onnx --no-fork --rtol 1e-3 --atol 1e-4 "$m"
done
# sequences, optionals, strings, SequenceMap, an unrolled Loop, a run-time If
# over strings (the packed values and their data-dependent shapes)
check $b/kiln test-onnx --no-fork --min-pass 1 tests/fixtures/if_string_case
t=/usr/share/libonnx-testdata/data
if [ -d $t/node ]; then
    check $b/kiln test-onnx --no-fork --min-pass 8 $t/node/test_sequence_insert_at_front $t/node/test_if_opt \
        $t/node/test_optional_get_element_sequence $t/node/test_sequence_map_extract_shapes \
        $t/node/test_loop13_seq $t/node/test_strnormalizer_export_monday_casesensintive_lower \
        $t/node/test_cast_FLOAT_to_STRING $t/simple/test_sequence_model3
fi
exit $fail
