/**
 * One greedy generation of one prompt by the target, through node-llama-cpp: alone (the baseline), with specdraft's
 * exact verifier, or through the library's own speculative path; each returns a GenerationRun. Every draft source is
 * wrapped in a TimedTokenPredictor, so all of them report the time spent waiting for drafts the same way.
 */
import {
    type ControlledEvaluateInputItem,
    type LlamaContextSequence,
    type SequenceEvaluateOptions,
    type Token,
    TokenPredictor,
} from "node-llama-cpp";
import type { StateOnlyTokenPredictor } from "./StateTokenPredictor.js";
import type { GenerationRun } from "./types.js";

/**
 * Wraps any TokenPredictor and measures how long generation waits for its drafts, so every draft source reports a
 * draft time share the same way.
 */
export class TimedTokenPredictor<Inner extends TokenPredictor = TokenPredictor> extends TokenPredictor {
    private readonly inner: Inner;
    private waitedMs = 0;

    constructor(inner: Inner) {
        super();
        this.inner = inner;
    }

    /** Seconds spent inside `predictTokens()` (including awaiting its promise). */
    get waitedSeconds(): number {
        return this.waitedMs / 1000;
    }

    reset(params: {
        targetSequence: LlamaContextSequence;
        stateTokens: Token[];
        evaluateOptions: Readonly<SequenceEvaluateOptions>;
    }): Promise<void> | void {
        return this.inner.reset(params);
    }

    /**
     * reset() for a predictor that drafts from the state tokens alone: the native verifier has no node-llama-cpp
     * sequence to give, and only such predictors can be reset without one.
     */
    resetState(this: TimedTokenPredictor<StateOnlyTokenPredictor>, stateTokens: Token[]): Promise<void> | void {
        return this.inner.reset({ stateTokens });
    }

    pushTokens(tokens: Token[]): void {
        this.inner.pushTokens(tokens);
    }

    predictTokens(): Promise<Token[]> | Token[] {
        const started = performance.now();
        const result = this.inner.predictTokens();
        if (Array.isArray(result)) {
            this.waitedMs += performance.now() - started;
            return result;
        }
        return result.finally(() => {
            this.waitedMs += performance.now() - started;
        });
    }

    override stop(untilPredictionsExhausted?: boolean): Promise<void> | void {
        return this.inner.stop(untilPredictionsExhausted);
    }

    override updateInputTokens(tokens: Token[]): void {
        this.inner.updateInputTokens(tokens);
    }

    override dispose(): Promise<void> | void {
        return this.inner.dispose();
    }
}

// The baseline: the target generating greedily by itself, one token per decode, through node-llama-cpp.

/**
 * Generates up to `maxTokens` greedy tokens after `prompt` on `sequence` (a sequence without a token predictor).
 * The sequence's history is cleared first, so every run evaluates its prompt from scratch.
 */
export async function generateAlone(
    sequence: LlamaContextSequence,
    prompt: readonly number[],
    maxTokens: number,
): Promise<GenerationRun> {
    await sequence.clearHistory();
    const { tokens, seconds } = await evaluateGreedily(sequence, prompt, maxTokens);
    return { tokens, seconds, targetSteps: tokens.length, drafted: 0, accepted: 0, draftSeconds: 0 };
}

/**
 * Up to `maxTokens` greedy tokens after `prompt` through `sequence.evaluate()` (with the sequence's own token
 * predictor, if it has one), and the seconds they took, prompt evaluation included.
 */
async function evaluateGreedily(
    sequence: LlamaContextSequence,
    prompt: readonly number[],
    maxTokens: number,
): Promise<{ tokens: number[]; seconds: number }> {
    const tokens: number[] = [];
    const started = performance.now();
    for await (const token of sequence.evaluate(prompt.slice() as Token[], { temperature: 0 })) {
        tokens.push(token);
        if (tokens.length >= maxTokens) break;
    }
    return { tokens, seconds: (performance.now() - started) / 1000 };
}

// Speculative generation with specdraft's own verification loop over node-llama-cpp's public API, driving any
// TokenPredictor the way the library does (reset → predictTokens → pushTokens), but accepting whole draft prefixes:
//
//   one target step = controlledEvaluate([pending…, last, d1 … dk]) with greedy next-token output at last, d1 … dk
//   → o0 … ok; accept d1 … da while d(j+1) = oj; the step yields o0 … oa (a accepted + 1 of the target's own);
//   the KV cells of the rejected drafts d(a+1) … dk are erased.
//
// Greedy verification keeps exactly the tokens the target alone would produce, up to numerical differences between
// a batched decode and one-token decodes (which is what the equality check after every run is there to catch).

const greedyNext = { generateNext: { token: true, options: { temperature: 0 } } } as const;

/**
 * The tokens one verify step yields, for the exact verifiers alike: the drafts while each equals the target's greedy
 * token before it (`outputAt(j)`: the target's token after the last verified token, j = 0, or after draft j − 1),
 * then the target's own token at the first disagreement or after the last draft. `missing(j)` is the error when the
 * target gave no token at position j.
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
 * Generates up to `maxTokens` greedy tokens after `prompt` on `sequence` (a sequence without a token predictor of its
 * own), taking at most `draftLength` draft tokens per step from `predictor`.
 */
export async function generateWithExactVerifier(
    sequence: LlamaContextSequence,
    predictor: TimedTokenPredictor,
    prompt: readonly number[],
    maxTokens: number,
    draftLength: number,
): Promise<GenerationRun> {
    await sequence.clearHistory();
    const model = sequence.model;
    const contextSize = sequence.contextSize;
    const waitedBefore = predictor.waitedSeconds;
    const tokens: number[] = [];
    let targetSteps = 0;
    let drafted = 0;
    let accepted = 0;
    const started = performance.now();

    predictor.updateInputTokens(prompt.slice() as Token[]);
    await predictor.reset({
        targetSequence: sequence,
        stateTokens: prompt.slice() as Token[],
        evaluateOptions: { temperature: 0 },
    });
    // tokens not yet in the target's KV cache; the last one is the one whose next token we need
    let pending: Token[] = prompt.slice() as Token[];
    try {
        while (tokens.length < maxTokens) {
            // room for pending + drafts within the context (the library likewise never lets drafts cause a context shift)
            const room = contextSize - sequence.nextTokenIndex - pending.length - 1;
            if (room < 0) break;
            const drafts = (await predictor.predictTokens()).slice(0, Math.min(draftLength, room));
            const input: ControlledEvaluateInputItem[] = pending.slice(0, -1);
            for (const token of [...pending.slice(-1), ...drafts]) input.push([token, greedyNext]);
            const outputs = await sequence.controlledEvaluate(input);
            drafted += drafts.length;

            const base = pending.length - 1;
            const stepTokens = acceptDrafts(
                drafts,
                (j) => outputs[base + j]?.next.token ?? undefined,
                (j) => new Error(`the target produced no token at draft position ${j}`),
            ) as Token[];
            const stepAccepted = stepTokens.length - 1;
            accepted += stepAccepted;
            const rejected = drafts.length - stepAccepted;
            if (rejected > 0)
                await sequence.eraseContextTokenRanges([
                    { start: sequence.nextTokenIndex - rejected, end: sequence.nextTokenIndex },
                ]);

            const before = tokens.length;
            const over = appendStepTokens(tokens, stepTokens, (token) => model.isEogToken(token as Token), maxTokens);
            if (tokens.length > before) targetSteps++; // appendStepTokens says why a step that only ends counts not
            if (over) break;
            predictor.pushTokens(stepTokens);
            pending = stepTokens.slice(-1);
        }
    } finally {
        await predictor.stop();
    }
    const seconds = (performance.now() - started) / 1000;
    return { tokens, seconds, targetSteps, drafted, accepted, draftSeconds: predictor.waitedSeconds - waitedBefore };
}

// Speculative generation through node-llama-cpp's own path: `sequence.evaluate()` on a sequence created with a
// `tokenPredictor`; the library asks the predictor for drafts, verifies them in its decode and keeps the matches.
//
// Caveat (node-llama-cpp 3.21.1, also on its main branch): `_speculativeEvaluate` compares a draft token at batch
// position i ≥ 2 with `validatedTokens.at(-1)`, an array it never fills, so only the first draft token of each step
// can be accepted and τ ≤ 2 for any drafter. Use the `exact` verifier (generateWithExactVerifier) to measure drafters.

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
    const { tokens, seconds } = await evaluateGreedily(sequence, prompt, maxTokens);
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
