#!/usr/bin/env bash
# The real-model lab's CPU part (docs/lab.md, "The real-model lab"), after train/scripts/gpu/real_lab.sh has run on
# the GPU: from what that run brought back (RETURNED: real-lab-results.tar.xz and real-lab-ggufs.tar.xz.part-*), on
# this CPU machine,
#   1. the target as served: `target` on the pinned SmolLM2 GGUF here (its F32 GGUF; checked to be the GPU run's);
#   2. `specdraft serve` of each drafter GGUF (base Q4_0 PTQ, distilled Q4_0 QAT, from the target's layers Q4_0 QAT) and
#      `specdraft validate` over both held-out sets (per category; beside PyTorch's τ of the same blocks);
#   3. `specdraft generate --target <F32 target> --draft-model <drafter>`: lossless on every prompt, the speed-up over
#      the target alone for each k of GEN_KS with the distilled drafter, then the base at the distilled one's best k,
#      and the distilled drafter's drafts over HTTP from `specdraft serve` (`--drafter URL`) at that k;
#   4. bench/lookaheadSteps.ts with the distilled drafter on both held-out sets (tokens per drafter step);
#   5. bench/llama_server_spec.py: llama.cpp's own speculative decoding with the base and the distilled drafters
#      (llama-server from bench/peers/build_llama_server.sh), into bench/results/<date>-cpu-real-lab-llama-server/;
#   6. `real-lab-report --report`: the GPU run's lab_report.json/.md with those sections added, in OUT/report.
# Each step is skipped when its output exists, so a rerun resumes. Run from the repository root after `npm ci`,
# `npm run build` and `bash bench/peers/build_llama_server.sh`:
#   bash bench/realLabCpu.sh RETURNED [OUT]            (OUT default: runs/real-lab)
# Environment: GEN_KS ("2 4 8"), GEN_PER_CATEGORY (2 prompts of each category), GEN_TOKENS (128), LLAMA_PER_CATEGORY
# (2), LLAMA_TOKENS (128), LLAMA_OUT (llama_server_spec.py's folder), LOOKAHEAD_PER_CATEGORY (2 conversations of
# each category of each set), LOOKAHEAD_CANDIDATES ("1,3,8"),
# VALIDATE_RUNS ("templates:distilled_q4_0_qat": SET:DRAFTER pairs walked in full), VALIDATE_LIMIT (all),
# THREADS (1: on a shared machine one llama.cpp thread beats two), PYTHON (train/.venv/bin/python),
# REAL_LAB_STEPS (which of "validate generate lookahead llama-server report" run; default all), GPU (where llama.cpp
# computes: cpu, or cuda on the H200 with bench/gpu/real-lab-generate.sh), SMOLLM2_DIR (where the pinned SmolLM2 GGUF
# is or goes: fetch_smollm2.sh's DEST).
set -euo pipefail
returned=${1:?usage: realLabCpu.sh RETURNED [OUT]}
out=${2:-runs/real-lab}
python=${PYTHON:-train/.venv/bin/python}
threads=${THREADS:-1}
where=${GPU:-cpu}
gen_ks=${GEN_KS:-2 4 8}
steps=" ${REAL_LAB_STEPS:-validate generate lookahead llama-server report} "
want() { [[ "$steps" == *" $1 "* ]]; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
gpu=$out/gpu
log() { echo "[$(date +%T)] realLabCpu: $*" >&2; }
sd() { PYTHONPATH=train "$python" -m specdraft_train "$@"; }

# --- what the GPU run returned; the target as served ------------------------------------------------------------------
if [ ! -f "$gpu/lab_report.json" ]; then
  mkdir -p "$gpu/export"
  tar -C "$gpu" -xJf "$returned/real-lab-results.tar.xz"
  cat "$returned"/real-lab-ggufs.tar.xz.part-* | xz -dc | tar -C "$gpu/export" -xf -
fi
[ -f "$gpu/lab_report.json" ] || { log "$returned holds no finished lab (no lab_report.json)"; exit 2; }
gguf=$(bash train/scripts/data/fetch_smollm2.sh ${SMOLLM2_DIR:+"$SMOLLM2_DIR"})
if [ ! -f "$out/target/manifest.json" ]; then log "target"; sd target --gguf "$gguf" --out "$out/target" >/dev/null; fi
expected=$("$python" -c "import json, sys; print(json.load(open(sys.argv[1]))['target']['gguf_sha256'])" \
  "$gpu/lab_report.json")
[ "$(sha256sum "$gguf" | cut -c1-64)" = "$expected" ] || { log "$gguf is not the GPU run's target"; exit 2; }
target=$out/target/target-f32.gguf
declare -A ggufs=([base_q4_0_ptq]=base-q4_0.gguf [distilled_q4_0_qat]=drafter-q4_0.gguf
  [layers_q4_0_qat]=layers-q4_0.gguf)  # real_lab.py's SERVED_DRAFTERS
declare -A sets=([templates]=reference [other]=reference-other)

# prompts of every category: the first N of each in a validator JSONL
per_category() {  # per_category SRC DEST N
  "$python" - "$@" <<'PY'
import json, sys
src, dest, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
seen, kept = {}, []
for line in open(src):
    category = json.loads(line).get("category", "all")
    if seen.get(category, 0) < n:
        seen[category] = seen.get(category, 0) + 1
        kept.append(line)
open(dest, "w").writelines(kept)
PY
}
[ -f "$out/generate-prompts.jsonl" ] || per_category "$gpu/reference/heldout.jsonl" "$out/generate-prompts.jsonl" \
  "${GEN_PER_CATEGORY:-2}"
[ -f "$out/llama-prompts.jsonl" ] || per_category "$gpu/reference/heldout.jsonl" "$out/llama-prompts.jsonl" \
  "${LLAMA_PER_CATEGORY:-2}"

# `specdraft serve` of one drafter GGUF on a free port ($port; $server its pid), stopped on exit or by stop_server
start_server() {  # start_server DRAFTER
  port=$("$python" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  node dist/cli/main.js serve --model "$gpu/export/${ggufs[$1]}" --port "$port" --gpu "$where" \
    --threads "$threads" > "$out/serve-$1.log" 2>&1 &
  server=$!
  trap 'kill $server 2>/dev/null' EXIT
  until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do
    kill -0 "$server" 2>/dev/null || { log "serve $1 exited (see $out/serve-$1.log)"; exit 1; }
    sleep 1
  done
}
stop_server() { kill "$server"; wait "$server" 2>/dev/null || true; trap - EXIT; }

# --- serve + validate -------------------------------------------------------------------------------------------------
report_args=()
# Which served drafter walks which held-out set in full (SET:DRAFTER …): a walk is ~50k draft requests of the
# distilled drafter (~9 minutes on 2 cores), so by default the one whose τ the report leads with; the others' τ is
# PyTorch's of the same Q4_0 blocks.
validate_runs=" ${VALIDATE_RUNS:-templates:distilled_q4_0_qat} "
want validate || validate_runs=" "  # none walked; summaries of an earlier run still go to the report
for drafter in base_q4_0_ptq distilled_q4_0_qat layers_q4_0_qat; do
  pending=0
  for set in templates other; do
    [[ "$validate_runs" == *" $set:$drafter "* ]] || continue
    [ -f "$out/validate/$set-$drafter/summary.json" ] || pending=1
  done
  if [ "$pending" = 1 ]; then
    start_server "$drafter"
    for set in templates other; do
      [[ "$validate_runs" == *" $set:$drafter "* ]] || continue
      [ -f "$out/validate/$set-$drafter/summary.json" ] && continue
      log "validate $set with $drafter"
      node dist/cli/main.js validate --server "$drafter=http://127.0.0.1:$port" \
        --data "$gpu/${sets[$set]}/heldout.jsonl" ${VALIDATE_LIMIT:+--limit "$VALIDATE_LIMIT"} --no-progress \
        --report "$out/validate/$set-$drafter" > "$out/validate-$set-$drafter.log"
    done
    stop_server
  fi
  for set in templates other; do
    [ -f "$out/validate/$set-$drafter/summary.json" ] || continue
    report_args+=(--validate "$set:$drafter=$out/validate/$set-$drafter/summary.json")
  done
done

# --- generate: the distilled drafter at each k, the base and the served distilled drafter at the best of them --------
generate() {  # generate NAME K DRAFT-SOURCE-FLAGS...: the run NAME (the report's drafter key) at k = K
  local name=$1 k=$2 file=$out/generate/$1-k$2.json
  shift 2
  if [ ! -f "$file" ]; then
    log "generate with $name, k = $k"
    mkdir -p "$out/generate"
    node dist/cli/main.js generate --target "$target" "$@" \
      --data "$out/generate-prompts.jsonl" --max-tokens "${GEN_TOKENS:-128}" --draft-len "$k" --gpu "$where" \
      --threads "$threads" --no-progress --out "$file.tmp" > "$out/generate/$name-k$k.log" 2>&1 \
      || { log "generate $name k=$k failed (see $out/generate/$name-k$k.log)"; exit 1; }
    mv "$file.tmp" "$file"
  fi
  report_args+=(--generate "$name=$file")
}
if want generate; then
  for k in $gen_ks; do generate distilled_q4_0_qat "$k" --draft-model "$gpu/export/${ggufs[distilled_q4_0_qat]}"; done
  best=$("$python" - "$out/generate" $gen_ks <<'PY'
import json, sys
runs = {k: json.load(open(f"{sys.argv[1]}/distilled_q4_0_qat-k{k}.json"))["speedUp"] for k in sys.argv[2:]}
print(max(runs, key=runs.get))
PY
  )
  generate base_q4_0_ptq "$best" --draft-model "$gpu/export/${ggufs[base_q4_0_ptq]}"
  # the distilled drafter's drafts over HTTP from `specdraft serve`, as a deployment gets them
  if [ ! -f "$out/generate/distilled_q4_0_qat_http-k$best.json" ]; then
    start_server distilled_q4_0_qat
    generate distilled_q4_0_qat_http "$best" --drafter "http://127.0.0.1:$port"
    stop_server
  else
    generate distilled_q4_0_qat_http "$best"
  fi
fi

# --- lookahead: tokens per drafter step -------------------------------------------------------------------------------
if want lookahead && [ ! -f "$out/lookahead.json" ]; then
  log "lookahead steps"
  for set in templates other; do  # the held-out files are in category order: N of each category, not the first N
    per_category "$gpu/${sets[$set]}/heldout.jsonl" "$out/lookahead-$set.jsonl" "${LOOKAHEAD_PER_CATEGORY:-2}"
  done
  node --import tsx bench/lookaheadSteps.ts --model "$gpu/export/${ggufs[distilled_q4_0_qat]}" \
    --data "$out/lookahead-templates.jsonl" "$out/lookahead-other.jsonl" \
    --candidates "${LOOKAHEAD_CANDIDATES:-1,3,8}" --gpu "$where" --threads "$threads" --no-progress > "$out/lookahead.json.tmp"
  mv "$out/lookahead.json.tmp" "$out/lookahead.json"
fi

# --- llama.cpp's own speculative decoding -----------------------------------------------------------------------------
llama_out=bench/results/$(date +%F)-cpu-real-lab-llama-server
[ -f "$out/llama-server.path" ] && llama_out=$(cat "$out/llama-server.path")  # a rerun on another day: the same folder
llama_out=${LLAMA_OUT:-$llama_out}
if want llama-server && [ ! -f "$llama_out/summary.json" ]; then
  log "llama-server"
  echo "$llama_out" > "$out/llama-server.path"
  "$python" bench/llama_server_spec.py --target "$target" --drafter "base=$gpu/export/${ggufs[base_q4_0_ptq]}" \
    --drafter "distilled=$gpu/export/${ggufs[distilled_q4_0_qat]}" --prompts "$out/llama-prompts.jsonl" \
    --n-predict "${LLAMA_TOKENS:-128}" --threads "$threads" --out "$llama_out"
fi

if want report; then
  sd real-lab-report --report "$gpu/lab_report.json" --out "$out/report" "${report_args[@]}" \
    --lookahead "$out/lookahead.json" --llama-server "$llama_out/summary.json"
  log "done: $out/report/lab_report.md"
fi
