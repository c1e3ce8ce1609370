/** Checks speculation was lossless for one prompt, and says where it was not. */
import type { GenerationRun, PromptResult } from "./types.js";

/** Each speculative run against the target-alone run of the same round. */
export function comparePromptRuns(
    id: string,
    category: string | undefined,
    promptLength: number,
    alone: GenerationRun[],
    speculative: GenerationRun[],
): PromptResult {
    const result: PromptResult = { id, promptLength, alone, speculative, identical: true };
    if (category !== undefined) result.category = category;
    for (let run = 0; run < speculative.length; run++) {
        const difference = firstDifference(alone[run].tokens, speculative[run].tokens);
        if (difference !== undefined) {
            result.identical = false;
            result.firstDifference = { run, ...difference };
            break;
        }
    }
    return result;
}

/** One line naming the prompt, the run and the first differing position; `undefined` when the outputs are identical. */
export function describeMismatch(prompt: PromptResult): string | undefined {
    const d = prompt.firstDifference;
    if (prompt.identical || d === undefined) return undefined;
    return (
        `output mismatch: prompt ${JSON.stringify(prompt.id)}, run ${d.run + 1}: speculative output differs from the target alone ` +
        `at position ${d.position} (expected token ${d.expected ?? "end of output"}, found ${d.actual ?? "end of output"})`
    );
}

/** The first index where `expected` and `actual` differ (a missing token counts as `null`), or `undefined` if equal. */
export function firstDifference(
    expected: readonly number[],
    actual: readonly number[],
): { position: number; expected: number | null; actual: number | null } | undefined {
    const length = Math.max(expected.length, actual.length);
    for (let i = 0; i < length; i++)
        if (expected[i] !== actual[i]) return { position: i, expected: expected[i] ?? null, actual: actual[i] ?? null };
    return undefined;
}
