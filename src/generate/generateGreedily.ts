/**
 * One greedy generation of one prompt by the target alone through the native target (the baseline), as a
 * GenerationRun, and the TimedTokenPredictor every draft source is wrapped in, so all of them report the time spent
 * waiting for drafts the same way.
 */
import { type LlamaContextSequence, type SequenceEvaluateOptions, type Token, TokenPredictor } from "node-llama-cpp";
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
     * reset() for a predictor that drafts from the state tokens alone: the native target has no node-llama-cpp
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

/** The target alone through the native target: the baseline speculative runs are measured against. */
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
