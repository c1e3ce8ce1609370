#!/usr/bin/env bash
# The real-model lab on one GPU (docs/lab.md, "The real-model lab"): SmolLM2-135M-Instruct as the target, the SmolLM2
# job as one `run` (a 35M-parameter Llama drafter made from scratch with the target's vocabulary, pretrained on
# general text, distilled on the target's greedy chat answers, QAT to Q4_0, evaluated on the held-out template prompts
# and on prompts the target wrote), then `ablate` on that run for the same recipe from 2 of the target's own layers;
# `evaluate` over every drafter on both sets, the exports and lab_report.json/.md. This script only stages: it brings
# the GGUF and the prose to the machine in calls, then calls `run`, `ablate`, `evaluate`, `export` and
# `real-lab-report`, each resumable.
#
#   bash train/scripts/gpu/real_lab.sh RESULTS [LIMIT_S]        (LIMIT_S: this call's seconds, default 550)
#
# Resumable across calls on one warm machine: everything lives in REAL_LAB_DIR (/tmp/real-lab); the run in run/, the
# layers drafter in layers/, and the lab's folder names (base, distilled, distilled-qat, drafter-layers, …) link into
# them for `evaluate` and the report. A call runs every step whose inputs have arrived and whose stamp
# (REAL_LAB_DIR/stamps/<step>: its seconds) is missing, stops before a step its limit leaves too little time for (the
# `usual` seconds below) or whose inputs have not arrived yet, and packs what exists into RESULTS, ending with what to
# run next and which files to bring back. A step cut by the limit resumes in the next call (`run` and `ablate` from
# their stamps and their stages' resume/ states). The calls, what each carries and how to stage it:
# train/scripts/gpu/real_lab.md (made by real_lab_stage.sh).
#
# REAL_LAB_CPU=1 is the CPU dry run (tests/test_real_lab.py): the real GGUF and the same steps and folders, with a
# handful of prompts, a narrow scratch drafter and a few steps each, no time limit unless given.
# Environment: REAL_LAB_DIR, REAL_LAB_STAGED (.real), PYTHON (python3), REAL_LAB_THREADS (torch's CPU threads), the
# training seconds REAL_LAB_PRETRAIN_S (default: the preset's), REAL_LAB_DISTILL_S (100), REAL_LAB_QAT_S (40),
# REAL_LAB_LAYERS_DISTILL_S (60), REAL_LAB_LAYERS_QAT_S (20), and the cosine's REAL_LAB_EPOCHS (6; the preset
# distills until its plateau instead, longer than a call): the first call's hold for the whole run.
# A call's own choices: REAL_LAB_LIMITS=1, the limits study (below, before the lab's distillation); REAL_LAB_UNTIL=STEP,
# end the call once that step is done (e.g. `limits`, to run the study alone).
set -uo pipefail
results=${1:?usage: real_lab.sh RESULTS [LIMIT_S]}
cpu=${REAL_LAB_CPU:-0}
limit=${2:-$([ "$cpu" = 1 ] && echo 100000 || echo 550)}
staged=${REAL_LAB_STAGED:-.real}
export work=${REAL_LAB_DIR:-/tmp/real-lab} python=${PYTHON:-python3} preset=smollm2-chat
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
started=$(date +%s)
mkdir -p "$results" "$work/logs" "$work/stamps" "$work/inbox" || exit 2
results=$(cd "$results" && pwd)
log() { echo "[$(date +%T) +$(( $(date +%s) - started ))s] $*" | tee -a "$work/logs/progress.log" >&2; }
left() { echo $(( limit - ($(date +%s) - started) )); }

# Seconds of the H200 each stage is expected to take, start-up included (estimates from the toy lab's H200 rates scaled
# to these models, with room): a stage starts only when the call's limit leaves it this much.
# `prepare` is run's target, corpus, scratch drafter, pretraining and both reference sets; `run` its distillation,
# QAT, evaluation and export; `layers` the layers drafter's distillation and QAT.
# `prepare` is run's target, corpus, scratch drafter, pretraining and both reference sets; `run` its distillation,
# QAT, evaluation and export; `layers` the layers drafter's distillation and QAT. The three resume where a limit cuts
# them, so 20 seconds left are enough to start one.
declare -A usual=([unpack]=10 [gguf]=15 [prepare]=20 [limits]=120 [run]=20 [layers]=20 [links]=5 [evaluate]=45
  [evaluate_other]=30 [export]=40 [report]=15)
sd() { "$python" -m specdraft_train ${REAL_LAB_THREADS:+--threads "$REAL_LAB_THREADS"} "$@"; }
export -f sd

# What RESULTS holds after every call (a few files, none over 15 MiB, for machines that return little), then the exit.
pack() {
  rm -f "$results"/real-lab-* "$results/lab_report.md" "$results/limits.md" "$results/progress.log"
  (cd "$work" && tar -cf - --ignore-failed-read logs stamps real_lab.json lab_report.json lab_report.md \
    eval-templates.json eval-other.json $(ls -d -- */manifest.json */tb reference*/heldout.jsonl reference*/dev.jsonl \
    export/*.json run/run_state.json run/eval/results.json layers/ablation.* layers/*/result.json \
    limits/*.json limits/*.md limits/*/*.json limits/*/*/manifest.json 2>/dev/null) 2>/dev/null) |
    xz -T0 -6 > "$results/real-lab-results.tar.xz"
  if [ -f "$work/stamps/export" ]; then  # the three drafter GGUFs, xz (Q4_0 barely compresses) cut in 15 MiB parts
    (cd "$work/export" && tar -cf - *.gguf) | xz -T0 -1 | split -b 15M -d -a 1 - "$results/real-lab-ggufs.tar.xz.part-"
  fi
  [ -f "$work/lab_report.md" ] && cp "$work/lab_report.md" "$results/"
  [ -f "$work/limits/ablation.md" ] && cp "$work/limits/ablation.md" "$results/limits.md"
  cp "$work/logs/progress.log" "$results/"
}
finish() {
  pack
  log "bring back (files under $results):"
  (cd "$results" && for f in *; do echo "  $f $(stat -c %s "$f") bytes"; done) | tee -a "$work/logs/progress.log" >&2
  [ -f "$work/lab_report.md" ] && [ "$1" = 0 ] && head -60 "$work/lab_report.md" >&2
  exit "$1"
}

# stage NAME COMMAND...: skipped once stamped; started only if the limit leaves its usual time; stamped with its
# seconds when it succeeds; its output in logs/NAME.log.
stage() {
  local name=$1; shift
  if [ -f "$work/stamps/$name" ]; then until_here "$name"; return 0; fi
  if [ "$(left)" -lt "${usual[$name]}" ]; then
    log "NOT FINISHED: $(left) s left in this call, $name usually takes ${usual[$name]} s: run the same command again"
    finish 0
  fi
  log "$name"
  local t0; t0=$(date +%s)
  timeout --signal=INT --kill-after=30 "$(left)" bash -c '"$@"' _ "$@" > "$work/logs/$name.log" 2>&1
  local rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    log "NOT FINISHED: $name ran into this call's limit (it resumes): run the same command again"; finish 0
  elif [ "$rc" -ne 0 ]; then
    tail -20 "$work/logs/$name.log" >&2; log "FAILED: $name (exit $rc; logs/$name.log)"; finish 1
  fi
  echo "$(( $(date +%s) - t0 ))" > "$work/stamps/$name"
  log "$name: $(cat "$work/stamps/$name") s"
  until_here "$name"
}
until_here() {  # REAL_LAB_UNTIL=STAGE: this call ends once that stage is done
  [ "$1" = "${REAL_LAB_UNTIL:-}" ] || return 0
  log "STOPPED after $1 (REAL_LAB_UNTIL): the same command without it goes on"; finish 0
}

# --- every call: gguf importable, what this call carried into the inbox -----------------------------------------------
if ! "$python" -c "import gguf" 2>/dev/null; then
  if [ ! -d /tmp/site/gguf ]; then
    if ! ls .whl/*.whl >/dev/null 2>&1; then
      log "FRESH MACHINE: start again with call 1 (carry .whl $staged/call1)"; finish 2
    fi
    "$python" -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || finish 2
  fi
  export PYTHONPATH=/tmp/site:$PWD/train
else
  export PYTHONPATH=$PWD/train${PYTHONPATH:+:$PYTHONPATH}
fi
for file in "$staged"/call*/*; do
  [ -f "$file" ] && [ ! -e "$work/inbox/$(basename "$file")" ] && cp "$file" "$work/inbox/"
done
# The run's settings, fixed by its first call (real_lab.json; the report records them): the mode and the training
# seconds of each budgeted stage ("preset": the preset's).
mode=$([ "$cpu" = 1 ] && echo cpu-dry-run || echo gpu)
if [ ! -f "$work/real_lab.json" ]; then
  "$python" -c 'import json, sys
keys = ("mode", "pretrain_s", "distill_s", "qat_s", "layers_distill_s", "layers_qat_s", "epochs")
json.dump(dict(zip(keys, sys.argv[2:])), open(sys.argv[1], "w"))' "$work/real_lab.json" "$mode" \
    "${REAL_LAB_PRETRAIN_S:-preset}" "${REAL_LAB_DISTILL_S:-100}" "${REAL_LAB_QAT_S:-40}" \
    "${REAL_LAB_LAYERS_DISTILL_S:-60}" "${REAL_LAB_LAYERS_QAT_S:-20}" "${REAL_LAB_EPOCHS:-6}" || finish 2
fi
read -r recorded pretrain_s distill_s qat_s layers_distill_s layers_qat_s epochs < <("$python" -c \
  'import json, sys; print(*json.load(open(sys.argv[1])).values())' "$work/real_lab.json")
if [ "$recorded" != "$mode" ]; then
  log "$work holds a run of another mode ($recorded) than $mode: use another REAL_LAB_DIR"; finish 2
fi
if [ "$cpu" = 1 ]; then
  export device=cpu
  # a handful of prompts; a narrow scratch drafter (the layers drafter keeps the target's width); a few steps each
  tiny_distill="distill.epochs=1 distill.batch_size=5 distill.eval_every=0 distill.ckpt_every=1"
  tiny_distill+=" distill.replay_batch_size=2 distill.replay_seq_len=64 distill.time_budget_s=0"
  tiny="corpus.max_code_bytes=300000 corpus.max_prose_bytes=300000 drafter.num_hidden_layers=1 drafter.hidden_size=64"
  tiny+=" drafter.intermediate_size=128 drafter.num_attention_heads=2 drafter.num_key_value_heads=1"
  tiny+=" drafter.head_dim=32 pretrain_drafter.max_steps=2 pretrain_drafter.batch_size=2 pretrain_drafter.ckpt_every=1"
  tiny+=" reference.max_new_tokens=16 reference.batch_size=8 reference.shard_prompts=8 $tiny_distill"
  run_flags=() && for setting in $tiny; do run_flags+=(--set "$setting"); done
  variant_common="${tiny_distill// /,},"
  budget() { echo 0; }  # steps bound the dry run, not seconds
else
  export device=cuda
  run_flags=(--extra "$("$python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")")
  run_flags+=(--set "distill.epochs=${epochs:-6}")  # a lab begun before epochs were recorded ran the preset's 6
  variant_common="distill.epochs=${epochs:-6},"
  budget() { echo "$1"; }
fi
[ "$pretrain_s" = preset ] || run_flags+=(--set "pretrain_drafter.time_budget_s=$pretrain_s")
[ "$distill_s" = preset ] || run_flags+=(--set "distill.time_budget_s=$(budget "$distill_s")")
run_flags+=(--set "distill.qat_time_budget_s=$(budget "$qat_s")")

# --- call 1: the prose; call 2: the rest of the GGUF -----------------------------------------------------------------
if [ ! -f "$work/stamps/unpack" ]; then
  for need in prose.tar.xz smol.gguf.sha256; do
    [ -f "$work/inbox/$need" ] || { log "NEXT CALL: carry .whl $staged/call1 (call 1)"; finish 0; }
  done
fi
unpack() { rm -rf "$work/prose" && mkdir -p "$work/prose" && tar -C "$work/prose" -xJf "$work/inbox/prose.tar.xz"; }
export -f unpack
stage unpack unpack
for dir in "$work"/prose/*/; do run_flags+=(--prose "${dir%/}"); done
if [ ! -f "$work/stamps/gguf" ]; then  # part-ab came in call 2, part-ac in call 3, …
  call=1
  for part in $(cut -c67- "$work/inbox/smol.gguf.sha256" | grep part-); do
    [ -f "$work/inbox/$part" ] || { log "NEXT CALL: carry $staged/call$call (call $call), the same command"; finish 0; }
    call=$(( call + 1 ))
  done
fi
export gguf_name=$(grep -v part- "$work/inbox/smol.gguf.sha256" | cut -c67-)  # the GGUF's own file name
reassemble() {  # the GGUF from its xz parts, every part and the whole checked against the staged sums
  cd "$work/inbox" && grep part- smol.gguf.sha256 | sha256sum -c --quiet &&
  cat $(cut -c67- smol.gguf.sha256 | grep part- | sort) | xz -dc > "$work/$gguf_name" &&
  cd "$work" && grep -v part- inbox/smol.gguf.sha256 | sha256sum -c --quiet
}
export -f reassemble
stage gguf reassemble

# The prompts: the committed files; in the dry run the first lines of each split of 3 categories.
prompts=data/chat-prompts-templates.jsonl.xz other=data/chat-prompts-target.jsonl.xz
if [ "$cpu" = 1 ]; then
  subset() {  # subset SRC DEST TRAIN DEV HELDOUT: that many lines of each split, in each of the first 3 categories
    "$python" - "$@" <<'PY'
import json, lzma, sys
src, dest, *counts = sys.argv[1:]
want, kept, seen = dict(zip(("train", "dev", "heldout"), map(int, counts))), [], {}
for line in lzma.open(src, "rt"):
    row = json.loads(line)
    categories = seen.setdefault("categories", [])
    if row["category"] not in categories and len(categories) < 3:
        categories.append(row["category"])
    key = (row["category"], row["split"])
    if row["category"] in categories and seen.get(key, 0) < want[row["split"]]:
        seen[key] = seen.get(key, 0) + 1
        kept.append(line)
open(dest, "w").writelines(kept)
PY
  }
  subset "$prompts" "$work/prompts-templates.jsonl" 3 1 2 || finish 2
  subset "$other" "$work/prompts-other.jsonl" 0 1 1 || finish 2
  prompts=$work/prompts-templates.jsonl other=$work/prompts-other.jsonl
fi

# --- the lab: `run` from the GGUF (the scratch drafter: the preset's shape), to its export -----------------------------
# run_lab STAGE: `run` until that stage (it resumes where it stopped); a stage runs in a shell of its own, which
# takes the flags as words (none holds a space)
export prompts other run_flags_text="${run_flags[*]}"
run_lab() {
  # shellcheck disable=SC2086
  sd run --target "$work/$gguf_name" --out "$work/run" --init scratch --prompts "$prompts" --eval-prompts "$other" \
    --preset "$preset" --device "$device" --until "$1" $run_flags_text
}
export -f run_lab
stage prepare run_lab reference-eval
# --- the limits study (REAL_LAB_LIMITS=1): what bounds the distilled drafter's τ, its data or its depth -------------
# `ablate` on the run's base and reference data (docs/lab.md, "What limits τ"): the scratch base distilled on a
# quarter, half and all of the training prompts, and on all of them for twice the epochs; drafters of 2, 4 and 8 of
# the target's layers distilled alike. Epoch-bound (no time budget), so sharing the GPU changes no variant's steps;
# all at once on the one GPU (small drafters' steps are launch-bound); scored at Q4_0 PTQ, with no QAT: the question
# is what distillation can learn. It comes before the run's own distillation so that a call can run it alone.
if [ "${REAL_LAB_LIMITS:-0}" = 1 ]; then
  if [ "$cpu" = 1 ]; then
    limits_variants=(data-50:distill.data_fraction=0.5)  # one variant: the layers stage makes a layers drafter too
  else
    limits_variants=(data-25:distill.data_fraction=0.25 data-50:distill.data_fraction=0.5 data-100:
      epochs-12:distill.epochs=12 layers-2:variant.init=layers:2 layers-4:variant.init=layers:4
      layers-8:variant.init=layers:8)
  fi
  limits_flags=()
  for variant in "${limits_variants[@]}"; do  # the common settings first: a variant's own override them
    name=${variant%%:*} own=${variant#*:}
    limits_flags+=(--variant "$name:$variant_common${own:+$own,}variant.qat=false")
  done
  stage limits sd ablate --lab "$work/run" --out "$work/limits" --device "$device" --time-budget 0 \
    --jobs "$([ "$cpu" = 1 ] && echo 1 || echo "${#limits_variants[@]}")" "${limits_flags[@]}"
fi
stage run run_lab export
# The same recipe from 2 of the target's own layers, shorter (no separate healing on general text: its distillation
# replays the base's pretraining text, as the run's does).
layers_variant="layers:${variant_common}variant.init=layers:2"
layers_variant+=",distill.time_budget_s=$(budget "$layers_distill_s"),distill.qat_time_budget_s=$(budget "$layers_qat_s")"
stage layers sd ablate --lab "$work/run" --out "$work/layers" --device "$device" --variant "$layers_variant"
# The lab's folder names, for `evaluate` and the report (commands/real_lab.py reads them)
links() {
  local name target
  for pair in target:run/target corpus:run/corpus base:run/base reference:run/reference \
    reference-other:run/reference-eval distilled:run/distilled distilled-qat:run/qat \
    drafter-layers:layers/layers/drafter distilled-layers:layers/layers/distilled \
    distilled-layers-qat:layers/layers/distilled-qat; do
    name=${pair%%:*} target=${pair#*:}
    [ -d "$work/$target" ] || { echo "links: $work/$target is missing" >&2; return 1; }
    ln -sfn "$target" "$work/$name"
  done
}
export -f links
stage links links
drafters="--drafter $work/base --drafter $work/distilled --drafter $work/distilled-qat --drafter $work/drafter-layers"
drafters="$drafters --drafter $work/distilled-layers-qat"
stage evaluate sd evaluate --heldout "$work/reference/heldout.jsonl" $drafters --q4 --ngram --target "$work/target" \
  --preset "$preset" --device "$device" --out "$work/eval-templates.json"
stage evaluate_other sd evaluate --heldout "$work/reference-other/heldout.jsonl" $drafters --q4 --ngram \
  --target "$work/target" --preset "$preset" --device "$device" --out "$work/eval-other.json"
export_all() {  # the three GGUFs the CPU serves afterwards (real_lab.py's SERVED_DRAFTERS): the base's, exported
  # here; the two QAT drafters' as `run` and `ablate` exported them (the bytes `export` would write), with their manifests
  mkdir -p "$work/export" &&
  sd export --checkpoint "$work/base" --out "$work/export/base-q4_0.gguf" --preset "$preset" || return 1
  local pair suffix
  for pair in drafter:run/export/drafter layers:layers/layers/drafter; do
    for suffix in .gguf .gguf.manifest.json .data_manifest.json; do
      cp "$work/${pair#*:}-q4_0$suffix" "$work/export/${pair%%:*}-q4_0$suffix" || return 1
    done
  done
}
export -f export_all
stage export export_all
stage report sd real-lab-report --work "$work"
log "DONE: the whole lab; lab_report.md below"
finish 0
