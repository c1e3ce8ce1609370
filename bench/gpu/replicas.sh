#!/usr/bin/env bash
# The replicas job on one H200 (issue #26), ONE device command of about 3 minutes: 2 `specdraft serve` replicas on the
# one GPU behind HAProxy against 1 replica, 32 streams × 512 and the same again at 64 streams on the 2 replicas
# (bench/replicas.sh with WIDE=1: 1 replica straight and behind the proxy; 2 behind it with and without conversation
# keys; 2 with the streams pinned half to each, no proxy), on the Qwen3-1.7B-shaped random Q4_0 drafter
# (bench/models/make_random_gguf.py, a synthetic vocabulary of Qwen3's size: nothing that large travels).
# The GPU machine has no HAProxy and no network: the job brings Debian's binary and its libraries
# (bench/gpu/stage-haproxy.sh → .gpu-haproxy/haproxy.tar.xz). If that binary cannot run there, the job says so in
# RESULTS/progress.log and measures without the proxy (NO_PROXY=1: 1 replica against 2 with the streams pinned).
#
# Staging, here after `npm ci`: npm run build; bash bench/gpu/stage.sh (.gpu, .gpu-rs with serveBench bundled, .whl);
# bash bench/gpu/stage-haproxy.sh. On the GPU machine, from the checkout, with .gpu .gpu-rs .whl dist
# build/llama-headers .gpu-haproxy there (where that is more than one transfer takes, bring .gpu/node.xz in a second,
# as for bench/gpu/real-shape.sh):
#   bash bench/gpu/replicas.sh RESULTS          (with $OUT set, RESULTS also lands in $OUT/<name>.tar.gz)
# A rerun resumes: runs whose JSON is in RESULTS are not repeated, the model is made once.
# CPU dry run (the committed default drafter, --gpu cpu, few steps; haproxy from PATH, else .gpu-haproxy; no .gpu):
#   REPLICAS_CPU=1 bash bench/gpu/replicas.sh /tmp/replicas-cpu
set -uo pipefail
results=${1:?usage: replicas.sh RESULTS}
mkdir -p "$results" && results=$(cd "$results" && pwd)
started=$(date +%s)
log() { echo "[$(date +%T) +$(( $(date +%s) - started ))s] $*" | tee -a "$results/progress.log" >&2; }

if [ "${REPLICAS_CPU:-0}" = 1 ]; then
  export GPU=cpu MODEL=${MODEL:-models/specdraft-default.gguf} STREAMS=${STREAMS:-4} STEPS=${STEPS:-5}
  export SERVE_OPTIONS=${SERVE_OPTIONS:-"--streams 4 --context 1024 --threads 1"}
  if [ -f .gpu-rs/serveBench.mjs ]; then export BENCH="node .gpu-rs/serveBench.mjs"; fi
else
  source bench/gpu/setup.sh
  log "node, node_modules and the gguf package"
  gpu_tools
  log "native engine, CUDA variant"
  gpu_engine "$results/gpu.txt" | tee -a "$results/progress.log"
  model=/tmp/replicas-models/qwen3-1.7b-q4_0.gguf
  mkdir -p "$(dirname "$model")"
  if [ ! -f "$model" ]; then
    log "making the 1.7B-shaped Q4_0 drafter"
    python3 bench/models/make_random_gguf.py --shape qwen3-1.7b --type Q4_0 --out "$model.tmp" --seed 1 \
      > "$results/model.log" 2>&1 && mv "$model.tmp" "$model" || { log "FAILED: $(tail -2 "$results/model.log")"; exit 1; }
  fi
  export GPU=cuda MODEL=$model STREAMS=${STREAMS:-32} STEPS=${STEPS:-20} WIDE=${WIDE:-1}
  export SERVE_OPTIONS=${SERVE_OPTIONS:-"--streams 32 --context 2048"}
  export BENCH="node .gpu-rs/serveBench.mjs"
fi
if [[ "${BENCH:-}" == *serveBench.mjs ]] && ! node .gpu-rs/serveBench.mjs --help | grep -q -- --no-conversation-key; then
  log "FAILED: .gpu-rs/serveBench.mjs predates --metrics and --no-conversation-key: bash bench/gpu/stage.sh again"; exit 1
fi

# HAProxy: Debian's, staged with its libraries (the GPU machine), or this machine's own (a CPU dry run without staging)
if [ -f .gpu-haproxy/haproxy.tar.xz ]; then
  mkdir -p /tmp/specdraft-haproxy && tar xJf .gpu-haproxy/haproxy.tar.xz -C /tmp/specdraft-haproxy
  export HAPROXY=/tmp/specdraft-haproxy/haproxy/haproxy
elif command -v haproxy >/dev/null 2>&1; then
  export HAPROXY=haproxy
fi
if [ -n "${HAPROXY:-}" ] && version=$("$HAPROXY" -v 2>&1 | head -1) && [[ "$version" == HAProxy* ]]; then
  log "proxy: $version ($HAPROXY)"
else
  log "NO PROXY: ${HAPROXY:-no haproxy} does not run here (${version:-not staged}); measuring 1 replica against 2 with the streams pinned"
  export NO_PROXY=1
fi

bash bench/replicas.sh "$results" 2>&1 | tee -a "$results/progress.log"
log "done"
# on the device machine only a few files come back through $OUT: the whole folder as one archive
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
  tar -C "$(dirname "$results")" -czf "$OUT/$(basename "$results").tar.gz" "$(basename "$results")"
  log "packed into $OUT/$(basename "$results").tar.gz"
fi
