/**
 * Step-wise short prefills (`stepPrefill`) and the decode-time split (submit + wait) on the CPU with the tiny fixture:
 * feeding a request's few new tokens one per step keeps every step one token per sequence, and drafts stay what they are
 * without it, alone and in a batch of 32, up to near ties of the model's own logits (../helpers/nearTies.ts: the
 * prompt is decoded in other shapes).
 */

import assert from "node:assert/strict";
import { test } from "node:test";
import { defaultLookahead } from "../../src/engine/engineDefaults.js";
import type { LoadEngineOptions } from "../../src/engine/loadEngine.js";
import type { DraftEngine, StepStats } from "../../src/engine/types.js";
import { assertDraftsAgree, draftPairs } from "../helpers/nearTies.js";
import { draftConversationsAlone, roundPairs } from "./helpers/conversations.js";
import { loadDifferentialEngine } from "./helpers/differentialEngine.js";
import { randomPrompts, testGpu, tinyEngineOptions, tinyModel } from "./helpers/engineFixtures.js";

async function openEngine(
    t: { after(fn: () => Promise<void>): void },
    options: Partial<LoadEngineOptions>,
): Promise<{ engine: DraftEngine; steps: StepStats[] }> {
    const steps: StepStats[] = [];
    // every draft also drafted with the CPU's default candidates, and compared (helpers/differentialEngine.ts)
    const engine = await loadDifferentialEngine(
        {
            ...tinyEngineOptions,
            observer: {
                onStep: (step) => steps.push(step),
            },
            ...options,
        },
        defaultLookahead.cpu,
    );
    t.after(() => engine.close());
    return { engine, steps };
}

test("step-wise prefill drafts the same as prefill in one step, alone and among 32, and keeps steps one token each", async (t) => {
    const prompts = randomPrompts(32, 4000, 23);
    const n = 8;
    const rounds = 4;
    const plain = await openEngine(t, { stepPrefill: 0 });
    const reference = await draftConversationsAlone(plain.engine, prompts, rounds, n, 9);

    const stepwise = await openEngine(t, { stepPrefill: 2 });
    const stepwiseAlone = await draftConversationsAlone(stepwise.engine, prompts, rounds, n, 9);
    // step-wise prefill decodes a prompt in other shapes: the same drafts up to near ties
    const pairs = roundPairs(reference, stepwiseAlone);
    assert.ok(pairs.length >= 0.75 * prompts.length * rounds, `${pairs.length} drafts compared`);
    await assertDraftsAgree(tinyModel, pairs, "step-wise prefill alone", testGpu);

    // the whole prompt fed step-wise too (every arrival): still the same drafts
    const everything = await openEngine(t, { stepPrefill: 1000 });
    const everyArrival = await draftConversationsAlone(everything.engine, prompts, 2, n, 9);
    await assertDraftsAgree(
        tinyModel,
        roundPairs(reference.slice(0, 2), everyArrival),
        "every prompt step-wise",
        testGpu,
    );
    for (const step of everything.steps)
        assert.equal(step.tokens, step.sequences, "a step took several tokens of one sequence");

    // a batch of 32 conversations, rounds after the first bring 1–2 new tokens each: every step one token per sequence
    const batched = await openEngine(t, { streams: 32, stepPrefill: 2 });
    for (const [r, round] of reference.entries()) {
        const start = batched.steps.length;
        const drafts = await Promise.all(round.requests.map((request) => batched.engine.draft(request, n)));
        const pairs = draftPairs(round.requests, round.drafts, drafts);
        await assertDraftsAgree(tinyModel, pairs, `round ${r}, batched step-wise`, testGpu);
        if (r > 0) {
            const steps = batched.steps.slice(start);
            for (const step of steps) assert.equal(step.tokens, step.sequences, `round ${r}: a multi-token step`);
            // a request of 2 new tokens takes one more step than its draft
            assert.ok(steps.length >= n && steps.length <= n + 1, `round ${r}: ${steps.length} steps`);
        }
    }
});

test("each step's decode time splits into the llama_decode call and the wait after it", async (t) => {
    const { engine, steps } = await openEngine(t, { streams: 4 });
    await Promise.all(randomPrompts(4, 4000, 29).map((prompt) => engine.draft(prompt, 6)));
    assert.ok(steps.length >= 6);
    for (const step of steps) {
        assert.ok(step.submitMs > 0 && step.waitMs >= 0, JSON.stringify(step));
        // the two are measured between the same three clock readings as the decode time
        assert.ok(Math.abs(step.submitMs + step.waitMs - step.decodeMs) < 1e-6, JSON.stringify(step));
    }
});
