/**
 * `specdraft generate` with a real chat model as the target, on the CPU: SmolLM2-135M-Instruct (Q4_1, fetched once by
 * train/scripts/data/fetch_smollm2.sh into train/.cache/models) over 25 chat prompts of nine kinds
 * (test/fixtures/smollm2-chat-prompts.jsonl: questions, how-to, code, writing, rewriting, summarizing, math, system
 * prompts, multi-turn), rendered by its own chat template. The verdict holds: every speculative output equals the
 * target alone's, or parts from it only at a near tie that replaying both runs' decodes reproduces (named in the
 * test's diagnostics) — with prompt lookup on the second prompt of each kind, and with the target as its own
 * in-process drafter on the first (every step offers 16 tokens, so verification decodes 17 at a time). It needs the prompt decoded alone on both paths: decoded together
 * with the first drafts, its KV comes out otherwise on the CPU, and outputs part where a check blind to decode shapes
 * calls it no tie (docs/generate.md, "Lossless").
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { after, before, test } from "node:test";
import type { Llama } from "node-llama-cpp";
import { type RunGenerateOptions, runGenerate } from "../../src/generate/runGenerate.js";
import { judgeDifferences } from "../../src/generate/summarizeGeneration.js";
import type { GenerateSummary } from "../../src/generate/types.js";
import { type ChatPrompt, readChatPrompts, renderChatPrompt } from "../fixtures/makeSmollm2ChatPrompts.js";
import { assertLossless } from "../helpers/assertLossless.js";
import { cpuLlama } from "./testModels.js";

/** Enough tokens for outputs to part where the prompt's decode shape matters, few enough for CI's 2 cores. */
const maxTokens = 32;
/**
 * Both of CI's cores: the suite runs one file at a time, and a 135M model's decodes split well over two threads (the
 * tiny fixtures' one thread, testThreads, is for models whose decodes are too small to split). The verdict compares
 * runs of the same thread count.
 */
const threads = 2;

let llama: Llama;
let target: string;
let prompts: ChatPrompt[];
before(async () => {
    // the pinned GGUF, downloaded on the first run only
    target = execFileSync("bash", ["train/scripts/data/fetch_smollm2.sh"], { encoding: "utf8" }).trim();
    llama = await cpuLlama();
    prompts = await readChatPrompts();
});
after(async () => {
    await llama.dispose();
});

test("the fixture: ≥ 20 prompts of ≥ 8 kinds, each its messages in SmolLM2's chat template", async () => {
    assert.ok(prompts.length >= 20, `${prompts.length} prompts`);
    assert.ok(new Set(prompts.map((p) => p.category)).size >= 8);
    const model = await llama.loadModel({ modelPath: target, vocabOnly: true });
    try {
        for (const prompt of prompts) assert.deepEqual(prompt.prompt_tokens, renderChatPrompt(model, prompt.messages));
    } finally {
        await model.dispose();
    }
});

function generate(options: Pick<RunGenerateOptions, "draft">, chosen = prompts): Promise<GenerateSummary> {
    return runGenerate({
        target,
        prompts: chosen.map((p) => ({ id: p.id, category: p.category, tokens: p.prompt_tokens })),
        maxTokens,
        warmup: 0,
        gpu: "cpu",
        threads,
        llama,
        ...options,
    });
}

/** The command's exit 0: identical outputs, or differences only at near ties, each reported and bounded. */
function assertVerdict(t: { diagnostic(message: string): void }, summary: GenerateSummary, chosen = prompts): void {
    assert.equal(summary.prompts.length, chosen.length);
    const parted = assertLossless(summary);
    for (const warning of judgeDifferences(summary).warnings) t.diagnostic(warning);
    t.diagnostic(`${parted} of ${summary.prompts.length} outputs parted at near ties, τ ${summary.tau}`);
}

/** The n-th prompt of each kind (kinds with fewer are skipped). */
function nthOfEachKind(n: number): ChatPrompt[] {
    return prompts.filter((p, i) => prompts.slice(0, i).filter((q) => q.category === p.category).length === n);
}

test("the exact verifier with prompt lookup: lossless on a prompt of each kind", async (t) => {
    // the second of each kind: the own-drafter test below takes the first, so the two cover 18 prompts between them
    const secondOfEachKind = nthOfEachKind(1);
    assert.ok(secondOfEachKind.length >= 8);
    const summary = await generate({ draft: { kind: "ngram" } }, secondOfEachKind);
    assertVerdict(t, summary, secondOfEachKind);
    assert.ok(summary.speculative.drafted > 0, "chat answers repeat their prompts: lookup finds drafts");
});

test("the exact verifier with the target as its own in-process drafter: lossless, long drafts accepted", async (t) => {
    // one prompt of each kind: every step drafts 16 tokens with the 135M model itself, the suite's costliest generation
    const firstOfEachKind = nthOfEachKind(0);
    assert.ok(firstOfEachKind.length >= 8);
    const summary = await generate({ draft: { kind: "model", path: target } }, firstOfEachKind);
    assertVerdict(t, summary, firstOfEachKind);
    assert.ok(summary.tau > 4, `τ ${summary.tau}`);
});
