#!/bin/sh
# Fails if an object file defines a symbol of Gloo's own (a class, vtable, typeinfo or inline
# function in namespace gloo, or c10d's GlooStore that derives from one). Such a definition
# would be compiled from Debian's Gloo headers and could stand in for the wheel's own at run time.
set -eu
[ $# -ge 1 ] || { echo "usage: $0 OBJECT..." >&2; exit 2; }
found=$(nm -C --defined-only "$@" |
  grep -E ' (vtable for |typeinfo for |typeinfo name for )?(gloo::|c10d::ProcessGroupGloo::GlooStore)' || true)
if [ -n "$found" ]; then
  echo "defines Gloo symbols:"; echo "$found"; exit 1
fi
echo "no Gloo symbol defined in $*"
