#!/usr/bin/env bash
# Installs the training pipeline's environment: train/.venv with the pinned dependencies (train/requirements-cpu.txt,
# CPU PyTorch; 3.9 GB, the first run downloads PyTorch) and the package itself, editable. Run once after `npm ci`;
# again after the requirements change (it checks a stamp and does nothing when the environment is current).
#
#   bash train/scripts/setup.sh        # then: train/.venv/bin/python -m specdraft_train run --target MODEL --out DIR
#
# On a GPU machine, install the CUDA build of torch==<the pinned version> into the same environment instead of the CPU
# wheel (the rest of the list is the same).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv="$here/.venv"
stamp="$venv/.installed-$(cat "$here/pyproject.toml" "$here/requirements-cpu.txt" | sha256sum | cut -c1-16)"
[ -f "$stamp" ] && exit 0
echo "train: creating $venv from train/requirements-cpu.txt (3.9 GB; the first run downloads PyTorch)"
rm -rf "$venv"
# Said before a download that would otherwise end in pip's "No space left on device" minutes later.
free_kb=$(df -Pk "$here" | awk 'NR == 2 { print $4 }')
if [ "$free_kb" -lt $((4500 * 1024)) ]; then
  echo "train: $venv needs about 4.5 GB free and $(df -Ph "$here" | awk 'NR == 2 { print $6 }') has $((free_kb / 1024)) MB" >&2
  exit 1
fi
python3 -m venv "$venv"
# uv installs the list (pinned in it, so the environment holds it too): it unpacks wheels in parallel into a cache
# on the venv's own disk and hard-links them in, where pip unpacks them one by one. The cache is removed after, so the
# 3.9 GB are on disk once.
uv_pin=$(grep -oE '^uv==[^ ;]+' "$here/requirements-cpu.txt")
"$venv/bin/pip" install -q --disable-pip-version-check --no-cache-dir "$uv_pin"
export UV_CACHE_DIR="$venv/.uv-cache"
trap 'rm -rf "$UV_CACHE_DIR"' EXIT
# --no-deps: the list is the whole environment, without the CUDA packages torch asks for but opens only on demand.
uv=("$venv/bin/uv" pip install -q --python "$venv/bin/python" --no-deps --link-mode hardlink)
"${uv[@]}" --compile-bytecode -r "$here/requirements-cpu.txt"
"${uv[@]}" --no-build-isolation -e "$here"
touch "$stamp"
