#!/usr/bin/env bash
# What replicas behind deploy/haproxy.cfg give, and what affinity buys, in one run (bench/serveBench.ts, the same
# walk for each): 1 replica straight and behind the proxy, then 2 replicas behind the proxy with conversation keys
# (each stream stays on one replica), without them (least-connections spreads a stream over both, so a request often
# lands on a replica whose KV cache lacks the stream's latest tokens) and with half the streams pinned to each replica
# (2 replicas without a proxy). Each replica set is started by deploy/replicas.sh.
#
#   bash bench/replicas.sh RESULTS
#
# Environment (defaults for the CPU: the committed default drafter, one llama.cpp thread per replica):
#   GPU=cpu|cuda  MODEL=models/specdraft-default.gguf  STREAMS=8  START_CONTEXT=512  STEPS=20  PORT=18000
#   SERVE_OPTIONS="--streams 8 --context 2048 --threads 1"   (on cuda: "--streams 32 --context 2048")
#   WIDE=1         also 2 replicas at 2 × STREAMS (each replica then holds as many streams as the single one did)
#   NO_PROXY=1     where there is no HAProxy: only the runs without it (1 replica direct, 2 replicas pinned)
#   BENCH="node --import tsx bench/serveBench.ts" (a GPU job: "node .gpu-rs/serveBench.mjs")
#   RUN_TIMEOUT=300 seconds one serveBench run may take before it is stopped (and counted as failed)
#   HAPROXY, SPECDRAFT: as deploy/replicas.sh takes them.
# Writes RESULTS/<run>.json (serveBench's output), RESULTS/{one,two}.log and run-{one,two}/ (deploy/replicas.sh's
# output, each replica's log, the proxy's), RESULTS/machine.txt and RESULTS/summary.md (one table: requests/s, ms per
# request, tokens evaluated per request). Run from the repository root.
set -uo pipefail
results=${1:?usage: bench/replicas.sh RESULTS}
mkdir -p "$results" && results=$(cd "$results" && pwd)
gpu=${GPU:-cpu}
model=${MODEL:-models/specdraft-default.gguf}
steps=${STEPS:-20}
start_context=${START_CONTEXT:-512}
port=${PORT:-18000}
if [ "$gpu" = cpu ]; then
  streams=${STREAMS:-8}; serve_options=${SERVE_OPTIONS:-"--streams 8 --context 2048 --threads 1"}
else
  streams=${STREAMS:-32}; serve_options=${SERVE_OPTIONS:-"--streams 32 --context 2048"}
fi
read -r -a bench <<< "${BENCH:-node --import tsx bench/serveBench.ts}"
# the replicas run the built CLI (npm run build; a GPU job carries dist)
export SPECDRAFT=${SPECDRAFT:-node $PWD/dist/cli/main.js}
[ -f dist/cli/main.js ] || { echo "bench/replicas.sh: dist/cli/main.js is missing: npm run build" >&2; exit 2; }
read -r -a serve_args <<< "--model $model --gpu $gpu $serve_options"
log() { echo "[$(date +%T)] $*" >&2; }
{ date -u +"%Y-%m-%d %H:%M UTC"; uname -srm; nproc; grep -m1 'model name' /proc/cpuinfo 2>/dev/null
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  "${HAPROXY:-haproxy}" -v 2>/dev/null | head -1; echo "serve $(printf '%s ' "${serve_args[@]}")"; } > "$results/machine.txt"

set_pid=""
start_set() { # replicas name → the set's proxy at :port, replica i at :port+i
  log "$2: starting $1 replica(s)"
  local no_proxy=(); [ "${NO_PROXY:-0}" = 1 ] && no_proxy=(--no-proxy)
  bash deploy/replicas.sh --replicas "$1" --port "$port" --stats-port $((port + 100)) --run-dir "$results/run-$2" \
    "${no_proxy[@]}" -- "${serve_args[@]}" > "$results/$2.log" 2>&1 &
  set_pid=$!
  until grep -qs "^replicas: ready" "$results/$2.log"; do
    kill -0 "$set_pid" 2>/dev/null || { log "$2: the replicas did not start: $(tail -3 "$results/$2.log")"; return 1; }
    sleep 0.2
  done
}
stop_set() { kill -TERM "$set_pid" 2>/dev/null; wait "$set_pid" 2>/dev/null; }
run() { # name streams seed url [serveBench options…]; a run with results already is not repeated (a job resumes)
  local name=$1 n=$2 seed=$3 url=$4; shift 4
  [ -s "$results/$name.json" ] && { log "$name: done already"; return 0; }
  if [ "${NO_PROXY:-0}" = 1 ] && [ "$url" = "$proxy" ]; then log "$name: skipped (no proxy)"; return 0; fi
  log "$name: $n streams × $start_context, $steps steps"
  timeout "${RUN_TIMEOUT:-300}" "${bench[@]}" --url "$url" --streams "$n" --start-context "$start_context" \
    --steps "$steps" --seed "$seed" --no-progress "$@" > "$results/$name.json" 2> "$results/$name.err" ||
    log "$name failed: $(tail -2 "$results/$name.err")"
}
replica() { echo "http://127.0.0.1:$((port + $1))"; }
proxy="http://127.0.0.1:$port"
done_already() { for name in "$@"; do [ -s "$results/$name.json" ] || return 1; done; }

if ! done_already one-direct one-proxy && start_set 1 one; then
  run one-direct "$streams" 1 "$(replica 1)"
  run one-proxy "$streams" 2 "$proxy" --metrics "$(replica 1)"
  stop_set
fi
wide=(); [ "${WIDE:-0}" = 1 ] && wide=(two-affinity-wide)
if ! done_already two-affinity two-no-affinity two-pinned-1 two-pinned-2 "${wide[@]}" && start_set 2 two; then
  both=(--metrics "$(replica 1)" --metrics "$(replica 2)")
  # a new seed each run: no run finds its contexts in a KV cache an earlier run left
  run two-affinity "$streams" 3 "$proxy" "${both[@]}"
  run two-no-affinity "$streams" 4 "$proxy" "${both[@]}" --no-conversation-key
  half=$(( (streams + 1) / 2 ))
  run two-pinned-1 "$half" 5 "$(replica 1)" &
  pinned=$!
  run two-pinned-2 $((streams - half)) 6 "$(replica 2)"
  wait "$pinned"
  [ "${WIDE:-0}" = 1 ] && run two-affinity-wide $((2 * streams)) 7 "$proxy" "${both[@]}"
  stop_set
fi

# pid files are stale now, and empty .err files say nothing
find "$results" -type f \( -name '*.pid' -o -empty \) -delete
python3 - "$results" <<'PY'
import json, pathlib, sys
results = pathlib.Path(sys.argv[1])
def load(name):
    try: return json.loads((results / f"{name}.json").read_text())
    except Exception: return None
rows = [("1 replica, direct", ["one-direct"]), ("1 replica, proxy", ["one-proxy"]),
        ("2 replicas, proxy, affinity", ["two-affinity"]), ("2 replicas, proxy, no affinity", ["two-no-affinity"]),
        ("2 replicas, streams pinned (no proxy)", ["two-pinned-1", "two-pinned-2"]),
        ("2 replicas, proxy, affinity, 2 × streams", ["two-affinity-wide"])]
lines = ["| setup | streams | requests/s | ms per request (mean / p50 / p95) | tokens evaluated per request | failures |",
         "|---|---|---|---|---|---|"]
for label, names in rows:
    runs = [load(n) for n in names]
    if any(r is None for r in runs): continue
    rps = sum(r["requests_per_s"] or 0 for r in runs)
    reqs = sum(r["requests"] for r in runs)
    mean = sum(r["latency_ms"]["mean"] * r["requests"] for r in runs) / max(1, reqs)
    p50 = "/".join(f'{r["latency_ms"]["p50"]:.1f}' for r in runs)
    p95 = "/".join(f'{r["latency_ms"]["p95"]:.1f}' for r in runs)
    ev = [r["tokens_evaluated_per_request"] for r in runs]
    ev_text = "/".join("—" if e is None else f"{e:.1f}" for e in ev)
    lines.append(f"| {label} | {sum(r['streams'] for r in runs)} | {rps:.1f} | {mean:.1f} / {p50} / {p95} | {ev_text} | "
                 f"{sum(r['failures'] for r in runs)} |")
(results / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY
