import fs from "node:fs";
import { runGenerate } from "../../../src/generate/runGenerate.js";
import { judgeDifferences, describeMismatch } from "../../../src/generate/summarizeGeneration.js";
const target = process.env.TARGET ?? "train/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const prompts = fs.readFileSync("test/fixtures/smollm2-chat-prompts.jsonl", "utf8").trim().split("\n").map((l) => { const j = JSON.parse(l); return { id: j.id, category: j.category, tokens: j.prompt_tokens }; });
const maxTokens = Number(process.argv[2] ?? 64);
const combos = (process.argv[3] ?? "exact:ngram,exact:model,exact-node-llama-cpp:ngram,exact-node-llama-cpp:model,node-llama-cpp:ngram").split(",");
const draftLength = Number(process.argv[4] ?? 16);
for (const combo of combos) {
  const [verifier, kind] = combo.split(":");
  const started = performance.now();
  const summary = await runGenerate({ target, prompts, maxTokens, draftLength, gpu: "cpu", threads: 1, verifier: verifier as any,
    draft: kind === "model" ? { kind: "model", path: target } : { kind: "ngram" }, warmup: 0 });
  const differing = summary.prompts.filter((p) => !p.identical);
  console.log(`${verifier} ${kind} max ${maxTokens} k ${draftLength}: ${differing.length}/${prompts.length} differ, nearTies ${summary.nearTies}, tau ${summary.tau.toFixed(2)}, ${((performance.now()-started)/1000).toFixed(1)} s`);
  for (const p of differing) console.log("   ", describeMismatch(p));
  const j = judgeDifferences(summary); if (j.failure) console.log("   FAIL:", j.failure);
}
