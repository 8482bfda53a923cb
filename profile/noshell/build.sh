#!/usr/bin/env bash
# Builds the desktop profile's shim (noshell.c) into OUT.so with gcc.
set -euo pipefail
out=${1:?usage: build.sh OUT.so}
src="$(dirname "$0")/noshell.c"
if [ -f "$out" ] && [ "$out" -nt "$src" ]; then exit 0; fi
mkdir -p "$(dirname "$out")"
gcc -O2 -Wall -Werror -fPIC -shared -o "$out.tmp" "$src"
mv "$out.tmp" "$out"
