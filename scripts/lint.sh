#!/usr/bin/env bash
# `npm run lint`: Biome (TypeScript, JavaScript, JSON: format and lint) and ruff (Python under train/: lint and
# format), both pinned. ruff lives in train/.venv, which train/scripts/pytest.sh creates with the pinned dependencies.
set -uo pipefail
cd "$(dirname "$0")/.."
status=0
npx --no-install biome check . || status=1
ruff=train/.venv/bin/ruff
if [ -x "$ruff" ]; then
  (cd train && "../$ruff" check . && "../$ruff" format --check .) || status=1
else
  echo "lint: $ruff is missing: bash train/scripts/pytest.sh creates train/.venv (ruff is pinned in train/pyproject.toml)" >&2
  status=1
fi
exit $status
