/**
 * Speculative generation with specdraft's own verification loop: the target is a SpeculativeTarget (NativeTarget; the
 * bench's node-llama-cpp sequence, bench/libraryVerifiers/nodeLlamaCppGeneration.ts), the drafts come from a
 * TokenPredictor driven the library's way (reset → predictTokens → pushTokens) that reads only the tokens so far:
 *
 *   the first step decodes the prompt alone, as the target alone does (llama.cpp's CPU kernels compute a row
 *   differently by the shape of the decode it is in, so a prompt decoded together with drafts leaves other KV);
 *   every later step = verify([pending, d1 … dk], keep = the verified tokens) → o0 … ok (greedy after pending, d1 … dk);
 *   accept d1 … da while d(j+1) = oj; the step yields o0 … oa; the rejected d(a+1) … dk are dropped by the next `keep`.
 *
 * Greedy verification keeps exactly the tokens the target alone would produce, up to the numbers llama.cpp computes
 * for other decode shapes (which the equality check after every run is there to catch; the run's calls are returned
 * so that a difference can be replayed, summarizeGeneration.ts and replayDifference.ts).
 */
import type { Token } from "node-llama-cpp";
import type { TimedTokenPredictor } from "./generateGreedily.js";
import type { StateOnlyTokenPredictor } from "./StateTokenPredictor.js";
import type { GenerationRun, TargetCall } from "./types.js";

/** What the verification loop needs of a target model holding one sequence. */
export interface SpeculativeTarget {
    /** Tokens the sequence holds. */
    readonly contextSize: number;
    /** Greedy outputs one verify call may ask for. */
    readonly maxOutputs: number;
    /** Whether `token` ends the output. */
    isEog(token: number): boolean;
    /**
     * Keeps the first `keep` cached tokens, decodes `tokens` after them and returns the greedy next token after each of
     * tokens[outputFrom..].
     */
    verify(tokens: readonly number[], keep: number, outputFrom: number): Promise<number[]>;
}

/** A speculative generation and the target calls that made it. */
export interface SpeculativeRun {
    run: GenerationRun;
    calls: TargetCall[];
}

/**
 * The tokens one verify step yields: the drafts while each equals the target's greedy token before it (`outputAt(j)`:
 * the target's token after the last verified token, j = 0, or after draft j − 1), then the target's own token at the
 * first disagreement or after the last draft. `missing(j)` is the error when the target gave no token at position j.
 */
export function acceptDrafts(
    drafts: readonly number[],
    outputAt: (j: number) => number | undefined,
    missing: (j: number) => Error,
): number[] {
    const stepTokens: number[] = [];
    for (let j = 0; j <= drafts.length; j++) {
        const next = outputAt(j);
        if (next === undefined) throw missing(j);
        stepTokens.push(next);
        if (j === drafts.length || drafts[j] !== next) break;
    }
    return stepTokens;
}

/**
 * Appends a step's tokens to the output as sequence.evaluate() would: an end-of-generation token ends the output
 * and is not part of it, and the output stops at `maxTokens`. Returns whether the generation is over. A step that
 * appends nothing (its first token the end token) is not counted as a target step, as the target alone counts none
 * for its end token: every counted step then yields a token, and τ = tokens ÷ steps is never below 1.
 */
export function appendStepTokens(
    tokens: number[],
    stepTokens: readonly number[],
    isEog: (token: number) => boolean,
    maxTokens: number,
): boolean {
    for (const token of stepTokens) {
        if (isEog(token) || tokens.length >= maxTokens) return true;
        tokens.push(token);
    }
    return tokens.length >= maxTokens;
}

/**
 * Generates up to `maxTokens` greedy tokens after `prompt` on `target` (its cache is dropped first), taking at most
 * `draftLength` draft tokens per step from `predictor` (and at most target.maxOutputs − 1).
 */
export async function generateSpeculatively(
    target: SpeculativeTarget,
    predictor: TimedTokenPredictor<StateOnlyTokenPredictor>,
    prompt: readonly number[],
    maxTokens: number,
    draftLength: number,
): Promise<SpeculativeRun> {
    const waitedBefore = predictor.waitedSeconds;
    const tokens: number[] = [];
    const calls: TargetCall[] = [];
    let targetSteps = 0;
    let drafted = 0;
    let accepted = 0;
    const started = performance.now();

    predictor.updateInputTokens(prompt.slice() as Token[]);
    await predictor.resetState(prompt.slice() as Token[]);
    // tokens not yet in the target's KV cache; the last one is the one whose next token we need
    let pending: number[] = prompt.slice();
    // tokens of the cache to keep: everything verified (the first step, the prompt's, starts from an empty cache)
    let keep = 0;
    try {
        while (tokens.length < maxTokens) {
            // room for pending + drafts within the context (as the library never lets drafts cause a context shift)
            const room = target.contextSize - keep - pending.length - 1;
            if (room < 0) break;
            // the prompt's step (an empty cache) takes no drafts
            const drafts =
                keep === 0
                    ? []
                    : ((await predictor.predictTokens()).slice(
                          0,
                          Math.min(draftLength, room, target.maxOutputs - 1),
                      ) as number[]);
            const call = { keep, tokens: [...pending, ...drafts], outputFrom: pending.length - 1 };
            calls.push(call);
            const outputs = await target.verify(call.tokens, call.keep, call.outputFrom);
            drafted += drafts.length;

            const stepTokens = acceptDrafts(
                drafts,
                (j) => outputs[j],
                () => new Error(`the target returned ${outputs.length} tokens for ${drafts.length} drafts`),
            );
            const stepAccepted = stepTokens.length - 1;
            accepted += stepAccepted;
            // verified: pending and the accepted drafts; the rejected ones are trimmed by the next verify
            keep += pending.length + stepAccepted;

            const before = tokens.length;
            const over = appendStepTokens(tokens, stepTokens, (token) => target.isEog(token), maxTokens);
            if (tokens.length > before) targetSteps++; // appendStepTokens says why a step that only ends counts not
            if (over) break;
            predictor.pushTokens(stepTokens as Token[]);
            pending = stepTokens.slice(-1); // the target's own token: never empty
        }
    } finally {
        await predictor.stop();
    }
    const seconds = (performance.now() - started) / 1000;
    const draftSeconds = predictor.waitedSeconds - waitedBefore;
    return { run: { tokens, seconds, targetSteps, drafted, accepted, draftSeconds }, calls };
}
