#!/usr/bin/env bash
# Runs the training pipeline's tests, creating train/.venv with the pinned dependencies when it is missing (so that a
# user who only serves never installs PyTorch) and fetching the tests' prose into train/.cache/prose when it is.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv="$here/.venv"
stamp="$venv/.installed-$(cat "$here/pyproject.toml" "$here/requirements-cpu.txt" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "train: creating $venv from train/requirements-cpu.txt (3.9 GB; the first run downloads PyTorch)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  # --no-deps: the list is the whole environment, without the CUDA libraries torch's metadata would pull in.
  # --no-cache-dir: a second copy of a 900 MB wheel in ~/.cache is what fills a small disk.
  pip=("$venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir --no-deps)
  "${pip[@]}" -r "$here/requirements-cpu.txt"
  "${pip[@]}" -e "$here"
  touch "$stamp"
fi
# The micro preset's prose (and the tests'): Debian's git-doc, 2 MB to download, unpacked once into train/.cache.
[ -f "$here/.cache/prose/git-doc/.fetched" ] || bash "$here/scripts/fetch_prose.sh" "$here/.cache/prose" git-doc
cd "$here"
exec "$venv/bin/python" -m pytest -q "$@"
