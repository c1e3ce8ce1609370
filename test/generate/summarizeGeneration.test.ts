/** The lossless check: each speculative run against the target-alone run of the same round, and the failure line. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { comparePromptRuns, describeMismatch, firstDifference } from "../../src/generate/summarizeGeneration.js";
import type { GenerationRun } from "../../src/generate/types.js";

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
