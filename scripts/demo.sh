#!/usr/bin/env bash
# demo.sh — build kiln (Release, in build/) and run the circ_pad sample:
# build + time the engine, save it, load it back and check the outputs.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2

art=build/artifacts
echo
echo "== kiln-samples circ_pad --multi-tactic --save-engine"
./build/kiln-samples circ_pad --multi-tactic --save-engine --artifacts-dir "$art"
echo
echo "== kiln-samples circ_pad --multi-tactic --load-engine"
./build/kiln-samples circ_pad --multi-tactic --load-engine --artifacts-dir "$art"
echo
echo "== kiln inspect $art/circ_pad.kiln"
./build/kiln inspect --plugins build/libkiln_samples_ops.so "$art/circ_pad.kiln"
