#!/usr/bin/env bash
# The lab on the H200 machine: `python -m specdraft_train lab --preset lab`, resumable, in one or more calls of at most
# LIMIT seconds (the device tool's commands stop at 10 minutes; rerunning continues where the last one stopped), then
# what the checkout keeps: the drafter GGUF, the held-out set, the reports and manifests, copied to RESULTS.
#
# From the checkout on the GPU machine, with .whl (the gguf wheel; bench/gpu/stage.sh makes it) brought along:
#   bash train/scripts/gpu_lab.sh RESULTS [LIMIT]
# The corpus is the machine's own Python: its stdlib plus its site-packages (NOTES.md: ~300 MB of source).
set -uo pipefail
results=${1:?results dir}; limit=${2:-560}
lab=${LAB_DIR:-/tmp/lab}
mkdir -p "$results"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD/train
export PYTHONUNBUFFERED=1
site=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
timeout --signal=INT "$limit" python3 -m specdraft_train lab --preset lab --out "$lab" --extra "$site"
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
