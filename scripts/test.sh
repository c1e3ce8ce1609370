#!/usr/bin/env bash
# `npm test`: Biome's format and lint check, the TypeScript suite, then the training pipeline's Python suite (which
# creates train/.venv on first use). All three always run; the exit status is non-zero if any of them failed.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
echo "== Lint (Biome) =="
npm run --silent lint || status=1
echo "== TypeScript tests =="
# Node 20's test runner takes file paths, not globs.
mapfile -t files < <(find test -name '*.test.ts' | sort)
node --import tsx --test --test-concurrency=1 "${files[@]}" || status=1
echo "== Python tests (train/) =="
bash train/scripts/pytest.sh || status=1
exit $status
