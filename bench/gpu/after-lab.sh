#!/usr/bin/env bash
# After the lab on the H200 machine (train/scripts/gpu_lab.sh, lab in $LAB_DIR): speculative generation with the lab
# pair (target exported to GGUF here, the lab's Q4_0-QAT drafter) — target alone vs HTTP drafter vs in-process draft
# model vs prompt lookup, in one run — and the batch-consistency check with a trained drafter.
#   bash bench/gpu/after-lab.sh RESULTS
set -uo pipefail
results=${1:?results dir}; lab=${LAB_DIR:-/tmp/lab}
mkdir -p "$results"
source .gpu/unpack.sh
export PYTHONPATH=/tmp/site:$PWD/train
[ -f build/native/cuda/specdraft_engine.node ] || node scripts/build-native.mjs --gpu cuda 2>&1 | tail -1
target=/tmp/lab-target-f16.gguf
[ -f "$target" ] || python3 -m specdraft_train export --checkpoint "$lab/target" --out "$target" --type F16 2>&1 | tail -1
drafter="$lab/export/drafter-q4_0.gguf"
head -n 8 "$lab/reference/heldout.jsonl" > /tmp/gen-prompts.jsonl
bash bench/generateBench.sh "$target" "$drafter" /tmp/gen-prompts.jsonl "$results/generate" --max-tokens 256 \
  --draft-len 16 --runs 1 --gpu cuda 2>&1 | tail -25
node dist/cli/main.js serve --model "$drafter" --port 8010 --streams 32 --context 2048 --gpu cuda > "$results/serve.log" 2>&1 & pid=$!
until node -e "fetch('http://127.0.0.1:8010/health').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"; do sleep 0.2; done
vocab=$(node -e "fetch('http://127.0.0.1:8010/info').then(r=>r.json()).then(i=>console.log(i.vocab_size))")
node .gpu-extra/batchConsistency.mjs --url http://127.0.0.1:8010 --streams 32 --context 512 --vocab-size "$vocab" \
  > "$results/consistency-lab-drafter-random-contexts.json"
node dist/cli/main.js validate --server http://127.0.0.1:8010 --data "$lab/reference/heldout.jsonl" \
  --report "$results/validate" 2>&1 | tail -8
kill -TERM $pid; wait $pid
