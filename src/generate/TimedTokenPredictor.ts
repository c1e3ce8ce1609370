/**
 * Wraps any TokenPredictor and measures how long generation waits for its drafts, so every draft source reports a
 * draft time share the same way.
 */
import { type LlamaContextSequence, type SequenceEvaluateOptions, type Token, TokenPredictor } from "node-llama-cpp";

export class TimedTokenPredictor extends TokenPredictor {
    private readonly inner: TokenPredictor;
    private waitedMs = 0;

    constructor(inner: TokenPredictor) {
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
