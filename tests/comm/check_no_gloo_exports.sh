#!/usr/bin/env bash
# No Tessera library exports a gloo:: symbol: each copy of Gloo in a process
# (Tessera's private one, libtorch_cpu.so's) must only ever bind to itself.
#   check_no_gloo_exports.sh LIBRARY...
set -euo pipefail
status=0
for lib in "$@"; do
  n=$(nm -D --defined-only "$lib" | c++filt | grep -c 'gloo::' || true)
  echo "$(basename "$lib"): $n exported gloo:: symbols"
  if [ "$n" -ne 0 ]; then
    nm -D --defined-only "$lib" | c++filt | grep 'gloo::' | head -5
    status=1
  fi
done
exit $status
