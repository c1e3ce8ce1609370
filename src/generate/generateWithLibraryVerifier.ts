/**
 * Speculative generation through node-llama-cpp's own path: `sequence.evaluate()` on a sequence created with a
 * `tokenPredictor`; the library asks the predictor for drafts, verifies them in its decode and keeps the matches.
 *
 * Caveat (node-llama-cpp 3.21.1, also on its main branch): `_speculativeEvaluate` compares a draft token at batch
 * position i ≥ 2 with `validatedTokens.at(-1)`, an array it never fills, so only the first draft token of each step
 * can be accepted and τ ≤ 2 for any drafter. Use the `exact` verifier (generateWithExactVerifier) to measure drafters.
 */
import type { LlamaContextSequence, Token } from "node-llama-cpp";
import type { TimedTokenPredictor } from "./TimedTokenPredictor.js";
import type { GenerationRun } from "./types.js";

/**
 * Generates up to `maxTokens` greedy tokens after `prompt` on `sequence`, whose token predictor is `predictor`.
 * Counts come from the sequence's `tokenPredictions` (deltas over this run): each used prediction saved one decode.
 */
export async function generateWithLibraryVerifier(
    sequence: LlamaContextSequence,
    predictor: TimedTokenPredictor,
    prompt: readonly number[],
    maxTokens: number,
): Promise<GenerationRun> {
    await sequence.clearHistory();
    predictor.updateInputTokens(prompt.slice() as Token[]);
    const before = { ...sequence.tokenPredictions };
    const waitedBefore = predictor.waitedSeconds;
    const tokens: number[] = [];
    const started = performance.now();
    for await (const token of sequence.evaluate(prompt.slice() as Token[], { temperature: 0 })) {
        tokens.push(token);
        if (tokens.length >= maxTokens) break;
    }
    const seconds = (performance.now() - started) / 1000;
    const after = sequence.tokenPredictions;
    const used = after.used - before.used;
    return {
        tokens,
        seconds,
        targetSteps: tokens.length - used,
        drafted: after.validated - before.validated + (after.refuted - before.refuted),
        accepted: used,
        draftSeconds: predictor.waitedSeconds - waitedBefore,
    };
}
