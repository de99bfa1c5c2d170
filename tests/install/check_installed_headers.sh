#!/usr/bin/env bash
# Checks an installed include/ tree: every "tessera/..." include of an installed
# header is installed too, and no installed header includes a backend's own headers
# (mpi.h, gloo/, nccl.h), which the public API must never need.
#   check_installed_headers.sh PREFIX/include
set -euo pipefail
inc=$1
status=0
while IFS= read -r header; do
  while IFS= read -r target; do
    if [[ ! -f "$inc/$target" ]]; then
      echo "${header#$inc/} includes $target, which is not installed"
      status=1
    fi
  done < <(sed -n 's/^#include "\(tessera\/[^"]*\)".*/\1/p' "$header")
  if grep -Eq '^#include [<"](mpi\.h|gloo/|nccl\.h)' "$header"; then
    echo "${header#$inc/} includes a backend library header"
    status=1
  fi
done < <(find "$inc/tessera" -name '*.h')
count=$(find "$inc/tessera" -name '*.h' | wc -l)
[[ $status -eq 0 ]] && echo "installed headers: $count, all self-contained"
exit $status
