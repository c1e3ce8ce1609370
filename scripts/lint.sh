#!/usr/bin/env bash
# `npm run lint`: Biome (TypeScript, JavaScript, JSON: format and lint) and ruff (all Python: train/, bench/, test/
# fixtures; lint and format, with train/pyproject.toml's settings), both pinned. ruff lives in train/.venv, which train/scripts/pytest.sh creates with the pinned dependencies.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
npx --no-install biome check . || status=1
ruff=train/.venv/bin/ruff
if [ -x "$ruff" ]; then
  py=(train bench test)
  "$ruff" check --config train/pyproject.toml "${py[@]}" && "$ruff" format --config train/pyproject.toml --check "${py[@]}" || status=1
else
  echo "lint: $ruff is missing: bash train/scripts/pytest.sh creates train/.venv (ruff is pinned in train/pyproject.toml)" >&2
  status=1
fi
exit $status
