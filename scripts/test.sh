#!/usr/bin/env bash
# `npm test`: the type-check of every TypeScript file (tsconfig.check.json: src/, test/, bench/, scripts/), the
# TypeScript suite and the training pipeline's Python suite side by side, then the format and lint checks of both
# languages (Biome, ruff: scripts/lint.sh). All four always run; the exit status is non-zero if any of them failed.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
echo "== TypeScript type-check =="
# tsx runs the tests and benches with their types stripped, unchecked: tsc checks them under the same strict rules as src/
npx --no-install tsc -p tsconfig.check.json || status=1
# What the Python tests need (train/.venv on first use: minutes of unpacking PyTorch, bound by the disk), made before
# either suite starts: beside it the type-check and the TypeScript tests ran slower than the whole of it saved.
echo "== Python tests' environment (train/scripts/test_env.sh) =="
bash train/scripts/test_env.sh || status=1
# The TypeScript suite runs one file at a time, most of it one llama.cpp thread: it leaves a core to the Python suite
# (one pytest-xdist worker per CPU), so the two run side by side and its output follows the Python suite's.
echo "== TypeScript tests (beside the Python tests; output below them) =="
# Node 20's test runner takes file paths, not globs. isolateEnv clears the shell's SPECDRAFT_* settings in every test file.
mapfile -t files < <(find test -name '*.test.ts' | sort)
ts_log=$(mktemp)
node --import tsx --import ./test/helpers/isolateEnv.ts --test --test-concurrency=1 "${files[@]}" >"$ts_log" 2>&1 &
ts_pid=$!
echo "== Python tests (train/) =="
bash train/scripts/pytest.sh || status=1
wait "$ts_pid" || status=1
echo "== TypeScript tests: output =="
cat "$ts_log"
rm -f "$ts_log"
echo "== Lint (Biome, ruff) =="
bash scripts/lint.sh || status=1
exit $status
