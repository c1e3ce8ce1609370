#!/usr/bin/env bash
# Runs the training pipeline's tests, after making what they need when it is missing (train/scripts/test_env.sh:
# train/.venv with the pinned dependencies, the prose and the real chat target in train/.cache).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv="$here/.venv"
bash "$here/scripts/test_env.sh"
cd "$here"
# One worker per CPU (pytest-xdist): the tests run torch and llama.cpp on one thread each, so a single process leaves
# the other cores idle. Each test file stays on one worker (its module fixtures built once); conftest.py starts the
# longest files first. `-n 0` runs everything in this process.
exec "$venv/bin/python" -m pytest -q -n auto --dist loadfile "$@"
