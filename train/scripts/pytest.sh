#!/usr/bin/env bash
# Runs the training pipeline's tests, creating train/.venv with the pinned dependencies when it is missing (so that a
# user who only serves never installs PyTorch) and fetching the tests' prose into train/.cache/prose when it is.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv="$here/.venv"
stamp="$venv/.installed-$(sha256sum "$here/pyproject.toml" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "train: creating $venv (pinned dependencies from train/pyproject.toml; first run downloads PyTorch)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -e "$here[test]"
  touch "$stamp"
fi
# The micro preset's prose (and the tests'): Debian's git-doc, 2 MB to download, unpacked once into train/.cache.
[ -f "$here/.cache/prose/git-doc/.fetched" ] || bash "$here/scripts/fetch_prose.sh" "$here/.cache/prose" git-doc
cd "$here"
exec "$venv/bin/python" -m pytest -q "$@"
