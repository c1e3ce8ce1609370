#!/usr/bin/env bash
# The GPU serving benchmark, all peers in one job on the H200 machine, through the same HTTP client (bench/serveBench.ts):
#   1. specdraft serve (native batched engine, CUDA build of node-llama-cpp's llama.cpp),
#   2. a seed-style HF transformers bf16 server (bench/peers/hf_seed_server.py),
#   3. llama.cpp's own llama-server, built here from the llama.cpp source node-llama-cpp bundles.
# The drafter is Qwen3-1.7B-shaped with random weights in Q4_0 (bench/models/make_random_drafter.py).
#
# From the checkout on the GPU machine (set up by bench/gpu/setup.sh), with what bench/gpu/stage.sh makes brought along:
# .gpu-extra (qwen3-tokenizer.json.xz and the bench clients bundled), .gpu-llama (llama-src.tar.xz; only for the
# llama-server peer), and on a machine without node .gpu and .whl; dist and build/llama-headers too:
#   bash bench/gpu/serving.sh RESULTS_DIR [PEERS]      PEERS: any of "specdraft hf-seed llama-server" (default: all)
# bench/gpu/stage.sh prints what each job brings: with .gpu-llama this one is the largest (bench/gpu/README.md), so on
# a machine with a transfer limit run the llama-server peer in a job of its own or carry less.
set -uo pipefail
results=${1:?results dir}
peers=${2:-specdraft hf-seed llama-server}
want() { [[ " $peers " == *" $1 "* ]]; }
steps=${STEPS:-20}; seed_steps=${SEED_STEPS:-8}  # measured steps per stream: ours and llama-server / the slow seed peer
mkdir -p "$results"
log() { echo "[$(date +%T)] $*"; }
source bench/gpu/setup.sh
gpu_tools
nproc_all=$(nproc)

# llama-server builds on the CPU cores while the rest runs (prepare.sh is idempotent: a job may have run it already).
if want llama-server; then bash bench/gpu/prepare.sh "$results" > "$results/prepare.log" 2>&1 & build_pid=$!; fi
log "native engine, CUDA variant"
gpu_engine "$results/gpu.txt"
model=/tmp/qwen3-1.7b-random-q4_0.gguf
until [ -f "$model" ]; do
  if ! want llama-server; then bash bench/gpu/prepare.sh "$results" > /dev/null 2>&1 || true; break; fi
  sleep 1
done

wait_health() { # url timeout_s → prints seconds until GET /health answered 200, or fails
  python3 - "$1" "$2" <<'PY'
import sys, time, urllib.request
url, limit, start = sys.argv[1], float(sys.argv[2]), time.time()
while time.time() - start < limit:
    try:
        if urllib.request.urlopen(url + "/health", timeout=2).status == 200:
            print(f"{time.time() - start:.2f}"); sys.exit(0)
    except Exception:
        pass
    time.sleep(0.05)
sys.exit(1)
PY
}
bench() { # name url streams ctx steps
  log "bench $1: streams $3, context $4"
  node .gpu-extra/serveBench.mjs --url "$2" --streams "$3" --start-context "$4" --steps "$5" --no-progress \
    > "$results/$1-s$3-c$4.json" 2> "$results/$1-s$3-c$4.err" || log "bench $1 failed: $(tail -3 "$results/$1-s$3-c$4.err")"
  grep -E '"requests_per_s"|"p50"' "$results/$1-s$3-c$4.json" | tr -d '\n'; echo
}
ctx_size=9216  # 8192 start + 20 steps of +6 + the draft

if want specdraft; then
log "1. specdraft serve"
node dist/cli/main.js serve --model "$model" --port 8000 --streams 32 --context $ctx_size --gpu cuda > "$results/specdraft-serve.log" 2>&1 &
pid=$!
t=$(wait_health http://127.0.0.1:8000 120) && echo "{\"startup_to_health_s\": $t}" > "$results/specdraft-startup.json"
log "specdraft healthy after ${t:-never} s"; python3 -c "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:8000/info').read().decode())" > "$results/specdraft-info.json"
node .gpu-extra/batchConsistency.mjs --url http://127.0.0.1:8000 --streams 32 --context 512 > "$results/specdraft-consistency.json"
grep differing "$results/specdraft-consistency.json" | head -2
for c in 512 2048 8192; do bench specdraft http://127.0.0.1:8000 32 $c $steps; done
bench specdraft http://127.0.0.1:8000 1 512 $steps
kill -TERM $pid; wait $pid
fi

if want hf-seed; then
log "2. seed-style HF transformers bf16 peer"
python3 bench/peers/hf_seed_server.py --port 8001 > "$results/hf-seed.log" 2>&1 &
pid=$!
wait_health http://127.0.0.1:8001 300 >/dev/null
bench hf-seed http://127.0.0.1:8001 32 512 $seed_steps
bench hf-seed http://127.0.0.1:8001 32 2048 $seed_steps
bench hf-seed http://127.0.0.1:8001 1 512 $seed_steps
kill $pid; wait $pid 2>/dev/null
fi

want llama-server || { log "done"; exit 0; }
log "3. llama-server (waiting for its build)"
[ -n "${build_pid:-}" ] && wait $build_pid; cat "$results/prepare.log"
if [ -x /tmp/llama-build/bin/llama-server ]; then
  /tmp/llama-build/bin/llama-server -m "$model" --port 8002 -np 32 -c $((32 * ctx_size)) -ngl 99 -fa on \
    --no-webui > "$results/llama-server.log" 2>&1 &
  pid=$!
  wait_health http://127.0.0.1:8002 120 >/dev/null
  node .gpu-extra/batchConsistency.mjs --url llama-server+http://127.0.0.1:8002 --streams 32 --context 512 > "$results/llama-server-consistency.json"
  for c in 512 2048 8192; do bench llama-server llama-server+http://127.0.0.1:8002 32 $c $steps; done
  bench llama-server llama-server+http://127.0.0.1:8002 1 512 $steps
  kill $pid; wait $pid 2>/dev/null
else
  log "llama-server did not build: $(tail -5 "$results/llama-server-build.log")"
fi
log "done"
