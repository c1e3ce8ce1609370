/** The lossless check: each speculative run against the target-alone run of the same round, and the failure line. */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
    comparePromptRuns,
    describeMismatch,
    firstDifference,
    judgeDifferences,
    summarizeGeneration,
} from "../../src/generate/summarizeGeneration.js";
import type { GenerateSummary, GenerationRun, PromptResult } from "../../src/generate/types.js";

function run(tokens: number[]): GenerationRun {
    return { tokens, seconds: 1, targetSteps: tokens.length, drafted: 0, accepted: 0, draftSeconds: 0 };
}

test("firstDifference: the first differing index, a missing token as null, undefined when equal", () => {
    assert.equal(firstDifference([1, 2, 3], [1, 2, 3]), undefined);
    assert.deepEqual(firstDifference([1, 2, 3], [1, 5, 3]), { position: 1, expected: 2, actual: 5 });
    assert.deepEqual(firstDifference([1, 2, 3], [1, 2]), { position: 2, expected: 3, actual: null });
    assert.deepEqual(firstDifference([1], [1, 4]), { position: 1, expected: null, actual: 4 });
});

test("identical runs: no difference and no mismatch line", () => {
    const result = comparePromptRuns("p", "code", 3, [run([1, 2]), run([1, 2])], [run([1, 2]), run([1, 2])]);
    assert.equal(result.identical, true);
    assert.equal(result.firstDifference, undefined);
    assert.equal(result.category, "code");
    assert.equal(describeMismatch(result), undefined);
});

test("a differing second run is named with its round and first differing position", () => {
    const result = comparePromptRuns(
        "p",
        undefined,
        3,
        [run([1, 2, 3]), run([1, 2, 3])],
        [run([1, 2, 3]), run([1, 2, 9, 4])],
    );
    assert.equal(result.identical, false);
    assert.deepEqual(result.firstDifference, { run: 1, position: 2, expected: 3, actual: 9 });
    assert.equal(
        describeMismatch(result),
        'output mismatch: prompt "p", run 2: speculative output differs from the target alone at position 2 (expected token 3, found 9)',
    );
});

test("a difference at a near tie warns, naming both runs' gaps and their disagreement; any other fails, and says why", () => {
    const parted = (id: string, logitGap?: number, nearTie?: boolean): PromptResult => {
        const result = comparePromptRuns(id, undefined, 3, [run([1, 2, 3])], [run([1, 2, 9])]);
        if (result.firstDifference && logitGap !== undefined)
            Object.assign(result.firstDifference, {
                logitGap,
                speculativeLogitGap: 0.0001,
                kernelDisagreement: 0.002,
                replayedTokens: { alone: 3, speculative: nearTie ? 9 : 3 },
                nearTie,
            });
        return result;
    };
    const same = comparePromptRuns("same", undefined, 3, [run([1, 2])], [run([1, 2])]);
    const about = {
        target: { path: "t.gguf", vocabFingerprint: "x", quantization: "Q8_0" },
        draft: { kind: "ngram", source: "prompt lookup" },
        verifier: "exact",
        settings: { maxTokens: 3, draftLength: 2, runs: 1, gpu: "cuda", contextSize: 16 },
        warnings: [],
    } satisfies Pick<GenerateSummary, "target" | "draft" | "verifier" | "settings" | "warnings">;

    const tie = summarizeGeneration([same, parted("tie", 0.0004, true)], about);
    assert.equal(tie.identical, false);
    assert.equal(tie.nearTies, 1);
    const judged = judgeDifferences(tie);
    assert.equal(judged.failure, undefined, "a near tie alone does not fail the run");
    assert.equal(judged.warnings.length, 1);
    assert.match(
        judged.warnings[0] ?? "",
        /warning: output mismatch: prompt "tie", .*at position 2 \(expected token 3, found 9; a near tie: logit\[expected\] − logit\[found\] is \+0\.00040 as the target alone computed it and -0\.00010 as the speculative run did; their logits differ by up to 0\.0020\)/,
    );

    const real = summarizeGeneration([parted("tie", 0.0004, true), parted("bug", 3.5, false)], about);
    assert.equal(real.nearTies, 1);
    assert.match(
        judgeDifferences(real).failure ?? "",
        /prompt "bug", .*not a near tie: decoded again in the same shapes, the target alone gives token 3 and the speculative run 3 there \(.*is \+3\.5 .*0\.0020\)\)/,
    );
    // the speculative run's cache held another token: a fault of speculation, named
    const otherContext = parted("cache");
    Object.assign(otherContext.firstDifference ?? {}, {
        otherContext: { position: 4, expected: 1, found: 7 },
        nearTie: false,
    });
    assert.match(
        judgeDifferences(summarizeGeneration([otherContext], about)).failure ?? "",
        /prompt "cache", .*not a near tie: the speculative run's cache held token 7 at context position 4 where the target alone had 1\)/,
    );
    // nothing replayed (bench/libraryVerifiers.ts's node-llama-cpp verifier): a failure
    assert.match(judgeDifferences(summarizeGeneration([parted("unknown")], about)).failure ?? "", /prompt "unknown"/);
    assert.deepEqual(judgeDifferences(summarizeGeneration([same], about)), { warnings: [] });
});

test("the native target's calls are summed over a mode's runs, and left out where a run did not record them", () => {
    const stats = (decodes: number) => ({
        decodes,
        tokens: 2 * decodes,
        submitMs: 1,
        waitMs: 2,
        readMs: 0.5,
        graphsReused: decodes - 1,
    });
    const alone = [
        { ...run([1, 2]), target: stats(2) },
        { ...run([1, 2]), target: stats(3) },
    ];
    const prompts = [comparePromptRuns("p", undefined, 3, alone, [run([1, 2]), { ...run([1, 2]), target: stats(1) }])];
    const summary = summarizeGeneration(prompts, {
        target: { path: "t.gguf", vocabFingerprint: "x", quantization: "Q8_0" },
        draft: { kind: "ngram", source: "prompt lookup" },
        verifier: "exact",
        settings: { maxTokens: 3, draftLength: 2, runs: 2, gpu: "cpu", contextSize: 16 },
        warnings: [],
    });
    assert.deepEqual(summary.alone.target, {
        decodes: 5,
        tokens: 10,
        submitMs: 2,
        waitMs: 4,
        readMs: 1,
        graphsReused: 3,
    });
    assert.equal(summary.speculative.target, undefined); // one speculative run recorded none
});
