// generate's promise, checked on a summary: every prompt's speculative run equals its target-alone run.
import assert from "node:assert/strict";
import type { GenerateSummary } from "../../src/generate/types.js";
import { defined } from "./defined.js";

/** Every prompt generated something, and its first speculative run equals its first target-alone run. */
export function assertLossless(summary: GenerateSummary): void {
    for (const prompt of summary.prompts) {
        assert.equal(prompt.identical, true, `prompt ${prompt.id}: ${JSON.stringify(prompt.firstDifference)}`);
        const alone = defined(prompt.alone[0], `prompt ${prompt.id}'s target-alone run`);
        assert.ok(alone.tokens.length > 0, `prompt ${prompt.id} generated nothing`);
        assert.deepEqual(defined(prompt.speculative[0], `prompt ${prompt.id}'s speculative run`).tokens, alone.tokens);
    }
    assert.equal(summary.identical, true);
    assert.equal(summary.speculative.tokens, summary.alone.tokens);
}
