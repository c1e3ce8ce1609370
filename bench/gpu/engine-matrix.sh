#!/usr/bin/env bash
# Engine settings on the H200, one server start per configuration, same client and workloads (bench/serveBench.ts):
# which of the SPECDRAFT_* switches (docs/engine.md) should be the GPU defaults. Brings what serving.sh brings.
#   bash bench/gpu/engine-matrix.sh RESULTS_DIR [STEPS]
set -uo pipefail
results=${1:?results dir}; steps=${2:-10}
mkdir -p "$results"
source .gpu/unpack.sh
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD/train
node scripts/build-native.mjs --gpu cuda 2>&1 | tail -1
model=/tmp/qwen3-1.7b-random-q4_0.gguf
if [ ! -f "$model" ]; then
  xz -dc .gpu-extra/qwen3-tokenizer.json.xz > /tmp/qwen3-tokenizer.json
  python3 bench/models/make_random_drafter.py --tokenizer /tmp/qwen3-tokenizer.json --out "$model" 2>&1 | tail -1
fi
configs=(${CONFIGS:-"SPECDRAFT_MAX_STEPS_PER_RUN=1" "DEFAULT=1" "SPECDRAFT_PAD_BATCH=0.5" "SPECDRAFT_PAD_BATCH=0.5,SPECDRAFT_KV_TYPE=q8_0" "GGML_CUDA_DISABLE_GRAPHS=1"})
for cfg in "${configs[@]}"; do
  name=$(echo "$cfg" | tr ',=' '__')
  env ${cfg//,/ } node dist/cli/main.js serve --model "$model" --port 8000 --streams 32 --context 9216 --gpu cuda \
    > "$results/$name.serve.log" 2>&1 & pid=$!
  until node -e "fetch('http://127.0.0.1:8000/health').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"; do sleep 0.2; done
  node .gpu-extra/batchConsistency.mjs --url http://127.0.0.1:8000 --streams 32 --context 512 > "$results/$name.consistency.json"
  for run in "32 512" "32 2048" "32 8192" "1 512"; do
    set -- $run
    node .gpu-extra/serveBench.mjs --url http://127.0.0.1:8000 --streams $1 --start-context $2 --steps "$steps" \
      --no-progress > "$results/$name.s$1-c$2.json" 2>/dev/null
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], 's$1 c$2', d['requests_per_s'], 'req/s p50', d['latency_ms']['p50'], 'step_ms', d.get('step_ms'), 'batch', d.get('decode_batch_mean'))" "$results/$name.s$1-c$2.json" "$cfg"
  done
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[2], 'differing', d['differing'], 'of', d['requests'])" "$results/$name.consistency.json" "$cfg"
  kill -TERM $pid; wait $pid
done
