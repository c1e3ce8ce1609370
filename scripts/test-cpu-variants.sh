#!/usr/bin/env bash
# Runs the TypeScript suite (or a command given after --) once per llama.cpp CPU variant this machine can run, pinned
# with scripts/with-cpu-variant.sh, and prints one line per variant with the test runner's counts (node's or
# pytest's). The suite's llama.cpp outputs depend only on the variant (the fixtures are fixed files, one thread), so a
# machine that runs them all checks every x86 CI path.
#
#   scripts/test-cpu-variants.sh                 # npm run test:ts per variant
#   scripts/test-cpu-variants.sh -- node --import tsx --test test/generate/runGenerate.test.ts
#   VARIANTS="haswell skylakex" scripts/test-cpu-variants.sh -- bash train/scripts/pytest.sh tests/test_parity.py
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ "${1:-}" = "--" ]; then shift; command=("$@"); else command=(npm run -s test:ts); fi
bins=node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
[ -d "$bins" ] || { echo "test-cpu-variants: $bins missing; run npm ci" >&2; exit 2; }
status=0
# VARIANTS: the variants to run (default: every one node-llama-cpp ships)
variants=${VARIANTS:-$(for lib in "$bins"/libggml-cpu-*.so; do v=$(basename "$lib" .so); echo "${v#libggml-cpu-}"; done)}
for variant in $variants; do
  log=$(mktemp)
  start=$(date +%s)
  scripts/with-cpu-variant.sh "$variant" "${command[@]}" >"$log" 2>&1
  rc=$?
  summary=$(grep -E '^# (pass|fail) |^[0-9]+ (passed|failed)' "$log" | tr '\n' ' ')
  if [ $rc -eq 0 ]; then
    echo "$variant: pass ($(( $(date +%s) - start )) s) $summary"
  elif grep -q 'needs instructions this CPU lacks' "$log"; then
    echo "$variant: not runnable on this CPU"
  else
    echo "$variant: FAIL (exit $rc) $summary — log kept at $log"; status=1; continue
  fi
  rm -f "$log"
done
exit $status
