# wait for the job (at most $1 s) and show where it is; with "collect", pack what it wrote into $OUT (and with
# "gguf NAME", that variant's GGUF in 15 MiB parts)
set -uo pipefail
until=$(( $(date +%s) + ${1:-400} ))
while kill -0 "$(cat /tmp/sd/job.pid)" 2>/dev/null && [ "$(date +%s)" -lt "$until" ]; do sleep 5; done
echo "elapsed $(( $(date +%s) - $(cat /tmp/sd/start) )) s"
grep -E "^run: |done in|exit|^ablate: .*(τ|started|finished|failed)|Error|error|Traceback" /tmp/sd/job.log | tail -25; tail -2 /tmp/sd/job.log
if [ "${2:-}" = collect ]; then
  (cd /tmp/sd && find run study -maxdepth 4 \( -name '*.json' -o -name '*.md' -o -name '*.txt' -o -name '*.log' \) \
     -size -4M -not -path '*/resume/*' -not -name 'tokenizer*' -not -name 'vocab.json' > files.txt; echo job.log >> files.txt
   tar cJf "$OUT"/results.tar.xz -T files.txt)
  if [ -n "${3:-}" ] && [ -f "/tmp/sd/study/$3/drafter-q4_0.gguf" ]; then
    split -b 15M -d -a 1 "/tmp/sd/study/$3/drafter-q4_0.gguf" "$OUT/$3-q4_0.gguf.part-"
    sha256sum "/tmp/sd/study/$3/drafter-q4_0.gguf" > "$OUT/$3.sha256"
  fi
  ls -la "$OUT"
fi
