#!/usr/bin/env bash
# torch.compile(mode="max-autotune") rows of bench/gpu_compare.py spread over
# the GPUs of one host, resumable across runs.  Inductor's autotuning of one
# PP-OCR or FP32 ResNet-50 row takes 5-15 minutes on 16 cores, longer than one
# call on the project's GPU machine, so each row keeps its own inductor cache
# (TORCHINDUCTOR_CACHE_DIR): its autotune timings survive a timeout and the
# next run with the same cache resumes where this one stopped.
#
#   Q0="ppocrv4_det:32:fp16" Q1="resnet50:32:fp32,bert_encoder:32:fp32" \
#   KILN=build/kiln PPOCR=../shared/models/ppocrv4_det/model.onnx \
#   CACHE=/tmp/ind LOGS=/tmp/logs END=530 bash bench/gpu_autotune_rows.sh
#
# Qi: the rows GPU i runs in turn ("model:batch:prec", gpu_compare's names);
# a row gets an equal share of the time left before END seconds.  Each row's
# process is pinned to 16 cores of its own (GPU i: cores 16i..16i+15) so that
# one row's compile workers do not slow another row's timed runs.  kiln and
# eager are timed in the same process as max-autotune (MODES to change).
# To carry a cache between machines, pack CACHE without its */triton folders
# (compiled binaries, rebuilt on demand): the autotune timings are in
# CACHE/<row>/cache/ and are a few hundred kB.
set -u
here=$(cd "$(dirname "$0")" && pwd)
KILN=${KILN:-build/kiln}; PPOCR=${PPOCR:-../shared/models/ppocrv4_det/model.onnx}
CACHE=${CACHE:-/tmp/kiln_inductor}; LOGS=${LOGS:-/tmp/kiln_autotune_logs}; END=${END:-530}
GM=${GM:-/tmp/kiln_gpu_models}
T0=$SECONDS; mkdir -p "$LOGS" "$CACHE" "$GM"
if echo "${Q0:-}${Q1:-}${Q2:-}${Q3:-}${Q4:-}${Q5:-}${Q6:-}${Q7:-}" | grep -qE 'resnet50|bert_encoder'; then
  timeout 150 python3 "$here/gen_torchvision.py" --gpu-set --only resnet50,bert_encoder --out "$GM" > "$LOGS/gen.log" 2>&1 \
    || { echo "gen_torchvision.py failed: $LOGS/gen.log"; exit 1; }
fi
runq() { # gpu "rows"
  local g=$1 rows n i=0 r m b p
  IFS=, read -ra rows <<< "$2"; n=${#rows[@]}
  for r in "${rows[@]}"; do
    IFS=: read -r m b p <<< "$r"
    local name=${m}_b${b}_${p} s=$(( (END-(SECONDS-T0)) / (n-i) )); i=$((i+1))
    [ $s -lt 30 ] && { echo "gpu$g $name: no time left"; continue; }
    echo "[$((SECONDS-T0))s] gpu$g $name: start, ${s}s"
    CUDA_VISIBLE_DEVICES=$g TORCHINDUCTOR_CACHE_DIR="$CACHE/$name" TORCHINDUCTOR_COMPILE_THREADS=16 \
      timeout $s taskset -c $((g*16))-$((g*16+15)) python3 "$here/gpu_compare.py" --kiln "$KILN" --onnx-dir "$GM" \
      --ppocr "$PPOCR" --models $m --batches $b --precisions $p --modes "${MODES:-eager,max-autotune}" \
      --budget $((s-3)) --compile-reserve 5 --max-s 1.0 --work "/tmp/kiln_gcw_$name" --json "$LOGS/$name.json" \
      > "$LOGS/$name.txt" 2>&1
    echo "[$((SECONDS-T0))s] gpu$g $name: rc=$? $(grep -E '^\| ' "$LOGS/$name.txt" | sed -n 3p)"
  done
}
pids=""
for g in 0 1 2 3 4 5 6 7; do v=Q$g; [ -n "${!v:-}" ] && { runq $g "${!v}" & pids="$pids $!"; }; done
wait $pids
