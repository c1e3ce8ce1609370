/**
 * Prompt-lookup candidates in the draft loop (`lookahead`), on the CPU with the tiny fixture: they save steps, leave
 * drafts as they are (up to near ties of the drafter's own logits: a step with candidates decodes two or more tokens of
 * a sequence where a plain step decodes one, ../helpers/nearTies.ts), keep one step shape with fillers, share a step's token budget, come only from the request's own
 * tokens, and respect end_id and the context's end. (Every draft of the other engine tests is also drafted with
 * candidates and compared: helpers/differentialEngine.ts.)
 */

import assert from "node:assert/strict";
import { test } from "node:test";
import { defaultLookahead, maxLookahead } from "../../src/engine/engineDefaults.js";
import { type LoadEngineOptions, loadEngine } from "../../src/engine/loadEngine.js";
import type { DraftEngine, StepStats } from "../../src/engine/types.js";
import { assertDraftsAgree, type DraftPair } from "../helpers/nearTies.js";
import { randomPrompts, testGpu, tinyEngineOptions, tinyModel } from "./helpers/engineFixtures.js";

async function openEngine(
    t: { after(fn: () => Promise<void>): void },
    options: Partial<LoadEngineOptions>,
): Promise<{ engine: DraftEngine; steps: StepStats[] }> {
    const steps: StepStats[] = [];
    const engine = await loadEngine({
        ...tinyEngineOptions,
        observer: {
            onStep: (step) => steps.push(step),
        },
        ...options,
    });
    t.after(() => engine.close());
    return { engine, steps };
}

const sum = (steps: readonly StepStats[], key: "drafted" | "candidates" | "fillers" | "accepted" | "tokens") =>
    steps.reduce((total, step) => total + step[key], 0);

test("candidates the drafter agrees with are kept: the same drafts in fewer steps", async (t) => {
    const plain = await openEngine(t, { lookahead: 0 });
    const looking = await openEngine(t, { lookahead: 4, lookaheadStepTokens: 5, lookaheadFill: false });
    const n = 48;
    const pairs: DraftPair[] = [];
    for (const prompt of randomPrompts(6, 4000, 83)) {
        const expected = await plain.engine.draft(prompt, n);
        const before = looking.steps.length;
        pairs.push({ context: prompt, expected, actual: await looking.engine.draft(prompt, n) });
        const steps = looking.steps.slice(before);
        // a step gives its own token plus every kept candidate
        assert.equal(sum(steps, "drafted"), n);
        assert.equal(steps.length, n - sum(steps, "accepted"));
    }
    await assertDraftsAgree(tinyModel, pairs, "with candidates", testGpu);
    assert.equal(plain.steps.length, 6 * n, "one step a token without candidates");
    assert.equal(sum(plain.steps, "candidates"), 0);
    const accepted = sum(looking.steps, "accepted");
    assert.ok(accepted > 0.05 * 6 * n, `${accepted} of ${6 * n} tokens came from kept candidates`);
    assert.ok(accepted <= sum(looking.steps, "candidates"));
    // without fillers every decoded candidate is a lookup guess, and each of at most 4 (less near the draft's end)
    assert.equal(sum(looking.steps, "fillers"), 0);
    for (const step of looking.steps) assert.ok(step.candidates <= 4 && step.tokens >= 1 + step.candidates);
});

test("with fillers every step of a lone request carries 1 + M tokens, so llama.cpp keeps reusing its graph", async (t) => {
    const plain = await openEngine(t, { lookahead: 0 });
    const filled = await openEngine(t, { lookahead: 3, lookaheadStepTokens: 4, lookaheadFill: true });
    const pairs: DraftPair[] = [];
    for (const prompt of randomPrompts(4, 4000, 89)) {
        const before = filled.steps.length;
        const actual = await filled.engine.draft(prompt, 40);
        pairs.push({ context: prompt, expected: await plain.engine.draft(prompt, 40), actual });
        const [first, ...drafting] = filled.steps.slice(before);
        // the first step is the prompt's prefill with the candidates after its last token
        assert.equal(first?.tokens, prompt.length + 3);
        for (const step of drafting) assert.equal(step.tokens, 4);
        assert.ok(drafting.filter((step) => step.graphReused).length >= drafting.length - 2);
    }
    await assertDraftsAgree(tinyModel, pairs, "with fillers", testGpu);
    assert.ok(sum(filled.steps, "fillers") > 0, "the lookup had no guess somewhere, and fillers kept the shape");
});

test("a step's token budget is shared: a lone request gets M candidates, 32 at once fewer or none", async (t) => {
    const prompts = randomPrompts(32, 4000, 97);
    const [first] = prompts;
    assert.ok(first);
    for (const [stepTokens, perSequence] of [
        [64, 1],
        [32, 0],
    ] as const) {
        const { engine, steps } = await openEngine(t, {
            streams: 32,
            lookahead: 4,
            lookaheadStepTokens: stepTokens,
            lookaheadFill: true,
        });
        await Promise.all(prompts.map((prompt) => engine.draft(prompt, 6)));
        const full = steps.filter((step) => step.sequences === 32 && step.tokens < 32 * 4);
        assert.ok(full.length >= 3, JSON.stringify(steps.map((s) => [s.sequences, s.tokens])));
        for (const step of full) assert.equal(step.tokens, 32 * (1 + perSequence), `budget ${stepTokens}`);
        steps.length = 0;
        await engine.draft(first, 6);
        for (const step of steps.slice(1)) assert.equal(step.tokens, 1 + Math.min(4, stepTokens - 1));
    }
});

test("candidates come from the request's own tokens only, never from what a slot held before", async (t) => {
    const { engine, steps } = await openEngine(t, { lookahead: 4, lookaheadStepTokens: 5, lookaheadFill: false });
    const firstStep = async (tokens: number[]): Promise<StepStats | undefined> => {
        const before = steps.length;
        await engine.draft(tokens, 4);
        return steps[before];
    };
    const earlier = Array.from({ length: 40 }, (_, i) => 100 + i);
    await engine.draft(earlier, 4);
    // another conversation on the same slot (no shared prefix) whose last token only the earlier one held
    const other = [...Array.from({ length: 30 }, (_, i) => 2000 + i), 120];
    assert.equal((await firstStep(other))?.candidates, 0, "a guess came from the earlier conversation's tokens");
    // the same last token earlier in the request itself: a guess
    const repeating = [3000, 120, 3001, 3002, ...Array.from({ length: 30 }, (_, i) => 2500 + i), 120];
    assert.equal((await firstStep(repeating))?.candidates, 3, "what followed 120 in the request, up to n − 1");
});

test("end_id ends the draft right after it even where later candidates were kept; a draft may reach the context's end", async (t) => {
    const plain = await openEngine(t, { lookahead: 0, contextSize: 128 });
    const looking = await openEngine(t, {
        lookahead: 6,
        lookaheadStepTokens: 7,
        lookaheadFill: true,
        contextSize: 128,
    });
    const pairs: DraftPair[] = [];
    for (const prompt of randomPrompts(4, 4000, 101)) {
        const full = await plain.engine.draft(prompt, 40);
        const endId = full[25];
        assert.ok(endId !== undefined, `a draft of ${full.length}, not 40`);
        const stop = full.indexOf(endId);
        const ended = await looking.engine.draft(prompt, 40, { endId });
        pairs.push({ context: prompt, expected: full.slice(0, stop + 1), actual: ended });
        // to the last position of the context: prompt + n − 1 tokens in the cache
        const n = 128 - prompt.length;
        const toTheEnd = await looking.engine.draft(prompt, n);
        pairs.push({ context: prompt, expected: await plain.engine.draft(prompt, n), actual: toTheEnd });
    }
    await assertDraftsAgree(tinyModel, pairs, "with end_id and to the context's end", testGpu);
    assert.ok(sum(looking.steps, "accepted") > 0);
});

test("the defaults are the backend's, and bad values are refused naming the option", async (t) => {
    const { engine } = await openEngine(t, {});
    assert.deepEqual(engine.info.lookahead, defaultLookahead[testGpu === "cpu" ? "cpu" : "gpu"]);
    const common = { ...tinyEngineOptions, contextSize: 64 };
    await assert.rejects(loadEngine({ ...common, lookahead: maxLookahead + 1 }), /lookahead must be an integer 0–32/);
    await assert.rejects(loadEngine({ ...common, lookahead: 1.5 }), /lookahead must be an integer 0–32, got 1.5/);
    await assert.rejects(
        loadEngine({ ...common, lookaheadStepTokens: 0 }),
        /lookaheadStepTokens must be an integer ≥ 1/,
    );
});
