#!/usr/bin/env bash
# Stages what real_lab.sh's calls carry to the GPU machine (train/scripts/gpu/real_lab.md), here on a CPU machine:
#   .whl/                 the gguf wheel (the pin of train/requirements-cpu.txt; the GPU machine has no gguf)
#   .real/call1/          prose.tar.xz (the smollm2-chat preset's prose packages), smol.gguf.sha256 (the GGUF's and
#                         each part's sums) and the first part of the GGUF as xz, as large as a call's limit
#                         (REAL_LAB_CALL_MIB) leaves beside the checkout
#   .real/call2/, …       the rest of the GGUF as xz, a part a call (two calls hold it while the checkout is small)
# and checks that each call fits (the checkout — tracked and untracked-not-ignored files — travels with every call).
# Run from the repository root:  bash train/scripts/gpu/real_lab_stage.sh
# Environment: REAL_LAB_STAGED (default .real), REAL_LAB_WHL (default .whl), REAL_LAB_PROSE (default: the preset's
# packages), REAL_LAB_XZ_LEVEL (default 6), REAL_LAB_CALL_MIB (default 64), REAL_LAB_MARGIN_KIB (default 512: room
# for the checkout to grow before the calls), REAL_LAB_GGUF (default: the pinned SmolLM2 GGUF; the dry run's test
# stages a cut of it), PYTHON (default train/.venv/bin/python).
set -euo pipefail
staged=${REAL_LAB_STAGED:-.real}
whl=${REAL_LAB_WHL:-.whl}
python=${PYTHON:-train/.venv/bin/python}
xz_level=${REAL_LAB_XZ_LEVEL:-6}
call_bytes=$(( ${REAL_LAB_CALL_MIB:-64} * 1048576 - ${REAL_LAB_MARGIN_KIB:-512} * 1024 ))
prose=${REAL_LAB_PROSE:-$(PYTHONPATH=train "$python" -c \
  "from specdraft_train.presets import SMOLLM2_CHAT; print(' '.join(SMOLLM2_CHAT.prose_packages))")}
gguf=${REAL_LAB_GGUF:-$(bash train/scripts/data/fetch_smollm2.sh)}
rm -rf "$staged" && mkdir -p "$staged/call1"
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT

if ! ls "$whl"/gguf-*.whl >/dev/null 2>&1; then
  pin=$(grep -E '^gguf==' train/requirements-cpu.txt)
  "$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 -d "$whl" "$pin"
fi
bash train/scripts/data/fetch_prose.sh train/.cache/prose $prose >/dev/null
tar -C train/.cache/prose -cf - $prose | xz -T0 -9 > "$staged/call1/prose.tar.xz"

# The GGUF as xz, cut where call 1 is full: call 1 holds the checkout, .whl and everything else in call1/.
xz -T0 "-$xz_level" -c "$gguf" > "$tmp/smol.gguf.xz"
# Sizes as the disk holds them (du's blocks, not bytes): a transfer limit may count blocks (one call of 63.4 MiB in
# bytes was refused as 65.1 MiB of blocks, bench/gpu/README.md).
size() { du -ck "$@" | tail -1 | awk '{ print $1 * 1024 }'; }
checkout=$( { git ls-files -z; git ls-files -z --others --exclude-standard; } | du -ck --files0-from=- | tail -1 |
  awk '{ print $1 * 1024 }')
sums_bytes=512  # smol.gguf.sha256, written below (~270 bytes)
used=$(( checkout + $(size "$whl" "$staged/call1") + sums_bytes + 4096 ))  # + the part's own last block
first=$(( call_bytes - used ))
total=$(stat -c %s "$tmp/smol.gguf.xz")
[ "$first" -gt 0 ] || { echo "real_lab_stage: call 1 is full before the GGUF ($used bytes)" >&2; exit 1; }
# The rest in calls of their own, each as full as the checkout beside it leaves room for: call 2 (part-ab), call 3, …
room=$(( call_bytes - checkout - 4096 ))
[ "$room" -gt 0 ] || { echo "real_lab_stage: the checkout alone fills a call ($checkout bytes)" >&2; exit 1; }
suffixes=(ab ac ad ae af ag ah)
head -c "$first" "$tmp/smol.gguf.xz" > "$staged/call1/smol.gguf.xz.part-aa"
offset=$first calls=1
while [ "$offset" -lt "$total" ]; do
  [ "$calls" -le "${#suffixes[@]}" ] || { echo "real_lab_stage: the GGUF needs too many calls" >&2; exit 1; }
  part="smol.gguf.xz.part-${suffixes[$(( calls - 1 ))]}" calls=$(( calls + 1 ))
  mkdir -p "$staged/call$calls"
  dd if="$tmp/smol.gguf.xz" of="$staged/call$calls/$part" bs=1M iflag=skip_bytes,count_bytes skip="$offset" \
    count="$room" status=none
  offset=$(( offset + room ))
done
{ sha256sum "$gguf" | sed "s|  .*|  $(basename "$gguf")|"  # the GGUF's own name first, then the parts' in order
  for call in $(seq 1 "$calls"); do (cd "$staged/call$call" && sha256sum smol.gguf.xz.part-*); done
} > "$staged/call1/smol.gguf.sha256"
mib() { echo "$(( $1 / 1048576 )).$(( $1 % 1048576 * 10 / 1048576 ))"; }
echo "real_lab_stage: staged in $staged; the checkout ($(mib "$checkout") MiB) travels with every call"
for call in $(seq 1 $(( calls + 1 ))); do
  carries="$staged/call$call"; [ "$call" = 1 ] && carries="$whl $staged/call1"; [ "$call" -gt "$calls" ] && carries=""
  bytes=$(( checkout + $( [ -n "$carries" ] && size $carries || echo 0) ))
  echo "call $call: carry [${carries// /, }]: $(mib "$bytes") MiB of ${REAL_LAB_CALL_MIB:-64}"
done
du -sm "$whl" "$staged"/call*/*
