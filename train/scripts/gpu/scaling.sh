#!/usr/bin/env bash
# Multi-GPU scaling on the GPU machine: reference generation and distillation throughput (tokens/s) on 2 GPUs against
# 1, in one job, each stage run for real under torch.distributed.run on a randomly initialised lab-sized model
# (train/scripts/gpu/scaling.py says what and how). On a 1-GPU machine it measures the one-GPU throughput only.
# Needs python3 with torch, transformers, tokenizers, safetensors, numpy and tqdm, and the gguf wheel in .whl (made by
# bench/gpu/stage.sh; carry .whl): specdraft_train imports its GGUF exporter, a pinned dependency. ~4 minutes.
#
# From the checkout root:
#   bash train/scripts/gpu/scaling.sh RESULTS [GPU_SCALING ARGS...]      e.g. ... --prompts 8192 --fsdp
# Writes RESULTS/gpu_scaling.json and one log per command (RESULTS/reference-N.log, RESULTS/distill-N.log).
set -uo pipefail
results=${1:?results dir}
shift
mkdir -p "$results"
if ! python3 -c "import gguf" 2>/dev/null; then
  compgen -G ".whl/gguf-*.whl" > /dev/null || { echo "gpu_scaling: no gguf module and no .whl/gguf-*.whl: run bench/gpu/stage.sh and carry .whl" >&2; exit 2; }
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/gguf-*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD/train${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
work=${SCALING_DIR:-/tmp/gpu_scaling}
rm -rf "$work"  # fresh models and outputs: a resumed stage would measure less work
python3 train/scripts/gpu/scaling.py --out "$results/gpu_scaling.json" --work "$work" "$@"
rc=$?
echo "gpu_scaling: exit $rc; results in $results"
exit $rc
