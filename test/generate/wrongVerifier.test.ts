/**
 * The control for generate's near-tie rule: the rule lets outputs part at a near tie (decode shapes round a row
 * differently), so it must still fail a real divergence. A verifier that keeps a draft token the target did not choose,
 * and one that keeps a rejected draft's KV cell, both wrapped around the real native target (the tiny Qwen3 fixture on
 * the CPU), part from the target alone; replaying the difference on the same target calls neither a near tie, and the
 * run's verdict is a failure naming why.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { Token } from "node-llama-cpp";
import { generateAloneNative, TimedTokenPredictor } from "../../src/generate/generateGreedily.js";
import { generateSpeculatively, type SpeculativeTarget } from "../../src/generate/generateSpeculatively.js";
import { NativeTarget } from "../../src/generate/NativeTarget.js";
import { replayDifference } from "../../src/generate/replayDifference.js";
import { StateTokenPredictor } from "../../src/generate/StateTokenPredictor.js";
import { comparePromptRuns, judgeDifferences, summarizeGeneration } from "../../src/generate/summarizeGeneration.js";
import type { GenerateSummary, PromptResult } from "../../src/generate/types.js";
import { targetModel, testThreads } from "./testModels.js";

const prompt = [785, 3974, 1876, 3835, 3420, 916, 279, 1567, 562, 13, 785, 3974, 1876];
const maxTokens = 24;
const draftLength = 4;

/** A drafter that is always wrong in the same way: k copies of a token the target never continues these prompts with. */
class WrongDrafter extends StateTokenPredictor {
    predictTokens(): Token[] {
        const last = this.stateTokens.at(-1) ?? 0;
        return Array.from({ length: draftLength }, () => ((last + 7) % 1000) as Token);
    }
}

let target: NativeTarget;
before(async () => {
    target = await NativeTarget.load({
        modelPath: targetModel,
        contextSize: 256,
        maxOutputs: draftLength + 1,
        gpu: "cpu",
        threads: testThreads,
    });
});
after(() => target.dispose());

/** The target with its verify bent by `bend` (the outputs, or the cells kept). */
function bent(
    bend: (call: { tokens: readonly number[]; keep: number; outputFrom: number }) => {
        keep?: number;
        outputs?: (outputs: number[]) => number[];
    },
): SpeculativeTarget {
    return {
        contextSize: target.contextSize,
        maxOutputs: target.maxOutputs,
        isEog: (token) => target.isEog(token),
        verify: async (tokens, keep, outputFrom) => {
            const change = bend({ tokens, keep, outputFrom });
            const outputs = await target.verify(tokens, change.keep ?? keep, outputFrom);
            return change.outputs?.(outputs) ?? outputs;
        },
    };
}

/** What generate concludes from one prompt's runs: the summary and its verdict. */
async function judge(verifier: SpeculativeTarget): Promise<{ result: PromptResult; failure?: string }> {
    const alone = await generateAloneNative(target, prompt, maxTokens);
    const predictor = new TimedTokenPredictor(new WrongDrafter());
    const { run, calls } = await generateSpeculatively(verifier, predictor, prompt, maxTokens, draftLength);
    const result = comparePromptRuns("p", undefined, prompt.length, [alone], [run]);
    const d = result.firstDifference;
    if (d !== undefined) Object.assign(d, await replayDifference(target, prompt, alone.tokens, calls, d));
    const summary: GenerateSummary = summarizeGeneration([result], {
        target: { path: targetModel, vocabFingerprint: "", quantization: "" },
        draft: { kind: "model", source: "wrong", vocabFingerprint: "", quantization: "" },
        verifier: "exact",
        settings: { maxTokens, draftLength, runs: 1, warmup: 0, gpu: "cpu", contextSize: 256, threads: testThreads },
        warnings: [],
    });
    return { result, failure: judgeDifferences(summary).failure };
}

test("the honest verifier with an always-wrong drafter keeps the target's tokens", async () => {
    const { result, failure } = await judge(target);
    assert.equal(result.identical, true, JSON.stringify(result.firstDifference));
    assert.equal(failure, undefined);
});

test("a verifier that keeps a draft token the target rejected fails: its replay gives the target's token back", async () => {
    let lied = false;
    const keepsFirstDraft = bent(({ tokens, outputFrom }) => ({
        // after the prompt's step, once: the target's first output replaced by the first draft (accepted as if agreed)
        outputs: (outputs) => {
            const draft = tokens[outputFrom + 1];
            if (lied || draft === undefined) return outputs;
            lied = true;
            return [draft, ...outputs.slice(1)];
        },
    }));
    const { result, failure } = await judge(keepsFirstDraft);
    assert.ok(lied);
    const d = result.firstDifference;
    assert.equal(result.identical, false);
    assert.equal(d?.nearTie, false, JSON.stringify(d));
    assert.notEqual(d?.replayedTokens?.speculative, d?.actual, "the replay does not choose the kept draft");
    assert.match(failure ?? "", /output mismatch: .*not a near tie: decoded again in the same shapes/);
});

test("a verifier that keeps a rejected draft's KV cell fails: the replay finds the cache held another token", async () => {
    let steps = 0;
    // the third step keeps one cell more than was verified: the previous step's first rejected draft stays in the cache
    const keepsRejected = bent(({ keep }) => (++steps === 3 ? { keep: keep + 1 } : {}));
    const { result, failure } = await judge(keepsRejected);
    const d = result.firstDifference;
    assert.equal(result.identical, false, "a wrong cell in the cache changes the target's next tokens");
    assert.equal(d?.nearTie, false, JSON.stringify(d));
    assert.match(failure ?? "", /not a near tie/);
});
