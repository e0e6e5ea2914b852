#!/usr/bin/env bash
# test_triton.sh — kiln's Triton backend in a real Triton Inference Server.
#
# usage: test_triton.sh <libtriton_kiln.so> <kiln CLI> <shared models folder> <sample plugin library>
#
# Installs `tritonserver` (the binary shipped in PyPI's nvidia-pytriton 0.7.0,
# Triton 2.51) into a venv (KILN_TRITON_VENV, default: beside the backend),
# writes a model repository (ppocr_cls from model.onnx, built by the backend
# on first load with dynamic batching and 2 instances; silero_vad_v5 as a
# model.kiln built here by the CLI; samples/circ_pad.onnx with its op from the
# sample plugin library named in parameters; a model whose plugin is missing;
# models whose config.pbtxt names only the backend, completed by the backend
# from the engine; ppocrv4_det from model.onnx; a model the client unloads
# and reloads under load), starts the server on 127.0.0.1 only (free ports,
# metrics off, explicit model control with every model loaded), waits for it,
# runs scripts/triton_client.py (HTTP, KServe v2 protocol, and gRPC through
# tritonclient when pip can install it: outputs vs ONNX
# Runtime's reference data, batched vs unbatched, concurrent requests,
# malformed requests, statistics, auto-completed configs, unload/reload
# under load with the backend's live counters from the server log and the
# server's RSS) and stops the server.  Exit 77 (ctest
# skip) with the reason when the server cannot be installed or started.
set -uo pipefail
backend=$(realpath "$1") cli=$(realpath "$2") models=$(realpath "$3") plugin=$(realpath "$4")
here=$(cd "$(dirname "$0")" && pwd)
work=$(dirname "$backend")/triton-test
venv=${KILN_TRITON_VENV:-$(dirname "$backend")/triton-venv}
skip() { echo "SKIPPED: $*"; exit 77; }

for m in ppocr_cls silero_vad_v5 ppocrv4_det; do
  [ -f "$models/$m/model.onnx" ] || skip "$models/$m/model.onnx not found"
done
python3 -c 'import numpy, onnx' 2>/dev/null || skip "python3 lacks numpy/onnx (reference data reader)"

# ---- the server, from PyPI --------------------------------------------------
server=$(ls "$venv"/lib/python3*/site-packages/pytriton/tritonserver/bin/tritonserver 2>/dev/null | head -1)
if [ -z "$server" ]; then
  timeout 120 python3 -m venv "$venv" >/dev/null 2>&1 || skip "python3 -m venv failed"
  timeout 600 "$venv/bin/pip" install -q --no-deps nvidia-pytriton==0.7.0 >"$work.pip.log" 2>&1 \
    || skip "pip install nvidia-pytriton==0.7.0 failed: $(tail -1 "$work.pip.log")"
  server=$(ls "$venv"/lib/python3*/site-packages/pytriton/tritonserver/bin/tritonserver 2>/dev/null | head -1)
fi
[ -x "$server" ] || skip "nvidia-pytriton has no tritonserver binary"
# The gRPC client (optional: without it the gRPC checks are skipped).
py=python3
if ! "$venv/bin/python" -c 'import tritonclient.grpc, numpy, onnx' 2>/dev/null; then
  timeout 300 "$venv/bin/pip" install -q "tritonclient[grpc]" numpy onnx >>"$work.pip.log" 2>&1 \
    || echo "note: pip install tritonclient[grpc] failed; gRPC checks skipped"
fi
"$venv/bin/python" -c 'import tritonclient.grpc, numpy, onnx' 2>/dev/null && py=$venv/bin/python
# --help prints the usage and exits 1: it proves the binary and its libraries load.
usage=$(timeout 30 "$server" --help 2>&1)
case $usage in "Usage: tritonserver"*) ;; *) skip "tritonserver does not run: ${usage:0:300}" ;; esac

# ---- backend directory and model repository --------------------------------
rm -rf "$work" && mkdir -p "$work/backends/kiln" "$work/models"
cp "$backend" "$work/backends/kiln/libtriton_kiln.so"
repo=$work/models
mkdir -p "$repo/cls/1" "$repo/vad/1" "$repo/broken/1"
ln -s "$models/ppocr_cls/model.onnx" "$repo/cls/1/model.onnx"
cat >"$repo/cls/config.pbtxt" <<'CFG'
backend: "kiln"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 3, 48, 192 ] } ]
output [ { name: "softmax_0.tmp_0" data_type: TYPE_FP32 dims: [ 2 ] } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "threads" value: { string_value: "1" } }
CFG
timeout 600 "$cli" build "$models/silero_vad_v5/model.onnx" --values sr=16000 \
  --shapes input:1x512,state:2x1x128 -o "$repo/vad/1/model.kiln" >/dev/null || { echo "FAIL: kiln build silero"; exit 1; }
cat >"$repo/vad/config.pbtxt" <<'CFG'
backend: "kiln"
max_batch_size: 0
input [ { name: "input" data_type: TYPE_FP32 dims: [ 1, 512 ] },
        { name: "state" data_type: TYPE_FP32 dims: [ 2, 1, 128 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 1, 1 ] },
         { name: "stateN" data_type: TYPE_FP32 dims: [ 2, 1, 128 ] } ]
CFG
mkdir -p "$repo/circ_pad/1"
ln -s "$here/../samples/circ_pad.onnx" "$repo/circ_pad/1/model.onnx"
cat >"$repo/circ_pad/config.pbtxt" <<CFG
backend: "kiln"
max_batch_size: 0
input [ { name: "x" data_type: TYPE_FP32 dims: [ 1, 3, 8, 8 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 1, 3, 11, 11 ] } ]
parameters { key: "plugins" value: { string_value: "$plugin" } }
CFG
cp "$repo/vad/1/model.kiln" "$repo/broken/1/model.kiln"
# Auto-complete: a model.kiln with a batch profile (1..8) and a config that
# names only the backend; silero's model.kiln with the same; PP-OCRv4 det
# from model.onnx with only the dims the model leaves dynamic.
mkdir -p "$repo/auto/1" "$repo/auto_vad/1" "$repo/det/1" "$repo/churn/1"
timeout 600 "$cli" build "$models/ppocr_cls/model.onnx" --min-shapes x:1x3x48x192 \
  --opt-shapes x:1x3x48x192 --max-shapes x:8x3x48x192 -o "$repo/auto/1/model.kiln" >/dev/null \
  || { echo "FAIL: kiln build ppocr_cls 1..8"; exit 1; }
echo 'backend: "kiln"' >"$repo/auto/config.pbtxt"
cp "$repo/vad/1/model.kiln" "$repo/auto_vad/1/model.kiln"
echo 'backend: "kiln"' >"$repo/auto_vad/config.pbtxt"
ln -s "$models/ppocrv4_det/model.onnx" "$repo/det/1/model.onnx"
cat >"$repo/det/config.pbtxt" <<'CFG'
backend: "kiln"
max_batch_size: 2
input [ { name: "x" dims: [ 3, 640, 640 ] } ]
CFG
# Unloaded and reloaded under load (triton_client.py): 2 instances.
cp "$repo/auto/1/model.kiln" "$repo/churn/1/model.kiln"
printf 'backend: "kiln"\ninstance_group [ { count: 2 kind: KIND_CPU } ]\n' >"$repo/churn/config.pbtxt"
sed 's/^max_batch_size: 0/max_batch_size: 0\nparameters { key: "plugins" value: { string_value: "libnope_plugin.so" } }/' \
  "$repo/vad/config.pbtxt" >"$repo/broken/config.pbtxt"

# ---- start, wait, test, stop ------------------------------------------------
read -r http grpc < <(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
log=$work/server.log
timeout 900 "$server" --model-repository "$repo" --backend-directory "$work/backends" \
  --http-address 127.0.0.1 --http-port "$http" --grpc-address 127.0.0.1 --grpc-port "$grpc" \
  --allow-metrics=false --exit-on-error=false --strict-readiness=false --log-verbose=0 \
  --model-control-mode=explicit --load-model='*' >"$log" 2>&1 &
pid=$!
stop() { kill "$pid" 2>/dev/null; for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return; sleep 0.2; done; kill -9 "$pid" 2>/dev/null; }
trap stop EXIT
for _ in $(seq 300); do
  curl -sf -m 2 "http://127.0.0.1:$http/v2/health/ready" >/dev/null && break
  kill -0 "$pid" 2>/dev/null || { tail -20 "$log"; skip "tritonserver exited while starting (log above)"; }
  sleep 0.5
done
curl -sf -m 2 "http://127.0.0.1:$http/v2/health/ready" >/dev/null || { tail -20 "$log"; echo "FAIL: server not ready after 150 s"; exit 1; }
# The server's own pid (its parent is `timeout`), for its RSS.
srv=$(cat /proc/$pid/task/*/children 2>/dev/null | awk '{print $1; exit}')
KILN_TRITON_LOG=$log KILN_TRITON_PID=${srv:-$pid} \
  timeout 400 "$py" "$here/triton_client.py" "http://127.0.0.1:$http" "$models" "127.0.0.1:$grpc"
rc=$?
[ $rc -eq 0 ] || { echo "--- server log (tail)"; tail -30 "$log"; }
kill -0 "$pid" 2>/dev/null || { echo "FAIL: the server died during the tests"; rc=1; }
exit $rc
