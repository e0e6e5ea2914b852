#!/usr/bin/env bash
# test_gpu.sh — the CUDA backend's checks on a machine with an NVIDIA GPU.
#
# Two steps, because the GPU machine usually cannot build kiln (no
# protobuf-c) and has no libonnx-testdata:
#
#   scripts/test_gpu.sh pack BUILD_DIR BUNDLE_DIR   (on the build machine)
#       copies kiln, libkiln.so.0, the cuda-labelled test programs (in one
#       solid tests.tar.xz with kiln-bench-launch: each carries the CUDA
#       fatbin), the
#       shared libraries they need beyond the C runtime (protobuf-c,
#       libsodium), this script, tests/onnx_skip.txt (the cases
#       known to fail for reasons of their own), the ONNX node cases and the shared
#       models (as .tgz) into BUNDLE_DIR (about 50 MB: one device call);
#   scripts/test_gpu.sh run BUNDLE_DIR [LOG_DIR]      (on the GPU machine)
#       runs, logging each step to LOG_DIR (default BUNDLE_DIR/logs):
#        1. kiln devices
#        2. the cuda tests (test_cuda: device layer, kernels, cuBLASLt,
#           engines, CUDA graphs, 4 contexts on 4 streams bit-identical to
#           one; test_cuda_placement; test_cuda_cudnn: the cuDNN conv tactic,
#           with torch's cuDNN as KILN_CUDNN; test_cuda_conv_dw: the depthwise
#           conv tactic; test_cuda_conv_igemm: the implicit-GEMM conv
#           kernels; test_cuda_nhwc: the LINEAR <-> NHWC reformat, the NHWC
#           conv tactics and an NHWC engine chain; test_cuda_ops: every op's CUDA
#           implementation against its CPU one; the kernels alone against
#           PyTorch: scripts/test_gpu_kernels.sh)
#        3. kiln test-onnx --device cuda over the ONNX node cases (with the
#           skip list): passed,
#           failed, skipped and how many ran entirely on the GPU
#        4. the shared models on the GPU against their reference outputs
#           (ONNX Runtime CPU FP32; rtol 1e-3, atol 1e-4), FP32; then built
#           with --fp16 (rtol = atol = 2e-2) and --bf16 (rtol = atol = 1e-1)
#           against the same FP32 references: FP16 rounds to 2^-11, BF16 to
#           2^-8, relative; through ~50 layers that grows to ~1e-2 and ~1e-1
#           of the output's scale.  KILN_GPU_MODELS="DIR ..." adds the
#           model folders (model.onnx + test_data_set_0) under each DIR,
#           e.g. ResNet-50 and the BERT-base encoder written there by
#           `bench/gen_torchvision.py --gpu-set --test-data --out DIR`
#        5. compute-sanitizer --tool memcheck on test_cuda and on one model
#        6. the C samples with --device cuda (kiln-samples: every sample and
#           mode on its CUDA kernels, each checked against the runner's naive
#           reference; save/load bit for bit; the circ_pad AOT CUDA engine
#           loaded in a fresh process that never loads the sample library,
#           from the cubin and from the PTX; compute-sanitizer on that run)
#           and test_aot_cuda
#        7. the Python package's GPU tests (when the bundle has it, see
#           below): tests/python/test_gpu_plugins.py (CUDA impls and class
#           plugins with torch, Triton, CuPy, Numba, cuda-python; the GPU
#           samples; Triton PTX as AOT kernels) and the CPU suite
#           (tests/python, the samples included) on the GPU machine's
#           Python, then bench/plugin_overhead.py
#           with, beside the pytest run, compute-sanitizer memcheck on the
#           Python GPU samples (qdp_runner add/inplace_add/non_zero/circ_pad
#           with Triton, --multi_tactic, --aot; class-plugin circ_pad with
#           cuda-python, CuPy, Triton, Numba, torch), judged by
#           scripts/sanitizer_report.py (every memory error counts, and every
#           API error of a call kiln made; API errors of calls torch, Triton,
#           CuPy or Numba made themselves are listed, with the library that
#           made the call, not counted); kiln-bench-launch in the bundle gives
#           plugin_overhead.py its C cuLaunchKernel peer
#        8. kiln's Triton backend (when built with -DKILN_TRITON=ON):
#           test_triton_backend (its KIND_GPU branch runs on a GPU) and, with
#           KILN_TRITON_SERVER_TAR at pack time, a real tritonserver serving
#           ppocr_cls with instance_group KIND_GPU and dynamic batching,
#           checked over HTTP (scripts/triton_gpu_client.py)
#       and prints a summary; exit status 1 if a step failed.
#       KILN_GPU_TRITON_ONLY=1 runs step 8 only.
#       KILN_GPU_NODE=0 leaves out step 3 (about 200 s on an H100 machine),
#       KILN_GPU_MEMCHECK=0 step 5; KILN_GPU_PYTHON_ONLY=1 runs steps 1 and
#       7 only (KILN_GPU_PY_CPU=0: without the CPU suite; KILN_BENCH_ARGS:
#       arguments of plugin_overhead.py; KILN_GPU_BENCH=0: without it); STEP_TIMEOUT (default 300 s)
#       bounds every other step.
#
# The Python step: KILN_PY_PACKAGE=<site-packages>/kiln (an installed kiln
# package: `pip install .`; abi3, so a build for Python 3.11 imports on the
# GPU machine's 3.12) makes pack copy it, the Python tests, samples and
# benchmark, and pytest's wheels from KILN_PY_WHEELS (the GPU machine may
# lack pytest; it has no network).
#
# With the GPU machine of this project (the `run` tool): pack into an ignored
# folder of the checkout that travels, e.g.
#   scripts/test_gpu.sh pack build /work/main/.gpu-cuda
# and run there `bash .gpu-cuda/test_gpu.sh run .gpu-cuda $OUT` with carry [".gpu-cuda"]: an untracked
# bundle travels without carry too, but without libkiln_samples_ops.so (.gitignore's *.so), and every
# sample step then fails on the missing plugin library (session 20).
set -u

pack() {
    local build=$1 out=$2
    local here
    here=$(cd "$(dirname "$0")" && pwd)
    mkdir -p "$out"
    cp -L "$build/kiln" "$build/libkiln.so.0" "$out/"
    # The test programs (and kiln-bench-launch) link libkiln statically, so
    # each carries the whole CUDA fatbin (~11 MB apiece): one solid xz
    # archive stores that once (~100 MB -> ~10 MB), and the bundle fits one
    # call of a GPU machine that takes 64 MiB a call.  run unpacks it.
    local tests=()
    for t in test_cuda test_cuda_placement test_cuda_ops test_cuda_fusion test_cuda_conv_dw test_cuda_cudnn test_cuda_conv_igemm test_cuda_nhwc test_aot_cuda kiln-bench-launch; do
        [ -f "$build/$t" ] && tests+=("$t")
    done
    rm -f "$out/tests.tgz" "$out/tests.tar.xz"
    [ ${#tests[@]} -gt 0 ] && tar cf - -C "$build" "${tests[@]}" | xz -9 -T1 >"$out/tests.tar.xz"
    for t in kiln-samples libkiln_samples_ops.so backends/triton/libtriton_kiln.so backends/triton/test_triton_backend; do
        [ -f "$build/$t" ] && cp -L "$build/$t" "$out/"
    done
    # the Triton steps (step 8): the model they serve, the HTTP client, and
    # the server itself when KILN_TRITON_SERVER_TAR names a tar.xz of
    # nvidia-pytriton's pytriton/tritonserver/bin/tritonserver and the
    # nvidia_pytriton.libs it needs (paths as in site-packages)
    if [ -f "$out/test_triton_backend" ]; then
        tar czf "$out/triton_models.tgz" -C "${KILN_MODELS:-$here/../../shared/models}/.." models/ppocr_cls
        cp "$here/triton_gpu_client.py" "$here/triton_http.py" "$out/"
        [ -n "${KILN_TRITON_SERVER_TAR:-}" ] && cp "$KILN_TRITON_SERVER_TAR" "$out/tritonserver.tar.xz"
    fi
    # what kiln-samples reads from the source tree (KILN_SOURCE_DIR): the
    # interpolate plugin's source (compiled there, with kiln's headers) and
    # the circ_pad ONNX models
    mkdir -p "$out/src/samples/interpolate" "$out/src/tests/fixtures"
    cp -r "$here/../include" "$out/src/"
    cp "$here/../samples/interpolate/interpolate.c" "$out/src/samples/interpolate/"
    cp "$here/../samples/circ_pad.onnx" "$out/src/samples/"
    cp "$here/../tests/fixtures/circ_pad_aot1.onnx" "$out/src/tests/fixtures/"
    # libraries the GPU machine may lack (protobuf-c, libsodium, ...): all
    # but the C runtime's
    ldd "$out/kiln" "$out/libkiln.so.0" "$build/test_cuda" | awk '/=> \// {print $3}' | sort -u |
        grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libgcc_s|libstdc\+\+)\.so' |
        while read -r lib; do cp -L "$lib" "$out/"; done
    cp "$here/test_gpu.sh" "$here/../tests/onnx_skip.txt" "$out/"
    # ONNX fixtures the cuda tests import (found through KILN_TEST_FIXTURES)
    mkdir -p "$out/fixtures" && cp "$here/../tests/fixtures/mha_encoder.onnx" "$out/fixtures/"
    local data=${KILN_ONNX_TESTDATA:-/usr/share/libonnx-testdata/data}
    local models=${KILN_MODELS:-$here/../../shared/models}
    if [ -n "${KILN_PY_PACKAGE:-}" ]; then
        rm -rf "$out/pylib" && mkdir -p "$out/pylib" && cp -r "$KILN_PY_PACKAGE" "$out/pylib/"
        find "$out/pylib" -name __pycache__ -prune -exec rm -rf {} +
        # the fixtures the Python tests name (FIXTURES / "x.onnx"), read off
        # the tests so that a new one is not left behind
        local fx
        fx=$(cd "$here/.." && grep -rhoE 'FIXTURES / "[^"]+"' tests/python | sed -E 's#.*"(.*)"#tests/fixtures/\1#' | sort -u)
        # shellcheck disable=SC2086
        tar czf "$out/py.tgz" -C "$here/.." tests/python samples/python bench/plugin_overhead.py scripts/sanitizer_report.py $fx
        [ -n "${KILN_PY_WHEELS:-}" ] && mkdir -p "$out/wheels" && cp "$KILN_PY_WHEELS"/*.whl "$out/wheels/"
    fi
    [ -d "$data/node" ] && tar czf "$out/node.tgz" -C "$data" node
    [ -d "$models" ] && tar czf "$out/models.tgz" -C "$(dirname "$models")" "$(basename "$models")"
    du -sh "$out"
}

run() {
    local dir logs
    dir=$(cd "$1" && pwd)
    logs=${2:-$dir/logs}
    mkdir -p "$logs"
    export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # kiln's optional cuDNN conv tactics (docs/CUDA.md): the cuDNN torch's wheels bring, unless KILN_CUDNN is set
    if [ -z "${KILN_CUDNN:-}" ]; then
        KILN_CUDNN=$(python3 -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' \
            2>/dev/null) && export KILN_CUDNN || unset KILN_CUDNN
    fi
    [ -d "$dir/fixtures" ] && export KILN_TEST_FIXTURES="$dir/fixtures"
    local kiln="$dir/kiln" fails=0 work
    work=$(mktemp -d)
    summary() { echo "$*" | tee -a "$logs/summary.txt"; }
    step() { # step NAME CMD...: run, log, record status
        local name=$1
        shift
        local t0=$SECONDS
        if [ "$(type -t "$1")" = function ]; then
            "$@" >"$logs/$name.log" 2>&1
        else
            timeout "${STEP_TIMEOUT:-300}" "$@" >"$logs/$name.log" 2>&1
        fi
        local rc=$? what
        case $rc in 0) what=ok ;; 77) what=skipped ;; *) what="FAILED rc=$rc"; fails=$((fails + 1)) ;; esac
        summary "$(printf '%-28s %s (%ds)' "$name" "$what" $((SECONDS - t0)))"
        return $rc
    }
    python_steps() {
        mkdir -p "$work/py" && tar xzf "$dir/py.tgz" -C "$work/py"
        local site=$dir/pylib
        if ! python3 -c 'import pytest' 2>/dev/null && [ -d "$dir/wheels" ]; then
            python3 -m pip install -q --no-index --no-deps --no-compile --target "$work/site" "$dir"/wheels/*.whl
            site=$site:$work/site
        fi
        export PYTHONPATH="$site:$work/py/samples/python${PYTHONPATH:+:$PYTHONPATH}"
        export KILN_CLI="$kiln" PYTHONUNBUFFERED=1
        local cs=${COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer} mpid=""
        if [ "${KILN_GPU_MEMCHECK:-1}" != 0 ] && [ -x "$cs" ]; then # beside pytest: both mostly wait
            memcheck_python "$cs" "$work/py" "$logs/memcheck_python" >"$logs/memcheck_python.log" 2>&1 &
            mpid=$!
        fi
        STEP_TIMEOUT=${KILN_PY_GPU_TIMEOUT:-600} step python_gpu python3 -m pytest -q -rs -p no:cacheprovider "$work/py/tests/python/test_gpu_plugins.py"
        summary "  $(tail -1 "$logs/python_gpu.log")"
        if [ -n "$mpid" ]; then
            local mrc=0
            wait "$mpid" || mrc=$?
            summary "$(printf '%-28s %s' memcheck_python "$([ $mrc = 0 ] && echo ok || echo "FAILED rc=$mrc")")"
            [ $mrc = 0 ] || fails=$((fails + 1))
            grep -E '^(ok  |FAIL) ' "$logs/memcheck_python.log" | sed 's/^/  /' | tee -a "$logs/summary.txt"
        fi
        if [ "${KILN_GPU_PY_CPU:-1}" != 0 ]; then
            step python_cpu_suite python3 -m pytest -q -p no:cacheprovider "$work/py/tests/python" \
                --ignore "$work/py/tests/python/test_gpu_plugins.py"
            summary "  $(tail -1 "$logs/python_cpu_suite.log")"
        fi
        if [ "${KILN_GPU_BENCH:-1}" != 0 ]; then
            # shellcheck disable=SC2086
            step plugin_overhead python3 "$work/py/bench/plugin_overhead.py" ${KILN_BENCH_ARGS:-}
            tee -a "$logs/summary.txt" <"$logs/plugin_overhead.log"
        fi
    }
    : >"$logs/summary.txt"
    # pack's test programs (Python's lzma: the machine may lack xz)
    [ -f "$dir/tests.tar.xz" ] && python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        "$dir/tests.tar.xz" "$dir"
    step devices "$kiln" devices
    cat "$logs/devices.log"
    if [ "${KILN_GPU_TRITON_ONLY:-0}" = 1 ]; then # the Triton step alone
        triton_gpu "$dir" "$work"
        rm -rf "$work"
        summary "$fails step(s) failed"
        [ $fails = 0 ]
        return
    fi
    if [ "${KILN_GPU_PYTHON_ONLY:-0}" = 1 ]; then # the Python step alone
        python_steps
        rm -rf "$work"
        summary "$fails step(s) failed"
        [ $fails = 0 ]
        return
    fi
    for p in "$dir"/test_cuda*; do
        [ -e "$p" ] || continue
        local t
        t=$(basename "$p")
        step "$t" "$p"
        grep -q "^SKIP" "$logs/$t.log" && summary "  $(grep '^SKIP' "$logs/$t.log")"
    done
    if [ -f "$dir/node.tgz" ] && [ "${KILN_GPU_NODE:-1}" != 0 ]; then
        tar xzf "$dir/node.tgz" -C "$work"
        # one kiln test-onnx per 16 cases, as many at once as there are CPUs
        node_cases() {
            find "$work/node" -mindepth 1 -maxdepth 1 -type d | sort |
                xargs -P "$(nproc)" -n 16 "$kiln" test-onnx --device cuda --threads 2 --skip-list "$dir/onnx_skip.txt" |
                grep -E '^(PASS|FAIL|SKIP) ' | sort
        }
        step onnx_node_cuda node_cases
        local p f k g
        p=$(grep -c '^PASS' "$logs/onnx_node_cuda.log")
        f=$(grep -c '^FAIL' "$logs/onnx_node_cuda.log")
        k=$(grep -c '^SKIP' "$logs/onnx_node_cuda.log")
        g=$(grep -c '^PASS .*(on GPU)$' "$logs/onnx_node_cuda.log")
        summary "  node cases: $p passed, $f failed, $k skipped; $g of the $p passed ran entirely on the GPU"
        [ "$f" = 0 ] || fails=$((fails + 1))
    fi
    local mdirs=() m n
    if [ -f "$dir/models.tgz" ]; then
        tar xzf "$dir/models.tgz" -C "$work"
        mdirs+=("$work/models")
    fi
    for m in ${KILN_GPU_MODELS:-}; do mdirs+=("$m"); done
    # precision, its build flag, rtol = atol (see the header)
    local prec tag flag rtol atol d name
    for prec in "fp32 - 1e-3 1e-4" "fp16 --fp16 2e-2 2e-2" "bf16 --bf16 1e-1 1e-1"; do
        read -r tag flag rtol atol <<<"$prec"
        for d in "${mdirs[@]}"; do
            for m in "$d"/*/; do
                [ -f "$m/model.onnx" ] || continue
                n=$(basename "$m")
                name="model_$n"
                [ "$tag" = fp32 ] || name="model_${n}_$tag"
                if [ "$flag" = - ]; then
                    step "$name" "$kiln" test-onnx --device cuda --rtol "$rtol" --atol "$atol" "$m"
                else
                    step "$name" "$kiln" test-onnx --device cuda "$flag" --rtol "$rtol" --atol "$atol" "$m"
                fi
                summary "  $(grep -E '^(PASS|FAIL|SKIP)' "$logs/$name.log" | head -1 | cut -c1-200)"
                # a model that does not run (test-onnx says SKIP for an
                # unsupported op or a run error) is a failure here
                if ! grep -qE '^PASS' "$logs/$name.log"; then
                    summary "  $name: not PASS"
                    fails=$((fails + 1))
                fi
            done
        done
    done
    local cs=${COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}
    [ -x "$dir/kiln-samples" ] && samples_gpu "$dir" "$work" "$cs"
    if [ "${KILN_GPU_MEMCHECK:-1}" = 0 ]; then
        summary "memcheck left out (KILN_GPU_MEMCHECK=0)"
    elif [ -x "$cs" ] && [ -x "$dir/test_cuda" ]; then
        # API errors are not counted: test_cuda provokes two on purpose (out of
        # memory, an unknown kernel name) to check kiln's messages
        step memcheck_test_cuda "$cs" --tool memcheck --report-api-errors no --error-exitcode 1 "$dir/test_cuda"
        summary "  $(grep -E 'ERROR SUMMARY' "$logs/memcheck_test_cuda.log" | tail -1)"
        if [ -d "$work/models/ppocr_cls" ]; then
            step memcheck_model "$cs" --tool memcheck --report-api-errors no --error-exitcode 1 "$kiln" test-onnx --no-fork --device cuda \
                --rtol 1e-3 --atol 1e-4 "$work/models/ppocr_cls"
            summary "  $(grep -E 'ERROR SUMMARY' "$logs/memcheck_model.log" | tail -1)"
        fi
    elif [ ! -x "$cs" ]; then
        summary "compute-sanitizer not found ($cs): memcheck not run"
    fi
    if [ -d "$dir/pylib/kiln" ]; then
        python_steps
    fi
    [ -x "$dir/test_triton_backend" ] && triton_gpu "$dir" "$work"
    rm -rf "$work"
    summary "$fails step(s) failed"
    [ $fails = 0 ]
}

# Step 6: the C samples on the GPU (kiln-samples prints PASS/FAIL against
# its reference; --device cuda builds with KILN_BUILD_STRICT_DEVICE, so a
# sample layer left on the CPU fails the build).
samples_gpu() {
    local dir=$1 work=$2 cs=$3 ks="$1/kiln-samples" art="$2/artifacts"
    export KILN_SAMPLES_LIB="$dir/libkiln_samples_ops.so" KILN_SOURCE_DIR="$dir/src" KILN_INCLUDE_DIR="$dir/src/include"
    export KILN_CACHE_DIR="$work/kiln-cache"
    local t
    while read -r name args; do
        [ -n "$name" ] || continue
        # shellcheck disable=SC2086
        step "sample_cuda_$name" "$ks" $args --device cuda
        summary "  $(grep -E '^  layer .*sample::' "$logs/sample_cuda_$name.log" | head -1 | cut -c1-120)"
    done <<EOF_SAMPLES
elemwise_add elemwise_add
elemwise_add_autotune elemwise_add --autotune -v
inplace_add inplace_add
inplace_add_autotune inplace_add --autotune
non_zero non_zero
non_zero_wide non_zero --shape 37x53
chain100 chain100
circ_pad circ_pad
circ_pad_multi_tactic circ_pad --multi-tactic -v
circ_pad_per_format_tactics circ_pad --per-format-tactics
circ_pad_fp16 circ_pad --precision fp16
circ_pad_per_format_fp16 circ_pad --per-format-tactics --precision fp16
circ_pad_4d circ_pad --multi-tactic --shape 2x3x4x5 --pads 1,1,2,0,1,1,0,2
circ_pad_onnx circ_pad --mode onnx
circ_pad_onnx_aot circ_pad --mode onnx --aot
circ_pad_aot circ_pad --aot --multi-tactic
circ_pad_aot_2d circ_pad --aot --shape 7x9 --pads 2,3,0,7
circ_pad_save circ_pad --multi-tactic --save-engine --artifacts-dir $art/jit
circ_pad_load circ_pad --multi-tactic --load-engine --artifacts-dir $art/jit
circ_pad_aot_save circ_pad --aot --save-engine --artifacts-dir $art/aot
circ_pad_aot_load circ_pad --aot --load-engine --artifacts-dir $art/aot
interpolate interpolate
interpolate_bilinear interpolate --mode bilinear --scale 1.7 --shape 2x3x11x19
EOF_SAMPLES
    # the AOT engine from its PTX (as on a GPU of another architecture)
    step sample_cuda_circ_pad_aot_load_ptx env KILN_AOT_CUDA_PTX=1 "$ks" circ_pad --aot --load-engine --artifacts-dir "$art/aot" -v
    summary "  $(grep -E 'loaded from its|library in this process' "$logs/sample_cuda_circ_pad_aot_load_ptx.log" | tr '\n' ' ' | cut -c1-160)"
    # the same engine under the CLI, which loads no plugin library either
    step kiln_run_aot_engine "$dir/kiln" run "$art/aot/circ_pad.kiln"
    step kiln_inspect_aot_engine "$dir/kiln" inspect "$art/aot/circ_pad.kiln"
    summary "  $(grep -E 'AOT CUDA kernels|#0 entry' "$logs/kiln_inspect_aot_engine.log" | tr '\n' ' ' | cut -c1-160)"
    [ -x "$dir/test_aot_cuda" ] && step test_aot_cuda "$dir/test_aot_cuda"
    if [ -x "$cs" ]; then
        step memcheck_aot_engine "$cs" --tool memcheck --error-exitcode 1 "$ks" circ_pad --aot --load-engine --artifacts-dir "$art/aot"
        summary "  $(grep -E 'ERROR SUMMARY' "$logs/memcheck_aot_engine.log" | tail -1)"
        if [ -x "$dir/test_aot_cuda" ]; then
            step memcheck_test_aot_cuda "$cs" --tool memcheck --error-exitcode 1 "$dir/test_aot_cuda"
            summary "  $(grep -E 'ERROR SUMMARY' "$logs/memcheck_test_aot_cuda.log" | tail -1)"
        fi
    fi
}

# Step 7's memcheck: the Python GPU samples under compute-sanitizer, all at
# once (each mostly waits on its imports and compiles); judged by
# sanitizer_report.py, which counts every memory error and the API errors of
# calls kiln made, and lists (not counts) API errors of calls made by torch,
# Triton, CuPy or Numba themselves, with the library that made each.
memcheck_python() {
    local cs=$1 py=$2 out=$3 i=0 script args
    mkdir -p "$out"
    while read -r script args; do
        [ -n "$script" ] || continue
        i=$((i + 1))
        # shellcheck disable=SC2086
        timeout "${KILN_MEMCHECK_PY_TIMEOUT:-300}" "$cs" --tool memcheck python3 "$py/samples/python/$script" \
            $args >"$out/$(printf %02d $i)_${script%.py}_$(echo "$args" | sed 's/--//g; s/ /_/g').log" 2>&1 &
    done <<EOF_MEMCHECK
qdp_runner.py add --device cuda
qdp_runner.py inplace_add --device cuda
qdp_runner.py non_zero --device cuda
qdp_runner.py circ_pad --device cuda
qdp_runner.py circ_pad --multi_tactic --device cuda
qdp_runner.py add --aot --device cuda
qdp_runner.py circ_pad --aot --device cuda
circ_pad_plugin.py --device cuda --impl cuda-python
circ_pad_plugin.py --device cuda --impl cupy --style v2
circ_pad_plugin.py --device cuda --impl triton
circ_pad_plugin.py --device cuda --impl numba --style v2
circ_pad_plugin.py --device cuda --impl torch --precision fp16 --per-format-tactics
EOF_MEMCHECK
    wait
    python3 "$py/scripts/sanitizer_report.py" "$out"/*.log
}

# Step 8: kiln's Triton backend on the GPU (when the bundle has it):
# test_triton_backend (the stand-in server; its KIND_GPU branch runs only
# where kiln finds a GPU), then, when the bundle has tritonserver.tar.xz, a
# real tritonserver serving ppocr_cls with instance_group KIND_GPU and
# dynamic batching, checked over HTTP by triton_gpu_client.py.
triton_gpu() {
    local dir=$1 work=$2
    tar xzf "$dir/triton_models.tgz" -C "$work"
    step triton_backend_unit "$dir/test_triton_backend" "$work/models/ppocr_cls" "$work/triton-unit"
    summary "  $(grep -E 'KIND_GPU|all checks passed|failures' "$logs/triton_backend_unit.log" | tr '\n' ' ' | cut -c1-240)"
    if [ -f "$dir/tritonserver.tar.xz" ]; then
        step triton_server_gpu triton_server_gpu "$dir" "$work"
        grep -E '^(ok  |FAIL) ' "$logs/triton_server_gpu.log" | sed 's/^/  /' | tee -a "$logs/summary.txt"
    fi
}

triton_server_gpu() {
    local dir=$1 work=$2 t=$2/tritonserver repo=$2/triton-repo rc=0 http grpc pid
    mkdir -p "$t" "$repo/gpu_cls/1" "$work/triton-backends/kiln"
    # Python's lzma: the machine may lack the xz program
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$dir/tritonserver.tar.xz" "$t"
    cp "$dir/libtriton_kiln.so" "$work/triton-backends/kiln/"
    cp "$work/models/ppocr_cls/model.onnx" "$repo/gpu_cls/1/"
    cat >"$repo/gpu_cls/config.pbtxt" <<'CFG'
backend: "kiln"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 3, 48, 192 ] } ]
output [ { name: "softmax_0.tmp_0" data_type: TYPE_FP32 dims: [ 2 ] } ]
dynamic_batching { max_queue_delay_microseconds: 300000 }
instance_group [ { count: 1 kind: KIND_GPU gpus: [ 0 ] } ]
CFG
    read -r http grpc < <(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
    "$t/pytriton/tritonserver/bin/tritonserver" --model-repository "$repo" --backend-directory "$work/triton-backends" \
        --http-address 127.0.0.1 --http-port "$http" --grpc-address 127.0.0.1 --grpc-port "$grpc" \
        --allow-metrics=false --exit-on-error=false --strict-readiness=false --log-verbose=0 \
        >"$logs/tritonserver.log" 2>&1 &
    pid=$!
    for _ in $(seq 240); do
        python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
            "http://127.0.0.1:$http/v2/health/ready" 2>/dev/null && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    timeout 120 python3 "$dir/triton_gpu_client.py" "http://127.0.0.1:$http" "$work/models/ppocr_cls" || rc=1
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    grep -iE 'kiln|error' "$logs/tritonserver.log" | head -20
    return $rc
}

case "${1:-}" in
pack) [ $# = 3 ] || { echo "usage: $0 pack BUILD_DIR BUNDLE_DIR" >&2; exit 2; }; pack "$2" "$3" ;;
run) [ $# -ge 2 ] || { echo "usage: $0 run BUNDLE_DIR [LOG_DIR]" >&2; exit 2; }; run "$2" "${3:-}" ;;
*) sed -n '2,30p' "$0" >&2; exit 2 ;;
esac
