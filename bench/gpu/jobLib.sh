# What the GPU jobs that time random-weight GGUFs share (bench/gpu/real-shape.sh, lookahead.sh), sourced after they set
# `results` (the results folder, made absolute here), `cpu` (1: a CPU dry run with tiny shapes, --gpu cpu) and
# `models` (where the GGUFs are made): the log, the GPU machine's set-up (bench/gpu/setup.sh), the bench scripts (`js`), `specdraft serve` started and stopped, and GGUFs made in the background.
mkdir -p "$results" "$models"
results=$(cd "$results" && pwd)
started=$(date +%s)
log() { echo "[$(date +%T) +$(( $(date +%s) - started ))s] $*" | tee -a "$results/progress.log"; }
fail() { log "FAILED: $*"; echo "$*" >> "$results/failures.log"; }
elapsed() { echo $(( $(date +%s) - started )); }

if [ "$cpu" = 1 ]; then
  gpu=cpu; threads=(--threads 1)
  python=${PYTHON:-train/.venv/bin/python}; export PYTHONPATH=$PWD/train
else
  gpu=cuda; threads=()
  source bench/gpu/setup.sh
  log "node, node_modules and the gguf package"
  gpu_tools
  python=python3
  log "native engine, CUDA variant"
  gpu_engine "$results/gpu.txt" | tee -a "$results/progress.log"
fi
{ df -h "$models" | tail -1; free -g | sed -n 2p; } 2>/dev/null | tee -a "$results/progress.log"
# js SECONDS NAME ARGS: a bench script, killed after SECONDS; the bundles bench/gpu/stage.sh makes in .gpu-rs (the GPU
# machine has no tsx), else from source
js() {
  local limit=$1 name=$2; shift 2
  if [ -f ".gpu-rs/$name.mjs" ]; then timeout "$limit" node ".gpu-rs/$name.mjs" "$@"
  else timeout "$limit" node --import tsx "bench/$name.ts" "$@"; fi
}
cli=(node dist/cli/main.js)
[ -f dist/cli/main.js ] || { fail "dist/cli/main.js missing: run npm run build and carry dist"; exit 1; }

# a synthetic vocabulary of Qwen3's size (make_random_gguf.py), so no tokenizer file travels
make_model() { # shape type out seed
  [ -f "$3" ] && return 0
  "$python" bench/models/make_random_gguf.py --shape "$1" --type "$2" --out "$3" --seed "$4" \
    >> "$results/models.log" 2>&1 && log "$(tail -1 "$results/models.log")"
}
models_pid=""
wait_file() { # file: waits until the background maker (models_pid) wrote it, or gave up
  while [ ! -f "$1" ] && [ -n "$models_pid" ] && kill -0 "$models_pid" 2>/dev/null; do sleep 1; done
  [ -f "$1" ] || { fail "$1 was not made (models.log: $(tail -2 "$results/models.log" 2>/dev/null | tr '\n' ' '))"; return 1; }
}

free_port() { node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'; }
server_pid=""
start_server() { # model streams log [serve options...] → sets url
  local model=$1 streams=$2 out=$3 port; shift 3
  port=$(free_port)
  "${cli[@]}" serve --model "$model" --port "$port" --streams "$streams" --context 4096 --gpu "$gpu" "${threads[@]}" "$@" > "$out" 2>&1 &
  server_pid=$!
  url=http://127.0.0.1:$port
  for _ in $(seq 1 600); do
    node -e 'fetch(process.argv[1]).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))' "$url/health" && return 0
    kill -0 "$server_pid" 2>/dev/null || { fail "serve $model exited: $(tail -3 "$out" | tr '\n' ' ')"; return 1; }
    sleep 0.2
  done
  fail "serve $model: no /health in 120 s"; return 1
}
stop_server() { [ -n "$server_pid" ] && kill -TERM "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null; server_pid=""; }
trap 'stop_server; [ -n "$models_pid" ] && kill "$models_pid" 2>/dev/null' EXIT
