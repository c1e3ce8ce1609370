#!/usr/bin/env bash
# The real-shape speculation job, ONE device command (≤ 9 minutes, start-up included): random-weight GGUFs of
# Qwen3-8B (F16 and Q8_0 targets) and Qwen3-1.7B / 0.6B (Q4_0 drafters) made here (bench/models/make_random_gguf.py:
# nothing that large travels), then
#   1. drafter costs (bench/generateCosts.ts): POST /draft to `specdraft serve --streams 1` and the same engine in
#      process, n = 1 … 16, drafts grown as a generation grows them and by +8 tokens, a new prompt's first draft;
#      per-step split from /metrics and by step index; A/B of the batch-1 knobs on the 1.7B drafter: one token a step
#      for arrivals off (--step-prefill 0), ggml-cuda's concurrent-stream graph optimization on
#      (GGML_CUDA_GRAPH_OPT=1), flash attention off; and whether that optimization changes drafts
#      (bench/batchConsistency.ts --peer: the same contexts to a server with it and one without, random ids and, with
#      the lab pair, real text: on 2026-12-01 it changed 28 of 32 of the lab drafter's drafts);
#   2. 32 streams × 512 with bench/serveBench.ts (the ≥ 277 req/s floor of 2026-12-01 must hold), and again with
#      GGML_CUDA_GRAPH_OPT=1 between two default runs (its peer in the same job);
#   3. target costs (alone, a new prompt's fixed cost, verify m = 1 … 17 native with the argmax in the graph and on
#      the host, and node-llama-cpp) for both targets;
#   4. end to end: `specdraft generate` 8B F16 ← 1.7B, HTTP and in process, against the cost model;
#      with TARGET (e.g. the lab's target GGUF that train/scripts/gpu/lab_checks.sh writes on this machine): TARGET ←
#      the committed models/specdraft-default.gguf on data/lab-heldout.jsonl (or LAB_DRAFTER on LAB_DATA: the drafter
#      and held-out set of that lab), and its costs;
#   5. if time is left: an ncu census of the 1.7B drafter's kernels per batch-1 step (count and duration).
# Everything lands in RESULTS (JSON in generateCosts' format, logs, tables.md from bench/speedUpTable.ts).
#
# On the GPU machine, from the checkout, with .gpu .gpu-rs .whl dist build/llama-headers there (bench/gpu/stage.sh
# makes them; `npm run build` makes dist). Where the machine takes less per transfer than all of them with the checkout
# (bench/gpu/README.md), bring them in two to one warm machine: .gpu without node.xz plus the small ones, then .gpu/node.xz;
# a larger TARGET travels in parts, each moved out of the checkout (e.g. to /tmp) by the call that brings it:
#   bash bench/gpu/real-shape.sh RESULTS [TARGET.gguf]
# CPU dry run (tiny shapes of the same kinds, --gpu cpu, a few repeats; no .gpu needed):
#   REAL_SHAPE_CPU=1 bash bench/gpu/real-shape.sh /tmp/real-shape-cpu
set -uo pipefail
results=${1:?usage: real-shape.sh RESULTS [TARGET.gguf]}
lab_target=${2:-}
cpu=${REAL_SHAPE_CPU:-0}
budget=${REAL_SHAPE_BUDGET_S:-510}  # stop starting optional parts after this many seconds (the command's limit is 540)
models=${REAL_SHAPE_MODELS:-/tmp/real-shape-models}
# random weights have no text statistics, so prompt-lookup candidates would be timed on meaningless acceptance: this
# job measures the plain drafter (bench/gpu/lookahead.sh times candidates and composes them with real text's figures):
# every engine it starts (serve, generateCosts in process, generate's in-process drafter) gets this many candidates
lookahead=${REAL_SHAPE_LOOKAHEAD:-0}
plain=(--lookahead "$lookahead")
source bench/gpu/jobLib.sh
if [ "$cpu" = 1 ]; then
  repeats=3; max_tokens=24; prompts=2; e2e_k=4; streams_big=4
  shape_target=tiny-target; shape_big=tiny-drafter; shape_small=tiny-drafter
  t16=tiny-f16; t8=tiny-q8_0; big=tiny-a-q4_0; small=tiny-b-q4_0
else
  repeats=20; max_tokens=128; prompts=4; e2e_k=4; streams_big=32
  shape_target=qwen3-8b; shape_big=qwen3-1.7b; shape_small=qwen3-0.6b
  t16=8b-f16; t8=8b-q8_0; big=1.7b-q4_0; small=0.6b-q4_0
fi

# ---- the models, in the background (drafters first: their measurements start while the targets are written) ----
drafter_big=$models/$big.gguf
drafter_small=$models/$small.gguf
target_f16=$models/$t16.gguf
target_q8=$models/$t8.gguf
(
  make_model "$shape_big" Q4_0 "$drafter_big" 1
  make_model "$shape_small" Q4_0 "$drafter_small" 2
  make_model "$shape_target" F16 "$target_f16" 3
  make_model "$shape_target" Q8_0 "$target_q8" 4
) &
models_pid=$!

# ---- 1. drafter costs, and the batch-1 A/B ----
drafter_costs() { # label model [VAR=value | --engine-option value ...]: serve + in-process costs with those variables
  # (llama.cpp's own, e.g. GGML_CUDA_GRAPH_OPT=1) and engine options (serve's, which generateCosts takes too)
  local label=$1 model=$2 engine=("${plain[@]}"); shift 2
  log "drafter $label ${*:-(defaults)}"
  (
    while [ $# -gt 0 ]; do
      case $1 in --*) engine+=("$1" "$2"); shift 2 ;; *) export "${1?}"; shift ;; esac
    done
    start_server "$model" 1 "$results/serve-$label.log" "${engine[@]}" || exit 1
    # with $interleave (a target GGUF): the walk again with that target verifying between requests, as generate does
    js 150 generateCosts --drafter "$url" --draft-model "$model" --gpu "$gpu" --repeats "$repeats" "${engine[@]}" ${interleave:+--interleave-target "$interleave"} \
      > "$results/drafter-$label.json" 2> "$results/drafter-$label.err" || fail "generateCosts drafter $label: $(tail -3 "$results/drafter-$label.err" | tr '\n' ' ')"
    stop_server
  )
  [ -s "$results/drafter-$label.json" ] && node -e 'const c=require(process.argv[1]);console.log("  draft_walk n8", c.draft_walk?.n8?.toFixed(2), "ms (HTTP),", c.draft_walk_in_process?.n8?.toFixed(2), "ms (in process); step", JSON.stringify(c.draft_step_ms))' "$results/drafter-$label.json" | tee -a "$results/progress.log"
}
# variants are labelled <drafter>@<variant>: bench/speedUpTable.ts lists their costs beside the drafter's, no projection
interleave=""
wait_file "$drafter_big" && {
  # the drafter of the end-to-end runs also between the 8B F16 target's verifications (the model's figures for them)
  wait_file "$target_f16" && interleave=$target_f16
  drafter_costs "$big" "$drafter_big"
  interleave=""
  drafter_costs "$big@before" "$drafter_big" --step-prefill 0
  drafter_costs "$big@graph-opt" "$drafter_big" GGML_CUDA_GRAPH_OPT=1
  drafter_costs "$big@no-flash-attention" "$drafter_big" --flash-attention off
}
wait_file "$drafter_small" && drafter_costs "$small" "$drafter_small"

# does GGML_CUDA_GRAPH_OPT change drafts? the same contexts, each alone, to one server with it and one without
graph_opt_identity() { # label model [--data FILE]
  local label=$1 model=$2; shift 2
  log "drafts with and without GGML_CUDA_GRAPH_OPT: $label"
  (
    GGML_CUDA_GRAPH_OPT=1 start_server "$model" 1 "$results/serve-identity-$label-opt.log" "${plain[@]}" || exit 1
    local with_opt=$url with_pid=$server_pid
    start_server "$model" 1 "$results/serve-identity-$label-noopt.log" "${plain[@]}" || { kill "$with_pid"; exit 1; }
    js 120 batchConsistency --url "$with_opt" --peer "$url" --streams 32 --context 512 --draft-len 16 "$@" \
      > "$results/graph-opt-identity-$label.json" 2> "$results/graph-opt-identity-$label.err" \
      || fail "batchConsistency $label: $(tail -3 "$results/graph-opt-identity-$label.err" | tr '\n' ' ')"
    grep -E '"differing"' "$results/graph-opt-identity-$label.json" | tee -a "$results/progress.log"
    stop_server; kill -TERM "$with_pid" 2>/dev/null; wait "$with_pid" 2>/dev/null
  )
}
[ "$cpu" != 1 ] && [ -f "$drafter_big" ] && graph_opt_identity "$big" "$drafter_big"

# ---- 2. 32 streams × 512: batching must not lose what it had; the same with GGML_CUDA_GRAPH_OPT=1 (which took 8 %
# off a batch-1 step on 2026-12-01) before it can become a default, interleaved as defaults / opt / defaults ----
serve_bench() { # label [VAR=value ...]
  local label=$1; shift
  log "serveBench: $streams_big streams × 512, $big${*:+ $*}"
  (
    for kv in "$@"; do export "${kv?}"; done
    start_server "$drafter_big" "$streams_big" "$results/serve-$big-s$streams_big$label.log" "${plain[@]}" || exit 1
    js 90 serveBench --url "$url" --streams "$streams_big" --start-context 512 --steps 10 --no-progress \
      > "$results/serveBench-$big-s$streams_big-c512$label.json" 2> "$results/serveBench$label.err" || fail "serveBench$label: $(tail -3 "$results/serveBench$label.err" | tr '\n' ' ')"
    grep -E '"requests_per_s"|"p50"' "$results/serveBench-$big-s$streams_big-c512$label.json" | tr -d '\n' | tee -a "$results/progress.log"; echo
    stop_server
  )
}
if [ -f "$drafter_big" ]; then
  serve_bench ""
  if [ "$cpu" != 1 ]; then serve_bench "@graph-opt" GGML_CUDA_GRAPH_OPT=1; serve_bench "@again"; fi
fi

# ---- 3. target costs ----
target_costs() { # label model
  log "target $1"
  js 180 generateCosts --target "$2" --gpu "$gpu" --repeats "$repeats" > "$results/target-$1.json" 2> "$results/target-$1.err" \
    || { fail "generateCosts target $1: $(tail -3 "$results/target-$1.err" | tr '\n' ' ')"; return 1; }
  node -e 'const c=require(process.argv[1]);const v=c.verify_native;console.log("  alone", c.alone_per_token?.toFixed(2), "/", c.alone_native_per_token?.toFixed(2), "ms; native verify 1/17:", v.m1.all.toFixed(2), v.m17.all.toFixed(2), "=", (v.m17.all/v.m1.all).toFixed(2), "×; node-llama-cpp 17 all/last:", c.verify.m17.all.toFixed(2), c.verify.m17.last.toFixed(2))' "$results/target-$1.json" | tee -a "$results/progress.log"
}
wait_file "$target_f16" && target_costs "$t16" "$target_f16"
wait_file "$target_q8" && target_costs "$t8" "$target_q8"

# ---- 4. end to end against the cost model ----
e2e() { # target-label target drafter-label drafter path data [limit]
  local name="$1--$3--$5" source
  log "generate $name, k = $e2e_k"
  if [ "$5" = http ]; then start_server "$4" 1 "$results/serve-e2e-$name.log" "${plain[@]}" || return 1; source=(--drafter "$url")
  else source=(--draft-model "$4" --draft-lookahead "$lookahead"); fi
  timeout 150 "${cli[@]}" generate --target "$2" "${source[@]}" --data "$6" --limit "${7:-$prompts}" --max-tokens "$max_tokens" \
    --draft-len "$e2e_k" --gpu "$gpu" "${threads[@]}" --no-progress --out "$results/e2e-$name.json" \
    > "$results/e2e-$name.txt" 2>&1 || fail "generate $name (exit $?): $(tail -3 "$results/e2e-$name.txt" | tr '\n' ' ')"
  grep -E "speed-up|τ|identical" "$results/e2e-$name.txt" | tr -s ' ' | tee -a "$results/progress.log"
  [ "$5" = http ] && stop_server
  return 0
}
if [ -f "$target_f16" ] && [ -f "$drafter_big" ]; then
  e2e "$t16" "$target_f16" "$big" "$drafter_big" http data/lab-heldout.jsonl
  e2e "$t16" "$target_f16" "$big" "$drafter_big" in-process data/lab-heldout.jsonl
fi
# the lab pair: the committed default drafter and held-out set, or (LAB_DRAFTER, LAB_DATA) a lab just run on this machine
lab_drafter=${LAB_DRAFTER:-models/specdraft-default.gguf}; lab_data=${LAB_DATA:-data/lab-heldout.jsonl}
if [ -n "$lab_target" ]; then
  if [ -f "$lab_target" ] && [ "$(elapsed)" -lt "$budget" ]; then
    target_costs lab "$lab_target"
    interleave=$lab_target drafter_costs default "$lab_drafter"
    [ "$cpu" != 1 ] && graph_opt_identity default "$lab_drafter" --data "$lab_data"
    e2e lab "$lab_target" default "$lab_drafter" http "$lab_data" 16
    e2e lab "$lab_target" default "$lab_drafter" in-process "$lab_data" 16
  else
    fail "lab target $lab_target: missing or no time left"
  fi
fi

# ---- 5. kernels per batch-1 draft step (ncu: the GPU machine has it, not nsys) ----
if [ "$cpu" != 1 ] && command -v ncu > /dev/null && [ "$(elapsed)" -lt $((budget - 90)) ] && [ -f "$drafter_big" ]; then
  log "ncu census of $big's batch-1 steps"
  # skip the load and warm-up, then time ~3 steps' kernels one by one (caches and clocks left alone: closer to a run)
  timeout 80 ncu --target-processes all --launch-skip 4000 --launch-count 1800 --kill 1 --cache-control none --clock-control none \
    --metrics gpu__time_duration.sum --csv --log-file "$results/ncu.csv" \
    node .gpu-rs/generateCosts.mjs --draft-model "$drafter_big" --gpu cuda --repeats 2 "${plain[@]}" \
    > /dev/null 2> "$results/ncu.err" || log "ncu ended with $? (see ncu.err; needs GPU counter permission)"
  python3 - "$results/ncu.csv" > "$results/ncu-census.json" 2>> "$results/ncu.err" <<'PY' || log "no ncu census"
import csv, json, sys
from collections import defaultdict
rows = [r for r in csv.DictReader(line for line in open(sys.argv[1]) if line.startswith('"'))]
rows = [r for r in rows if r.get("Metric Name") == "gpu__time_duration.sum"]
per = defaultdict(lambda: [0, 0.0])
unit = rows[0]["Metric Unit"] if rows else "ns"
scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3}.get(unit, 1e-3)
for r in rows:
    p = per[r["Kernel Name"][:80]]
    p[0] += 1
    p[1] += float(r["Metric Value"].replace(",", "")) * scale
total = sum(v[1] for v in per.values())
top = sorted(per.items(), key=lambda kv: -kv[1][1])[:15]
# one greedy argmax per batch-1 step (backend sampling): the steps the profiled kernels span
steps = sum(c for k, (c, _) in per.items() if "argmax" in k.lower())
print(json.dumps({"kernels": len(rows), "total_us": round(total, 1), "unit": unit, "steps": steps,
                  "kernels_per_step": round(len(rows) / steps, 1) if steps else None,
                  "us_per_step": round(total / steps, 1) if steps else None,
                  "mean_us_per_kernel": round(total / max(1, len(rows)), 2),
                  "top": [{"kernel": k, "count": c, "us": round(t, 1)} for k, (c, t) in top]}, indent=2))
PY
  [ -s "$results/ncu-census.json" ] && head -5 "$results/ncu-census.json" | tee -a "$results/progress.log"
fi

wait "$models_pid" 2>/dev/null
log "tables"
js 60 speedUpTable "$results" > "$results/tables.md" 2> "$results/tables.err" || fail "speedUpTable: $(tail -3 "$results/tables.err" | tr '\n' ' ')"
ls -la "$models" > "$results/models.txt"
log "done ($( [ -f "$results/failures.log" ] && wc -l < "$results/failures.log" || echo 0) failures)"
