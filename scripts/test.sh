#!/usr/bin/env bash
# `npm test`: the type-check of every TypeScript file (tsconfig.check.json: src/, test/, bench/, scripts/), the
# TypeScript suite, the training pipeline's Python suite (which creates train/.venv on first use), then the format and
# lint checks of both languages (Biome, ruff: scripts/lint.sh). All four always run; the exit status is non-zero if any
# of them failed.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
echo "== TypeScript type-check =="
# tsx runs the tests and benches with their types stripped, unchecked: tsc checks them under the same strict rules as src/
npx --no-install tsc -p tsconfig.check.json || status=1
echo "== TypeScript tests =="
# Node 20's test runner takes file paths, not globs. isolateEnv clears the shell's SPECDRAFT_* settings in every test file.
mapfile -t files < <(find test -name '*.test.ts' | sort)
node --import tsx --import ./test/helpers/isolateEnv.ts --test --test-concurrency=1 "${files[@]}" || status=1
echo "== Python tests (train/) =="
bash train/scripts/pytest.sh || status=1
echo "== Lint (Biome, ruff) =="
bash scripts/lint.sh || status=1
exit $status
