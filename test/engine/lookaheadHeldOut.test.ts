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
 * - drafts with fillers (every decode two or more tokens a sequence) are identical whatever M and the batch;
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
import { NativeTarget } from "../../src/generate/NativeTarget.js";
import { readHeldOutFile } from "../../src/validate/readHeldOutFile.js";
import { everyStepLookahead } from "./helpers/differentialEngine.js";
import { testGpu, testThreads } from "./helpers/engineFixtures.js";

const drafter = "models/specdraft-default.gguf";
/** A logit gap this small is a near tie whatever the two paths measured (see the header). */
const tieGap = 0.05;
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
    assert.deepEqual(filledBatched, filledAlone, "decodes of ≥ 2 tokens a sequence differ with M or the batch");

    const target = await NativeTarget.load({
        modelPath: drafter,
        contextSize: 1024,
        maxOutputs: n + 1,
        gpu: testGpu,
        threads: testThreads,
        flashAttention: "off",
        backendSampling: false,
    });
    t.after(() => target.dispose());
    let differing = 0;
    for (const drafts of [cpuDefault, filledAlone]) {
        for (const [i, draft] of drafts.entries()) {
            const [reference, context] = [plain[i], contexts[i]];
            assert.ok(reference && context, `point ${i}: drafted, but not in the plain run`);
            const at = reference.findIndex((token, j) => token !== draft[j]);
            if (at < 0) continue;
            differing++;
            const [expected, got] = [reference[at], draft[at]];
            assert.ok(expected !== undefined && got !== undefined, `point ${i}: drafts of different lengths`);
            const { gap, disagreement } = await target.logitGap(context, reference.slice(0, at), expected, got);
            assert.ok(
                gap <= 2 * disagreement || gap < tieGap,
                `point ${i}, position ${at}: ${expected} vs ${got} with a logit gap of ${gap} against a disagreement of ${disagreement}`,
            );
        }
    }
    // most are identical: a difference needs a near tie where the two paths' rounding parts
    assert.ok(differing <= points / 4, `${differing} of ${2 * points} drafts differ`);
});
