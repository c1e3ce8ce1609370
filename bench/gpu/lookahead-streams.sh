#!/usr/bin/env bash
# How a step's candidate budget (`serve --lookahead-step-tokens`) plays at 8, 16 and 32 streams × 512 on the H200:
# bench/serveBench.ts against `specdraft serve` with candidates off and with budgets of 16, 32 and 64 tokens a step,
# taking turns, each run on a fresh server. Run on the warm machine that bench/gpu/lookahead.sh left (its 1.7B-shaped
# Q4_0 drafter in /tmp/lookahead-models, node unpacked, the CUDA engine built):
#   bash bench/gpu/lookahead-streams.sh RESULTS [MODEL.gguf]
# One JSON per run in RESULTS (serveBench's), named <streams>-<setting>-<round>.json, and a line per run on stdout.
set -uo pipefail
results=${1:?usage: lookahead-streams.sh RESULTS [MODEL.gguf]}
model=${2:-/tmp/lookahead-models/1.7b-q4_0.gguf}
mkdir -p "$results"
source .gpu/unpack.sh > /dev/null
port=8100
bench() { # label streams [serve options...]
  local label=$1 streams=$2; shift 2
  node dist/cli/main.js serve --model "$model" --gpu cuda --port "$port" --streams "$streams" "$@" > "/tmp/serve-$label.log" 2>&1 &
  local pid=$!
  until node -e 'fetch(process.argv[1]).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))' \
    "http://127.0.0.1:$port/health"; do
    kill -0 "$pid" 2> /dev/null || { echo "$label: serve exited: $(tail -2 "/tmp/serve-$label.log")"; return 1; }
    sleep 0.3
  done
  node .gpu-rs/serveBench.mjs --url "http://127.0.0.1:$port" --streams "$streams" --start-context 512 --steps 10 \
    --no-progress > "$results/$label.json"
  echo "$label $(grep -o '"requests_per_s": [0-9.]*' "$results/$label.json")"
  kill "$pid"; wait "$pid"
}
for round in 1 2 3; do
  bench "s32-off-$round" 32 --lookahead 0
  bench "s32-st32-$round" 32 --lookahead-step-tokens 32
done
bench s32-st16-1 32 --lookahead-step-tokens 16
for streams in 16 8; do
  bench "s$streams-off-1" "$streams" --lookahead 0
  bench "s$streams-st32-1" "$streams" --lookahead-step-tokens 32
  bench "s$streams-st64-1" "$streams" --lookahead-step-tokens 64
done
