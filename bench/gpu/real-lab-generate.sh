#!/usr/bin/env bash
# The real-model lab's speculative generation on the H200 (docs/lab.md, "The real-model lab"): `specdraft generate`
# with the F32 SmolLM2 target and each drafter GGUF, on the GPU, through bench/realLabCpu.sh's generate step
# (GPU=cuda). Run on the GPU machine after train/scripts/gpu/real_lab.sh has finished there, on the same warm machine
# (its work in REAL_LAB_DIR, /tmp/real-lab), with node staged (bench/gpu/setup.sh's gpu_tools: .gpu and .whl):
#   bash bench/gpu/real-lab-generate.sh RESULTS          (train/scripts/gpu/real_lab.md says which call carries what)
# RESULTS gets real-lab-h200-generate.tar.xz: each run's `generate --out` summary and log, the prompts, the GPU.
# Environment: GEN_KS (2 4 8 16: a GPU verifies k + 1 tokens at about the cost of one), and realLabCpu.sh's.
set -euo pipefail
results=${1:?usage: real-lab-generate.sh RESULTS}
work=${REAL_LAB_DIR:-/tmp/real-lab}
returned=$work-returned   # what real_lab.sh brings back, as realLabCpu.sh reads it
out=$work-h200            # realLabCpu.sh's OUT
mkdir -p "$results" "$out"
log() { echo "[$(date +%T)] real-lab-generate: $*" >&2; }
[ -f "$work/stamps/export" ] || { log "no finished lab in $work (run train/scripts/gpu/real_lab.sh first)"; exit 2; }

source bench/gpu/setup.sh
gpu_tools
log "native engine, CUDA variant"
gpu_engine "$out/gpu.txt"
[ -f "$returned/real-lab-results.tar.xz" ] || bash train/scripts/gpu/real_lab.sh "$returned" 60 2>/dev/null
[ -e "$out/target" ] || ln -s "$work/target" "$out/target"  # the lab's own target stage: its F32 GGUF
GPU=cuda THREADS=${THREADS:-4} PYTHON=${PYTHON:-python3} SMOLLM2_DIR=$work REAL_LAB_STEPS=generate \
  GEN_KS=${GEN_KS:-2 4 8 16} bash bench/realLabCpu.sh "$returned" "$out" || status=$?
tar -C "$out" -cJf "$results/real-lab-h200-generate.tar.xz" gpu.txt generate generate-prompts.jsonl
log "brought back: $results/real-lab-h200-generate.tar.xz"
exit "${status:-0}"
