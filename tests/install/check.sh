#!/usr/bin/env bash
# check.sh BUILD_DIR SOURCE_DIR — install kiln into a scratch prefix and
# build + run an outside program against it with pkg-config.
set -euo pipefail
build=$1 src=$2
prefix=$build/install-test
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(ls -d "$prefix"/lib* | head -1)
if [ -d "$libdir/pkgconfig" ]; then pcdir=$libdir/pkgconfig; else pcdir=$(dirname "$(find "$prefix" -name kiln.pc | head -1)"); fi
export PKG_CONFIG_PATH=$pcdir
cc -std=c11 -Wall -Wextra -Werror $(pkg-config --cflags kiln) "$src/tests/install/consumer.c" \
   -o "$build/install-test-consumer" $(pkg-config --libs kiln) -lm
LD_LIBRARY_PATH=$libdir "$build/install-test-consumer"
