#!/usr/bin/env bash
# After the lab on the H200 machine (train/scripts/gpu/lab.sh, lab in $LAB_DIR): speculative generation with the lab
# pair — the lab target exported to GGUF here (F16, and Q8_0), the lab's Q4_0-QAT drafter — target alone vs HTTP drafter
# vs in-process draft model vs prompt lookup, in one run (bench/generateBench.sh: k = 16 with both verifiers, k = 8 and
# 4 with the exact one), the per-step costs behind the speed-up (bench/generateCosts.ts, with and without CUDA graphs),
# and the pair packed for the CPU run (RESULTS/pair.tar.xz.part-*: Q8_0 target, drafter, held-out set).
#   bash bench/gpu/after-lab.sh RESULTS
set -uo pipefail
results=${1:?results dir}; lab=${LAB_DIR:-/tmp/lab}
mkdir -p "$results"
source .gpu/unpack.sh
export PYTHONPATH=/tmp/site:$PWD/train
[ -f build/native/cuda/specdraft_engine.node ] || node scripts/build-native.mjs --gpu cuda 2>&1 | tail -1
drafter="$lab/export/drafter-q4_0.gguf"
# the lab's own export failed (e.g. a stage refused): the committed default comes from the same recipe and tokenizer
[ -f "$drafter" ] || { echo "after-lab: no $drafter, using models/specdraft-default.gguf"; drafter=models/specdraft-default.gguf; }
head -n 8 "$lab/reference/heldout.jsonl" > /tmp/gen-prompts.jsonl
for type in F16 Q8_0; do
  target=/tmp/lab-target-${type,,}.gguf
  [ -f "$target" ] || python3 -m specdraft_train export --checkpoint "$lab/target" --out "$target" --type "$type" 2>&1 | tail -1
done

serve() {  # serve PORT [ENV=VALUE...]: the drafter on one stream, as generateBench runs it
  local port=$1; shift
  env "$@" node dist/cli/main.js serve --model "$drafter" --port "$port" --streams 1 --gpu cuda > "$results/serve-$port.log" 2>&1 &
  for _ in $(seq 1 300); do
    node -e "fetch('http://127.0.0.1:$port/health').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))" && return 0; sleep 0.2
  done; return 1
}
serve 8011 && node .gpu-extra/generateCosts.mjs --target /tmp/lab-target-f16.gguf --drafter http://127.0.0.1:8011 --gpu cuda \
  > "$results/costs-f16.json"
serve 8012 GGML_CUDA_DISABLE_GRAPHS=1 && GGML_CUDA_DISABLE_GRAPHS=1 node .gpu-extra/generateCosts.mjs --target /tmp/lab-target-f16.gguf \
  --drafter http://127.0.0.1:8012 --gpu cuda > "$results/costs-f16-no-cuda-graphs.json"
curl -s http://127.0.0.1:8011/metrics > "$results/metrics-8011.txt" 2>/dev/null || node -e "fetch('http://127.0.0.1:8011/metrics').then(r=>r.text()).then(t=>process.stdout.write(t))" > "$results/metrics-8011.txt"
pkill -TERM -f "serve --model" ; sleep 1
cat "$results"/costs-*.json | tr -d ' \n' | sed 's/}{/}\n{/g'; echo

for run in f16:16:"node-llama-cpp exact" f16:8:exact f16:4:exact q8_0:16:exact; do
  IFS=: read -r type k verifiers <<< "$run"
  echo "=== target $type, k = $k"
  VERIFIERS=$verifiers bash bench/generateBench.sh "/tmp/lab-target-$type.gguf" "$drafter" /tmp/gen-prompts.jsonl \
    "$results/generate-$type-k$k" --max-tokens 256 --draft-len "$k" --runs 2 --gpu cuda 2>&1 | grep -E "^==|speed-up|τ|identical|share|tokens/s"
done

# the pair for the CPU measurement (bench/results: docs/benchmarks.md)
mkdir -p /tmp/pair && cp /tmp/lab-target-q8_0.gguf "$drafter" "$lab/reference/heldout.jsonl" /tmp/pair/
tar -C /tmp/pair -cf - . | xz -T0 -2 | split -b 15M - "$results/pair.tar.xz.part-"
ls -la "$results"
