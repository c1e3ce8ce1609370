#!/usr/bin/env bash
# Drafting with prompt-lookup candidates on the H200, ONE device command (≤ 9 minutes with start-up, ~6 meant):
# random-weight Qwen3-1.7B- and 0.6B-shaped Q4_0 drafters made here (bench/models/make_random_gguf.py), then
#   1. a drafter step's cost at m = 1 … 16 tokens of one sequence (generateCosts --lookahead-sweep 0,…,15: exactly m − 1
#      candidates a step, fillers, one process), with the plain drafts of 1 … 16 over HTTP (`specdraft serve --streams 1
#      --lookahead 0`) and in process beside it, for both shapes and for the committed default drafter (the lab's);
#   2. the same 1.7B drafter as served by default (candidates on, fillers): drafts over HTTP and in process, so HTTP's
#      overhead with candidates is measured, not only composed; and again without fillers (which shape is faster);
#   3. 32 streams × 512 (bench/serveBench.ts), without candidates, with the default budget and with a larger one,
#      interleaved in the same run (off / on / wider / off);
#   4. with LAB_TARGET (the lab's target GGUF, e.g. what train/scripts/gpu/lab_checks.sh writes on this machine): its
#      costs, and `specdraft generate` lab target ← the default drafter (or LAB_DRAFTER, on LAB_DATA)
#      in process with and without candidates (lossless: output identical), and over HTTP with them;
#   5. tables.md (bench/speedUpTable.ts): the step costs, their break-even tokens per step, the CPU-measured tokens per
#      step of the trained default drafter on real text (bench/results/2026-12-01-cpu-lookahead/lookahead-steps.json,
#      copied in), drafts of 16 and 8 composed from the two, and the projected speed-up of 8B F16 ← 1.7B Q4_0 and the
#      lab pair with the best M, on the 8B and lab targets' verify costs of 2026-12-01 (bench/results/
#      2026-12-01-h200-real-shape-2/target-*.json: reused, not re-measured).
#
# On the GPU machine, from the checkout, with .gpu .gpu-rs .whl dist build/llama-headers (bench/gpu/stage.sh makes them;
# `npm run build` makes dist; carried over two calls to one warm machine as for real-shape.sh: the docs say how):
#   bash bench/gpu/lookahead.sh RESULTS [LAB_TARGET.gguf]
# CPU dry run (tiny shapes, --gpu cpu, a few repeats, the sweep shortened; no .gpu needed):
#   LOOKAHEAD_CPU=1 bash bench/gpu/lookahead.sh /tmp/lookahead-cpu
# LOOKAHEAD_SWEEP (the M list of 1.), LOOKAHEAD_REPEATS, LOOKAHEAD_PROMPTS and LOOKAHEAD_MAX_TOKENS (4.) override either
# mode's; the CPU measurement of
# docs/benchmarks.md runs the CPU mode with the full sweep and a trained pair (LAB_TARGET, LAB_DRAFTER, LAB_DATA).
set -uo pipefail
results=${1:?usage: lookahead.sh RESULTS [LAB_TARGET.gguf]}
lab_target=${2:-}
cpu=${LOOKAHEAD_CPU:-0}
budget=${LOOKAHEAD_BUDGET_S:-480}  # no optional part starts after this many seconds (the command's limit is 540)
models=${LOOKAHEAD_MODELS:-/tmp/lookahead-models}
source bench/gpu/jobLib.sh
if [ "$cpu" = 1 ]; then
  repeats=${LOOKAHEAD_REPEATS:-3}; streams_big=4; sweep=${LOOKAHEAD_SWEEP:-0,1,3}; shape_big=tiny-drafter; shape_small=tiny-drafter; big=tiny-a-q4_0; small=tiny-b-q4_0
  max_tokens=${LOOKAHEAD_MAX_TOKENS:-24}; prompts=${LOOKAHEAD_PROMPTS:-2}
else
  repeats=${LOOKAHEAD_REPEATS:-12}; streams_big=32; sweep=${LOOKAHEAD_SWEEP:-0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15}
  max_tokens=${LOOKAHEAD_MAX_TOKENS:-128}; prompts=${LOOKAHEAD_PROMPTS:-16}
  shape_big=qwen3-1.7b; shape_small=qwen3-0.6b; big=1.7b-q4_0; small=0.6b-q4_0
fi
committed=bench/results/2026-12-01-h200-real-shape-2
steps_json=${LOOKAHEAD_STEPS_JSON:-bench/results/2026-12-01-cpu-lookahead/lookahead-steps.json}
# the H200's target costs only for an H200 run (a CPU run measures the lab target's own, and has no 8B)
[ "$cpu" = 1 ] || cp "$committed/target-8b-f16.json" "$committed/target-lab.json" "$results/"
cp "$steps_json" "$results/lookahead-steps.json" || fail "no $steps_json: tables without real text's tokens per step"
drafter_big=$models/$big.gguf
drafter_small=$models/$small.gguf
( make_model "$shape_big" Q4_0 "$drafter_big" 1; make_model "$shape_small" Q4_0 "$drafter_small" 2 ) &
models_pid=$!

# ---- 1. step costs at m, with the plain drafts over HTTP and in process ----
step_costs() { # label model [generateCosts options...]
  local label=$1 model=$2; shift 2
  log "drafter $label: step costs at m = 1 + ($sweep), plain drafts"
  (
    start_server "$model" 1 "$results/serve-$label.log" --lookahead 0 || exit 1
    js 200 generateCosts --drafter "$url" --draft-model "$model" --gpu "$gpu" --repeats "$repeats" --lookahead 0 --lookahead-sweep "$sweep" "$@" \
      > "$results/drafter-$label.json" 2> "$results/drafter-$label.err" || fail "generateCosts $label: $(tail -3 "$results/drafter-$label.err" | tr '\n' ' ')"
    stop_server
  )
  [ -s "$results/drafter-$label.json" ] && node -e 'const c=require(process.argv[1]);const s=c.draft_step_by_m??{};console.log("  step ms by m:", Object.entries(s).map(([k,v])=>k+" "+v.step.toFixed(3)).join(", "), "| plain n16 HTTP", c.draft_walk?.n16?.toFixed(2), "in process", c.draft_walk_in_process?.n16?.toFixed(2))' "$results/drafter-$label.json" | tee -a "$results/progress.log"
}
wait_file "$drafter_big" && step_costs "$big" "$drafter_big"
# the other two drafters only while the budget lasts: the 1.7B drafter's costs and 32 streams (below) come first
[ "$(elapsed)" -lt "$budget" ] && step_costs default models/specdraft-default.gguf
[ "$(elapsed)" -lt "$budget" ] && wait_file "$drafter_small" && step_costs "$small" "$drafter_small"

# ---- 2. the 1.7B drafter as served by default: candidates on, HTTP against in process; and without fillers (steps
# of varying shape: the graph rebuilt where the lookup's guesses change in number) ----
served() { # label [engine options...]: serve's, given to the server and to generateCosts' engine alike
  local label=$1; shift
  log "drafter $big as served${*:+ with $*} (candidates on)"
  (
    start_server "$drafter_big" 1 "$results/serve-$big@$label.log" "$@" || exit 1
    node -e 'fetch(process.argv[1]).then(r=>r.json()).then(i=>console.log("  /info lookahead", JSON.stringify(i.lookahead)))' "$url/info" | tee -a "$results/progress.log"
    js 150 generateCosts --drafter "$url" --draft-model "$drafter_big" --gpu "$gpu" --repeats "$repeats" "$@" \
      > "$results/drafter-$big@$label.json" 2> "$results/drafter-$big@$label.err" || fail "generateCosts $big@$label"
    stop_server
  )
}
if [ -f "$drafter_big" ]; then
  served candidates
  [ "$(elapsed)" -lt "$budget" ] && served candidates-nofill --lookahead-fill off
fi

# ---- 3. 32 streams × 512 with and without candidates, interleaved ----
serve_bench() { # label [serve options...]
  local label=$1; shift
  log "serveBench: $streams_big streams × 512, $big ${*:-(defaults)}"
  start_server "$drafter_big" "$streams_big" "$results/serve-$big-s$streams_big$label.log" "$@" || return 1
  js 90 serveBench --url "$url" --streams "$streams_big" --start-context 512 --steps 10 --no-progress \
    > "$results/serveBench-$big-s$streams_big-c512$label.json" 2> "$results/serveBench$label.err" || fail "serveBench$label"
  grep -E '"requests_per_s"|"p50"' "$results/serveBench-$big-s$streams_big-c512$label.json" | tr -d '\n' | tee -a "$results/progress.log"; echo
  stop_server
}
if [ -f "$drafter_big" ]; then
  serve_bench "@off" --lookahead 0
  serve_bench ""
  [ "$(elapsed)" -lt "$budget" ] && serve_bench "@wider" --lookahead-step-tokens 128
  [ "$(elapsed)" -lt "$budget" ] && serve_bench "@off-again" --lookahead 0
fi

# ---- 4. end to end with the lab pair (needs the lab's target GGUF on this machine; LAB_DRAFTER and LAB_DATA: another
# trained drafter and its held-out set, whose tokens per step are then measured here too) ----
lab_drafter=${LAB_DRAFTER:-models/specdraft-default.gguf}; lab_data=${LAB_DATA:-data/lab-heldout.jsonl}
lab_label=default; [ -n "${LAB_DRAFTER:-}" ] && lab_label=lab-drafter
e2e() { # label [generate options...]
  local label=$1; shift
  log "generate lab ← $lab_label ($label)"
  timeout 150 "${cli[@]}" generate --target "$lab_target" --data "$lab_data" --limit "$prompts" --max-tokens "$max_tokens" \
    --draft-len 8 --gpu "$gpu" "${threads[@]}" --no-progress --out "$results/e2e-lab--$lab_label--$label.json" "$@" \
    > "$results/e2e-lab--$lab_label--$label.txt" 2>&1 || fail "generate $label (exit $?): $(tail -3 "$results/e2e-lab--$lab_label--$label.txt" | tr '\n' ' ')"
  grep -E "speed-up|τ|identical" "$results/e2e-lab--$lab_label--$label.txt" | tr -s ' ' | tee -a "$results/progress.log"
}
if [ -n "$lab_target" ]; then
  if [ -f "$lab_target" ] && [ "$(elapsed)" -lt "$budget" ]; then
    # the lab target's costs of 2026-12-01 (copied above) stand, unless asked (or a CPU run, where they are not this
    # machine's): measuring them takes ~1.5 minutes of the budget
    if [ "$cpu" = 1 ] || [ "${LAB_MEASURE_TARGET:-0}" = 1 ]; then
      log "target lab: its costs on this machine"
      js 150 generateCosts --target "$lab_target" --gpu "$gpu" --repeats "$repeats" > "$results/target-lab.json" 2> "$results/target-lab.err" \
        || fail "generateCosts target lab: $(tail -3 "$results/target-lab.err" | tr '\n' ' ')"
    fi
    if [ "$lab_label" != default ]; then
      step_costs "$lab_label" "$lab_drafter"
      log "tokens per step of $lab_drafter on $lab_data"
      js 200 lookaheadSteps --model "$lab_drafter" --data "$lab_data" --candidates "${sweep#0,}" --gpu "$gpu" --no-progress \
        > "$results/lookahead-steps-$lab_label.json" 2> "$results/lookahead-steps-$lab_label.err" || fail "lookaheadSteps $lab_label"
    fi
    e2e in-process --draft-model "$lab_drafter"
    e2e in-process@off --draft-model "$lab_drafter" --draft-lookahead 0
    if start_server "$lab_drafter" 1 "$results/serve-e2e-http.log"; then e2e http --drafter "$url"; stop_server; fi
  else
    fail "lab target $lab_target: missing or no time left"
  fi
fi

wait "$models_pid" 2>/dev/null
log "tables"
js 60 speedUpTable "$results" > "$results/tables.md" 2> "$results/tables.err" || fail "speedUpTable: $(tail -3 "$results/tables.err" | tr '\n' ' ')"
ls -la "$models" > "$results/models.txt"
log "done ($( [ -f "$results/failures.log" ] && wc -l < "$results/failures.log" || echo 0) failures)"
