#!/usr/bin/env bash
# setup.sh — install what building and testing kiln needs, only if missing.
# Debian/Ubuntu (apt-get).  Safe to run repeatedly: installs nothing when
# everything is present.
set -euo pipefail

need=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pkg() { dpkg -s "$1" >/dev/null 2>&1; }

have_cmd cmake || need+=(cmake)
have_cmd gcc || need+=(gcc)
have_cmd make || need+=(make)
have_cmd pkg-config || need+=(pkg-config)
have_cmd protoc-c || need+=(protobuf-c-compiler)
have_pkg libprotobuf-c-dev || [ -f /usr/include/protobuf-c/protobuf-c.h ] || need+=(libprotobuf-c-dev)
# ONNX backend conformance cases (optional: the conformance tests skip without it)
have_pkg libonnx-testdata || [ -d /usr/share/onnx ] || need+=(libonnx-testdata)
# engine signatures (Ed25519); without it kiln builds but cannot sign or verify
have_pkg libsodium-dev || [ -f /usr/include/sodium.h ] || need+=(libsodium-dev)
# the fuzz targets (fuzz/build.sh; CI runs each for a fixed count): clang + libFuzzer
have_cmd clang || need+=(clang)
ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 ||
    [ "$(uname -m)" != x86_64 ] || need+=(libclang-rt-dev)
# valgrind is optional (leak checks)
have_cmd valgrind || need+=(valgrind)

if [ ${#need[@]} -eq 0 ]; then
    echo "setup: all dependencies present"
    exit 0
fi
echo "setup: installing ${need[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
# Optional packages may be missing from a distribution: install the
# required ones first, then try the optional ones one by one.
required=()
optional=()
for p in "${need[@]}"; do
    case $p in
        libonnx-testdata|valgrind) optional+=("$p") ;;
        *) required+=("$p") ;;
    esac
done
if [ ${#required[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${required[@]}"
fi
for p in "${optional[@]}"; do
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$p" ||
        echo "setup: optional package $p not installed"
done
