#!/usr/bin/env bash
# N `specdraft serve` replicas on one host behind HAProxy with deploy/haproxy.cfg, in the foreground (for a bench, a
# GPU job or a trial; a host's services are docs/deploy.md's systemd recipe): starts the replicas, each on its own port
# and, with --gpus, on its own GPU; waits until each answers GET /health 200; writes the topology file; runs HAProxy in
# master-worker mode. SIGTERM or Ctrl-C stops the proxy, then drains and stops every replica.
#
#   deploy/replicas.sh [--replicas N] [--port P] [--stats-port S] [--host H] [--gpus "0 1 …"]
#                      [--device-env NAME] [--run-dir DIR] [--no-proxy] [-- serve options…]
#
#   --replicas N      replicas (1–8; deploy/haproxy.cfg names 8). Defaults to 2.
#   --port P          the proxy listens at H:P, replica i at H:P+i. Defaults to 8000.
#   --stats-port S    HAProxy's Prometheus metrics (/metrics) and stats page (/stats). Defaults to 8404.
#   --host H          address of the proxy and the replicas. Defaults to 127.0.0.1.
#   --gpus "…"        replica i sees only GPU gpus[(i-1) mod count] (two replicas on GPU 0: --gpus "0 0"). Without
#                     it every replica sees every GPU, and llama.cpp splits each model over all of them by layer.
#   --device-env NAME the variable that hides the other GPUs: CUDA_VISIBLE_DEVICES (CUDA, the default) or
#                     GGML_VK_VISIBLE_DEVICES (ggml's Vulkan backend, which emulates CUDA's).
#   --run-dir DIR     topology.cfg, haproxy.log, replica-N.log and pids. Defaults to a new folder under $TMPDIR.
#   --no-proxy        the replicas alone (clients pinned to them), e.g. where there is no HAProxy.
#   after --           passed to every `specdraft serve` (e.g. --model drafter.gguf --streams 32 --gpu cuda).
#
# Environment: SPECDRAFT, the command that runs specdraft (default: `specdraft` on PATH, else this checkout's
# dist/cli/main.js under node); HAPROXY, the haproxy binary (default: `haproxy` on PATH, else /usr/sbin/haproxy).
# Prints `replicas: ready at http://H:P (N replicas)` on stdout once the proxy answers, then waits.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
replicas=2 port=8000 stats_port=8404 host=127.0.0.1 gpus="" device_env=CUDA_VISIBLE_DEVICES run_dir="" proxy=1
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }
die() { echo "replicas.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --replicas) replicas=${2:?--replicas needs a number}; shift 2 ;;
    --port) port=${2:?--port needs a number}; shift 2 ;;
    --stats-port) stats_port=${2:?--stats-port needs a number}; shift 2 ;;
    --host) host=${2:?--host needs an address}; shift 2 ;;
    --gpus) gpus=${2?--gpus needs a list}; shift 2 ;;
    --device-env) device_env=${2:?--device-env needs a variable name}; shift 2 ;;
    --run-dir) run_dir=${2:?--run-dir needs a folder}; shift 2 ;;
    --no-proxy) proxy=0; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ "$replicas" =~ ^[1-8]$ ]] || die "--replicas $replicas: expected 1 to 8 (deploy/haproxy.cfg names 8 replicas)"
[[ "$port" =~ ^[0-9]+$ ]] && [ "$port" -ge 1 ] && [ $((port + replicas)) -le 65535 ] ||
  die "--port $port: expected 1 to $((65535 - replicas))"
[[ "$stats_port" =~ ^[0-9]+$ ]] || die "--stats-port $stats_port: expected a port number"
case "$device_env" in
  CUDA_VISIBLE_DEVICES|GGML_VK_VISIBLE_DEVICES) ;;
  *) die "--device-env $device_env: expected CUDA_VISIBLE_DEVICES or GGML_VK_VISIBLE_DEVICES" ;;
esac
read -r -a gpu_list <<< "$gpus"
if [ -n "${SPECDRAFT:-}" ]; then read -r -a specdraft <<< "$SPECDRAFT"
elif command -v specdraft >/dev/null 2>&1; then specdraft=(specdraft)
else specdraft=(node "$here/../dist/cli/main.js"); fi
# Debian's package puts it in /usr/sbin, which a user's PATH may lack
haproxy=${HAPROXY:-$(command -v haproxy || echo /usr/sbin/haproxy)}
[ "$proxy" = 0 ] || command -v "$haproxy" >/dev/null 2>&1 ||
  die "no haproxy (install Debian's: apt-get install haproxy, or set HAPROXY)"
[ -n "$run_dir" ] || run_dir=$(mktemp -d "${TMPDIR:-/tmp}/specdraft-replicas-XXXXXX")
mkdir -p "$run_dir"

pids=() proxy_pid=""
stop_all() {
  trap - EXIT INT TERM
  [ -n "$proxy_pid" ] && kill -TERM "$proxy_pid" 2>/dev/null && wait "$proxy_pid" 2>/dev/null
  # SIGTERM drains: a replica answers what it has in flight, then exits 0
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_all EXIT
trap 'exit 0' INT TERM

health() { # url → the HTTP status of GET url/health, or 000
  curl -s -o /dev/null -m 2 -w '%{http_code}' "$1/health" 2>/dev/null || echo 000
}
if ! command -v curl >/dev/null 2>&1; then
  # the GPU machine has python3 but maybe no curl
  health() { python3 -c 'import sys, urllib.request, urllib.error
try: print(urllib.request.urlopen(sys.argv[1] + "/health", timeout=2).status)
except urllib.error.HTTPError as e: print(e.code)
except Exception: print("000")' "$1"; }
fi

for i in $(seq 1 "$replicas"); do
  env_prefix=()
  if [ ${#gpu_list[@]} -gt 0 ]; then env_prefix=(env "$device_env=${gpu_list[$(((i - 1) % ${#gpu_list[@]}))]}"); fi
  "${env_prefix[@]}" "${specdraft[@]}" serve --host "$host" --port $((port + i)) "$@" > "$run_dir/replica-$i.log" 2>&1 &
  pids+=($!)
  echo $! > "$run_dir/replica-$i.pid"
done
# the replicas load side by side; the proxy starts once all of them draft (a loading one would only be retried around)
for i in $(seq 1 "$replicas"); do
  until [ "$(health "http://$host:$((port + i))")" = 200 ]; do
    if ! kill -0 "${pids[$((i - 1))]}" 2>/dev/null; then
      tail -5 "$run_dir/replica-$i.log" >&2
      die "replica $i exited before /health answered 200"
    fi
    sleep 0.2
  done
done

if [ "$proxy" = 0 ]; then
  echo "replicas: ready at http://$host:$((port + 1)) … http://$host:$((port + replicas)) (no proxy, run dir $run_dir)"
  wait -n "${pids[@]}"
  exit 1
fi

# the topology: unset every replica first, so that a reload after removing one forgets it
{
  echo "global"
  echo "    unsetenv$(for i in $(seq 1 8); do printf ' SPECDRAFT_REPLICA_%d' "$i"; done)"
  echo "    setenv SPECDRAFT_PROXY_BIND $host:$port"
  echo "    setenv SPECDRAFT_PROXY_STATS_BIND $host:$stats_port"
  for i in $(seq 1 "$replicas"); do echo "    setenv SPECDRAFT_REPLICA_$i $host:$((port + i))"; done
} > "$run_dir/topology.cfg"
"$haproxy" -W -f "$run_dir/topology.cfg" -f "$here/haproxy.cfg" > "$run_dir/haproxy.log" 2>&1 &
proxy_pid=$!
echo "$proxy_pid" > "$run_dir/haproxy.pid"
until [ "$(health "http://$host:$port")" = 200 ]; do
  kill -0 "$proxy_pid" 2>/dev/null || { tail -5 "$run_dir/haproxy.log" >&2; die "haproxy exited"; }
  sleep 0.1
done
echo "replicas: ready at http://$host:$port ($replicas replicas, metrics http://$host:$stats_port/metrics, run dir $run_dir)"
wait "$proxy_pid"
