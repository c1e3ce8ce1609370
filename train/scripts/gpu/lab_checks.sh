#!/usr/bin/env bash
# The lab's second device command on the H200 machine: finish the lab (train/scripts/gpu/lab.sh resumes it), then
# what the lab's own held-out set cannot say, each step resumable and its results copied out as soon as it ends:
#   1. prompts the lab did not make (data/unseen-texts.jsonl: eight kinds of text unlike the lab corpus): the lab
#      target's continuations of them, and the base, distilled and QAT drafters evaluated on them by kind;
#   2. the lab target as an F16 GGUF in /tmp/lab-target-f16.gguf, for bench/gpu/real-shape.sh's end-to-end run;
#   3. `ablate --jobs` on the lab's data: variants side by side at an equal time budget (ABLATE_BUDGET_S, default 100),
#      scored on the lab's held-out set and on the unseen prompts.
# RESULTS/checks.tar.xz holds it all (reports, manifests, TensorBoard events, the unseen conversations).
#   bash train/scripts/gpu/lab_checks.sh RESULTS [LAB_LIMIT_S]      (LAB_DIR as for lab.sh, default /tmp/lab)
# CPU dry run on a finished micro lab: LAB_DIR=runs/micro PRESET=micro DEVICE=cpu bash train/scripts/gpu/lab_checks.sh R
set -uo pipefail
results=${1:?usage: lab_checks.sh RESULTS [LAB_LIMIT_S]}; lab_limit=${2:-330}
lab=${LAB_DIR:-/tmp/lab}; preset=${PRESET:-lab}; device=${DEVICE:-auto}
budget=${ABLATE_BUDGET_S:-100}; jobs=${ABLATE_JOBS:-4}
mkdir -p "$results/checks"
results=$(cd "$results" && pwd)
started=$(date +%s)
log() { echo "[gpu_lab_checks +$(( $(date +%s) - started ))s] $*" | tee -a "$results/checks/progress.log"; }
py=(python3 -m specdraft_train)
pack() { tar -C "$results" -cJf "$results/checks.tar.xz.tmp" checks && mv "$results/checks.tar.xz.tmp" "$results/checks.tar.xz"; }

if [ "$preset" = lab ]; then
  LAB_DIR=$lab bash train/scripts/gpu/lab.sh "$results/lab" "$lab_limit" || { log "lab not finished"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD/train PYTHONUNBUFFERED=1  # where gpu_lab.sh put the gguf wheel, and specdraft_train
else
  export PYTHONPATH=${PYTHONPATH:-}:$PWD/train
fi
"${py[@]}" --help > /dev/null || { log "python -m specdraft_train does not start (PYTHONPATH=$PYTHONPATH)"; exit 1; }
[ -f "$lab/lab_report.json" ] || { log "no $lab/lab_report.json: the lab has not finished"; exit 1; }
cp "$lab/lab_report.md" "$lab/lab_report.json" "$lab/lab_state.json" "$results/checks/" 2>/dev/null
for stage in distilled distilled-qat base target; do
  [ -d "$lab/$stage/tb" ] && mkdir -p "$results/checks/tb/$stage" && cp -r "$lab/$stage/tb/." "$results/checks/tb/$stage/"
done
pack

log "unseen prompts: the target's continuations"
"${py[@]}" reference --target "$lab/target" --prompts "${UNSEEN:-data/unseen-texts.jsonl}" --out "$lab/unseen" --preset "$preset" \
  --device "$device" 2>&1 | tail -2
[ -f "$lab/unseen/manifest.json" ] || { log "the unseen prompts' reference stage failed (above)"; exit 1; }
cp "$lab/unseen/heldout.jsonl" "$results/checks/unseen-heldout.jsonl"
cp "$lab/unseen/manifest.json" "$results/checks/unseen-reference-manifest.json"
log "unseen prompts: base, distilled and QAT drafters by kind"
"${py[@]}" evaluate --heldout "$lab/unseen/heldout.jsonl" --drafter "$lab/base" --drafter "$lab/distilled" \
  --drafter "$lab/distilled-qat" --q4 --ngram --target "$lab/target" --device "$device" \
  --out "$results/checks/unseen-eval.json" 2>&1 | tail -12
pack

if [ "$preset" = lab ] && [ ! -f /tmp/lab-target-f16.gguf ]; then
  log "the lab target as an F16 GGUF for real-shape.sh"
  "${py[@]}" export --checkpoint "$lab/target" --out /tmp/lab-target-f16.gguf --type F16 2>&1 | tail -1
fi

# a device command stops at 600 s: the ablation gets what is left of ~560 s after its own ~70 s of start-up and scoring
left=$(( 560 - ($(date +%s) - started) - 70 ))
[ "$left" -lt "$budget" ] && budget=$left
if [ "$budget" -lt 30 ]; then log "no time left for the ablation (rerun this command: finished steps are skipped)"; exit 0; fi
log "ablation: $jobs at a time, $budget s each"
variants=(
  --variant "kl+replay:distill.replay_weight=0.2,variant.qat=false"
  --variant "kl:distill.replay_weight=0,variant.qat=false"
  --variant "reverse_kl+replay:distill.loss=reverse_kl,distill.replay_weight=0.2,variant.qat=false"
  --variant "tvd+replay:distill.loss=tvd,distill.replay_weight=0.2,variant.qat=false"
)
"${py[@]}" ablate --lab "$lab" --out "$lab/ablation" --jobs "$jobs" --time-budget "$budget" --device "$device" \
  "${variants[@]}" 2>&1 | grep -E "^ablate: .*(τ|failed)|: τ |report:" | tail -12
cp "$lab/ablation/ablation.md" "$lab/ablation/ablation.json" "$results/checks/" 2>/dev/null
drafters=()
for d in "$lab"/ablation/*/distilled; do [ -d "$d" ] && drafters+=(--drafter "$d"); done
if [ ${#drafters[@]} -gt 0 ]; then
  log "ablation variants on the unseen prompts"
  "${py[@]}" evaluate --heldout "$lab/unseen/heldout.jsonl" "${drafters[@]}" --q4 --device "$device" \
    --out "$results/checks/unseen-eval-ablation.json" 2>&1 | tail -6
fi
pack
log "done"
