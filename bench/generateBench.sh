#!/usr/bin/env bash
# Speculative generation vs the target alone, for every draft source and each verifier, in one go:
#
#   bash bench/generateBench.sh TARGET.gguf DRAFTER.gguf DATA.jsonl OUT_DIR [extra `specdraft generate` flags...]
#
# Starts `specdraft serve --model DRAFTER` on a free loopback port for the HTTP source, then runs each verifier with
# --drafter (that server), --draft-model DRAFTER and --draft ngram: `exact` is `specdraft generate`, `node-llama-cpp`
# and `exact-node-llama-cpp` are bench/libraryVerifiers.ts (same flags); writes OUT_DIR/<source>-<verifier>.json and
# the tables to OUT_DIR/tables.txt. Extra flags (e.g. --max-tokens 128 --draft-len 8 --runs 3 --gpu cpu --threads 1)
# go to every run. VERIFIERS="exact" runs one verifier only (default: "node-llama-cpp exact").
set -euo pipefail
if [ $# -lt 4 ]; then sed -n 2,10p "$0"; exit 2; fi
target=$1; drafter=$2; data=$3; out=$4; shift 4
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -f "$root/dist/cli/main.js" ] && [ -z "${SPECDRAFT_FROM_SOURCE:-}" ]; then cli=(node "$root/dist/cli/main.js"); else cli=(node --import tsx "$root/src/cli/main.ts"); fi
gpu=auto
for ((i = 1; i <= $#; i++)); do if [ "${!i}" = --gpu ]; then j=$((i + 1)); gpu=${!j}; fi; done
mkdir -p "$out"
port=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')

"${cli[@]}" serve --model "$drafter" --port "$port" --streams 1 --gpu "$gpu" >"$out/serve.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
    # node rather than curl: the GPU machine has node (staged) but may lack curl
    if node -e 'fetch(process.argv[1]).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))' "http://127.0.0.1:$port/health"; then break; fi
    kill -0 "$server" 2>/dev/null || { cat "$out/serve.log"; exit 1; }
    sleep 0.2
done

: >"$out/tables.txt"
for verifier in ${VERIFIERS:-node-llama-cpp exact}; do
    if [ "$verifier" = exact ]; then generate=("${cli[@]}" generate)
    else generate=(node --import tsx "$root/bench/libraryVerifiers.ts" --verifier "$verifier"); fi
    for source in http model ngram; do
        case $source in
            http) draft=(--drafter "http://127.0.0.1:$port") ;;
            model) draft=(--draft-model "$drafter") ;;
            ngram) draft=(--draft ngram) ;;
        esac
        echo "== $source, $verifier verifier" | tee -a "$out/tables.txt"
        # exit 1 = an output mismatch (named in the table and the JSON): record it and go on to the next source
        rc=0
        "${generate[@]}" --target "$target" "${draft[@]}" --data "$data" \
            --out "$out/$source-$verifier.json" --no-progress "$@" | tee -a "$out/tables.txt" || rc=$?
        if [ "$rc" -ne 0 ] && [ "$rc" -ne 1 ]; then exit "$rc"; fi
    done
done
