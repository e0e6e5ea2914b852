#!/usr/bin/env bash
# check.sh BUILD_DIR SOURCE_DIR — install kiln into a scratch prefix, build
# + run an outside program against it with pkg-config, and build an outside
# plugin library that the installed `kiln` loads.  The compile lines are the
# ones README.md shows.
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
cc -std=c11 -Wall -Wextra -Werror -shared -fPIC $(pkg-config --cflags kiln) "$src/tests/install/plugin.c" \
   -o "$build/install-test-libnegate.so"
LD_LIBRARY_PATH=$libdir "$prefix/bin/kiln" plugins --plugins "$build/install-test-libnegate.so" outside:: \
   | grep -q '^outside::negate v1' && echo "installed kiln loaded the outside plugin"
