/**
 * Speculative generation with the target in specdraft's native addon (NativeTarget): the same verification as
 * generateWithExactVerifier, step for step, but each step is ONE native call with one llama_decode whose greedy token
 * at every position is computed in llama.cpp's graph and read back together:
 *
 *   one target step = verify([pending…, last, d1 … dk], keep = cached) → o0 … ok (greedy after last, d1 … dk);
 *   accept d1 … da while d(j+1) = oj; the step yields o0 … oa; the KV cells of the rejected d(a+1) … dk are dropped by
 *   the next step's `keep`.
 *
 * The drafts come from a TokenPredictor driven the library's way (reset → predictTokens → pushTokens) that reads only
 * the state tokens, never the target sequence node-llama-cpp would pass it (StateOnlyTokenPredictor: a specdraft
 * server, a draft model in lock-step, the native drafter, prompt lookup): there is no node-llama-cpp sequence here.
 */
import type { Token } from "node-llama-cpp";
import { acceptDrafts, appendStepTokens, type TimedTokenPredictor } from "./generateGreedily.js";
import type { NativeTarget } from "./NativeTarget.js";
import type { StateOnlyTokenPredictor } from "./StateTokenPredictor.js";
import type { GenerationRun } from "./types.js";

/**
 * Generates up to `maxTokens` greedy tokens after `prompt` on `target` (its cache is reset), taking at most
 * `draftLength` draft tokens per step from `predictor` (and at most target.maxOutputs − 1).
 */
export async function generateWithNativeVerifier(
    target: NativeTarget,
    predictor: TimedTokenPredictor<StateOnlyTokenPredictor>,
    prompt: readonly number[],
    maxTokens: number,
    draftLength: number,
): Promise<GenerationRun> {
    const waitedBefore = predictor.waitedSeconds;
    const tokens: number[] = [];
    let targetSteps = 0;
    let drafted = 0;
    let accepted = 0;
    const started = performance.now();

    predictor.updateInputTokens(prompt.slice() as Token[]);
    await predictor.resetState(prompt.slice() as Token[]);
    // tokens not yet in the target's KV cache; the last one is the one whose next token we need
    let pending: number[] = prompt.slice();
    // tokens of the cache to keep: everything verified (the first step starts from an empty cache)
    let keep = 0;
    try {
        while (tokens.length < maxTokens) {
            // room for pending + drafts within the context, as the exact verifier leaves it
            const room = target.contextSize - keep - pending.length - 1;
            if (room < 0) break;
            const limit = Math.min(draftLength, room, target.maxOutputs - 1);
            const drafts = (await predictor.predictTokens()).slice(0, limit) as number[];
            const outputs = await target.verify([...pending, ...drafts], keep, pending.length - 1);
            drafted += drafts.length;

            const stepTokens = acceptDrafts(
                drafts,
                (j) => outputs[j],
                () => new Error(`native verify returned ${outputs.length} tokens for ${drafts.length} drafts`),
            );
            const stepAccepted = stepTokens.length - 1;
            accepted += stepAccepted;
            // verified: pending and the accepted drafts; the rejected ones are trimmed by the next verify
            keep += pending.length + stepAccepted;

            const before = tokens.length;
            const over = appendStepTokens(tokens, stepTokens, (token) => target.eogIds.has(token), maxTokens);
            if (tokens.length > before) targetSteps++; // appendStepTokens says why a step that only ends counts not
            if (over) break;
            predictor.pushTokens(stepTokens as Token[]);
            pending = stepTokens.slice(-1); // the target's own token: never empty
        }
    } finally {
        await predictor.stop();
    }
    const seconds = (performance.now() - started) / 1000;
    return { tokens, seconds, targetSteps, drafted, accepted, draftSeconds: predictor.waitedSeconds - waitedBefore };
}

/** The target alone through the same native target: the baseline the native verifier is compared with. */
export async function generateAloneNative(
    target: NativeTarget,
    prompt: readonly number[],
    maxTokens: number,
): Promise<GenerationRun> {
    const started = performance.now();
    const tokens = await target.generate(prompt, maxTokens);
    const seconds = (performance.now() - started) / 1000;
    return { tokens, seconds, targetSteps: tokens.length, drafted: 0, accepted: 0, draftSeconds: 0 };
}
