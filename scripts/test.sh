#!/usr/bin/env bash
# `npm test`: the type-check of every TypeScript file (tsconfig.check.json: src/, test/, bench/, scripts/), the
# TypeScript suite, the training pipeline's Python suite (train/.venv made on first use, meanwhile), then the format and
# lint checks of both languages (Biome, ruff: scripts/lint.sh). All four always run; the exit status is non-zero if any
# of them failed.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
# The training environment (minutes of unpacking PyTorch, mostly disk) and the Python tests' data are made while the
# TypeScript checks run, which keep one of CI's two cores busy; the Python tests wait for them.
env_log=$(mktemp)
bash train/scripts/test_env.sh >"$env_log" 2>&1 &
env_pid=$!
echo "== TypeScript type-check =="
# tsx runs the tests and benches with their types stripped, unchecked: tsc checks them under the same strict rules as src/
npx --no-install tsc -p tsconfig.check.json || status=1
echo "== TypeScript tests =="
# Node 20's test runner takes file paths, not globs. isolateEnv clears the shell's SPECDRAFT_* settings in every test file.
mapfile -t files < <(find test -name '*.test.ts' | sort)
node --import tsx --import ./test/helpers/isolateEnv.ts --test --test-concurrency=1 "${files[@]}" || status=1
echo "== Python tests (train/) =="
if wait "$env_pid"; then
  cat "$env_log"
  bash train/scripts/pytest.sh || status=1
else
  cat "$env_log"
  echo "the Python tests' environment could not be made (train/scripts/test_env.sh, above)"
  status=1
fi
rm -f "$env_log"
echo "== Lint (Biome, ruff) =="
bash scripts/lint.sh || status=1
exit $status
