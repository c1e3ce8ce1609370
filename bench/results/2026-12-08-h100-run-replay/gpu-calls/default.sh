# call 6, on the same warm machine after launch.sh's job: `run` with no training flags (the preset's distillation
# budget then: 100 s, QAT 40 s), from a copy of run-l2's folder so that target, reference, corpus and replay are
# reused (their stamps match); distillation and everything after it run again.
eval "$(grep '^export PATH' /tmp/sd/job.sh)"
export PYTHONPATH=/tmp/site:$PWD/train PYTHONUNBUFFERED=1 SPECDRAFT="/tmp/gpu-node/bin/node $PWD/dist/cli/main.js"
rm -rf /tmp/sd/run-def && cp -a /tmp/sd/run-l2 /tmp/sd/run-def
# the copy's selfcheck verdict was removed first: a re-run of `selfcheck` over a finished verdict cleared the whole
# run folder (the stage's folder was the run's own; fixed since, see the README)
rm -f /tmp/sd/run-def/selfcheck.txt
python3 -m specdraft_train run --target /tmp/sd/inbox/SmolLM2-135M-Instruct.Q4_1.gguf --out /tmp/sd/run-def \
  --device cuda --eval-prompts data/chat-prompts-target.jsonl.xz > /tmp/sd/def.log 2>&1
