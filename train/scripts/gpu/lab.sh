#!/usr/bin/env bash
# The lab on the H200 machine: `python -m specdraft_train lab --preset lab`, resumable, in one or more calls of at most
# LIMIT seconds (for machines that cut a command off after a while; rerunning continues where the last one stopped), then
# what the checkout keeps: the drafter GGUF, the held-out set, the reports and manifests, copied to RESULTS.
#
# From the checkout on the GPU machine, with .whl (the gguf wheel) and .prose (prose.tar.xz) brought along, both made
# by bench/gpu/stage.sh:
#   bash train/scripts/gpu/lab.sh RESULTS [LIMIT [LAB ARGS...]]     e.g. ... 560 --set pretrain_target.time_budget_s=120
# The corpus: code is the machine's own Python, its stdlib plus its site-packages (~300 MB of source, the
# calibration's in bench/results/2026-11-30-h200-lab; the preset takes 120 MB); prose is one folder per Debian doc
# package in .prose/prose.tar.xz (the machine cannot install packages), unpacked once per machine and passed as
# --prose for each package.
set -uo pipefail
results=${1:?results dir}; limit=${2:-560}
shift $(( $# < 2 ? $# : 2 ))  # what remains goes to the lab command (e.g. --set overrides: recorded in lab_state.json)
lab=${LAB_DIR:-/tmp/lab}
mkdir -p "$results"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD/train
export PYTHONUNBUFFERED=1
site=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
prose_args=()
if [ -f .prose/prose.tar.xz ]; then
  prose=${PROSE_DIR:-/tmp/prose}
  stamp="$prose/.unpacked-$(sha256sum .prose/prose.tar.xz | cut -c1-16)"
  if [ ! -f "$stamp" ]; then
    rm -rf "$prose" && mkdir -p "$prose" && tar -C "$prose" -xJf .prose/prose.tar.xz && touch "$stamp"
  fi
  for dir in "$prose"/*/; do prose_args+=(--prose "${dir%/}"); done
fi  # without it the lab stops at once, naming the prose it lacks
timeout --signal=INT "$limit" python3 -m specdraft_train lab --preset lab --out "$lab" --extra "$site" "${prose_args[@]}" "$@"
rc=$?
if [ -f "$lab/lab_report.json" ]; then
  cp "$lab/lab_report.json" "$lab/lab_report.md" "$lab/data_manifest.json" "$lab/architecture.json" \
     "$lab/reference/heldout.jsonl" "$lab/export/drafter-q4_0.gguf" "$results/" 2>/dev/null
  cp "$lab/export/drafter-q4_0.gguf.manifest.json" "$results/" 2>/dev/null
  echo "gpu_lab: done; results in $results"
else
  echo "gpu_lab: not finished (exit $rc); run the same command again to resume"
fi
exit $rc
