#!/usr/bin/env bash
# SKETCH — not runnable yet. The real-model lab on one H200 (issue 30): SmolLM2-135M-Instruct as the target, a
# ~30M-parameter Llama drafter with its tokenizer, distilled on the target's greedy chat continuations, QAT to Q4_0,
# exported; beside it the same recipe from a drafter made of the target's own layers. Lines marked DEPENDS(<helper>)
# use a stage or flag that another branch adds (target: the `target` and `drafter` stages and pretraining with a given
# tokenizer; export: Llama drafters with SmolLM2's tokenizer; fast: packed training, one-pass evaluation; lead: the
# smollm2-chat preset) and must be checked against their --help once merged; the rest is checked against this
# branch's --help. No CPU dry run yet (it needs those stages): add one before the first GPU call.
#
# What travels (≤ 64 MiB a call, the checkout included: ~19 MiB today), made here by the staging lines below:
#   .real/tokenizer.tar.xz   SmolLM2's HF tokenizer files (from the `target` stage run here)        ~1 MiB
#   .real/smol.xz.part-aa/ab the Q4_1 GGUF, xz -6 (86.3 MiB) split in two: 43.1 MiB each — raw halves
#                            (46.9 MiB) plus the checkout would exceed 64 MiB; past ~20.8 MiB of checkout,
#                            split in three (`split -n 3`)
#   .prose/prose.tar.xz      general text for the base's pretraining (bench/gpu/stage.sh)              ~10 MiB
#   .whl                     the gguf wheel (bench/gpu/stage.sh)                                       <1 MiB
# Calls, back to back on one warm machine (the work folder lives in /tmp), each `bash train/scripts/gpu/real_lab.sh
# RESULTS [LIMIT_S]`: it runs every stage whose inputs are there and whose stamp is not, stops before a stage the
# limit leaves too little time for, and says what the next call must carry:
#   1. carry .whl .prose .real/tokenizer.tar.xz      → drafter (scratch), pretrain base                ~3.5 min
#   2. carry .real/smol.xz.part-aa                   → (stashed)                                         ~0.3 min
#   3. carry .real/smol.xz.part-ab .whl              → target, drafter (layers), reference ×2, distill  ~6 min
#   4. carry .whl                                    → QAT, distill + QAT (layers), evaluate, export     ~4.5 min
# A cut (the call's limit, or the machine lost) resumes at the stage it stopped in: every stage is resumable (pretrain
# and distill from their resume/ checkpoints, reference per shard) and leaves a stamp when done; a lost machine means
# starting again from call 1 (nothing is kept outside /tmp but RESULTS, which comes back with each call).
#
# Staging, here (after npm ci and bash bench/gpu/stage.sh for .whl and .prose):
#   gguf=$(bash train/scripts/data/fetch_smollm2.sh)
#   python -m specdraft_train target --gguf "$gguf" --out /tmp/smol-target          # DEPENDS(target): stage and flags
#   mkdir -p .real && tar -C /tmp/smol-target -cJf .real/tokenizer.tar.xz tokenizer.json tokenizer_config.json \
#       special_tokens_map.json chat_template.jinja generation_config.json config.json   # DEPENDS(target): file names
#   xz -T0 -6 -c "$gguf" > /tmp/smol.gguf.xz && split -n 2 /tmp/smol.gguf.xz .real/smol.xz.part-   # 2 × 43.1 MiB
#   grep -qxF /.real/ "$(git rev-parse --git-common-dir)/info/exclude" || echo /.real/ >> "$(git rev-parse --git-common-dir)/info/exclude"
set -uo pipefail
results=${1:?usage: real_lab.sh RESULTS [LIMIT_S]}
limit=${2:-560}
work=${REAL_LAB_DIR:-/tmp/real-lab}
started=$(date +%s)
mkdir -p "$results" "$work/logs" "$work/stamps"
results=$(cd "$results" && pwd)
log() { echo "[$(date +%T) +$(( $(date +%s) - started ))s] $*" | tee -a "$work/logs/progress.log" >&2; }
left() { echo $(( limit - ($(date +%s) - started) )); }
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
[ -d /tmp/site/gguf ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/train
py=(python3 -m specdraft_train)
preset=smollm2-chat  # DEPENDS(lead): the preset; until then each stage's flags below carry the settings
# Seconds of the H200 each stage is expected to take (estimates from the lab's rates, docs/lab.md; the plan's table):
# a stage starts only when the call's limit leaves it this much.
declare -A usual=([unpack]=20 [drafter]=15 [pretrain]=130 [gguf]=20 [target]=40 [drafter_layers]=15 [reference]=150
  [reference_other]=30 [distill]=160 [qat]=70 [distill_layers]=130 [qat_layers]=50 [evaluate]=60 [export]=20)

# stage NAME COMMAND...: skipped once its stamp exists; started only if the limit leaves its usual time; stamped with
# its seconds when it succeeds (train/scripts/gpu/real_rehearsal.sh's rule, without its GPU sampling).
stage() {
  local name=$1; shift
  [ -f "$work/stamps/$name" ] && return 0
  if [ "$(left)" -lt "${usual[$name]}" ]; then
    log "NOT FINISHED: $(left) s left, $name usually takes ${usual[$name]} s: run the same command again"; finish 0
  fi
  log "$name: $*"
  local t0=$(date +%s)
  timeout --signal=INT "$(left)" "$@" > "$work/logs/$name.log" 2>&1
  local rc=$?
  [ "$rc" -eq 124 ] && { log "NOT FINISHED: $name ran into the call's limit: run the same command again"; finish 0; }
  [ "$rc" -ne 0 ] && { log "FAILED: $name (exit $rc; logs/$name.log)"; finish 1; }
  echo "$(( $(date +%s) - t0 ))" > "$work/stamps/$name"
  log "$name: $(cat "$work/stamps/$name") s"
}
finish() {
  cp "$work/logs/progress.log" "$results/" 2>/dev/null
  for f in eval-templates.json eval-target-written.json lab_report.json lab_report.md drafter-q4_0.gguf \
      drafter-layers-q4_0.gguf reference/heldout.jsonl reference-other/heldout.jsonl; do
    [ -f "$work/$f" ] && cp "$work/$f" "$results/$(echo "$f" | tr / -)"
  done
  tar -C "$work" -cJf "$results/logs.tar.xz" logs stamps 2>/dev/null
  exit "$1"
}
need() { # need FILE WHAT: stop, saying what the next call must carry
  [ -e "$1" ] || { log "NEXT CALL: carry $2"; finish 0; }
}

# --- call 1: the tokenizer and general text; the from-scratch drafter and its pretraining ---------------------------
[ -f "$work/stamps/unpack" ] || need .real/tokenizer.tar.xz ".whl .prose .real/tokenizer.tar.xz"
unpack() {
  mkdir -p "$work/tokenizer" "$work/prose" && tar -C "$work/tokenizer" -xJf .real/tokenizer.tar.xz &&
  tar -C "$work/prose" -xJf .prose/prose.tar.xz
}
stage unpack unpack
# DEPENDS(target): `drafter` — a Llama drafter with the target's tokenizer, from scratch, at the preset's shape
stage drafter "${py[@]}" drafter --tokenizer "$work/tokenizer" --from scratch --preset "$preset" --out "$work/drafter"
# DEPENDS(target): pretraining on general text with a given tokenizer (today pretrain takes the lab's corpus and
# tokenizer stages); the text: the prose packages + the machine's Python, not the target's output
stage pretrain "${py[@]}" pretrain --role drafter --init "$work/drafter" --tokenizer "$work/tokenizer" \
  --prose "$work/prose" --out "$work/base" --preset "$preset" --time-budget 120 --device cuda

# --- calls 2 and 3: the target ---------------------------------------------------------------------------------------
if [ ! -f "$work/stamps/gguf" ]; then  # each part stays in /tmp until the other has come
  for part in aa ab; do [ -f .real/smol.xz.part-$part ] && cp .real/smol.xz.part-$part "$work/"; done
  need "$work/smol.xz.part-aa" ".real/smol.xz.part-aa"
  need "$work/smol.xz.part-ab" ".real/smol.xz.part-ab .whl"
fi
gguf_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  # fetch_smollm2.sh's pin
reassemble() {
  cat "$work"/smol.xz.part-* | xz -dc > "$work/smol.gguf" &&
  [ "$(sha256sum "$work/smol.gguf" | cut -c1-64)" = "$gguf_sha256" ] && rm "$work"/smol.xz.part-*
}
stage gguf reassemble
# DEPENDS(target): `target` — the HF checkpoint (weights, tokenizer with <|im_end|> as eos, chat template,
# generation config) from the GGUF
stage target "${py[@]}" target --gguf "$work/smol.gguf" --out "$work/target" --no-served-gguf
# DEPENDS(target): the drafter from the target's own layers (a subset, the embedding shared)
stage drafter_layers "${py[@]}" drafter --target "$work/target" --from layers --preset "$preset" --out "$work/drafter-layers"
stage reference "${py[@]}" reference --target "$work/target" --prompts data/chat-prompts-templates.jsonl.xz \
  --out "$work/reference" --preset "$preset" --dtype bfloat16 --max-new-tokens 256 --train-prompts 15600
# the other method's prompts: their held-out and dev sets only, continued by the same target
stage reference_other "${py[@]}" reference --target "$work/target" --prompts data/chat-prompts-target.jsonl.xz \
  --out "$work/reference-other" --preset "$preset" --dtype bfloat16 --max-new-tokens 256 --train-prompts 0
# DEPENDS(fast): packed rows, if distill grows a flag for it rather than a preset field
stage distill "${py[@]}" distill --drafter "$work/base" --reference "$work/reference" --out "$work/distilled" \
  --preset "$preset" --time-budget 150

# --- call 4: QAT, the from-layers drafter, evaluation, export ---------------------------------------------------------
stage qat "${py[@]}" distill --drafter "$work/distilled" --reference "$work/reference" --out "$work/distilled-qat" \
  --preset "$preset" --qat --time-budget 60
stage distill_layers "${py[@]}" distill --drafter "$work/drafter-layers" --reference "$work/reference" \
  --out "$work/distilled-layers" --preset "$preset" --time-budget 120
stage qat_layers "${py[@]}" distill --drafter "$work/distilled-layers" --reference "$work/reference" \
  --out "$work/distilled-layers-qat" --preset "$preset" --qat --time-budget 40
evaluate_all() {  # DEPENDS(fast): one pass for every drafter, if evaluate changes shape; fields for report_sections
  for set in templates:reference target-written:reference-other; do
    "${py[@]}" evaluate --heldout "$work/${set#*:}/heldout.jsonl" --drafter "$work/base" \
      --drafter "$work/distilled" --drafter "$work/distilled-qat" --drafter "$work/drafter-layers" \
      --drafter "$work/distilled-layers-qat" --q4 --ngram --target "$work/target" --preset "$preset" \
      --out "$work/eval-${set%%:*}.json" || return 1
  done
}
stage evaluate evaluate_all
export_both() {  # DEPENDS(export): Llama drafters with SmolLM2's tokenizer
  "${py[@]}" export --checkpoint "$work/distilled-qat" --out "$work/drafter-q4_0.gguf" --type Q4_0 --preset "$preset" &&
  "${py[@]}" export --checkpoint "$work/distilled-layers-qat" --out "$work/drafter-layers-q4_0.gguf" --type Q4_0 \
    --preset "$preset"
}
stage export export_both
# DEPENDS(lead): lab_report.json/.md from the two evaluations (report_sections.py's fields: other_prompts,
# drafter_origins, accepted_lengths; lookahead and llama_server come from CPU runs here afterwards)
log "done: results in $results"
finish 0
