#!/usr/bin/env bash
# test.sh — what CI runs (.ci/run): a Release build + every test, then an
# AddressSanitizer + UndefinedBehaviorSanitizer build + every test again
# (the conformance suites and real models included: they exercise every op),
# then the samples and real models under valgrind (scripts/valgrind.sh); the
# Python package's pytest suite after the Release tests (scripts/python_test.sh).  Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${KILN_JOBS:-2}

bash scripts/setup.sh

echo "== Release build (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
echo "== Release tests"
(cd build && ctest --output-on-failure -j"$jobs" --timeout 600)

# The CUDA kernels' fatbin depends on the .cu sources alone: the Python
# package's, the sanitizer and the valgrind builds embed the Release build's
# instead of running nvcc again (~8 CPU-minutes each on CI's 2 cores;
# cmake/cuda_kernels.cmake, KILN_CUDA_FATBIN).
fb=$PWD/build/gen/kiln_kernels.fatbin
if [ -f "$fb" ]; then export KILN_PREBUILT_FATBIN=$fb; fi

echo "== Python package: pip install . in build/venv, pytest tests/python"
bash scripts/python_test.sh

echo "== ASan+UBSan build (build-asan/)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON \
  ${KILN_PREBUILT_FATBIN:+-DKILN_CUDA_FATBIN=$KILN_PREBUILT_FATBIN} >/dev/null
cmake --build build-asan -j"$jobs"
echo "== ASan+UBSan tests"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
(cd build-asan && ctest --output-on-failure -j"$jobs" --timeout 1800)
echo "== fuzz targets: a fixed count of executions each (fuzz/README)"
bash fuzz/build.sh runs engine "${KILN_FUZZ_RUNS:-3000}"
bash fuzz/build.sh runs onnx "${KILN_FUZZ_RUNS:-3000}"
echo "== valgrind: samples and real models (portable build, build-valgrind/)"
bash scripts/valgrind.sh
echo "== all tests passed"
