/**
 * Candidates on real text: the trained default drafter (models/specdraft-default.gguf) drafting 16 tokens from seeded
 * random points of the lab's held-out walks (data/lab-heldout.jsonl), plain one request at a time, and with candidates
 * alone and 24 at once.
 *
 * What can and cannot be identical on the CPU (docs/engine.md, "Candidates and the CPU's kernels"): llama.cpp computes
 * the attention's K·Q product of a decode with two or more tokens of a sequence with llamafile's tinyBLAS and of a
 * one-token decode with ggml_vec_dot_f16, which sum in another order; the attention scores of the two paths then
 * differ in the last bits, and now and then the logits by up to ~0.15 after an activation's Q8_0 rounding flips
 * (bench/decodeSplits.sh). Decodes of two or more tokens a sequence agree bit for bit whatever their split. So:
 * - drafts with fillers (every decode two or more tokens a sequence) were identical whatever M and the batch on the
 *   machines measured; batched, they are held to the rule below, since a batch of 24 is another decode shape;
 * - drafts with candidates equal the plain one-token drafts except where the two tokens were a near tie: at the first
 *   difference, the plain path's logit gap between them is within twice the two paths' largest logit difference
 *   there (NativeTarget.logitGap), or below `tieGap`: of the 67 differences bench/lookaheadSteps.ts --classify found
 *   over 6,733 held-out drafts (2026-12-01), every gap was ≤ 0.037, and the 8 outside the first rule sat where
 *   logitGap's two paths agree exactly but the walk's cache history had split the context otherwise (the plain engine
 *   re-drafting the same contexts parted there too). A real error (a kept candidate the drafter did not choose, a wrong
 *   cache) would part them with a wide gap.
 */

import assert from "node:assert/strict";
import { test } from "node:test";
import { seededRandom } from "../../bench/lib/seededRandom.js";
import { defaultLookahead } from "../../src/engine/engineDefaults.js";
import { type LoadEngineOptions, loadEngine } from "../../src/engine/loadEngine.js";
import type { DraftEngine } from "../../src/engine/types.js";
import { readHeldOutFile } from "../../src/validate/readHeldOutFile.js";
import { assertDraftsAgree, draftPairs } from "../helpers/nearTies.js";
import { everyStepLookahead } from "./helpers/differentialEngine.js";
import { testGpu, testThreads } from "./helpers/engineFixtures.js";

const drafter = "models/specdraft-default.gguf";
const n = 16;
const points = 24;

async function open(t: { after(fn: () => Promise<void>): void }, options: Partial<LoadEngineOptions>) {
    const engine = await loadEngine({
        modelPath: drafter,
        streams: 1,
        contextSize: 1024,
        gpu: testGpu,
        threads: testThreads,
        ...options,
    });
    t.after(() => engine.close());
    return engine;
}

const alone = async (engine: DraftEngine, contexts: number[][]) => {
    const drafts: number[][] = [];
    for (const context of contexts) drafts.push(await engine.draft(context, n));
    return drafts;
};

test("drafts with candidates on held-out text: identical with fillers whatever M and batch; otherwise the plain ones but at near ties", async (t) => {
    const { conversations } = await readHeldOutFile("data/lab-heldout.jsonl");
    const random = seededRandom(24);
    const contexts = Array.from({ length: points }, () => {
        const c = conversations[random(conversations.length)];
        assert.ok(c);
        return [...c.promptTokens, ...c.continuationTokens.slice(0, random(c.continuationTokens.length))];
    });
    const plain = await alone(await open(t, { lookahead: 0 }), contexts);
    const cpuDefault = await alone(
        await open(t, {
            lookahead: defaultLookahead.cpu.candidates,
            lookaheadStepTokens: defaultLookahead.cpu.stepTokens,
            lookaheadFill: false,
        }),
        contexts,
    );
    const filledAlone = await alone(
        await open(t, { lookahead: 2, lookaheadStepTokens: 3, lookaheadFill: true }),
        contexts,
    );
    const batch = await open(t, {
        streams: points,
        lookahead: everyStepLookahead.candidates,
        lookaheadStepTokens: everyStepLookahead.stepTokens,
        lookaheadFill: true,
    });
    const filledBatched = await Promise.all(contexts.map((context) => batch.draft(context, n)));
    // every decode two or more tokens a sequence on both sides, but 24 sequences against one
    await assertDraftsAgree(
        drafter,
        draftPairs(contexts, filledAlone, filledBatched),
        "with fillers, batched",
        testGpu,
    );

    // one decode of two or more tokens a sequence against one token a decode: the plain drafts up to near ties
    for (const [what, drafts] of [
        ["the CPU's default candidates", cpuDefault],
        ["candidates with fillers", filledAlone],
    ] as const)
        await assertDraftsAgree(drafter, draftPairs(contexts, plain, drafts), what, testGpu);
});
