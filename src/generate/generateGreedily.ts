/**
 * One greedy generation of one prompt by the target alone (the baseline: through node-llama-cpp or the native target),
 * the node-llama-cpp sequence that generateSpeculatively's loop verifies with (exact-node-llama-cpp), and the library's
 * own speculative path; each gives a GenerationRun. Every draft source is wrapped in a TimedTokenPredictor, so all of
 * them report the time spent waiting for drafts the same way.
 */
import {
    type ControlledEvaluateInputItem,
    type LlamaContextSequence,
    type SequenceEvaluateOptions,
    type Token,
    TokenPredictor,
} from "node-llama-cpp";
import type { SpeculativeTarget } from "./generateSpeculatively.js";
import type { NativeTarget } from "./NativeTarget.js";
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

// The exact-node-llama-cpp verifier's target: a node-llama-cpp sequence driven by generateSpeculatively's loop.

const greedyNext = { generateNext: { token: true, options: { temperature: 0 } } } as const;

/**
 * `sequence` (one without a token predictor of its own) as the verification loop's target: verify() erases its cache
 * past `keep` (all of it at 0) and scores the tokens in one `controlledEvaluate`, a greedy next token asked at each of
 * tokens[outputFrom..]. node-llama-cpp copies every asked position's logits to the host and samples each in its own
 * call; the native target (NativeTarget) takes the argmax inside llama.cpp's graph instead.
 */
export function llamaSequenceTarget(sequence: LlamaContextSequence): SpeculativeTarget {
    const model = sequence.model;
    return {
        contextSize: sequence.contextSize,
        maxOutputs: sequence.context.batchSize,
        isEog: (token) => model.isEogToken(token as Token),
        async verify(tokens, keep, outputFrom) {
            const cached = sequence.nextTokenIndex;
            if (keep > cached) throw new RangeError(`verify: keep ${keep}: expected 0 ≤ keep ≤ ${cached}`);
            if (keep === 0) await sequence.clearHistory();
            else if (keep < cached) await sequence.eraseContextTokenRanges([{ start: keep, end: cached }]);
            const input: ControlledEvaluateInputItem[] = tokens.map((token, i) =>
                i < outputFrom ? (token as Token) : [token as Token, greedyNext],
            );
            const outputs = await sequence.controlledEvaluate(input);
            return tokens.slice(outputFrom).map((_, j) => {
                const token = outputs[outputFrom + j]?.next.token;
                if (token == null) throw new Error(`the target produced no token at position ${outputFrom + j}`);
                return token;
            });
        },
    };
}

/** The target alone through the native target: the baseline of the native verifier. */
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

// Speculative generation through node-llama-cpp's own path: `sequence.evaluate()` on a sequence created with a
// `tokenPredictor`; the library asks the predictor for drafts, verifies them in its decode and keeps the matches.
//
// Caveat (node-llama-cpp 3.21.1, also on its main branch): `_speculativeEvaluate` compares a draft token at batch
// position i ≥ 2 with `validatedTokens.at(-1)`, an array it never fills, so only the first draft token of each step
// can be accepted and τ ≤ 2 for any drafter. Use the `exact` verifier (generateSpeculatively) to measure drafters.
// Its first decode also holds the prompt together with the first drafts, so the prompt's KV is not the target alone's
// (the library decides its decodes: generate neither changes them nor can replay them).

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
