// generate's promise, checked on a summary: every prompt's speculative run equals its target-alone run, or parts from it
// only at a near tie that generate replayed and named (docs/generate.md, "Lossless"). The two runs decode the target in
// other shapes (one token a decode alone, k + 1 a step with drafts), and which near ties flip depends on the CPU's
// kernels, so equality is not the promise; a wrong verifier or cache parts where the replay does not reproduce it.
import assert from "node:assert/strict";
import { describeMismatch, judgeDifferences } from "../../src/generate/summarizeGeneration.js";
import type { GenerateSummary } from "../../src/generate/types.js";
import { defined } from "./defined.js";

/** Prompts that may part at near ties, as a share of all (at least one): ties are rare, a systematic error is not. */
export const maxNearTieShare = 0.25;

/**
 * Every prompt generated something; its first speculative run equals its first target-alone run, or parts at a near
 * tie whose replay reproduced both tokens within the decode shapes' disagreement; at most maxNearTieShare part.
 * Returns the number of prompts that parted.
 */
export function assertLossless(summary: GenerateSummary<string>): number {
    const { failure } = judgeDifferences(summary);
    assert.equal(failure, undefined);
    let parted = 0;
    for (const prompt of summary.prompts) {
        const alone = defined(prompt.alone[0], `prompt ${prompt.id}'s target-alone run`);
        assert.ok(alone.tokens.length > 0, `prompt ${prompt.id} generated nothing`);
        const speculative = defined(prompt.speculative[0], `prompt ${prompt.id}'s speculative run`);
        if (prompt.identical) {
            assert.deepEqual(speculative.tokens, alone.tokens);
            continue;
        }
        parted++;
        const d = defined(prompt.firstDifference, `prompt ${prompt.id}'s first difference`);
        assert.ok(d.nearTie === true && d.replayedTokens !== undefined, describeMismatch(prompt));
        const [gap, other, disagreement] = [
            d.logitGap ?? Number.NaN,
            d.speculativeLogitGap ?? Number.NaN,
            d.kernelDisagreement ?? Number.NaN,
        ];
        assert.ok(gap >= 0 && other >= 0 && gap + other <= 2 * disagreement, describeMismatch(prompt));
        assert.deepEqual(speculative.tokens.slice(0, d.position), alone.tokens.slice(0, d.position));
    }
    assert.equal(summary.nearTies, parted);
    assert.equal(summary.identical, parted === 0);
    const allowed = Math.max(1, Math.floor(maxNearTieShare * summary.prompts.length));
    assert.ok(parted <= allowed, `${parted} of ${summary.prompts.length} prompts parted at near ties`);
    if (parted === 0) assert.equal(summary.speculative.tokens, summary.alone.tokens);
    return parted;
}
